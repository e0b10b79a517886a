"""Samples for conv2d and its backward ops, checked against direct loops over output positions."""
import numpy as np

from . import Sample, normal


def _torch():
    """torch, imported only when a differential test runs a sample's torch expression."""
    import torch
    return torch


def _padded(x, padding):
    (ph, pw) = padding
    out = np.zeros(x.shape[:2] + (x.shape[2] + 2 * ph, x.shape[3] + 2 * pw))
    out[:, :, ph:ph + x.shape[2], pw:pw + x.shape[3]] = x
    return out


def _out_size(size, k, s, p, d):
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _taps(n_out, k, s, d):
    """(output index, kernel index, padded input index) for every tap along one axis."""
    return [(o, a, o * s + a * d) for o in range(n_out) for a in range(k)]


def naive_conv2d(x, w, b=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    xp = _padded(x, padding)
    co, cg, kh, kw = w.shape
    oh = _out_size(x.shape[2], kh, stride[0], padding[0], dilation[0])
    ow = _out_size(x.shape[3], kw, stride[1], padding[1], dilation[1])
    y = np.zeros((x.shape[0], co, oh, ow))
    for n in range(x.shape[0]):
        for o in range(co):
            group = o // (co // groups)
            for i, a, r in _taps(oh, kh, stride[0], dilation[0]):
                for j, c, col in _taps(ow, kw, stride[1], dilation[1]):
                    for ci in range(cg):
                        y[n, o, i, j] += xp[n, group * cg + ci, r, col] * w[o, ci, a, c]
    if b is not None:
        y += b[None, :, None, None]
    return y


def naive_grad_input(g, w, input_shape, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    co, cg, kh, kw = w.shape
    n_, c_, h, wd = input_shape
    dxp = np.zeros((n_, c_, h + 2 * padding[0], wd + 2 * padding[1]))
    for n in range(n_):
        for o in range(co):
            group = o // (co // groups)
            for i, a, r in _taps(g.shape[2], kh, stride[0], dilation[0]):
                for j, c, col in _taps(g.shape[3], kw, stride[1], dilation[1]):
                    for ci in range(cg):
                        dxp[n, group * cg + ci, r, col] += g[n, o, i, j] * w[o, ci, a, c]
    return dxp[:, :, padding[0]:padding[0] + h, padding[1]:padding[1] + wd]


def naive_grad_weight(x, g, weight_shape, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    xp = _padded(x, padding)
    co, cg, kh, kw = weight_shape
    dw = np.zeros(weight_shape)
    for n in range(x.shape[0]):
        for o in range(co):
            group = o // (co // groups)
            for i, a, r in _taps(g.shape[2], kh, stride[0], dilation[0]):
                for j, c, col in _taps(g.shape[3], kw, stride[1], dilation[1]):
                    for ci in range(cg):
                        dw[o, ci, a, c] += xp[n, group * cg + ci, r, col] * g[n, o, i, j]
    return dw


def _conv(label, x, w, b=None, **attrs):
    args = (x, w) if b is None else (x, w, b)
    return Sample("conv2d", args, attrs, label=label,
                  expected=lambda *a: naive_conv2d(*a, **attrs),
                  torch=lambda *a: _torch().nn.functional.conv2d(*a, **attrs))


_GROUPED = dict(stride=(2, 1), padding=(1, 0), dilation=(2, 1), groups=2)
_DEPTHWISE = dict(stride=(2, 2), padding=(0, 0), dilation=(1, 1), groups=3)  # leaves the last row/column unread


def _grad_input(label, g, w, input_shape, **attrs):
    def torch_grad(g, w):
        return _torch().nn.grad.conv2d_input(input_shape, w, g, **attrs)
    return Sample("conv2d_grad_input", (g, w), dict(input_shape=input_shape, **attrs), label=label,
                  expected=lambda g, w: naive_grad_input(g, w, input_shape, **attrs), torch=torch_grad)


def _grad_weight(label, x, g, weight_shape, **attrs):
    def torch_grad(x, g):
        return _torch().nn.grad.conv2d_weight(x, weight_shape, g, **attrs)
    return Sample("conv2d_grad_weight", (x, g), dict(weight_shape=weight_shape, **attrs), label=label,
                  expected=lambda x, g: naive_grad_weight(x, g, weight_shape, **attrs), torch=torch_grad)


def _grad_weight_slices(label, x, g, weight_shape, slices, **attrs):
    def naive(x, g):
        per = x.shape[0] // slices
        return np.stack([naive_grad_weight(x[s * per:(s + 1) * per], g[s * per:(s + 1) * per], weight_shape, **attrs)
                         for s in range(slices)])
    return Sample("conv2d_grad_weight_slices", (x, g), dict(weight_shape=weight_shape, slices=slices, **attrs),
                  label=label, expected=naive)


SAMPLES = [
    _conv("bias-pad1", normal((2, 3, 5, 5), 1), normal((4, 3, 3, 3), 2), normal((4,), 3), padding=(1, 1)),
    _conv("grouped-strided-dilated", normal((1, 4, 7, 6), 4), normal((6, 2, 3, 2), 5), **_GROUPED),
    _conv("depthwise-uncovered", normal((2, 3, 6, 6), 6), normal((3, 1, 3, 3), 7), normal((3,), 8), **_DEPTHWISE),
    _conv("1x1-defaults", normal((1, 5, 3, 4), 9), normal((2, 5, 1, 1), 10)),
    _grad_input("grouped", normal((1, 6, 3, 5), 11), normal((6, 2, 3, 2), 12), (1, 4, 7, 6), **_GROUPED),
    _grad_input("depthwise", normal((2, 3, 2, 2), 13), normal((3, 1, 3, 3), 14), (2, 3, 6, 6), **_DEPTHWISE),
    _grad_weight("grouped", normal((1, 4, 7, 6), 15), normal((1, 6, 3, 5), 16), (6, 2, 3, 2), **_GROUPED),
    _grad_weight("pad1", normal((2, 3, 4, 4), 17), normal((2, 2, 4, 4), 18), (2, 3, 3, 3), padding=(1, 1)),
    # 2 images of 32x32 positions: enough steps that the decomposition cuts the batch into two slices
    _grad_weight("sliced", normal((2, 1, 32, 32), 21), normal((2, 1, 32, 32), 22), (1, 1, 3, 3), padding=(1, 1)),
    _grad_weight_slices("three-slices-grouped", normal((3, 4, 7, 6), 19), normal((3, 6, 3, 5), 20), (6, 2, 3, 2), 3,
                        **_GROUPED),
]
