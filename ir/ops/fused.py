"""The fusion region: one node holding a nested graph (its body) that codegen compiles into one kernel.

`fused` is formed by the fuse pass (ir/passes/fuse.py) for inference graphs. Its operands are the region's
external inputs in the order of the body's inputs and its results are the body's outputs, so a fused node has as
many results as its body has outputs (the registry's `num_results` of 1 describes the common single-output case).
`kind` tells codegen which kernel family to build:
- "elementwise": elementwise ops and broadcasts over one iteration space;
- "reduction": reductions over one set of axes of one shape, with their elementwise producers and consumers;
- "gemm" / "conv": a matmul / conv2d as the body's first computing node, followed by an elementwise epilogue.
The body holds no param or flag leaves (they stay outside and arrive as operands); scalar constants may be inside.
The reference implementation interprets the body, so the interpreter and constant folding need nothing special.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..attrs import AttrSpec
from ..errors import DTypeError, ShapeError
from ..graph import Graph
from ..interpret import interpret
from ..registry import defop
from ..types import TensorType

FUSION_KINDS = ("elementwise", "reduction", "gemm", "conv")

# The op a gemm or conv body starts with.
_ANCHOR = {"gemm": "matmul", "conv": "conv2d"}
_LEAVES = ("param", "flag", "constant")


def _check_body(kind: str, body: Graph) -> None:
    outside = sorted({n.op for n in body.nodes if n.op in ("param", "flag")})
    if outside:
        raise ShapeError(f"fused: the body of @{body.name} holds {' and '.join(outside)} leaves; "
                         f"params and flags stay outside a region and arrive as operands")
    if not body.outputs:
        raise ShapeError(f"fused: the body of @{body.name} has no outputs")
    computing = [n.op for n in body.nodes if n.op not in _LEAVES]
    anchor = _ANCHOR.get(kind)
    if anchor is not None and (not computing or computing[0] != anchor):
        first = computing[0] if computing else "nothing"
        raise ShapeError(f"fused: a {kind} region's body starts with {anchor}, but @{body.name} starts with {first}")


def _fused_infer(*operands: TensorType, kind: str, body: Graph) -> tuple[TensorType, ...]:
    _check_body(kind, body)
    expected = [v.type for v in body.inputs]
    if len(operands) != len(expected):
        raise ShapeError(f"fused: {len(operands)} operand(s) for a body taking {len(expected)} input(s) "
                         f"({', '.join(map(str, expected))})")
    for k, (got, want) in enumerate(zip(operands, expected)):
        if got.shape != want.shape:
            raise ShapeError(f"fused: operand {k} is {got}, the body's input %{body.inputs[k].name} is {want}")
        if got.dtype != want.dtype:
            raise DTypeError(f"fused: operand {k} is {got}, the body's input %{body.inputs[k].name} is {want}")
    return tuple(v.type for v in body.outputs)


def _fused_impl(*arrays: np.ndarray, kind: str, body: Graph) -> Any:
    return interpret(body, arrays)


fused = defop(
    "fused", ("*xs",), infer=_fused_infer, impl=_fused_impl, vjp=None,
    attrs=(AttrSpec("kind", "str", choices=FUSION_KINDS), AttrSpec("body", "graph")),
    doc="A fusion region: the nested graph `body` applied to the operands; one result per body output.")
