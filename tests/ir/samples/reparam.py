"""Samples for lora_merge, dequantize, quantized_linear and quantized_matmul, checked against element-by-element
loops."""
import itertools

import numpy as np

from . import Sample, normal, rng


def naive_lora_merge(base, a, b, *, scale):
    """base[o, rest] + scale * sum_r b[o, r] * a[r, rest], one element at a time."""
    out = np.array(base, copy=True)
    for index in itertools.product(*map(range, base.shape)):
        o, rest = index[0], index[1:]
        out[index] += scale * sum(b[(o, r) + (0,) * (base.ndim - 2)] * a[(r,) + rest] for r in range(a.shape[0]))
    return out


def _lora(base_shape, rank, scale, label, seed=0):
    base = normal(base_shape, seed)
    a = normal((rank,) + base_shape[1:], seed + 1)
    b = normal((base_shape[0], rank) + (1,) * (len(base_shape) - 2), seed + 2)
    return Sample("lora_merge", (base, a, b), {"scale": scale},
                  expected=lambda x, y, z: naive_lora_merge(x, y, z, scale=scale),
                  torch=lambda x, y, z: x + scale * (z.flatten(1) @ y.flatten(1)).reshape(x.shape), label=label)


NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
       -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
       0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]


def naive_dequantize(codes, scales, *, scheme, block_size, shape):
    """Each element from its own code and scale: nibbles read one at a time (element k in byte k // 2, the low
    nibble for even k), int4 levels (k - 8) / 7, nf4 levels from the code book."""
    n = int(np.prod(shape))
    flat = np.zeros(n, dtype=np.float32)
    for k in range(n):
        if scheme == "int8":
            row = k // (n // shape[0])
            flat[k] = np.float32(codes.reshape(-1)[k]) * scales[row]
        elif scheme == "int8-tensor":
            flat[k] = np.float32(codes.reshape(-1)[k]) * scales[0]
        else:
            byte = int(codes[k // 2])
            index = byte & 15 if k % 2 == 0 else byte >> 4
            level = NF4[index] if scheme == "nf4" else (index - 8) / 7
            flat[k] = np.float32(level) * scales[k // block_size]
    return flat.reshape(shape)


def _dequantize(scheme, shape, block_size=4, label=""):
    r = rng(7)
    n = int(np.prod(shape))
    if scheme in ("int8", "int8-tensor"):
        codes = r.integers(-127, 128, shape).astype(np.int8)
        scales = r.uniform(0.01, 0.1, shape[0] if scheme == "int8" else 1).astype(np.float32)
    else:
        codes = r.integers(0, 256, (n + 1) // 2).astype(np.uint8)
        scales = r.uniform(0.5, 2.0, -(-n // block_size)).astype(np.float32)
    attrs = {"scheme": scheme, "block_size": block_size, "shape": shape}
    torch = None
    if scheme == "int8":
        torch = lambda c, s: (c.reshape(shape[0], -1).float() * s.reshape(-1, 1)).reshape(shape)  # noqa: E731
    return Sample("dequantize", (codes, scales), attrs, expected=lambda c, s: naive_dequantize(c, s, **attrs),
                  torch=torch, label=label or f"{scheme}-{'x'.join(map(str, shape))}")


def _quantized_linear(scheme, x_shape, out, block_size=4, label=""):
    """x @ W^T with W dequantized element by element (the dequantize sample's codes and scales)."""
    weight = _dequantize(scheme, (out, x_shape[-1]), block_size)
    x = normal(x_shape, 11).astype(np.float32)
    attrs = weight.attrs

    def expected(x, codes, scales):
        return np.matmul(x, naive_dequantize(codes, scales, **attrs).T)
    return Sample("quantized_linear", (x, *weight.args), attrs, expected=expected, grad_args=(0,),
                  label=label or f"{scheme}-{'x'.join(map(str, x_shape))}-{out}")


def _quantized_matmul(scheme, g_shape, in_features, block_size=4, label=""):
    """g @ W with W (out, in) dequantized element by element."""
    weight = _dequantize(scheme, (g_shape[-1], in_features), block_size)
    g = normal(g_shape, 13).astype(np.float32)
    attrs = weight.attrs

    def expected(g, codes, scales):
        return np.matmul(g, naive_dequantize(codes, scales, **attrs))
    return Sample("quantized_matmul", (g, *weight.args), attrs, expected=expected, grad_args=(0,),
                  label=label or f"{scheme}-{'x'.join(map(str, g_shape))}-{in_features}")


SAMPLES = [
    _lora((3, 4), 2, 0.5, "matrix-r2"),
    _lora((5, 3), 1, 2.0, "matrix-r1", seed=3),
    _lora((4, 6), 4, 0.25, "matrix-r4", seed=5),
    _lora((3, 2, 2, 2), 2, 1.5, "conv-r2", seed=7),
    _lora((2, 1, 3, 1), 3, 0.75, "conv-r3", seed=9),
    _dequantize("int8", (3, 4)),
    _dequantize("int8", (2, 3, 2)),
    _dequantize("int8-tensor", (4, 3)),
    _dequantize("int4", (3, 5), block_size=4),
    _dequantize("int4", (2, 4), block_size=8),
    _dequantize("nf4", (3, 5), block_size=4),
    _dequantize("nf4", (7,), block_size=3),
    _quantized_linear("int8", (2, 4), 3),
    _quantized_linear("int8-tensor", (5,), 2),
    _quantized_linear("int4", (2, 3, 5), 3, block_size=4),
    _quantized_linear("nf4", (1, 9), 5, block_size=16),
    _quantized_linear("nf4", (3, 7), 3, block_size=3),
    _quantized_matmul("int8", (2, 3), 4),
    _quantized_matmul("int8-tensor", (5,), 2),
    _quantized_matmul("int4", (2, 3, 3), 5, block_size=4),
    _quantized_matmul("nf4", (1, 5), 9, block_size=16),
    _quantized_matmul("nf4", (3, 3), 7, block_size=3),
]
