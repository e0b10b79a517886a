"""Samples for cross_entropy and mse_loss, checked against per-sample loops."""
import itertools
import math

import numpy as np

from . import Sample, normal, rng


def _torch():
    """torch, imported only when a differential test runs a sample's torch expression."""
    import torch
    return torch


def _log_softmax_1d(z):
    m = max(z)
    log_total = m + math.log(sum(math.exp(v - m) for v in z))
    return np.array([v - log_total for v in z])


def _rows(x):
    """(index of the per-sample loss, that sample's logits) for (C,) and (N,C,d1,...) inputs."""
    if x.ndim == 1:
        yield (), x
        return
    moved = np.moveaxis(x, 1, -1)
    for pos in itertools.product(*map(range, moved.shape[:-1])):
        yield pos, moved[pos]


def naive_cross_entropy(x, target, reduction="mean", ignore_index=-100, label_smoothing=0.0):
    classes = x.shape[1] if x.ndim >= 2 else x.shape[0]
    probs = target.dtype.kind == "f"
    losses = np.zeros(np.moveaxis(target, 1, -1).shape[:-1] if probs and x.ndim >= 2 else
                      (() if probs else target.shape))
    counted = 0
    for pos, logits in _rows(x):
        logp = _log_softmax_1d(logits)
        if probs:
            t = np.moveaxis(target, 1, -1)[pos] if x.ndim >= 2 else target
            losses[pos] = -sum(((1 - label_smoothing) * t[c] + label_smoothing / classes) * logp[c]
                               for c in range(classes))
            counted += 1
        elif target[pos] != ignore_index:
            losses[pos] = -(1 - label_smoothing) * logp[target[pos]] - label_smoothing / classes * sum(logp)
            counted += 1
    if reduction == "none":
        return losses
    return losses.sum() / (counted if reduction == "mean" else 1)


def naive_mse(x, t, reduction="mean"):
    d = np.broadcast_arrays(x, t)
    loss = np.array([(a - b) ** 2 for a, b in zip(d[0].flat, d[1].flat)]).reshape(d[0].shape)
    return loss if reduction == "none" else (loss.mean() if reduction == "mean" else loss.sum())


def _ce(label, x, target, **attrs):
    def with_torch(x, t):
        t = t if t.dtype.is_floating_point else t.long()
        return _torch().nn.functional.cross_entropy(x, t, **attrs)
    return Sample("cross_entropy", (x, target), attrs, label=label,
                  expected=lambda x, t: naive_cross_entropy(x, t, **attrs), torch=with_torch)


def _mse(label, x, t, **attrs):
    return Sample("mse_loss", (x, t), attrs, label=label, expected=lambda x, t: naive_mse(x, t, **attrs),
                  torch=lambda x, t: _torch().nn.functional.mse_loss(x, t, **attrs))


def _probs(shape, axis, seed):
    p = rng(seed).uniform(0.1, 1.0, shape)
    return p / p.sum(axis=axis, keepdims=True)


_TARGET = np.array([2, 0, -100, 3, 1], np.int64)  # one ignored sample

SAMPLES = [
    _ce("mean-ignore", normal((5, 4), 1), _TARGET),
    _ce("sum-smoothing", normal((5, 4), 2), _TARGET, reduction="sum", label_smoothing=0.2),
    _ce("none-smoothing-mean", normal((5, 4), 3), _TARGET, label_smoothing=0.1),
    _ce("none", normal((5, 4), 4), _TARGET, reduction="none", label_smoothing=0.3),
    _ce("spatial-int32", normal((2, 3, 2, 2), 5), rng(6).integers(0, 3, (2, 2, 2)).astype(np.int32)),
    _ce("spatial-ignore-none", normal((2, 4, 3), 7), np.array([[1, 7, 3], [0, 2, 7]]), reduction="none",
        ignore_index=7),
    _ce("unbatched", normal((5,), 8), np.array(3), label_smoothing=0.25),
    _ce("probs-mean", normal((3, 4), 9), _probs((3, 4), 1, 10)),
    _ce("probs-spatial-none", normal((2, 3, 2), 11), _probs((2, 3, 2), 1, 12), reduction="none",
        label_smoothing=0.2),
    _ce("probs-unbatched-sum", normal((4,), 13), _probs((4,), 0, 14), reduction="sum"),
    _mse("mean", normal((3, 4), 15), normal((3, 4), 16)),
    _mse("broadcast-none", normal((3, 4), 17), normal((4,), 18), reduction="none"),
    _mse("broadcast-sum", normal((2, 1), 19), normal((3,), 20), reduction="sum"),
]
