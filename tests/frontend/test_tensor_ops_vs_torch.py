"""Differential tests of the Tensor ops and the torch namespace against PyTorch: one expression over (module,
*leaves), run in both with float64 leaves, gives equal values (and dtypes) and equal gradients.

Cases cover edge shapes: size-1 and empty dims, odd sizes, and non-contiguous inputs (transposed or sliced first).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import braze

torch = pytest.importorskip("torch")
from tests.frontend import test_torch_differential as reference  # noqa: E402  (after the skip: it imports torch)

R = np.random.default_rng(1)


def n(*shape: int) -> np.ndarray:
    return R.standard_normal(shape)


def _assigned(m: Any, x: Any, v: Any) -> Any:
    """x's values in a fresh tensor with constants written at a pair of positions and a masked row, then v (which
    requires grad) into a column."""
    y = x.detach().clone()
    y[[0, 2], [0, 3]] = 2.0
    y[y[:, 0] > 0.5] = -1.0
    y[:, 1] = v
    return y * x


CASES: list[tuple[str, Callable[..., Any], tuple[np.ndarray, ...]]] = [
    ("sort", lambda m, x: tuple(x.sort(dim=1, stable=True)) + tuple(m.sort(x, 0, True)),
     (n(4, 5),)),
    ("sort_noncontiguous", lambda m, x: x.mT.sort(stable=True)[0], (n(3, 6),)),
    ("sort_size1_and_empty", lambda m, x, e: (x.sort(stable=True)[0], e.sort(dim=0, stable=True)[0]),
     (n(1, 1), n(0, 3))),
    ("argsort", lambda m, x: m.argsort(x, dim=0, stable=True), (n(5, 3),)),
    ("topk", lambda m, x: tuple(x.topk(3)) + tuple(m.topk(x, 2, dim=0, largest=False)), (n(4, 7),)),
    ("topk_k0", lambda m, x: x.topk(0, dim=1)[0], (n(2, 3),)),
    ("cumsum", lambda m, x: x.cumsum(1) + m.cumsum(x, dim=0), (n(3, 5),)),
    ("cumsum_odd_noncontiguous", lambda m, x: x[:, ::2].cumsum(-1), (n(3, 7),)),
    ("cumprod_with_zeros", lambda m, x: (x * (x.abs() > 0.4)).cumprod(1) + m.cumprod(x, dim=0), (n(3, 5),)),
    ("cumsum_int", lambda m, x: m.cumsum((x > 0).int(), 1), (n(2, 5),)),
    ("flip", lambda m, x: x.flip(0, 2) + m.flip(x, (1,)), (n(2, 3, 5),)),
    ("roll", lambda m, x: x.roll(2, 1) + m.roll(x, (1, -4), (0, 1)) + x.roll(7), (n(3, 5),)),
    ("repeat", lambda m, x: x.repeat(2, 1, 3), (n(3, 2),)),
    ("repeat_interleave", lambda m, x: x.repeat_interleave(3, dim=1).sum() + m.repeat_interleave(x, 2),
     (n(2, 3),)),
    ("repeat_interleave_counts", lambda m, x: x.repeat_interleave(m.tensor([2, 0, 1]), dim=0), (n(3, 2),)),
    ("movedim_unflatten", lambda m, x: m.movedim(x, 0, -1).unflatten(0, (3, -1)), (n(2, 6, 4),)),
    ("tril_triu", lambda m, x: x.tril() + m.triu(x, 1) * 2 + x.tril(-1) + m.triu(x, -2), (n(2, 4, 5),)),
    ("index_two_arrays", lambda m, x: x[[0, 1, 1], [2, 0, 2]] + x[m.tensor([1]), :, m.tensor([0])].sum(),
     (n(2, 3, 4),)),
    ("index_mask", lambda m, x: x[x > 0.3] * 2, (n(3, 4),)),
    ("index_mask_rows", lambda m, x: x[m.tensor([True, False, True])], (n(3, 4),)),
    ("setitem", _assigned, (n(3, 4), n(3))),
    ("masked_fill", lambda m, x: x.masked_fill(x > 0, -1e9) + x.masked_fill(m.tensor([True, False, True, False]), 3.0),
     (n(2, 4),)),
    ("bmm_baddbmm", lambda m, a, b, c: m.bmm(a, b) + m.baddbmm(c, a, b, beta=0.5, alpha=2) + a.bmm(b),
     (n(2, 3, 4), n(2, 4, 5), n(2, 3, 5))),
    ("addmm_outer", lambda m, c, a, b, u, v: m.addmm(c, a, b, alpha=3) + c.addmm(a, b, beta=0) + m.outer(u, v),
     (n(3, 5), n(3, 4), n(4, 5), n(3), n(5))),
    ("einsum_attention", lambda m, q, k: m.einsum("bhqd,bhkd->bhqk", q, k), (n(2, 3, 4, 5), n(2, 3, 6, 5))),
    ("einsum_chain_and_sums", lambda m, a, b, c: m.einsum("ij,jk,kl->il", a, b, c) + m.einsum("ij->", a)
     + m.einsum("ij,ij->i", a, a).sum(), (n(2, 3), n(3, 4), n(4, 5))),
    ("einsum_implicit_output", lambda m, a, b: m.einsum("abc,cd", a, b) + m.einsum("ba", b[:2, :3]).sum(),
     (n(2, 3, 4), n(4, 5))),
    ("trig", lambda m, x, y: m.sin(x) * x.cos() + m.atan2(x, y) + x.atan2(y + 3), (n(3, 4), n(4))),
    ("log1p_expm1", lambda m, x: (x * x).log1p() + m.expm1(x), (n(2, 5),)),
    ("rounding", lambda m, x: x.floor() + m.ceil(x * 2) + (x * 3).round() + m.round(x * 7, decimals=1), (n(3, 4),)),
    ("fmod_remainder", lambda m, x, y: m.fmod(x * 5, y) + m.remainder(x * 5, y) + x % 0.75, (n(3, 4), n(4) + 3)),
    ("float_checks", lambda m, x: (x.isnan(), m.isinf(x), m.isfinite(x), m.nan_to_num(x, posinf=9.0),
                                   m.isclose(x, x + 1e-9), x.any(), m.all(x > -9, dim=1)),
     (np.array([[1.0, np.nan, np.inf], [-np.inf, 0.0, 2.0]]),)),
    ("scatter_family", lambda m, x, s: m.scatter(x, 1, m.tensor([[2, 0], [1, 3]]), s) + x.scatter_add(
        0, m.tensor([[1, 1]]), s[:1]) + x.index_add(1, m.tensor([3, 3]), s, alpha=2) + x.scatter(
        1, m.tensor([[0], [2]]), value=1.5), (n(2, 4), n(2, 2))),
    ("nonzero_unique", lambda m, x: (m.nonzero(x > 0), (x > 0).nonzero(as_tuple=True)[1],
                                     m.unique(m.tensor([3, 1, 3, 2]), return_inverse=True, return_counts=True)[2]),
     (n(3, 4),)),
    ("einsum_ellipsis", lambda m, a, b, c: m.einsum("...ij,...jk->...ik", a, b) + m.einsum("...ij->ij", a).sum()
     + m.einsum("b...,b...->b", a[:, :1], c).sum(), (n(2, 1, 3, 4), n(5, 4, 2), n(2, 5, 3, 4))),
    ("einsum_diagonals", lambda m, x, y: (m.einsum("ii->i", x), m.einsum("ii", x), m.einsum("bii,bi->b", y, y[:, 0]),
                                          m.einsum("i...i->...", y.permute(1, 0, 2))), (n(3, 3), n(2, 3, 3))),
    ("einsum_broadcast_size1", lambda m, a, b: m.einsum("ij,ij->ij", a, b), (n(1, 4), n(3, 1))),
    ("diagonal", lambda m, x: (x.diagonal(), m.diagonal(x, 1, 2, 0), x.diagonal(-1, 1, 2),
                               m.diagonal(x[:, :0], 0, 0, 1)),
     (n(3, 4, 5),)),
    ("where_causal_mask", lambda m, x: x.masked_fill(m.ones(4, 4).tril() == 0, float("-inf")).softmax(-1),
     (n(2, 4, 4),)),
    ("hstack_vectors_and_scalar", lambda m, x, s: m.hstack([s, x, x[::2]]), (n(5), n())),
    ("hstack_noncontiguous_and_empty", lambda m, x, y, e: m.hstack((x.mT, y, e)), (n(4, 3), n(3, 1), n(3, 0))),
    ("vstack_rows_and_matrix", lambda m, x, y: m.vstack([x, y, x]), (n(4), n(2, 4))),
    ("dstack_matrix_and_3d", lambda m, x, y: m.dstack([x, y]) + m.dstack([y[..., :1], x]), (n(2, 3), n(2, 3, 1))),
]


@pytest.mark.parametrize("name,fn,arrays", CASES, ids=[c[0] for c in CASES])
def test_tensor_op_matches_torch(name: str, fn: Callable[..., Any], arrays: tuple[np.ndarray, ...]) -> None:
    reference.test_matches_torch(name, lambda m, F, *leaves: fn(m, *leaves), arrays)


def test_namespace_names_match_torch() -> None:
    for name in ("long", "int", "float", "double", "bool", "uint8", "int8", "int32", "int64", "float32", "float64"):
        assert str(getattr(braze, name)) == str(getattr(torch, name)).removeprefix("torch.")
    assert braze.zeros(2, 3).shape == torch.zeros(2, 3).shape and braze.Size([2, 3]).numel() == 6
