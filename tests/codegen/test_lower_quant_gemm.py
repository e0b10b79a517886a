"""quantized_linear kernels against the numpy reference (x @ dequantize(codes, scales)^T) within the GEMM's bound,
on edge shapes: one row of x (the GEMV path) and several (streamed like one for int8, whose rows end in a masked
vector, and where 4-bit blocks are whole vectors, up to 64 rows of x or rows of W of 2048 and more: whole tiles of
rows of x and a last partial one, K in chunks, x permuted for plane decodes up to a size; else the tiled path:
K beyond one panel, partial micro-tiles and last tiles), N and K around the vector width, primes, K not a multiple
of the block, blocks of 1 and 3, blocks of 32s (AVX2 decodes those by byte shuffles, AVX-512 as even and odd planes
where rows are whole blocks), empty dimensions (K = 0: zeros, for every row of x); with an epilogue fused into the
store; on the AVX2 and SSE paths forced with BRAZE_CPU (quantized_matmul's too), and in AVX-512 assembly."""
from __future__ import annotations

import re

import llvmlite.binding as llvm
import numpy as np
import pytest

import braze
from braze.codegen import compile_ir, host_target
from braze.codegen.lower import KernelContext, lower_node
from braze.frontend.nn.quant import Quantizer
from braze.ir.ops.reparam import SCHEMES, packed_types
from tests.codegen.lowering_harness import check_node, make_node

X86 = llvm.get_process_triple().startswith("x86_64")
HOST_FEATURES = set(llvm.get_host_cpu_features().flatten().split(","))

# (rows of x, N, K, block size)
SHAPES = [(1, 1, 1, 64), (1, 7, 9, 64), (1, 9, 16, 16), (1, 13, 64, 64), (1, 6, 96, 32), (1, 5, 17, 3),
          (1, 6, 37, 16), (3, 7, 31, 1), (2, 17, 600, 64), (4, 9, 520, 8), (6, 19, 45, 16), (1, 4, 0, 64),
          (0, 3, 5, 16), (2, 0, 5, 16), (3, 2, 0, 8), (1, 3, 32, 32), (1, 5, 288, 96), (1, 6, 96, 64),
          (1, 5, 384, 128), (2, 6, 96, 32), (8, 3, 32, 32), (9, 5, 64, 64), (17, 7, 128, 32), (12, 9, 192, 64),
          (0, 3, 64, 64), (5, 7, 64, 16), (9, 3, 32768, 64), (12, 6, 3000, 64), (24, 5, 2051, 64),
          (10, 3, 2048, 64), (65, 5, 128, 64), (66, 3, 2048, 64)]


def packed_node(op: str, scheme: str, m: int, n: int, k: int, block: int, seed: int = 0):
    """A quantized_linear (x of m rows of k) or quantized_matmul (g of m rows of n) node on a random packed (n, k)
    weight, and its operands."""
    rng = np.random.default_rng(seed)
    codes_type, scales_type = packed_types(scheme, block, (n, k))
    codes = rng.integers(0, 256, codes_type.shape).astype(np.uint8) if codes_type.dtype.name == "u8" else \
        rng.integers(-127, 128, codes_type.shape).astype(np.int8)
    scales = rng.uniform(0.01, 1.0, scales_type.shape).astype(np.float32)
    x = rng.standard_normal((m, k if op == "quantized_linear" else n)).astype(np.float32)
    node = make_node(op, x, codes, scales, scheme=scheme, block_size=block, shape=(n, k))
    return node, [x, codes, scales]


def _node(scheme: str, m: int, n: int, k: int, block: int, seed: int = 0):
    return packed_node("quantized_linear", scheme, m, n, k, block, seed)


def check_packed(op: str, scheme: str, m: int, n: int, k: int, block: int, seed: int = 0) -> None:
    """packed_node's kernel against the reference within the GEMM's bound (terms: the contracted axis)."""
    node, arrays = packed_node(op, scheme, m, n, k, block, seed)
    x, codes, scales = arrays
    weight = braze.ir.evaluate("dequantize", [codes, scales], {"scheme": scheme, "block_size": block,
                                                               "shape": (n, k)})[0]
    linear = op == "quantized_linear"
    check_node(node, arrays, terms=k if linear else n,
               scale=np.abs(x).astype(np.float64) @ (np.abs(weight).T if linear else np.abs(weight)))


def check_quantized(scheme: str, m: int, n: int, k: int, block: int, seed: int = 0) -> None:
    check_packed("quantized_linear", scheme, m, n, k, block, seed)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("shape", SHAPES, ids=["x".join(map(str, s)) for s in SHAPES])
def test_quantized_linear_matches_dequantized_matmul(scheme: str, shape) -> None:
    check_quantized(scheme, *shape)


def test_quantized_linear_region_fuses_bias_and_activation() -> None:
    model = braze.nn.Sequential(braze.nn.Linear(19, 13), braze.nn.GELU(), braze.nn.Linear(13, 5)).eval()
    model.quantize_weights(Quantizer("nf4", 16))
    x = np.random.default_rng(1).standard_normal((3, 19)).astype(np.float32)
    compiled = braze.compile(model, x, quantized_weights="packed")
    fused = [n for n in compiled.graph.nodes if n.op == "fused"]
    assert [n.attr["body"].nodes[0].op for n in fused] == ["quantized_linear", "quantized_linear"]
    want = braze.ir.interpret(compiled.graph, [x])[0]
    np.testing.assert_allclose(compiled(x), want, rtol=1e-5, atol=1e-5)


# Shapes no other test compiles: the harness caches kernels by node, not by target. quantized_matmul's (rows of
# g, n, k, block): partial micro-tiles and last tiles, odd n (4-bit rows from a high nibble).
WIDTHS = {"haswell": 8, "nehalem": 4}
FORCED = {("quantized_linear", "haswell"): [(1, 11, 23, 16), (2, 5, 41, 8), (1, 8, 8, 8), (1, 9, 128, 64),
                                           (1, 5, 288, 96), (5, 9, 128, 64), (10, 6, 64, 32), (1, 6, 96, 64),
                                           (1, 4, 160, 64), (2, 6, 128, 64), (9, 5, 2048, 64)],
          ("quantized_linear", "nehalem"): [(1, 7, 13, 4), (2, 5, 64, 32), (1, 9, 160, 32)],
          ("quantized_matmul", "haswell"): [(1, 11, 23, 16), (5, 41, 17, 8), (3, 9, 128, 64)],
          ("quantized_matmul", "nehalem"): [(1, 13, 7, 4), (6, 64, 9, 32), (2, 5, 160, 32)]}


@pytest.mark.skipif(not X86 or "+avx2" not in HOST_FEATURES, reason="needs an AVX2 host")
@pytest.mark.parametrize("op, cpu", sorted(FORCED))
def test_forced_cpu_packed_products_match_reference(op: str, cpu: str, monkeypatch) -> None:
    """AVX2 (permutes, byte planes: a 64 of a row of 96 or 160 crosses a block's end) and SSE (4 lanes: levels and
    scales gathered) forced with BRAZE_CPU."""
    monkeypatch.setenv("BRAZE_CPU", cpu)
    assert host_target().vector_width == WIDTHS[cpu]
    for scheme in ("nf4", "int8"):
        for seed, shape in enumerate(FORCED[op, cpu], start=7):
            check_packed(op, scheme, *shape, seed=seed)


def _asm(cpu: str, scheme: str) -> str:
    target = host_target(cpu=cpu)
    node, _ = _node(scheme, 1, 8, 64, 64)
    module = target.new_module(f"t_quant_{cpu}_{scheme}")
    spec = lower_node(node, KernelContext(module, target, f"k_quant_{cpu}_{scheme}"))
    spec.function.linkage = "external"  # kernels are internal; exported here so the object keeps it
    return compile_ir(module, target=target, use_cache=False).asm()


@pytest.mark.skipif(not X86, reason="x86-64 instruction sets")
@pytest.mark.parametrize("cpu,register,lookup", [("haswell", "ymm", "vpshufb"),
                                                 ("skylake-avx512", "zmm", r"vperm[dp]s?")])
def test_nf4_levels_are_looked_up_by_shuffles_without_gathers(cpu: str, register: str, lookup: str) -> None:
    """AVX2 looks the levels up a byte plane at a time (vpshufb), AVX-512 by one permute of the 16 levels."""
    asm = _asm(cpu, "nf4")
    assert re.search(rf"{lookup}\s+[^\n]*%{register}", asm)
    assert re.search(rf"vfmadd\d+ps\s+[^\n]*%{register}", asm)
    assert "gather" not in asm


class _Residual(braze.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = braze.nn.Linear(10, 6, bias=False)

    def forward(self, x, r):
        return braze.relu(self.fc(x) + r)


def test_quantized_linear_region_with_a_row_broadcast_operand_runs_op_by_op() -> None:
    """An epilogue operand (2, 1, N) over y (2, 3, N) is not linear in the flattened row of x: the region is lowered
    op by op, still equal to the reference."""
    model = _Residual().eval()
    model.quantize_weights(Quantizer("int4", 8))
    x = np.random.default_rng(3).standard_normal((2, 3, 10)).astype(np.float32)
    r = np.random.default_rng(4).standard_normal((2, 1, 6)).astype(np.float32)
    compiled = braze.compile(model, x, r, quantized_weights="packed")
    (region,) = [n for n in compiled.graph.nodes if n.op == "fused"]
    assert region.attr["body"].nodes[0].op == "quantized_linear"
    assert ".op0(" in compiled.llvm_ir()  # the body's first node as a kernel of its own
    want = braze.ir.interpret(compiled.graph, [x, r])[0]
    np.testing.assert_allclose(compiled(x, r), want, rtol=1e-5, atol=1e-5)
