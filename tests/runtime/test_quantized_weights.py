"""QLoRA models compiled with quantized_weights="packed" (the NF4 bases read packed by quantized_linear kernels)
against the same models compiled without it (policy "keep": each base dequantized into a dense weight on every
call, then the GEMM), at batch 1 (the GEMV path) and at the MLP's batch of 4 (the panel path).

Both compute the same function: the dequantized float32 weights times x, plus the low-rank path. They differ only
in the order of float32 sums, so max |packed - dense| <= 2e-6 * max(1, max |dense|) (measured up to 3e-7); eager
braze is the reference for both in tests/runtime/test_models.py.
"""
from __future__ import annotations

import numpy as np
import pytest

import braze

from .test_models import MODELS, build

TOLERANCE = 2e-6


def _ops(compiled) -> set[str]:
    graph = compiled.graph
    return {n.op for n in graph.nodes} | {n.op for f in graph.nodes if f.op == "fused" for n in f.attr["body"].nodes}


@pytest.mark.parametrize("name,batch", [("mlp", "1"), ("mlp", "model"), ("encoder", "1")])
def test_packed_qlora_model_equals_dense_dequantized_model(name: str, batch: str) -> None:
    model, x, options = build(name, "qlora-keep")
    if batch == "1":
        x = x[:1]
    dense = braze.compile(model, x, threads=1, **options)
    packed = braze.compile(model, x, threads=1, quantized_weights="packed", **options)
    assert "quantized_linear" in _ops(packed) and "quantized_linear" not in _ops(dense)
    if MODELS[name][2] is None:  # only linear layers: no dense weight is computed at all
        assert "dequantize" not in _ops(packed)
    want, got = dense(x), packed(x)
    scale = max(1.0, float(np.max(np.abs(want))))
    error = float(np.max(np.abs(got - want)))
    assert error <= TOLERANCE * scale, f"max |packed - dense| = {error:.3g} at output scale {scale:.3g}"


def test_packed_option_rejects_unknown_modes() -> None:
    model, x, options = build("mlp", "qlora-keep")
    with pytest.raises(braze.BrazeError, match="quantized_weights must be one of dense, packed, got 'int4'"):
        braze.compile(model, x, quantized_weights="int4", **options)
