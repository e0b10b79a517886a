"""fuse_attention: scaled dot-product attention written as a chain of ops becomes one `attention` node
(ir/ops/attention.py), which codegen compiles into a kernel that never stores the (L, S) scores.

The chain, read from its last matmul back (each step optional unless said otherwise):

    matmul(q [* c | / c], transpose(k))      the scores; q scaled by a scalar constant (torch's MultiheadAttention)
    * c | / c                                 a scalar constant scale
    + mask                                    a float mask, added before any bool mask
    where(keep, ., -inf) | where(drop, -inf, .)
                                              bool masks (masked_fill writes the second form), up to MAX_MASKS steps
                                              in any order: one that is a constant causal mask (torch.tril of ones)
                                              becomes causal=True, the others are and-ed into the op's mask
    softmax(axis=-1)                          required
    matmul(., v)                              required

k^T may be any transpose (one whose permutation, with its last two entries swapped, gives k's layout) or any
value (k is then its transpose). q, k and v need equal batch axes and a float dtype. Every intermediate value
(the scores, each scaled or masked form, the softmax) must have no reader but the next step, so nothing the chain
computed is lost; a chain with dropout between softmax and matmul (training), a softmax over another axis, or a
float mask added after a bool one (-inf + inf is NaN, not -inf) is no attention of the op's form and stays as it
is. A drop mask becomes its keep mask: eq(x, y) becomes ne(x, y) (and the reverse), any other eq(drop, false).
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from ..graph import Graph, Node, Value
from ..ops.attention import causal_keep
from ..types import bool_
from .manager import PassContext, register_pass
from .rewrite import Match, apply_rules, rule


# The ops that compute scores on the way from the matmul to the softmax: the operand of a mask add that is one of
# them holds the scores, the other the mask.
_SCORE_OPS = ("matmul", "mul", "div", "where", "add")
# A drop mask that is a comparison becomes its keep mask as the opposite comparison (NaN compares alike in both).
_NEGATED = {"eq": "ne", "ne": "eq"}
MAX_MASKS = 4  # masking steps looked through


def _only_reader(m: Match, value: Value, op: str) -> Node | None:
    """The node defining `value` when it applies `op` and `value` has exactly one reader."""
    node = m.producer(value, op)
    return node if node is not None and m.use_count(value) == 1 else None


def _scaled(m: Match, value: Value) -> tuple[Value, float]:
    """(x, c) when `value` is x * c, c * x or x / c with c a scalar constant and x of value's type; else (value, 1)."""
    node = m.producer(value)
    if node is None or node.op not in ("mul", "div") or m.use_count(value) != 1:
        return value, 1.0
    x, y = node.inputs
    pairs = ((x, y), (y, x)) if node.op == "mul" else ((x, y),)
    for inner, constant in pairs:
        c = m.scalar(constant) if constant.shape == () else None
        if c is not None and c != 0 and inner.type == value.type:
            return inner, c if node.op == "mul" else 1.0 / c
    return value, 1.0


def _is_causal(keep: np.ndarray | None, shape: tuple[int, ...]) -> bool:
    """Whether a constant keep mask is the causal mask of scores of `shape`, broadcast over the batch axes."""
    if keep is None or keep.ndim < 2 or keep.shape[-2:] != shape[-2:] or any(d != 1 for d in keep.shape[:-2]):
        return False
    return bool(np.array_equal(keep.reshape(shape[-2:]), causal_keep(*shape[-2:])))


def _mask_step(m: Match, value: Value) -> tuple[Value, str, Value | np.ndarray] | None:
    """(scores before the step, kind, mask) when `value` is a masking step: kind "float" (mask added), "keep"
    (bool mask, True keeps) or "drop" (bool mask, True drops), the mask as a value or, when constant, its array."""
    node = m.producer(value)
    if node is None or m.use_count(value) != 1:
        return None
    if node.op == "add":
        x, y = sorted(node.inputs, key=lambda u: m.producer(u) is None or m.producer(u).op not in _SCORE_OPS)
        return (x, "float", y) if x.type == value.type else None
    if node.op != "where":
        return None
    cond, a, b = node.inputs
    for scores, fill, kind in ((a, b, "keep"), (b, a, "drop")):
        if scores.type == value.type and m.splat(fill) == -np.inf:
            array = m.constant(cond)
            if array is None:
                return scores, kind, cond
            return scores, "keep", array if kind == "keep" else ~array
    return None


def _masks(m: Match, value: Value) -> tuple[Value, bool, Value | None] | None:
    """(scores before masking, causal, the mask in the op's form or None), or None when the masking steps are not
    bool masks (in any order: each turns scores to -inf) over at most one float mask added first."""
    causal, keeps, added = False, [], None
    for _ in range(MAX_MASKS):
        step = _mask_step(m, value)
        if step is None or added is not None:
            break
        value, kind, operand = step
        if isinstance(operand, np.ndarray):
            if not causal and _is_causal(operand, value.shape):
                causal = True
                continue
            operand = m.e.constant(operand)
        if kind == "float":
            added = operand
        else:
            keeps.append(_keep_mask(m, kind, operand))
    if _mask_step(m, value) is not None:
        return None
    if added is not None and keeps:
        return None  # -inf + mask is NaN where the mask is +inf: not the op's order of steps
    mask = added
    for keep in keeps:
        mask = keep if mask is None else m.e.mul(mask, keep)
    return value, causal, mask


def _keep_mask(m: Match, kind: str, mask: Value) -> Value:
    """A mask in the op's form: float masks as they are, bool masks keeping where True."""
    if kind != "drop":
        return mask
    test = m.producer(mask)
    if test is not None and test.op in _NEGATED:
        x, y = test.inputs
        if x.dtype == bool_ and m.splat(y) is False and test.op == "eq":
            return x
        return m.e.bind(_NEGATED[test.op], [x, y], {})
    return m.e.eq(mask, m.e.constant(np.asarray(False)))


def _key(m: Match, kt: Value) -> Value:
    """k (..., S, E) from its transpose k^T (..., E, S)."""
    rank = kt.type.rank
    swap = tuple(range(rank - 2)) + (rank - 1, rank - 2)
    t = m.producer(kt, "transpose")
    if t is None:
        return m.e.transpose(kt, perm=swap)
    perm = tuple(t.attr["perm"][p] for p in swap)
    return t.inputs[0] if perm == tuple(range(rank)) else m.e.transpose(t.inputs[0], perm=perm)


@rule("matmul")
def attention_chain(m: Match) -> Value | None:
    """softmax(scores) @ v with the scores a chain described in the module doc."""
    p, v = m.node.inputs
    softmax = _only_reader(m, p, "softmax")
    if softmax is None or p.type.rank < 2 or softmax.attr["axis"] not in (-1, p.type.rank - 1):
        return None
    masked = _masks(m, softmax.inputs[0])
    if masked is None:
        return None
    value, causal, mask = masked
    raw, scale = _scaled(m, value)
    scores = _only_reader(m, raw, "matmul")
    if scores is None:
        return None
    q, q_scale = _scaled(m, scores.inputs[0])
    kt = scores.inputs[1]
    if not (q.dtype.is_float and q.type.rank == kt.type.rank == v.type.rank >= 2
            and q.shape[:-2] == kt.shape[:-2] == v.shape[:-2]):
        return None
    operands = [q, _key(m, kt), v] + ([mask] if mask is not None else [])
    return m.e.attention(*operands, scale=scale * q_scale, causal=causal)


@register_pass("fuse_attention")
def fuse_attention(graph: Graph, ctx: PassContext) -> Graph:
    """Replace every attention chain (see the module doc) by one attention node."""
    fired: Counter[str] = Counter()
    result = apply_rules(graph, [attention_chain], fired=fired)
    if fired:
        ctx.note(f"{fired['attention_chain']} attention chain(s) fused")
    return result
