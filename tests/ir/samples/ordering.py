"""Samples for sort, topk, cumsum and cumprod."""
import numpy as np

from . import Sample, normal

_TIES = np.array([[3.0, 1.0, 3.0, np.nan, 1.0], [0.5, -2.0, 0.5, 0.5, 7.0]])


def _naive_sort(x, axis, descending):
    x = np.moveaxis(x, axis, -1)
    rows = x.reshape(-1, x.shape[-1])
    orders = [sorted(range(len(r)), key=lambda i: ((np.nan_to_num(r[i], nan=np.inf) * (-1 if descending else 1)),
                                                    -1 if descending and np.isnan(r[i]) else 0, i)) for r in rows]
    order = np.array(orders, np.int64).reshape(x.shape)
    return np.moveaxis(np.take_along_axis(x, order, -1), -1, axis), np.moveaxis(order, -1, axis)


def _naive_topk(x, axis, k, largest):
    values, order = _naive_sort(x, axis, largest)
    first = [slice(None)] * x.ndim
    first[axis] = slice(0, k)
    return values[tuple(first)], order[tuple(first)]


def _naive_scan(x, axis, product=False):
    x = np.moveaxis(x, axis, 0)
    out = np.zeros_like(x)
    total = np.ones_like(x[0]) if product else np.zeros_like(x[0])
    for i in range(x.shape[0]):
        total = total * x[i] if product else total + x[i]
        out[i] = total
    return np.moveaxis(out, 0, axis)


SAMPLES = [
    Sample("sort", (normal((3, 5)),), {"axis": 1}, expected=lambda x: _naive_sort(x, 1, False),
           torch=lambda x: tuple(x.sort(dim=1, stable=True))),
    Sample("sort", (normal((4, 2, 3), 1),), {"axis": 0, "descending": True},
           expected=lambda x: _naive_sort(x, 0, True), label="descending-axis0"),
    Sample("sort", (_TIES,), {"axis": -1}, expected=lambda x: _naive_sort(x, 1, False), grad_args=(), label="ties"),
    Sample("sort", (_TIES,), {"axis": 1, "descending": True}, expected=lambda x: _naive_sort(x, 1, True),
           grad_args=(), label="ties-descending"),
    Sample("sort", (np.array([[4, 1, 4, 0]], np.int32),), {"axis": 1}, expected=lambda x: _naive_sort(x, 1, False),
           label="int"),
    Sample("topk", (normal((3, 5)),), {"axis": 1, "k": 2}, expected=lambda x: _naive_topk(x, 1, 2, True),
           torch=lambda x: tuple(x.topk(2, dim=1))),
    Sample("topk", (normal((4, 2, 3), 1),), {"axis": 0, "k": 3, "largest": False},
           expected=lambda x: _naive_topk(x, 0, 3, False), label="smallest-axis0"),
    Sample("topk", (_TIES,), {"axis": -1, "k": 4}, expected=lambda x: _naive_topk(x, 1, 4, True), grad_args=(),
           label="ties"),
    Sample("topk", (np.array([[4, 1, 4, 0]], np.int32),), {"axis": 1, "k": 0},
           expected=lambda x: _naive_topk(x, 1, 0, True), label="int-k0"),
    Sample("cumsum", (normal((3, 4)),), {"axis": 1}, expected=lambda x: _naive_scan(x, 1),
           torch=lambda x: x.cumsum(1)),
    Sample("cumsum", (normal((5, 2, 3), 1),), {"axis": 0}, expected=lambda x: _naive_scan(x, 0), label="axis0"),
    Sample("cumsum", (np.array([[1, 2, 3], [4, 5, 6]]),), {"axis": -1}, expected=lambda x: _naive_scan(x, 1),
           label="int"),
    Sample("cumprod", (normal((3, 4)),), {"axis": 1}, expected=lambda x: _naive_scan(x, 1, True),
           torch=lambda x: x.cumprod(1)),
    Sample("cumprod", (np.array([[0.5, 0.0, 2.0, -1.5], [1.5, 2.0, 0.0, 0.0]]),), {"axis": -1},
           expected=lambda x: _naive_scan(x, 1, True), label="zeros"),
    Sample("cumprod", (normal((4, 2, 3), 1),), {"axis": 0}, expected=lambda x: _naive_scan(x, 0, True), label="axis0"),
]
