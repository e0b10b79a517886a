"""Samples for max/avg/adaptive pooling and their backward ops, checked against loops over windows."""
import itertools

import numpy as np

from . import Sample, normal


def _torch():
    """torch, imported only when a differential test runs a sample's torch expression."""
    import torch
    return torch


def _out_size(size, k, s, p, d, ceil_mode):
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    return out - 1 if ceil_mode and (out - 1) * s >= size + p else out


def _window_taps(x_shape, kernel_size, stride, padding, dilation, ceil_mode):
    """For each output position, the input positions (r, c) of its window (None where outside the input)."""
    h, w = x_shape[-2:]
    oh, ow = (_out_size(x_shape[-2 + a], kernel_size[a], stride[a], padding[a], dilation[a], ceil_mode)
              for a in range(2))
    for i, j in itertools.product(range(oh), range(ow)):
        taps = []
        for a, c in itertools.product(range(kernel_size[0]), range(kernel_size[1])):
            r, col = i * stride[0] - padding[0] + a * dilation[0], j * stride[1] - padding[1] + c * dilation[1]
            taps.append((r, col) if 0 <= r < h and 0 <= col < w else None)
        yield (oh, ow), (i, j), taps


def _first_max(plane, taps):
    best = None
    for t in taps:
        if t is not None and (best is None or plane[t] > plane[best]):
            best = t
    return best


def naive_max_pool(x, padding=(0, 0), dilation=(1, 1), ceil_mode=False, **geom):
    lead = x.reshape(-1, *x.shape[-2:])
    outs = []
    for plane in lead:
        vals = {}
        for shape, pos, taps in _window_taps(x.shape, padding=padding, dilation=dilation, ceil_mode=ceil_mode,
                                             **geom):
            vals[pos] = plane[_first_max(plane, taps)]
        outs.append(np.array([[vals[(i, j)] for j in range(shape[1])] for i in range(shape[0])]))
    return np.array(outs).reshape(x.shape[:-2] + shape)


def naive_max_grad(g, x, padding=(0, 0), dilation=(1, 1), ceil_mode=False, **geom):
    gl, xl = g.reshape(-1, *g.shape[-2:]), x.reshape(-1, *x.shape[-2:])
    dx = np.zeros_like(xl)
    for k in range(xl.shape[0]):
        for _, pos, taps in _window_taps(x.shape, padding=padding, dilation=dilation, ceil_mode=ceil_mode, **geom):
            dx[k][_first_max(xl[k], taps)] += gl[k][pos]
    return dx.reshape(x.shape)


def naive_max_select(v, x, padding=(0, 0), dilation=(1, 1), ceil_mode=False, **geom):
    vl, xl = v.reshape(-1, *v.shape[-2:]), x.reshape(-1, *x.shape[-2:])
    outs = []
    for k in range(xl.shape[0]):
        vals = {}
        for shape, pos, taps in _window_taps(x.shape, padding=padding, dilation=dilation, ceil_mode=ceil_mode,
                                             **geom):
            vals[pos] = vl[k][_first_max(xl[k], taps)]
        outs.append(np.array([[vals[(i, j)] for j in range(shape[1])] for i in range(shape[0])]))
    return np.array(outs).reshape(x.shape[:-2] + shape)


def _avg_divisor(x_shape, pos, kernel_size, stride, padding, count_include_pad, taps):
    if not count_include_pad:
        return sum(t is not None for t in taps)
    size = 1
    for a in range(2):
        start = pos[a] * stride[a] - padding[a]
        size *= min(start + kernel_size[a], x_shape[-2 + a] + padding[a]) - start
    return size


def naive_avg_pool(x, kernel_size, stride, padding=(0, 0), ceil_mode=False, count_include_pad=True):
    lead = x.reshape(-1, *x.shape[-2:])
    out = None
    for shape, pos, taps in _window_taps(x.shape, kernel_size, stride, padding, (1, 1), ceil_mode):
        out = np.zeros((lead.shape[0],) + shape) if out is None else out
        div = _avg_divisor(x.shape, pos, kernel_size, stride, padding, count_include_pad, taps)
        out[(slice(None),) + pos] = sum(lead[(slice(None),) + t] for t in taps if t is not None) / div
    return out.reshape(x.shape[:-2] + shape)


def naive_avg_grad(g, input_shape, kernel_size, stride, padding=(0, 0), ceil_mode=False, count_include_pad=True):
    gl = g.reshape(-1, *g.shape[-2:])
    dx = np.zeros((gl.shape[0],) + tuple(input_shape[-2:]))
    for _, pos, taps in _window_taps(input_shape, kernel_size, stride, padding, (1, 1), ceil_mode):
        div = _avg_divisor(input_shape, pos, kernel_size, stride, padding, count_include_pad, taps)
        for t in taps:
            if t is not None:
                dx[(slice(None),) + t] += gl[(slice(None),) + pos] / div
    return dx.reshape(input_shape)


def naive_adaptive(x, output_size):
    h, w = x.shape[-2:]
    out = np.zeros(x.shape[:-2] + tuple(output_size))
    for i, j in itertools.product(range(output_size[0]), range(output_size[1])):
        r0, r1 = (i * h) // output_size[0], -(-((i + 1) * h) // output_size[0])
        c0, c1 = (j * w) // output_size[1], -(-((j + 1) * w) // output_size[1])
        out[..., i, j] = x[..., r0:r1, c0:c1].mean(axis=(-2, -1))
    return out


def _max(label, x, **attrs):
    torch_attrs = dict(attrs)
    return Sample("max_pool2d", (x,), attrs, label=label, expected=lambda x: naive_max_pool(x, **attrs),
                  torch=lambda x: _torch().nn.functional.max_pool2d(x, **torch_attrs))


def _avg(label, x, **attrs):
    return Sample("avg_pool2d", (x,), attrs, label=label, expected=lambda x: naive_avg_pool(x, **attrs),
                  torch=lambda x: _torch().nn.functional.avg_pool2d(x, **attrs))


def _adaptive(label, x, output_size):
    return Sample("adaptive_avg_pool2d", (x,), {"output_size": output_size}, label=label,
                  expected=lambda x: naive_adaptive(x, output_size),
                  torch=lambda x: _torch().nn.functional.adaptive_avg_pool2d(x, output_size))


_CEIL = dict(kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), ceil_mode=True)
_DILATED = dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 0), dilation=(2, 1))
_AVG_CEIL = dict(kernel_size=(3, 2), stride=(2, 2), padding=(1, 1), ceil_mode=True)
_OVERLAP = dict(kernel_size=(3, 3), stride=(2, 3), padding=(1, 1))  # odd sizes, overlapping rows, rounded ties
_AVG_OVERLAP = dict(kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), count_include_pad=False)

SAMPLES = [
    _max("2x2", normal((2, 2, 4, 6), 1), kernel_size=(2, 2), stride=(2, 2)),
    _max("ceil-pad", normal((1, 2, 6, 6), 2), **_CEIL),
    _max("dilated-chw", normal((2, 5, 6), 3), **_DILATED),
    Sample("max_pool2d_grad", (normal((1, 2, 4, 4), 4), normal((1, 2, 6, 6), 2)), _CEIL, grad_args=(0,),
           label="ceil-pad", expected=lambda g, x: naive_max_grad(g, x, **_CEIL)),
    Sample("max_pool2d_grad", (normal((2, 5, 2), 5), normal((2, 5, 6), 3)), _DILATED, grad_args=(0,),
           label="dilated-chw", expected=lambda g, x: naive_max_grad(g, x, **_DILATED)),
    Sample("max_pool2d_select", (normal((1, 2, 6, 6), 6), normal((1, 2, 6, 6), 2)), _CEIL, grad_args=(0,),
           label="ceil-pad", expected=lambda v, x: naive_max_select(v, x, **_CEIL)),
    _avg("3x3-pad-include", normal((2, 2, 5, 5), 7), kernel_size=(3, 3), stride=(2, 2), padding=(1, 1)),
    _avg("ceil-exclude", normal((1, 3, 5, 4), 8), count_include_pad=False, **_AVG_CEIL),
    _avg("ceil-include-chw", normal((2, 5, 4), 9), **_AVG_CEIL),
    Sample("avg_pool2d_grad", (normal((1, 3, 3, 3), 10),), dict(input_shape=(1, 3, 5, 4), count_include_pad=False,
                                                                   **_AVG_CEIL), label="ceil-exclude",
           expected=lambda g: naive_avg_grad(g, (1, 3, 5, 4), count_include_pad=False, **_AVG_CEIL)),
    Sample("avg_pool2d_grad", (normal((2, 3, 3), 11),), dict(input_shape=(2, 5, 4), **_AVG_CEIL),
           label="ceil-include-chw", expected=lambda g: naive_avg_grad(g, (2, 5, 4), **_AVG_CEIL)),
    Sample("max_pool2d_grad", (normal((1, 1, 1, 1), 15), normal((1, 1, 1, 1), 16)),
           dict(kernel_size=(1, 1), stride=(1, 1)), grad_args=(0,), label="size-1",
           expected=lambda g, x: naive_max_grad(g, x, kernel_size=(1, 1), stride=(1, 1))),
    Sample("max_pool2d_grad", (normal((2, 3, 3), 17), np.round(normal((2, 5, 7), 18))), _OVERLAP, grad_args=(0,),
           label="odd-ties", expected=lambda g, x: naive_max_grad(g, x, **_OVERLAP)),
    Sample("max_pool2d_grad", (normal((0, 2, 2, 2), 19), normal((0, 2, 4, 4), 19)),
           dict(kernel_size=(2, 2), stride=(2, 2)), grad_args=(0,), label="empty",
           expected=lambda g, x: np.zeros((0, 2, 4, 4))),
    Sample("max_pool2d_select", (normal((2, 5, 7), 20), np.round(normal((2, 5, 7), 18))), _OVERLAP, grad_args=(0,),
           label="odd-ties", expected=lambda v, x: naive_max_select(v, x, **_OVERLAP)),
    Sample("max_pool2d_select", (normal((1, 1, 3), 21), normal((1, 1, 3), 22)),
           dict(kernel_size=(1, 2), stride=(1, 1), padding=(0, 1)), grad_args=(0,), label="size-1-pad",
           expected=lambda v, x: naive_max_select(v, x, kernel_size=(1, 2), stride=(1, 1), padding=(0, 1))),
    Sample("avg_pool2d_grad", (normal((2, 5, 7), 23),), dict(input_shape=(2, 5, 7), **_AVG_OVERLAP),
           label="odd-overlap", expected=lambda g: naive_avg_grad(g, (2, 5, 7), **_AVG_OVERLAP)),
    Sample("avg_pool2d_grad", (normal((1, 1, 1, 1), 24),), dict(input_shape=(1, 1, 1, 1), kernel_size=(1, 1),
                                                                   stride=(1, 1)), label="size-1",
           expected=lambda g: g.copy()),
    Sample("avg_pool2d_grad", (normal((0, 3, 2, 2), 25),), dict(input_shape=(0, 3, 4, 5), kernel_size=(2, 2),
                                                                   stride=(2, 2)), label="empty",
           expected=lambda g: np.zeros((0, 3, 4, 5))),
    _adaptive("7x5-to-3x2", normal((2, 3, 7, 5), 12), (3, 2)),
    _adaptive("upsample-chw", normal((2, 3, 4), 13), (5, 6)),
    _adaptive("global", normal((1, 4, 3, 3), 14), (1, 1)),
]
