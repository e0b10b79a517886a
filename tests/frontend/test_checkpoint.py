"""torch.utils.checkpoint.checkpoint: the checkpointed segment gives the values and gradients of the plain call."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import braze
from braze.utils.checkpoint import checkpoint

W = np.linspace(-1.0, 1.0, 12).reshape(3, 4)


def _segment(x: braze.Tensor, w: braze.Tensor, *, scale: float) -> braze.Tensor:
    return braze.tanh(x @ w) * scale


def _grads(checkpointed: bool) -> tuple[np.ndarray, ...]:
    x = braze.tensor(np.arange(6.0).reshape(2, 3) / 6, requires_grad=True)
    w = braze.tensor(W, requires_grad=True)
    y = checkpoint(_segment, x, w, use_reentrant=False, scale=3.0) if checkpointed else _segment(x, w, scale=3.0)
    (y * y).sum().backward()
    return y.detach().numpy(), x.grad.numpy(), w.grad.numpy()


def test_checkpoint_gives_the_plain_calls_values_and_gradients() -> None:
    for ours, plain in zip(_grads(True), _grads(False)):
        np.testing.assert_array_equal(ours, plain)


def test_checkpoint_runs_the_segment_in_the_forward_context() -> None:
    seen = []

    @contextlib.contextmanager
    def forward():
        seen.append("forward")
        yield

    out = checkpoint(lambda x: x + 1, braze.ones(1), use_reentrant=False,
                     context_fn=lambda: (forward(), contextlib.nullcontext()))
    assert (out.tolist(), seen) == ([2.0], ["forward"])


def test_checkpoint_refuses_an_unknown_determinism_check() -> None:
    with pytest.raises(braze.BrazeError, match="checkpoint: determinism_check='strict' is not supported; supported "
                                               "values: 'default', 'none'"):
        checkpoint(lambda x: x, braze.ones(1), determinism_check="strict")
