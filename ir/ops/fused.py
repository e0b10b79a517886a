"""The fusion region: one node holding a nested graph (its body) that codegen compiles into one kernel.

`fused` is formed by the fuse pass (ir/passes/fuse.py) for inference graphs. Its operands are the region's
external inputs in the order of the body's inputs and its results are the body's outputs, so a fused node has as
many results as its body has outputs (the registry's `num_results` of 1 describes the common single-output case).
`kind` tells codegen which kernel family to build, and `shape` and `axes` state the region's domain, so codegen
reads it instead of re-deriving it from the body:
- "elementwise": elementwise ops and broadcasts over the iteration space `shape` (every result has that shape),
  which may read their operands through view ops (slices, transposes, reshapes) of the region's inputs;
- "reduction": reductions of operands of shape `shape` over `axes`, with their elementwise producers and
  consumers (every reducing node of the body has exactly that domain);
- "gemm" / "conv": an op anchoring that kernel family (the registry's `anchor` trait: matmul or linear, conv2d) as
  the body's first computing node, followed by an elementwise epilogue; `shape` is the anchor's result shape;
- "attention": one `attention` node with movement ops that are strided views (the registry's `view` trait) before
  it and after it; `shape` is the attention's result shape;
- "movement": view ops ending in one more or in a join (the registry's `joins` trait: concat, stack), whose result
  is the region's one result, of shape `shape`: one strided copy per operand of the last op.
`axes` is empty except for reductions. The body holds no param or flag leaves (they stay outside and arrive as
operands); scalar constants may be inside.
The reference implementation interprets the body, so the interpreter and constant folding need nothing special.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..attrs import AttrSpec
from ..errors import DTypeError, ShapeError
from ..graph import Graph
from ..interpret import interpret
from ..registry import defop, get_op, is_leaf, reduction_domain
from ..rows import cut_rows
from ..types import TensorType

FUSION_KINDS = ("elementwise", "reduction", "gemm", "conv", "attention", "movement")


def _check_body(kind: str, body: Graph) -> None:
    outside = sorted({n.op for n in body.nodes if is_leaf(n) and n.op != "constant"})
    if outside:
        raise ShapeError(f"fused: the body of @{body.name} holds {' and '.join(outside)} leaves; "
                         f"params and flags stay outside a region and arrive as operands")
    if not body.outputs:
        raise ShapeError(f"fused: the body of @{body.name} has no outputs")
    computing = [n for n in body.nodes if not is_leaf(n)]
    if kind == "attention":
        ops = [n.op for n in computing]
        others = sorted({op for op in ops if op != "attention" and get_op(op).view is None})
        if ops.count("attention") != 1 or others:
            raise ShapeError(f"fused: an attention region's body holds one attention op and view ops (slice, "
                             f"reshape, transpose), but @{body.name} holds {', '.join(ops) or 'nothing'}")
        return
    if kind == "movement":
        last = computing[-1] if computing else None
        if last is None or any(get_op(n.op).view is None for n in computing[:-1]) or not (
                get_op(last.op).joins or get_op(last.op).view is not None) or list(body.outputs) != list(last.outputs):
            raise ShapeError(f"fused: a movement region's body holds view ops (slice, reshape, transpose) ending in "
                             f"one more or in a join (concat, stack) whose result it returns, but @{body.name} holds "
                             f"{', '.join(n.op for n in computing) or 'nothing'}")
        return
    if kind in ("gemm", "conv") and (not computing or get_op(computing[0].op).anchor != kind):
        first = computing[0].op if computing else "nothing"
        raise ShapeError(f"fused: a {kind} region's body starts with an op anchoring {kind} kernels, but "
                         f"@{body.name} starts with {first}")


def _check_domain(kind: str, body: Graph, shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
    """The stated domain is the one the body computes (see the module docstring)."""
    where = f"fused: the {kind} region @{body.name} states domain {list(shape)} over axes {list(axes)}"
    if kind == "reduction":
        domains = {reduction_domain(n) for n in body.nodes} - {None}
        if domains != {(shape, axes)}:
            found = ", ".join(f"{list(s)} over {list(a)}" for s, a in sorted(domains)) or "none"
            raise ShapeError(f"{where}, but its reductions have domain(s) {found}")
        return
    if axes:
        raise ShapeError(f"{where}; only reduction regions reduce")
    if kind == "elementwise":
        wrong = [v for v in body.outputs if v.shape != shape]
    elif kind == "attention":
        wrong = [v for n in body.nodes if n.op == "attention" for v in n.outputs if v.shape != shape]
    elif kind == "movement":
        wrong = [v for v in body.outputs if v.shape != shape]
    else:
        wrong = [v for v in next(n for n in body.nodes if not is_leaf(n)).outputs if v.shape != shape]
    if wrong:
        raise ShapeError(f"{where}, but %{wrong[0].name} has shape {list(wrong[0].shape)}")


def _fused_infer(*operands: TensorType, kind: str, body: Graph, shape: tuple[int, ...],
                 axes: tuple[int, ...]) -> tuple[TensorType, ...]:
    _check_body(kind, body)
    _check_domain(kind, body, shape, axes)
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


def _fused_impl(*arrays: np.ndarray, kind: str, body: Graph, shape: tuple[int, ...], axes: tuple[int, ...]) -> Any:
    return interpret(body, arrays)


def _fused_work(node) -> int:
    return sum(get_op(n.op).work_estimate(n) for n in node.attr["body"].nodes)


def _fused_rows(node, carried: tuple[bool, ...], rows: int):
    """Row by row when the body is, every result carrying rows: the body cut to the chunk, the domain's first
    axis with it when that is the batch's."""
    batch = next(v.shape[0] for v, c in zip(node.inputs, carried) if c and v.shape)
    cut = cut_rows(node.attr["body"], carried, batch, rows)
    if cut is None or not all(cut[1]):
        return None
    shape = tuple(node.attr["shape"])
    return {**node.attr, "body": cut[0], "shape": (rows, *shape[1:]) if shape[:1] == (batch,) else shape}


fused = defop(
    "fused", ("*xs",), infer=_fused_infer, impl=_fused_impl, vjp=None,
    attrs=(AttrSpec("kind", "str", choices=FUSION_KINDS), AttrSpec("body", "graph"), AttrSpec("shape", "shape"),
           AttrSpec("axes", "ints", ())),
    work=_fused_work, rows=_fused_rows,
    doc="A fusion region: the nested graph `body` applied to the operands over the domain `shape` (reduced over "
        "`axes`); one result per body output.")
