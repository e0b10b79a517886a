"""conv2d (NCHW; stride, padding, dilation, groups) on one of three kernels, with the epilogue fused into the store.

Which kernel (conv_kernel): depthwise convolutions (one input channel per group) run on a direct vectorized kernel
(conv_depthwise.py); kernels of up to 3x3 taps with stride 1 along W and output rows of at least 4 vectors run on
the direct register-tiled kernel (conv_direct.py), which reads the input rows in place; everything else runs on
the GEMM over the implicit im2col matrix. The rule is measured (benchmarks/conv_layers.py, the benchmark CNN's
layers and others like them, float32, AVX2): with rows of 4 vectors and more (32 and 64 pixels wide) the direct
kernel is 1.1-1.35x the GEMM's speed, for 3x3 and 1x1 kernels, the 3-input-channel first layer included; with
rows of 1-3 vectors most of its vectors sit at a row's edge, where tap loads over the padding are masked, and it
runs at 0.7-1.0x; at stride 2 along W each input load also needs a shuffle (0.6-0.95x on AVX2), work the GEMM's
packing does once for all output channels. On AVX-512 that shuffle is one two-source permute, and with output rows of
whole vectors the direct kernel runs the CNN's stride-2 layer 2 (32 -> 64 channels, 16-wide rows) at 1.09-1.12x
the GEMM (batch 1 and 64 on one thread, batch 64 on two; the same layer forced to AVX2 0.90x, and its 8-wide
layer 3, half-vector rows, 0.5x): there it is chosen for stride 2 as well. The activations stay NCHW throughout:
the direct kernel's channel blocking is in its weights only, so no layout conversions are needed between a conv
and its neighbours.

The GEMM kernel: per image and group, out[co, p] = W[co, :] @ col[:, p] where p = oh*OW + ow runs over output
positions and the im2col matrix col (C_in/G*kH*kW rows) is never materialized: the GEMM's B packing reads its
panels straight from the input (conv_im2col.py). The weight is the GEMM's A operand, packed per K block or
pre-packed once (emit_conv_weight_prepack); the direct kernel reads the same pre-packed panels.

emit_conv2d emits `void name(ptr x, ptr w, ptr out, ptr scratch, i64 tid, i64 nthreads, ptr claim, ptr extra_0,
...)`, its threads claiming their work from the claim words at `claim` (null: a fixed share each; codegen/claims.py);
the epilogue sees TilePos(batch=image, row=output channel, col=output position oh*OW+ow, mask).
"""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir

from braze.ir.ops.conv import conv2d_output_shape

from .conv_depthwise import conv2d_arguments, emit_depthwise
from .conv_direct import MOST_TAPS, direct_covers, direct_preferred, emit_direct
from .conv_im2col import Im2col
from .gemm import default_tiling, emit_prepack_a, prepacked_a_floats
from .gemm_driver import Plan, Problem, emit_problem, make_plan
from .gemm_kernel import Epilogue, Tiling, TilePos, const64
from .gemm_pack import Prepacked, Strided
from .loops import define_function, entry_builder


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
    def gemm_dims(self) -> tuple[int, int, int]:
        """(M, N, K) of the per-image, per-group GEMM."""
        _, _, oh, ow = self.out_shape
        return self.c_out // self.groups, oh * ow, (self.c // self.groups) * self.kh * self.kw

    @property
    def flops(self) -> int:
        m, n, k = self.gemm_dims
        return 2 * m * n * k * self.groups * self.n


KERNELS = ("auto", "direct", "im2col")


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
    """Which kernel runs `spec` at `tiling`'s vector width: "depthwise", "direct" or "im2col" (`kernel` forces
    "direct" or "im2col" where that kernel covers the shape; "auto" applies the rule in the module docstring)."""
    if kernel not in KERNELS:
        raise ValueError(f"conv2d kernel must be one of {', '.join(KERNELS)}, got {kernel!r}")
    if spec.depthwise:
        return "depthwise"
    if kernel == "direct" and not direct_covers(spec):
        raise ValueError(f"the direct conv2d kernel covers kernels of up to {MOST_TAPS} taps and strides 1 and 2 "
                         f"along W, not {spec}")
    if kernel == "direct" or (kernel == "auto" and direct_preferred(spec, _tiling(tiling).width)):
        return "direct"
    return "im2col"


def conv2d_scratch_bytes(spec: ConvSpec, tiling: Tiling | None = None, kernel: str = "auto") -> int:
    """Bytes of per-thread scratch the conv2d kernel of `spec` needs."""
    if conv_kernel(spec, kernel, tiling) == "direct":
        return 0
    plan = conv2d_plan(spec, tiling)
    return 0 if plan is None else plan.scratch_bytes


def conv_weight_floats(spec: ConvSpec, tiling: Tiling | None = None) -> int:
    """Floats of the pre-packed weight of `spec` (the plain weight's size for depthwise convs)."""
    tiling = _tiling(tiling)
    if spec.depthwise:
        return spec.c_out * spec.kh * spec.kw
    m, _, k = spec.gemm_dims
    return spec.groups * prepacked_a_floats(m, k, tiling)


def emit_conv_weight_prepack(module: ir.Module, name: str, spec: ConvSpec,
                             tiling: Tiling | None = None) -> ir.Function:
    """Emit `void name(ptr w, ptr dst)` packing a (c_out, c/groups, kh, kw) weight for prepacked_weight=True."""
    tiling = _tiling(tiling)
    if spec.depthwise:
        raise ValueError("a depthwise conv2d reads its weight as it is; there is nothing to pre-pack")
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
    inner = emit_problem(module, f"{name}.gemm", conv_problem(spec, tiling), tiling, epilogue, n_extra)
    inner.linkage = "internal"
    fn = define_function(module, name, conv2d_arguments(n_extra))
    x, w, out, scratch, tid, nthreads, claim, *extra = fn.args
    builder = entry_builder(fn)
    builder.call(inner, [w, x, out, scratch, tid, nthreads, claim, *extra])
    builder.ret_void()
    return fn


__all__ = ["ConvSpec", "Im2col", "KERNELS", "conv2d_plan", "conv2d_scratch_bytes", "conv_kernel", "conv_problem",
           "conv_weight_floats", "emit_conv2d", "emit_conv_weight_prepack"]
