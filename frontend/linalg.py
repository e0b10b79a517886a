"""Matrix products with torch's names: bmm, addmm, baddbmm, outer and einsum, each written with matmul, mul, sum and
movement ops (so they trace and compile as those do).

einsum contracts two operands as one batched matmul (batch, free and summed letters each merged into one dim) and
more operands pairwise from the left; a letter that appears in only one operand and not in the result is summed
first.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from braze.ir.errors import ShapeError

from .functions import add, matmul, mul, sum
from .movement import permute, reshape
from .promotion import as_tensor
from .tensor import Tensor


def bmm(input: Tensor, mat2: Tensor) -> Tensor:
    """Batched matrix product of (b, n, m) and (b, m, p) tensors."""
    if input.ndim != 3 or mat2.ndim != 3:
        raise ShapeError(f"bmm: expects two rank-3 tensors, got shapes {input.shape} and {mat2.shape}")
    return matmul(input, mat2)


def addmm(input: Any, mat1: Tensor, mat2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
    """beta * input + alpha * (mat1 @ mat2) for matrices."""
    if mat1.ndim != 2 or mat2.ndim != 2:
        raise ShapeError(f"addmm: expects two matrices, got shapes {mat1.shape} and {mat2.shape}")
    return _scaled_sum(input, matmul(mat1, mat2), beta, alpha)


def baddbmm(input: Any, batch1: Tensor, batch2: Tensor, *, beta: float = 1, alpha: float = 1) -> Tensor:
    """beta * input + alpha * bmm(batch1, batch2)."""
    return _scaled_sum(input, bmm(batch1, batch2), beta, alpha)


def _scaled_sum(input: Any, product: Tensor, beta: float, alpha: float) -> Tensor:
    scaled = product if alpha == 1 else mul(product, alpha)
    if beta == 0:  # torch ignores input then, NaN and inf included
        return scaled
    return add(input if beta == 1 else mul(as_tensor(input), beta), scaled)


def outer(input: Tensor, vec2: Tensor) -> Tensor:
    """The outer product of two vectors."""
    if input.ndim != 1 or vec2.ndim != 1:
        raise ShapeError(f"outer: expects two vectors, got shapes {input.shape} and {vec2.shape}")
    return mul(reshape(input, (-1, 1)), reshape(vec2, (1, -1)))


ger = outer


def einsum(equation: str, *operands: Any) -> Tensor:
    """Sum of products over the letters of `equation` ("bij,bjk->bik"; "..." broadcasting is not supported)."""
    tensors = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)
    inputs, output = _parse(equation, [t.ndim for t in tensors])
    terms = list(zip(inputs, tensors))
    for k, (letters, t) in enumerate(terms):
        terms[k] = _sum_unique(letters, t, output, [x for j, (x, _) in enumerate(terms) if j != k])
    letters, result = terms[0]
    for k, (other_letters, other) in enumerate(terms[1:], start=1):
        later = "".join(x for x, _ in terms[k + 1:])
        keep = "".join(c for c in dict.fromkeys(letters + other_letters) if c in output or c in later)
        letters, result = keep, _contract(letters, result, other_letters, other, keep)
    letters, result = _sum_unique(letters, result, output, [])
    return permute(result, [letters.index(c) for c in output]) if letters != output else result


def _parse(equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    eq = equation.replace(" ", "")
    if "." in eq:
        raise NotImplementedError(f"einsum: '...' (broadcast dims) is not supported in {equation!r}; name the dims")
    lhs, arrow, rhs = eq.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(ranks) or any(not s.isalpha() for s in inputs if s) or any(
            len(s) != r for s, r in zip(inputs, ranks)):
        raise ShapeError(f"einsum: {equation!r} does not match {len(ranks)} operand(s) of ranks {list(ranks)}")
    if any(len(set(s)) != len(s) for s in inputs):
        raise NotImplementedError(f"einsum: a letter repeated within one operand (a diagonal) in {equation!r}")
    if not arrow:
        counts = {c: lhs.count(c) for c in lhs if c.isalpha()}
        rhs = "".join(sorted(c for c, k in counts.items() if k == 1))
    return inputs, rhs


def _sum_unique(letters: str, t: Tensor, output: str, others: list[str]) -> tuple[str, Tensor]:
    """Sum the dims whose letter is in neither the output nor another operand."""
    gone = [i for i, c in enumerate(letters) if c not in output and not any(c in o for o in others)]
    if not gone:
        return letters, t
    return "".join(c for i, c in enumerate(letters) if i not in gone), sum(t, dim=gone)


def _contract(a_letters: str, a: Tensor, b_letters: str, b: Tensor, keep: str) -> Tensor:
    """a and b multiplied and summed over their shared letters not in `keep`, as one matmul; dims in `keep` order."""
    size = {c: d for s, t in ((a_letters, a), (b_letters, b)) for c, d in zip(s, t.shape)}
    for c in set(a_letters) & set(b_letters):
        if a.shape[a_letters.index(c)] != b.shape[b_letters.index(c)]:
            raise ShapeError(f"einsum: dimension {c!r} has sizes {a.shape[a_letters.index(c)]} and "
                             f"{b.shape[b_letters.index(c)]}")
    batch = [c for c in a_letters if c in b_letters and c in keep]
    summed = [c for c in a_letters if c in b_letters and c not in keep]
    free_a = [c for c in a_letters if c not in b_letters]
    free_b = [c for c in b_letters if c not in a_letters]

    def arranged(letters: str, t: Tensor, groups: list[list[str]]) -> Tensor:
        order = [c for g in groups for c in g]
        t = permute(t, [letters.index(c) for c in order]) if "".join(order) != letters else t
        return reshape(t, [math.prod(size[c] for c in g) for g in groups])
    product = matmul(arranged(a_letters, a, [batch, free_a, summed]), arranged(b_letters, b, [batch, summed, free_b]))
    out = reshape(product, [size[c] for c in batch + free_a + free_b])
    letters = "".join(batch + free_a + free_b)
    return permute(out, [letters.index(c) for c in keep]) if letters != keep else out


__all__ = ["bmm", "addmm", "baddbmm", "outer", "ger", "einsum"]
