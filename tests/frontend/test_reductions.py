"""The composed reductions (prod, count_nonzero, median, nanmedian, nansum, nanmean, var_mean, std_mean, aminmax,
logcumsumexp) and norms (braze.norm, braze.linalg.vector_norm, matrix_norm, norm) agree with numpy in float64 and
with torch (values and gradients), keep torch's dtype rules and edge cases, differentiate like finite differences and
compile."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import braze
from tests.frontend.test_gradients import check_gradients

T = braze.tensor
R = np.random.default_rng(11)
X = R.standard_normal((3, 5))
B3 = R.standard_normal((2, 3, 4))
ZEROS = X * (np.abs(X) > 0.6)  # a few exact zeros, two in some rows
TIES = np.array([[3.0, 1.0, 3.0, 2.0], [5.0, 5.0, 1.0, 1.0], [2.0, 2.0, 2.0, 9.0]])
NANS = np.array([[1.0, np.nan, 3.0, 0.5], [np.nan, np.nan, np.nan, np.nan], [4.0, 2.0, np.nan, 1.0]])
INTS = np.array([[3, -1, 4], [1, 0, -9]])
WEIGHTS = R.standard_normal((3, 5))  # a fixed projection to a scalar
INF = float("inf")


def _lower_median(a: np.ndarray, axis: int | None = None) -> np.ndarray:
    a = a.reshape(-1) if axis is None else np.moveaxis(a, axis, -1)
    return np.sort(a, -1)[..., (a.shape[-1] - 1) // 2]


def _nan_lower_median(row: np.ndarray) -> float:
    kept = np.sort(row[~np.isnan(row)])
    return kept[(len(kept) - 1) // 2] if len(kept) else np.nan


def _vector_norm(a: np.ndarray, p: float, axis: Any = None, keepdims: bool = False) -> np.ndarray:
    m = np.abs(a)
    if p == INF:
        return m.max(axis=axis, keepdims=keepdims)
    if p == -INF:
        return m.min(axis=axis, keepdims=keepdims)
    if p == 0:
        return (m != 0).sum(axis=axis, keepdims=keepdims).astype(a.dtype)
    with np.errstate(divide="ignore"):
        return (m ** p).sum(axis=axis, keepdims=keepdims) ** (1 / p)


def _logcumsumexp(a: np.ndarray, axis: int) -> np.ndarray:
    return np.logaddexp.accumulate(a, axis=axis)


# (id, braze expression, numpy expression): values, shape and dtype must agree (float64 to 1e-12)
CASES: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
    ("prod_all", lambda: braze.prod(T(X)), lambda: np.prod(X)),
    ("prod_dim", lambda: T(X).prod(1), lambda: np.prod(X, 1)),
    ("prod_negative_dim_keepdim", lambda: braze.prod(T(B3), -2, keepdim=True), lambda: np.prod(B3, -2, keepdims=True)),
    ("prod_zeros", lambda: braze.prod(T(ZEROS), 1), lambda: np.prod(ZEROS, 1)),
    ("prod_int", lambda: T(INTS).prod(0), lambda: np.prod(INTS, 0)),
    ("prod_int32_widens", lambda: braze.prod(T(INTS.astype(np.int32))), lambda: np.int64(0)),
    ("prod_bool", lambda: braze.prod(T(np.array([True, True]))), lambda: np.int64(1)),
    ("prod_dtype", lambda: braze.prod(T(INTS), 1, dtype=braze.float64), lambda: np.prod(INTS, 1).astype(np.float64)),
    ("prod_empty", lambda: braze.prod(T(np.zeros((0, 3)))), lambda: np.float64(1)),
    ("prod_empty_dim", lambda: braze.prod(T(np.zeros((2, 0))), 1), lambda: np.ones(2)),
    ("prod_scalar", lambda: braze.prod(T(np.float64(3.5)), 0), lambda: np.float64(3.5)),
    ("count_nonzero", lambda: braze.count_nonzero(T(ZEROS)), lambda: np.int64(np.count_nonzero(ZEROS))),
    ("count_nonzero_dims", lambda: T(ZEROS).count_nonzero((0, 1)), lambda: np.int64(np.count_nonzero(ZEROS))),
    ("count_nonzero_nan", lambda: braze.count_nonzero(T(NANS), dim=-1), lambda: np.count_nonzero(NANS, -1)),
    ("count_nonzero_bool", lambda: braze.count_nonzero(T(X > 0), 0), lambda: np.count_nonzero(X > 0, 0)),
    ("median_all", lambda: braze.median(T(X)), lambda: _lower_median(X)),
    ("median_even_ties", lambda: T(TIES).median(), lambda: _lower_median(TIES)),
    ("median_dim", lambda: T(X).median(1).values, lambda: _lower_median(X, 1)),
    ("median_dim_ties", lambda: braze.median(T(TIES), dim=-1, keepdim=True)[0],
     lambda: _lower_median(TIES, 1)[:, None]),
    ("median_int", lambda: braze.median(T(INTS), 0).values, lambda: _lower_median(INTS, 0)),
    ("median_nan", lambda: braze.median(T(NANS)), lambda: np.float64(np.nan)),
    ("median_nan_dim", lambda: braze.median(T(NANS), 1).values, lambda: np.array([np.nan] * 3)),
    ("median_empty", lambda: braze.median(T(np.zeros(0))), lambda: np.float64(np.nan)),
    ("median_scalar", lambda: braze.median(T(np.float64(2.0)), 0).values, lambda: np.float64(2.0)),
    ("nanmedian_all", lambda: braze.nanmedian(T(NANS)), lambda: np.float64(_nan_lower_median(NANS.reshape(-1)))),
    ("nanmedian_dim", lambda: T(NANS).nanmedian(1).values, lambda: np.array([_nan_lower_median(r) for r in NANS])),
    ("nanmedian_int", lambda: braze.nanmedian(T(INTS), 1).values, lambda: _lower_median(INTS, 1)),
    ("nansum", lambda: braze.nansum(T(NANS)), lambda: np.nansum(NANS)),
    ("nansum_dim", lambda: T(NANS).nansum(1, keepdim=True), lambda: np.nansum(NANS, 1, keepdims=True)),
    ("nansum_int", lambda: braze.nansum(T(INTS.astype(np.int32)), 0), lambda: INTS.sum(0)),
    ("nansum_dtype", lambda: braze.nansum(T(NANS.astype(np.float32)), dtype=braze.float64),
     lambda: np.nansum(NANS.astype(np.float32).astype(np.float64))),
    ("nanmean", lambda: T(NANS).nanmean(), lambda: np.nanmean(NANS)),
    ("nanmean_all_nan_row", lambda: braze.nanmean(T(NANS), dim=1),
     lambda: np.array([np.nanmean(NANS[0]), np.nan, np.nanmean(NANS[2])])),
    ("nanmean_dims", lambda: braze.nanmean(T(B3), (0, 2), keepdim=True), lambda: B3.mean((0, 2), keepdims=True)),
    ("var_mean", lambda: braze.var_mean(T(X), 1)[0], lambda: X.var(1, ddof=1)),
    ("var_mean_mean", lambda: braze.var_mean(T(X), 1, keepdim=True)[1], lambda: X.mean(1, keepdims=True)),
    ("var_mean_correction", lambda: braze.var_mean(T(X), dim=0, correction=0)[0], lambda: X.var(0)),
    ("var_mean_unbiased_overload", lambda: braze.var_mean(T(X), False)[0], lambda: X.var()),
    ("std_mean", lambda: braze.std_mean(T(B3), (0, 2))[0], lambda: B3.std((0, 2), ddof=1)),
    ("std_mean_mean", lambda: braze.std_mean(T(B3))[1], lambda: B3.mean()),
    ("aminmax_min", lambda: braze.aminmax(T(X)).min, lambda: X.min()),
    ("aminmax_max_dim", lambda: T(X).aminmax(dim=-1).max, lambda: X.max(-1)),
    ("aminmax_keepdim", lambda: braze.aminmax(T(X), keepdim=True)[0], lambda: X.min(keepdims=True)),
    ("aminmax_bool", lambda: braze.aminmax(T(X > 0), dim=0)[1], lambda: (X > 0).max(0)),
    ("aminmax_scalar", lambda: braze.aminmax(T(np.float64(2.0)), dim=0, keepdim=True).max, lambda: np.float64(2.0)),
    ("aminmax_empty_other_dim", lambda: braze.aminmax(T(np.zeros((2, 0))), dim=0).min, lambda: np.zeros(0)),
    ("logcumsumexp", lambda: braze.logcumsumexp(T(X * 10), 1), lambda: _logcumsumexp(X * 10, 1)),
    ("logcumsumexp_dim0", lambda: T(B3).logcumsumexp(-3), lambda: _logcumsumexp(B3, 0)),
    ("logcumsumexp_spread", lambda: braze.logcumsumexp(T(np.array([-1000.0, 0.0, -INF, 5.0])), 0),
     lambda: np.array([-1000.0, 0.0, 0.0, 5.0 + np.log1p(np.exp(-5.0))])),
    ("logcumsumexp_all_minus_inf", lambda: braze.logcumsumexp(T(np.array([-INF, -INF, 1.0])), 0),
     lambda: np.array([-INF, -INF, 1.0])),
    ("logcumsumexp_inf", lambda: braze.logcumsumexp(T(np.array([1.0, INF, 2.0])), 0), lambda: np.array([1, INF, INF])),
]
CASES += [(f"vector_norm_{p}", (lambda p=p: braze.linalg.vector_norm(T(X), p)), (lambda p=p: _vector_norm(X, p)))
          for p in (2, 1, 3, 0.5, 1.5, INF, -INF, 0, -1, -0.5)]
CASES += [
    ("vector_norm_dims_keepdim", lambda: braze.linalg.vector_norm(T(B3), 3, (0, -1), keepdim=True),
     lambda: _vector_norm(B3, 3, (0, 2), True)),
    ("vector_norm_keepdim_all", lambda: braze.linalg.vector_norm(T(B3), keepdim=True),
     lambda: _vector_norm(B3, 2, None, True)),
    ("vector_norm_scalar", lambda: braze.linalg.vector_norm(T(np.float64(-3.0))), lambda: np.float64(3.0)),
    ("vector_norm_empty", lambda: braze.linalg.vector_norm(T(np.zeros((0, 3)))), lambda: np.float64(0.0)),
    ("vector_norm_empty_other_dim", lambda: braze.linalg.vector_norm(T(np.zeros((2, 0))), INF, 0),
     lambda: np.zeros(0)),
    ("vector_norm_dtype", lambda: braze.linalg.vector_norm(T(X.astype(np.float32)), dtype=braze.float64),
     lambda: _vector_norm(X.astype(np.float32).astype(np.float64), 2)),
    ("vector_norm_zeros", lambda: braze.linalg.vector_norm(T(np.zeros(3)), 3), lambda: np.float64(0.0)),
    ("vector_norm_minus_with_zero", lambda: braze.linalg.vector_norm(T(ZEROS[0]), -1), lambda: np.float64(0.0)),
    ("norm_fro", lambda: braze.norm(T(B3)), lambda: np.linalg.norm(B3.reshape(-1))),
    ("norm_p_dim", lambda: T(B3).norm(3, dim=1), lambda: _vector_norm(B3, 3, 1)),
    ("norm_fro_dims", lambda: braze.norm(T(B3), "fro", (0, 2), keepdim=True),
     lambda: np.sqrt((B3 ** 2).sum((0, 2), keepdims=True))),
    ("norm_p_none", lambda: braze.norm(T(X), p=None, dim=0), lambda: np.linalg.norm(X, axis=0)),
    ("matrix_norm_fro", lambda: braze.linalg.matrix_norm(T(B3)), lambda: np.linalg.norm(B3, "fro", axis=(1, 2))),
    ("matrix_norm_1", lambda: braze.linalg.matrix_norm(T(B3), 1), lambda: np.linalg.norm(B3, 1, axis=(1, 2))),
    ("matrix_norm_-1", lambda: braze.linalg.matrix_norm(T(B3), -1), lambda: np.linalg.norm(B3, -1, axis=(1, 2))),
    ("matrix_norm_inf", lambda: braze.linalg.matrix_norm(T(B3), INF, dim=(0, 2), keepdim=True),
     lambda: np.linalg.norm(B3, INF, axis=(0, 2), keepdims=True)),
    ("matrix_norm_-inf_swapped", lambda: braze.linalg.matrix_norm(T(B3), -INF, dim=(2, 1)),
     lambda: np.linalg.norm(B3, -INF, axis=(2, 1))),
    ("matrix_norm_empty", lambda: braze.linalg.matrix_norm(T(np.zeros((3, 0, 2))), 1), lambda: np.zeros(3)),
    ("linalg_norm_vector_default", lambda: braze.linalg.norm(T(B3)), lambda: np.linalg.norm(B3.reshape(-1))),
    ("linalg_norm_matrix_ord", lambda: braze.linalg.norm(T(X), 1), lambda: np.linalg.norm(X, 1)),
    ("linalg_norm_vector_ord", lambda: braze.linalg.norm(T(X[0]), 3), lambda: _vector_norm(X[0], 3)),
    ("linalg_norm_two_dims", lambda: braze.linalg.norm(T(B3), INF, (1, 2)), lambda: np.linalg.norm(B3, INF, (1, 2))),
    ("linalg_norm_one_dim", lambda: braze.linalg.norm(T(B3), INF, -1), lambda: np.abs(B3).max(-1)),
]


@pytest.mark.parametrize("name,got,want", CASES, ids=[c[0] for c in CASES])
def test_reduction_matches_numpy(name: str, got: Callable[[], Any], want: Callable[[], Any]) -> None:
    result, expected = got(), np.asarray(want())
    assert tuple(result.shape) == expected.shape and result.numpy().dtype == expected.dtype
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-12, atol=1e-300)


def test_prod_of_every_length_matches_numpy() -> None:
    for n in range(0, 18):
        a = R.uniform(0.5, 1.5, (2, n))
        np.testing.assert_allclose(braze.prod(T(a), 1).numpy(), np.prod(a, 1), rtol=1e-14)


def test_median_indices_point_at_the_median() -> None:
    for data, dim in ((X, 1), (TIES, 1), (TIES, 0), (B3, -1)):
        values, indices = braze.median(T(data), dim, keepdim=True)
        np.testing.assert_array_equal(np.take_along_axis(data, indices.numpy(), dim), values.numpy())
    values, indices = braze.median(T(NANS), 1)  # a NaN answers with the first NaN's position, as torch
    assert indices.tolist() == [1, 0, 2] and np.isnan(values.numpy()).all()
    assert braze.nanmedian(T(NANS), 1).indices.tolist() == [0, 0, 1]
    assert type(braze.median(T(X), 0)) is braze.MinMax and braze.median(T(X), 0).indices.dtype == braze.int64


def test_norm_special_values() -> None:
    for p in (2, 3, 1, INF, 0.5):
        assert braze.linalg.vector_norm(T([INF, 1.0]), p).item() == INF
        assert np.isnan(braze.linalg.vector_norm(T([np.nan, 1.0]), p).item())
    assert braze.linalg.vector_norm(T([np.nan, 1.0]), 0).item() == 2.0


def test_norm_overflows_and_underflows_where_torchs_does_in_float32() -> None:
    """The 2-norm is sqrt(sum(x * x)) as torch computes it: squares of |x| > 1.8e19 overflow float32 to inf and
    those of |x| < 1e-23 underflow to 0, as in torch; ordinary values give the plain sum bit for bit."""
    assert braze.linalg.vector_norm(T(np.array([3e19, 4e19], np.float32))).item() == INF
    assert braze.linalg.vector_norm(T(np.array([3e-30, 4e-30], np.float32))).item() == 0.0
    ordinary = R.standard_normal(1000).astype(np.float32)
    plain = np.sqrt(np.sum(ordinary * ordinary, dtype=np.float32))
    np.testing.assert_allclose(braze.linalg.vector_norm(T(ordinary)).item(), plain, rtol=1e-6)
    np.testing.assert_allclose(braze.linalg.vector_norm(T(np.array([3e100, 4e100])), 3).item(),
                               (27 + 64) ** (1 / 3) * 1e100, rtol=4e-14)


def test_float32_results_are_close_to_float64() -> None:
    """Stated float32 tolerances over rows of 1000 values: 1e-5 relative for products (999 roundings, as torch's),
    2e-6 for norms and running log-sum-exps."""
    a = R.uniform(0.5, 1.5, (8, 1000)).astype(np.float32)
    wide = a.astype(np.float64)
    for got, want, rtol in ((braze.prod(T(a), 1), np.prod(wide, 1), 1e-5),
                            (braze.norm(T(a), 3, 1), _vector_norm(wide, 3, 1), 2e-6),
                            (braze.norm(T(a), dim=1), _vector_norm(wide, 2, 1), 2e-6),
                            (braze.logcumsumexp(T(a), 1), _logcumsumexp(wide, 1), 2e-6)):
        assert got.dtype == braze.float32
        np.testing.assert_allclose(got.numpy(), want, rtol=rtol)


@pytest.mark.parametrize("call,error,match", [
    (lambda: braze.linalg.vector_norm(T(INTS)), braze.DTypeError, "expects a floating-point tensor, got int64"),
    (lambda: braze.norm(T(INTS)), braze.DTypeError, "floating-point"),
    (lambda: braze.linalg.vector_norm(T(X), dtype=braze.int64), braze.DTypeError, "dtype must be a floating"),
    (lambda: braze.linalg.vector_norm(T(X), "fro"), TypeError, "ord must be a number"),
    (lambda: braze.linalg.vector_norm(T(np.zeros(0)), INF), braze.ShapeError, "inf norm over an empty"),
    (lambda: braze.linalg.vector_norm(T(np.zeros((2, 0))), -1, 1), braze.ShapeError, "-1 norm over an empty"),
    (lambda: braze.norm(T(X), "nuc"), braze.BrazeError, "singular values"),
    (lambda: braze.linalg.matrix_norm(T(X), 2), braze.BrazeError, "singular values"),
    (lambda: braze.linalg.matrix_norm(T(X), 3), ValueError, "ord=3 is not supported"),
    (lambda: braze.linalg.matrix_norm(T(X[0])), braze.ShapeError, "at least 2 dimensions"),
    (lambda: braze.linalg.matrix_norm(T(B3), dim=(1, -2)), braze.ShapeError, "dims must differ"),
    (lambda: braze.norm(T(B3), "fro", (0, 1, 2)), braze.ShapeError, "pair of dims"),
    (lambda: braze.linalg.norm(T(B3), 1), braze.ShapeError, "must be 1-D or 2-D"),
    (lambda: braze.linalg.norm(T(X[0]), "fro"), braze.ShapeError, "at least 2 dimensions"),
    (lambda: braze.linalg.norm(T(B3), dim=(0, 1, 2)), braze.ShapeError, "1 or 2 dims"),
    (lambda: braze.median(T(X), 2), IndexError, "out of range"),
    (lambda: braze.median(T(np.zeros((2, 0))), 1), IndexError, "it is empty"),
    (lambda: braze.median(T(X > 0)), braze.DTypeError, "got bool"),
    (lambda: braze.nanmean(T(INTS)), braze.DTypeError, "floating-point"),
    (lambda: braze.aminmax(T(np.zeros(0))), braze.ShapeError, "empty dimension"),
    (lambda: braze.logcumsumexp(T(INTS), 0), braze.DTypeError, "floating-point"),
])
def test_refusals_name_the_problem(call: Callable[[], Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        call()


def test_named_results_and_plain_tuples() -> None:
    pair = braze.aminmax(T(X), dim=0)
    assert pair._fields == ("min", "max") and pair.min.shape == (5,)
    assert type(braze.var_mean(T(X))) is tuple and type(braze.std_mean(T(X), 0)) is tuple


@pytest.mark.parametrize("fn,arrays", [
    (lambda x: braze.prod(x), (R.uniform(0.5, 1.5, (2, 3)),)),
    (lambda x: (x.prod(1) * T([1.0, -2.0, 0.5])).sum(), (ZEROS,)),
    (lambda x: (braze.prod(x, 0) * T([0.5, -1.5, 2.0])).sum(), (np.array([[0.0, 0.0, 2.0], [3.0, 1.5, 0.0]]),)),
    (lambda x: braze.norm(x, 1.5) + x.norm(3, dim=1).sum() + braze.linalg.vector_norm(x, -1.5, 0).sum(), (X,)),
    (lambda x: braze.linalg.matrix_norm(x, INF) + braze.linalg.matrix_norm(x, -1) + braze.linalg.norm(x), (X,)),
    (lambda x: (x.median(1).values * T([1.0, -2.0, 3.0])).sum() + braze.median(x) + braze.nanmedian(x, 0)[0].sum(),
     (X,)),
    (lambda x: (braze.logcumsumexp(x, 1) * T(WEIGHTS)).sum(), (X * 3,)),
    (lambda x: braze.nanmean(x, 1).sum() + braze.nansum(x * x) + braze.var_mean(x, 0)[0].sum(), (X,)),
])
def test_gradients_match_finite_differences(fn: Callable[..., braze.Tensor], arrays: tuple[np.ndarray, ...]) -> None:
    check_gradients(fn, *arrays)


def test_norm_gradient_at_zero_is_zero() -> None:
    """torch's norms give a zero gradient where the norm is 0 (not the NaN of sqrt's or pow's own derivative)."""
    for p in (2, 3, 1.5, 0.5, 1, INF):
        x = T(np.zeros((2, 3)), requires_grad=True)
        grads = braze.linalg.vector_norm(x, p, 1).sum().backward()
        assert grads[x].tolist() == [[0.0] * 3] * 2, p


def test_nanmean_of_only_nans_has_a_zero_gradient() -> None:
    """A group with no number has no gradient to give: braze answers 0 there, where torch's 0/0 gives NaN."""
    x = T(NANS, requires_grad=True)
    grads = braze.nanmean(x, 1).nansum().backward()
    assert grads[x].numpy()[1].tolist() == [0.0] * 4 and np.isfinite(grads[x].numpy()).all()


def test_logcumsumexp_gradient_of_minus_inf_is_zero() -> None:
    """exp(-inf) = 0 weighs nothing: braze's gradient there is 0 (torch's is NaN for a leading -inf)."""
    x = T(np.array([-INF, -INF, 0.0, 1.0]), requires_grad=True)
    grads = braze.logcumsumexp(x, 0).sum().backward()
    np.testing.assert_allclose(grads[x].numpy(), [0.0, 0.0, 1 + 1 / (1 + np.e), np.e / (1 + np.e)], rtol=1e-12)


def _torch_reference() -> Any:
    pytest.importorskip("torch")
    from tests.frontend import test_torch_differential as reference
    return reference


TORCH_CASES: list[tuple[str, Callable[..., Any], tuple[np.ndarray, ...]]] = [
    ("prod", lambda m, x: (x.prod(), m.prod(x, 1), x.prod(0, keepdim=True), m.prod(x, -1, dtype=m.float64)), (X,)),
    ("prod_zeros", lambda m, x: (x.prod(), m.prod(x, 1), x.prod(0)), (ZEROS,)),
    ("prod_single_zero", lambda m, x: (m.prod(x, 1), x.prod()), (np.array([[2.0, 0.0, 3.0], [1.5, -2.0, 0.5]]),)),
    ("count_nonzero", lambda m, x: (m.count_nonzero(x, 1), x.count_nonzero((0, 1))), (ZEROS,)),
    ("norm", lambda m, x: (*(m.norm(x, p, 1) for p in (1, 2, 3, 0.5, 1.5, INF, -INF, -1, 0)), x.norm(),
                           m.norm(x, "fro", (0, 1))), (X,)),
    ("norm_zero_rows", lambda m, x: tuple(x.norm(p, 1) for p in (2, 3, 1.5, 0.5, 1)), (X * [[0.0], [1.0], [0.0]],)),
    ("norm_zero_elements", lambda m, x: tuple(x.norm(p, 0) for p in (2, 3, 1.5, 0.5, 1, INF, -2)), (ZEROS,)),
    ("norm_inf_element", lambda m, x: tuple(x.norm(p) for p in (2, 3, INF)), (np.array([1.0, -INF, 2.0]),)),
    ("linalg_norms", lambda m, x: (m.linalg.vector_norm(x, 3, (0, 2), keepdim=True), m.linalg.matrix_norm(x),
                                   m.linalg.matrix_norm(x, 1), m.linalg.matrix_norm(x, INF, dim=(0, 2)),
                                   m.linalg.matrix_norm(x, -1, keepdim=True), m.linalg.norm(x),
                                   m.linalg.norm(x[0], -INF), m.linalg.norm(x, 0.5, 1),
                                   m.linalg.norm(x, "fro", (1, 2))), (B3,)),
    ("median", lambda m, x: (*x.median(1), m.median(x, 0, keepdim=True)[0], x.median(), x.nanmedian(),
                             *m.nanmedian(x, -1)), (X,)),
    ("median_ties_shared_gradient", lambda m, x: (x.median(), m.nanmedian(x)), (TIES,)),
    ("median_nan", lambda m, x: (*m.median(x, 1), x.nanmedian(1).values.detach(), *x[::2].nanmedian(1), x.median(),
                                 m.nanmedian(x[1])), (NANS,)),
    ("nan_reductions", lambda m, x: (m.nansum(x, 1), x.nansum(), x.nanmean(0), m.nanmean(x[::2], 1, keepdim=True)),
     (NANS,)),
    ("var_std_mean", lambda m, x: (*m.var_mean(x, 1), *m.std_mean(x, dim=0, correction=0, keepdim=True)), (X,)),
    ("aminmax", lambda m, x: (*m.aminmax(x), *x.aminmax(dim=1, keepdim=True)), (X,)),
    ("logcumsumexp", lambda m, x: (m.logcumsumexp(x, 1), x.logcumsumexp(0)), (X * 10,)),
    ("keyword_arguments", lambda m, x: (
        m.prod(input=x, dim=1, keepdim=True, dtype=m.float64), m.count_nonzero(input=x, dim=0),
        m.norm(input=x, p=3, dim=1, keepdim=True, dtype=m.float64), x.norm(p=1, dim=0, keepdim=True),
        m.linalg.vector_norm(x=x, ord=3, dim=(0, 1), keepdim=True, dtype=m.float64),
        m.linalg.matrix_norm(input=x, ord=1, dim=(0, 1), keepdim=True, dtype=m.float64),
        m.linalg.norm(input=x, ord=2.5, dim=1, keepdim=True, dtype=m.float64),
        m.median(input=x, dim=1, keepdim=True).values, m.nanmedian(input=x, dim=0, keepdim=True).indices,
        m.nansum(input=x, dim=1, keepdim=True, dtype=m.float64), m.nanmean(input=x, dim=0, keepdim=True),
        *m.var_mean(input=x, dim=1, correction=0, keepdim=True), *m.std_mean(x, dim=0, unbiased=False),
        *m.aminmax(x, dim=1, keepdim=True), m.logcumsumexp(input=x, dim=0)), (X,)),
]


@pytest.mark.parametrize("name,fn,arrays", TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
def test_matches_torch(name: str, fn: Callable[..., Any], arrays: tuple[np.ndarray, ...]) -> None:
    _torch_reference().test_matches_torch(name, lambda m, F, *leaves: fn(m, *leaves), arrays)


def test_integer_rules_match_torch() -> None:
    torch = pytest.importorskip("torch")
    ints = INTS.astype(np.int32)
    for b, t in ((braze.prod(T(ints)), torch.prod(torch.tensor(ints))),
                 (braze.nansum(T(ints), 1), torch.nansum(torch.tensor(ints), 1)),
                 (braze.median(T(ints), 1).values, torch.median(torch.tensor(ints), 1).values),
                 (braze.count_nonzero(T(ints)), torch.count_nonzero(torch.tensor(ints)))):
        assert str(b.dtype) == str(t.dtype).removeprefix("torch.")
        np.testing.assert_array_equal(b.numpy(), t.numpy())


def test_traceable_reductions_compile_in_float32() -> None:
    x = T(R.standard_normal((4, 6)).astype(np.float32))

    def f(t):
        return (braze.prod(t, 1), t.prod(), t.norm(dim=1), braze.linalg.vector_norm(t, 3, 0),
                braze.linalg.matrix_norm(t, INF), braze.linalg.norm(t, "fro"), braze.median(t, 1).values, t.median(),
                braze.nanmedian(t, 0)[1], braze.nansum(t), braze.nanmean(t, 1), braze.count_nonzero(t > 0, 0),
                braze.aminmax(t, dim=0).max, braze.logcumsumexp(t, 1), braze.var_mean(t, 1)[0])
    for k, (got, want) in enumerate(zip(braze.compile(f, x)(x), f(x))):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"output {k}")


def test_compiled_training_step_gets_the_eager_gradients() -> None:
    """The gradients of the compositions compile too: one SGD step of lr 1 moves the weight by the eager gradient."""

    class Model(braze.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = braze.nn.Parameter(T(R.standard_normal((4, 6)).astype(np.float32)))

        def forward(self, x: braze.Tensor) -> braze.Tensor:
            h = self.w * x
            sparse = h * (h.abs() > 0.3)
            return (braze.prod(sparse, 1).sum() + h.norm(dim=1).sum() + braze.linalg.vector_norm(sparse, 3, 0).sum()
                    + braze.median(h, 1).values.sum() + braze.median(h.round()) + braze.logcumsumexp(h, 1).sum())

    x = T(R.standard_normal((4, 6)).astype(np.float32))
    model = Model()
    model(x).backward()
    eager, before = model.w.grad.numpy().copy(), model.w.detach().numpy().copy()
    step = braze.compile_train_step(model, lambda out, target: out, braze.optim.SGD(model.parameters(), lr=1.0), x, x)
    step(x, x)
    step.sync(model)
    np.testing.assert_allclose(before - model.w.detach().numpy(), eager, rtol=1e-5, atol=1e-5)
