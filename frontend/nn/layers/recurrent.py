"""RNN, LSTM and GRU, and their single-step RNNCell, LSTMCell and GRUCell, as torch.nn's: arguments, parameter
names (weight_ih_l0, bias_hh_l1_reverse, ...; a cell's weight_ih, ..., bias_hh), gate order, initialization and
outputs. A layer and its cell share one step function.

The recurrence is unrolled over the input's (fixed) sequence length: the input projection of every step is one
matmul per layer and direction, then each step adds h @ weight_hh.T and applies the cell. A traced graph holds
the unrolled steps, so it serves that sequence length.

A PackedSequence (variable lengths) runs on its padded batch: the forward direction runs every step and takes
its final state at each sequence's last step; the reverse direction keeps its initial state over the steps past
a sequence's end, so each sequence starts from its own last element.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ... import functions as _f
from ...tensor import Tensor
from .. import functional as F
from ..flag import Flag
from ..module import Module
from ..utils.rnn import PackedSequence
from ._init import float_dtype, lazy, uniform


def _add_weights(module: Module, tag: str, gates: int, input_size: int, hidden_size: int, bias: bool, dtype: Any,
                 device: Any) -> None:
    """weight_ih{tag} (gates * hidden, input), weight_hh{tag} (gates * hidden, hidden) and, with bias, bias_ih{tag}
    and bias_hh{tag}, all ~ U(-1/sqrt(hidden), 1/sqrt(hidden)) as torch."""
    rows, sample = gates * hidden_size, uniform(1.0 / math.sqrt(hidden_size))
    setattr(module, f"weight_ih{tag}", lazy((rows, input_size), sample, dtype, device))
    setattr(module, f"weight_hh{tag}", lazy((rows, hidden_size), sample, dtype, device))
    if bias:
        setattr(module, f"bias_ih{tag}", lazy((rows,), sample, dtype, device))
        setattr(module, f"bias_hh{tag}", lazy((rows,), sample, dtype, device))


def _zeros(like: Any, shape: tuple[int, ...]) -> Tensor:
    """The default initial state: zeros of `like`'s dtype."""
    return Tensor._wrap(np.zeros(shape, dtype=like.dtype.numpy))


def _nonlinearity(layer: str, nonlinearity: str) -> str:
    """`nonlinearity` when an Elman step supports it."""
    if nonlinearity not in ("tanh", "relu"):
        raise ValueError(f"{layer}: nonlinearity={nonlinearity!r} is not supported; supported: 'tanh', 'relu'")
    return nonlinearity


class _ElmanStep:
    """The Elman step of RNN and RNNCell: h' = nonlinearity(x @ W_ih.T + b_ih + h @ W_hh.T + b_hh)."""

    _gates = 1
    nonlinearity: str

    def _cell(self, gates_x: Any, h: Any, c: Any, w_hh: Any, b_hh: Any) -> tuple[Any, Any]:
        pre = _f.add(gates_x, F.linear(h, w_hh, b_hh))
        return (_f.tanh(pre) if self.nonlinearity == "tanh" else _f.relu(pre)), None


class _LSTMStep:
    """The LSTM step of LSTM and LSTMCell, torch's gate order (input, forget, cell, output):
    c' = sigmoid(f) * c + sigmoid(i) * tanh(g), h' = sigmoid(o) * tanh(c')."""

    _gates = 4

    def _cell(self, gates_x: Any, h: Any, c: Any, w_hh: Any, b_hh: Any) -> tuple[Any, Any]:
        gates = _f.add(gates_x, F.linear(h, w_hh, b_hh))
        i, f, g, o = _f.chunk(gates, 4, -1)
        c = _f.add(_f.mul(_f.sigmoid(f), c), _f.mul(_f.sigmoid(i), _f.tanh(g)))
        return _f.mul(_f.sigmoid(o), _f.tanh(c)), c


class _GRUStep:
    """The GRU step of GRU and GRUCell, torch's gate order (reset, update, new):
    n = tanh(x_n + r * (h @ W_hn.T + b_hn)), h' = (1 - z) * n + z * h."""

    _gates = 3

    def _cell(self, gates_x: Any, h: Any, c: Any, w_hh: Any, b_hh: Any) -> tuple[Any, Any]:
        x_r, x_z, x_n = _f.chunk(gates_x, 3, -1)
        h_r, h_z, h_n = _f.chunk(F.linear(h, w_hh, b_hh), 3, -1)
        r, z = _f.sigmoid(_f.add(x_r, h_r)), _f.sigmoid(_f.add(x_z, h_z))
        n = _f.tanh(_f.add(x_n, _f.mul(r, h_n)))
        return _f.add(n, _f.mul(z, _f.sub(h, n))), None


class _RNNBase(Module):
    """Layers x directions of one cell type, whose step class supplies `_gates` (how many hidden-size blocks
    weight_ih stacks) and `_cell`."""

    _gates: int
    _cell: Callable[..., tuple[Any, Any]]

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        name = type(self).__name__
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"{name}: dropout should be a number in range [0, 1], got {dropout}")
        if hidden_size <= 0 or num_layers <= 0:
            raise ValueError(f"{name}: hidden_size and num_layers must be positive, got {hidden_size}, {num_layers}")
        self.input_size, self.hidden_size, self.num_layers = int(input_size), int(hidden_size), int(num_layers)
        self.bias, self.batch_first, self.dropout = bool(bias), bool(batch_first), float(dropout)
        self.bidirectional = bool(bidirectional)
        d = float_dtype(dtype, name)
        for layer in range(self.num_layers):
            for suffix in self._suffixes():
                width = self.input_size if layer == 0 else self.hidden_size * self._directions
                _add_weights(self, f"_l{layer}{suffix}", self._gates, width, self.hidden_size, self.bias, d, device)
        self.training = Flag(True)

    @property
    def _directions(self) -> int:
        return 2 if self.bidirectional else 1

    def _suffixes(self) -> tuple[str, ...]:
        return ("", "_reverse") if self.bidirectional else ("",)

    def _weights(self, layer: int, suffix: str) -> tuple[Any, Any, Any, Any]:
        def get(kind: str) -> Any:
            return getattr(self, f"{kind}_l{layer}{suffix}") if self.bias or kind.startswith("weight") else None
        return get("weight_ih"), get("weight_hh"), get("bias_ih"), get("bias_hh")

    def _run_direction(self, x: Any, layer: int, suffix: str, h: Any, c: Any,
                       packed: PackedSequence | None) -> tuple[Any, Any, Any]:
        """The outputs (L, N, H) of one layer and direction over x (L, N, I), and its final h and c."""
        w_ih, w_hh, b_ih, b_hh = self._weights(layer, suffix)
        cell = self._cell
        projected = F.linear(x, w_ih, b_ih)  # every step's input projection in one matmul
        steps = range(x.shape[0] - 1, -1, -1) if suffix else range(x.shape[0])
        running = packed.running() if packed is not None and suffix else None
        hs: list[Any] = [None] * x.shape[0]
        cs: list[Any] = [None] * x.shape[0]
        for t in steps:
            h_next, c_next = cell(projected[t], h, c, w_hh, b_hh)
            if running is not None:  # past the sequence's end: keep the initial state
                h_next = _f.where(running[t], h_next, h)
                c_next = None if c is None else _f.where(running[t], c_next, c)
            h, c = hs[t], cs[t] = h_next, c_next
        out = _f.stack(hs, 0)
        if packed is not None and not suffix:
            h, c = packed.at_last_step(out), None if c is None else packed.at_last_step(_f.stack(cs, 0))
        return out, h, c

    def _initial(self, x: Any, hx: Any) -> Any:
        shape = (self.num_layers * self._directions, x.shape[1], self.hidden_size)
        if hx is None:
            return _zeros(x, shape)
        if tuple(hx.shape) != shape:
            raise ValueError(f"{type(self).__name__}: expected hidden size {shape}, got {tuple(hx.shape)}")
        return hx

    def _layers(self, x: Any, h0: Any, c0: Any, packed: PackedSequence | None) -> tuple[Any, list[Any], list[Any]]:
        finals_h: list[Any] = []
        finals_c: list[Any] = []
        for layer in range(self.num_layers):
            if layer and self.dropout:
                x = F.dropout(x, self.dropout, training=self.flag("training"))
            outs = []
            for k, suffix in enumerate(self._suffixes()):
                i = layer * self._directions + k
                out, h, c = self._run_direction(x, layer, suffix, h0[i], None if c0 is None else c0[i], packed)
                outs.append(out)
                finals_h.append(h)
                finals_c.append(c)
            x = outs[0] if len(outs) == 1 else _f.cat(outs, -1)
        return x, finals_h, finals_c

    def _sequence(self, input: Any) -> tuple[Any, bool, PackedSequence | None]:
        """(L, N, I) from the input, whether it was unbatched (L, I), and the input when it is a PackedSequence."""
        if isinstance(input, PackedSequence):
            return input.padded, False, input
        if input.ndim not in (2, 3):
            raise ValueError(f"{type(self).__name__}: Expected input to be 2D or 3D, got {input.ndim}D instead")
        if input.ndim == 2:
            return _f.unsqueeze(input, 1), True, None
        return (_f.transpose(input, 0, 1) if self.batch_first else input), False, None

    def _output(self, out: Any, unbatched: bool, packed: PackedSequence | None) -> Any:
        if packed is not None:
            return packed.like(out)
        if unbatched:
            return _f.squeeze(out, 1)
        return _f.transpose(out, 0, 1) if self.batch_first else out

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


def _hidden(hx: Any, unbatched: bool) -> Any:
    return None if hx is None else (_f.unsqueeze(hx, 1) if unbatched else hx)


def _final(states: list[Any], unbatched: bool) -> Any:
    stacked = _f.stack(states, 0)
    return _f.squeeze(stacked, 1) if unbatched else stacked


class RNN(_ElmanStep, _RNNBase):
    """Elman RNN: h' = nonlinearity(x @ W_ih.T + b_ih + h @ W_hh.T + b_hh), nonlinearity 'tanh' or 'relu'."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False,
                 device: Any = None, dtype: Any = None) -> None:
        _nonlinearity("RNN", nonlinearity)
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, device,
                         dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input: Any, hx: Any = None) -> tuple[Any, Any]:
        x, unbatched, packed = self._sequence(input)
        out, hs, _ = self._layers(x, self._initial(x, _hidden(hx, unbatched)), None, packed)
        return self._output(out, unbatched, packed), _final(hs, unbatched)


class LSTM(_LSTMStep, _RNNBase):
    """Long short-term memory with torch's gate order (input, forget, cell, output); returns
    (output, (h_n, c_n))."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device: Any = None, dtype: Any = None) -> None:
        if proj_size:
            raise ValueError(f"LSTM: proj_size={proj_size} is not supported; supported: 0")
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional, device,
                         dtype)
        self.proj_size = 0

    def forward(self, input: Any, hx: Any = None) -> tuple[Any, tuple[Any, Any]]:
        x, unbatched, packed = self._sequence(input)
        h0, c0 = (None, None) if hx is None else (_hidden(hx[0], unbatched), _hidden(hx[1], unbatched))
        out, hs, cs = self._layers(x, self._initial(x, h0), self._initial(x, c0), packed)
        return self._output(out, unbatched, packed), (_final(hs, unbatched), _final(cs, unbatched))


class GRU(_GRUStep, _RNNBase):
    """Gated recurrent unit with torch's gate order (reset, update, new):
    n = tanh(x_n + r * (h @ W_hn.T + b_hn)), h' = (1 - z) * n + z * h."""

    def forward(self, input: Any, hx: Any = None) -> tuple[Any, Any]:
        x, unbatched, packed = self._sequence(input)
        out, hs, _ = self._layers(x, self._initial(x, _hidden(hx, unbatched)), None, packed)
        return self._output(out, unbatched, packed), _final(hs, unbatched)


class _CellBase(Module):
    """One step of a cell type on (N, input_size) or unbatched (input_size) input, with torch's parameters
    weight_ih, weight_hh, bias_ih and bias_hh (None without bias); the state defaults to zeros."""

    _gates: int
    _cell: Callable[..., tuple[Any, Any]]

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        name = type(self).__name__
        if hidden_size <= 0:
            raise ValueError(f"{name}: hidden_size must be positive, got {hidden_size}")
        self.input_size, self.hidden_size, self.bias = int(input_size), int(hidden_size), bool(bias)
        _add_weights(self, "", self._gates, self.input_size, self.hidden_size, self.bias, float_dtype(dtype, name),
                     device)
        if not self.bias:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)

    def _batched(self, input: Any, states: Any, names: tuple[str, ...]) -> tuple[Any, list[Any], bool]:
        """(N, input_size) input, its states (N, hidden_size) (zeros when None) and whether it was unbatched."""
        name = type(self).__name__
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        if input.shape[-1] != self.input_size:
            raise ValueError(f"{name}: input has inconsistent input_size: got {input.shape[-1]} expected "
                             f"{self.input_size}")
        unbatched = input.ndim == 1
        x = _f.unsqueeze(input, 0) if unbatched else input
        shape = (x.shape[0], self.hidden_size)
        if states is None:
            return x, [_zeros(x, shape)] * len(names), unbatched
        out = []
        for label, state in zip(names, states):
            if state.ndim not in (1, 2):
                raise ValueError(f"{name}: Expected {label} to be 1D or 2D, got {state.ndim}D instead")
            state = _f.unsqueeze(state, 0) if unbatched else state
            if tuple(state.shape) != shape:
                raise ValueError(f"{name}: expected {label} of size {shape}, got {tuple(state.shape)}")
            out.append(state)
        return x, out, unbatched

    def _step(self, x: Any, h: Any, c: Any) -> tuple[Any, Any]:
        """The cell's step on batched x and state."""
        return self._cell(F.linear(x, self.weight_ih, self.bias_ih), h, c, self.weight_hh, self.bias_hh)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        return s if self.bias else s + ", bias=False"


def _unbatch(state: Any, unbatched: bool) -> Any:
    """A cell's state without the batch dim an unbatched input was given."""
    return _f.squeeze(state, 0) if unbatched else state


class RNNCell(_ElmanStep, _CellBase):
    """One Elman step: h' = nonlinearity(x @ W_ih.T + b_ih + h @ W_hh.T + b_hh), nonlinearity 'tanh' or 'relu'."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device: Any = None, dtype: Any = None) -> None:
        _nonlinearity("RNNCell", nonlinearity)
        super().__init__(input_size, hidden_size, bias, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input: Any, hx: Any = None) -> Any:
        x, (h,), unbatched = self._batched(input, None if hx is None else (hx,), ("hidden",))
        return _unbatch(self._step(x, h, None)[0], unbatched)

    def extra_repr(self) -> str:
        s = super().extra_repr()
        return s if self.nonlinearity == "tanh" else f"{s}, nonlinearity={self.nonlinearity}"


class LSTMCell(_LSTMStep, _CellBase):
    """One LSTM step with torch's gate order (input, forget, cell, output); hx is (h, c) and the result (h', c')."""

    def forward(self, input: Any, hx: Any = None) -> tuple[Any, Any]:
        x, (h, c), unbatched = self._batched(input, hx, ("hx[0]", "hx[1]"))
        h, c = self._step(x, h, c)
        return _unbatch(h, unbatched), _unbatch(c, unbatched)


class GRUCell(_GRUStep, _CellBase):
    """One GRU step with torch's gate order (reset, update, new): n = tanh(x_n + r * (h @ W_hn.T + b_hn)),
    h' = (1 - z) * n + z * h."""

    def forward(self, input: Any, hx: Any = None) -> Any:
        x, (h,), unbatched = self._batched(input, None if hx is None else (hx,), ("hidden",))
        return _unbatch(self._step(x, h, None)[0], unbatched)


__all__ = ["RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"]
