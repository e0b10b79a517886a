"""ONNX rules for the elementwise ops (ir/ops/elementwise.py), matmul and copy: most are one ONNX operator with
numpy's broadcasting; the rest are short compositions of them."""
from __future__ import annotations

import math

from braze.ir.graph import Node
from braze.ir.types import DType

from .builder import OnnxBuilder, onnx_dtype, register

# Ops that are one ONNX operator of the same operands.
ONE_TO_ONE = {
    "add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow", "maximum": "Max", "minimum": "Min",
    "neg": "Neg", "sign": "Sign", "abs": "Abs", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "tanh": "Tanh",
    "sigmoid": "Sigmoid", "erf": "Erf", "relu": "Relu", "eq": "Equal", "lt": "Less", "le": "LessOrEqual",
    "gt": "Greater", "ge": "GreaterOrEqual", "where": "Where", "matmul": "MatMul", "copy": "Identity",
    "sin": "Sin", "cos": "Cos", "floor": "Floor", "ceil": "Ceil", "round": "Round",
}


@register(*ONE_TO_ONE)
def _one_to_one(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    e.emit(ONE_TO_ONE[node.op], ins, outs)


@register("linear")
def _linear(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    """x @ W.T with W stored (out, in): MatMul over a Transpose, which runtimes fold for a constant weight."""
    e.emit("MatMul", [ins[0], e.emit("Transpose", [ins[1]], perm=[1, 0])], outs)


@register("log1p")
def _log1p(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    e.emit("Log", [e.emit("Add", [ins[0], e.const(1.0, node.inputs[0].dtype)])], outs)


@register("expm1")
def _expm1(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    e.emit("Sub", [e.emit("Exp", ins), e.const(1.0, node.inputs[0].dtype)], outs)


@register("fmod")
def _fmod(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    e.emit("Mod", ins, outs, fmod=1)


@register("remainder")
def _remainder(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    """fmod, moved by y where it is nonzero and its sign differs from y's, as numpy.remainder."""
    zero = e.const(0.0, node.inputs[0].dtype)
    r = e.emit("Mod", ins, fmod=1)
    differs = e.emit("Xor", [e.emit("Less", [r, zero]), e.emit("Less", [ins[1], zero])])
    moved = e.emit("And", [e.emit("Not", [e.emit("Equal", [r, zero])]), differs])
    e.emit("Where", [moved, e.emit("Add", [r, ins[1]]), r], outs)


@register("ne")
def _ne(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    e.emit("Not", [e.emit("Equal", ins)], outs)


@register("rsqrt")
def _rsqrt(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    e.emit("Reciprocal", [e.emit("Sqrt", ins)], outs)


@register("silu")
def _silu(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    e.emit("Mul", [ins[0], e.emit("Sigmoid", ins)], outs)


@register("gelu")
def _gelu(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    """Gelu from opset 20; before, the decomposition onnxruntime's Gelu fusion recognizes."""
    approximate, (x,), dtype = node.attr["approximate"], ins, node.inputs[0].dtype
    if e.opset >= 20:
        e.emit("Gelu", [x], outs, approximate=approximate)
        return
    if approximate == "tanh":
        cubic = e.emit("Mul", [e.emit("Pow", [x, e.const(3.0, dtype)]), e.const(0.044715, dtype)])
        inner = e.emit("Mul", [e.emit("Add", [x, cubic]), e.const(math.sqrt(2.0 / math.pi), dtype)])
        one_plus = e.emit("Add", [e.emit("Tanh", [inner]), e.const(1.0, dtype)])
    else:
        one_plus = e.emit("Add", [e.emit("Erf", [e.emit("Div", [x, e.const(math.sqrt(2.0), dtype)])]),
                                  e.const(1.0, dtype)])
    e.emit("Mul", [e.emit("Mul", [x, one_plus]), e.const(0.5, dtype)], outs)


@register("clamp")
def _clamp(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    dtype = node.inputs[0].dtype
    bounds = ["" if node.attr[k] is None else e.const(_bound(node.attr[k], dtype.is_float), dtype)
              for k in ("min", "max")]
    e.emit("Clip", [ins[0], *bounds], outs)


def _bound(value: float, is_float: bool) -> float | int:
    """A clamp bound in the operand's kind: numpy clips an integer operand at the bound and then truncates."""
    return value if is_float else math.trunc(value)


@register("cast")
def _cast(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    e.emit("Cast", ins, outs, to=onnx_dtype(node.attr["dtype"]))


@register("atan2")
def _atan2(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    """ONNX has no Atan2. atan2(y, x) has the sign of y (signed zeros too), so it is |y|'s angle, atan(|y| / x) plus
    pi where x's sign bit is set (0 or pi, pi/4 or 3 pi/4 where |y| / x is NaN from two zeros or two infinities),
    times +-1 by y's sign bit: a product, because onnxruntime's Where returns +0 for a selected -0."""
    y, x = ins
    dtype = node.inputs[0].dtype
    magnitude = e.emit("Abs", [y])
    x_negative = _sign_bit(e, x, dtype)
    angle = e.emit("Atan", [e.emit("Div", [magnitude, x])])
    zero = e.const(0.0, dtype)
    both_zero = e.emit("And", [e.emit("Equal", [magnitude, zero]), e.emit("Equal", [x, zero])])
    both_inf = e.emit("And", [e.emit("IsInf", [magnitude]), e.emit("IsInf", [x])])
    quarter = e.emit("Where", [x_negative, e.const(-math.pi / 4, dtype), e.const(math.pi / 4, dtype)])
    angle = e.emit("Where", [both_zero, zero, e.emit("Where", [both_inf, quarter, angle])])
    angle = e.emit("Where", [x_negative, e.emit("Add", [angle, e.const(math.pi, dtype)]), angle])
    sign = e.emit("Where", [_sign_bit(e, y, dtype), e.const(-1.0, dtype), e.const(1.0, dtype)])
    e.emit("Mul", [angle, sign], outs)


def _sign_bit(e: OnnxBuilder, v: str, dtype: DType) -> str:
    """Whether v's sign bit is set: v < 0, or 1 / v < 0 (which also catches -0)."""
    zero = e.const(0.0, dtype)
    return e.emit("Or", [e.emit("Less", [v, zero]), e.emit("Less", [e.emit("Div", [e.const(1.0, dtype), v]), zero])])
