"""quantized_matmul kernels (g @ W with W read packed, the input gradient of a packed linear layer) against the
numpy reference g @ dequantize(codes, scales) within the GEMM's bound: one row of g and several (a partial micro-tile
of rows), W's columns around the tile and vector widths and primes (a partial last tile), W's rows beyond one
panel and odd (4-bit rows starting at a high nibble), K not a multiple of the block, blocks of 1 and 3, empty
dimensions (no rows of W: zeros); with an epilogue fused into the store. The AVX2 and SSE paths forced with
BRAZE_CPU are tested beside quantized_linear's (test_lower_quant_gemm.py)."""
from __future__ import annotations

import numpy as np
import pytest

import braze
from braze.ir.ops.reparam import SCHEMES
from tests.codegen.test_lower_quant_gemm import check_packed, packed_node

# (rows of g, rows of W = g's last axis, columns of W = the result's, block size)
SHAPES = [(1, 1, 1, 64), (1, 9, 7, 64), (3, 16, 9, 16), (4, 13, 17, 64), (5, 31, 33, 1), (2, 37, 15, 3),
          (7, 300, 23, 64), (1, 257, 16, 16), (9, 64, 40, 8), (0, 5, 3, 16), (2, 0, 5, 16), (3, 4, 0, 64)]


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_quantized_matmul_matches_dequantized_matmul(scheme: str, shape) -> None:
    check_packed("quantized_matmul", scheme, *shape)


def test_quantized_matmul_region_fuses_a_masked_epilogue() -> None:
    """The input gradient of a packed layer before a ReLU (where(mask, g @ W, 0)) is one region anchored by
    quantized_matmul; compiled, it equals the reference interpreter."""
    b = braze.ir.GraphBuilder("grad")
    node, (g, codes, scales) = packed_node("quantized_matmul", "nf4", 3, 11, 21, 16, seed=5)
    inputs = [b.input(name, v.type) for name, v in zip(("g", "codes", "scales"), node.inputs)]
    mask = b.input("keep", braze.ir.TensorType((3, 21), braze.ir.types.bool_))
    dx = b.quantized_matmul(*inputs, **node.attr)
    graph = b.finish([b.where(mask, dx, b.scalar(0.0, dx))])
    keep = np.random.default_rng(2).random((3, 21)) < 0.5
    compiled = braze.compile(graph)
    fused = [n for n in compiled.graph.nodes if n.op == "fused"]
    assert [n.attr["body"].nodes[0].op for n in fused] == ["quantized_matmul"]
    want = braze.ir.interpret(graph, [g, codes, scales, keep])[0]
    np.testing.assert_allclose(compiled(g, codes, scales, keep), want, rtol=1e-5, atol=1e-5)
