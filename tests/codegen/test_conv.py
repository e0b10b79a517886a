"""conv2d kernels against the IR's conv2d reference (braze.ir.evaluate, float64) on odd geometries.

Tolerance: each output is a float32 sum of K = C_in/groups*kH*kW products, so it must lie within
8*sqrt(K+1)*2^-24 times the same convolution of |x| with |w| (plus |bias|) of the float64 result
(native.dot_tolerance explains the bound).
"""
from __future__ import annotations

import ctypes
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from braze.codegen import host_target
from braze.codegen.conv import (ConvSpec, conv2d_plan, conv2d_scratch_bytes, conv2d_shared_bytes, conv_weight_floats,
                                emit_conv2d, emit_conv_weight_prepack)
from braze.codegen.gemm import bias_rows, chain, relu, residual, tiling_for
from braze.ir.errors import ShapeError
from braze.ir.evaluate import evaluate
from tests.codegen.native import aligned, assert_close, build, dot_tolerance, kernel, require, run_threads
from tests.codegen.test_gemm import count_writes

HOST = tiling_for(host_target().vector_width)
WIDTHS = [w for w in (4, 8, 16) if w <= host_target().vector_width]
RNG = np.random.default_rng(11)


def reference(spec: ConvSpec, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    attrs = dict(stride=spec.stride, padding=spec.padding, dilation=spec.dilation, groups=spec.groups)
    operands = [x.astype(np.float64), w.astype(np.float64)] + ([] if bias is None else [bias.astype(np.float64)])
    return evaluate("conv2d", operands, attrs)[0]


def run_conv(spec: ConvSpec, x: np.ndarray, w: np.ndarray, *, tiling=HOST, epilogue=None, tag: str = "",
             extras=(), nthreads: int = 1, concurrent: bool = False, which: str = "auto") -> np.ndarray:
    prepack = spec.prepacked_weight

    def emit(module, name):
        emit_conv2d(module, name, spec, tiling, epilogue, len(extras), kernel=which)
        if prepack:
            emit_conv_weight_prepack(module, name + "_pack", spec, tiling, which)
    library, name = build("t_conv", (spec, tiling, tag, len(extras), which), emit)
    require(x, int(np.prod(spec.input_shape)), "x")
    require(w, int(np.prod(spec.weight_shape)), "w")
    if prepack:
        packed = aligned(conv_weight_floats(spec, tiling, which))
        library.cfunc(name + "_pack", None, ctypes.c_void_p, ctypes.c_void_p)(w.ctypes.data, packed.ctypes.data)
        w = packed
    out = np.full(spec.out_shape, np.nan, np.float32)
    run_threads(kernel(library, name, len(extras)), [x.ctypes.data, w.ctypes.data, out.ctypes.data],
                [require(e, None, "extra") for e in extras], conv2d_scratch_bytes(spec, tiling, which), nthreads,
                concurrent=concurrent, shared_bytes=conv2d_shared_bytes(spec, tiling, which))
    return out


def check(spec: ConvSpec, *, tiling=HOST, nthreads: int = 1, with_bias: bool = True, which: str = "auto") -> None:
    x = RNG.standard_normal(spec.input_shape).astype(np.float32)
    w = RNG.standard_normal(spec.weight_shape).astype(np.float32)
    bias = RNG.standard_normal(spec.c_out).astype(np.float32) if with_bias else None
    epilogue = chain(bias_rows(0), relu) if with_bias else None
    out = run_conv(spec, x, w, tiling=tiling, epilogue=epilogue, tag="bias-relu" if with_bias else "",
                   extras=(bias,) if with_bias else (), nthreads=nthreads, which=which)
    want = reference(spec, x, w, bias)
    scale = reference(spec, np.abs(x), np.abs(w), None if bias is None else np.abs(bias))
    if with_bias:
        want = np.maximum(want, 0)
    k = spec.gemm_dims[2]
    assert_close(out, want, dot_tolerance(k, scale), f"{spec} W={tiling.width} threads={nthreads} {which}")


CASES = [
    dict(n=1, c=3, h=8, w=8, c_out=4, kh=3, kw=3),
    dict(n=2, c=3, h=13, w=11, c_out=5, kh=3, kw=3, padding=(1, 1)),
    dict(n=2, c=5, h=17, w=19, c_out=7, kh=3, kw=2, stride=(2, 1), padding=(1, 2), dilation=(2, 1)),
    dict(n=1, c=8, h=9, w=10, c_out=6, kh=1, kw=1),
    dict(n=3, c=4, h=7, w=7, c_out=33, kh=5, kw=5, padding=(2, 2), stride=(2, 2)),
    dict(n=1, c=2, h=3, w=3, c_out=3, kh=5, kw=5, padding=(2, 2)),
    dict(n=2, c=6, h=11, w=13, c_out=9, kh=3, kw=3, padding=(1, 1), groups=3),
    dict(n=1, c=4, h=20, w=20, c_out=8, kh=3, kw=3, padding=(2, 2), dilation=(2, 2), groups=2, stride=(2, 2)),
    dict(n=1, c=16, h=30, w=31, c_out=40, kh=3, kw=3, padding=(1, 1)),
    dict(n=2, c=3, h=32, w=32, c_out=16, kh=3, kw=3, padding=(1, 1)),
    dict(n=1, c=2, h=9, w=40, c_out=5, kh=2, kw=3, padding=(0, 1), dilation=(1, 2)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
@pytest.mark.parametrize("prepacked", [False, True])
def test_conv2d_matches_reference(case, prepacked) -> None:
    check(ConvSpec(**case, prepacked_weight=prepacked), nthreads=2)


DEPTHWISE = [
    dict(n=2, c=6, h=15, w=15, c_out=6, kh=3, kw=3, padding=(1, 1), groups=6),
    dict(n=1, c=4, h=9, w=40, c_out=8, kh=3, kw=3, padding=(1, 1), groups=4),
    dict(n=2, c=5, h=15, w=40, c_out=5, kh=5, kw=3, padding=(2, 1), stride=(2, 2), groups=5),
    dict(n=1, c=3, h=12, w=70, c_out=3, kh=3, kw=3, padding=(2, 2), dilation=(2, 2), groups=3),
    dict(n=1, c=2, h=5, w=5, c_out=2, kh=7, kw=7, padding=(3, 3), groups=2),
]


@pytest.mark.parametrize("case", DEPTHWISE, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
def test_depthwise_conv2d_matches_reference(case) -> None:
    spec = ConvSpec(**case)
    assert spec.depthwise and conv2d_plan(spec) is None
    check(spec, nthreads=3)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("vectors", [2 * 4, 2 * 4 + 1, 1])
def test_depthwise_rows_of_full_tiles_and_a_short_rest(width, vectors) -> None:
    """Output rows of exactly two full tiles (4 vectors each), of a vector and a lane more, and of one lane short
    of a vector: the rest of a row after the full tiles is a static tile of only the vectors it needs."""
    ow = vectors * width - 1 if vectors == 1 else vectors * width + (vectors % 2)
    check(ConvSpec(1, 3, 5, ow, 3, 3, 3, padding=(1, 1), groups=3), tiling=tiling_for(width))


@pytest.mark.parametrize("width", WIDTHS)
def test_conv2d_every_vector_width(width) -> None:
    tiling = tiling_for(width)
    check(ConvSpec(2, 5, 12, 13, 2 * tiling.mr + 3, 3, 3, padding=(1, 1), stride=(1, 2)), tiling=tiling)
    check(ConvSpec(1, 3, 7, 35, tiling.mr + 1, 3, 3, padding=(1, 1)), tiling=tiling)
    check(ConvSpec(1, 4, 10, 11, 4, 3, 3, padding=(1, 1), groups=4), tiling=tiling)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("sw", [1, 2])
@pytest.mark.parametrize("ow", ["W/2", "W/2+1", "W-1", "W+1"])
def test_conv2d_im2col_rows_at_every_output_width(width, sw, ow) -> None:
    """A vector's positions in two or three output rows (short rows), or wrapping once (longer rows)."""
    tiling = tiling_for(width)
    out_w = {"W/2": width // 2, "W/2+1": width // 2 + 1, "W-1": width - 1, "W+1": width + 1}[ow]
    check(ConvSpec(2, 3, 7, (out_w - 1) * sw + 1, tiling.mr + 1, 3, 3, stride=(2, sw), padding=(1, 1)),
          tiling=tiling)


@pytest.mark.parametrize("sw", [1, 2])
def test_conv2d_im2col_runs_with_dilation_and_wide_padding(sw) -> None:
    check(ConvSpec(1, 2, 6, 8 * sw + 3, 5, 2, 3, stride=(1, sw), padding=(0, 2), dilation=(1, 2)), with_bias=False)


@pytest.mark.parametrize("case", [dict(n=1, c=None, h=9, w=11, c_out=7, kh=3, kw=3, padding=(1, 1)),
                                  dict(n=1, c=2, h=20, w=19, c_out=7, kh=17, kw=17)], ids=["channels", "taps"])
def test_conv2d_k_blocks_hold_whole_input_channels(case) -> None:
    """K longer than one block (of 256 steps, as AVX2 and SSE hosts take): blocks end between channels, even when
    one channel's taps exceed the block."""
    tiling = replace(HOST, kc=256)
    if case["c"] is None:  # enough channels for K = 9c past the block
        case = {**case, "c": tiling.kc // 9 + 4}
    spec = ConvSpec(**case)
    plan = conv2d_plan(spec, tiling)
    taps = spec.kh * spec.kw
    assert plan.blocks > 1 or taps > tiling.kc
    assert plan.kc % taps == 0 and plan.kc * plan.blocks >= spec.gemm_dims[2]
    check(spec, tiling=tiling, nthreads=2)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(n=st.integers(1, 2), cg=st.integers(1, 4), groups=st.integers(1, 3), og=st.integers(1, 5),
       h=st.integers(1, 12), w=st.integers(1, 12), kh=st.integers(1, 4), kw=st.integers(1, 4),
       stride=st.tuples(st.integers(1, 3), st.integers(1, 3)), padding=st.tuples(st.integers(0, 2), st.integers(0, 2)),
       dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)), nthreads=st.integers(1, 3))
def test_conv2d_random_geometry(n, cg, groups, og, h, w, kh, kw, stride, padding, dilation, nthreads) -> None:
    args = (n, cg * groups, h, w, og * groups, kh, kw, stride, padding, dilation, groups)
    fits = all((k - 1) * d + 1 <= size + 2 * p for k, d, size, p in zip((kh, kw), dilation, (h, w), padding))
    if not fits:  # the dilated kernel does not fit the padded input: the IR rejects it, nothing to compile
        with pytest.raises(ShapeError):
            ConvSpec(*args)
    else:
        check(ConvSpec(*args), nthreads=nthreads)


@pytest.mark.parametrize("case", [CASES[2], CASES[6], DEPTHWISE[0]], ids=["plain", "grouped", "depthwise"])
@pytest.mark.parametrize("nthreads", [2, 7])
def test_conv2d_thread_shares_cover_the_output_exactly_once(case, nthreads) -> None:
    spec = ConvSpec(**case)
    x = RNG.standard_normal(spec.input_shape).astype(np.float32)
    w = RNG.standard_normal(spec.weight_shape).astype(np.float32)
    n, c_out, oh, ow = spec.out_shape
    counts = np.zeros(spec.out_shape, np.float32)
    out = run_conv(spec, x, w, epilogue=count_writes(0, c_out, oh * ow), tag="count", extras=(counts,),
                   nthreads=nthreads)
    assert (counts == 1).all()
    assert_close(out, reference(spec, x, w, None),
                 dot_tolerance(spec.gemm_dims[2], reference(spec, np.abs(x), np.abs(w), None)), "threads")


@pytest.mark.parametrize("case", [CASES[1], CASES[6], DEPTHWISE[1]], ids=["plain", "grouped", "depthwise"])
def test_conv2d_residual_epilogue(case) -> None:
    spec = ConvSpec(**case)
    n, c_out, oh, ow = spec.out_shape
    x = RNG.standard_normal(spec.input_shape).astype(np.float32)
    w = RNG.standard_normal(spec.weight_shape).astype(np.float32)
    res = RNG.standard_normal(spec.out_shape).astype(np.float32)
    epilogue = residual(0, oh * ow, (n,), (c_out * oh * ow,))
    out = run_conv(spec, x, w, epilogue=epilogue, tag="residual", extras=(res,))
    scale = reference(spec, np.abs(x), np.abs(w), None) + np.abs(res)
    assert_close(out, reference(spec, x, w, None) + res, dot_tolerance(spec.gemm_dims[2], scale), "residual")


def test_conv2d_cifar_shapes_batched() -> None:
    check(ConvSpec(4, 32, 32, 32, 64, 3, 3, stride=(2, 2), padding=(1, 1), prepacked_weight=True), nthreads=2)


def test_conv_spec_rejects_what_the_ir_rejects() -> None:
    with pytest.raises(ShapeError, match="conv2d"):
        ConvSpec(1, 3, 4, 4, 8, 3, 3, groups=2)
    with pytest.raises(ShapeError, match="smaller than the dilated kernel"):
        ConvSpec(1, 3, 2, 2, 4, 3, 3)


def test_depthwise_weight_cannot_be_prepacked() -> None:
    spec = ConvSpec(1, 4, 8, 8, 4, 3, 3, groups=4)
    with pytest.raises(ValueError, match="depthwise"):
        build("t_conv_dw_pack", (spec,), lambda module, name: emit_conv_weight_prepack(module, name, spec))


@pytest.mark.parametrize("groups", [1, 4])
def test_conv2d_empty_batch_touches_nothing(groups) -> None:
    spec = ConvSpec(0, 4, 6, 6, 8, 3, 3, groups=groups)
    out = run_conv(spec, np.zeros(1, np.float32), np.ones(spec.weight_shape, np.float32))
    assert out.shape == (0, 8, 4, 4)


@pytest.mark.parametrize("case", [dict(n=2, c=5, h=12, w=13, c_out=7, kh=3, kw=3, padding=(1, 1)),
                                  dict(n=3, c=6, h=9, w=11, c_out=6, kh=3, kw=3, padding=(1, 1), groups=6)],
                         ids=["im2col", "depthwise"])
def test_conv2d_threads_claiming_at_once_match_one_thread_bit_for_bit(case) -> None:
    spec = ConvSpec(**case)
    x = RNG.standard_normal(spec.input_shape).astype(np.float32)
    w = RNG.standard_normal(spec.weight_shape).astype(np.float32)
    one = run_conv(spec, x, w)
    assert not np.isnan(one).any()
    for nthreads in (2, 3, 4):
        got = run_conv(spec, x, w, nthreads=nthreads, concurrent=True)
        assert got.tobytes() == one.tobytes(), f"{nthreads} threads"


def test_single_image_conv_splits_columns_on_two_threads_and_rows_on_more() -> None:
    """One image whose GEMM has many row panels but two column panels (the benchmark CNN's third layer at batch 1):
    up to two threads take the column split (1/1, each packing only its own im2col columns), more take the rows;
    every split covers the output once and gives the one-thread bits, claiming at once or one after another."""
    rows = 2 * HOST.nr // 8  # output rows of 8 pixels: two column panels
    spec = ConvSpec(1, 16, 2 * rows, 16, 11 * HOST.mr - 3, 3, 3, stride=(2, 2), padding=(1, 1), prepacked_weight=True)
    plan = conv2d_plan(spec)
    assert spec.gemm_dims[1] == 2 * HOST.nr and not plan.split_n and plan.pair is not None and plan.pair.split_n
    assert conv2d_scratch_bytes(spec, HOST, "im2col") >= max(plan.pair.scratch_bytes,
                                                             4 * (plan.a_floats + plan.b_floats))
    x = RNG.standard_normal(spec.input_shape).astype(np.float32)
    w = RNG.standard_normal(spec.weight_shape).astype(np.float32)
    one = run_conv(spec, x, w, which="im2col")
    assert_close(one, reference(spec, x, w, None),
                 dot_tolerance(spec.gemm_dims[2], reference(spec, np.abs(x), np.abs(w), None)), "paired split")
    for nthreads in (2, 3, 4):
        for concurrent in (False, True):
            got = run_conv(spec, x, w, nthreads=nthreads, concurrent=concurrent, which="im2col")
            assert got.tobytes() == one.tobytes(), f"{nthreads} threads, concurrent={concurrent}"


@pytest.mark.parametrize("prepacked", [False, True])
def test_single_image_conv_shares_its_im2col_panels_between_threads(prepacked) -> None:
    """One image, rows split (12 row panels, 8 column panels): with Tiling.private_bytes made 0 the im2col matrix is
    packed once per call into the shared area, its panels read from the input (the last one a tail, padding at every
    edge) by whichever thread claims them. The bits of one thread, claiming at once or one after another, and the
    reference's result. K blocks of 256 steps (as AVX2 and SSE hosts take): K = 432 is two of them."""
    tiling = replace(HOST, kc=256, private_bytes=0)
    spec = ConvSpec(1, 48, 8, HOST.nr + 1, 12 * HOST.mr - 3, 3, 3, padding=(1, 1), dilation=(1, 2),
                    prepacked_weight=prepacked)  # output rows of nr - 1 positions
    plan = conv2d_plan(spec, tiling)
    assert not plan.split_n and plan.share == "b" and plan.blocks > 1 and plan.pair is None
    x = RNG.standard_normal(spec.input_shape).astype(np.float32)
    w = RNG.standard_normal(spec.weight_shape).astype(np.float32)
    one = run_conv(spec, x, w, tiling=tiling, which="im2col", tag="shared")
    assert_close(one, reference(spec, x, w, None),
                 dot_tolerance(spec.gemm_dims[2], reference(spec, np.abs(x), np.abs(w), None)), "shared im2col")
    for nthreads in (2, 3, 4):
        for concurrent in (False, True):
            got = run_conv(spec, x, w, tiling=tiling, nthreads=nthreads, concurrent=concurrent, which="im2col",
                           tag="shared")
            assert got.tobytes() == one.tobytes(), f"{nthreads} threads, concurrent={concurrent}"
