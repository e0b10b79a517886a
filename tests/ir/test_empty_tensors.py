"""Ops whose operands hold no elements evaluate to empty results (found by the IR fuzzer: reshapes to -1 of an
empty array raised numpy's ValueError)."""
from __future__ import annotations

import numpy as np

from braze.ir.evaluate import evaluate


def test_lora_merge_of_rank_zero_factors_is_the_base() -> None:
    base = np.ones((3, 0, 0, 0))
    out, = evaluate("lora_merge", [base, np.zeros((0, 0, 0, 0)), np.zeros((3, 0, 1, 1))], {"scale": 1.5})
    assert out.shape == (3, 0, 0, 0)


def test_lora_merge_of_rank_zero_matrix_factors_is_the_base() -> None:
    base = np.arange(6.0).reshape(3, 2)
    out, = evaluate("lora_merge", [base, np.zeros((0, 2)), np.zeros((3, 0))], {"scale": 2.0})
    np.testing.assert_array_equal(out, base)


def test_grouped_conv2d_without_output_channels_is_empty() -> None:
    out, = evaluate("conv2d", [np.ones((1, 4, 5, 5)), np.ones((0, 2, 3, 3))], {"groups": 2})
    assert out.shape == (1, 0, 3, 3)


def test_int8_dequantize_of_no_rows_is_empty() -> None:
    out, = evaluate("dequantize", [np.zeros((0, 4), np.int8), np.zeros((0,), np.float32)],
                    {"scheme": "int8", "shape": (0, 4)})
    assert out.shape == (0, 4) and out.dtype == np.float32
