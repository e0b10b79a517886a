"""Embedding, as torch.nn.Embedding: a lookup table of rows, N(0, 1) initialized, with an optional padding row."""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import functional as F
from ..module import Module
from ..param import Param
from ._init import Sampler, float_dtype, lazy, leaf


def _normal_rows(padding_idx: int | None) -> Sampler:
    """N(0, 1) rows with the padding row zeroed."""
    def sample(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        rows = rng.normal(0.0, 1.0, shape)
        if padding_idx is not None:
            rows[padding_idx] = 0.0
        return rows
    return sample


def _padding_row(padding_idx: int | None, num_embeddings: int, argument: str) -> int | None:
    """padding_idx as a row number (a negative one counts from the end), checked to be a row."""
    if padding_idx is None:
        return None
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise ValueError(f"{argument} must be within num_embeddings")
    return padding_idx % num_embeddings


def _norm_repr(layer: Any) -> str:
    """The max_norm, norm_type and scale_grad_by_freq part of torch's embedding reprs (non-defaults only)."""
    s = "" if layer.max_norm is None else f", max_norm={layer.max_norm}"
    if layer.norm_type != 2:
        s += f", norm_type={layer.norm_type}"
    return s + (f", scale_grad_by_freq={layer.scale_grad_by_freq}" if layer.scale_grad_by_freq else "")


class Embedding(Module):
    """Rows of `weight` (num_embeddings, embedding_dim) at integer indices.

    weight ~ N(0, 1) with the padding_idx row zeroed; that row receives no gradient (as torch). max_norm renormalizes
    looked-up rows in place; scale_grad_by_freq divides each row's gradient by its index's count in the batch.
    sparse=True is accepted, but braze has no sparse tensors: the weight's gradient is the dense tensor with the
    values of torch's sparse one (zeros in rows not looked up), so optimizers update as torch's SGD does with a
    sparse gradient (momentum included), and braze's other optimizers accept it too (torch's Adam refuses sparse
    gradients and wants SparseAdam).
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight: Any = None, _freeze: bool = False, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        padding_idx = _padding_row(padding_idx, self.num_embeddings, "Padding_idx")
        self.padding_idx, self.max_norm, self.norm_type = padding_idx, max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        shape = (self.num_embeddings, self.embedding_dim)
        if _weight is None:
            self.weight = lazy(shape, _normal_rows(padding_idx), float_dtype(dtype, "Embedding"), device)
        else:
            value = np.asarray(_weight)
            if value.shape != shape:
                raise ValueError(f"Embedding: _weight has shape {value.shape}, expected {shape}")
            self.weight = Param(leaf(np.array(value, copy=True), device, False), requires_grad=not _freeze)

    @classmethod
    def from_pretrained(cls, embeddings: Any, freeze: bool = True, padding_idx: int | None = None,
                        max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                        sparse: bool = False) -> Embedding:
        """An Embedding whose weight is a copy of the 2-d `embeddings`, frozen unless freeze=False."""
        value = np.asarray(embeddings)
        if value.ndim != 2:
            raise ValueError("Embeddings parameter is expected to be 2-dimensional")
        return cls(value.shape[0], value.shape[1], padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                   _weight=value, _freeze=freeze)

    def forward(self, input: Any) -> Any:
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        s += _norm_repr(self)
        if self.sparse:
            s += ", sparse=True"
        return s


class EmbeddingBag(Module):
    """Sums, means or maxima of bags of rows of `weight` (num_embeddings, embedding_dim), N(0, 1) initialized
    with the padding row zeroed; forward(input, offsets=None, per_sample_weights=None) as torch."""

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm: float | None = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                 _weight: Any = None, include_last_offset: bool = False, padding_idx: int | None = None,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if mode not in F.EMBEDDING_BAG_MODES:
            raise ValueError(f"EmbeddingBag: mode={mode!r} is not supported; supported: 'sum', 'mean', 'max'")
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        padding_idx = _padding_row(padding_idx, self.num_embeddings, "padding_idx")
        self.max_norm, self.norm_type, self.scale_grad_by_freq = max_norm, norm_type, scale_grad_by_freq
        self.mode, self.sparse, self.include_last_offset = mode, sparse, include_last_offset
        self.padding_idx = padding_idx
        shape = (self.num_embeddings, self.embedding_dim)
        if _weight is None:
            self.weight = lazy(shape, _normal_rows(padding_idx), float_dtype(dtype, "EmbeddingBag"), device)
        else:
            self.weight = Param(leaf(np.array(np.asarray(_weight), copy=True), device, False))

    def forward(self, input: Any, offsets: Any = None, per_sample_weights: Any = None) -> Any:
        return F.embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type, self.scale_grad_by_freq,
                               self.mode, self.sparse, per_sample_weights, self.include_last_offset,
                               self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}{_norm_repr(self)}, mode={self.mode}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s


__all__ = ["Embedding", "EmbeddingBag"]
