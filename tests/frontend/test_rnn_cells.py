"""nn.RNNCell, nn.LSTMCell and nn.GRUCell against torch: parameter names, shapes and initialization bounds, strict
loading of torch's weights, outputs (float32 to 1e-5 relative, 1e-6 absolute) batched and unbatched, with and
without a given state and bias, gradients of inputs, states and parameters (float64 to 1e-10), the argument errors,
and an unrolled LSTMCell and a GRUCell compiled (float32 to 1e-5 of eager)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import braze
import braze.nn as nn

torch = pytest.importorskip("torch")

R = np.random.default_rng(11)
IN, HID, BATCH = 3, 5, 4
CASES = [("RNNCell", {}), ("RNNCell", {"nonlinearity": "relu"}), ("RNNCell", {"bias": False}), ("LSTMCell", {}),
         ("LSTMCell", {"bias": False}), ("GRUCell", {}), ("GRUCell", {"bias": False})]
IDS = [kind + "".join(f"-{k}={v}" for k, v in kw.items()) for kind, kw in CASES]


def pair(kind: str, kw: dict[str, Any], dtype: str) -> tuple[Any, Any]:
    """The torch cell and a braze cell holding its weights (loaded with strict keys)."""
    theirs = getattr(torch.nn, kind)(IN, HID, **kw).to(getattr(torch, dtype))
    ours = getattr(nn, kind)(IN, HID, **kw).to(getattr(braze, dtype))
    ours.load_state_dict({k: braze.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()}, strict=True)
    return theirs, ours


def state(kind: str, lib: Any, arrays: list[np.ndarray], requires_grad: bool = False) -> Any:
    """hx for the cell: (h, c) for an LSTMCell, h otherwise."""
    ts = [lib.tensor(a, requires_grad=requires_grad) for a in arrays]
    return tuple(ts) if kind == "LSTMCell" else ts[0]


def outputs(result: Any) -> list[np.ndarray]:
    return [r.detach().numpy() for r in (result if isinstance(result, tuple) else (result,))]


@pytest.mark.parametrize("kind,kw", CASES, ids=IDS)
def test_parameters_match_torch_in_names_shapes_and_init_bounds(kind: str, kw: dict[str, Any]) -> None:
    theirs, ours = getattr(torch.nn, kind)(IN, HID, **kw), getattr(nn, kind)(IN, HID, **kw)
    want = {k: tuple(v.shape) for k, v in theirs.named_parameters()}
    assert {k: tuple(v.shape) for k, v in ours.named_parameters()} == want
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert repr(ours) == repr(theirs)
    bound = 1.0 / math.sqrt(HID)
    for name, p in ours.named_parameters():
        values = p.detach().numpy()
        assert values.dtype == np.float32, name
        assert np.abs(values).max() <= bound, name
    big = getattr(nn, kind)(40, 64, **kw)
    values = np.concatenate([p.detach().numpy().ravel() for p in big.parameters()])
    assert np.abs(values).max() <= 1 / 8 and np.abs(values).max() > 0.99 / 8
    assert abs(values.mean()) < 0.01 and abs(values.std() - 1 / 8 / math.sqrt(3)) < 0.005


@pytest.mark.parametrize("kind,kw", CASES, ids=IDS)
def test_outputs_match_torch_batched_and_unbatched(kind: str, kw: dict[str, Any]) -> None:
    theirs, ours = pair(kind, kw, "float32")
    x = R.standard_normal((BATCH, IN)).astype(np.float32)
    hx = [R.standard_normal((BATCH, HID)).astype(np.float32) for _ in range(2 if kind == "LSTMCell" else 1)]
    calls = [((x,), None), ((x,), hx), ((x[1],), None), ((x[1],), [h[1] for h in hx])]
    for (inp,), given in calls:
        want = theirs(torch.tensor(inp), None if given is None else state(kind, torch, given))
        got = ours(braze.tensor(inp), None if given is None else state(kind, braze, given))
        for g, w in zip(outputs(got), outputs(want), strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind,kw", CASES, ids=IDS)
def test_gradients_match_torch(kind: str, kw: dict[str, Any]) -> None:
    x = R.standard_normal((BATCH, IN))
    hx = [R.standard_normal((BATCH, HID)) for _ in range(2 if kind == "LSTMCell" else 1)]
    weights = [R.standard_normal((BATCH, HID)) for _ in range(2)]
    models = pair(kind, kw, "float64")
    grads = []
    for lib, model in zip((torch, braze), models):
        xs, hs = lib.tensor(x, requires_grad=True), state(kind, lib, hx, requires_grad=True)
        out = model(xs, hs)
        outs = out if isinstance(out, tuple) else (out,)
        loss = sum((o * lib.tensor(w)).sum() for o, w in zip(outs, weights))
        loss.backward()
        leaves = [xs, *(hs if isinstance(hs, tuple) else (hs,))]
        grads.append([t.grad.numpy() for t in leaves] + [p.grad.numpy() for _, p in model.named_parameters()])
    want, got = grads
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_lstm_cell_matches_one_step_of_lstm_with_the_same_weights() -> None:
    """The layer and the cell share one step: an LSTM over a length-1 sequence is the cell's step."""
    layer, cell = nn.LSTM(IN, HID), nn.LSTMCell(IN, HID)
    cell.load_state_dict({k.replace("_l0", ""): v for k, v in layer.state_dict().items()}, strict=True)
    x = braze.randn(BATCH, IN)
    out, (h, c) = layer(x.unsqueeze(0))
    h1, c1 = cell(x)
    np.testing.assert_array_equal(h1.detach().numpy(), h[0].detach().numpy())
    np.testing.assert_array_equal(c1.detach().numpy(), c[0].detach().numpy())


@pytest.mark.parametrize("call,message", [
    (lambda: nn.RNNCell(IN, HID)(braze.randn(2, 2, IN)), "RNNCell: Expected input to be 1D or 2D, got 3D"),
    (lambda: nn.GRUCell(IN, HID)(braze.randn(2, IN), braze.randn(1, 2, HID)), "Expected hidden to be 1D or 2D"),
    (lambda: nn.LSTMCell(IN, HID)(braze.randn(2, IN), (braze.randn(2, HID), braze.randn(2, 1, HID))),
     r"Expected hx\[1\] to be 1D or 2D"),
    (lambda: nn.RNNCell(IN, HID)(braze.randn(2, IN + 1)), "inconsistent input_size: got 4 expected 3"),
    (lambda: nn.GRUCell(IN, HID)(braze.randn(2, IN), braze.randn(3, HID)), r"hidden of size \(2, 5\), got \(3, 5\)"),
    (lambda: nn.RNNCell(IN, HID)(braze.randn(IN), braze.randn(2, HID)), r"hidden of size \(1, 5\), got \(1, 2, 5\)"),
    (lambda: nn.RNNCell(IN, HID, nonlinearity="gelu"), "nonlinearity='gelu' is not supported"),
    (lambda: nn.LSTMCell(IN, 0), "hidden_size must be positive"),
])
def test_bad_arguments_raise_clear_errors(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


class Decoder(nn.Module):
    """An LSTMCell unrolled over the input's steps, a GRUCell on its states and a readout."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm, self.gru, self.out = nn.LSTMCell(IN, HID), nn.GRUCell(HID, HID), nn.Linear(HID, 2)

    def forward(self, x: Any, h: Any, c: Any) -> Any:
        g, ys = None, []
        for t in range(x.shape[0]):
            h, c = self.lstm(x[t], (h, c))
            g = self.gru(h, g)
            ys.append(self.out(g))
        return braze.stack(ys, 0), h, c


def test_compiled_unrolled_cells_match_eager() -> None:
    model = Decoder().valid()
    x, h, c = braze.randn(4, BATCH, IN), braze.randn(BATCH, HID), braze.randn(BATCH, HID)
    compiled = braze.compile(model, x, h, c)
    for scale in (1.0, 3.0):
        args = (x * scale, h * scale, c)
        for got, want in zip(compiled(*args), model(*args), strict=True):
            np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
