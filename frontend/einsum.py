"""einsum with torch's semantics, written with matmul, sum and movement ops (so it traces and compiles as those do).

Each operand first loses its repeated letters ("ii->i": the diagonal, as a strided view), "..." stands for fresh
letters (right-aligned across operands, summed when the output leaves it out), and a size-1 dim whose letter has a
larger size elsewhere is squeezed away (broadcasting). Two operands then contract as one batched matmul (batch,
free and summed letters each merged into one dim), more operands pairwise from the left; a letter that appears in
only one operand and not in the result is summed first.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from braze.ir.errors import ShapeError

from .functions import matmul, sum
from .movement import diagonal, permute, reshape, squeeze
from .tensor import Tensor

_FRESH = 0x4E00   # letters for the dims of "...": alphabetic, and never in a torch equation (a-z, A-Z only)


def einsum(equation: str, *operands: Any) -> Tensor:
    """Sum of products over the letters of `equation` ("bij,bjk->bik", "...ij,...jk", "ii->i")."""
    tensors = list(operands[0]) if len(operands) == 1 and isinstance(operands[0], (list, tuple)) else list(operands)
    inputs, output = _parse(equation, [t.ndim for t in tensors])
    terms = _broadcast([_diagonals(letters, t, k) for k, (letters, t) in enumerate(zip(inputs, tensors))])
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
    """The operands' and the output's letters, each "..." replaced by fresh letters; the equation checked."""
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    subscripts = lhs.split(",")
    if len(subscripts) != len(ranks):
        raise ShapeError(f"einsum: {equation!r} names {len(subscripts)} operand(s), got {len(ranks)}")
    spans = [_ellipsis_rank(equation, s, rank, k) for k, (s, rank) in enumerate(zip(subscripts, ranks))]
    fresh = "".join(chr(_FRESH + i) for i in range(max((e for e in spans if e is not None), default=0)))
    inputs = [s.replace("...", fresh[len(fresh) - e:] if e else "") for s, e in zip(subscripts, spans)]
    if not arrow:
        counts = {c: lhs.count(c) for c in lhs if c.isalpha()}
        return inputs, fresh + "".join(sorted(c for c, k in counts.items() if k == 1))
    if rhs.count("...") > 1 or not rhs.replace("...", "").isalpha() and rhs.replace("...", ""):
        raise ShapeError(f"einsum: the output {rhs!r} of {equation!r} must be letters and at most one '...'")
    output = rhs.replace("...", fresh)
    for c in output:
        if output.count(c) > 1:
            raise ShapeError(f"einsum: output subscript {c} appears more than once in the output of {equation!r}")
        if not any(c in s for s in inputs):
            raise ShapeError(f"einsum: output subscript {c} of {equation!r} appears in no input operand")
    return inputs, output


def _ellipsis_rank(equation: str, subscript: str, rank: int, k: int) -> int | None:
    """How many dims operand k's "..." stands for (None without one); the subscript checked against the rank."""
    letters = subscript.replace("...", "")
    dots = subscript.count("...")
    if dots > 1 or "." in letters or (letters and not letters.isalpha()) or len(letters) > rank or (
            not dots and len(letters) != rank):
        raise ShapeError(f"einsum: {subscript!r} in {equation!r} does not match operand {k} of rank {rank}")
    return rank - len(letters) if dots else None


def _shown(c: str) -> str:
    return "..." if ord(c) >= _FRESH else c


def _diagonals(letters: str, t: Tensor, k: int) -> tuple[str, Tensor]:
    """Operand k with each letter repeated in its subscript reduced to one dim: the diagonal over those dims."""
    for c in dict.fromkeys(letters):
        while letters.count(c) > 1:
            p = letters.index(c)
            q = letters.index(c, p + 1)
            if t.shape[p] != t.shape[q]:
                raise ShapeError(f"einsum: subscript {c} is repeated for operand {k} but the sizes don't match, "
                                 f"{t.shape[q]} != {t.shape[p]}")
            t = diagonal(t, 0, p, q)
            letters = "".join(x for i, x in enumerate(letters) if i not in (p, q)) + c
    return letters, t


def _broadcast(terms: list[tuple[str, Tensor]]) -> list[tuple[str, Tensor]]:
    """Each letter's size checked across operands; size-1 dims of letters that are larger elsewhere squeezed."""
    size: dict[str, int] = {}
    for k, (letters, t) in enumerate(terms):
        for c, d in zip(letters, t.shape):
            if d != 1 and size.setdefault(c, d) != d:
                raise ShapeError(f"einsum: subscript {_shown(c)} has size {d} for operand {k} which does not "
                                 f"broadcast with previously seen size {size[c]}")
    out = []
    for letters, t in terms:
        gone = [i for i, (c, d) in enumerate(zip(letters, t.shape)) if d == 1 and size.get(c, 1) > 1]
        out.append(("".join(c for i, c in enumerate(letters) if i not in gone), squeeze(t, gone)) if gone
                   else (letters, t))
    return out


def _sum_unique(letters: str, t: Tensor, output: str, others: list[str]) -> tuple[str, Tensor]:
    """Sum the dims whose letter is in neither the output nor another operand."""
    gone = [i for i, c in enumerate(letters) if c not in output and not any(c in o for o in others)]
    if not gone:
        return letters, t
    return "".join(c for i, c in enumerate(letters) if i not in gone), sum(t, dim=gone)


def _contract(a_letters: str, a: Tensor, b_letters: str, b: Tensor, keep: str) -> Tensor:
    """a and b multiplied and summed over their shared letters not in `keep`, as one matmul; dims in `keep` order."""
    size = {c: d for s, t in ((a_letters, a), (b_letters, b)) for c, d in zip(s, t.shape)}   # equal: _broadcast
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




__all__ = ["einsum"]
