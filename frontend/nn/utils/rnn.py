"""braze.nn.utils.rnn: batches of variable-length sequences for RNN, LSTM and GRU, as torch.nn.utils.rnn.

A PackedSequence keeps the padded batch (time-major, in the caller's batch order) and the lengths instead of
torch's packed rows: the recurrent layers run it as a masked recurrence, which traces with the lengths as a graph
input. torch's packed form (`data`, `batch_sizes`) is computed on request; its shape depends on the lengths'
values, so it is eager only, as is pad_packed_sequence without total_length.
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np

from ... import functions as _f
from ...creation import arange, full, tensor
from ...tensor import Tensor


class PackedSequence:
    """A padded batch (T, B, *) with each sequence's length; made by pack_padded_sequence or pack_sequence.

    sorted_indices/unsorted_indices are torch's: None when the lengths were required to be sorted, else the batch
    order by decreasing length (stable) and its inverse. Unpacks as torch's namedtuple
    (data, batch_sizes, sorted_indices, unsorted_indices).
    """

    __slots__ = ("padded", "lengths", "sorted_indices", "unsorted_indices")

    def __init__(self, padded: Tensor, lengths: Tensor, sorted_indices: Tensor | None = None,
                 unsorted_indices: Tensor | None = None) -> None:
        self.padded, self.lengths = padded, lengths
        self.sorted_indices, self.unsorted_indices = sorted_indices, unsorted_indices

    @property
    def data(self) -> Tensor:
        """torch's packed rows: step by step, the batch's sequences that are still running, longest first."""
        lengths = _known_lengths(self.lengths, "PackedSequence.data")
        order = np.argsort(-lengths, kind="stable")
        steps, batch = np.nonzero(np.arange(lengths.max())[:, None] < lengths[order][None, :])
        return self.padded[tensor(steps), tensor(order[batch])]

    @property
    def batch_sizes(self) -> Tensor:
        """How many sequences are still running at each step (int64)."""
        lengths = _known_lengths(self.lengths, "PackedSequence.batch_sizes")
        return tensor((np.arange(lengths.max())[:, None] < lengths[None, :]).sum(1).astype(np.int64))

    def __iter__(self) -> Iterator[Tensor | None]:
        return iter((self.data, self.batch_sizes, self.sorted_indices, self.unsorted_indices))

    def __repr__(self) -> str:
        return f"PackedSequence(padded={tuple(self.padded.shape)}, lengths={self.lengths})"

    def running(self) -> Tensor:
        """(T, B, 1, ...) bool: whether step t is within sequence b (broadcasts over the feature dims)."""
        steps, batch = self.padded.shape[0], self.padded.shape[1]
        shape = (steps, batch) + (1,) * (self.padded.ndim - 2)
        running = _f.lt(arange(steps).view(steps, 1), self.lengths.view(1, batch))
        return running.view(*shape)

    def at_last_step(self, states: Tensor) -> Tensor:
        """states (T, B, H) at each sequence's last step, (B, H); a length outside 1..T is an index error."""
        last = (self.lengths - 1).view(1, -1, 1).expand(1, states.shape[1], states.shape[2])
        return _f.gather(states, 0, last).squeeze(0)

    def like(self, padded: Tensor) -> PackedSequence:
        """A PackedSequence of new values with this one's lengths and orders (a layer's output)."""
        return PackedSequence(padded, self.lengths, self.sorted_indices, self.unsorted_indices)


def pack_padded_sequence(input: Tensor, lengths: Any, batch_first: bool = False,
                         enforce_sorted: bool = True) -> PackedSequence:
    """The padded batch input (T, B, *), or (B, T, *) with batch_first, with sequence b's length lengths[b]."""
    padded = input.transpose(0, 1) if batch_first else input
    lengths = lengths if isinstance(lengths, Tensor) else tensor(np.asarray(lengths))
    if lengths.ndim != 1 or lengths.shape[0] != padded.shape[1] or lengths.dtype.is_float:
        raise ValueError(f"pack_padded_sequence: lengths must be {padded.shape[1]} integers, one per sequence, got "
                         f"{lengths.dtype}{tuple(lengths.shape)}")
    if not _is_traced(lengths):
        _check_lengths(lengths.numpy(), padded.shape[0], enforce_sorted)
    if enforce_sorted:
        return PackedSequence(padded, lengths)
    sorted_indices = _f.argsort(lengths, descending=True, stable=True)
    return PackedSequence(padded, lengths, sorted_indices, _f.argsort(sorted_indices))


def pad_packed_sequence(sequence: PackedSequence, batch_first: bool = False, padding_value: float = 0.0,
                        total_length: int | None = None) -> tuple[Tensor, Tensor]:
    """(the padded batch, its lengths): steps past a sequence's end hold padding_value; the time dim is the longest
    length, or total_length."""
    steps = sequence.padded.shape[0]
    if total_length is None:
        total_length = int(_known_lengths(sequence.lengths, "pad_packed_sequence without total_length").max())
    elif total_length < steps:  # cutting padded steps off is right only when no sequence runs past the cut
        longest = int(_known_lengths(sequence.lengths, f"pad_packed_sequence(total_length={total_length}) below "
                                                       f"the padded length {steps}").max())
        if total_length < longest:
            raise ValueError(f"pad_packed_sequence: Expected total_length to be at least the length of the longest "
                             f"sequence in input, but got total_length={total_length} and max sequence length "
                             f"being {longest}")
    padded = _f.where(sequence.running(), sequence.padded, padding_value)
    padded = _to_steps(padded, total_length, padding_value)
    return (padded.transpose(0, 1) if batch_first else padded), sequence.lengths


def pad_sequence(sequences: Sequence[Tensor], batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """The sequences (L_i, *) stacked into one batch (max L, B, *), or (B, max L, *) with batch_first."""
    if padding_side not in ("right", "left"):
        raise ValueError(f"pad_sequence: padding_side={padding_side!r} is not supported; supported: 'right', 'left'")
    if not sequences:
        raise ValueError("pad_sequence: received an empty list of sequences")
    steps = max(s.shape[0] for s in sequences)
    padded = [_to_steps(s, steps, padding_value, left=padding_side == "left") for s in sequences]
    return _f.stack(padded, 0 if batch_first else 1)


def pack_sequence(sequences: Sequence[Tensor], enforce_sorted: bool = True) -> PackedSequence:
    """pack_padded_sequence of pad_sequence(sequences) with their lengths."""
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths, enforce_sorted=enforce_sorted)


def _to_steps(x: Tensor, steps: int, padding_value: float, left: bool = False) -> Tensor:
    """x (L, *) cut or padded with padding_value to `steps` rows (at the end, or at the start when left)."""
    if steps <= x.shape[0]:
        return x[:steps]
    fill = full((steps - x.shape[0], *x.shape[1:]), padding_value, dtype=x.dtype)
    return _f.cat([fill, x] if left else [x, fill], 0)


def _check_lengths(lengths: np.ndarray, steps: int, enforce_sorted: bool) -> None:
    if (lengths <= 0).any():
        raise ValueError("pack_padded_sequence: Length of all samples has to be greater than 0, but found an element "
                         f"in 'lengths' that is <= 0: {lengths.tolist()}")
    if (lengths > steps).any():
        raise ValueError(f"pack_padded_sequence: a length exceeds the padded length {steps}: {lengths.tolist()}")
    if enforce_sorted and (np.diff(lengths) > 0).any():
        raise ValueError("pack_padded_sequence: `lengths` array must be sorted in decreasing order when "
                         "`enforce_sorted` is True; pass enforce_sorted=False to pack unsorted lengths")


def _is_traced(x: Tensor) -> bool:
    return not isinstance(x._data, np.ndarray)


def _known_lengths(lengths: Tensor, what: str) -> np.ndarray:
    """The lengths' values, or a TraceError naming the user's line: `what` has a shape set by them."""
    if _is_traced(lengths):
        from ...traced import trace_error
        raise trace_error(f"{what}: the shape depends on the traced lengths' values, which a graph cannot express; "
                          f"use the recurrent layer's final states, or pad_packed_sequence(..., total_length=T)")
    return lengths.numpy()


__all__ = ["PackedSequence", "pack_padded_sequence", "pad_packed_sequence", "pad_sequence", "pack_sequence"]
