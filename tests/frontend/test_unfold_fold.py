"""F.unfold, F.fold, nn.Unfold and nn.Fold against torch: values (unfold bit for bit; fold, whose overlaps may sum in
another order, float32 to 1e-6 and float64 to 1e-12) over strides, padding, dilation and non-square windows,
batched and unbatched; gradients (float64 to 1e-12); fold(unfold(x)) as x times the overlap counts; inf and NaN
landing only where torch puts them; argument errors; speed; and both compiled (float32, equal to eager)."""
from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F

torch = pytest.importorskip("torch")
tF = torch.nn.functional

R = np.random.default_rng(3)
# (input shape, kernel_size, dilation, padding, stride)
WINDOWS = [
    ((2, 3, 7, 9), 3, 1, 0, 1),
    ((2, 3, 7, 9), (2, 3), (2, 1), (1, 2), (2, 1)),
    ((1, 2, 8, 8), 2, 1, 0, 2),
    ((2, 2, 9, 8), (3, 2), (1, 3), 1, (3, 2)),
    ((1, 1, 5, 5), 5, 1, 0, 1),
    ((1, 4, 6, 11), (1, 4), 1, (0, 3), (1, 3)),
    ((0, 2, 4, 4), 2, 1, 1, 1),
    ((3, 6, 5), 2, 1, 1, 2),
]
IDS = [f"{'x'.join(map(str, s))}-k{k}-d{d}-p{p}-s{st}" for s, k, d, p, st in WINDOWS]


def args(window: tuple) -> dict[str, Any]:
    _, k, d, p, s = window
    return {"kernel_size": k, "dilation": d, "padding": p, "stride": s}


@pytest.mark.parametrize("window", WINDOWS, ids=IDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unfold_and_fold_match_torch(window: tuple, dtype: Any) -> None:
    x = R.standard_normal(window[0]).astype(dtype)
    want = tF.unfold(torch.tensor(x), **args(window)).numpy()
    got = F.unfold(braze.tensor(x), **args(window)).numpy()
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    cols = R.standard_normal(want.shape).astype(dtype)
    size = window[0][-2:]
    want = tF.fold(torch.tensor(cols), size, **args(window)).numpy()
    got = F.fold(braze.tensor(cols), size, **args(window)).numpy()
    assert got.shape == want.shape == tuple(window[0]) and got.dtype == want.dtype
    tol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("window", WINDOWS, ids=IDS)
def test_gradients_match_torch(window: tuple) -> None:
    x = R.standard_normal(window[0])
    cols_shape = tF.unfold(torch.tensor(x), **args(window)).shape
    weights = R.standard_normal(cols_shape)
    cols = R.standard_normal(cols_shape)
    size = window[0][-2:]
    grads = []
    for lib, fns in ((torch, tF), (braze, F)):
        xs, cs = lib.tensor(x, requires_grad=True), lib.tensor(cols, requires_grad=True)
        loss = (fns.unfold(xs, **args(window)) * lib.tensor(weights)).sum() + \
            (fns.fold(cs, size, **args(window)) * lib.tensor(x)).sum()
        loss.backward()
        grads.append((xs.grad.numpy(), cs.grad.numpy()))
    for got, want in zip(*reversed(grads)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def overlap_counts(size: tuple[int, int], k: tuple[int, int], d: tuple[int, int], p: tuple[int, int],
                   s: tuple[int, int]) -> np.ndarray:
    """How many sliding blocks cover each position of a plane, counted one block at a time."""
    counts = np.zeros((size[0] + 2 * p[0], size[1] + 2 * p[1]))
    blocks = [(counts.shape[a] - d[a] * (k[a] - 1) - 1) // s[a] + 1 for a in range(2)]
    for bi in range(blocks[0]):
        for bj in range(blocks[1]):
            for i in range(k[0]):
                for j in range(k[1]):
                    counts[bi * s[0] + i * d[0], bj * s[1] + j * d[1]] += 1
    return counts[p[0]:p[0] + size[0], p[1]:p[1] + size[1]]


@pytest.mark.parametrize("k,d,p,s", [((3, 3), (1, 1), (1, 1), (1, 1)), ((2, 3), (2, 1), (0, 2), (1, 2)),
                                     ((3, 2), (1, 2), (2, 0), (2, 3))])
def test_fold_of_unfold_is_the_input_times_the_overlap_counts(k: tuple, d: tuple, p: tuple, s: tuple) -> None:
    x = R.standard_normal((2, 3, 8, 9))
    got = F.fold(F.unfold(braze.tensor(x), k, d, p, s), (8, 9), k, d, p, s).numpy()
    np.testing.assert_allclose(got, x * overlap_counts((8, 9), k, d, p, s), rtol=1e-13, atol=1e-13)


def special_values(shape: tuple[int, ...]) -> np.ndarray:
    """Normal values with inf, -inf and NaN at a few places."""
    x = R.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[R.choice(flat.size, 6, replace=False)] = [np.inf, -np.inf, np.nan, np.inf, np.nan, -np.inf]
    return x


@pytest.mark.parametrize("window", WINDOWS[:6], ids=IDS[:6])
def test_inf_and_nan_land_only_where_torch_puts_them(window: tuple) -> None:
    x = special_values(window[0])
    want = tF.unfold(torch.tensor(x), **args(window)).numpy()
    got = F.unfold(braze.tensor(x), **args(window)).numpy()
    np.testing.assert_array_equal(got, want)  # NaN where torch has NaN, nowhere else
    cols = special_values(want.shape)
    size = window[0][-2:]
    want = tF.fold(torch.tensor(cols), size, **args(window)).numpy()
    got = F.fold(braze.tensor(cols), size, **args(window)).numpy()
    for kind in (np.isnan, np.isposinf, np.isneginf):
        np.testing.assert_array_equal(kind(got), kind(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6, atol=1e-6)


def test_modules_match_torch_in_repr_and_output() -> None:
    x = R.standard_normal((2, 3, 6, 7)).astype(np.float32)
    pairs = [(nn.Unfold((2, 3), dilation=2, padding=1, stride=(1, 2)),
              torch.nn.Unfold((2, 3), dilation=2, padding=1, stride=(1, 2))),
             (nn.Unfold(3), torch.nn.Unfold(3))]
    for ours, theirs in pairs:
        assert repr(ours) == repr(theirs)
        want = theirs(torch.tensor(x)).numpy()
        np.testing.assert_array_equal(ours(braze.tensor(x)).numpy(), want)
        fold_args = {k: getattr(theirs, k) for k in ("kernel_size", "dilation", "padding", "stride")}
        ours_fold, theirs_fold = nn.Fold((6, 7), **fold_args), torch.nn.Fold((6, 7), **fold_args)
        assert repr(ours_fold) == repr(theirs_fold)
        np.testing.assert_allclose(ours_fold(braze.tensor(want)).numpy(), theirs_fold(torch.tensor(want)).numpy(),
                                   rtol=1e-6, atol=1e-6)


x4, cols = braze.randn(1, 3, 5, 6), braze.randn(1, 12, 20)


@pytest.mark.parametrize("call,message", [
    (lambda: F.fold(braze.randn(1, 12, 19), (5, 6), 2), r"number of sliding blocks 4 \* 5 = 20, but got "
                                                        r"input.size\(2\)=19"),
    (lambda: F.fold(braze.randn(1, 11, 20), (5, 6), 2), r"divisible by the product of kernel_size, but got "
                                                        r"input.size\(1\)=11"),
    (lambda: F.fold(braze.randn(2, 1, 12, 20), (5, 6), 2), "expected a 2-d or 3-d"),
    (lambda: F.fold(braze.randn(1, 12, 0), (1, 1), 2), "expected a 2-d or 3-d"),
    (lambda: F.fold(cols, (5, 6, 7), 2), "output_size expects an int or a pair"),
    (lambda: F.fold(cols, (5, 6), 2, stride=0), "stride should be greater than zero"),
    (lambda: F.unfold(braze.randn(5, 6), 2), "expected a 3-d or 4-d"),
    (lambda: F.unfold(braze.randn(1, 0, 5, 6), 2), "expected a 3-d or 4-d"),
    (lambda: F.unfold(x4, 7), r"array of sliding blocks would be \(-1, 0\)"),
    (lambda: F.unfold(x4, 2, dilation=0), "dilation should be greater than zero"),
    (lambda: F.unfold(x4, 2, padding=-1), "padding should be non-negative"),
    (lambda: F.unfold(x4, 0), "kernel should be greater than zero"),
    (lambda: F.unfold(x4, (2, 2, 2)), "kernel_size expects an int or a pair"),
])
def test_bad_arguments_raise_clear_errors(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_a_64_by_64_image_with_a_3x3_kernel_takes_milliseconds() -> None:
    x = braze.randn(1, 3, 64, 64, requires_grad=True)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        F.fold(F.unfold(x, 3, padding=1), (64, 64), 3, padding=1).sum().backward()
        best = min(best, time.perf_counter() - start)
    assert best < 0.1


class Patches(nn.Module):
    """Overlapping patches, each scaled, summed back into the image."""

    def forward(self, x: Any) -> Any:
        cols = F.unfold(x, (3, 2), dilation=(1, 2), padding=1, stride=(2, 1))
        return F.fold(cols * 0.5, x.shape[-2:], (3, 2), dilation=(1, 2), padding=1, stride=(2, 1)), cols


def test_compiled_unfold_and_fold_equal_eager_for_every_value() -> None:
    model = Patches().valid()
    x = braze.tensor(special_values((2, 3, 7, 8)))
    compiled = braze.compile(model, x)
    for value in (x, braze.randn(2, 3, 7, 8)):
        for got, want in zip(compiled(value), model(value), strict=True):
            np.testing.assert_array_equal(got.numpy(), want.numpy())
