"""How close each lowering's results are to the op's numpy reference (braze.ir.evaluate), per op, in one table.

For a result `want` of the reference, the compiled `got` satisfies, elementwise (NaN exactly where the reference
has NaN, infinities equal),

    |got - want| <= eps * (ulps * |want| + sum_terms * sqrt(K + 1) * scale + input_abs * |x|)

with eps the dtype's machine epsilon (2^-23 for float32, 2^-52 for float64), K the number of terms the result sums
(reductions, GEMM, conv, pooling windows), `scale` that result computed on absolute values (sum of |x|, |A| @ |B|,
...; for the softmax family and layer norm the magnitudes described in the note) and x the op's input. An op not
listed is exact: data movement, indexing, comparisons, selection, casts, integer arithmetic and float arithmetic
(+, -, *, /, sqrt, max, min, relu, clamp, abs, neg, sign, batch norm at inference, dropout, dequantization) round
exactly like the reference, which computes op by op in the same dtype. The bounds for transcendental functions
include the reference's own float32 rounding (numpy's SIMD exp/log/tanh/pow are not correctly rounded, and the
composite references of sigmoid, silu and gelu round after every step); tests/codegen/test_lower_*.py assert them.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Accuracy:
    """The error bound of one op (see the module docstring); all zero means bit-exact."""

    ulps: float = 0.0
    sum_terms: float = 0.0
    input_abs: float = 0.0
    note: str = "exact"

    @property
    def exact(self) -> bool:
        return not (self.ulps or self.sum_terms or self.input_abs)


_SUM = "sums of K terms: 8 sqrt(K+1) eps times the sum of the terms' magnitudes"
ACCURACY: dict[str, Accuracy] = {
    "exp": Accuracy(ulps=4, note="vecmath exp (1 ulp in either dtype) against numpy's SIMD expf; 2.1 seen"),
    "log": Accuracy(ulps=4, note="vecmath log (1 ulp in either dtype) against numpy's SIMD logf; 2.1 seen"),
    "tanh": Accuracy(ulps=4, note="vecmath tanh (2 ulp in either dtype) against numpy's SIMD tanhf"),
    "erf": Accuracy(ulps=2, note="vecmath erf (1.5 ulp in either dtype) against a correctly rounded reference; "
                                 "1.0 seen"),
    "sigmoid": Accuracy(ulps=4, note="vecmath sigmoid (2.5 ulp) against a reference rounding after each step"),
    "silu": Accuracy(ulps=6, input_abs=1, note="vecmath silu (3.5 ulp); subnormal results for x < -87"),
    "gelu": Accuracy(ulps=8, input_abs=1, note="vecmath gelu (3 ulp); the reference's 1 + tanh/erf cancels for "
                                               "x < -1, an absolute error below eps |x| / 4"),
    "sin": Accuracy(ulps=4, note="vecmath sin (2 ulp in float32, 1 in float64) against numpy's SIMD sin"),
    "cos": Accuracy(ulps=4, note="vecmath cos (2 ulp in float32, 1 in float64) against numpy's SIMD cos"),
    "log1p": Accuracy(ulps=4, note="vecmath log1p (2.5 ulp in either dtype)"),
    "expm1": Accuracy(ulps=4, note="vecmath expm1 (2 ulp in either dtype)"),
    "atan2": Accuracy(ulps=4, note="vecmath atan2 (2.5 ulp; 1.42 seen) in float32, libm atan2 per lane in float64, "
                                   "against float64's rounded once"),
    "pow": Accuracy(ulps=4, note="float32 in float64 vectors (under 1 ulp: codegen/vecmath_pow.py) against "
                                 "numpy's SIMD powf, float64 libm pow per lane; a constant exponent 0, +-1, +-2, 3, "
                                 "4 or +-0.5 as multiplies, a division or a square root (2 ulp at most)"),
    "sum": Accuracy(sum_terms=8, note=_SUM),
    "mean": Accuracy(ulps=1, sum_terms=8, note=_SUM + ", then one division"),
    "softmax": Accuracy(ulps=8, sum_terms=8, note="exp (1 ulp) of x - max, divided by a sum of K terms in (0, 1]: "
                                                   "scale = the result"),
    "log_softmax": Accuracy(ulps=4, sum_terms=8, note="(x - max) - log(sum): scale = |x - max| + |log sum| + 1"),
    "layer_norm": Accuracy(ulps=8, sum_terms=16, note="mean and variance are sums of K terms: scale = "
                                                      "(|x - mean| / std + mean |x| / std + 1) |weight| + |bias|"),
    "attention": Accuracy(ulps=8, sum_terms=16, note="scores are sums of E terms, the softmax's sum and the "
                          "weighted sum of v are sums of S terms, accumulated block by block: scale = the op on |q|, "
                          "|k|, |v|"),
    "matmul": Accuracy(sum_terms=8, note=_SUM + " (|A| @ |B|)"),
    "linear": Accuracy(sum_terms=8, note=_SUM + " (|x| @ |W|^T)"),
    "quantized_linear": Accuracy(sum_terms=8, note=_SUM + " (|x| @ |W|^T, W dequantized; int8 scales applied to "
                                                         "the sum)"),
    "quantized_matmul": Accuracy(sum_terms=8, note=_SUM + " (|g| @ |W|, W dequantized)"),
    "conv2d": Accuracy(sum_terms=8, note=_SUM + " (the conv of |x| with |w|, plus |bias|)"),
    "conv2d_grad_input": Accuracy(sum_terms=8, note=_SUM + " (the op on |g| and |w|)"),
    "conv2d_grad_weight": Accuracy(sum_terms=8, note=_SUM + " (the op on |x| and |g|)"),
    "conv2d_grad_weight_slices": Accuracy(sum_terms=8, note=_SUM + " (the op on |x| and |g|)"),
    "lora_merge": Accuracy(ulps=2, sum_terms=8, note="base + scale (b @ a), a sum of r terms: scale = "
                                                     "|base| + |scale| (|b| @ |a|)"),
    "avg_pool2d": Accuracy(ulps=2, sum_terms=8, note="a window sum, then a division: scale = avg_pool2d(|x|)"),
    "max_pool2d_grad": Accuracy(sum_terms=8, note="the gradients of the windows sharing a maximum summed in the "
                                "result dtype, where the reference sums in float64: scale = the op on |g|"),
    "avg_pool2d_grad": Accuracy(ulps=2, sum_terms=8, note="each input gradient a sum of overlapping windows' "
                                "g / divisor, in another order than the reference's: scale = the op on |g|"),
    "adaptive_avg_pool2d": Accuracy(ulps=2, sum_terms=8, note="a bin sum, then a division: scale = the op on |x|. "
                                    "A NaN or infinity only reaches the bins holding it, as in torch; the reference's "
                                    "averaging matmuls spread it over the plane (0 * NaN)"),
}

__all__ = ["ACCURACY", "Accuracy"]
