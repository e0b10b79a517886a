"""Costly GEMM epilogues applied out of line (codegen/gemm_epilogue.py): which ones are, and that the result is
the inline epilogue's, bit for bit, on edge tiles, K blocks and thread splits (but for a last column vector of
fewer lanes, see same_as_inline).

Tolerance against numpy: C = erf(A @ B + bias) + R; erf's slope is at most 2/sqrt(pi) < 1.13, so an element may
differ from the float64 result by 1.13 times the dot product's bound (native.dot_tolerance) plus erf's own 1.5 ulp
and the residual sum's rounding (4 * 2^-24 * (1 + |R|)).
"""
from __future__ import annotations

import math

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np
import pytest

from braze.codegen import gemm_epilogue, host_target, vecmath
from braze.codegen.gemm import (GemmSpec, bias_cols, chain, emit_gemm, gemm_plan, relu, residual, scale,
                                tiling_for)
from braze.codegen.gemm_kernel import default_pos
from tests.codegen.native import assert_close, dot_tolerance
from tests.codegen.test_gemm import HOST, RNG, WIDTHS, count_writes, run

HOST_FEATURES = set(llvm.get_host_cpu_features().flatten().split(","))


def erf(builder: ir.IRBuilder, acc: ir.Value, pos) -> ir.Value:
    """erf of every accumulator: a vector-math call, as a GELU epilogue makes."""
    return vecmath.call(builder, "erf", acc)


def _out_of_line(spec: GemmSpec, tiling, epilogue, n_extra: int) -> bool:
    module = ir.Module("probe")
    emit_gemm(module, "probe", spec, tiling, epilogue, n_extra)
    return "probe.epilogue" in module.globals


@pytest.mark.parametrize("epilogue,expected", [(relu, False), (bias_cols(0), False), (scale(2.0), False),
                                               (chain(bias_cols(0), relu, residual(1, 16)), False), (erf, True),
                                               (chain(bias_cols(0), erf, residual(1, 16)), True)],
                         ids=["relu", "bias", "scale", "bias-relu-residual", "erf", "bias-erf-residual"])
def test_costly_epilogues_are_the_vector_math_ones(epilogue, expected) -> None:
    assert gemm_epilogue.costly(epilogue, HOST.width, 2, default_pos) is expected
    assert _out_of_line(GemmSpec.contiguous(13, 40, 9), HOST, epilogue, 2) is expected


def _erf_operands(m: int, n: int, k: int) -> tuple[np.ndarray, ...]:
    a = RNG.standard_normal((m, k)).astype(np.float32) / max(1.0, math.sqrt(k))
    b = RNG.standard_normal((k, n)).astype(np.float32)
    return a, b, RNG.standard_normal(n).astype(np.float32), RNG.standard_normal((m, n)).astype(np.float32)


def _erf_case(operands: tuple[np.ndarray, ...], tiling, nthreads: int, tag: str) -> np.ndarray:
    """C = erf(A @ B + bias) + R computed by the kernel, checked against the float64 numpy result."""
    a, b, bias, res = operands
    (m, k), n = a.shape, b.shape[1]
    epilogue = chain(bias_cols(0), erf, residual(1, n))
    c = run(GemmSpec.contiguous(m, n, k), a.ravel(), b.ravel(), tiling=tiling, epilogue=epilogue, tag=tag,
            extras=(bias, res.ravel()), nthreads=nthreads).reshape(m, n)
    x = a.astype(np.float64) @ b.astype(np.float64) + bias
    want = np.vectorize(math.erf)(x) + res
    scale_ = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) + np.abs(bias)
    tol = 1.13 * dot_tolerance(k, scale_) + 4 * 2.0 ** -24 * (1 + np.abs(res))
    assert_close(c, want, tol, f"{m}x{n}x{k} W={tiling.width} {tag}")
    return c


def same_as_inline(out_of_line: np.ndarray, inline: np.ndarray, width: int) -> None:
    """Bit for bit on the whole column vectors. A last vector of fewer lanes may differ in the last bit: inlined into
    the micro-kernel of a one-lane edge tile, the epilogue's vector math is scalarized by LLVM, which then multiplies
    and adds where the vector code fuses (both are checked against numpy by _erf_case)."""
    whole = out_of_line.shape[1] // width * width
    np.testing.assert_array_equal(out_of_line[:, :whole], inline[:, :whole])


# Tilings with explicit FMA calls: their arithmetic is fixed by the IR. A tiling without (4 lanes: a multiply and
# an add marked `contract`) leaves to LLVM where it fuses them on an FMA host, which depends on the code around, so
# there the two versions may differ in the last bit; _erf_case checks both against numpy.
FMA_WIDTHS = [w for w in WIDTHS if tiling_for(w).fma]


@pytest.mark.parametrize("width", FMA_WIDTHS)
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 9, 1), (13, 17, 31), (6, 16, 0)])
def test_out_of_line_epilogue_matches_inline_bitwise(width, m, n, k, monkeypatch) -> None:
    tiling, operands = tiling_for(width), _erf_operands(m, n, k)
    out_of_line = _erf_case(operands, tiling, 1, "out-of-line")
    monkeypatch.setattr(gemm_epilogue, "INLINE_INSTRUCTIONS", 10 ** 9)
    inline = _erf_case(operands, tiling, 1, "inline")
    same_as_inline(out_of_line, inline, width)


def test_out_of_line_epilogue_on_edge_tiles_and_k_blocks() -> None:
    """Rows and columns past whole tiles (width +- 1), K longer than one K block (C holds partial sums until the
    last), three threads."""
    m, n, k = 2 * HOST.mr + 1, 13 * HOST.nr - 1, 2 * HOST.kc + 3
    assert gemm_plan(GemmSpec.contiguous(m, n, k), HOST).blocks > 1
    _erf_case(_erf_operands(m, n, k), HOST, 3, "edges")
    _erf_case(_erf_operands(m, HOST.width + 1, 5), HOST, 2, "width+1")


@pytest.mark.parametrize("nthreads", [1, 3])
def test_out_of_line_epilogue_sees_every_element_once(nthreads, monkeypatch) -> None:
    monkeypatch.setattr(gemm_epilogue, "INLINE_INSTRUCTIONS", -1)  # every epilogue out of line
    m, n, k = 2 * HOST.mr + 1, 3 * HOST.nr - 1, 5
    spec = GemmSpec.contiguous(m, n, k)
    assert _out_of_line(spec, HOST, count_writes(0, m, n), 1)
    counts = np.zeros((m, n), np.float32)
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    run(spec, a.ravel(), b.ravel(), epilogue=count_writes(0, m, n), tag="count-out-of-line",
        extras=(counts.ravel(),), nthreads=nthreads)
    assert (counts == 1).all()


@pytest.mark.skipif("+avx2" not in HOST_FEATURES or "+fma" not in HOST_FEATURES, reason="needs an AVX2 host")
@pytest.mark.parametrize("cpu", ["haswell", "nehalem"])
def test_out_of_line_epilogue_on_forced_targets(cpu, monkeypatch) -> None:
    """BRAZE_CPU=haswell (AVX2) and nehalem (SSE4.2, 4 lanes without FMA: nothing to contract) on an AVX2 host,
    out of line as inline (same_as_inline)."""
    monkeypatch.setenv("BRAZE_CPU", cpu)
    tiling = tiling_for(host_target().vector_width)
    assert tiling.width == (8 if cpu == "haswell" else 4)
    for m, n, k in ((1, tiling.width - 1, 1), (tiling.mr + 1, tiling.width + 1, 13), (13, 17, 31)):
        operands = _erf_operands(m, n, k)
        out_of_line = _erf_case(operands, tiling, 2, f"{cpu}-out-of-line")
        with monkeypatch.context() as inline:
            inline.setattr(gemm_epilogue, "INLINE_INSTRUCTIONS", 10 ** 9)
            same_as_inline(out_of_line, _erf_case(operands, tiling, 2, f"{cpu}-inline"), tiling.width)
