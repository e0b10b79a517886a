"""Samples for reshape, copy, scale_grad, transpose, broadcast_to, squeeze, unsqueeze, concat and stack."""
import numpy as np

from . import Sample, normal


def _torch():
    """torch, imported only when a differential test runs a sample's torch expression."""
    import torch
    return torch

SAMPLES = [
    Sample("reshape", (normal((2, 3, 4)),), {"shape": (4, 6)}, torch=lambda x: x.reshape(4, 6)),
    Sample("reshape", (normal(()),), {"shape": (1, 1)}, label="scalar-up"),
    Sample("copy", (normal((2, 3)),), expected=lambda x: x + 0.0, torch=lambda x: x.clone()),
    # the gradient is weighed on purpose (not a derivative): tests/ir/test_scale_grad.py checks it
    Sample("scale_grad", (normal((3, 2)), np.array([[0.5], [1.0], [0.25]])), expected=lambda x, s: x + 0.0,
           grad_args=()),
    Sample("transpose", (normal((2, 3, 4)),), {"perm": (2, 0, 1)},
           expected=lambda x: np.array([[[x[i, j, k] for j in range(3)] for i in range(2)] for k in range(4)]),
           torch=lambda x: x.permute(2, 0, 1)),
    Sample("transpose", (normal((3, 4)),), {"perm": (1, 0)}, torch=lambda x: x.T, label="matrix"),
    Sample("flip", (normal((2, 3, 4)),), {"axes": (0, 2)}, expected=lambda x: x[::-1, :, ::-1],
           torch=lambda x: x.flip((0, 2))),
    Sample("flip", (normal((3, 5)),), {"axes": (-1,)}, expected=lambda x: x[:, ::-1], label="last"),
    Sample("flip", (normal((4, 3)),), {"axes": (0,)}, expected=lambda x: x[::-1], label="rows"),
    Sample("broadcast_to", (normal((3, 1)),), {"shape": (2, 3, 4)},
           expected=lambda x: np.array([[[x[j, 0]] * 4 for j in range(3)]] * 2),
           torch=lambda x: x.expand(2, 3, 4)),
    Sample("broadcast_to", (normal(()),), {"shape": (2, 3)}, label="scalar"),
    Sample("squeeze", (normal((1, 3, 1, 2)),), {"axes": (0, 2)}, torch=lambda x: x.squeeze((0, 2))),
    Sample("squeeze", (normal((3, 1)),), {"axes": (-1,)}, label="negative"),
    Sample("unsqueeze", (normal((3, 2)),), {"axes": (0, 3)}, expected=lambda x: x.reshape(1, 3, 2, 1)),
    Sample("unsqueeze", (normal((3, 2)),), {"axes": (-1,)}, expected=lambda x: x.reshape(3, 2, 1), label="negative"),
    Sample("concat", (normal((2, 3), 1), normal((2, 1), 2), normal((2, 2), 3)), {"axis": 1},
           expected=lambda a, b, c: np.array([list(a[i]) + list(b[i]) + list(c[i]) for i in range(2)]),
           torch=lambda *xs: _torch().cat(xs, 1)),
    Sample("concat", (normal((1, 3), 1), normal((2, 3), 2)), {"axis": 0}, label="axis-0"),
    Sample("concat", (np.array([1, 2], np.int64), np.array([3], np.int64)), {"axis": 0},
           expected=lambda a, b: np.array([1, 2, 3]), label="int"),
    Sample("stack", (normal((2, 3), 1), normal((2, 3), 2)), {"axis": 1},
           expected=lambda a, b: np.array([[a[i], b[i]] for i in range(2)]),
           torch=lambda *xs: _torch().stack(xs, 1)),
    Sample("stack", (normal((3,), 1), normal((3,), 2), normal((3,), 3)), {"axis": -1},
           expected=lambda a, b, c: np.array([[a[i], b[i], c[i]] for i in range(3)]), label="last"),
]
