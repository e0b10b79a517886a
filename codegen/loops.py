"""IR-building utilities shared by every lowering: types, functions, loops, pointers and vectors.

Pointers are opaque (`ptr`): every `gep` names its element type and every `load` its value type. Loop builders are
context managers that leave the builder after the loop, with named blocks (`i.cond`, `i.body`, `i.inc`, `i.end`)
so that dumps read like the source. Allocas go in the entry block, where LLVM promotes them to registers.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

import llvmlite.ir as ir

from .llvm_object import EXPLICIT

F32 = ir.FloatType()
F64 = ir.DoubleType()
I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()

# Fast-math flags: `contract` lets LLVM fuse a*b+c into an FMA; reassociation is only for reductions whose order
# the op does not fix (sums). Never on comparisons, max/min or anything that must propagate NaN.
CONTRACT = ("contract",)
REASSOC = ("contract", "reassoc")


def vec(width: int, element: ir.Type = F32) -> ir.Type:
    """The vector type <width x element>, or the element type itself for width 1."""
    return element if width == 1 else ir.VectorType(element, width)


def const(typ: ir.Type, value: float | int) -> ir.Constant:
    """A constant of a scalar or vector type (a vector constant has `value` in every lane)."""
    return vector_const(typ, value) if isinstance(typ, ir.VectorType) else ir.Constant(typ, value)


class _Vector(ir.Constant):
    """A vector constant printed in LLVM's short forms where they apply: `zeroinitializer` when every lane is
    zero, `undef` when every lane is undefined, `splat (T v)` when every lane holds one value, else lane by lane.
    llvmlite prints every vector constant lane by lane, each lane a Python formatting call; in unrolled kernels
    that was a third of the time spent printing their IR. The lanes stay in `constant`, as llvmlite keeps them."""

    def _get_reference(self) -> str:
        lanes = self.constant
        first = lanes[0].get_reference()
        if any(lane.get_reference() != first for lane in lanes[1:]):
            return super()._get_reference()
        if first == "undef":
            return "undef"
        value = lanes[0].constant
        if value is None or (value == 0 and not (isinstance(value, float) and math.copysign(1.0, value) < 0)):
            return "zeroinitializer"
        return f"splat ({lanes[0].type} {first})"


# Vector constants by type and lane references, shared by every module of the process: llvmlite caches a
# constant's text in the constant, so a shared one is formatted once. Bounded: cleared when it grows past this.
_VECTORS: dict[tuple[str, tuple[str, ...]], ir.Constant] = {}
_MOST_VECTORS = 4096


def vector_const(typ: ir.VectorType, lanes: Sequence[ir.Constant | float | int] | ir.Constant | float | int | None
           ) -> ir.Constant:
    """The constant of vector type `typ` with the given lanes: a sequence (one per lane), one value for every lane,
    None for zeros or ir.Undefined for undefined lanes. Prints compactly (see _Vector)."""
    element = typ.element
    if isinstance(lanes, (list, tuple)):
        if len(lanes) != typ.count:
            raise ValueError(f"{typ} takes {typ.count} lanes, got {len(lanes)}")
        constants = [lane if isinstance(lane, ir.Constant) else ir.Constant(element, lane) for lane in lanes]
    else:
        constants = [lanes if isinstance(lanes, ir.Constant) else ir.Constant(element, lanes)] * typ.count
    key = (str(typ), tuple(c.get_reference() for c in constants))
    found = _VECTORS.get(key)
    if found is None:
        if len(_VECTORS) >= _MOST_VECTORS:
            _VECTORS.clear()
        found = _VECTORS[key] = _Vector(typ, constants)
    return found


def zeros(typ: ir.Type) -> ir.Constant:
    """The zero constant of a scalar or vector type."""
    return vector_const(typ, None) if isinstance(typ, ir.VectorType) else ir.Constant(typ, None)


def undef(typ: ir.Type) -> ir.Constant:
    """The undefined value of a scalar or vector type."""
    return vector_const(typ, ir.Undefined) if isinstance(typ, ir.VectorType) else ir.Constant(typ, ir.Undefined)


def i64(value: ir.Value | int) -> ir.Value:
    """An i64 value from a Python int or an existing i64 value."""
    return ir.Constant(I64, value) if isinstance(value, int) else value


def splat(builder: ir.IRBuilder, value: ir.Value, width: int) -> ir.Value:
    """Broadcast a scalar value to all lanes of a <width x T> vector (width 1 returns the scalar)."""
    if width == 1:
        return value
    typ = ir.VectorType(value.type, width)
    if isinstance(value, ir.Constant):
        return vector_const(typ, value)
    # lane 0 of the insert is all the shuffle reads
    zero = zeros(typ)
    one = builder.insert_element(zero, value, ir.Constant(I32, 0))
    return builder.shuffle_vector(one, zero, zeros(ir.VectorType(I32, width)))


def define_function(module: ir.Module, name: str, args: Sequence[tuple[str, ir.Type]], ret: ir.Type = VOID, *,
                    internal: bool = False, noalias: bool = False, inline: bool = False) -> ir.Function:
    """Declare a function with named arguments and an entry block; `noalias` marks every pointer argument restrict.

    Internal functions are not exported from the object; `inline` marks them alwaysinline.
    """
    fn = ir.Function(module, ir.FunctionType(ret, [t for _, t in args]), name=name)
    for arg, (arg_name, typ) in zip(fn.args, args):
        arg.name = arg_name
        if noalias and isinstance(typ, ir.PointerType):
            arg.add_attribute("noalias")
    fn.attributes.add("nounwind")
    if internal:
        fn.linkage = "internal"
    if inline:
        fn.attributes.add("alwaysinline")
    fn.append_basic_block("entry")
    return fn


def optimize_for_size(fn: ir.Function) -> ir.Function:
    """Mark a function whose time goes to the functions it calls (a GEMM's blocking loops) or that runs once (a
    weight prepack): LLVM would unroll and unswitch such loop nests into code that multiplies their compile time
    and gains nothing measurable, so they are compiled as for size."""
    fn.attributes.add("optsize")
    return fn


def mark_explicit(module: ir.Module) -> None:
    """Mark a module whose code leaves LLVM's loop and vectorization passes nothing to do (its loops, vectors and
    register tiles spelled out) for the short optimization pipeline (llvm_object.EXPLICIT)."""
    module.add_named_metadata(EXPLICIT)


def entry_builder(fn: ir.Function) -> ir.IRBuilder:
    """A builder positioned at the end of the function's entry block."""
    return ir.IRBuilder(fn.entry_basic_block)


def vector_registers(width: int) -> int:
    """The vector registers a kernel of `width` float32 lanes has: 32 zmm with AVX-512, 16 ymm or xmm below it."""
    return 32 if width >= 16 else 16


def opaque(builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """`value` unchanged, through an empty inline asm LLVM cannot see into: loads from addresses derived from two
    opaque copies of one pointer are not merged (no code is emitted; the copy costs at most a register move)."""
    asm = ir.InlineAsm(ir.FunctionType(value.type, [value.type]), "", "=r,0")
    return builder.call(asm, [value], attrs=("readnone", "nounwind"))


def alloca(builder: ir.IRBuilder, typ: ir.Type, name: str = "", count: ir.Value | int | None = None) -> ir.Value:
    """Allocate stack space in the entry block of the current function, whatever block the builder is in."""
    entry = builder.function.entry_basic_block
    with builder.goto_block(entry):
        if entry.instructions:
            builder.position_before(entry.instructions[0])
        return builder.alloca(typ, size=None if count is None else i64(count), name=name)


def element_ptr(builder: ir.IRBuilder, base: ir.Value, index: ir.Value | int, element: ir.Type = F32,
                name: str = "") -> ir.Value:
    """The address of base[index] for elements of type `element` (an inbounds gep)."""
    return builder.gep(base, [i64(index)], inbounds=True, source_etype=element, name=name)


def load(builder: ir.IRBuilder, base: ir.Value, index: ir.Value | int, typ: ir.Type = F32, *,
         element: ir.Type | None = None, align: int | None = None, name: str = "") -> ir.Value:
    """Load a value of type `typ` from base[index]; index counts `element`s (default: the scalar type of typ).

    Alignment defaults to the element size: only buffers the runtime allocates itself may claim more.
    """
    element = element or (typ.element if isinstance(typ, ir.VectorType) else typ)
    ptr = element_ptr(builder, base, index, element)
    return builder.load(ptr, typ=typ, align=align or _size(element), name=name)


def store(builder: ir.IRBuilder, value: ir.Value, base: ir.Value, index: ir.Value | int, *,
          element: ir.Type | None = None, align: int | None = None) -> None:
    """Store `value` at base[index]; index counts `element`s (default: the scalar type of the value)."""
    element = element or (value.type.element if isinstance(value.type, ir.VectorType) else value.type)
    builder.store(value, element_ptr(builder, base, index, element), align=align or _size(element))


def store_prefix(builder: ir.IRBuilder, value: ir.Value, ptr: ir.Value, count: int) -> None:
    """Store the first `count` lanes of vector `value` at `ptr` by plain stores of power-of-two pieces (6 lanes:
    4 + 2), where a masked store is slow: AVX2's vmaskmovps store on AMD cores (gemm_pack.store_step measured it)."""
    element = value.type.element
    done = 0
    while done < count:
        piece = 1 << ((count - done).bit_length() - 1)
        at = builder.gep(ptr, [ir.Constant(I64, done)], source_etype=element)
        if piece == 1:
            part = builder.extract_element(value, ir.Constant(I32, done))
        else:
            part = builder.shuffle_vector(value, undef(value.type),
                                          vector_const(ir.VectorType(I32, piece), list(range(done, done + piece))))
        builder.store(part, at, align=_size(element))
        done += piece


def _size(typ: ir.Type) -> int:
    if isinstance(typ, ir.IntType):
        return max(typ.width // 8, 1)
    if isinstance(typ, ir.DoubleType):
        return 8
    if isinstance(typ, ir.FloatType):
        return 4
    return 8


@contextmanager
def for_range(builder: ir.IRBuilder, start: ir.Value | int, stop: ir.Value | int, step: ir.Value | int = 1, *,
              name: str = "i") -> Iterator[ir.Value]:
    """`for (i = start; i < stop; i += step)` over i64; yields i. `step` must be positive.

    The with-block emits the body; afterwards the builder is positioned in the block after the loop.
    """
    start, stop, step = i64(start), i64(stop), i64(step)
    fn = builder.function
    pre = builder.block
    cond = fn.append_basic_block(f"{name}.cond")
    body = fn.append_basic_block(f"{name}.body")
    inc = fn.append_basic_block(f"{name}.inc")
    end = fn.append_basic_block(f"{name}.end")
    builder.branch(cond)
    builder.position_at_end(cond)
    index = builder.phi(I64, name=name)
    index.add_incoming(start, pre)
    builder.cbranch(builder.icmp_signed("<", index, stop), body, end)
    builder.position_at_end(body)
    yield index
    builder.branch(inc)
    builder.position_at_end(inc)
    following = builder.add(index, step, name=f"{name}.next", flags=("nsw",))
    index.add_incoming(following, inc)
    builder.branch(cond)
    builder.position_at_end(end)


@contextmanager
def loop_nest(builder: ir.IRBuilder, stops: Sequence[ir.Value | int], *, name: str = "i"
              ) -> Iterator[tuple[ir.Value, ...]]:
    """Nested loops from 0 to each stop, outermost first; yields the indices (i0, i1, ...)."""
    with _nest(builder, list(stops), name, ()) as indices:
        yield indices


def unflatten(builder: ir.IRBuilder, index: ir.Value, counts: Sequence[tuple[str, int]]) -> dict[str, ir.Value]:
    """The digits of a flat `index` over the named `counts`, the last one varying fastest, by name (the first one
    is not reduced: an index past the end gives it past its count)."""
    digits = {}
    for name, count in reversed(counts[1:]):
        digits[name] = builder.urem(index, i64(count))
        index = builder.udiv(index, i64(count))
    if counts:
        digits[counts[0][0]] = index
    return digits


@contextmanager
def _nest(builder: ir.IRBuilder, stops: list, name: str, outer: tuple) -> Iterator[tuple[ir.Value, ...]]:
    if not stops:
        yield outer
        return
    with for_range(builder, 0, stops[0], name=f"{name}{len(outer)}") as index:
        with _nest(builder, stops[1:], name, outer + (index,)) as indices:
            yield indices


def lane_mask(width: int, valid: int) -> ir.Constant:
    """The constant mask whose first `valid` lanes are set."""
    return vector_const(ir.VectorType(I1, width), [1 if i < valid else 0 for i in range(width)])


def vector_loop(builder: ir.IRBuilder, start: ir.Value | int, stop: ir.Value | int, width: int,
                body: Callable[..., None], *, name: str = "v", partial: int = 0) -> None:
    """Call body(i, width) for full vectors in [start, stop), then body(i, 1) for the scalar remainder.

    The body emits code for `lanes` consecutive elements starting at i (lanes is width or 1), so a lowering writes
    one body for both the vector main loop and the tail. With width 1 only the scalar loop is emitted. With
    `partial`, the remainder is known to be 0 or `partial` elements, and a nonzero one is a single call
    body(i, width, partial), whose lanes past the first `partial` the body neither reads nor writes.
    """
    start, stop = i64(start), i64(stop)
    if width > 1:
        count = builder.sub(stop, start, name=f"{name}.count")
        full = builder.sub(stop, builder.srem(count, i64(width)), name=f"{name}.full")
        with for_range(builder, start, full, width, name=name) as i:
            body(i, width)
        if partial:
            with builder.if_then(builder.icmp_signed("<", full, stop)):
                body(full, width, partial)
            return
        start = full
    with for_range(builder, start, stop, 1, name=f"{name}.tail") as i:
        body(i, 1)
