"""Samples for the reductions, argmax/argmin and the softmax family."""
import numpy as np

from . import Sample, normal


def _softmax(x, axis):
    z = np.exp(x)
    return z / z.sum(axis=axis, keepdims=True)


_TIES = np.array([[1.0, 3.0, 3.0, 0.5], [2.0, 0.0, -1.0, 1.5], [-0.5, -0.25, -0.5, 0.75]])

SAMPLES = [
    Sample("sum", (normal((2, 3, 4)),), {"axes": (0, 2)}, torch=lambda x: x.sum((0, 2)), label="axes-0-2"),
    Sample("sum", (normal((2, 3, 4)),), {}, torch=lambda x: x.sum(), label="all"),
    Sample("sum", (normal((2, 3, 4)),), {"axes": (-1,), "keepdim": True},
           torch=lambda x: x.sum(-1, keepdim=True), label="keepdim-neg"),
    Sample("sum", (normal(()),), {}, label="scalar"),
    Sample("sum", (np.arange(12, dtype=np.int32).reshape(3, 4),), {"axes": (1,)},
           expected=lambda x: np.array([x[i].sum() for i in range(3)], np.int32), label="int32"),
    Sample("sum", (np.array([[True, False, True], [True, True, False]]),), {"axes": (1,)},
           expected=lambda x: np.array([2, 2], np.int64), label="bool-counts"),
    Sample("mean", (normal((2, 3, 4)),), {"axes": (1,)}, torch=lambda x: x.mean(1), label="axis-1"),
    Sample("mean", (normal((2, 3, 4)),), {"axes": (0, 2), "keepdim": True},
           expected=lambda x: x.sum(axis=(0, 2), keepdims=True) / 8, torch=lambda x: x.mean((0, 2), keepdim=True),
           label="keepdim"),
    Sample("mean", (normal((3, 4)),), {}, torch=lambda x: x.mean(), label="all"),
    # exactly two tied maxima in row 0: central differences then also see the even split
    Sample("max", (_TIES,), {"axes": (1,)}, expected=lambda x: np.array([3.0, 2.0, 0.75]),
           torch=lambda x: x.amax(1), label="ties"),
    Sample("max", (normal((2, 3, 4)),), {"axes": (0, 2), "keepdim": True},
           torch=lambda x: x.amax((0, 2), keepdim=True), label="keepdim"),
    Sample("max", (normal((3, 4)),), {}, torch=lambda x: x.amax(), label="all"),
    Sample("min", (-_TIES,), {"axes": (1,)}, expected=lambda x: -np.array([3.0, 2.0, 0.75]),
           torch=lambda x: x.amin(1), label="ties"),
    Sample("min", (normal((2, 3, 4)),), {"axes": (1,)}, torch=lambda x: x.amin(1), label="axis-1"),
    Sample("min", (np.array([[4, -2, 7], [1, 9, 0]], np.int64),), {"axes": (0,)},
           expected=lambda x: np.array([1, -2, 0]), label="int"),
    Sample("argmax", (normal((3, 4)),), {"axis": 1}, torch=lambda x: x.argmax(1), label="axis-1"),
    Sample("argmax", (normal((3, 4)),), {}, torch=lambda x: x.argmax(), label="flat"),
    Sample("argmax", (_TIES,), {"axis": 1, "keepdim": True}, expected=lambda x: np.array([[1], [0], [3]]),
           torch=lambda x: x.argmax(1, keepdim=True), label="ties-first"),
    Sample("argmax", (normal((2, 3)),), {"keepdim": True},
           expected=lambda x: np.array(np.argmax(x.reshape(-1))).reshape(1, 1), label="flat-keepdim"),
    Sample("argmin", (normal((3, 4)),), {"axis": 0}, torch=lambda x: x.argmin(0), label="axis-0"),
    Sample("argmin", (np.array([[5, 1, 1], [0, 7, -3]], np.int32),), {},
           expected=lambda x: np.array(5), label="flat-int"),
    Sample("softmax", (normal((3, 5)),), {"axis": -1}, expected=lambda x: _softmax(x, -1),
           torch=lambda x: x.softmax(-1), label="last"),
    Sample("softmax", (normal((3, 4)),), {"axis": 0}, expected=lambda x: _softmax(x, 0),
           torch=lambda x: x.softmax(0), label="axis-0"),
    Sample("softmax", (normal((2, 3)) + 1000.0,), {"axis": 1}, expected=lambda x: _softmax(x - 1000.0, 1),
           label="large"),
    Sample("log_softmax", (normal((3, 5)),), {"axis": -1}, expected=lambda x: np.log(_softmax(x, -1)),
           torch=lambda x: x.log_softmax(-1), label="last"),
    Sample("log_softmax", (normal((2, 3, 4)),), {"axis": 1}, expected=lambda x: np.log(_softmax(x, 1)),
           torch=lambda x: x.log_softmax(1), label="axis-1"),
    Sample("log_softmax", (normal((2, 3)) - 2000.0,), {"axis": 1},
           expected=lambda x: np.log(_softmax(x + 2000.0, 1)), label="very-negative"),
]
