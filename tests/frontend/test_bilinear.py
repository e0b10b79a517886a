"""nn.Bilinear and F.bilinear against torch: parameters and initialization bounds, strict loading of torch's
weights, outputs (float32 to 1e-5 relative, 1e-6 absolute) over leading batch dims and unbatched, with and
without bias, gradients of both inputs and the parameters (float64 to 1e-10), shape errors, and compiled
(float32 to 1e-5 of eager)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F

torch = pytest.importorskip("torch")

R = np.random.default_rng(8)
IN1, IN2, OUT = 4, 3, 5
LEADING = [(6,), (2, 3), ()]


def pair(bias: bool, dtype: str) -> tuple[Any, Any]:
    """torch's Bilinear and a braze Bilinear holding its weights (loaded with strict keys)."""
    theirs = torch.nn.Bilinear(IN1, IN2, OUT, bias=bias).to(getattr(torch, dtype))
    ours = nn.Bilinear(IN1, IN2, OUT, bias=bias).to(getattr(braze, dtype))
    ours.load_state_dict({k: braze.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()}, strict=True)
    return theirs, ours


@pytest.mark.parametrize("bias", [True, False])
def test_parameters_match_torch(bias: bool) -> None:
    theirs, ours = torch.nn.Bilinear(IN1, IN2, OUT, bias=bias), nn.Bilinear(IN1, IN2, OUT, bias=bias)
    assert {k: tuple(v.shape) for k, v in ours.named_parameters()} == \
        {k: tuple(v.shape) for k, v in theirs.named_parameters()}
    assert repr(ours) == repr(theirs)
    assert (ours.bias is None) == (not bias)
    big = nn.Bilinear(64, 8, 40, bias=bias)
    values = np.concatenate([p.detach().numpy().ravel() for p in big.parameters()])
    assert 0.99 / 8 < np.abs(values).max() <= 1 / 8
    assert abs(values.mean()) < 0.01 and abs(values.std() - 1 / 8 / math.sqrt(3)) < 0.005


@pytest.mark.parametrize("lead", LEADING, ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_outputs_match_torch(lead: tuple[int, ...], bias: bool) -> None:
    theirs, ours = pair(bias, "float32")
    x1, x2 = (R.standard_normal(lead + (n,)).astype(np.float32) for n in (IN1, IN2))
    want = theirs(torch.tensor(x1), torch.tensor(x2)).detach().numpy()
    got = ours(braze.tensor(x1), braze.tensor(x2)).detach().numpy()
    assert got.shape == want.shape == lead + (OUT,) and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("lead", LEADING, ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_gradients_match_torch(lead: tuple[int, ...], bias: bool) -> None:
    x1, x2 = (R.standard_normal(lead + (n,)) for n in (IN1, IN2))
    weights = R.standard_normal(lead + (OUT,))
    grads = []
    for lib, model in zip((torch, braze), pair(bias, "float64")):
        a, b = lib.tensor(x1, requires_grad=True), lib.tensor(x2, requires_grad=True)
        (model(a, b) * lib.tensor(weights)).sum().backward()
        grads.append([a.grad.numpy(), b.grad.numpy()] + [p.grad.numpy() for _, p in model.named_parameters()])
    want, got = grads
    assert len(got) == len(want) == (4 if bias else 3)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_functional_form_matches_torch() -> None:
    x1, x2, w, b = R.standard_normal((3, IN1)), R.standard_normal((3, IN2)), R.standard_normal((OUT, IN1, IN2)), \
        R.standard_normal(OUT)
    want = torch.nn.functional.bilinear(*(torch.tensor(a) for a in (x1, x2, w, b))).numpy()
    got = F.bilinear(*(braze.tensor(a) for a in (x1, x2, w, b))).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


w = braze.randn(OUT, IN1, IN2)


@pytest.mark.parametrize("call,message", [
    (lambda: F.bilinear(braze.randn(3, IN1), braze.randn(2, IN2), w), "batch dimensions do not match at dim 0"),
    (lambda: F.bilinear(braze.randn(3, IN1), braze.randn(3, IN1), w), "input2 size does not match weight size"),
    (lambda: F.bilinear(braze.randn(3, IN2), braze.randn(3, IN2), w), "input1 size does not match weight size"),
    (lambda: F.bilinear(braze.randn(3, IN1), braze.randn(IN2), w), "input dimensions do not match: got 2 and 1"),
    (lambda: F.bilinear(braze.randn(IN1), braze.randn(IN2), braze.randn(IN1, IN2)), "weight must be 3-dimensional"),
    (lambda: F.bilinear(braze.randn(IN1), braze.randn(IN2), w, braze.randn(OUT + 1)), "bias size does not match"),
])
def test_bad_shapes_raise_clear_errors(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_compiled_bilinear_matches_eager() -> None:
    model = nn.Bilinear(IN1, IN2, OUT).valid()
    x1, x2 = braze.randn(2, 3, IN1), braze.randn(2, 3, IN2)
    compiled = braze.compile(model, x1, x2)
    for scale in (1.0, -2.0):
        np.testing.assert_allclose(compiled(x1 * scale, x2).numpy(), model(x1 * scale, x2).detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
