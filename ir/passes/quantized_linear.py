"""Packed linear weights, the option quantized_weights="packed" of fold_reparameterizations: a linear layer whose
weight is dequantized from packed codes and scales reads them packed, so the compiled kernel dequantizes inside
its loop and no dense float32 copy of the weight exists at run time.

    matmul(x, transpose(dequantize(codes, scales))) -> quantized_linear(x, codes, scales)
    linear(x, dequantize(codes, scales))            -> quantized_linear(x, codes, scales)

(the dequantize's scheme, block_size and shape carry over; the weight must be a matrix). A dequantize some other
node still reads stays for that reader. quantized_weights="dense" (the default) leaves the graph as it is: each
dequantize node writes its dense weight on every call and the GEMM reads that.

fold_reparameterizations applies this rewrite last, to the dequantize nodes it kept: a bare quantized weight is
kept under policy "auto" or "keep", a QLoRA base under "keep" (or "auto" where keeping is cheaper), with its
low-rank path computed beside it.
"""
from __future__ import annotations

from ..errors import BrazeError
from ..graph import Graph, Value
from ..types import float32
from .manager import PassContext
from .rewrite import Match, apply_rules, rule

MODES = ("dense", "packed")


def _packed(m: Match, x: Value, weight: Value) -> Value | None:
    """quantized_linear(x, codes, scales) when `weight` is dequantize(codes, scales) of a matrix."""
    d = m.producer(weight, "dequantize")
    if d is None or len(d.attr["shape"]) != 2 or x.dtype != float32 or not x.shape:
        return None
    return m.e.quantized_linear(x, *d.inputs, scheme=d.attr["scheme"], block_size=d.attr["block_size"],
                                shape=d.attr["shape"])


@rule("matmul")
def packed_matmul(m: Match) -> Value | None:
    """matmul(x, transpose(dequantize(c, s))) is quantized_linear(x, c, s)."""
    x, y = m.node.inputs
    t = m.producer(y, "transpose")
    return _packed(m, x, t.inputs[0]) if t is not None and t.attr["perm"] == (1, 0) else None


@rule("linear")
def packed_linear(m: Match) -> Value | None:
    """linear(x, dequantize(c, s)) is quantized_linear(x, c, s)."""
    return _packed(m, *m.node.inputs)


def pack_linear_weights(graph: Graph, ctx: PassContext) -> Graph:
    """Read dequantized linear weights packed (option quantized_weights="packed"); the report counts them."""
    mode = ctx.option("quantized_weights", "dense")
    if mode not in MODES:
        raise BrazeError(f"fold_reparameterizations: quantized_weights must be one of {', '.join(MODES)}, "
                         f"got {mode!r}")
    if mode == "dense":
        return graph
    result = apply_rules(graph, [packed_matmul, packed_linear])
    count = sum(n.op == "quantized_linear" for n in result.nodes) - \
        sum(n.op == "quantized_linear" for n in graph.nodes)
    ctx.note(f"{count} linear layer(s) read their weight packed")
    return result
