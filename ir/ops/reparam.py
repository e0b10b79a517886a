"""Reparameterization ops: the LoRA weight composition and the dequantization of packed weights.

lora_merge(base, a, b){scale} = base + scale * delta, where delta = (b @ a) for a matrix base (out, in) with
factors a (r, in) and b (out, r), PEFT's lora_A and lora_B weights. A base of rank k > 2 (a convolution kernel
(out, in/groups, kh, kw)) takes a (r,) + base.shape[1:] and b (out, r, 1, ..., 1), PEFT's Conv2d factors, and
delta = (b.reshape(out, r) @ a.reshape(r, -1)).reshape(base.shape).

dequantize(codes, scales){scheme, block_size, shape} -> float32 of `shape`:
- "int8": symmetric per output channel: int8 codes of `shape`, float32 scales (shape[0],), value = code * scale
  (scale = max|row| / 127 when quantizing);
- "int8-tensor": the same with one scale, scales (1,);
- "int4" and "nf4": the row-major flattened weight in blocks of block_size consecutive values, each with its
  absolute maximum as float32 scale (ceil(n / block_size),); uint8 codes hold two 4-bit indices per byte, low
  nibble first ((ceil(n / 2),) bytes), and value = LEVELS[index] * absmax. NF4's levels are the 16-value
  NormalFloat code book of QLoRA as bitsandbytes defines it; int4's are the symmetric grid k / 7, k = -7..7
  (index k + 8; index 0, -8/7, is never produced by quantization).
Dequantization is not differentiable: quantized bases are frozen.

quantized_linear(x, codes, scales){scheme, block_size, shape} = x @ dequantize(codes, scales)^T for a weight of
shape (out, in): linear with the weight kept packed, so the kernel reading it dequantizes inside its loop and no
dense copy exists (fold_reparameterizations forms it under quantized_weights="packed"; the gradient reaches x
only). quantized_matmul(g, codes, scales){same} = g @ dequantize(codes, scales), the product with the packed
weight untransposed: g (..., out) to (..., in), the input gradient of quantized_linear; each op's VJP is the
other, so no gradient of a packed layer reads a dense weight.
"""
from __future__ import annotations

import math

import numpy as np

from ..attrs import AttrSpec
from ..errors import DTypeError, ShapeError
from ..registry import defop
from ..row_rules import linear_rows
from ..types import TensorType, float32, int8, uint8
from ._common import require_float, same_dtype, shapes_text

# bitsandbytes' NF4 code book (functional.get_4bit_type("nf4")): quantiles of N(0, 1) scaled to [-1, 1], with an
# exact zero; index i holds NF4[i].
NF4 = (-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
       -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
       0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0)
INT4 = tuple((k - 8) / 7 for k in range(16))
LEVELS = {"int4": INT4, "nf4": NF4}
SCHEMES = ("int8", "int8-tensor", "int4", "nf4")


# --- lora_merge -------------------------------------------------------------------------------------------------
def _lora_infer(base: TensorType, a: TensorType, b: TensorType, scale: float) -> TensorType:
    dtype = same_dtype("lora_merge", base, a, b)
    require_float("lora_merge", base)
    if base.rank < 2 or a.rank != base.rank or b.rank != base.rank:
        raise ShapeError(f"lora_merge: base, a and b must share a rank of at least 2, got {shapes_text(base, a, b)}")
    rank = a.shape[0]
    if a.shape[1:] != base.shape[1:] or b.shape != (base.shape[0], rank) + (1,) * (base.rank - 2):
        want_b = (base.shape[0], rank) + (1,) * (base.rank - 2)
        raise ShapeError(f"lora_merge: for base {base} the factors must be a {(rank,) + base.shape[1:]} and b {want_b} "
                         f"(rank {rank}), got {shapes_text(a, b)}")
    return TensorType(base.shape, dtype)


def _lora_delta(a: np.ndarray, b: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray:
    rank = a.shape[0]
    # No -1 in the reshape: numpy cannot infer it for a rank-0 factor of no elements.
    return (b.reshape(b.shape[0], rank) @ a.reshape(rank, math.prod(a.shape[1:]))).reshape(out_shape)


def _lora_impl(base: np.ndarray, a: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    return base + base.dtype.type(scale) * _lora_delta(a, b, base.shape)


def _lora_vjp(e, g, out, base, a, b, scale):
    """d/d base = g; with g2 = g as (out, -1): d/d a = scale * b2^T @ g2, d/d b = scale * g2 @ a2^T."""
    rank, rows = a.shape[0], base.shape[0]
    g2 = e.reshape(g, shape=(rows, int(np.prod(base.shape[1:]))))
    a2 = e.reshape(a, shape=(rank, int(np.prod(a.shape[1:]))))
    b2 = e.reshape(b, shape=(rows, rank))
    ga = e.mul(e.matmul(e.transpose(b2, perm=(1, 0)), g2), scale)
    gb = e.mul(e.matmul(g2, e.transpose(a2, perm=(1, 0))), scale)
    return g, e.reshape(ga, shape=tuple(a.shape)), e.reshape(gb, shape=tuple(b.shape))


lora_merge = defop("lora_merge", ("base", "a", "b"), infer=_lora_infer, impl=_lora_impl, vjp=_lora_vjp,
                   attrs=(AttrSpec("scale", "float"),), category="other",
                   doc="base + scale * (b @ a): a LoRA-adapted weight (PEFT's factor shapes; conv kernels flattened).")


# --- dequantize -------------------------------------------------------------------------------------------------
def packed_types(scheme: str, block_size: int, shape: tuple[int, ...]) -> tuple[TensorType, TensorType]:
    """The types of the codes and scales that hold a weight of `shape` quantized with `scheme`."""
    n = math.prod(shape)
    if scheme == "int8":
        return TensorType(shape, int8), TensorType(shape[:1], float32)
    if scheme == "int8-tensor":
        return TensorType(shape, int8), TensorType((1,), float32)
    return TensorType(((n + 1) // 2,), uint8), TensorType((-(-n // block_size),), float32)


def _dequantize_infer(codes: TensorType, scales: TensorType, scheme: str, block_size: int,
                      shape: tuple[int, ...]) -> TensorType:
    if block_size <= 0:
        raise ShapeError(f"dequantize: block_size must be positive, got {block_size}")
    if scheme == "int8" and len(shape) == 0:
        raise ShapeError("dequantize: the per-channel int8 scheme needs a weight of rank >= 1, got shape ()")
    want_codes, want_scales = packed_types(scheme, block_size, shape)
    if codes.dtype != want_codes.dtype or scales.dtype != want_scales.dtype:
        raise DTypeError(f"dequantize: scheme {scheme!r} stores {want_codes.dtype} codes and {want_scales.dtype} "
                         f"scales, got {shapes_text(codes, scales)}")
    if codes.shape != want_codes.shape or scales.shape != want_scales.shape:
        raise ShapeError(f"dequantize: scheme {scheme!r} (block_size {block_size}) of a weight of shape {shape} "
                         f"stores codes {want_codes} and scales {want_scales}, got {shapes_text(codes, scales)}")
    return TensorType(tuple(shape), float32)


def unpack_nibbles(codes: np.ndarray, count: int) -> np.ndarray:
    """The `count` 4-bit indices held two per byte, low nibble first."""
    pairs = np.stack([codes & 0x0F, codes >> 4], axis=-1).reshape(-1)
    return pairs[:count]


def _dequantize_impl(codes: np.ndarray, scales: np.ndarray, scheme: str, block_size: int,
                     shape: tuple[int, ...]) -> np.ndarray:
    if scheme == "int8":
        rows = shape[0]
        return (codes.reshape(rows, math.prod(shape[1:])).astype(np.float32) * scales.reshape(rows, 1)).reshape(shape)
    if scheme == "int8-tensor":
        return codes.astype(np.float32) * scales[0]
    n = int(np.prod(shape, dtype=np.int64))
    levels = np.asarray(LEVELS[scheme], dtype=np.float32)
    per_element = scales[np.arange(n) // block_size]  # not np.repeat: block_size may far exceed n
    return (levels[unpack_nibbles(codes, n)] * per_element).reshape(shape)


dequantize = defop("dequantize", ("codes", "scales"), infer=_dequantize_infer, impl=_dequantize_impl, vjp=None,
                   attrs=(AttrSpec("scheme", "str", choices=SCHEMES), AttrSpec("block_size", "int", 64),
                          AttrSpec("shape", "shape")), category="other",
                   doc="The float32 value of a quantized weight: codes times their channel, tensor or block scale.")


# --- quantized_linear -------------------------------------------------------------------------------------------
def _packed_product_type(op: str, x: TensorType, codes: TensorType, scales: TensorType, scheme: str,
                         block_size: int, shape: tuple[int, ...], transposed: bool) -> TensorType:
    """The type of x times the packed (out, in) matrix: x @ W^T (transposed) contracts in_features, x @ W
    out_features."""
    if len(shape) != 2:
        raise ShapeError(f"{op}: the weight must be a matrix (out_features, in_features), got shape {shape}")
    weight = _dequantize_infer(codes, scales, scheme, block_size, shape)
    name = "x" if transposed else "g"
    if x.dtype != float32:
        raise DTypeError(f"{op}: {name} must be float32 (the dtype of the dequantized weight), got {x}")
    (inner, inner_name), outer = ((shape[1], "in_features"), shape[0]) if transposed else \
        ((shape[0], "out_features"), shape[1])
    if x.rank == 0 or x.shape[-1] != inner:
        raise ShapeError(f"{op}: {name} must have rank >= 1 and {inner} ({inner_name}) as its last axis, got {x}")
    return TensorType(x.shape[:-1] + (outer,), weight.dtype)


def _quantized_linear_infer(x: TensorType, codes: TensorType, scales: TensorType, scheme: str, block_size: int,
                            shape: tuple[int, ...]) -> TensorType:
    return _packed_product_type("quantized_linear", x, codes, scales, scheme, block_size, shape, True)


def _quantized_linear_impl(x: np.ndarray, codes: np.ndarray, scales: np.ndarray, scheme: str, block_size: int,
                           shape: tuple[int, ...]) -> np.ndarray:
    return np.matmul(x, _dequantize_impl(codes, scales, scheme, block_size, shape).T)


def _quantized_linear_vjp(e, g, out, x, codes, scales, scheme, block_size, shape):
    """dx = g @ W, read packed; the codes and scales of a frozen base get no gradient."""
    return e.quantized_matmul(g, codes, scales, scheme=scheme, block_size=block_size, shape=shape), None, None


def _quantized_work(node) -> int:
    return node.out.type.size * node.inputs[0].shape[-1]


# What the two packed products share: dequantize's attributes, a GEMM region's anchor, the multiply-adds as work,
# and a VJP reading only the codes and scales.
_PACKED = dict(attrs=dequantize.attrs, category="matmul", anchor="gemm", work=_quantized_work, vjp_reads=(1, 2),
               rows=linear_rows)

quantized_linear = defop(
    "quantized_linear", ("x", "codes", "scales"), infer=_quantized_linear_infer, impl=_quantized_linear_impl,
    vjp=_quantized_linear_vjp, **_PACKED,
    doc="linear(x, dequantize(codes, scales)): x @ W^T with W (out, in) kept packed, dequantized by the kernel "
        "that reads it (the quantized_weights='packed' option of the inference pipeline).")


# --- quantized_matmul -------------------------------------------------------------------------------------------
def _quantized_matmul_infer(g: TensorType, codes: TensorType, scales: TensorType, scheme: str, block_size: int,
                            shape: tuple[int, ...]) -> TensorType:
    return _packed_product_type("quantized_matmul", g, codes, scales, scheme, block_size, shape, False)


def _quantized_matmul_impl(g: np.ndarray, codes: np.ndarray, scales: np.ndarray, scheme: str, block_size: int,
                           shape: tuple[int, ...]) -> np.ndarray:
    return np.matmul(g, _dequantize_impl(codes, scales, scheme, block_size, shape))


def _quantized_matmul_vjp(e, h, out, g, codes, scales, scheme, block_size, shape):
    """d/dg = h @ W^T: quantized_linear of the same packed weight."""
    return e.quantized_linear(h, codes, scales, scheme=scheme, block_size=block_size, shape=shape), None, None


quantized_matmul = defop(
    "quantized_matmul", ("g", "codes", "scales"), infer=_quantized_matmul_infer, impl=_quantized_matmul_impl,
    vjp=_quantized_matmul_vjp, **_PACKED,
    doc="matmul(g, dequantize(codes, scales)): g @ W with W (out, in) kept packed, the input gradient of "
        "quantized_linear, dequantized by the kernel that reads it.")
