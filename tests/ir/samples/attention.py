"""Samples for scaled dot-product attention: no mask, bool and float masks broadcast over batch and heads, causal
with more queries than keys, and a fully masked row (NaN, or 0 with zero_masked_rows)."""
import numpy as np

from . import Sample, normal


def _expected(q, k, v, mask=None, *, scale, causal=False, zero_masked_rows=False):
    """softmax written out in float64 from the definition, row by row."""
    s = np.einsum("...le,...se->...ls", q, k) * scale
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    if causal:
        s = np.where(np.arange(s.shape[-1]) <= np.arange(s.shape[-2])[:, None], s, -np.inf)
    with np.errstate(invalid="ignore"):
        z = np.exp(s - s.max(axis=-1, keepdims=True))
        p = z / z.sum(axis=-1, keepdims=True)
    if zero_masked_rows:
        p = np.where(np.isneginf(s).all(axis=-1, keepdims=True), 0.0, p)
    return p @ v


def _torch_sdpa(**attrs):
    def run(q, k, v, mask=None):
        import torch
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=attrs["causal"],
                                                                scale=attrs["scale"])
    return run


def _sample(args, label, grad_args=None, torch=True, **attrs):
    attrs.setdefault("causal", False)
    full = {"scale": 0.5, **attrs}
    return Sample("attention", args, full, expected=lambda *a: _expected(*a, **full), grad_args=grad_args,
                  torch=_torch_sdpa(**full) if torch else None, label=label)


_KEEP = np.array([[True, False, True, True], [False, True, True, False], [True, True, False, True]])
_EMPTY_ROW = np.array([[True, True, False, True], [False, False, False, False], [True, False, True, True]])

SAMPLES = [
    _sample((normal((2, 3, 5), 1), normal((2, 4, 5), 2), normal((2, 4, 3), 3)), "plain"),
    _sample((normal((1, 2, 3, 2), 4), normal((1, 2, 4, 2), 5), normal((1, 2, 4, 3), 6), _KEEP), "bool-mask",
            grad_args=(0, 1, 2)),
    _sample((normal((2, 2, 3, 2), 7), normal((2, 2, 4, 2), 8), normal((2, 2, 4, 1), 9), normal((2, 1, 1, 4), 10)),
            "float-mask"),
    _sample((normal((1, 5, 3), 11), normal((1, 3, 3), 12), normal((1, 3, 2), 13)), "causal-l-gt-s", causal=True),
    _sample((normal((2, 3), 14), normal((4, 3), 15), normal((4, 2), 16)), "causal-rank2", causal=True, scale=0.25),
    _sample((normal((1, 3, 2), 17), normal((1, 4, 2), 18), normal((1, 4, 2), 19), _EMPTY_ROW), "empty-row-zero",
            grad_args=(0, 1, 2), zero_masked_rows=True),
    _sample((normal((1, 3, 2), 17), normal((1, 4, 2), 18), normal((1, 4, 2), 19), _EMPTY_ROW), "empty-row-nan",
            grad_args=(), torch=False),
]
