"""Depthwise conv2d (one input channel per group) as a direct vectorized kernel: a GEMM would have K = kH*kW.

Each unit of work is one (image, output channel) plane. Its kH*kW weights are broadcast into registers once;
output rows are produced `rows` at a time, `vecs` vectors of W positions across, so rows*vecs independent FMA
chains hide the FMA latency. Input rows are read with masked loads (stride 1: lanes outside the input or past
the output row are never touched) or masked gathers (other strides).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import llvmlite.ir as ir

from .claims import claimed_chunks
from .gemm_kernel import (F32, I32, I64, Epilogue, Tiling, TilePos, const64, elem_ptr, load_vec, mul_add,
                          store_vec, vec_type)
from .gemm_pack import gather
from .loops import PTR, define_function, entry_builder, for_range, splat, vector_const, zeros

if TYPE_CHECKING:
    from .conv import ConvSpec


def _tile(spec: ConvSpec, width: int) -> tuple[int, int]:
    """(rows, vecs): output rows and vectors per row handled together (about 8 accumulators)."""
    _, _, oh, ow = spec.out_shape
    vecs = min(-(-ow // width), 4)
    return max(1, min(oh, 8 // vecs)), vecs


def conv2d_arguments(n_extra: int) -> list[tuple[str, ir.Type]]:
    """The parameters of a conv2d kernel (codegen/conv.py) with `n_extra` epilogue operands."""
    args = [("x", PTR), ("w", PTR), ("out", PTR), ("scratch", PTR), ("tid", I64), ("nthreads", I64), ("claim", PTR),
            ("share", PTR)]
    return args + [(f"extra{i}", PTR) for i in range(n_extra)]


def emit_depthwise(module: ir.Module, name: str, spec: ConvSpec, tiling: Tiling, epilogue: Epilogue | None,
                   n_extra: int) -> ir.Function:
    """Emit `void name(x, w, out, scratch, tid, nthreads, claim, share, extra...)` for a depthwise conv2d (scratch and
    share unused),
    whose threads claim (image, output channel) planes."""
    fn = define_function(module, name, conv2d_arguments(n_extra))
    x, w, out, _, tid, nthreads, claim, _, *extra = fn.args
    builder = entry_builder(fn)
    with claimed_chunks(builder, claim, tid, nthreads, spec.n * spec.c_out, name="planes",
                        work=spec.flops) as (u0, u1):
        with for_range(builder, u0, u1, name="plane") as unit:
            _plane(builder, spec, tiling, (x, w, out), unit, tuple(extra), epilogue)
    builder.ret_void()
    return fn


def _plane(builder: ir.IRBuilder, spec: ConvSpec, t: Tiling, ptrs, unit, extra, epilogue) -> None:
    """One (image, output channel) plane: the weights in registers, then row blocks of the output."""
    x, w, out = ptrs
    _, _, oh_count, ow_count = spec.out_shape
    mult = spec.c_out // spec.c
    image, channel = builder.udiv(unit, const64(spec.c_out)), builder.urem(unit, const64(spec.c_out))
    source = builder.add(builder.mul(image, const64(spec.c)), builder.udiv(channel, const64(mult)))
    x_plane = elem_ptr(builder, x, builder.mul(source, const64(spec.h * spec.w)))
    out_plane = elem_ptr(builder, out, builder.mul(unit, const64(oh_count * ow_count)))
    w_plane = elem_ptr(builder, w, builder.mul(channel, const64(spec.kh * spec.kw)))
    taps = [[splat(builder, builder.load(elem_ptr(builder, w_plane, i * spec.kw + j), typ=F32, align=4), t.width)
             for j in range(spec.kw)] for i in range(spec.kh)]
    ctx = (spec, t, x_plane, out_plane, taps, (image, channel, extra), epilogue)
    rows, vecs = _tile(spec, t.width)
    full_rows = oh_count - oh_count % rows
    with for_range(builder, 0, full_rows, rows, name="oh") as oh:
        _row_block(builder, ctx, oh, rows, vecs)
    if full_rows < oh_count:
        with for_range(builder, full_rows, oh_count, name="oh.rest") as oh:
            _row_block(builder, ctx, oh, 1, vecs)


def _row_block(builder: ir.IRBuilder, ctx, oh0, rows: int, vecs: int) -> None:
    """Output rows [oh0, oh0+rows), all columns: full tiles of `vecs` vectors in a loop, then one static tile of
    just the vectors the rest of the row needs (masked loads of vectors with no lane set are far from free)."""
    spec, t = ctx[0], ctx[1]
    ow_count = spec.out_shape[3]
    w = t.width
    step = vecs * w
    full = ow_count - ow_count % step
    with for_range(builder, 0, full, step, name="ow") as ow0:
        _tile_block(builder, ctx, oh0, ow0, const64(step), rows, vecs)
    if full < ow_count:
        rest = ow_count - full
        _tile_block(builder, ctx, oh0, const64(full), const64(rest), rows, -(-rest // w))


def _lanes_mask(builder: ir.IRBuilder, first: ir.Value, limit: ir.Value, width: int) -> ir.Value:
    """Lanes i with first + i < limit (i64 scalars)."""
    vt = ir.VectorType(I64, width)
    iota = vector_const(vt, list(range(width)))
    lhs = builder.add(splat(builder, first, width), iota)
    return builder.icmp_signed("<", lhs, splat(builder, limit, width))


def _tile_block(builder: ir.IRBuilder, ctx, oh0, ow0, lanes, rows: int, vecs: int) -> None:
    spec, t, x_plane, out_plane, taps, (image, channel, extra), epilogue = ctx
    _, _, _, ow_count = spec.out_shape
    w = t.width
    sh, sw = spec.stride
    ph, pw = spec.padding
    dh, dw = spec.dilation
    out_masks = [_lanes_mask(builder, const64(v * w), lanes, w) for v in range(vecs)]
    acc = [[zeros(vec_type(w))] * vecs for _ in range(rows)]
    for kw in range(spec.kw):
        masks, offsets = [], []
        for v in range(vecs):
            ow_first = builder.add(ow0, const64(v * w))
            iw_first = builder.add(builder.mul(ow_first, const64(sw)), const64(kw * dw - pw))
            iw = builder.add(splat(builder, builder.trunc(iw_first, I32), w),
                             vector_const(ir.VectorType(I32, w), [i * sw for i in range(w)]))
            inside = builder.icmp_unsigned("<", iw, vector_const(ir.VectorType(I32, w), [spec.w] * w))
            masks.append(builder.and_(inside, out_masks[v]))
            offsets.append(iw_first)
        for r in range(rows):
            for kh in range(spec.kh):
                ih = builder.add(builder.mul(builder.add(oh0, const64(r)), const64(sh)), const64(kh * dh - ph))
                row_ok = builder.icmp_unsigned("<", ih, const64(spec.h))
                row_ptr = elem_ptr(builder, x_plane, builder.mul(ih, const64(spec.w)))
                for v in range(vecs):
                    mask = builder.and_(masks[v], splat(builder, row_ok, w))
                    value = _load_row(builder, row_ptr, offsets[v], mask, sw, w)
                    acc[r][v] = mul_add(builder, value, taps[kh][kw], acc[r][v], t.fma)
    for r in range(rows):
        oh = builder.add(oh0, const64(r))
        for v in range(vecs):
            col = builder.add(builder.mul(oh, const64(ow_count)), builder.add(ow0, const64(v * w)))
            value = acc[r][v]
            if epilogue is not None:
                value = epilogue(builder, value, TilePos(image, channel, col, out_masks[v], extra))
            store_vec(builder, value, elem_ptr(builder, out_plane, col), out_masks[v])


def _load_row(builder: ir.IRBuilder, row_ptr, iw_first, mask, stride: int, width: int) -> ir.Value:
    """Input elements iw_first + i*stride of one row for the lanes in `mask` (zero elsewhere)."""
    start = elem_ptr(builder, row_ptr, iw_first)
    if stride == 1:
        return load_vec(builder, start, width, mask)
    return gather(builder, start, vector_const(ir.VectorType(I32, width), [i * stride for i in range(width)]), mask)


__all__ = ["emit_depthwise"]
