"""conv2d (NCHW; stride, padding, dilation, groups) on one of four kernels, with the epilogue fused into the store.

Which kernel (conv_kernel): depthwise convolutions (one input channel per group) run on a direct vectorized kernel
(conv_depthwise.py). On AVX-512, a conv whose weight is pre-packed (a model's) and whose dot products are at least
CHANNELS_MIN_K = 256 long (K = C_in/groups*kH*kW, up to 7x7 taps), or CHANNELS_SHORT_K = 128 for a conv that is not
a plain GEMM (more than one tap or a stride) and whose output channels fill 7/8 of their vectors, runs on the
channels kernel (conv_channels.py): output channels across the lanes, the input broadcast in place, the tile
transposed to NCHW at the store. Of the rest, kernels of up to 3x3 taps with stride 1 along W and output rows of at
least 4 vectors (on AVX-512: 2 whole vectors) run on the direct register-tiled kernel (conv_direct.py), which reads
the input rows in place with the pixels across the lanes (on AVX-512 not for 1x1 kernels); stride 2 takes it too on
AVX-512 where the output rows are whole vectors; everything else runs on the GEMM over the implicit im2col matrix.

The rules are measured (float32, one thread, batch 8 unless named, weight pre-packed; GFLOP/s of the nominal FLOPs
on a Zen 4 whose FMA peak is 113-116; benchmarks/conv_layers.py times the benchmark CNN's layers): on AVX-512 the
channels kernel ran ResNet-style 3x3 layers at 114-126 against 77-105 for the GEMM and 31-98 for the direct kernel
(64 channels at 56x56 to 512 at 7x7, stride 1 and 2: a row of 7 or 14 pixels fills its tiles, where it is half a
vector for the direct kernel), 1x1 layers of 256-2048 input channels at 95-112 against 78-95, the CNN's stride-2
layers 2 and 3 (K = 288, 576) at batch 64 1.07x the direct kernel and 1.12x the GEMM; but with K = 27 (3 input
channels, 3x3) it ran 75-80 against 90-94, its store's transpose costing as much as a few input channels' FMAs.
Between K = 128 and 256 it won where the GEMM packs a real im2col matrix (3x3 layers of K = 144-216 with 48-96
output channels: 106-110 against 82-101; a 1x1 stride-2 layer of K = 128: 95 against 79), tied or lost where the
conv is a plain GEMM (1x1 stride 1, K = 128-192: 79-100 against 78-106) or a third of its last vector is empty (24
output channels, K = 144: 83 against 85); below K = 128 the GEMM won. Forced to AVX2 (16 registers: a 4 x 2 tile of
8 lanes) it ran 0.85-1.25x the GEMM on those layers, ahead on some 3x3 layers, behind on 1x1 and on the CNN's layer
2, so AVX2 keeps the older rule. That rule, from AVX2: with output rows of 4 vectors and more (32 and 64 pixels
wide) the direct kernel is 1.1-1.35x the GEMM's speed, for 3x3 and 1x1 kernels, the 3-input-channel first layer
included; with rows of 1-3 vectors most of its vectors sit at a row's edge, where tap loads over the padding are
masked, and it runs at 0.7-1.0x; at stride 2 along W each input load also needs a shuffle (0.6-0.95x on AVX2), work
the GEMM's packing does once for all output channels. On AVX-512 that shuffle is one two-source permute, and with
output rows of whole vectors the direct kernel ran the CNN's stride-2 layer 2 at 1.09-1.12x the GEMM: there it is
chosen for stride 2 as well when the channels kernel is not. On AVX-512 1x1 kernels ran on it at 56-75 GFLOP/s
against 67-94 for the GEMM (K = 16-64, rows of 32-112 pixels), so they go to the GEMM there, while 3x3 kernels
with rows of 2-3 whole vectors (32 and 48 pixels, 3-16 input channels) ran at 1.00-1.14x the GEMM (the CNN's first
layer 1.04-1.14x at batch 1, 8 and 64), so it takes rows of 2 whole vectors and more there. The activations stay
NCHW throughout: the direct and channels kernels block the channels in their weights only, so no layout conversions
are needed between a conv and its neighbours. These rules were measured on a few machines; with BRAZE_TUNE=1 the
kernel measured fastest on this one for a shape (conv_search.py, recorded per CPU by conv_tuning.py) replaces them.

The GEMM kernel: per image and group, out[co, p] = W[co, :] @ col[:, p] where p = oh*OW + ow runs over output
positions and the im2col matrix col (C_in/G*kH*kW rows) is never materialized: the GEMM's B packing reads its
panels straight from the input (conv_im2col.py). The weight is the GEMM's A operand, packed per K block or
pre-packed once (emit_conv_weight_prepack); the direct kernel reads the same pre-packed panels, the channels kernel
its own blocks (weight_kernel names the layout a pre-packed weight takes).

emit_conv2d emits `void name(ptr x, ptr w, ptr out, ptr scratch, i64 tid, i64 nthreads, ptr claim, ptr share,
ptr extra_0, ...)`, its threads claiming their work from the claim words at `claim` (null: a fixed share each;
codegen/claims.py) and, on the GEMM path, sharing the packing of the input's panels through the share words at
`share` (null: none; codegen/gemm_driver.py);
the epilogue sees TilePos(batch=image, row=output channel, col=output position oh*OW+ow, mask).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import llvmlite.ir as ir

from braze.ir.ops.conv import conv2d_output_shape

from . import conv_tuning
from .conv_channels import ChannelLayout, channels_covers, emit_channels, emit_channels_prepack
from .conv_depthwise import conv2d_arguments, emit_depthwise
from .conv_direct import MOST_TAPS, direct_covers, direct_preferred, emit_direct
from .conv_im2col import Im2col
from .gemm import default_tiling, emit_prepack_a, prepacked_a_floats
from .gemm_driver import Plan, Problem, emit_problem, make_plan
from .gemm_kernel import Epilogue, Tiling, TilePos, const64
from .gemm_pack import Prepacked, Strided
from .loops import define_function, entry_builder
from .target import host_target


@dataclass(frozen=True)
class ConvSpec:
    """conv2d of an (n, c, h, w) input with a (c_out, c/groups, kh, kw) weight; shapes checked by the IR's rule."""

    n: int
    c: int
    h: int
    w: int
    c_out: int
    kh: int
    kw: int
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    prepacked_weight: bool = False

    def __post_init__(self) -> None:
        for name in ("stride", "padding", "dilation"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        conv2d_output_shape("conv2d", self.input_shape, self.weight_shape, self.stride, self.padding,
                            self.dilation, self.groups)

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        return (self.n, self.c, self.h, self.w)

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        return (self.c_out, self.c // self.groups, self.kh, self.kw)

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        return conv2d_output_shape("conv2d", self.input_shape, self.weight_shape, self.stride, self.padding,
                                   self.dilation, self.groups)

    @property
    def depthwise(self) -> bool:
        """One input channel per group (and more than one group): the direct kernel's case."""
        return self.groups > 1 and self.groups == self.c

    @property
    def group_in(self) -> int:
        return self.c // self.groups

    @property
    def group_out(self) -> int:
        return self.c_out // self.groups

    @property
    def k(self) -> int:
        """Length of each output's dot product, C_in/groups*kH*kW: the GEMM's K."""
        return self.group_in * self.kh * self.kw

    @property
    def gemm_dims(self) -> tuple[int, int, int]:
        """(M, N, K) of the per-image, per-group GEMM."""
        _, _, oh, ow = self.out_shape
        return self.c_out // self.groups, oh * ow, (self.c // self.groups) * self.kh * self.kw

    @property
    def flops(self) -> int:
        m, n, k = self.gemm_dims
        return 2 * m * n * k * self.groups * self.n


KERNELS = ("auto", "direct", "channels", "im2col")


def _tiling(tiling: Tiling | None) -> Tiling:
    return tiling or default_tiling()


def conv_problem(spec: ConvSpec, tiling: Tiling) -> Problem:
    """conv2d as a GEMM batched over (image, group)."""
    m, n, k = spec.gemm_dims
    g = spec.groups
    if spec.prepacked_weight:
        a: Strided | Prepacked = Prepacked((0, prepacked_a_floats(m, k, tiling)))
    else:
        a = Strided(k, 1, (0, m * k))
    b = Im2col(spec, (spec.c * spec.h * spec.w, (spec.c // g) * spec.h * spec.w))
    c = Strided(n, 1, (spec.c_out * n, m * n))

    def pos_map(builder: ir.IRBuilder, batch, row, col, mask, args) -> TilePos:
        if g == 1:
            return TilePos(batch, row, col, mask, tuple(args))
        image = builder.udiv(batch, const64(g))
        group = builder.urem(batch, const64(g))
        return TilePos(image, builder.add(builder.mul(group, const64(m)), row), col, mask, tuple(args))
    return Problem(m, n, k, (spec.n, g), a, b, c, pos_map)


def conv2d_plan(spec: ConvSpec, tiling: Tiling | None = None) -> Plan | None:
    """The GEMM plan of a conv2d, or None for a depthwise conv (direct kernel, no GEMM)."""
    if spec.depthwise:
        return None
    tiling = _tiling(tiling)
    return make_plan(conv_problem(spec, tiling), tiling)


def conv_kernel(spec: ConvSpec, kernel: str = "auto", tiling: Tiling | None = None) -> str:
    """Which kernel runs `spec` at `tiling`'s vector width: "depthwise", "direct", "channels" or "im2col" (`kernel`
    forces "direct", "channels" or "im2col" where that kernel covers the shape; "auto" applies the rule in the
    module docstring). "channels" reads the weight pre-packed: a spec without prepacked_weight never runs on it."""
    if kernel not in KERNELS:
        raise ValueError(f"conv2d kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
    if spec.depthwise:
        return "depthwise"
    width = _tiling(tiling).width
    if kernel == "direct" and not direct_covers(spec):
        raise ValueError(f"the direct conv2d kernel covers kernels of up to {MOST_TAPS} taps and strides 1 and 2 "
                         f"along W, not {spec}")
    if kernel == "channels" and not channels_covers(spec, width):
        raise ValueError(f"the channels conv2d kernel needs a pre-packed weight, input and output channels and a "
                         f"kernel of at most 7x7 taps, not {spec}")
    if kernel != "auto":
        return kernel
    tuned = _tuned(spec, width)
    if tuned is not None:
        return tuned
    if channels_preferred(spec, width):
        return "channels"
    return "direct" if direct_preferred(spec, width) else "im2col"


def _tuned(spec: ConvSpec, width: int) -> str | None:
    """The kernel a tuning search recorded for `spec` on this machine (conv_tuning.py: only with BRAZE_TUNE=1),
    when it covers the shape."""
    if not conv_tuning.active():
        return None
    tuned = conv_tuning.tuned_kernel(spec, width, host_target().identity)
    if (tuned == "direct" and not direct_covers(spec)) or (tuned == "channels" and not channels_covers(spec, width)):
        return None
    return tuned


# The channels kernel's rule (measured, see the module doc): AVX-512, and K = C_in/groups*kH*kW from CHANNELS_MIN_K
# on; from CHANNELS_SHORT_K on where the conv is not a plain GEMM (1x1, stride 1) and fills 7/8 of its lanes.
CHANNELS_WIDTH = 16
CHANNELS_MIN_K = 256
CHANNELS_SHORT_K = 128


def channels_preferred(spec: ConvSpec, width: int) -> bool:
    """Whether the channels kernel is the faster one for `spec` at `width` lanes (the rule in the module doc)."""
    if width < CHANNELS_WIDTH or not channels_covers(spec, width):
        return False
    if spec.k >= CHANNELS_MIN_K:
        return True
    plain_gemm = spec.kh * spec.kw == 1 and spec.stride == (1, 1)
    filled = spec.group_out / (-(-spec.group_out // width) * width)
    return spec.k >= CHANNELS_SHORT_K and not plain_gemm and filled >= 7 / 8


def conv2d_scratch_bytes(spec: ConvSpec, tiling: Tiling | None = None, kernel: str = "auto") -> int:
    """Bytes of per-thread scratch the conv2d kernel of `spec` needs."""
    if conv_kernel(spec, kernel, tiling) in ("direct", "channels"):
        return 0
    plan = conv2d_plan(spec, tiling)
    return 0 if plan is None else plan.scratch_bytes


def conv2d_shared_bytes(spec: ConvSpec, tiling: Tiling | None = None, kernel: str = "auto") -> int:
    """Bytes of the call's shared area the conv2d kernel of `spec` uses on several threads (codegen/gemm.py)."""
    if conv_kernel(spec, kernel, tiling) in ("direct", "channels"):
        return 0
    plan = conv2d_plan(spec, tiling)
    return 0 if plan is None else plan.shared_bytes


def weight_kernel(spec: ConvSpec, tiling: Tiling | None = None, kernel: str = "auto") -> str:
    """The kernel that will read `spec`'s weight once it is pre-packed: it decides the packed layout."""
    return conv_kernel(replace(spec, prepacked_weight=True), kernel, tiling)


def conv_weight_floats(spec: ConvSpec, tiling: Tiling | None = None, kernel: str = "auto") -> int:
    """Floats of the pre-packed weight of `spec` (the plain weight's size for depthwise convs)."""
    tiling = _tiling(tiling)
    if spec.depthwise:
        return spec.c_out * spec.kh * spec.kw
    if weight_kernel(spec, tiling, kernel) == "channels":
        return ChannelLayout(spec, tiling.width).weight_floats
    m, _, k = spec.gemm_dims
    return spec.groups * prepacked_a_floats(m, k, tiling)


def emit_conv_weight_prepack(module: ir.Module, name: str, spec: ConvSpec, tiling: Tiling | None = None,
                             kernel: str = "auto") -> ir.Function:
    """Emit `void name(ptr w, ptr dst)` packing a (c_out, c/groups, kh, kw) weight for prepacked_weight=True, in
    the layout of the kernel that will read it (weight_kernel)."""
    tiling = _tiling(tiling)
    if spec.depthwise:
        raise ValueError("a depthwise conv2d reads its weight as it is; there is nothing to pre-pack")
    if weight_kernel(spec, tiling, kernel) == "channels":
        return emit_channels_prepack(module, name, spec, tiling.width)
    m, _, k = spec.gemm_dims
    return emit_prepack_a(module, name, m, k, Strided(k, 1, (m * k,)), tiling, batch=(spec.groups,))


def emit_conv2d(module: ir.Module, name: str, spec: ConvSpec, tiling: Tiling | None = None,
                epilogue: Epilogue | None = None, n_extra: int = 0, kernel: str = "auto") -> ir.Function:
    """Emit the threaded conv2d kernel `name` (signature in the module docstring) on the kernel conv_kernel picks."""
    tiling = _tiling(tiling)
    chosen = conv_kernel(spec, kernel, tiling)
    if chosen == "depthwise":
        return emit_depthwise(module, name, spec, tiling, epilogue, n_extra)
    if chosen == "direct":
        return emit_direct(module, name, spec, tiling, epilogue, n_extra, conv2d_arguments(n_extra))
    if chosen == "channels":
        return emit_channels(module, name, spec, tiling, epilogue, n_extra, conv2d_arguments(n_extra))
    inner = emit_problem(module, f"{name}.gemm", conv_problem(spec, tiling), tiling, epilogue, n_extra)
    inner.linkage = "internal"
    fn = define_function(module, name, conv2d_arguments(n_extra))
    x, w, out, scratch, tid, nthreads, claim, share, *extra = fn.args
    builder = entry_builder(fn)
    builder.call(inner, [w, x, out, scratch, tid, nthreads, claim, share, *extra])
    builder.ret_void()
    return fn


__all__ = ["CHANNELS_MIN_K", "CHANNELS_SHORT_K", "CHANNELS_WIDTH", "ConvSpec", "Im2col", "KERNELS",
           "channels_preferred", "conv2d_plan", "conv2d_scratch_bytes", "conv2d_shared_bytes", "conv_kernel",
           "conv_problem", "conv_weight_floats", "emit_conv2d", "emit_conv_weight_prepack", "weight_kernel"]
