"""cdist agrees with float64 references for every p, in both of torch's p = 2 forms and with torch's choice between
them, over batched and empty inputs; its gradients match torch's (zero distance and ties included) and central
differences. cummax and cummin match a reference loop and torch (ties and NaN to the last occurrence), differentiate
as torch's and compile."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import braze
from tests.frontend.test_elementary import force_cpu
from tests.frontend.test_gradients import check_gradients

RNG = np.random.default_rng(21)
MODES = ["use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist"]
PS = [0.0, 0.5, 1.0, 2.0, 3.0, math.inf]


def cdist_reference(a: np.ndarray, b: np.ndarray, p: float) -> np.ndarray:
    diff = np.abs(a[..., :, None, :] - b[..., None, :, :])
    if p == 0:
        return (diff != 0).sum(-1).astype(a.dtype)
    if p == math.inf:
        return diff.max(-1, initial=0.0)
    return (diff ** p).sum(-1) ** (1 / p)


SHAPES = [((5, 3), (4, 3)), ((30, 4), (6, 4)), ((2, 5, 3), (2, 7, 3)), ((2, 1, 4, 3), (3, 6, 3)),
          ((3, 27, 2), (3, 1, 2))]


@pytest.mark.parametrize("p", PS)
@pytest.mark.parametrize("mode", MODES)
def test_cdist_matches_float64_reference(p: float, mode: str) -> None:
    for sa, sb in SHAPES:
        a, b = RNG.standard_normal(sa), RNG.standard_normal(sb)
        got = braze.cdist(braze.tensor(a), braze.tensor(b), p=p, compute_mode=mode)
        want = cdist_reference(a, b, p)
        assert got.shape == want.shape
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12, err_msg=f"{sa} {sb}")
        got32 = braze.cdist(braze.tensor(a.astype(np.float32)), braze.tensor(b.astype(np.float32)), p, mode)
        assert got32.dtype == braze.float32
        np.testing.assert_allclose(got32.numpy(), want, rtol=2e-6, atol=2e-6)


def test_cdist_empty_and_degenerate_shapes() -> None:
    assert braze.cdist(braze.zeros(0, 3), braze.zeros(2, 3)).shape == (0, 2)
    assert braze.cdist(braze.zeros(2, 3), braze.zeros(0, 3), p=math.inf).shape == (2, 0)
    assert braze.cdist(braze.zeros(30, 3), braze.zeros(0, 3)).shape == (30, 0)
    for p in PS:
        np.testing.assert_array_equal(braze.cdist(braze.zeros(2, 0), braze.zeros(3, 0), p).numpy(), np.zeros((2, 3)))
    assert braze.cdist(braze.zeros(4, 2, 0), braze.zeros(1, 3, 0)).shape == (4, 2, 3)


def test_cdist_refuses_what_torch_refuses() -> None:
    with pytest.raises(braze.ShapeError, match="at least 2 dims"):
        braze.cdist(braze.ones(3), braze.ones(2, 3))
    with pytest.raises(braze.ShapeError, match="same number of columns"):
        braze.cdist(braze.ones(2, 3), braze.ones(2, 4))
    with pytest.raises(braze.DTypeError, match="floating-point"):
        braze.cdist(braze.ones(2, 3, dtype=braze.int64), braze.ones(2, 3, dtype=braze.int64))
    with pytest.raises(braze.DTypeError, match="one dtype"):
        braze.cdist(braze.ones(2, 3), braze.ones(2, 3, dtype=braze.float64))
    with pytest.raises(ValueError, match="non-negative"):
        braze.cdist(braze.ones(2, 3), braze.ones(2, 3), p=-1)
    with pytest.raises(ValueError, match="compute_mode"):
        braze.cdist(braze.ones(2, 3), braze.ones(2, 3), compute_mode="fast")
    with pytest.raises(braze.ShapeError, match="do not broadcast"):
        braze.cdist(braze.ones(2, 2, 3), braze.ones(3, 2, 3))


def _with_duplicates(sa: tuple[int, ...], sb: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Small-integer points (ties in |differences|), x2's first row repeating one of x1's (zero distances)."""
    a = RNG.integers(-2, 3, sa).astype(float)
    b = RNG.integers(-2, 3, sb).astype(float)
    b[..., 0, :] = a[..., 0, :]
    return a, b


@pytest.mark.parametrize("p", PS)
@pytest.mark.parametrize("mode", MODES)
def test_cdist_values_and_gradients_match_torch(p: float, mode: str) -> None:
    """Equal values in float64 (the same form: rounding apart), and torch's gradients: 0 at zero distance, for
    p = inf every tied coordinate's full share, for p = 0 none."""
    torch = pytest.importorskip("torch")
    for sa, sb in [((5, 3), (4, 3)), ((30, 4), (6, 4)), ((2, 5, 3), (2, 26, 3))]:
        a, b = _with_duplicates(sa, sb)
        w = RNG.standard_normal(np.broadcast_shapes(sa[:-1], sb[:-2] + (1,))[:-1] + (sa[-2], sb[-2]))
        ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        want = torch.cdist(ta, tb, p=p, compute_mode=mode)
        (want * torch.tensor(w)).sum().backward()
        ba, bb = braze.tensor(a, requires_grad=True), braze.tensor(b, requires_grad=True)
        got = braze.cdist(ba, bb, p=p, compute_mode=mode)
        np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-14, atol=1e-14)
        if p == 0:
            assert not got.requires_grad  # a count: torch's gradient is 0
            continue
        (got * braze.tensor(w)).sum().backward()
        np.testing.assert_allclose(ba.grad.numpy(), ta.grad.numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(bb.grad.numpy(), tb.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_cdist_takes_torchs_form_in_float32() -> None:
    """Far from the origin the product form cancels: 1e-3 apart at 1000, its float32 distances are off by more than
    1e-2 where the difference form's are within 1e-5. braze takes it when torch does (a side of more than 25 rows),
    so their results agree."""
    torch = pytest.importorskip("torch")
    for rows in (25, 26):
        b = (RNG.standard_normal((3, 5)) + 1000).astype(np.float32)
        a = np.concatenate([b + 1e-3, RNG.standard_normal((rows - 3, 5)).astype(np.float32) + 1000])
        exact = cdist_reference(a.astype(np.float64), b.astype(np.float64), 2.0)
        got = braze.cdist(braze.tensor(a), braze.tensor(b)).numpy()
        want = torch.cdist(torch.tensor(a), torch.tensor(b)).numpy()
        for result in (got, want):
            off = np.abs(result - exact).max()
            assert off > 1e-2 if rows > 25 else off < 1e-5, (rows, off)


@pytest.mark.parametrize("p, mode", [(1.0, MODES[0]), (2.0, MODES[1]), (2.0, MODES[2]), (math.inf, MODES[0]),
                                     (3.0, MODES[0]), (0.5, MODES[0])])
def test_cdist_gradients_match_central_differences(p: float, mode: str) -> None:
    a, b = RNG.standard_normal((2, 4, 3)), RNG.standard_normal((2, 5, 3))
    w = RNG.standard_normal((2, 4, 5))
    check_gradients(lambda x, y: (braze.cdist(x, y, p, mode) * braze.tensor(w)).sum(), a, b)


def test_cdist_gradient_is_zero_at_zero_distance() -> None:
    for p in (1.0, 2.0, 3.0, 0.5, math.inf):
        for mode in MODES:
            a = braze.tensor(np.array([[1.0, 2.0], [1.0, 2.0]]), requires_grad=True)
            braze.cdist(a, braze.tensor(np.array([[1.0, 2.0]])), p, mode).sum().backward()
            np.testing.assert_array_equal(a.grad.numpy(), 0.0, err_msg=f"{p} {mode}")


@pytest.mark.parametrize("cpu", ["host", "haswell"])
def test_cdist_compiles(cpu: str, monkeypatch: pytest.MonkeyPatch) -> None:
    force_cpu(cpu, monkeypatch)
    a = braze.tensor(RNG.standard_normal((2, 30, 6)).astype(np.float32))
    b = braze.tensor(RNG.standard_normal((2, 7, 6)).astype(np.float32))

    def f(x: braze.Tensor, y: braze.Tensor) -> tuple[braze.Tensor, ...]:
        return tuple(braze.cdist(x, y, p) for p in PS) + (braze.cdist(x, y, compute_mode=MODES[2]),)
    for got, want in zip(braze.compile(f, a, b)(a, b), f(a, b)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)


# --- cummax / cummin ---------------------------------------------------------------------------------------------


def running_reference(x: np.ndarray, dim: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """torch's loop: a NaN, or a value at least (at most) the running one, takes over."""
    moved = np.moveaxis(x, dim, -1)
    values, indices = np.empty_like(moved), np.zeros(moved.shape, np.int64)
    for idx in np.ndindex(moved.shape[:-1]):
        line = moved[idx]
        best, at = None, 0
        for i, v in enumerate(line):
            nan = isinstance(v, np.floating) and np.isnan(v)
            best_nan = best is not None and isinstance(best, np.floating) and np.isnan(best)
            if best is None or nan or (not best_nan and (v >= best if largest else v <= best)):
                best, at = v, i
            values[idx + (i,)], indices[idx + (i,)] = best, at
    return np.moveaxis(values, -1, dim), np.moveaxis(indices, -1, dim)


CUM_CASES = [((9,), 0), ((3, 17), 1), ((5, 4, 3), 0), ((4, 33), -1), ((2, 3, 4), -2), ((0, 3), 0), ((3, 0), 1),
             ((1,), 0)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_])
@pytest.mark.parametrize("shape, dim", CUM_CASES)
def test_cummax_cummin_match_reference(shape: tuple[int, ...], dim: int, dtype: Any) -> None:
    x = RNG.integers(0, 4, shape).astype(dtype)  # many ties
    if x.dtype.kind == "f" and x.size:
        x.flat[RNG.integers(0, x.size, 2)] = np.nan
    for fn, largest in ((braze.cummax, True), (braze.cummin, False)):
        values, indices = fn(braze.tensor(x), dim)
        want_values, want_indices = running_reference(x, dim, largest)
        assert values.dtype.numpy == dtype and indices.dtype == braze.int64
        np.testing.assert_array_equal(values.numpy(), want_values)
        np.testing.assert_array_equal(indices.numpy(), want_indices)
        named = fn(braze.tensor(x), dim=dim)
        np.testing.assert_array_equal(named.indices.numpy(), want_indices)


def test_cummax_of_a_scalar_and_a_bad_dim() -> None:
    values, indices = braze.cummax(braze.tensor(3.0), 0)
    assert values.item() == 3.0 and indices.item() == 0 and indices.shape == ()
    with pytest.raises(Exception, match="dim"):
        braze.cummin(braze.ones(2, 3), 2)


def test_cummax_cummin_match_torch() -> None:
    torch = pytest.importorskip("torch")
    x = np.array([[1.0, 3.0, 3.0, 2.0, np.nan, 5.0, np.nan, 1.0], [2.0, 1.0, 1.0, 3.0, 0.0, 0.0, -np.inf, np.inf]])
    for name in ("cummax", "cummin"):
        for dim in (0, 1, -1):
            got = getattr(braze, name)(braze.tensor(x), dim)
            want = getattr(torch, name)(torch.tensor(x), dim)
            np.testing.assert_array_equal(got.values.numpy(), want.values.numpy())
            np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())


def test_cummax_cummin_gradients() -> None:
    """Each running extreme's cotangent goes to the position it came from (torch's scatter-add), checked against
    torch and against central differences (away from ties)."""
    x = np.array([[0.5, 2.0, 2.0, 1.0, 3.0, 3.0], [4.0, 1.0, 5.0, 5.0, -1.0, 0.0]])
    w = RNG.standard_normal(x.shape)
    for name in ("cummax", "cummin"):
        for dim in (0, 1):
            t = braze.tensor(x, requires_grad=True)
            (getattr(braze, name)(t, dim).values * braze.tensor(w)).sum().backward()
            expected = np.zeros_like(x)
            _, indices = running_reference(x, dim, name == "cummax")
            np.put_along_axis(expected, indices, 0, dim)
            for idx in np.ndindex(x.shape):
                target = list(idx)
                target[dim] = indices[idx]
                expected[tuple(target)] += w[idx]
            np.testing.assert_allclose(t.grad.numpy(), expected, rtol=1e-15)
    distinct = RNG.permutation(24).reshape(4, 6).astype(float)
    check_gradients(lambda t: (braze.cummax(t, 1).values * braze.tensor(w.repeat(2, 0))).sum(), distinct)
    check_gradients(lambda t: (braze.cummin(t, 0).values * braze.tensor(w.repeat(2, 0))).sum(), distinct)
    torch = pytest.importorskip("torch")
    for name in ("cummax", "cummin"):
        t, tt = braze.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        (getattr(braze, name)(t, 1).values * braze.tensor(w)).sum().backward()
        (getattr(torch, name)(tt, 1).values * torch.tensor(w)).sum().backward()
        np.testing.assert_array_equal(t.grad.numpy(), tt.grad.numpy())


def test_cummax_cummin_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    force_cpu("host", monkeypatch)
    x = braze.tensor(RNG.integers(0, 6, (3, 37)).astype(np.float32))

    def f(t: braze.Tensor) -> tuple[braze.Tensor, ...]:
        return (*braze.cummax(t, 1), *braze.cummin(t, 0))
    for got, want in zip(braze.compile(f, x)(x), f(x)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_cummax_cummin_tensor_methods() -> None:
    if not hasattr(braze.Tensor, "cummax"):
        pytest.skip("Tensor.cummax and Tensor.cummin are bound from ordering.TENSOR_METHODS in methods.py")
    x = braze.tensor(np.array([1.0, 3.0, 2.0, 3.0]))
    np.testing.assert_array_equal(x.cummax(0).indices.numpy(), [0, 1, 1, 3])
    np.testing.assert_array_equal(x.cummin(dim=-1).values.numpy(), [1.0, 1.0, 1.0, 1.0])
