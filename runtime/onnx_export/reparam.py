"""ONNX rules for the reparameterization ops (ir/ops/reparam.py) that the inference pipeline keeps when asked to
(fold_reparameterizations with policy="keep", or a quantized weight without an adapter): lora_merge and
dequantize, written with the registry's formulas, code books and packing; quantized_linear (the option
quantized_weights="packed") as the dequantized weight's MatMul, since ONNX has no packed 4-bit GEMM."""
from __future__ import annotations

import math

import numpy as np

from braze.ir.graph import Node
from braze.ir.ops.reparam import LEVELS
from braze.ir.types import float32, int64

from .builder import OnnxBuilder, onnx_dtype, register


@register("lora_merge")
def _lora_merge(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    """base + scale * (b2 @ a2) reshaped to the base's shape, with b2 = b as (out, r) and a2 = a as (r, -1)."""
    base, a, b = node.inputs
    rank = a.shape[0]
    delta = e.emit("MatMul", [e.emit("Reshape", [ins[2], e.ints([base.shape[0], rank])]),
                              e.emit("Reshape", [ins[1], e.ints([rank, -1])])])
    delta = e.emit("Reshape", [delta, e.ints(base.shape)])
    e.emit("Add", [ins[0], e.emit("Mul", [delta, e.const(node.attr["scale"], base.dtype)])], outs)


@register("dequantize")
def _dequantize(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    _dequantized(e, node.attr, ins, node.inputs[1].shape[0], outs)


def _dequantized(e: OnnxBuilder, attrs, ins: list[str], blocks: int, outs: list[str]) -> None:
    """The dequantize op's value written to `outs` from the codes and scales `ins` (`blocks` scales)."""
    scheme, shape = attrs["scheme"], attrs["shape"]
    codes, scales = ins
    if scheme in ("int8", "int8-tensor"):
        per_row = [shape[0]] + [1] * (len(shape) - 1) if scheme == "int8" else []
        values = e.emit("Cast", [codes], to=onnx_dtype(float32))
        e.emit("Mul", [values, e.emit("Reshape", [scales, e.ints(per_row)])], outs)
        return
    count = math.prod(shape)
    values = e.emit("Gather", [e.const(np.asarray(LEVELS[scheme]), float32, hint="levels"), _nibbles(e, codes, count)])
    spread = e.emit("Expand", [e.emit("Unsqueeze", [scales, e.ints([-1])]), e.ints([blocks, attrs["block_size"]])])
    per_element = _first(e, e.emit("Reshape", [spread, e.ints([-1])]), count)
    e.emit("Reshape", [e.emit("Mul", [values, per_element]), e.ints(shape)], outs)


def _nibbles(e: OnnxBuilder, codes: str, count: int) -> str:
    """The `count` 4-bit indices held two per byte, low nibble first (ir.ops.reparam.unpack_nibbles)."""
    wide = e.emit("Cast", [codes], to=onnx_dtype(int64))
    sixteen = e.ints([16])
    low = e.emit("Unsqueeze", [e.emit("Mod", [wide, sixteen]), e.ints([-1])])
    high = e.emit("Unsqueeze", [e.emit("Div", [wide, sixteen]), e.ints([-1])])
    pairs = e.emit("Concat", [low, high], axis=-1)
    return _first(e, e.emit("Reshape", [pairs, e.ints([-1])]), count)


def _first(e: OnnxBuilder, flat: str, count: int) -> str:
    return e.emit("Slice", [flat, e.ints([0]), e.ints([count]), e.ints([0])])


@register("quantized_linear")
def _quantized_linear(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    """x @ dequantize(codes, scales)^T."""
    weight = e.temp("weight")
    _dequantized(e, node.attr, ins[1:], node.inputs[2].shape[0], [weight])
    e.emit("MatMul", [ins[0], e.emit("Transpose", [weight], perm=[1, 0])], outs)
