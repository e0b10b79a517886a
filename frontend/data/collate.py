"""Batch collation, as torch.utils.data.default_collate: samples (tensors, numpy arrays, Python numbers, and
dicts, tuples, lists and namedtuples of them) become one batch of the same structure with Tensors stacked on a
new leading dim."""
from __future__ import annotations

import collections.abc
import copy
from typing import Any, Sequence

import numpy as np

from ..creation import tensor as _tensor
from ..movement import stack
from ..tensor import Tensor

_ERROR = "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"


def _is_numeric_array(value: Any) -> bool:
    return isinstance(value, (np.ndarray, np.generic)) and value.dtype.kind in "biuf"


def default_convert(data: Any) -> Any:
    """Numpy arrays become Tensors, inside the same containers; everything else is left (no batching)."""
    if isinstance(data, np.ndarray) and _is_numeric_array(data):
        return Tensor(data)
    if isinstance(data, collections.abc.Mapping):
        return _same_mapping(data, {key: default_convert(data[key]) for key in data})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        return _same_sequence(data, [default_convert(d) for d in data])
    return data


def default_collate(batch: Sequence[Any]) -> Any:
    """Stack a list of samples into a batch of the samples' structure (tuples become lists, as torch)."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        return stack(list(batch), 0)
    if isinstance(elem, (np.ndarray, np.generic)):
        if not _is_numeric_array(elem):
            raise TypeError(_ERROR.format(elem.dtype))
        return default_collate([Tensor(b) for b in batch]) if elem.ndim else Tensor(np.asarray(batch))
    if isinstance(elem, float):
        return _tensor(batch, dtype="float64")
    if isinstance(elem, int):
        return _tensor(batch)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        return _same_mapping(elem, {key: default_collate([d[key] for d in batch]) for key in elem})
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(default_collate(samples) for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        if any(len(sample) != len(elem) for sample in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        columns = [default_collate(list(samples)) for samples in zip(*batch)]
        return columns if isinstance(elem, tuple) else _same_sequence(elem, columns)
    raise TypeError(_ERROR.format(type(elem)))


def _same_mapping(like: collections.abc.Mapping, items: dict[Any, Any]) -> Any:
    """`items` in the mapping type of `like` when it can be rebuilt, else a dict."""
    try:
        if isinstance(like, collections.abc.MutableMapping):
            clone = copy.copy(like)
            clone.update(items)
            return clone
        return type(like)(items)
    except TypeError:
        return items


def _same_sequence(like: collections.abc.Sequence, items: list[Any]) -> Any:
    try:
        if isinstance(like, collections.abc.MutableSequence):
            clone = copy.copy(like)
            clone[:] = items
            return clone
        return type(like)(items)
    except TypeError:
        return items
