"""Samples for matmul (every promotion case and broadcast batch dimensions) and linear (x @ weight.T)."""
import numpy as np

from . import Sample, normal


def _naive_matmul(x, y):
    """Promote 1-D operands, broadcast the batch, multiply by explicit sums, then drop the added axes."""
    a = x[None, :] if x.ndim == 1 else x
    b = y[:, None] if y.ndim == 1 else y
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    out = np.zeros(batch + (a.shape[-2], b.shape[-1]))
    for k in range(a.shape[-1]):
        out += a[..., :, k:k + 1] * b[..., k:k + 1, :]
    if x.ndim == 1:
        out = out[..., 0, :]
    if y.ndim == 1:
        out = out[..., 0]
    return out


def _linear(x_shape, out_features, label):
    return Sample("linear", (normal(x_shape, 3), normal((out_features, x_shape[-1]), 4)),
                  expected=lambda x, w: _naive_matmul(x, w.T.copy()), torch=lambda x, w: x @ w.T, label=label)


def _mm(x_shape, y_shape, label):
    return Sample("matmul", (normal(x_shape, 1), normal(y_shape, 2)), expected=_naive_matmul,
                  torch=lambda x, y: x @ y, label=label)


SAMPLES = [
    _mm((3, 4), (4, 2), "2d-2d"),
    _mm((4,), (4, 2), "1d-2d"),
    _mm((3, 4), (4,), "2d-1d"),
    _mm((4,), (4,), "1d-1d"),
    _mm((2, 3, 4), (4, 5), "batch-2d"),
    _mm((3, 4), (2, 4, 5), "2d-batch"),
    _mm((2, 1, 3, 4), (5, 4, 2), "broadcast-batch"),
    _mm((2, 3, 4), (4,), "batch-1d"),
    _mm((4,), (2, 4, 3), "1d-batch"),
    Sample("matmul", (np.arange(6, dtype=np.int32).reshape(2, 3), np.arange(3, dtype=np.int32)),
           expected=lambda x, y: np.array([5, 14], np.int32), label="int32"),
    _linear((3, 4), 5, "2d"),
    _linear((4,), 3, "1d"),
    _linear((2, 3, 4), 5, "batch"),
    Sample("linear", (np.arange(6, dtype=np.int32).reshape(2, 3), np.arange(6, dtype=np.int32).reshape(2, 3)),
           expected=lambda x, w: np.array([[5, 14], [14, 50]], np.int32), label="int32"),
]
