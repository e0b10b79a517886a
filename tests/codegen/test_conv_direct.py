"""The direct conv2d kernel (codegen/conv_direct.py) against the IR's conv2d reference on edge shapes, and the rule
that picks it. Tolerances as in test_conv.py (test_conv.check: 8*sqrt(K+1)*2^-24 of the |x|*|w| convolution)."""
from __future__ import annotations

import re

import llvmlite.binding as llvm
import numpy as np
import pytest

from braze.codegen import compile_ir, host_target
from braze.codegen.conv import ConvSpec, conv2d_scratch_bytes, conv_kernel, emit_conv2d
from braze.codegen.conv_channels import ChannelLayout
from braze.codegen.conv_direct import Layout, pixel_order, rows_first
from braze.codegen.gemm import bias_rows, chain, relu, residual, tiling_for
from tests.codegen.native import assert_close, dot_tolerance, unique_name
from tests.codegen.test_conv import HOST, RNG, WIDTHS, check, reference, run_conv

X86 = llvm.get_process_triple().startswith("x86_64")
HOST_FEATURES = set(llvm.get_host_cpu_features().flatten().split(","))
W = HOST.width

EDGES = [
    dict(n=1, c=1, h=1, w=1, c_out=1, kh=1, kw=1),
    dict(n=3, c=1, h=5, w=W - 1, c_out=HOST.mr - 1, kh=3, kw=3, padding=(1, 1)),
    dict(n=1, c=2, h=6, w=W, c_out=HOST.mr, kh=3, kw=3, padding=(1, 1)),
    dict(n=2, c=3, h=7, w=W + 1, c_out=HOST.mr + 1, kh=3, kw=3, padding=(2, 2)),
    dict(n=1, c=7, h=11, w=13, c_out=11, kh=3, kw=3),
    dict(n=1, c=5, h=9, w=2 * W + 3, c_out=2 * HOST.mr + 5, kh=3, kw=3, padding=(1, 1), stride=(2, 1)),
    dict(n=2, c=4, h=13, w=17, c_out=6, kh=3, kw=3, padding=(1, 1), stride=(2, 2)),
    dict(n=1, c=3, h=8, w=2 * W + 1, c_out=5, kh=3, kw=3, padding=(0, 2), stride=(1, 2)),
    dict(n=1, c=6, h=12, w=11, c_out=4, kh=3, kw=3, padding=(2, 2), dilation=(2, 2)),
    dict(n=2, c=6, h=9, w=10, c_out=9, kh=3, kw=3, padding=(1, 1), groups=3),
    dict(n=1, c=8, h=9, w=W + 3, c_out=2 * HOST.mr + 1, kh=1, kw=1),
    dict(n=1, c=3, h=7, w=W - 1, c_out=4, kh=1, kw=1, stride=(2, 2)),
    dict(n=1, c=4, h=6, w=9, c_out=3, kh=3, kw=1, padding=(1, 0)),
    dict(n=1, c=4, h=2, w=9, c_out=3, kh=1, kw=3, padding=(2, 1)),
]


def _id(case: dict) -> str:
    return "-".join(f"{k}{v}" for k, v in case.items())


@pytest.mark.parametrize("case", EDGES, ids=_id)
@pytest.mark.parametrize("prepacked", [False, True])
def test_direct_conv2d_matches_reference(case, prepacked) -> None:
    check(ConvSpec(**case, prepacked_weight=prepacked), nthreads=2, which="direct")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("sw", [1, 2])
def test_direct_conv2d_every_vector_width(width, sw) -> None:
    """Output rows one lane short of a vector, exactly one, one lane more, and several (with the row rest)."""
    tiling = tiling_for(width)
    for ow in (width - 1, width, width + 1, 3 * width + 2):
        check(ConvSpec(2, 3, 6, (ow - 1) * sw + 1, tiling.mr + 1, 3, 3, stride=(1, sw), padding=(1, 1)),
              tiling=tiling, which="direct")


# the register-tiled direct kernels: pixels across the lanes, and output channels across them (test_conv_channels.py)
DIRECT_KERNELS = ["direct", "channels"]


@pytest.mark.parametrize("which", DIRECT_KERNELS)
def test_direct_kernels_fuse_a_residual_epilogue(which) -> None:
    spec = ConvSpec(2, 5, 9, 12, 7, 3, 3, padding=(1, 1), prepacked_weight=True)
    n, c_out, oh, ow = spec.out_shape
    x, w = (RNG.standard_normal(shape).astype(np.float32) for shape in (spec.input_shape, spec.weight_shape))
    res = RNG.standard_normal(spec.out_shape).astype(np.float32)
    out = run_conv(spec, x, w, epilogue=residual(0, oh * ow, (n,), (c_out * oh * ow,)), tag="residual",
                   extras=(res,), which=which)
    scale = reference(spec, np.abs(x), np.abs(w), None) + np.abs(res)
    assert_close(out, reference(spec, x, w, None) + res, dot_tolerance(spec.gemm_dims[2], scale), "residual")


@pytest.mark.parametrize("which", DIRECT_KERNELS)
@pytest.mark.parametrize("case", [EDGES[3], EDGES[6], EDGES[9]], ids=["padded", "stride2", "grouped"])
def test_direct_kernels_claiming_at_once_match_one_thread_bit_for_bit(case, which) -> None:
    spec = ConvSpec(**case, prepacked_weight=True)
    x, w = (RNG.standard_normal(shape).astype(np.float32) for shape in (spec.input_shape, spec.weight_shape))
    one = run_conv(spec, x, w, which=which)
    assert not np.isnan(one).any()
    for nthreads in (2, 3):
        got = run_conv(spec, x, w, nthreads=nthreads, concurrent=True, which=which)
        assert got.tobytes() == one.tobytes(), f"{nthreads} threads"


@pytest.mark.parametrize("which", DIRECT_KERNELS)
@pytest.mark.parametrize("case", [EDGES[3], EDGES[6], EDGES[9]], ids=["padded", "stride2", "grouped"])
def test_direct_kernels_at_batch_1_take_rows_first_and_match_the_reference_on_any_thread_count(case, which) -> None:
    """At batch 1 a small weight puts the row blocks outermost in the units' order (rows_first: a thread's run of
    units is a band of rows); every output is still computed once, the same bytes on one thread and on several
    claiming at once."""
    spec = ConvSpec(**{**case, "n": 1}, prepacked_weight=True)
    layout = Layout(spec, HOST) if which == "direct" else ChannelLayout(spec, W)
    assert [name for name, _ in layout.unit_order][:2] == ["image", "row block"]
    x, w = (RNG.standard_normal(shape).astype(np.float32) for shape in (spec.input_shape, spec.weight_shape))
    one = run_conv(spec, x, w, which=which, tag="rows-first")
    scale = reference(spec, np.abs(x), np.abs(w), None)
    assert_close(one, reference(spec, x, w, None), dot_tolerance(spec.gemm_dims[2], scale), "rows first")
    for nthreads in (2, 3):
        got = run_conv(spec, x, w, nthreads=nthreads, concurrent=True, which=which, tag="rows-first")
        assert got.tobytes() == one.tobytes(), f"{nthreads} threads"


def test_rows_first_only_at_batch_1_with_a_weight_within_half_of_l2() -> None:
    spec = ConvSpec(1, 64, 14, 14, 64, 3, 3, padding=(1, 1))
    weight = 4 * 64 * 64 * 9  # 147 KB
    assert rows_first(spec, weight, 2 << 20) and rows_first(spec, weight, 2 * weight)
    assert not rows_first(spec, weight, 2 * weight - 4)
    assert not rows_first(ConvSpec(2, 64, 14, 14, 64, 3, 3, padding=(1, 1)), weight, 2 << 20)


@pytest.mark.parametrize("which", DIRECT_KERNELS)
def test_direct_kernels_on_an_empty_batch_touch_nothing(which) -> None:
    spec = ConvSpec(0, 4, 6, 6, 8, 3, 3, padding=(1, 1), prepacked_weight=True)
    out = run_conv(spec, np.zeros(1, np.float32), np.ones(spec.weight_shape, np.float32), which=which)
    assert out.shape == (0, 8, 6, 6) and conv2d_scratch_bytes(spec, HOST, which) == 0


def test_conv_kernel_rule() -> None:
    """Stride 1 along W, up to 3x3 taps, rows of 4 vectors or more (2 whole vectors on AVX-512): direct (1x1 only
    below AVX-512); shorter rows, larger kernels: the GEMM; stride 2: direct on AVX-512 where output rows are whole
    vectors, else the GEMM; depthwise: its own."""
    wide = 4 * W
    assert conv_kernel(ConvSpec(1, 3, 8, wide, 32, 3, 3, padding=(1, 1)), tiling=HOST) == "direct"
    one_by_one = ConvSpec(1, 8, 8, wide, 16, 1, 1)  # the GEMM's on AVX-512 (measured, conv.py)
    assert conv_kernel(one_by_one, tiling=HOST) == ("im2col" if W >= 16 else "direct")
    avx512, avx2 = tiling_for(16), tiling_for(8)
    # rows of 24 pixels: one whole AVX-512 vector, 3 AVX2 ones; 32: 2 (and 4); 48: 3 (6): AVX-512 took the GEMM for
    # rows under 4 vectors before its own measurement (conv.py)
    for rows, kernel in ((24, "im2col"), (32, "direct"), (48, "direct")):
        for tiling in (avx512, avx2):
            spec = ConvSpec(1, 8, 8, rows, 16, 3, 3, padding=(1, 1))
            assert conv_kernel(spec, tiling=tiling) == kernel, (rows, tiling.width)
    for width, rule in ((16, {avx512: "direct", avx2: "im2col"}), (8, {avx512: "im2col", avx2: "im2col"}),
                        (24, {avx512: "im2col", avx2: "im2col"})):  # output rows of `width` pixels
        for tiling, kernel in rule.items():
            spec = ConvSpec(1, 32, 8, 2 * width, 64, 3, 3, stride=(2, 2), padding=(1, 1))
            assert conv_kernel(spec, tiling=tiling) == kernel, (width, tiling.width)
    assert conv_kernel(ConvSpec(1, 32, 8, 8, 64, 3, 3, stride=(2, 2)), "direct") == "direct"
    assert conv_kernel(ConvSpec(1, 3, 8, wide, 4, 5, 5), tiling=HOST) == "im2col"
    assert conv_kernel(ConvSpec(1, 4, 8, 8, 4, 3, 3, groups=4), "direct") == "depthwise"


def test_conv_kernel_rejects_what_it_cannot_run() -> None:
    with pytest.raises(ValueError, match="up to 9 taps"):
        conv_kernel(ConvSpec(1, 3, 8, 8, 4, 5, 5), "direct")
    with pytest.raises(ValueError, match="stride"):
        conv_kernel(ConvSpec(1, 3, 9, 9, 4, 3, 3, stride=(1, 3)), "direct")
    with pytest.raises(ValueError, match="auto, direct, channels, im2col"):
        conv_kernel(ConvSpec(1, 3, 8, 8, 4, 3, 3), "winograd")


@pytest.mark.parametrize("width", [4, 8, 16])
def test_pixel_order_is_a_permutation_of_one_vector(width) -> None:
    assert sorted(pixel_order(width)) == list(range(width))


def _asm(cpu: str, spec: ConvSpec) -> tuple[str, int]:
    target = host_target(cpu=cpu)
    name = unique_name("t_direct_isa", cpu, spec)
    module = target.new_module(name)
    emit_conv2d(module, name, spec, tiling_for(target.vector_width), chain(bias_rows(0), relu), 1, kernel="direct")
    return compile_ir(module, target=target, use_cache=False).asm(), target.vector_width


@pytest.mark.skipif(not X86, reason="x86-64 instruction sets")
@pytest.mark.parametrize("cpu, register", [("skylake-avx512", "zmm"), ("haswell", "ymm")])
@pytest.mark.parametrize("sw", [1, 2])
def test_direct_conv2d_compiles_to_full_width_fmas_with_masked_padding(cpu, register, sw) -> None:
    """The vector width comes from the target: AVX-512 code is compiled (not run) on any x86-64 host."""
    asm, _ = _asm(cpu, ConvSpec(1, 5, 17, 23, 7, 3, 3, stride=(sw, sw), padding=(1, 1)))
    assert re.search(rf"vfmadd\d+ps\s+[^\n]*%{register}", asm)
    assert "gather" not in asm
    assert (re.search(r"\{%k[1-7]\}", asm) if register == "zmm" else "vmaskmovps" in asm)


@pytest.mark.skipif("+avx2" not in HOST_FEATURES or "+fma" not in HOST_FEATURES, reason="needs an AVX2 host")
@pytest.mark.parametrize("cpu", ["haswell", "nehalem"])
def test_direct_conv2d_forced_targets_match_numpy(cpu, monkeypatch) -> None:
    """BRAZE_CPU=haswell (AVX2) and nehalem (SSE4.2, 4 lanes without FMA) on an AVX2 host."""
    monkeypatch.setenv("BRAZE_CPU", cpu)
    tiling = tiling_for(host_target().vector_width)
    assert tiling.width == (8 if cpu == "haswell" else 4)
    for case in (EDGES[3], EDGES[6], EDGES[10]):
        check(ConvSpec(**case), tiling=tiling, which="direct")
