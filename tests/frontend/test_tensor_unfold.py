"""Tensor.unfold (sliding windows along a dim as a new last dim) against torch: values bit for bit over steps below,
equal to and above the window size, windows spanning the whole dim, negative dims, empty windows and 0-d tensors;
float64 gradients; the argument errors; and compiled code equal to eager."""
from __future__ import annotations

import numpy as np
import pytest

import braze

torch = pytest.importorskip("torch")

R = np.random.default_rng(5)
# (shape, dimension, size, step)
WINDOWS = [
    ((7,), 0, 2, 1),
    ((7,), 0, 2, 2),
    ((7,), 0, 2, 3),
    ((9,), 0, 3, 5),
    ((2, 9, 3), 1, 3, 2),
    ((2, 9, 3), -2, 9, 1),
    ((4, 5), -1, 5, 2),
    ((4, 5), 0, 1, 1),
    ((3, 10), 1, 8, 1),
    ((2, 3, 4), 2, 2, 7),
    ((2, 3, 4), 0, 2, 1),
    ((5,), 0, 0, 2),
    ((0, 3), 0, 0, 1),
    ((3, 0), 0, 2, 1),
    ((), 0, 1, 1),
    ((), -1, 0, 1),
]
IDS = [f"{'x'.join(map(str, s)) or 'scalar'}-d{d}-size{k}-step{st}" for s, d, k, st in WINDOWS]


@pytest.mark.parametrize("window", WINDOWS, ids=IDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_values_match_torch(window: tuple, dtype: type) -> None:
    shape, d, size, step = window
    x = R.standard_normal(shape).astype(dtype)
    want = torch.tensor(x).unfold(d, size, step).numpy()
    got = braze.tensor(x).unfold(d, size, step).numpy()
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("window", WINDOWS, ids=IDS)
def test_gradients_match_torch(window: tuple) -> None:
    shape, d, size, step = window
    x = R.standard_normal(shape)
    xt, xb = torch.tensor(x, requires_grad=True), braze.tensor(x, requires_grad=True)
    out_t, out_b = xt.unfold(d, size, step), xb.unfold(d, size, step)
    cotangent = R.standard_normal(tuple(out_t.shape))
    (out_t * torch.tensor(cotangent)).sum().backward()
    (out_b * braze.tensor(cotangent)).sum().backward()
    if xt.grad is None:
        assert xb.grad is None or not np.any(xb.grad.numpy())
    else:
        np.testing.assert_allclose(xb.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_integer_tensors_and_parameters_unfold() -> None:
    x = np.arange(12).reshape(3, 4)
    np.testing.assert_array_equal(braze.tensor(x).unfold(1, 2, 1).numpy(), torch.tensor(x).unfold(1, 2, 1).numpy())
    p = braze.nn.Parameter(braze.tensor(x.astype(np.float32)))
    assert tuple(p.unfold(0, 2, 1).shape) == (2, 4, 2)


@pytest.mark.parametrize("args,error,message", [
    ((0, 6, 1), Exception, "maximum size for tensor at dimension 0 is 5 but size is 6"),
    ((0, 2, 0), Exception, "step is 0 but must be > 0"),
    ((0, -1, 1), Exception, "size is -1 but must be >= 0"),
    ((1, 2, 1), IndexError, "out of range"),
])
def test_errors(args: tuple, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        braze.randn(5).unfold(*args)


def test_compiled_matches_eager() -> None:
    def windows(x: braze.Tensor) -> braze.Tensor:
        return x.unfold(-1, 3, 2).sum(-1) + x.unfold(1, 4, 1).amax(-1)[..., :4] * 0.5 + x.unfold(2, 8, 9).mean()

    x = braze.randn(2, 4, 9)
    compiled = braze.compile(windows, x)
    for scale in (1.0, -3.0):
        np.testing.assert_allclose(compiled(x * scale).numpy(), windows(x * scale).numpy(), rtol=1e-5, atol=1e-6)
