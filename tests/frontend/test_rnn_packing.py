"""braze.nn.utils.rnn: packed variable-length batches through RNN, LSTM and GRU, against torch (float64 to 1e-10:
outputs, final states, torch's packed layout and every gradient), traced with the lengths as a graph input, and
the errors for bad lengths and for shapes that depend on traced lengths."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import braze
import braze.nn as nn
from braze import TraceError
from braze.nn.utils.rnn import pack_padded_sequence, pack_sequence, pad_packed_sequence, pad_sequence

R = np.random.default_rng(5)


def packed_run(lib: Any, kind: str, state: dict[str, np.ndarray] | None, x: np.ndarray, lengths: list[int],
               weights: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A 2-layer bidirectional `kind` over the packed batch x (B, T, I): values and gradients by name."""
    lib.manual_seed(0)
    layer = getattr(lib.nn, kind)(3, 2, num_layers=2, bidirectional=True, batch_first=True).to(lib.float64)
    if state is not None:
        layer.load_state_dict({k: lib.tensor(v) for k, v in state.items()}, strict=True)
    xs = lib.tensor(x, requires_grad=True)
    packed = lib.nn.utils.rnn.pack_padded_sequence(xs, lib.tensor(lengths), batch_first=True, enforce_sorted=False)
    out, hidden = layer(packed)
    h, c = hidden if kind == "LSTM" else (hidden, None)
    padded, out_lengths = lib.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, padding_value=-1.0)
    loss = (padded * lib.tensor(weights)).sum() + (h * h).sum() + (0.0 if c is None else c.sum())
    loss.backward()
    values = {"padded": padded, "h_n": h, "data": out.data, "batch_sizes": out.batch_sizes, "lengths": out_lengths,
              "sorted_indices": out.sorted_indices, "unsorted_indices": out.unsorted_indices, "input grad": xs.grad}
    values.update({f"grad {k}": p.grad for k, p in layer.named_parameters()})
    state = {k: np.array(v.detach().numpy() if hasattr(v, "detach") else v) for k, v in layer.state_dict().items()}
    return {k: v.detach().numpy() for k, v in values.items()}, state


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_packed_bidirectional_layers_match_torch(kind: str) -> None:
    torch = pytest.importorskip("torch")
    x, lengths = R.standard_normal((4, 5, 3)), [3, 5, 1, 4]
    weights = R.standard_normal((4, 5, 4))
    want, state = packed_run(torch, kind, None, x, lengths, weights)
    got, _ = packed_run(braze, kind, state, x, lengths, weights)
    assert got.keys() == want.keys()
    for key in want:
        assert got[key].shape == want[key].shape, key
        np.testing.assert_allclose(got[key], want[key], rtol=1e-10, atol=1e-12, err_msg=key)


class PackedGRU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(3, 4, bidirectional=True)

    def forward(self, x: Any, lengths: Any) -> Any:
        out, h = self.rnn(pack_padded_sequence(x, lengths, enforce_sorted=False))
        return pad_packed_sequence(out, total_length=x.shape[0])[0], h


def test_compiled_packed_layer_reads_the_lengths_at_run_time() -> None:
    model, x = PackedGRU().valid(), braze.randn(6, 2, 3)
    compiled = braze.compile(model, x, braze.tensor([6, 3]))
    for lengths in ([6, 3], [2, 5], [1, 1]):
        got = compiled(x.numpy(), np.array(lengths))
        for g, w in zip(got, model(x, braze.tensor(lengths))):
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-6)


def test_compiled_packed_layer_refuses_a_length_beyond_the_padded_length() -> None:
    x = braze.randn(6, 2, 3)
    compiled = braze.compile(PackedGRU().valid(), x, braze.tensor([6, 3]))
    with pytest.raises(braze.BrazeError, match="out of range"):
        compiled(x.numpy(), np.array([7, 1]))


def test_tracing_a_shape_set_by_traced_lengths_names_the_line() -> None:
    class Padded(PackedGRU):
        def forward(self, x: Any, lengths: Any) -> Any:
            out, _ = self.rnn(pack_padded_sequence(x, lengths))
            return pad_packed_sequence(out)[0]
    with pytest.raises(TraceError, match=r"test_rnn_packing.py:\d+: pad_packed_sequence without total_length"):
        braze.trace(Padded(), braze.randn(4, 2, 3), braze.tensor([4, 2]))


@pytest.mark.parametrize("lengths,enforce_sorted,message", [
    ([2, 3], True, "must be sorted in decreasing order"),
    ([3, 0], False, "greater than 0"),
    ([4, 1], False, "exceeds the padded length 3"),
    ([3, 2, 1], False, "2 integers, one per sequence"),
])
def test_pack_padded_sequence_refuses_bad_lengths(lengths: list[int], enforce_sorted: bool, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pack_padded_sequence(braze.zeros(3, 2, 1), lengths, enforce_sorted=enforce_sorted)


def test_pad_sequence_pads_on_the_asked_side() -> None:
    a, b = braze.tensor([[1.0], [2.0]]), braze.tensor([[3.0]])
    assert pad_sequence([a, b], batch_first=True, padding_value=9.0).squeeze(-1).tolist() == [[1, 2], [3, 9]]
    assert pad_sequence([a, b], padding_side="left").squeeze(-1).tolist() == [[1, 0], [2, 3]]
    with pytest.raises(ValueError, match="padding_side='middle' is not supported; supported: 'right', 'left'"):
        pad_sequence([a, b], padding_side="middle")


def test_pack_sequence_unpacks_as_torch_namedtuple() -> None:
    data, batch_sizes, sorted_indices, unsorted_indices = pack_sequence(
        [braze.tensor([1.0]), braze.tensor([2.0, 3.0])], enforce_sorted=False)
    assert (data.tolist(), batch_sizes.tolist()) == ([2.0, 1.0, 3.0], [2, 1])
    assert (sorted_indices.tolist(), unsorted_indices.tolist()) == ([1, 0], [1, 0])


def test_pad_packed_sequence_pads_to_total_length_and_refuses_cutting_a_sequence() -> None:
    packed = pack_padded_sequence(braze.ones(3, 2, 1), [3, 1])
    assert pad_packed_sequence(packed, total_length=4)[0].squeeze(-1).tolist() == [[1, 1], [1, 0], [1, 0], [0, 0]]
    with pytest.raises(ValueError, match="total_length=2 and max sequence length being 3"):
        pad_packed_sequence(packed, total_length=2)
