"""conv2d (NCHW; stride, padding, dilation, groups) on the GEMM, with the epilogue fused into the store.

Per image and group, out[co, p] = W[co, :] @ col[:, p] where p = oh*OW + ow runs over output positions and the
im2col matrix col (C_in/G*kH*kW rows) is never materialized: the GEMM's B packing reads its panels straight from
the input (zero where a window hangs over the padding), with masked loads of input row segments when the
stride along W is 1 and with masked gathers otherwise. The weight is the GEMM's A operand, packed per K block
or pre-packed once (emit_conv_weight_prepack). Depthwise convolutions (one input channel per group) use a
direct vectorized kernel instead (conv_depthwise.py).

emit_conv2d emits `void name(ptr x, ptr w, ptr out, ptr scratch, i64 tid, i64 nthreads, ptr extra_0, ...)`;
the epilogue sees TilePos(batch=image, row=output channel, col=output position oh*OW+ow, mask).
"""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir

from braze.ir.ops.conv import conv2d_output_shape

from .conv_depthwise import emit_depthwise
from .gemm import default_tiling, emit_prepack_a, prepacked_a_floats
from .gemm_driver import Plan, Problem, emit_problem, make_plan
from .gemm_kernel import I32, Epilogue, Tiling, TilePos, const64, elem_ptr, lane_mask, load_vec
from .gemm_pack import Prepacked, RowReader, Strided, gather
from .loops import I64, PTR, define_function, entry_builder, splat


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


@dataclass(frozen=True)
class Im2col:
    """The implicit im2col matrix of one image and group: row k = (ci, kh, kw), column p = (oh, ow)."""

    spec: ConvSpec
    batch_strides: tuple[int, ...]

    def panel(self, builder: ir.IRBuilder, base: ir.Value, col: ir.Value, lanes: int, tiling: Tiling) -> RowReader:
        """A reader of the panel's rows: masked loads of input row segments for stride-1 convolutions whose
        output rows are at least a vector wide, else one masked gather per vector."""
        if self.spec.stride[1] == 1 and self.spec.out_shape[3] >= tiling.width:
            return self._segments(builder, base, col, lanes, tiling.width)
        return self._gathers(builder, base, col, lanes, tiling.width)

    def _tap(self, b: ir.IRBuilder, base: ir.Value, k: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
        """Row k = (ci, kh, kw) of the im2col matrix: the input plane and the (row, column) offsets of the tap."""
        s = self.spec
        taps = s.kh * s.kw
        ci, tap = b.udiv(k, const64(taps)), b.urem(k, const64(taps))
        dh = b.mul(b.udiv(tap, const64(s.kw)), const64(s.dilation[0]))
        dw = b.mul(b.urem(tap, const64(s.kw)), const64(s.dilation[1]))
        return elem_ptr(b, base, b.mul(ci, const64(s.h * s.w))), dh, dw

    def _gathers(self, builder: ir.IRBuilder, base: ir.Value, col: ir.Value, lanes: int, w: int) -> RowReader:
        """Per panel, each lane's window origin; per row, one masked gather per vector."""
        s = self.spec
        ow_count = s.out_shape[3]
        vi32 = ir.VectorType(I32, w)
        first = builder.trunc(col, I32)
        origins = []
        for v in range(-(-lanes // w)):
            p = builder.add(_splat_i32(builder, builder.add(first, ir.Constant(I32, v * w)), w),
                            ir.Constant(vi32, list(range(w))))
            oh = builder.udiv(p, _vconst(w, ow_count))
            ow = builder.sub(p, builder.mul(oh, _vconst(w, ow_count)))
            ih = builder.sub(builder.mul(oh, _vconst(w, s.stride[0])), _vconst(w, s.padding[0]))
            iw = builder.sub(builder.mul(ow, _vconst(w, s.stride[1])), _vconst(w, s.padding[1]))
            origins.append((ih, iw, lane_mask(w, min(w, lanes - v * w))))

        def row(b: ir.IRBuilder, k: ir.Value) -> list:
            plane, dh, dw = self._tap(b, base, k)
            out = []
            for ih0, iw0, lane_ok in origins:
                ih = b.add(ih0, _splat_i32(b, b.trunc(dh, I32), w))
                iw = b.add(iw0, _splat_i32(b, b.trunc(dw, I32), w))
                inside = b.and_(b.icmp_unsigned("<", ih, _vconst(w, s.h)), b.icmp_unsigned("<", iw, _vconst(w, s.w)))
                index = b.add(b.mul(ih, _vconst(w, s.w)), iw)
                out.append(gather(b, plane, index, b.and_(inside, lane_ok)))
            return out
        return row

    def _segments(self, builder: ir.IRBuilder, base: ir.Value, col: ir.Value, lanes: int, w: int) -> RowReader:
        """Stride 1 along W: a vector's positions are one run of input columns, or two when it wraps to the
        next output row (never more, since output rows are at least W long): one or two masked loads."""
        s = self.spec
        ow_count = s.out_shape[3]
        wraps = ow_count % w != 0  # vectors start at multiples of W, so they wrap only if OW is not one
        iota = ir.Constant(ir.VectorType(I32, w), list(range(w)))
        pieces = []
        for v in range(-(-lanes // w)):
            p0 = builder.add(col, const64(v * w))
            oh = builder.udiv(p0, const64(ow_count))
            ow = builder.sub(p0, builder.mul(oh, const64(ow_count)))
            ih = builder.sub(builder.mul(oh, const64(s.stride[0])), const64(s.padding[0]))
            split = builder.sub(const64(ow_count), ow)  # lanes before the wrap
            in_first = builder.icmp_signed("<", iota, _splat_i32(builder, builder.trunc(split, I32), w))
            lane_ok = lane_mask(w, min(w, lanes - v * w))
            second = (builder.add(ih, const64(s.stride[0])), builder.sub(const64(-s.padding[1]), split),
                      builder.and_(builder.not_(in_first), lane_ok)) if wraps else None
            pieces.append(((ih, builder.sub(ow, const64(s.padding[1])), builder.and_(in_first, lane_ok)), second,
                           in_first))

        def segment(b: ir.IRBuilder, plane, dh, dw, piece) -> ir.Value:
            ih, iw, lanes_mask = piece
            ih = b.add(ih, dh)
            iw = b.add(iw, dw)
            columns = b.icmp_unsigned("<", b.add(_splat_i32(b, b.trunc(iw, I32), w), iota), _vconst(w, s.w))
            row_ok = splat(b, b.icmp_unsigned("<", ih, const64(s.h)), w)
            start = elem_ptr(b, plane, b.add(b.mul(ih, const64(s.w)), iw))
            return load_vec(b, start, w, b.and_(b.and_(columns, row_ok), lanes_mask))

        def row(b: ir.IRBuilder, k: ir.Value) -> list:
            plane, dh, dw = self._tap(b, base, k)
            out = []
            for first, second, in_first in pieces:
                value = segment(b, plane, dh, dw, first)
                if second is not None:
                    value = b.select(in_first, value, segment(b, plane, dh, dw, second))
                out.append(value)
            return out
        return row


def _vconst(width: int, value: int) -> ir.Constant:
    return ir.Constant(ir.VectorType(I32, width), [value] * width)


def _splat_i32(builder: ir.IRBuilder, value: ir.Value, width: int) -> ir.Value:
    vt = ir.VectorType(I32, width)
    one = builder.insert_element(ir.Constant(vt, ir.Undefined), value, ir.Constant(I32, 0))
    return builder.shuffle_vector(one, ir.Constant(vt, ir.Undefined), ir.Constant(vt, None))


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


def conv2d_scratch_bytes(spec: ConvSpec, tiling: Tiling | None = None) -> int:
    """Bytes of per-thread scratch the conv2d kernel of `spec` needs."""
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
                epilogue: Epilogue | None = None, n_extra: int = 0) -> ir.Function:
    """Emit the threaded conv2d kernel `name` (signature in the module docstring)."""
    tiling = _tiling(tiling)
    if spec.depthwise:
        return emit_depthwise(module, name, spec, tiling, epilogue, n_extra)
    inner = emit_problem(module, f"{name}.gemm", conv_problem(spec, tiling), tiling, epilogue, n_extra)
    inner.linkage = "internal"
    args = [("x", PTR), ("w", PTR), ("out", PTR), ("scratch", PTR), ("tid", I64), ("nthreads", I64)]
    fn = define_function(module, name, args + [(f"extra{i}", PTR) for i in range(n_extra)])
    x, w, out, scratch, tid, nthreads, *extra = fn.args
    builder = entry_builder(fn)
    builder.call(inner, [w, x, out, scratch, tid, nthreads, *extra])
    builder.ret_void()
    return fn


__all__ = ["ConvSpec", "Im2col", "conv2d_plan", "conv2d_scratch_bytes", "conv_problem", "conv_weight_floats",
           "emit_conv2d", "emit_conv_weight_prepack"]
