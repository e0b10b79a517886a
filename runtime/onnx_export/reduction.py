"""ONNX rules for the reductions (ir/ops/reduce.py): sum, mean, max, min, argmax/argmin and the softmax family."""
from __future__ import annotations

from braze.ir.graph import Node
from braze.ir.types import bool_, int64

from .builder import OnnxBuilder, onnx_dtype, register

_REDUCE = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax", "min": "ReduceMin"}


def _axes(node: Node) -> list[int]:
    """The node's reduction axes, normalized; None reduces every axis (a scalar has none)."""
    rank, axes = node.inputs[0].type.rank, node.attr["axes"]
    return list(range(rank)) if axes is None else sorted(a % rank for a in axes) if rank else []


@register(*_REDUCE)
def _reduce(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    x, axes = ins[0], _axes(node)
    if node.inputs[0].dtype == bool_:  # braze counts booleans into int64, as torch does
        x = e.emit("Cast", [x], to=onnx_dtype(int64))
    if not axes:  # nothing to reduce; ONNX would read an empty axes list as "every axis"
        e.emit("Identity", [x], outs)
        return
    e.axes_operand(_REDUCE[node.op], x, axes, outs[0], keepdims=int(node.attr["keepdim"]))


@register("argmax", "argmin")
def _arg(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    op_type = "ArgMax" if node.op == "argmax" else "ArgMin"
    axis, keepdim, rank = node.attr["axis"], node.attr["keepdim"], node.inputs[0].type.rank
    if axis is not None and rank:
        e.emit(op_type, ins, outs, axis=axis, keepdims=int(keepdim))
        return
    # over the flattened operand, as the reference does; keepdim keeps a 1 per axis
    index = e.emit(op_type, [e.emit("Reshape", [ins[0], e.ints([-1])])], axis=0, keepdims=0)
    e.emit("Reshape", [index, e.ints([1] * rank if keepdim else [])], outs)


@register("softmax", "log_softmax")
def _softmax(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    op_type = "Softmax" if node.op == "softmax" else "LogSoftmax"
    if node.inputs[0].type.rank == 0:  # ONNX needs an axis: normalize a scalar as a one-element vector
        flat = e.emit(op_type, [e.emit("Reshape", [ins[0], e.ints([1])])], axis=0)
        e.emit("Reshape", [flat, e.ints([])], outs)
        return
    e.emit(op_type, ins, outs, axis=node.attr["axis"])
