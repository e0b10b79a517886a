"""Samples for slice, slice_scatter, pad, gather, scatter, scatter_add, index_select, index_add and one_hot."""
import itertools

import numpy as np

from . import Sample, normal


def _torch():
    """torch, imported only when a differential test runs a sample's torch expression."""
    import torch
    return torch

_IDX = np.array([[2, 0, 2], [1, 1, 0]], np.int64)  # repeats, so the scatter-style gradients accumulate
_TOKENS = np.array([[3, 0, 3], [1, 4, 0]], np.int32)


def _naive_gather(x, idx, axis):
    out = np.zeros(idx.shape, x.dtype)
    for pos in itertools.product(*map(range, idx.shape)):
        src = list(pos)
        src[axis] = idx[pos]
        out[pos] = x[tuple(src)]
    return out


def _naive_scatter_add(g, idx, axis, shape, base=None):
    out = np.zeros(shape, g.dtype) if base is None else base.copy()
    for pos in itertools.product(*map(range, idx.shape)):
        dst = list(pos)
        dst[axis] = idx[pos]
        out[tuple(dst)] += g[pos]
    return out


def _naive_slice_scatter(g, shape, starts, stops, steps):
    out = np.zeros(shape)
    for pos in itertools.product(*map(range, g.shape)):
        out[tuple(lo + p * st for p, lo, st in zip(pos, starts, steps))] = g[pos]
    return out


def _naive_scatter(x, idx, src, axis):
    out = x.copy()
    for pos in itertools.product(*map(range, idx.shape)):
        dst = list(pos)
        dst[axis] = idx[pos]
        out[tuple(dst)] = src[pos]
    return out


def _naive_embedding(table, tokens):
    return np.array([[table[t] for t in row] for row in tokens])


def _naive_index_add_rows(g, idx, rows):
    out = np.zeros((rows,) + g.shape[idx.ndim:])
    for pos in itertools.product(*map(range, idx.shape)):
        out[idx[pos]] += g[pos]
    return out


def _naive_pad(x, before, after, value):
    out = np.full(tuple(d + b + a for d, b, a in zip(x.shape, before, after)), value)
    out[tuple(slice(b, b + d) for b, d in zip(before, x.shape))] = x
    return out


def _naive_mode_pad(x, before, after, mode):
    """Padding element by element: each padded position reads the operand at its mirrored (reflect), clamped
    (edge) or wrapped (wrap) position, axis by axis."""
    def source(i, n):
        if mode == "edge":
            return min(max(i, 0), n - 1)
        if mode == "wrap":
            return i % n
        return -i if i < 0 else 2 * (n - 1) - i if i >= n else i
    out = x
    for axis, (b, a) in enumerate(zip(before, after)):
        n = x.shape[axis]
        out = np.stack([np.take(out, source(i, n), axis=axis) for i in range(-b, n + a)], axis=axis)
    return out


SAMPLES = [
    Sample("slice", (normal((4, 5)),), {"starts": (1, 0), "stops": (3, 5), "steps": (1, 1)},
           expected=lambda x: np.array([[x[i, j] for j in range(5)] for i in (1, 2)]),
           torch=lambda x: x[1:3, 0:5], label="contiguous"),
    Sample("slice", (normal((5, 6)),), {"starts": (0, 1), "stops": (5, 6), "steps": (2, 3)},
           expected=lambda x: np.array([[x[i, j] for j in (1, 4)] for i in (0, 2, 4)]),
           torch=lambda x: x[0:5:2, 1:6:3], label="strided"),
    Sample("slice", (normal((3, 4)),), {"starts": (1, 2), "stops": (1, 4), "steps": (1, 1)},
           expected=lambda x: np.zeros((0, 2)), label="empty"),
    Sample("slice_scatter", (normal((3, 2)),), {"shape": (5, 6), "starts": (0, 1), "stops": (5, 6), "steps": (2, 3)},
           expected=lambda g: np.array([[g[i // 2, (j - 1) // 3] if i % 2 == 0 and j % 3 == 1 else 0.0
                                         for j in range(6)] for i in range(5)])),
    Sample("slice_scatter", (normal((1, 2, 2)),), {"shape": (3, 5, 4), "starts": (1, 0, 1), "stops": (2, 5, 4),
                                                    "steps": (1, 3, 2)},
           expected=lambda g: _naive_slice_scatter(g, (3, 5, 4), (1, 0, 1), (2, 5, 4), (1, 3, 2)),
           label="3d-odd"),
    Sample("slice_scatter", (normal((1,)),), {"shape": (5,), "starts": (1,), "stops": (5,), "steps": (7,)},
           expected=lambda g: _naive_slice_scatter(g, (5,), (1,), (5,), (7,)), label="step-past-end"),
    Sample("slice_scatter", (normal((0, 3)),), {"shape": (3, 3), "starts": (2, 0), "stops": (2, 3), "steps": (2, 1)},
           expected=lambda g: np.zeros((3, 3)), label="empty"),
    Sample("pad", (normal((2, 3)),), {"pads": (1, 0, 2, 1)},
           expected=lambda x: _naive_pad(x, (1, 2), (0, 1), 0.0),
           torch=lambda x: _torch().nn.functional.pad(x, (2, 1, 1, 0))),
    Sample("pad", (normal((3,)),), {"pads": (0, 2), "value": -1.5},
           expected=lambda x: _naive_pad(x, (0,), (2,), -1.5), label="value"),
    Sample("pad", (np.array([[1, 2]], np.int32),), {"pads": (1, 1, 0, 0), "value": 7.0},
           expected=lambda x: np.array([[7, 7], [1, 2], [7, 7]], np.int32), label="int"),
    Sample("pad", (np.array(2.5),), {"pads": ()}, expected=lambda x: x, label="rank0"),
    Sample("pad", (normal((3, 4)),), {"pads": (2, 1, 3, 2), "mode": "reflect"},
           expected=lambda x: _naive_mode_pad(x, (2, 3), (1, 2), "reflect"),
           torch=lambda x: _torch().nn.functional.pad(x[None], (3, 2, 2, 1), mode="reflect")[0], label="reflect"),
    Sample("pad", (normal((2, 3)),), {"pads": (0, 3, 4, 1), "mode": "edge"},
           expected=lambda x: _naive_mode_pad(x, (0, 4), (3, 1), "edge"),
           torch=lambda x: _torch().nn.functional.pad(x[None], (4, 1, 0, 3), mode="replicate")[0], label="edge"),
    Sample("pad", (normal((3, 2)),), {"pads": (3, 1, 2, 2), "mode": "wrap"},
           expected=lambda x: _naive_mode_pad(x, (3, 2), (1, 2), "wrap"),
           torch=lambda x: _torch().nn.functional.pad(x[None], (2, 2, 3, 1), mode="circular")[0], label="wrap"),
    Sample("gather", (normal((3, 4)), _IDX), {"axis": 0}, expected=lambda x, i: _naive_gather(x, i, 0),
           torch=lambda x, i: x.gather(0, i), label="axis-0"),
    Sample("gather", (normal((3, 4)), _IDX.astype(np.int32)), {"axis": 1},
           expected=lambda x, i: _naive_gather(x, i, 1), label="axis-1-i32"),
    Sample("gather", (normal((2, 3, 4)), np.array([[[3], [0], [3]]], np.int64)), {"axis": -1},
           expected=lambda x, i: _naive_gather(x, i, 2), torch=lambda x, i: x.gather(-1, i), label="smaller-index"),
    Sample("scatter", (normal((3, 4)), np.array([[2, 0, 1], [0, 1, 2]]), normal((2, 3), 1)), {"axis": 0},
           expected=lambda x, i, s: _naive_scatter(x, i, s, 0), torch=lambda x, i, s: x.scatter(0, i, s)),
    Sample("scatter", (normal((2, 5)), np.array([[4], [0]], np.int32), normal((2, 1), 1)), {"axis": -1},
           expected=lambda x, i, s: _naive_scatter(x, i.astype(np.int64), s, 1), label="last-axis"),
    Sample("scatter_add", (normal((2, 3)), _IDX), {"axis": 0, "shape": (3, 4)},
           expected=lambda g, i: _naive_scatter_add(g, i, 0, (3, 4))),
    Sample("scatter_add", (normal((3, 5)), np.array([[6, 0, 6, 6, 2], [1, 1, 1, 1, 1], [0, 6, 3, 0, 4]], np.int32)),
           {"axis": -1, "shape": (3, 7)}, expected=lambda g, i: _naive_scatter_add(g, i, 1, (3, 7)),
           torch=lambda g, i: _torch().zeros(3, 7, dtype=g.dtype).scatter_add(-1, i.long(), g), label="odd-repeats"),
    Sample("scatter_add", (normal((2, 1, 3)), np.array([[[4, 4, 0]], [[1, 0, 1]]], np.int64)),
           {"axis": 2, "shape": (3, 4, 5)}, expected=lambda g, i: _naive_scatter_add(g, i, 2, (3, 4, 5)),
           label="smaller-index"),
    Sample("scatter_add", (normal((3, 5)), np.array([[6, 0, 6, 6, 2], [1, 1, 1, 1, 1], [0, 6, 3, 0, 4]], np.int64),
                           normal((3, 7), 2)), {"axis": 1, "shape": (3, 7)},
           expected=lambda g, i, x: _naive_scatter_add(g, i, 1, (3, 7), x),
           torch=lambda g, i, x: x.scatter_add(1, i, g), label="onto-a-base"),
    Sample("scatter_add", (normal((6,)), np.array([1, 1, 1, 0, 2, 1], np.int64)), {"axis": 0, "shape": (3,)},
           expected=lambda g, i: _naive_scatter_add(g, i, 0, (3,)), label="rank1-repeats"),
    Sample("scatter_add", (normal((1,)), np.array([0], np.int64)), {"axis": 0, "shape": (1,)},
           expected=lambda g, i: g.copy(), label="size-1"),
    Sample("scatter_add", (normal((0, 3)), np.zeros((0, 3), np.int64)), {"axis": 0, "shape": (4, 3)},
           expected=lambda g, i: np.zeros((4, 3)), label="empty-source"),
    Sample("scatter_add", (np.array([[1, 2, 3]], np.int32), np.array([[0, 0, 0]], np.int64)),
           {"axis": 1, "shape": (1, 2)}, expected=lambda g, i: np.array([[6, 0]], np.int32), label="int"),
    Sample("index_select", (normal((5, 3)), _TOKENS), {"axis": 0}, expected=_naive_embedding,
           torch=lambda w, t: _torch().nn.functional.embedding(t.long(), w), label="embedding"),
    Sample("index_select", (normal((2, 4)), np.array([3, 1, 3], np.int64)), {"axis": 1},
           expected=lambda x, i: np.stack([x[:, 3], x[:, 1], x[:, 3]], axis=1),
           torch=lambda x, i: x.index_select(1, i), label="axis-1"),
    Sample("index_add", (normal((2, 3, 3)), _TOKENS), {"axis": 0, "shape": (5, 3)},
           expected=lambda g, i: _naive_index_add_rows(g, i, 5)),
    Sample("index_add", (normal((2, 3)), np.array([0, 0, 1], np.int64)), {"axis": 1, "shape": (2, 2)},
           expected=lambda g, i: np.stack([g[:, 0] + g[:, 1], g[:, 2]], axis=1), label="axis-1"),
    Sample("index_add", (normal((2, 4, 140)), np.array([2, 0, 2, 2], np.int64)), {"axis": 1, "shape": (2, 3, 140)},
           expected=lambda g, i: np.stack([g[:, 1], np.zeros((2, 140)), g[:, 0] + g[:, 2] + g[:, 3]], axis=1),
           torch=lambda g, i: _torch().zeros(2, 3, 140, dtype=g.dtype).index_add(1, i, g), label="wide-rows"),
    Sample("index_add", (normal((2, 4, 37)), np.array([2, 0, 2, 2], np.int64), normal((2, 3, 37), 3)),
           {"axis": 1, "shape": (2, 3, 37)},
           expected=lambda g, i, x: np.stack([x[:, 0] + g[:, 1], x[:, 1], ((x[:, 2] + g[:, 0]) + g[:, 2]) + g[:, 3]],
                                             axis=1),
           torch=lambda g, i, x: x.index_add(1, i, g), label="onto-a-base"),
    Sample("index_add", (normal((3, 2)), np.zeros(3, np.int32)), {"axis": 0, "shape": (1, 2)},
           expected=lambda g, i: (g[0] + g[1] + g[2])[None], label="size-1"),
    Sample("index_add", (normal((0, 3)), np.zeros(0, np.int64)), {"axis": 0, "shape": (4, 3)},
           expected=lambda g, i: np.zeros((4, 3)), label="no-indices"),
    Sample("index_add", (np.array([[1, 2], [3, 4]], np.int32), np.array([1, 1], np.int64)),
           {"axis": 1, "shape": (2, 3)},
           expected=lambda g, i: np.array([[0, 3, 0], [0, 7, 0]], np.int32), label="int"),
    Sample("one_hot", (np.array([[0, 2], [1, 2]], np.int64),), {"num_classes": 3},
           expected=lambda i: np.array([[[1, 0, 0], [0, 0, 1]], [[0, 1, 0], [0, 0, 1]]], np.float32),
           torch=lambda i: _torch().nn.functional.one_hot(i, 3).float()),
    Sample("one_hot", (np.array([1, 0], np.int32),), {"num_classes": 2, "dtype": "int64"},
           expected=lambda i: np.array([[0, 1], [1, 0]]), label="int64"),
]
