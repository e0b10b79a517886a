"""Datasets, as torch.utils.data: map-style (`__getitem__` and `__len__`) and iterable-style, plus the
combinators TensorDataset, Subset, ConcatDataset and random_split."""
from __future__ import annotations

import bisect
import math
import warnings
from typing import Any, Generic, Iterator, Sequence, TypeVar

from braze.ir.errors import BrazeError

from ..creation import Generator, default_generator, randperm
from ..tensor import Tensor

T = TypeVar("T")


class Dataset(Generic[T]):
    """A map-style dataset: subclasses define `__getitem__(index)` and, for the default samplers, `__len__`."""

    def __getitem__(self, index: Any) -> T:
        raise NotImplementedError(f"{type(self).__name__} does not define __getitem__")

    def __add__(self, other: Dataset[T]) -> ConcatDataset[T]:
        return ConcatDataset([self, other])


class IterableDataset(Dataset[T]):
    """An iterable-style dataset: subclasses define `__iter__`, yielding samples in order."""

    def __iter__(self) -> Iterator[T]:
        raise NotImplementedError(f"{type(self).__name__} does not define __iter__")

    def __add__(self, other: Dataset[T]) -> Any:
        raise BrazeError("IterableDataset: concatenating iterable datasets is not supported (ChainDataset is not "
                         "available); iterate them one after the other")


class TensorDataset(Dataset[tuple[Tensor, ...]]):
    """Samples are the tensors' rows at one index: (x[i], y[i], ...)."""

    def __init__(self, *tensors: Tensor) -> None:
        if not tensors:
            raise BrazeError("TensorDataset: expects at least one tensor")
        if any(t.shape[0] != tensors[0].shape[0] for t in tensors):
            raise BrazeError(f"TensorDataset: size mismatch between tensors: dim 0 sizes "
                             f"{[t.shape[0] for t in tensors]}")
        self.tensors = tensors

    def __getitem__(self, index: Any) -> tuple[Tensor, ...]:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class Subset(Dataset[T]):
    """The samples of `dataset` at `indices`, in that order."""

    def __init__(self, dataset: Dataset[T], indices: Sequence[int]) -> None:
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __len__(self) -> int:
        return len(self.indices)


class ConcatDataset(Dataset[T]):
    """The samples of several map-style datasets, one after the other."""

    def __init__(self, datasets: Sequence[Dataset[T]]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise BrazeError("ConcatDataset: datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise BrazeError("ConcatDataset: does not support IterableDataset")
        self.cumulative_sizes = self.cumsum(self.datasets)

    @staticmethod
    def cumsum(sequence: Sequence[Any]) -> list[int]:
        out, total = [], 0
        for d in sequence:
            total += len(d)
            out.append(total)
        return out

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx: int) -> T:
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][idx - start]


def _split_lengths(total: int, lengths: Sequence[float]) -> list[int]:
    """Fractions summing to 1 become counts as torch does (floors, then the remainder round-robin)."""
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        counts = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
            counts.append(int(math.floor(total * frac)))
        for i in range(total - sum(counts)):
            counts[i % len(counts)] += 1
        for i, count in enumerate(counts):
            if count == 0:
                warnings.warn(f"Length of split at index {i} is 0. This might result in an empty dataset.",
                              stacklevel=3)
        return counts
    return [int(n) for n in lengths]


def random_split(dataset: Dataset[T], lengths: Sequence[float],
                 generator: Generator | None = default_generator) -> list[Subset[T]]:
    """Non-overlapping random Subsets of the given lengths (or fractions of len(dataset))."""
    counts = _split_lengths(len(dataset), lengths)  # type: ignore[arg-type]
    if sum(counts) != len(dataset):  # type: ignore[arg-type]
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    order = randperm(sum(counts), generator=generator).tolist()
    out, start = [], 0
    for count in counts:
        out.append(Subset(dataset, order[start:start + count]))
        start += count
    return out
