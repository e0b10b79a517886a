"""The channels conv2d kernel (codegen/conv_channels.py: output channels across the lanes, the tile transposed at the
store) against the IR's conv2d reference on edge shapes, and the rule that picks it. Tolerances as in test_conv.py
(test_conv.check: 8*sqrt(K+1)*2^-24 of the |x|*|w| convolution)."""
from __future__ import annotations

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F
from braze.codegen import conv_channels, host_target
from braze.codegen.cache_sizes import CacheSizes
from braze.codegen.conv import CHANNELS_MIN_K, ConvSpec, conv_kernel, conv_weight_floats
from braze.codegen.conv_channels import ChannelLayout
from braze.codegen.gemm import tiling_for
from tests.codegen.native import assert_close, dot_tolerance
from tests.codegen.test_conv import HOST, RNG, WIDTHS, check, reference, run_conv
from tests.codegen.test_conv_direct import HOST_FEATURES

W = HOST.width
P = ChannelLayout(ConvSpec(1, 1, 1, 1, 1, 1, 1), W).pixels

EDGES = [
    dict(n=1, c=1, h=1, w=1, c_out=1, kh=1, kw=1),
    dict(n=2, c=3, h=5, w=P - 1, c_out=W - 1, kh=3, kw=3, padding=(1, 1)),
    dict(n=1, c=2, h=6, w=P, c_out=W, kh=3, kw=3, padding=(1, 1)),
    dict(n=2, c=3, h=7, w=P + 1, c_out=W + 1, kh=3, kw=3, padding=(2, 2)),
    dict(n=1, c=7, h=11, w=28, c_out=3 * W, kh=3, kw=3, padding=(1, 1)),
    dict(n=1, c=5, h=9, w=2 * P + 3, c_out=4 * W, kh=3, kw=3, padding=(1, 1), stride=(2, 2)),
    dict(n=2, c=3, h=9, w=2 * P, c_out=3 * W, kh=3, kw=3, padding=(1, 1), stride=(2, 2)),  # whole tiles of 3 vectors
    dict(n=2, c=4, h=13, w=17, c_out=7 * W + 1, kh=3, kw=3, padding=(1, 1), stride=(2, 1)),
    dict(n=1, c=3, h=8, w=2 * P + 1, c_out=5, kh=3, kw=3, padding=(0, 2), stride=(1, 2)),
    dict(n=1, c=6, h=12, w=11, c_out=9, kh=3, kw=3, padding=(2, 2), dilation=(2, 2)),
    dict(n=2, c=6, h=9, w=10, c_out=3 * (W + 1), kh=3, kw=3, padding=(1, 1), groups=3),
    dict(n=1, c=8, h=9, w=P + 3, c_out=2 * W + 1, kh=1, kw=1),
    dict(n=1, c=3, h=7, w=W - 1, c_out=4, kh=1, kw=1, stride=(2, 2)),
    dict(n=1, c=3, h=19, w=23, c_out=W + 2, kh=7, kw=7, padding=(3, 3), stride=(2, 2)),
    dict(n=1, c=4, h=6, w=9, c_out=3, kh=3, kw=1, padding=(1, 0)),
    dict(n=1, c=4, h=2, w=9, c_out=3, kh=1, kw=3, padding=(2, 1)),
    dict(n=1, c=2, h=3, w=3, c_out=3, kh=5, kw=5, padding=(4, 4)),
    # short rows, several to a tile: 4x4 and 2x2 outputs, and rows of 3 and 1 pixels with a shorter last block
    dict(n=2, c=5, h=8, w=8, c_out=W + 3, kh=3, kw=3, padding=(1, 1), stride=(2, 2)),
    dict(n=1, c=6, h=2, w=2, c_out=2 * W, kh=3, kw=3, padding=(1, 1)),
    dict(n=1, c=4, h=11, w=3, c_out=5, kh=3, kw=3, padding=(1, 1)),
    dict(n=2, c=3, h=13, w=1, c_out=7, kh=3, kw=1, padding=(1, 0)),
]


def _id(case: dict) -> str:
    return "-".join(f"{k}{v}" for k, v in case.items())


@pytest.mark.parametrize("case", EDGES, ids=_id)
def test_channels_conv2d_matches_reference(case) -> None:
    check(ConvSpec(**case, prepacked_weight=True), nthreads=2, which="channels")


@pytest.mark.parametrize("width", WIDTHS)
def test_channels_conv2d_every_vector_width(width) -> None:
    """Rows of one pixel short of a tile, exactly one, one more and several; channels one short of a vector, one
    more, and as many vectors as a tile holds and one more."""
    tiling = tiling_for(width)
    layout = ChannelLayout(ConvSpec(1, 1, 1, 1, 1, 1, 1), width)
    for ow, c_out in ((layout.pixels - 1, width - 1), (layout.pixels, width + 1), (layout.pixels + 1, 3 * width),
                      (3 * layout.pixels + 2, 4 * width + 1), (layout.pixels // 2, width), (1, width + 1)):
        check(ConvSpec(2, 3, 5, ow, c_out, 3, 3, padding=(1, 1), prepacked_weight=True), tiling=tiling,
              which="channels")


def test_channel_tiles_split_evenly_and_rows_fill_their_tiles() -> None:
    """64 channels on AVX-512 as two tiles of 2 vectors, not 3 + 1; a 28-pixel row as 4 tiles of 7, not 8+8+8+4."""
    layout = ChannelLayout(ConvSpec(1, 32, 30, 30, 64, 3, 3, padding=(1, 0)), 16)
    assert (layout.channel_tiles, layout.vectors, layout.last_vectors) == (2, 2, 2)
    assert layout.column_tiles() == [(0, 7), (7, 7), (14, 7), (21, 7)]
    layout = ChannelLayout(ConvSpec(1, 32, 16, 16, 128, 3, 3, padding=(1, 1), stride=(2, 2)), 16)
    assert (layout.channel_tiles, layout.vectors, layout.last_vectors, layout.last_channels) == (3, 3, 2, 16)
    assert layout.column_tiles() == [(0, 8)] and layout.rows == 1
    # rows of at most half a tile share one: a 4x4 output in 2 blocks of 2 rows, 11 rows of 3 in 5 of 2 and 1 of 1
    assert (ChannelLayout(ConvSpec(1, 8, 4, 4, 16, 3, 3, padding=(1, 1)), 16).rows, ) == (2, )
    layout = ChannelLayout(ConvSpec(1, 8, 11, 3, 16, 3, 3, padding=(1, 1)), 16)
    assert (layout.rows, layout.row_blocks, layout.column_tiles()) == (2, 6, [(0, 3)])


def test_channels_weight_is_packed_by_tile_with_zero_channels_past_the_end() -> None:
    """The packed weight's size: every tile's vectors of W channels (the missing ones zero) per (input channel,
    tap), per group."""
    spec = ConvSpec(1, 6, 8, 8, 2 * 17, 3, 3, groups=2, prepacked_weight=True)
    layout = ChannelLayout(spec, 16)
    assert layout.blocks == 2 and conv_weight_floats(spec, tiling_for(16), "channels") == 2 * 2 * 3 * 9 * 16


def test_conv_kernel_rule_picks_channels_on_avx512_for_large_k() -> None:
    """K = C_in/groups*kH*kW of CHANNELS_MIN_K and more with a pre-packed weight, on AVX-512, or of CHANNELS_SHORT_K
    and more for a conv that is not a plain GEMM and fills its lanes; never with the weight read as it is, never on
    AVX2 (where its 4 x 2 tile won on some layers and lost on others, see conv.py)."""
    avx512, avx2 = tiling_for(16), tiling_for(8)
    big = ConvSpec(1, CHANNELS_MIN_K // 9 + 1, 16, 16, 64, 3, 3, stride=(2, 2), padding=(1, 1), prepacked_weight=True)
    small = ConvSpec(1, 3, 32, 32, 32, 3, 3, padding=(1, 1), prepacked_weight=True)
    assert conv_kernel(big, tiling=avx512) == "channels"
    assert conv_kernel(big, tiling=avx2) == "im2col"
    assert conv_kernel(small, tiling=avx512) != "channels"
    # K from 128 on where the conv is not a plain GEMM and fills 7/8 of its lanes
    short = dict(h=28, w=28, kh=3, kw=3, padding=(1, 1), prepacked_weight=True)
    assert conv_kernel(ConvSpec(1, 16, c_out=64, **short), tiling=avx512) == "channels"  # K = 144
    assert conv_kernel(ConvSpec(1, 16, c_out=24, **short), tiling=avx512) != "channels"  # 24 of 32 lanes
    assert conv_kernel(ConvSpec(1, 12, c_out=64, **short), tiling=avx512) != "channels"  # K = 108
    one = dict(h=28, w=28, c_out=64, kh=1, kw=1, prepacked_weight=True)
    assert conv_kernel(ConvSpec(1, 192, **one), tiling=avx512) != "channels"  # a plain GEMM of K = 192
    assert conv_kernel(ConvSpec(1, 128, **one, stride=(2, 2)), tiling=avx512) == "channels"
    plain = ConvSpec(1, 64, 16, 16, 64, 3, 3, stride=(2, 2), padding=(1, 1))
    assert conv_kernel(plain, tiling=avx512) != "channels"
    with pytest.raises(ValueError, match="pre-packed weight"):
        conv_kernel(plain, "channels", tiling=avx512)
    for empty in (ConvSpec(1, 64, 8, 8, 0, 3, 3, prepacked_weight=True), ConvSpec(1, 0, 8, 8, 64, 3, 3, groups=1,
                                                                                  prepacked_weight=True)):
        assert conv_kernel(empty, tiling=avx512) != "channels"  # nothing to tile: the others handle it


@pytest.mark.parametrize("shape", [(2, 300, 7, 7, 0), (2, 0, 7, 7, 40)], ids=["no-output-channels", "no-input"])
def test_compiled_conv_without_channels_matches_eager(shape) -> None:
    """A model's conv of K >= 256 with no output channels, or none to read, compiles and gives the empty or
    bias-only result eager does."""
    n, c, h, w, c_out = shape
    model = nn.Conv2d(c, c_out, 1 if c == 0 else 3, padding=1).eval()
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    with braze.no_grad():
        want = model(braze.tensor(x)).numpy()
    np.testing.assert_allclose(braze.compile(model, x)(x), want, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif("+avx2" not in HOST_FEATURES or "+fma" not in HOST_FEATURES, reason="needs an AVX2 host")
@pytest.mark.parametrize("cpu", ["haswell", "nehalem"])
def test_channels_conv2d_forced_targets_match_numpy(cpu, monkeypatch) -> None:
    """BRAZE_CPU=haswell (AVX2) and nehalem (SSE4.2, 4 lanes without FMA) on an AVX2 host."""
    monkeypatch.setenv("BRAZE_CPU", cpu)
    tiling = tiling_for(host_target().vector_width)
    assert tiling.width == (8 if cpu == "haswell" else 4)
    for case in (EDGES[3], EDGES[5], EDGES[9]):
        check(ConvSpec(**case, prepacked_weight=True), tiling=tiling, which="channels")


class _Block(nn.Module):
    """A strided conv with batch norm folded into it, then a conv whose store adds the residual and applies ReLU:
    both with K >= CHANNELS_MIN_K, so on AVX-512 both run on the channels kernel with their weights pre-packed."""

    def __init__(self) -> None:
        super().__init__()
        self.down = nn.Conv2d(32, 40, 3, stride=2, padding=1)
        self.norm = nn.BatchNorm2d(40)
        self.conv = nn.Conv2d(40, 40, 3, padding=1, bias=False)

    def forward(self, x):
        h = F.relu(self.norm(self.down(x)))
        return F.relu(self.conv(h) + h)


@pytest.mark.parametrize("threads", [1, 2])
def test_compiled_block_on_channel_tiles_equals_eager(threads) -> None:
    braze.manual_seed(3)
    model = _Block()
    model.norm.running_mean.data[...] = RNG.standard_normal(40).astype(np.float32)
    model.norm.running_var.data[...] = RNG.uniform(0.5, 2.0, 40).astype(np.float32)
    model = model.eval()
    x = RNG.standard_normal((2, 32, 13, 19)).astype(np.float32)
    with braze.no_grad():
        want = model(braze.tensor(x)).numpy()
    got = braze.compile(model, x, threads=threads)(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", [EDGES[3], EDGES[5], EDGES[9]], ids=["padded", "stride2", "grouped"])
def test_channels_conv2d_with_images_innermost_matches_reference(case, monkeypatch) -> None:
    """A weight larger than half of L2 (here: any, with L2 taken as 64 bytes) puts the images inside the channel
    tiles in the units' order; every output is still computed once, on one thread and on three claiming at once."""
    monkeypatch.setattr(conv_channels, "host_cache_sizes", lambda: CacheSizes(l2=64))
    spec = ConvSpec(**case, prepacked_weight=True)
    assert ChannelLayout(spec, W).images_inner
    x, w = (RNG.standard_normal(shape).astype(np.float32) for shape in (spec.input_shape, spec.weight_shape))
    one = run_conv(spec, x, w, which="channels", tag="images-inner")
    want = reference(spec, x, w, None)
    scale = reference(spec, np.abs(x), np.abs(w), None)
    assert_close(one, want, dot_tolerance(spec.gemm_dims[2], scale), "images inner")
    got = run_conv(spec, x, w, nthreads=3, concurrent=True, which="channels", tag="images-inner")
    assert got.tobytes() == one.tobytes()
