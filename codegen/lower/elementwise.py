"""Elementwise ops: scalar/vector emitters for every elementwise op of the registry, and the loop nest that runs
them (single nodes, broadcast_to and fused elementwise regions).

ELEMENTWISE[op](builder, args, attrs, dtype) computes one op on register values that are all scalars or all
<W x T> vectors of the same width; `dtype` is the operands' dtype (for `where` that of x and y, for `cast` the
source dtype). Arithmetic carries no fast-math flags, so a fused chain of adds and multiplies rounds after every
op exactly as the numpy reference does. max/min/relu/clamp propagate NaN like numpy.maximum; comparisons are
ordered (ne unordered), so NaN compares like numpy. Transcendentals, atan2 and fmod are the vectorizable versions
of codegen.vecmath and its siblings in both float dtypes.

The kernels run on the elementwise loop nest (nest.py): the output shape iterated with every operand read through
broadcast strides.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import llvmlite.ir as ir
import numpy as np

from braze.ir.graph import Graph, Node, Value
from braze.ir.registry import get_op
from braze.ir.views import View, body_views, broadcast
from braze.ir.types import DType, float64, int32

from .. import vecmath
from ..vecmath_emit import VectorEmit, libm
from ..vecmath_atan import atan2
from ..vecmath_fmod import fmod
from ..vecmath_pow import pow64, powf
from ..loops import F32, vector_const
from .base import (Kernel, KernelContext, KernelSpec, Unfusable, begin_kernel, constant, intrinsic, lanes_of,
                   register, register_type, unsupported, widen)
from .lookup import Lookup, gather_lookup
from .nest import Operand, elementwise_nest, reads_rows

Emit = Callable[[ir.IRBuilder, Sequence[ir.Value], dict[str, Any], DType], ir.Value]
ELEMENTWISE: dict[str, Emit] = {}


def _emitter(*names: str) -> Callable[[Emit], Emit]:
    def wrap(fn: Emit) -> Emit:
        for name in names:
            ELEMENTWISE[name] = fn
        return fn
    return wrap


def _constant_like(value: ir.Value, number: float | int) -> ir.Constant:
    """A constant of value's type (scalar or vector) holding `number` in every lane."""
    typ = value.type
    element = typ.element if isinstance(typ, ir.VectorType) else typ
    scalar = ir.Constant(element, float(number) if isinstance(element, (ir.FloatType, ir.DoubleType)) else int(number))
    return vector_const(typ, scalar) if isinstance(typ, ir.VectorType) else scalar


def _suffix(value: ir.Value) -> str:
    """The overload suffix of an intrinsic on value's type: f32, v16f32, f64, ..."""
    typ = value.type
    element = typ.element if isinstance(typ, ir.VectorType) else typ
    name = "f32" if element == F32 else "f64"
    return f"v{typ.count}{name}" if isinstance(typ, ir.VectorType) else name


def _uniform(value: ir.Value) -> float | None:
    """The number in every lane of a constant, or None when the value is not such a constant. A float32 lane's number
    is rounded to float32: vector constants are shared by their text (loops.vector_const), so a splat of 0.5 may hold
    the lanes of an earlier 0.50000001201, which print alike."""
    if not isinstance(value, ir.Constant):
        return None
    if isinstance(value.type, ir.VectorType):
        lanes = {_number(c) for c in value.constant} if isinstance(value.constant, list) else set()
        return lanes.pop() if len(lanes) == 1 else None
    return _number(value)


def _number(constant: ir.Constant) -> float | None:
    number = constant.constant
    if not isinstance(number, (int, float)):
        return None
    return float(np.float32(number)) if isinstance(constant.type, ir.FloatType) else number


# --- arithmetic -----------------------------------------------------------------------------------------------


@_emitter("add")
def _add(b, args, attrs, dtype):
    x, y = args
    return b.fadd(x, y) if dtype.is_float else b.or_(x, y) if dtype.name == "bool" else b.add(x, y)


@_emitter("sub")
def _sub(b, args, attrs, dtype):
    return b.fsub(*args) if dtype.is_float else b.sub(*args)


@_emitter("mul")
def _mul(b, args, attrs, dtype):
    x, y = args
    return b.fmul(x, y) if dtype.is_float else b.and_(x, y) if dtype.name == "bool" else b.mul(x, y)


@_emitter("div")
def _div(b, args, attrs, dtype):
    return b.fdiv(*args)


@_emitter("pow")
def _pow(b, args, attrs, dtype):
    """x ** y: the exponents code writes most (x ** 3 in GPT-2's gelu, (v + eps) ** -0.5 in hand-written norms)
    as multiplies, divisions and square roots, within pow's 4 ulp and with its special values (a libm powf per lane
    took 5x numpy's time on 1e6 values); a constant base 2 as vecmath.exp2; any other exponent in vectors
    (vecmath_pow: float32 in float64, float64 in double-double)."""
    x, y = args
    n = _uniform(y)
    if n in _POWERS:
        return _POWERS[n](b, x)
    if _uniform(x) == 2.0 and dtype.name == "f32":   # 2 ** y (torch.exp2): 2^y directly, exact at integers
        return vecmath.exp2(VectorEmit(b, b.module, lanes_of(y), F32), y)
    return powf(b, x, y) if dtype.name == "f32" else pow64(b, x, y)


def _root(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """pow(x, 0.5) as numpy's power computes it: sqrt(x) (-0 for -0, NaN for -inf)."""
    return intrinsic(b, f"llvm.sqrt.{_suffix(x)}", [x])


def _reciprocal_root(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """pow(x, -0.5) = 1 / sqrt(x), but +inf for -0 and +0 for -inf (where that gives -inf and NaN). numpy's power
    takes ** 0.5 as sqrt itself (-0 and NaN there), C's pow does not, and ** -0.5 keeps C's values."""
    root = b.fadd(_root(b, x), _constant_like(x, 0.0))   # -0 + 0 = +0
    root = b.select(b.fcmp_ordered("==", x, _constant_like(x, float("-inf"))), _constant_like(x, float("inf")), root)
    return _reciprocal(b, root)


def _reciprocal(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return b.fdiv(_constant_like(x, 1.0), x)


def _square(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return b.fmul(x, x)


_POWERS: dict[float, Callable[[ir.IRBuilder, ir.Value], ir.Value]] = {
    0.0: lambda b, x: _constant_like(x, 1.0),                      # NaN ** 0 = 1 too
    1.0: lambda b, x: x,
    2.0: _square,
    3.0: lambda b, x: b.fmul(_square(b, x), x),
    4.0: lambda b, x: _square(b, _square(b, x)),
    -1.0: _reciprocal,
    -2.0: lambda b, x: _square(b, _reciprocal(b, x)),              # 1 / x**2 would overflow first
    0.5: _root,
    -0.5: _reciprocal_root,
}


def fmax(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """numpy.maximum on floats: (x >= y or x is NaN) ? x : y, and NaN when y is NaN."""
    return b.select(b.fcmp_unordered("uno", x, x), x, b.select(b.fcmp_ordered(">=", x, y), x, y))


def fmin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """numpy.minimum on floats: (x <= y or x is NaN) ? x : y, and NaN when y is NaN."""
    return b.select(b.fcmp_unordered("uno", x, x), x, b.select(b.fcmp_ordered("<=", x, y), x, y))


def compare(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value, dtype: DType) -> ir.Value:
    """x op y as numpy compares: floats ordered (!= unordered), ints signed, u8 and bool unsigned."""
    if dtype.is_float:
        return b.fcmp_unordered(op, x, y) if op == "!=" else b.fcmp_ordered(op, x, y)
    if dtype.kind == "int":
        return b.icmp_signed(op, x, y)
    return b.icmp_unsigned(op, x, y)


def maximum(b: ir.IRBuilder, x: ir.Value, y: ir.Value, dtype: DType) -> ir.Value:
    return fmax(b, x, y) if dtype.is_float else b.select(compare(b, ">=", x, y, dtype), x, y)


def minimum(b: ir.IRBuilder, x: ir.Value, y: ir.Value, dtype: DType) -> ir.Value:
    return fmin(b, x, y) if dtype.is_float else b.select(compare(b, "<=", x, y, dtype), x, y)


ELEMENTWISE["maximum"] = lambda b, args, attrs, dtype: maximum(b, args[0], args[1], dtype)
ELEMENTWISE["minimum"] = lambda b, args, attrs, dtype: minimum(b, args[0], args[1], dtype)


@_emitter("neg")
def _neg(b, args, attrs, dtype):
    x = args[0]
    return b.fneg(x) if dtype.is_float else b.sub(_constant_like(x, 0), x)


@_emitter("sign")
def _sign(b, args, attrs, dtype):
    x = args[0]
    if dtype.kind == "uint":
        return b.zext(b.icmp_unsigned("!=", x, _constant_like(x, 0)), x.type)
    one, minus, zero = _constant_like(x, 1), _constant_like(x, -1), _constant_like(x, 0)
    signed = b.select(compare(b, ">", x, zero, dtype), one, b.select(compare(b, "<", x, zero, dtype), minus, zero))
    return b.select(b.fcmp_unordered("uno", x, x), x, signed) if dtype.is_float else signed


@_emitter("abs")
def _abs(b, args, attrs, dtype):
    x = args[0]
    if dtype.is_float:
        return intrinsic(b, f"llvm.fabs.{_suffix(x)}", [x])
    if dtype.kind == "int":
        return b.select(b.icmp_signed("<", x, _constant_like(x, 0)), b.sub(_constant_like(x, 0), x), x)
    return x


@_emitter("relu")
def _relu(b, args, attrs, dtype):
    x = args[0]
    if dtype.is_float:
        return b.select(b.fcmp_ordered("<", x, _constant_like(x, 0)), _constant_like(x, 0), x)
    return b.select(b.icmp_signed("<", x, _constant_like(x, 0)), _constant_like(x, 0), x) if dtype.kind == "int" else x


@_emitter("clamp")
def _clamp(b, args, attrs, dtype):
    """numpy.clip with float bounds: floats compare in their own dtype; ints and bools go through float64, as
    numpy promotes them before casting back."""
    x = args[0]
    if not dtype.is_float:
        wide = register_type(float64, lanes_of(x))
        as_float = b.uitofp(x, wide) if dtype.kind in ("uint", "bool") else b.sitofp(x, wide)
        clipped = _clip(b, as_float, attrs)
        return _cast(b, [clipped], {"dtype": dtype}, float64)
    return _clip(b, x, attrs)


def _clip(b: ir.IRBuilder, x: ir.Value, attrs: dict[str, Any]) -> ir.Value:
    if attrs.get("min") is not None:
        x = fmax(b, x, _constant_like(x, attrs["min"]))
    if attrs.get("max") is not None:
        x = fmin(b, x, _constant_like(x, attrs["max"]))
    return x


# --- transcendental and activations ---------------------------------------------------------------------------


for _name in ("exp", "log", "tanh", "erf", "sigmoid", "silu", "log1p", "expm1", "sin", "cos"):   # both float dtypes
    ELEMENTWISE[_name] = (lambda name: lambda b, args, attrs, dtype: vecmath.call(b, name, args[0]))(_name)


ELEMENTWISE["fmod"] = lambda b, args, attrs, dtype: fmod(b, *args)   # exact, in vectors (vecmath_fmod)


@_emitter("atan2")
def _atan2(b, args, attrs, dtype):
    """In vectors (vecmath_atan: libm's atan2 per lane made torch.atan/asin/acos 6-40x torch's time)."""
    return atan2(b, *args)
for _name, _intrinsic in (("floor", "floor"), ("ceil", "ceil"), ("round", "roundeven")):
    ELEMENTWISE[_name] = (lambda f: lambda b, args, attrs, dtype: intrinsic(b, f"llvm.{f}.{_suffix(args[0])}",
                                                                             [args[0]]))(_intrinsic)


@_emitter("remainder")
def _remainder(b, args, attrs, dtype):
    """numpy's remainder: fmod, moved by y when it is nonzero and its sign differs from y's."""
    x, y = args
    r = fmod(b, *args)
    zero = _constant_like(r, 0)
    differs = b.xor(b.fcmp_ordered("<", r, zero), b.fcmp_ordered("<", y, zero))
    return b.select(b.and_(b.fcmp_ordered("!=", r, zero), differs), b.fadd(r, y), r)


@_emitter("gelu")
def _gelu(b, args, attrs, dtype):
    return vecmath.call(b, "gelu_tanh" if attrs.get("approximate", "none") == "tanh" else "gelu_erf", args[0])


@_emitter("sqrt")
def _sqrt(b, args, attrs, dtype):
    return intrinsic(b, f"llvm.sqrt.{_suffix(args[0])}", [args[0]])


@_emitter("rsqrt")
def _rsqrt(b, args, attrs, dtype):
    return b.fdiv(_constant_like(args[0], 1), _sqrt(b, args, attrs, dtype))


# --- comparisons, selection, casts ----------------------------------------------------------------------------

for _name, _op in (("eq", "=="), ("ne", "!="), ("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">=")):
    ELEMENTWISE[_name] = (lambda op: lambda b, args, attrs, dtype: compare(b, op, args[0], args[1], dtype))(_op)


ELEMENTWISE["broadcast_to"] = lambda b, args, attrs, dtype: args[0]  # the nest reads x through broadcast strides


@_emitter("where")
def _where(b, args, attrs, dtype):
    return b.select(*args)


@_emitter("cast")
def _cast(b, args, attrs, dtype):
    """numpy's astype: truncation toward zero from float to int (narrow ints through int32, as C casts do on
    x86), wrapping between ints, nonzero (NaN included) to True. Out-of-range float to int is undefined, as in C."""
    x, to = args[0], attrs["dtype"]
    typ = register_type(to, lanes_of(x))
    if to == dtype:
        return x
    if to.name == "bool":
        zero = _constant_like(x, 0)
        return b.fcmp_unordered("!=", x, zero) if dtype.is_float else b.icmp_unsigned("!=", x, zero)
    if dtype.name == "bool":
        return b.uitofp(x, typ) if to.is_float else b.zext(x, typ)
    if dtype.is_float and to.is_float:
        return b.fpext(x, typ) if to.bits > dtype.bits else b.fptrunc(x, typ)
    if dtype.is_float:
        return b.trunc(b.fptosi(x, register_type(int32, lanes_of(x))), typ) if to.bits < 32 else b.fptosi(x, typ)
    if to.is_float:
        return b.uitofp(x, typ) if dtype.kind == "uint" else b.sitofp(x, typ)
    if to.bits < dtype.bits:
        return b.trunc(x, typ)
    if to.bits > dtype.bits:
        return b.zext(x, typ) if dtype.kind == "uint" else b.sext(x, typ)
    return x


# --- evaluating nodes -----------------------------------------------------------------------------------------


def operand_dtype(node: Node) -> DType:
    """The dtype an emitter is specialized on: that of x and y for where, else that of the first operand."""
    return node.inputs[1].dtype if node.op == "where" else node.inputs[0].dtype


def apply_node(b: ir.IRBuilder, node: Node, args: Sequence[ir.Value], lanes: int) -> ir.Value:
    """One elementwise, broadcast_to or scalar constant node on register values (scalars are widened to lanes)."""
    if node.op == "constant":
        array = node.attr["value"].array
        if array.shape != ():
            raise Unfusable(f"a constant of shape {array.shape} inside a kernel body")
        return constant(node.out.dtype, array.item(), lanes)
    args = [widen(b, a, lanes) for a in args]
    emit = ELEMENTWISE.get(node.op)
    if emit is None:
        raise unsupported(node, "it is not an elementwise op")
    return emit(b, args, node.attr, operand_dtype(node))


def body_compute(body: Graph, lookups: Sequence[Lookup] = ()
                 ) -> Callable[[ir.IRBuilder, Sequence, int], list[ir.Value]]:
    """Evaluate an elementwise body graph on its inputs' register values, followed by one TableRow per lookup (the
    body's gathers, evaluated by them); returns its outputs' values."""
    by_node = {lookup.node.out.name: n for n, lookup in enumerate(lookups)}

    def compute(b: ir.IRBuilder, values: Sequence, lanes: int) -> list[ir.Value]:
        env = {v.name: value for v, value in zip(body.inputs, values)}
        rows = values[len(body.inputs):]
        for node in body.nodes:
            n = by_node.get(node.out.name)
            if n is not None:
                env[node.out.name] = lookups[n].emit(b, rows[n], env[node.inputs[1].name], lanes)
            else:
                env[node.outputs[0].name] = apply_node(b, node, [env[v.name] for v in node.inputs], lanes)
        return [env[v.name] for v in body.outputs]
    return compute


def lower_body(ctx: KernelContext, node: Node, body: Graph, op: str) -> KernelSpec:
    """The kernel of an elementwise body applied to the node's operands (one result per body output). View ops in
    the body (slices, transposes, reshapes of its inputs) cost no pass of their own: the nest reads their results
    through strided views of the operands' buffers (ir/views.py). A gather reads its table where its indices point
    (lookup.py), the indices loaded like any operand."""
    shape = node.attr["shape"]
    at, computed = body_views(body, get_op)
    loads = _read_views(body, at, computed)
    if not reads_rows(shape, [(v.type, view) for v, _, view in loads]):
        raise Unfusable("an operand does not broadcast to the domain or its view is strided along the innermost axis")
    k = begin_kernel(ctx, node.outputs, node.inputs, noalias=False)
    lookups = [_lookup(k, n, at, computed, shape) for n in computed if get_op(n.op).table is not None]
    inner = body.replace(inputs=tuple(v for v, _, _ in loads), nodes=computed)
    elementwise_nest(k, shape, [Operand(k.ins[operand], v.type, view) for v, operand, view in loads],
                     [Operand(p, v.type) for p, v in zip(k.outs, node.outputs)], body_compute(inner, lookups),
                     [lookup.table for lookup in lookups])
    for lookup in lookups:
        lookup.check.finish()
    return k.finish(op)


def _read_views(body: Graph, at: dict[str, tuple[int, View]], computed: Sequence[Node]
                ) -> list[tuple[Value, int, View]]:
    """The values the body's computing nodes read from memory element by element (the body's inputs themselves,
    and the results of view ops on them), each with the operand it lies in and its view there: all but the
    lookups' tables, which they read where their indices point."""
    copying = [n.op for n in computed if get_op(n.op).view is not None and not get_op(n.op).elementwise_like]
    if copying:
        raise Unfusable(f"{copying[0]} in an elementwise region needs a copy")
    values = {v.name: v for v in (*body.inputs, *(v for n in body.nodes for v in n.outputs))}
    read = {v.name for v in body.outputs}
    for n in computed:
        table = get_op(n.op).table
        read |= {v.name for position, v in enumerate(n.inputs) if position != table}
    return [(values[name], *at[name]) for name in at if name in read]


def _lookup(k: Kernel, node: Node, at: dict[str, tuple[int, View]], computed: Sequence[Node],
            shape: tuple[int, ...]) -> Lookup:
    """The lookup of a body's gather: its table and its indices must be read from the region's operands (the
    indices possibly through broadcast_to), as the fuse pass forms such regions."""
    producers = {n.out.name: n for n in computed}
    table, indices = node.inputs
    while indices.name in producers and producers[indices.name].op == "broadcast_to":
        indices = producers[indices.name].inputs[0]
    if table.name not in at or indices.name not in at:
        raise Unfusable("a gather whose table or indices the region computes")
    if 0 in table.shape:
        raise Unfusable("a gather from an empty table (its kernel of its own reports every index)")
    (table_operand, table_view), (index_operand, index_view) = at[table.name], at[indices.name]
    index_walk = broadcast(index_view, indices.shape, node.inputs[1].shape)
    return gather_lookup(k, node, k.ins[table_operand], table_view, k.ins[index_operand], index_walk, shape)


@register(*sorted(ELEMENTWISE))
def lower_elementwise(node: Node, ctx: KernelContext) -> KernelSpec:
    """A single elementwise (or broadcast_to) node: the nest with the op as its one-node body."""
    k = begin_kernel(ctx, node.outputs, node.inputs, noalias=False)
    elementwise_nest(k, node.out.shape, [Operand(p, v.type) for p, v in zip(k.ins, node.inputs)],
                     [Operand(k.outs[0], node.out.type)], lambda b, values, lanes: [apply_node(b, node, values, lanes)])
    return k.finish(node.op)


__all__ = ["ELEMENTWISE", "apply_node", "body_compute", "compare", "elementwise_nest", "fmax", "fmin",
           "libm", "lower_body", "maximum", "minimum", "operand_dtype"]
