"""GEMM, GEMV, conv2d and vector-math kernels for each instruction set: AVX2 forced with BRAZE_CPU (run and checked
against numpy on any AVX2 host), AVX-512 compiled to assembly for named CPUs (run where the host is that CPU).

The assembly checks are substring checks on LLVM's output, which we do not control: full-width FMAs on the
target's vector registers, edge tiles stored with masks rather than element by element, and A's packed panels
stored without masks on AVX2.
"""
from __future__ import annotations

import re
from dataclasses import replace

import llvmlite.binding as llvm
import pytest
from llvmlite import ir

from braze.codegen import compile_ir, host_target, vecmath
from braze.codegen.conv import ConvSpec, emit_conv2d
from braze.codegen.gemm import (GemmSpec, Strided, bias_cols, bias_rows, chain, emit_gemm, gemm_plan, relu,
                                tiling_for)
from braze.codegen.loops import F64, vec
from tests.codegen import test_conv, test_gemm
from tests.codegen.native import unique_name

X86 = llvm.get_process_triple().startswith("x86_64")
HOST_FEATURES = set(llvm.get_host_cpu_features().flatten().split(","))
AVX512_CPUS = ["skylake-avx512", "znver4", "znver5"]

pytestmark = pytest.mark.skipif(not X86, reason="x86-64 instruction sets")


def _asm(cpu: str, emit) -> tuple[str, int]:
    """The assembly of a module emitted by emit(module, name, tiling) for `cpu`, and that CPU's vector width."""
    target = host_target(cpu=cpu)
    name = unique_name("t_isa", cpu, emit.__name__)
    module = target.new_module(name)
    emit(module, name, tiling_for(target.vector_width, cpu=cpu))
    return compile_ir(module, target=target, use_cache=False).asm(), target.vector_width


def _gemm(module, name, tiling) -> None:
    emit_gemm(module, name, GemmSpec.contiguous(13, 37, 29, trans_b=True), tiling)


def _gemv(module, name, tiling) -> None:
    emit_gemm(module, name, GemmSpec.contiguous(1, 37, 29, trans_b=True), tiling, chain(bias_cols(0), relu), 1)


def _conv(module, name, tiling) -> None:
    spec = ConvSpec(1, 5, 17, 23, 7, 3, 3, stride=(2, 2), padding=(1, 1))
    emit_conv2d(module, name, spec, tiling, chain(bias_rows(0), relu), 1)


def _register(width: int) -> str:
    return {16: "zmm", 8: "ymm", 4: "xmm"}[width]


@pytest.mark.parametrize("cpu", AVX512_CPUS)
@pytest.mark.parametrize("emit", [_gemm, _gemv, _conv], ids=["gemm", "gemv", "conv2d"])
def test_avx512_kernels_use_zmm_fma_and_masked_edges(cpu, emit) -> None:
    asm, width = _asm(cpu, emit)
    assert width == 16
    assert re.search(r"vfmadd\d+ps\s+[^\n]*%zmm", asm)
    assert re.search(r"\{%k[1-7]\}", asm)  # edge lanes go through mask registers


def _short_rows(module, name, tiling) -> None:
    emit_conv2d(module, name, ConvSpec(1, 8, 16, 16, 16, 3, 3, stride=(2, 2), padding=(1, 1)), tiling)


@pytest.mark.parametrize("cpu", AVX512_CPUS + ["haswell"])
def test_conv2d_reads_output_rows_of_half_a_vector_without_gathers(cpu) -> None:
    """8-wide output rows (the benchmark CNN's last conv) are two runs of a zmm vector on AVX-512."""
    asm, _ = _asm(cpu, _short_rows)
    assert "gather" not in asm


@pytest.mark.parametrize("emit", [_gemm, _gemv, _conv], ids=["gemm", "gemv", "conv2d"])
def test_avx2_kernels_use_ymm_fma_and_masked_edges(emit) -> None:
    asm, width = _asm("haswell", emit)
    assert width == 8
    assert re.search(r"vfmadd\d+ps\s+[^\n]*%ymm", asm) and "zmm" not in asm
    assert "vmaskmovps" in asm


PACKED_A = {"rows": GemmSpec(600, 64, 203, Strided(203, 1), Strided(64, 1), Strided(64, 1)),
            "columns": GemmSpec(600, 64, 203, Strided(1, 600), Strided(64, 1), Strided(64, 1))}


@pytest.mark.parametrize("layout", PACKED_A)
def test_avx2_gemm_packs_a_with_plain_stores(layout) -> None:
    """A's panels are written by whole-vector stores, each spilling onto the next step's slots, not by vmaskmovps
    stores (slow on AMD cores): a GEMM without edge tiles stores nothing through a mask, A row-major or transposed."""
    spec = PACKED_A[layout]
    assert gemm_plan(spec, tiling_for(8)).a_mode == "pack"

    def packed_a(module, name, tiling) -> None:
        emit_gemm(module, name, spec, tiling)
    asm, _ = _asm("haswell", packed_a)
    assert not re.search(r"vmaskmovps\s+%ymm\d+,\s*%ymm\d+,\s*-?\d*\(", asm)


def _force(monkeypatch, cpu: str) -> int:
    monkeypatch.setenv("BRAZE_CPU", cpu)
    return host_target().vector_width


@pytest.mark.skipif("+avx2" not in HOST_FEATURES or "+fma" not in HOST_FEATURES, reason="needs an AVX2 host")
def test_forced_avx2_kernels_match_numpy(monkeypatch) -> None:
    tiling = tiling_for(_force(monkeypatch, "haswell"))
    for m, n, k in ((1, 1, 1), (7, 9, 1), (13, 17, 31), (6, 16, 0), (1, 37, 29), (3, 9, 8)):
        test_gemm.check(m, n, k, tiling=tiling, trans_b=True)
    test_conv.check(ConvSpec(2, 3, 9, 17, 7, 3, 3, stride=(2, 2), padding=(1, 1)), tiling=tiling)


@pytest.mark.parametrize("cpu", AVX512_CPUS)
def test_avx512_kernels_match_numpy_on_that_cpu(cpu, monkeypatch) -> None:
    if llvm.get_host_cpu_name() != cpu:
        pytest.skip(f"the host is not a {cpu}")
    tiling = tiling_for(_force(monkeypatch, cpu))
    for m, n, k in ((1, 1, 1), (11, 15, 17), (13, 33, 31), (1, 37, 29), (2, 9, 16)):
        test_gemm.check(m, n, k, tiling=tiling, trans_b=True)
    test_conv.check(ConvSpec(2, 3, 9, 35, 13, 3, 3, stride=(2, 2), padding=(1, 1)), tiling=tiling)


def _exp(module, name, tiling) -> None:
    """A function returning exp of a float32 vector of the target's width."""
    _vector_exp(module, name, vec(tiling.width))


def _exp64(module, name, tiling) -> None:
    """A function returning exp of 8 float64 lanes: an elementwise nest's float64 vectors on any x86 target, one
    AVX-512 register or two AVX2 ones."""
    _vector_exp(module, name, vec(8, F64))


def _vector_exp(module, name, typ) -> None:
    fn = ir.Function(module, ir.FunctionType(typ, [typ]), name)
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    builder.ret(vecmath.call(builder, "exp", fn.args[0]))


@pytest.mark.parametrize("cpu, scaled", [("znver4", True), ("skylake-avx512", True), ("haswell", False)])
@pytest.mark.parametrize("emit, instruction", [(_exp, "vscalefps"), (_exp64, "vscalefpd")], ids=["f32", "f64"])
def test_exp_scales_by_two_to_the_n_in_one_instruction_on_avx512(cpu, scaled, emit, instruction) -> None:
    asm, _ = _asm(cpu, emit)
    assert (instruction in asm) == scaled


def _gemm_packing_a(module, name, tiling) -> None:
    tiling = replace(tiling, a_in_place=False)  # as on a core whose L1 has fewer ways than the tile has rows
    emit_gemm(module, name, GemmSpec.contiguous(1024, 64, 512, prepacked_b=True, tiling=tiling), tiling)


def _functions(asm: str) -> dict[str, str]:
    """The assembly of each function of a module, by name."""
    names = re.findall(r"^\s*\.type\s+([\w.$]+),@function$", asm, re.M)
    starts = sorted((m.start(), m.group(1)) for m in re.finditer(r"^([\w.$]+):$", asm, re.M) if m.group(1) in names)
    ends = [start for start, _ in starts[1:]] + [len(asm)]
    return {name: asm[start:end] for (start, name), end in zip(starts, ends)}


@pytest.mark.parametrize("cpu", ["znver4", "haswell"])
def test_packing_a_prefetches_the_next_panel_into_l2(cpu) -> None:
    """The packing prefetches A into L2 only (into L1 it cost 2-10%); the micro-kernels (the functions with FMAs)
    hint their tile of C into L1 before their k loop, and only they."""
    asm, _ = _asm(cpu, _gemm_packing_a)
    functions = _functions(asm)
    kernels = {name: body for name, body in functions.items() if "vfmadd" in body}
    drivers = {name: body for name, body in functions.items() if name not in kernels}
    assert kernels and any("prefetcht1" in body for body in drivers.values())
    assert not any("prefetcht0" in body for body in drivers.values())
    for body in kernels.values():
        assert "prefetcht1" not in body and "prefetcht0" in body
        assert body.index("prefetcht0") < body.index("vfmadd")


def _conv_stride2_tile(module, name, tiling) -> None:
    """A conv whose AVX-512 channel tiles are 8 pixels by 3 vectors, the taps reading shared pixels at stride 2."""
    spec = ConvSpec(1, 4, 16, 16, 48, 3, 3, stride=(2, 2), padding=(1, 1), prepacked_weight=True)
    emit_conv2d(module, name, spec, tiling, chain(bias_rows(0), relu), 1, kernel="channels")


def _fma_loops(asm: str) -> list[str]:
    """The bodies of the loops (a label and the jump back to it) that compute with FMAs."""
    loops = re.finditer(r"^(\.LBB\w+):\n(.*?)^\s+j\w+\s+\1$", asm, re.S | re.M)
    return [m.group(2) for m in loops if "vfmadd" in m.group(2)]


@pytest.mark.parametrize("cpu", ["znver4", "skylake-avx512"])
def test_channel_tiles_keep_their_accumulators_in_registers(cpu) -> None:
    """24 accumulators of 32 zmm registers: with the pixels two taps share loaded once, the rest spilled to the
    stack on every tap (20% slower); each tap loads its own and the loop touches no stack."""
    asm, _ = _asm(cpu, _conv_stride2_tile)
    loops = _fma_loops(asm)
    assert loops and not any("(%rsp)" in body for body in loops)


def _linear_layer(module, name, tiling) -> None:
    """A linear layer at batch 64: A read in place or packed, B pre-packed (a model's weight)."""
    emit_gemm(module, name, GemmSpec.contiguous(64, 512, 784, prepacked_b=True, tiling=tiling), tiling)


@pytest.mark.parametrize("cpu, hinted", [("sapphirerapids", True), ("znver4", False), ("haswell", False)])
def test_micro_kernel_hints_b_into_l1_in_the_a_outer_order_of_a_full_width_core(cpu, hinted) -> None:
    """Tiling.prefetch_b: the k loop of a full-width AVX-512 core's micro-kernel hints the B step ahead into L1 (its
    B panels stream from L2); Zen 4's (half-width) and the AVX2 tile's (B's panel in L1) k loops hint nothing."""
    asm, _ = _asm(cpu, _linear_layer)
    loops = _fma_loops(asm)
    assert loops and any("prefetcht0" in body for body in loops) == hinted
