"""searchsorted, bucketize and histc agree with numpy references and torch over dtypes, sides, sorters, batched
sequences, NaN and empty inputs, by both of searchsorted's forms (pairwise comparison and one stable sort); they
refuse what torch refuses, and compile (histc with the data's range computed in the graph)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import braze
from braze.frontend import binning
from tests.frontend.test_elementary import force_cpu

RNG = np.random.default_rng(3)
DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8]


@pytest.fixture(params=["compare", "sort"])
def form(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """searchsorted by pairwise comparison, or by sorting (a sort costed as free, or as never worth it)."""
    monkeypatch.setattr(binning, "_SORT_COST", 10 ** 9 if request.param == "compare" else 0)
    return request.param


def reference(seq: np.ndarray, values: Any, right: bool) -> np.ndarray:
    """numpy's searchsorted row by row (NaN values go to the end, as torch's)."""
    side = "right" if right else "left"
    values = np.asarray(values)
    if seq.ndim == 1:
        out = np.searchsorted(seq, values, side=side)
        return np.where(np.isnan(values), len(seq), out) if values.dtype.kind == "f" else out
    rows = [reference(s, v, right) for s, v in zip(seq.reshape(-1, seq.shape[-1]),
                                                    values.reshape(-1, values.shape[-1]))]
    return np.array(rows, np.int64).reshape(values.shape)


def both(seq: np.ndarray, values: Any, **kw: Any) -> np.ndarray:
    """braze.searchsorted's result, checked against torch's when torch is installed."""
    tensor = (lambda v: braze.tensor(v)) if not isinstance(values, (int, float)) else (lambda v: v)
    got = braze.searchsorted(braze.tensor(seq), tensor(values),
                             **{k: braze.tensor(v) if k == "sorter" else v for k, v in kw.items()})
    try:
        import torch
    except ImportError:
        return got.numpy()
    tv = torch.tensor(values) if not isinstance(values, (int, float)) else values
    want = torch.searchsorted(torch.tensor(seq), tv, **{k: torch.tensor(v) if k == "sorter" else v
                                                        for k, v in kw.items()})
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert got.numpy().dtype == want.numpy().dtype
    return got.numpy()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_matches_numpy_and_torch(dtype: Any, right: bool, form: str) -> None:
    seq = np.sort(RNG.integers(0, 12, 15)).astype(dtype)  # repeated entries: ties on both sides
    values = RNG.integers(0, 14, (3, 6)).astype(dtype)
    got = both(seq, values, right=right)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, reference(seq, values, right))
    np.testing.assert_array_equal(both(seq, values, side="right" if right else "left"), got)
    int32 = both(seq, values, right=right, out_int32=True)
    assert int32.dtype == np.int32
    np.testing.assert_array_equal(int32, got)
    batched = np.sort(RNG.integers(0, 12, (2, 3, 9)), -1).astype(dtype)
    values3 = RNG.integers(0, 14, (2, 3, 5)).astype(dtype)
    np.testing.assert_array_equal(both(batched, values3, right=right), reference(batched, values3, right))


@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_sorter_scalars_and_promotion(right: bool, form: str) -> None:
    seq = np.array([5.0, 1.0, 3.0, 3.0, 9.0, 0.5])
    sorter = np.argsort(seq, kind="stable")
    values = np.array([0.0, 1.0, 3.0, 4.0, 10.0])
    np.testing.assert_array_equal(both(seq, values, right=right, sorter=sorter),
                                  reference(np.sort(seq), values, right))
    batched = RNG.standard_normal((3, 6))
    bvalues = RNG.standard_normal((3, 4))
    np.testing.assert_array_equal(both(batched, bvalues, right=right, sorter=np.argsort(batched, -1)),
                                  reference(np.sort(batched, -1), bvalues, right))
    ints = np.array([1, 2, 2, 4])
    assert both(ints, 2, right=right) == (3 if right else 1)
    assert both(ints, 1.5, right=right) == 1  # an int sequence and float values compare as floats, as torch
    np.testing.assert_array_equal(both(ints, np.array([1.5, 2.0]), right=right), [1, 3 if right else 1])
    np.testing.assert_array_equal(both(np.array([1.0, 2.0]), np.array([1, 2]), right=right),
                                  [1, 2] if right else [0, 1])


def test_searchsorted_nan_infinities_and_empty(form: str) -> None:
    seq = np.array([1.0, 2.0, 2.0, 3.0, 5.0])
    values = np.array([math.nan, 2.0, 0.0, 9.0, -math.inf, math.inf])
    np.testing.assert_array_equal(both(seq, values), [5, 1, 0, 5, 0, 5])
    np.testing.assert_array_equal(both(seq, values, right=True), [5, 3, 0, 5, 0, 5])
    np.testing.assert_array_equal(both(np.zeros(0), np.array([1.0, 2.0])), [0, 0])
    assert both(seq, np.zeros((2, 0))).shape == (2, 0)
    # NaN in the sequence counts as larger than every number (torch's binary search gives probe-dependent results)
    got = braze.searchsorted(braze.tensor([1.0, 2.0, math.nan]), braze.tensor([1.5, 2.0, 3.0, math.nan]))
    np.testing.assert_array_equal(got.numpy(), [1, 1, 2, 3])


@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_forms_agree_on_random_data(right: bool, form: str) -> None:
    seq = np.sort(RNG.standard_normal((4, 300)).astype(np.float32), -1)
    seq[:, 1::7] = seq[:, ::7][:, :seq[:, 1::7].shape[1]]  # equal neighbours
    values = np.concatenate([RNG.standard_normal((4, 200)), seq[:, :50]], -1).astype(np.float32)
    got = braze.searchsorted(braze.tensor(seq), braze.tensor(values), right=right)
    np.testing.assert_array_equal(got.numpy(), reference(seq, values, right))


def test_searchsorted_refuses_what_torch_refuses() -> None:
    s = braze.tensor([1.0, 2.0])
    with pytest.raises(ValueError, match="opposite"):
        braze.searchsorted(s, braze.tensor([1.0]), side="left", right=True)
    with pytest.raises(ValueError, match="'left' or 'right'"):
        braze.searchsorted(s, braze.tensor([1.0]), side="middle")
    with pytest.raises(braze.ShapeError, match="at least 1 dim"):
        braze.searchsorted(braze.tensor(1.0), braze.tensor([1.0]))
    with pytest.raises(braze.ShapeError, match="only a 1-D sequence"):
        braze.searchsorted(braze.tensor([[1.0, 2.0], [3.0, 4.0]]), braze.tensor([[1.0, 2.0, 3.0]]))
    with pytest.raises(braze.ShapeError, match="only a 1-D sequence"):
        braze.searchsorted(braze.tensor([[1.0, 2.0]]), 1.0)
    with pytest.raises(braze.ShapeError, match="sorter"):
        braze.searchsorted(s, braze.tensor([1.0]), sorter=braze.tensor([0]))
    with pytest.raises(braze.ShapeError, match="sorter"):
        braze.searchsorted(s, braze.tensor([1.0]), sorter=braze.tensor([0.0, 1.0]))
    with pytest.raises(braze.DTypeError, match="bool"):
        braze.searchsorted(braze.tensor([False, True]), braze.tensor([True]))
    with pytest.raises(braze.ShapeError, match="1-D"):
        braze.bucketize(braze.tensor([1.0]), braze.tensor([[1.0, 2.0]]))


@pytest.mark.parametrize("right", [False, True])
def test_bucketize(right: bool) -> None:
    boundaries = np.array([1, 3, 5, 7])
    x = np.array([[0, 1, 2], [3, 6, 9]])
    got = braze.bucketize(braze.tensor(x), braze.tensor(boundaries), right=right)
    np.testing.assert_array_equal(got.numpy(), np.digitize(x, boundaries, right=not right))
    assert braze.bucketize(braze.tensor(x), braze.tensor(boundaries), out_int32=True).dtype == braze.int32
    assert braze.bucketize(4, braze.tensor(boundaries)).item() == 2
    assert not hasattr(braze.Tensor, "bucketize") and not hasattr(braze.Tensor, "searchsorted")  # as torch.Tensor
    torch = pytest.importorskip("torch")
    want = torch.bucketize(torch.tensor(x * 1.5), torch.tensor(boundaries), right=right)
    got = braze.bucketize(braze.tensor(x * 1.5), braze.tensor(boundaries), right=right)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


# --- histc -------------------------------------------------------------------------------------------------------


def histc_reference(x: np.ndarray, bins: int, lo: float, hi: float) -> np.ndarray:
    """torch's rule in x's dtype: with lo = hi the data's range (widened by 1 each way when flat), then the bin
    int((v - lo) bins / (hi - lo)) of each v in [lo, hi], the last bin closed."""
    flat = x.reshape(-1)
    t = flat.dtype.type
    if lo == hi and flat.size:
        lo, hi = flat.min(), flat.max()
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    lo, hi = t(lo), t(hi)
    inside = flat[(flat >= lo) & (flat <= hi)]
    pos = np.minimum(((inside - lo) * t(bins) / (hi - lo)).astype(np.int64), bins - 1)
    return np.bincount(pos, minlength=bins).astype(flat.dtype)


HISTC_CASES = [
    (RNG.standard_normal(1000), {}),
    (RNG.standard_normal((20, 30)), {"bins": 7}),
    (RNG.standard_normal(500), {"bins": 9, "min": -1, "max": 1.5}),
    (RNG.standard_normal(200), {"bins": 3, "min": 0.5, "max": 0.5}),  # min = max: the data's range
    (np.full(5, 2.0), {"bins": 4}),
    (np.array([1.0, np.nan, np.inf, -np.inf, 2.0, 0.0]), {"bins": 3, "min": 0, "max": 2}),
    (np.zeros(0), {"bins": 3}),
    (np.array(1.5), {"bins": 3}),
    (np.linspace(0, 1, 101), {"bins": 10}),  # values on the bin edges
    (np.arange(10.0), {"bins": 10, "min": 0, "max": 9}),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x, kw", HISTC_CASES)
def test_histc_matches_reference_and_torch(x: np.ndarray, kw: dict[str, Any], dtype: Any) -> None:
    x = x.astype(dtype)
    got = braze.histc(braze.tensor(x), **kw)
    assert got.dtype.numpy == dtype
    want = histc_reference(x, kw.get("bins", 100), kw.get("min", 0), kw.get("max", 0))
    np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(braze.tensor(x).histc(**kw).numpy(), want)
    try:
        import torch
    except ImportError:
        return
    np.testing.assert_array_equal(got.numpy(), torch.histc(torch.tensor(x), **kw).numpy())


def test_histc_refuses_what_torch_refuses() -> None:
    with pytest.raises(braze.DTypeError, match="floating-point"):
        braze.histc(braze.tensor([1, 2]), bins=3)
    with pytest.raises(ValueError, match="not finite"):
        braze.histc(braze.tensor([1.0, math.nan]), bins=3)
    with pytest.raises(ValueError, match="not finite"):
        braze.histc(braze.tensor([1.0, math.inf]), bins=3)
    with pytest.raises(ValueError, match="not finite"):
        braze.histc(braze.tensor([1.0]), bins=3, min=0, max=math.inf)
    with pytest.raises(ValueError, match="larger than min"):
        braze.histc(braze.tensor([1.0]), bins=3, min=2, max=1)
    with pytest.raises(ValueError, match="positive"):
        braze.histc(braze.tensor([1.0]), bins=0)


# --- compiled ----------------------------------------------------------------------------------------------------


def _binned(seq: braze.Tensor, values: braze.Tensor, boundaries: braze.Tensor) -> tuple[braze.Tensor, ...]:
    return (braze.searchsorted(seq, values), braze.searchsorted(seq, values, right=True, out_int32=True),
            braze.bucketize(values, boundaries), braze.histc(values, bins=12), braze.histc(values, 5, -1, 1))


@pytest.mark.parametrize("cpu", ["host", "haswell"])
def test_compiled_matches_eager(cpu: str, form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    force_cpu(cpu, monkeypatch)
    seq = braze.tensor(np.sort(RNG.standard_normal((3, 40)), -1).astype(np.float32))
    values = braze.tensor(RNG.standard_normal((3, 25)).astype(np.float32))
    boundaries = braze.tensor(np.linspace(-2, 2, 9, dtype=np.float32))
    compiled = braze.compile(_binned, seq, values, boundaries)
    for got, want in zip(compiled(seq, values, boundaries), _binned(seq, values, boundaries)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    wider = braze.tensor(RNG.uniform(-5, 20, (3, 25)).astype(np.float32))  # histc's range follows the data
    np.testing.assert_array_equal(compiled(seq, wider, boundaries)[3].numpy(),
                                  histc_reference(wider.numpy(), 12, 0, 0))
