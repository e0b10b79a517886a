"""quantized_matmul kernels (g @ W with W read packed, the input gradient of a packed linear layer) against the
numpy reference g @ dequantize(codes, scales) within the GEMM's bound: one row of g and several (a partial micro-tile
of rows), W's columns around the tile and vector widths and primes (a partial last tile), W's rows beyond one
panel and odd (4-bit rows starting at a high nibble), K not a multiple of the block, blocks of 1 and 3, empty
dimensions (no rows of W: zeros); with an epilogue fused into the store; on the AVX2 and SSE paths forced with
BRAZE_CPU."""
from __future__ import annotations

import numpy as np
import pytest

import braze
from braze.codegen import host_target
from braze.ir.ops.reparam import SCHEMES
from tests.codegen.lowering_harness import check_node
from tests.codegen.test_lower_quant_gemm import HOST_FEATURES, X86, packed_node

# (rows of g, rows of W = g's last axis, columns of W = the result's, block size)
SHAPES = [(1, 1, 1, 64), (1, 9, 7, 64), (3, 16, 9, 16), (4, 13, 17, 64), (5, 31, 33, 1), (2, 37, 15, 3),
          (7, 300, 23, 64), (1, 257, 16, 16), (9, 64, 40, 8), (0, 5, 3, 16), (2, 0, 5, 16), (3, 4, 0, 64)]


def check_transposed(scheme: str, m: int, n: int, k: int, block: int, seed: int = 0) -> None:
    node, arrays = packed_node("quantized_matmul", scheme, m, n, k, block, seed)
    g, codes, scales = arrays
    weight = braze.ir.evaluate("dequantize", [codes, scales], {"scheme": scheme, "block_size": block,
                                                               "shape": (n, k)})[0]
    check_node(node, arrays, terms=n, scale=np.abs(g).astype(np.float64) @ np.abs(weight))


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_quantized_matmul_matches_dequantized_matmul(scheme: str, shape) -> None:
    check_transposed(scheme, *shape)


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


# Shapes no other test compiles: the harness caches kernels by node, not by target.
FORCED = {"haswell": (8, [(1, 11, 23, 16), (5, 41, 17, 8), (3, 9, 128, 64)]),
          "nehalem": (4, [(1, 13, 7, 4), (6, 64, 9, 32), (2, 5, 160, 32)])}


@pytest.mark.skipif(not X86 or "+avx2" not in HOST_FEATURES, reason="needs an AVX2 host")
@pytest.mark.parametrize("cpu", sorted(FORCED))
def test_forced_cpu_quantized_matmul_matches_reference(cpu: str, monkeypatch) -> None:
    """AVX2 (levels by permutes) and SSE (4 lanes: levels and scales gathered) forced with BRAZE_CPU."""
    monkeypatch.setenv("BRAZE_CPU", cpu)
    width, shapes = FORCED[cpu]
    assert host_target().vector_width == width
    for scheme in ("nf4", "int8"):
        for seed, shape in enumerate(shapes, start=7):
            check_transposed(scheme, *shape, seed=seed)
