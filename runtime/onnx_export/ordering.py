"""ONNX rules for sort, topk and cumprod (ir/ops/ordering.py), which have no ONNX operator of their own.

sort is TopK with k = the axis length: ONNX specifies that TopK breaks ties by the lower index, in both
directions, which is the stable order braze and torch.sort(stable=True) give. NaN, the largest value to braze, has
no order in TopK: a first TopK sorts with NaN read as 0, then a second, stable TopK of isnan over that order moves
the NaNs last (first when descending), keeping their order. topk is that order's first k (a Slice).

cumprod is a Loop-free scan (Hillis-Steele: log2(n) steps of y = y * y shifted by 1, 2, 4, ... with ones shifted
in), exact for zeros, signs, infinities and NaN, and for integers; float products associate differently from
braze's left-to-right order, so results may differ from braze's by rounding (a few ulps).
"""
from __future__ import annotations

import numpy as np
import onnx

from braze.ir.graph import Node

from .builder import OnnxBuilder, register

_TOPK_KEY = {"i32", "i64", "f32", "f64"}   # the element types onnxruntime's TopK takes; others sort as int32


@register("sort")
def _sort(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    x = node.inputs[0]
    if x.type.rank == 0:
        e.emit("Identity", ins, [outs[0]])
        e.emit("Reshape", [e.const(0, np.dtype(np.int64)), e.ints([])], [outs[1]])   # helper constants are 1-d
        return
    _, order = _sorted(e, node, ins, node.attr["axis"] % x.type.rank, int(node.attr["descending"]), outs[0])
    e.emit("Identity", [order], [outs[1]])


@register("topk")
def _topk(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    """sort's order, then its first k: one TopK of k alone would order NaN, which braze sorts largest, at random."""
    axis = node.attr["axis"] % node.inputs[0].type.rank
    values, order = _sorted(e, node, ins, axis, int(node.attr["largest"]))
    for source, out in ((values, outs[0]), (order, outs[1])):
        e.emit("Slice", [source, e.ints([0]), e.ints([node.attr["k"]]), e.ints([axis])], [out])


def _sorted(e: OnnxBuilder, node: Node, ins: list[str], axis: int, largest: int,
            values: str | None = None) -> tuple[str, str]:
    """(values, positions) of the operand sorted along `axis` in braze's order (stable, NaN largest), the values
    named `values` when given."""
    x = node.inputs[0]
    key = ins[0] if x.dtype.name in _TOPK_KEY else e.emit("Cast", ins, to=onnx.TensorProto.INT32)
    nan = e.emit("IsNaN", ins) if x.dtype.is_float else None
    if nan is not None:
        key = e.emit("Where", [nan, e.const(0.0, x.dtype), ins[0]])
    order = _topk_order(e, key, x.shape[axis], axis, largest)
    if nan is not None:
        nan_in_order = e.emit("Cast", [e.emit("GatherElements", [nan, order], axis=axis)], to=onnx.TensorProto.FLOAT)
        order = e.emit("GatherElements", [order, _topk_order(e, nan_in_order, x.shape[axis], axis, largest)],
                       axis=axis)
    return e.emit("GatherElements", [ins[0], order], None if values is None else [values], axis=axis), order


def _topk_order(e: OnnxBuilder, key: str, n: int, axis: int, largest: int) -> str:
    """The positions that sort `key` along axis (ties by the lower position)."""
    results = [e.temp("topk_values"), e.temp("topk_order")]
    e.emit("TopK", [key, e.ints([n])], results, axis=axis, largest=largest, sorted=1)
    return results[1]


@register("cumprod")
def _cumprod(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    x = node.inputs[0]
    n = x.shape[node.attr["axis"] % x.type.rank] if x.type.rank else 1
    if n <= 1:
        e.emit("Identity", ins, outs)
        return
    axis = node.attr["axis"] % x.type.rank
    y, shift = ins[0], 1
    while shift < n:
        ones = e.const(np.ones(x.shape[:axis] + (shift,) + x.shape[axis + 1:]), x.dtype, hint="ones")
        head = e.emit("Slice", [y, e.ints([0]), e.ints([n - shift]), e.ints([axis])])
        shifted = e.emit("Concat", [ones, head], axis=axis)
        y = e.emit("Mul", [y, shifted], outs if 2 * shift >= n else None)
        shift *= 2
