"""simplify: algebraic identities and movement chains, then longhand activations recognized (ir/passes/longhand.py).

Identities: x*1, 1*x, x+0, 0+x, x-0 and x/1 become x (when x already has the result's type: a constant that
broadcasts x to a larger shape is not an identity; x+0 would turn -0.0 into 0.0, a difference no comparison
sees); neg(neg(x)) becomes x; where(c, a, b) with a constant condition becomes the chosen branch.

Movement: transpose of transpose composes the permutations (an identity permutation disappears); chains of
reshape/squeeze/unsqueeze become one reshape (none when the shape comes back); broadcast_to of broadcast_to
becomes one broadcast_to; broadcast_to, reshape, squeeze, unsqueeze and transpose that change nothing and
cast to the operand's own dtype disappear. The transpose of a matrix product of which one factor is a transpose
becomes the product of the transposed factors in swapped order (the VJP of matmul(x, transpose(w)) writes a weight
gradient that way), when nothing else reads the product. A batch sum of products of transposed batches becomes one
product of the flattened batches (a linear layer's weight gradient over a batch of sequences).

The linear form: matmul(x, transpose(w)) with w a matrix becomes linear(x, w), which reads the weight as stored,
(out, in); the transpose goes when nothing else reads it. The IR then says that the GEMM reads a weight stored
transposed, and codegen compiles exactly that: a param's is packed once at load, any other w's by the GEMM's own
packing, which transposes it on the way. With w a graph input (x @ y.T, 512 x 768 by 3072 x 768, one thread of an
AVX-512 Xeon) a transpose kernel copied it first: 17.1 ms against 12.7 read in place (torch 12.6).
"""
from __future__ import annotations

from collections import Counter

from ..graph import Graph, Value
from .longhand import LONGHAND_RULES
from .manager import PassContext, register_pass
from .rewrite import Match, Rule, apply_rules, rule

_SHAPE_OPS = ("reshape", "squeeze", "unsqueeze")


def _unit(m: Match, keep: Value, other: Value, unit: float) -> Value | None:
    """`keep` when `other` is a constant of `unit`s and `keep` already has the node's result type."""
    return keep if m.splat(other) == unit and keep.type == m.node.out.type else None


@rule("mul")
def multiply_by_one(m: Match) -> Value | None:
    x, y = m.node.inputs
    return _unit(m, x, y, 1) or _unit(m, y, x, 1)


@rule("add")
def add_zero(m: Match) -> Value | None:
    x, y = m.node.inputs
    return _unit(m, x, y, 0) or _unit(m, y, x, 0)


@rule("sub")
def subtract_zero(m: Match) -> Value | None:
    x, y = m.node.inputs
    return _unit(m, x, y, 0)


@rule("div")
def divide_by_one(m: Match) -> Value | None:
    x, y = m.node.inputs
    return _unit(m, x, y, 1)


@rule("neg")
def double_negation(m: Match) -> Value | None:
    inner = m.producer(m.node.inputs[0], "neg")
    return inner.inputs[0] if inner is not None else None


@rule("where")
def select_constant_condition(m: Match) -> Value | None:
    """where(c, a, b) with c a constant that is all true (all false) is a (b), broadcast to the result's shape."""
    cond, a, b = m.node.inputs
    picked = m.splat(cond)
    if picked is None:
        return None
    chosen, out = (a if picked else b), m.node.out
    return chosen if chosen.shape == out.shape else m.e.broadcast_to(chosen, shape=out.shape)


@rule("transpose")
def compose_transposes(m: Match) -> Value | None:
    (x,) = m.node.inputs
    perm = m.node.attr["perm"]
    if perm == tuple(range(len(perm))):
        return x
    inner = m.producer(x, "transpose")
    if inner is None:
        return None
    # result axis i is inner's axis perm[i], which is the source's axis inner_perm[perm[i]]
    composed = tuple(inner.attr["perm"][p] for p in perm)
    source = inner.inputs[0]
    return source if composed == tuple(range(len(perm))) else m.e.transpose(source, perm=composed)


def _reshape_chain(m: Match) -> Value | None:
    (x,) = m.node.inputs
    out = m.node.out
    if x.type == out.type:
        return x
    inner = next((n for n in (m.producer(x, op) for op in _SHAPE_OPS) if n is not None), None)
    if inner is None:
        return None
    source = inner.inputs[0]
    return source if source.type == out.type else m.e.reshape(source, shape=out.shape)


SHAPE_RULES = [Rule(op, _reshape_chain, f"{op}_chain") for op in _SHAPE_OPS]


@rule("broadcast_to")
def broadcast_chain(m: Match) -> Value | None:
    (x,) = m.node.inputs
    if x.type == m.node.out.type:
        return x
    inner = m.producer(x, "broadcast_to")
    return None if inner is None else m.e.broadcast_to(inner.inputs[0], shape=m.node.out.shape)


@rule("matmul")
def linear_weight(m: Match) -> Value | None:
    """matmul(x, transpose(w)) with w a matrix is linear(x, w)."""
    x, y = m.node.inputs
    t = m.producer(y, "transpose")
    if t is None or t.attr["perm"] != (1, 0):
        return None
    return m.e.linear(x, t.inputs[0])


@rule("transpose")
def transposed_product(m: Match) -> Value | None:
    """transpose(matmul(a, b)) of matrices, a or b itself a transpose and the product read only here, is
    matmul(transpose(b), transpose(a)): one transpose cancels and the product's own (often the largest, a weight
    gradient's) goes."""
    (x,) = m.node.inputs
    product = m.producer(x, "matmul")
    if product is None or m.node.attr["perm"] != (1, 0) or m.use_count(x) != 1:
        return None
    a, b = product.inputs
    if a.type.rank != 2 or b.type.rank != 2 or not (m.producer(a, "transpose") or m.producer(b, "transpose")):
        return None
    return m.e.matmul(m.e.transpose(b, perm=(1, 0)), m.e.transpose(a, perm=(1, 0)))


@rule("sum")
def batched_product_sum(m: Match) -> Value | None:
    """sum over the batch of matmul(transpose(x), g), x (B, S, M) and g (B, S, N) read only here, is one product
    of the flattened batches, transpose(x') (M, B*S) @ g' (B*S, N): the batch sums inside the GEMM's K instead of
    B products of K = S written out and added (the weight gradient of a linear layer on a batch of sequences)."""
    (y,) = m.node.inputs
    product = m.producer(y, "matmul")
    if product is None or m.node.attr["axes"] != (0,) or y.type.rank != 3 or m.use_count(y) != 1 \
            or m.node.out.dtype != y.dtype:
        return None
    a, g = product.inputs
    t = m.producer(a, "transpose")
    if t is None or t.attr["perm"] != (0, 2, 1) or g.type.rank != 3 or g.shape[0] != a.shape[0]:
        return None
    (x,) = t.inputs
    rows = x.shape[0] * x.shape[1]
    flat = m.e.matmul(m.e.transpose(m.e.reshape(x, shape=(rows, x.shape[2])), perm=(1, 0)),
                      m.e.reshape(g, shape=(rows, g.shape[2])))
    return m.e.reshape(flat, shape=m.node.out.shape) if m.node.attr.get("keepdim", False) else flat


@rule("cast")
def cast_to_same_dtype(m: Match) -> Value | None:
    (x,) = m.node.inputs
    return x if x.type == m.node.out.type else None


ALGEBRA_RULES = [multiply_by_one, add_zero, subtract_zero, divide_by_one, double_negation, select_constant_condition,
                 compose_transposes, transposed_product, batched_product_sum, *SHAPE_RULES, broadcast_chain,
                 linear_weight, cast_to_same_dtype]


@register_pass("simplify")
def simplify(graph: Graph, ctx: PassContext) -> Graph:
    """Apply the identities, movement rules and longhand recognizers to a fixed point."""
    fired: Counter[str] = Counter()
    result = apply_rules(graph, ALGEBRA_RULES + LONGHAND_RULES, fired=fired)
    if fired:
        ctx.note("rewrote: " + ", ".join(f"{name} x{count}" for name, count in sorted(fired.items())))
    return result
