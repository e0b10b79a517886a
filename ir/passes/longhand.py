"""Activations written out longhand, recognized by simplify and replaced by their registered ops.

- softmax: exp(z) / sum(exp(z), axis, keepdim) becomes softmax(x) when z = x - max(x, axis) (the stable form)
  and softmax(z) otherwise (the same function, computed stably);
- log_softmax: z - log(sum(exp(z), axis, keepdim)) likewise, and log(softmax(x));
- gelu: 0.5 * x * (1 + erf(x / sqrt(2))) and 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))), in any
  arrangement of the products, sums and constants (the expression is expanded into a polynomial over x and the
  erf/tanh value and compared coefficient by coefficient, within a relative 1e-6);
- sigmoid and silu: n / (1 + exp(-u)) becomes n * sigmoid(u) (sigmoid(u) when n is 1, silu(u) when n is u),
  and x * sigmoid(x) becomes silu(x).

The reductions may keep their reduced axis (keepdim) or drop it and get it back through a reshape or unsqueeze,
with or without an explicit broadcast_to. Every replacement has exactly the replaced node's type.
"""
from __future__ import annotations

import math
from typing import Iterable

from ..graph import Node, Value
from ..ops.elementwise import GELU_CUBIC, SQRT_2_OVER_PI, SQRT_HALF
from .rewrite import Match, rule

_ARITHMETIC = ("add", "sub", "mul", "div", "neg", "pow")
_MAX_DEPTH = 8
_MAX_DEGREE = 4

Poly = dict[tuple[int, ...], float]


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


# --- reductions over one axis -----------------------------------------------------------------------------------


def _reduction(m: Match, value: Value, op: str) -> tuple[Node, int] | None:
    """(the reduction node, its axis) when `value` is op(t) over one axis of t with that axis kept (keepdim, or
    dropped and restored by a reshape or unsqueeze), possibly broadcast back; None otherwise."""
    broadcast = m.producer(value, "broadcast_to")
    if broadcast is not None:
        value = broadcast.inputs[0]
    restore = m.producer(value, "reshape") or m.producer(value, "unsqueeze")
    node = m.producer(restore.inputs[0] if restore is not None else value, op)
    if node is None:
        return None
    source, axes = node.inputs[0], node.attr["axes"]
    if source.type.rank == 0 or axes is None or len(axes) != 1:
        return None
    axis = axes[0] % source.type.rank
    kept = tuple(1 if i == axis else d for i, d in enumerate(source.shape))
    if node.attr["keepdim"] and restore is None:
        return node, axis
    if not node.attr["keepdim"] and restore is not None and restore.out.shape == kept:
        return node, axis
    return None


def _reduced_axis(m: Match, value: Value, op: str, source: Value) -> int | None:
    """The axis when `value` is op(source) over one kept axis (see _reduction), else None."""
    found = _reduction(m, value, op)
    return found[1] if found is not None and found[0].inputs[0] == source else None


def _unshifted(m: Match, z: Value, axis: int) -> Value:
    """x when z = x - max(x) over `axis`, else z itself."""
    sub = m.producer(z, "sub")
    if sub is not None and _reduced_axis(m, sub.inputs[1], "max", sub.inputs[0]) == axis:
        return sub.inputs[0]
    return z


def _axis_attr(axis: int, rank: int) -> int:
    return -1 if axis == rank - 1 else axis


def _replace(m: Match, op: str, x: Value, **attrs: object) -> Value | None:
    """op(x) when it has the node's type, else None."""
    return m.e.bind(op, [x], dict(attrs)) if x.type == m.node.out.type else None


@rule("div")
def softmax_longhand(m: Match) -> Value | None:
    num, den = m.node.inputs
    exp = m.producer(num, "exp")
    if exp is None:
        return None
    axis = _reduced_axis(m, den, "sum", num)
    if axis is None:
        return None
    x = _unshifted(m, exp.inputs[0], axis)
    return _replace(m, "softmax", x, axis=_axis_attr(axis, x.type.rank))


@rule("sub")
def log_softmax_longhand(m: Match) -> Value | None:
    z, rhs = m.node.inputs
    broadcast = m.producer(rhs, "broadcast_to")
    log = m.producer(broadcast.inputs[0] if broadcast is not None else rhs, "log")
    found = _reduction(m, log.inputs[0], "sum") if log is not None else None
    if found is None:
        return None
    total, axis = found
    exp = m.producer(total.inputs[0], "exp")
    if exp is None or exp.inputs[0] != z:
        return None
    x = _unshifted(m, z, axis)
    return _replace(m, "log_softmax", x, axis=_axis_attr(axis, x.type.rank))


@rule("log")
def log_of_softmax(m: Match) -> Value | None:
    softmax = m.producer(m.node.inputs[0], "softmax")
    return None if softmax is None else _replace(m, "log_softmax", softmax.inputs[0], axis=softmax.attr["axis"])


# --- polynomials over a few atoms ----------------------------------------------------------------------------


def _expand(m: Match, v: Value, atoms: tuple[Value, ...], depth: int = _MAX_DEPTH) -> Poly | None:
    """`v` as a polynomial in `atoms` with scalar-constant coefficients (exponent tuple -> coefficient), or None."""
    for i, atom in enumerate(atoms):
        if v == atom:
            return {tuple(int(j == i) for j in range(len(atoms))): 1.0}
    c = m.scalar(v)
    if c is not None:
        return {(0,) * len(atoms): c}
    node = m.producer(v)
    if node is None or node.op not in _ARITHMETIC or depth == 0:
        return None
    if node.op == "pow":
        n = m.scalar(node.inputs[1])
        base = _expand(m, node.inputs[0], atoms, depth - 1)
        if base is None or n is None or n != int(n) or not 0 <= n <= _MAX_DEGREE:
            return None
        result: Poly | None = {(0,) * len(atoms): 1.0}
        for _ in range(int(n)):
            result = _product(result, base)
        return result
    if node.op == "div":
        c = m.scalar(node.inputs[1])
        top = _expand(m, node.inputs[0], atoms, depth - 1)
        return None if top is None or not c else {k: a / c for k, a in top.items()}
    parts = [_expand(m, u, atoms, depth - 1) for u in node.inputs]
    if any(p is None for p in parts):
        return None
    if node.op == "neg":
        return {k: -a for k, a in parts[0].items()}
    if node.op == "mul":
        return _product(parts[0], parts[1])
    sign = -1.0 if node.op == "sub" else 1.0
    total = dict(parts[0])
    for k, a in parts[1].items():
        total[k] = total.get(k, 0.0) + sign * a
    return total


def _product(p: Poly | None, q: Poly | None) -> Poly | None:
    if p is None or q is None:
        return None
    out: Poly = {}
    for kp, a in p.items():
        for kq, b in q.items():
            k = tuple(x + y for x, y in zip(kp, kq))
            if sum(k) > _MAX_DEGREE:
                return None
            out[k] = out.get(k, 0.0) + a * b
    return out


def _equals(p: Poly | None, want: Poly) -> bool:
    if p is None:
        return False
    keys = {k for k, a in p.items() if a != 0.0} | set(want)
    return all(_close(p.get(k, 0.0), want.get(k, 0.0)) for k in keys)


def _find(m: Match, v: Value, ops: Iterable[str], depth: int = _MAX_DEPTH) -> list[Node]:
    """Nodes applying one of `ops` inside the arithmetic expression of `v`."""
    node = m.producer(v)
    if node is None or depth == 0:
        return []
    if node.op in ops:
        return [node]
    if node.op not in _ARITHMETIC:
        return []
    return [n for u in node.inputs for n in _find(m, u, ops, depth - 1)]


def _atoms(m: Match, v: Value, depth: int = _MAX_DEPTH) -> set[Value]:
    """The non-constant values at the leaves of the arithmetic expression of `v`."""
    if m.scalar(v) is not None:
        return set()
    node = m.producer(v)
    if node is None or node.op not in _ARITHMETIC or depth == 0:
        return {v}
    return {a for u in node.inputs for a in _atoms(m, u, depth - 1)}


# --- gelu, sigmoid, silu -------------------------------------------------------------------------------------


_GELU_INNER = {"erf": ("none", {(1,): SQRT_HALF}),
               "tanh": ("tanh", {(1,): SQRT_2_OVER_PI, (3,): SQRT_2_OVER_PI * GELU_CUBIC})}


def gelu_longhand(m: Match) -> Value | None:
    """0.5 * x * (1 + f(inner(x))) with f erf or tanh, in any arrangement."""
    out = m.node.out
    for f in _find(m, out, _GELU_INNER):
        argument = f.inputs[0]
        atoms = _atoms(m, argument)
        if len(atoms) != 1:
            continue
        (x,) = atoms
        approximate, inner = _GELU_INNER[f.op]
        if (x.type == out.type and _equals(_expand(m, argument, (x,)), inner)
                and _equals(_expand(m, out, (x, f.out)), {(1, 0): 0.5, (1, 1): 0.5})):
            return m.e.gelu(x, approximate=approximate)
    return None


GELU_RULES = [rule(op)(gelu_longhand) for op in ("mul", "add", "div")]


@rule("div")
def sigmoid_longhand(m: Match) -> Value | None:
    """n / (1 + exp(-u)): silu(u) when n is u, sigmoid(u) when n is 1, else n * sigmoid(u)."""
    n, d = m.node.inputs
    exps = _find(m, d, ("exp",))
    atoms = _atoms(m, exps[0].inputs[0]) if len(exps) == 1 else set()
    if len(atoms) != 1:
        return None
    (u,), e = atoms, exps[0]
    if u.type != d.type or not (_equals(_expand(m, e.inputs[0], (u,)), {(1,): -1.0})
                                and _equals(_expand(m, d, (e.out,)), {(0,): 1.0, (1,): 1.0})):
        return None
    if n == u:
        return m.e.silu(u)
    if m.splat(n) == 1 and u.type == m.node.out.type:
        return m.e.sigmoid(u)
    return m.e.mul(n, m.e.sigmoid(u))


@rule("mul")
def silu_longhand(m: Match) -> Value | None:
    x, y = m.node.inputs
    for a, b in ((x, y), (y, x)):
        s = m.producer(b, "sigmoid")
        if s is not None and s.inputs[0] == a and a.type == m.node.out.type:
            return m.e.silu(a)
    return None


LONGHAND_RULES = [softmax_longhand, log_softmax_longhand, log_of_softmax, *GELU_RULES, sigmoid_longhand,
                  silu_longhand]
