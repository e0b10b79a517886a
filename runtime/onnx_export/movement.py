"""ONNX rules for the movement and indexing ops (ir/ops/movement.py, ir/ops/indexing.py): shapes, axes and slice
bounds become int64 constant operands; braze's bounds are already normalized, so they carry over unchanged."""
from __future__ import annotations

import numpy as np

from braze.ir.graph import Node
from braze.ir.ops.indexing import pad_sources

from .builder import OnnxBuilder, onnx_dtype, register


@register("reshape")
def _reshape(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    shape = node.attr["shape"]
    # a 0 in an ONNX Reshape copies the input's dimension unless allowzero is set
    e.emit("Reshape", [ins[0], e.ints(shape)], outs, allowzero=1 if 0 in shape else None)


@register("transpose")
def _transpose(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    e.emit("Transpose", ins, outs, perm=list(node.attr["perm"]))


@register("broadcast_to")
def _broadcast_to(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    e.emit("Expand", [ins[0], e.ints(node.attr["shape"])], outs)


@register("squeeze", "unsqueeze")
def _squeeze(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    axes = node.attr["axes"]
    if not axes:  # ONNX Squeeze without axes removes every size-1 axis; braze's removes none
        e.emit("Identity", ins, outs)
        return
    e.emit("Squeeze" if node.op == "squeeze" else "Unsqueeze", [ins[0], e.ints(axes)], outs)


@register("concat")
def _concat(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    e.emit("Concat", ins, outs, axis=node.attr["axis"])


@register("stack")
def _stack(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    axis = node.attr["axis"] % node.out.type.rank
    e.emit("Concat", [e.emit("Unsqueeze", [x, e.ints([axis])]) for x in ins], outs, axis=axis)


@register("slice")
def _slice(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    starts, stops, steps = (node.attr[k] for k in ("starts", "stops", "steps"))
    if node.inputs[0].type.rank == 0:
        e.emit("Identity", ins, outs)
        return
    axes = list(range(len(starts)))
    e.emit("Slice", [ins[0], e.ints(starts), e.ints(stops), e.ints(axes), e.ints(steps)], outs)


@register("flip")
def _flip(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    """A Slice with step -1 from the last element past the first of each flipped axis."""
    axes = [a % node.out.type.rank for a in node.attr["axes"]]
    if not axes:
        e.emit("Identity", ins, outs)
        return
    first_before = -(2 ** 63)
    e.emit("Slice", [ins[0], e.ints([-1] * len(axes)), e.ints([first_before] * len(axes)), e.ints(axes),
                     e.ints([-1] * len(axes))], outs)


@register("cumsum")
def _cumsum(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    e.emit("CumSum", [ins[0], e.const(node.attr["axis"], np.dtype(np.int64), hint="axis")], outs)


@register("pad")
def _pad(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    pads, x = node.attr["pads"], node.inputs[0]
    if x.type.rank == 0:
        e.emit("Identity", ins, outs)
        return
    # braze lists (before, after) per axis; ONNX every axis's before, then every axis's after
    onnx_pads = list(pads[0::2]) + list(pads[1::2])
    mode = node.attr["mode"]
    if mode == "wrap" and e.opset < 19:  # ONNX's Pad wraps from opset 19: before, a Gather per padded axis
        value = ins[0]
        padded = [a for a, n in enumerate(x.shape) if pads[2 * a] or pads[2 * a + 1]]
        for a in padded:
            sources = pad_sources("wrap", x.shape[a], pads[2 * a], pads[2 * a + 1])
            value = e.emit("Gather", [value, e.const(sources, np.int64, hint="wrap")],
                           outs if a == padded[-1] else None, axis=a)
        if not padded:
            e.emit("Identity", ins, outs)
        return
    if mode != "constant":
        e.emit("Pad", [ins[0], e.ints(onnx_pads)], outs, mode=mode)
        return
    value = e.const(node.attr["value"], x.dtype)
    e.emit("Pad", [ins[0], e.ints(onnx_pads), value], outs, mode="constant")


@register("gather")
def _gather(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    e.emit("GatherElements", ins, outs, axis=node.attr["axis"])


@register("scatter")
def _scatter(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    e.emit("ScatterElements", ins, outs, axis=node.attr["axis"])


@register("index_select")
def _index_select(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    e.emit("Gather", ins, outs, axis=node.attr["axis"])


@register("one_hot")
def _one_hot(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    """indices[..., None] == arange(num_classes), cast: as the registry's reference computes it."""
    indices = node.inputs[0]
    classes = e.const(np.arange(node.attr["num_classes"]), indices.dtype, hint="classes")
    hit = e.emit("Equal", [e.emit("Unsqueeze", [ins[0], e.ints([-1])]), classes])
    e.emit("Cast", [hit], outs, to=onnx_dtype(node.attr["dtype"]))


@register("scale_grad")
def _scale_grad(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    """The operand itself: the weight of its gradient means nothing to an inference graph."""
    e.emit("Identity", [ins[0]], outs)
