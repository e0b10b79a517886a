"""Samples for layer_norm, batch_norm, batch_norm_train and batch_norm_flag, checked against per-slice loops."""
import itertools

import numpy as np

from . import Sample, normal, positive


def _torch():
    """torch, imported only when a differential test runs a sample's torch expression."""
    import torch
    return torch


def _normalize(v, eps):
    v = np.asarray(v, dtype=np.float64)
    mean = sum(v.flat) / v.size
    var = sum((a - mean) ** 2 for a in v.flat) / v.size
    return (v - mean) / np.sqrt(var + eps), mean, var


def naive_layer_norm(x, weight=None, bias=None, *, normalized_shape, eps=1e-5):
    k = len(normalized_shape)
    out = np.zeros_like(x)
    for lead in itertools.product(*map(range, x.shape[:x.ndim - k])):
        y = _normalize(x[lead], eps)[0]
        out[lead] = y * (1.0 if weight is None else weight) + (0.0 if bias is None else bias)
    return out


def naive_batch_norm(x, mean, var, weight, bias, eps=1e-5):
    out = np.zeros_like(x)
    for c in range(x.shape[1]):
        out[:, c] = (x[:, c] - mean[c]) / np.sqrt(var[c] + eps) * weight[c] + bias[c]
    return out


def naive_batch_norm_train(x, weight, bias, eps=1e-5):
    out, means, variances = np.zeros_like(x), np.zeros(x.shape[1]), np.zeros(x.shape[1])
    for c in range(x.shape[1]):
        y, means[c], variances[c] = _normalize(x[:, c], eps)
        out[:, c] = y * weight[c] + bias[c]
    return out, means, variances


def naive_batch_norm_flag(x, mean, var, weight, bias, training, eps=1e-5):
    if training:
        return naive_batch_norm_train(x, weight, bias, eps)
    return naive_batch_norm(x, mean, var, weight, bias, eps), mean, var


def _layer_norm(label, args, normalized_shape, eps=1e-5):
    attrs = {"normalized_shape": normalized_shape, "eps": eps}
    return Sample("layer_norm", args, attrs, label=label,
                  expected=lambda *a: naive_layer_norm(*a, **attrs),
                  torch=lambda x, *wb: _torch().nn.functional.layer_norm(x, normalized_shape, *wb, eps=eps))


def _torch_batch_norm(x, mean, var, weight, bias, eps=1e-5):
    """torch cannot differentiate its batch norm in the running statistics; compare the others."""
    return _torch().nn.functional.batch_norm(x, mean.detach(), var.detach(), weight, bias, training=False, eps=eps)


def _torch_batch_norm_train(x, weight, bias):
    dims = [0] + list(range(2, x.ndim))
    y = _torch().nn.functional.batch_norm(x, None, None, weight, bias, training=True)
    return y, x.mean(dims), x.var(dims, unbiased=False)


SAMPLES = [
    _layer_norm("last-axis", (normal((3, 2, 5), 1), normal((5,), 2), normal((5,), 3)), (5,)),
    _layer_norm("two-axes-weight-only", (normal((2, 3, 4), 4), normal((3, 4), 5)), (3, 4), eps=1e-3),
    _layer_norm("no-affine", (normal((4, 6), 6) * 3 + 1,), (6,)),
    Sample("batch_norm", (normal((4, 3), 7), normal((3,), 8), positive((3,), 9), normal((3,), 10), normal((3,), 11)),
           label="rank2", expected=naive_batch_norm,
           torch=lambda x, m, v, w, b: _torch_batch_norm(x, m, v, w, b)),
    Sample("batch_norm", (normal((2, 3, 2, 3), 12), normal((3,), 13), positive((3,), 14), normal((3,), 15),
                          normal((3,), 16)), {"eps": 1e-3}, label="nchw",
           expected=lambda *a: naive_batch_norm(*a, eps=1e-3),
           torch=lambda x, m, v, w, b: _torch_batch_norm(x, m, v, w, b, eps=1e-3)),
    Sample("batch_norm_train", (normal((5, 3), 17), normal((3,), 18), normal((3,), 19)), label="rank2",
           expected=naive_batch_norm_train, torch=_torch_batch_norm_train),
    Sample("batch_norm_train", (normal((2, 3, 2, 2), 20) * 2 + 1, normal((3,), 21), normal((3,), 22)), label="nchw",
           expected=naive_batch_norm_train, torch=_torch_batch_norm_train),
    Sample("batch_norm_train", (normal((2, 2, 3), 23), normal((2,), 24), normal((2,), 25)), {"eps": 0.1},
           label="ncl-eps", expected=lambda *a: naive_batch_norm_train(*a, eps=0.1)),
    Sample("batch_norm_flag", (normal((5, 3), 26), normal((3,), 27), positive((3,), 28), normal((3,), 29),
                               normal((3,), 30), np.asarray(True)), label="rank2-training",
           expected=naive_batch_norm_flag),
    Sample("batch_norm_flag", (normal((2, 3, 2, 2), 31) * 2 + 1, normal((3,), 32), positive((3,), 33),
                               normal((3,), 34), normal((3,), 35), np.asarray(True)), {"eps": 1e-3},
           label="nchw-training", expected=lambda *a: naive_batch_norm_flag(*a, eps=1e-3)),
    Sample("batch_norm_flag", (normal((4, 3), 36), normal((3,), 37), positive((3,), 38), normal((3,), 39),
                               normal((3,), 40), np.asarray(False)), label="rank2-eval",
           expected=naive_batch_norm_flag),
    Sample("batch_norm_flag", (normal((2, 3, 2, 3), 41), normal((3,), 42), positive((3,), 43), normal((3,), 44),
                               normal((3,), 45), np.asarray(False)), {"eps": 1e-3}, label="nchw-eval",
           expected=lambda *a: naive_batch_norm_flag(*a, eps=1e-3)),
]
