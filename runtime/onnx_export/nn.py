"""ONNX rules for convolution, pooling and normalization (ir/ops/conv.py, pool.py, norm.py), all NCHW as in
ONNX; braze's symmetric (top, left) paddings become ONNX's (top, left, bottom, right)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from braze.ir.graph import Node
from braze.ir.ops.pool import adaptive_matrix

from .builder import OnnxBuilder, register


def _pads(padding: tuple[int, ...]) -> list[int]:
    return [*padding, *padding]


@register("conv2d")
def _conv2d(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    a = node.attr
    e.emit("Conv", ins, outs, kernel_shape=list(node.inputs[1].shape[2:]), strides=list(a["stride"]),
           pads=_pads(a["padding"]), dilations=list(a["dilation"]), group=a["groups"])


def _batched(e: OnnxBuilder, node: Node, x: str, out: str, pool: Callable[[str, str], None]) -> None:
    """Apply `pool(x, out)` to an (N, C, H, W) operand; an unbatched (C, H, W) one gains and loses the N axis."""
    if node.inputs[0].type.rank == 4:
        pool(x, out)
        return
    batched = e.temp("pooled")
    pool(e.emit("Unsqueeze", [x, e.ints([0])]), batched)
    e.emit("Squeeze", [batched, e.ints([0])], [out])


_POOLS = {"max_pool2d": "MaxPool", "avg_pool2d": "AveragePool"}


@register(*_POOLS)
def _pool2d(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    a = node.attr
    attrs = dict(kernel_shape=list(a["kernel_size"]), strides=list(a["stride"]), pads=_pads(a["padding"]),
                 ceil_mode=int(a["ceil_mode"]))
    if node.op == "max_pool2d":
        attrs["dilations"] = list(a["dilation"])
    else:
        attrs["count_include_pad"] = int(a["count_include_pad"])
    _batched(e, node, ins[0], outs[0], lambda x, out: e.emit(_POOLS[node.op], [x], [out], **attrs))


@register("adaptive_avg_pool2d")
def _adaptive_avg_pool2d(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    """AveragePool when the bins tile the input evenly; otherwise rows @ x @ cols.T with the registry's
    averaging matrices of torch's bins."""
    x, out = node.inputs[0], node.attr["output_size"]
    size = x.shape[-2:]
    if all(s % o == 0 for s, o in zip(size, out)):
        kernel = [s // o for s, o in zip(size, out)]
        _batched(e, node, ins[0], outs[0], lambda v, result: e.emit(
            "AveragePool", [v], [result], kernel_shape=kernel, strides=kernel))
        return
    rows = e.const(adaptive_matrix(size[0], out[0], x.dtype.numpy), x.dtype, hint="bins")
    cols = e.const(adaptive_matrix(size[1], out[1], x.dtype.numpy).T, x.dtype, hint="bins")
    e.emit("MatMul", [e.emit("MatMul", [rows, ins[0]]), cols], outs)


@register("layer_norm")
def _layer_norm(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    shape = node.attr["normalized_shape"]
    x = node.inputs[0]
    scale = ins[1] if len(ins) > 1 else e.const(np.ones(shape), x.dtype, hint="ones")
    e.emit("LayerNormalization", [ins[0], scale, *ins[2:]], outs, axis=-len(shape), epsilon=node.attr["eps"])


@register("batch_norm")
def _batch_norm(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    x, mean, var, weight, bias = ins
    e.emit("BatchNormalization", [x, weight, bias, mean, var], outs, epsilon=node.attr["eps"])
