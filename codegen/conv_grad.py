"""conv2d's two gradients (float32) on the GEMM driver, for the ConvSpec of the forward convolution.

Weight gradient, per group: dW (C_out/G x C_in/G*kH*kW) = A @ B with A[m, n*P + p] = g[n, m, p] (the output
gradient, P = OH*OW output positions) and B[n*P + p, (ci, kh, kw)] = the input element tap (kh, kw) of channel ci
reads at output position p of image n (0 in the padding): the im2col matrix transposed. The images are summed
inside the GEMM's K, so no per-image partial weight exists; both operands are packed straight from g and x
(OutputGradRows, InputColumns). Each thread takes one static share of dW's panels rather than claiming chunks:
every chunk packs the whole of A's (or B's) K range again for its few panels, and K is the long side here (all
images' positions), so chunks of a quarter of a share made two threads do more packing work than one.

Input gradient, per (image, group) unit a thread claims: cols (C_in/G*kH*kW x P) = W^T @ g, computed a block of
output rows at a time into the thread's scratch by a one-thread GEMM, then added back into the input planes by
col2im (the adjoint of the im2col read). The unit's planes are zeroed first, and only its thread writes them.

emit_conv2d_grad_weight emits `void name(ptr x, ptr g, ptr dw, ptr scratch, i64 tid, i64 nthreads, ptr claim)`,
emit_conv2d_grad_input `void name(ptr g, ptr w, ptr dx, ptr scratch, i64 tid, i64 nthreads, ptr claim)`.
"""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir

from .claims import claimed_chunks
from .conv import ConvSpec
from .gemm_driver import Problem, emit_problem, make_plan
from .gemm_kernel import F32, I32, Tiling, const64, elem_ptr, lane_mask, load_vec, store_vec
from .gemm_pack import Strided, gather, pack_a_panel, smax, smin, transpose
from .loops import PTR, I64, define_function, entry_builder, for_range, splat, vector_loop, vector_const, zeros

# Bytes of one input-gradient column block (C_in/G*kH*kW rows of whole output rows): about half of L2.
COLUMN_BLOCK_BYTES = 256 * 1024
_I32_LIMIT = 2 ** 31
_ARGS = [("tid", I64), ("nthreads", I64), ("claim", PTR)]


def _positions(spec: ConvSpec) -> int:
    return spec.out_shape[2] * spec.out_shape[3]


def _taps(spec: ConvSpec) -> int:
    return (spec.c // spec.groups) * spec.kh * spec.kw


# --- weight gradient ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OutputGradRows:
    """The output gradient of one group as the weight gradient's A: row m, step n*P + p is g[n, m, p]."""

    spec: ConvSpec
    batch_strides: tuple[int, ...]
    k_unit = 1

    def pack_a_block(self, builder: ir.IRBuilder, base: ir.Value, dst: ir.Value, i0: ir.Value, mc: ir.Value,
                     k0: ir.Value, kc: ir.Value, m: int, tiling: Tiling) -> None:
        """Steps [k0, k0+kc) of rows [i0, i0+mc) into MR-row panels at dst (rows past M left unwritten): the
        block's part in each image it spans is a row-major matrix (rows P apart), packed as strided A is."""
        mr, positions = tiling.mr, _positions(self.spec)
        if positions == 0:  # K is 0: nothing to pack
            return
        image, rows_apart = self.spec.c_out * positions, Strided(positions, 1)
        end = builder.add(k0, kc)
        with for_range(builder, i0, builder.add(i0, mc), mr, name="pa") as row:
            panel = elem_ptr(builder, dst, builder.mul(builder.sub(row, i0), kc))
            rows = smin(builder, const64(mr), builder.sub(const64(m), row))
            start = elem_ptr(builder, base, builder.mul(row, const64(positions)))
            images_end = builder.udiv(builder.add(end, const64(positions - 1)), const64(positions))
            with for_range(builder, builder.udiv(k0, const64(positions)), images_end, name="pa.n") as n:
                first_step = builder.mul(n, const64(positions))
                lo = smax(builder, k0, first_step)
                hi = smin(builder, end, builder.add(first_step, const64(positions)))
                source = elem_ptr(builder, start, builder.add(builder.mul(n, const64(image)),
                                                              builder.sub(lo, first_step)))
                part = elem_ptr(builder, panel, builder.mul(builder.sub(lo, k0), const64(mr)))
                pack_a_panel(builder, rows_apart, source, part, rows, m % mr, const64(0), builder.sub(hi, lo), tiling)


@dataclass(frozen=True)
class InputColumns:
    """The input of one group as the weight gradient's B: step n*P + p, column (ci, kh, kw) is the element that
    tap reads at output position p of image n, 0 where the window hangs over the padding. Packing it is a
    transpose of the im2col matrix: where runs of W steps lie along whole output rows, each tap's part of a row
    comes from one load (two at stride 2), W taps are transposed in registers; elsewhere each step gathers its
    taps."""

    spec: ConvSpec
    batch_strides: tuple[int, ...]
    k_unit: int = 1  # the vector width where _by_rows holds: every K block then starts on a whole run of W steps

    def pack_panel(self, builder: ir.IRBuilder, base: ir.Value, col: ir.Value, lanes: int, tiling: Tiling,
                   panel: ir.Value, k0: ir.Value, kc: ir.Value) -> None:
        """Pack steps [k0, k0+kc) of the `lanes` columns from `col` into the NR-wide panel rows at `panel`: W steps
        at a time from W-wide loads along an output row where the shape allows (_by_rows), the rest one step at a
        time."""
        done = const64(0)
        if self._by_rows(tiling.width):
            done = self._pack_rows(builder, base, col, lanes, tiling, panel, k0, kc)
        self._pack_steps(builder, base, col, lanes, tiling, panel, k0, done, kc)

    def _by_rows(self, w: int) -> bool:
        """Whether every run of W steps from a multiple of W lies along whole output rows of one image: OW a
        multiple of W (the run is W neighbours on one row) or a divisor of W (W/OW whole rows) with P a multiple of
        W; each row's part of a tap is one load (stride 1) or two and a deinterleave (stride 2)."""
        ow, positions = self.spec.out_shape[3], _positions(self.spec)
        return (w & (w - 1) == 0 and self.spec.stride[1] in (1, 2) and positions % w == 0
                and (ow % w == 0 or (ow > 1 and w % ow == 0)))

    def _pack_rows(self, builder: ir.IRBuilder, base: ir.Value, col: ir.Value, lanes: int, tiling: Tiling,
                   panel: ir.Value, k0: ir.Value, kc: ir.Value) -> ir.Value:
        """Whole runs of W steps (when k0 is a multiple of W): for each column the W input elements its tap reads
        along the output rows of the run (masked at the padding), W columns transposed in registers into W panel
        rows. Returns the first step left to _pack_steps."""
        s, w, nr = self.spec, tiling.width, tiling.nr
        ow_count = s.out_shape[3]
        segment = min(w, ow_count)  # the run's positions on one output row
        aligned = builder.icmp_unsigned("==", builder.urem(k0, const64(w)), const64(0))
        chunks = builder.select(aligned, builder.mul(builder.udiv(kc, const64(w)), const64(w)), const64(0))
        columns = [self._column_tap(builder, builder.add(col, const64(j))) for j in range(lanes)]
        blank = zeros(ir.VectorType(F32, w))
        with for_range(builder, 0, chunks, w, name="pb.rows") as k:
            image, oh, ow = self._step_position(builder, base, builder.add(k0, k))
            iw0 = builder.mul(ow, const64(s.stride[1]))
            ih0s = [builder.mul(builder.add(oh, const64(r)), const64(s.stride[0])) for r in range(w // segment)]
            for v in range(-(-lanes // w)):
                loaded = [self._tap_run(builder, image, columns[j], ih0s, iw0, segment) if j < lanes else blank
                          for j in range(v * w, v * w + w)]
                for t, value in enumerate(transpose(builder, loaded)):
                    row = builder.add(builder.mul(builder.add(k, const64(t)), const64(nr)), const64(v * w))
                    store_vec(builder, value, elem_ptr(builder, panel, row))
        return chunks

    def _tap_run(self, builder: ir.IRBuilder, image: ir.Value, column, ih0s: list, iw0: ir.Value,
                 segment: int) -> ir.Value:
        """The W elements one column's tap reads over a run: `segment` positions on each of the output rows whose
        first input rows are ih0s, from input column iw0 on; 0 over the padding."""
        s, stride = self.spec, self.spec.stride[1]
        plane, dh, dw, valid = column
        span = segment * stride
        iota = vector_const(ir.VectorType(I32, span), list(range(span)))
        iw = builder.add(iw0, dw)
        cols = builder.add(splat(builder, builder.trunc(iw, I32), span), iota)
        cols_inside = builder.icmp_unsigned("<", cols, _vconst(span, s.w))
        parts = []
        for ih0 in ih0s:
            ih = builder.add(ih0, dh)
            row_inside = builder.and_(valid, builder.icmp_unsigned("<", ih, const64(s.h)))
            mask = builder.and_(cols_inside, splat(builder, row_inside, span))
            start = elem_ptr(builder, image, builder.add(plane, builder.add(builder.mul(ih, const64(s.w)), iw)))
            value = load_vec(builder, start, span, mask)
            if stride == 2:
                value = builder.shuffle_vector(value, value, vector_const(ir.VectorType(I32, segment),
                                                                          [2 * t for t in range(segment)]))
            parts.append(value)
        while len(parts) > 1:  # rows side by side: pairs joined until one W-lane vector is left
            size = 2 * parts[0].type.count
            parts = [builder.shuffle_vector(parts[i], parts[i + 1], vector_const(ir.VectorType(I32, size),
                                                                                  list(range(size))))
                     for i in range(0, len(parts), 2)]
        return parts[0]

    def _step_position(self, builder: ir.IRBuilder, base: ir.Value, step: ir.Value) -> tuple[ir.Value, ...]:
        """Step n*P + p as its image's first element and the output row and column of position p."""
        s, positions, ow_count = self.spec, _positions(self.spec), self.spec.out_shape[3]
        n = builder.udiv(step, const64(positions))
        p = builder.sub(step, builder.mul(n, const64(positions)))
        oh = builder.udiv(p, const64(ow_count))
        ow = builder.sub(p, builder.mul(oh, const64(ow_count)))
        return elem_ptr(builder, base, builder.mul(n, const64(s.c * s.h * s.w))), oh, ow

    def _column_tap(self, builder: ir.IRBuilder, j: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
        """Column j's channel plane offset, its tap's row and column offsets (padding included) and whether j is a
        column of B, as scalars (i64, i1)."""
        s, window = self.spec, self.spec.kh * self.spec.kw
        ci = builder.udiv(j, const64(window))
        t = builder.sub(j, builder.mul(ci, const64(window)))
        kh = builder.udiv(t, const64(s.kw))
        kw = builder.sub(t, builder.mul(kh, const64(s.kw)))
        dh = builder.sub(builder.mul(kh, const64(s.dilation[0])), const64(s.padding[0]))
        dw = builder.sub(builder.mul(kw, const64(s.dilation[1])), const64(s.padding[1]))
        return builder.mul(ci, const64(s.h * s.w)), dh, dw, builder.icmp_unsigned("<", j, const64(_taps(s)))

    def _pack_steps(self, builder: ir.IRBuilder, base: ir.Value, col: ir.Value, lanes: int, tiling: Tiling,
                    panel: ir.Value, k0: ir.Value, k_from: ir.Value, kc: ir.Value) -> None:
        """Steps [k0+k_from, k0+kc), one at a time: a gather of each vector of columns' taps at the step's position."""
        s, w = self.spec, tiling.width
        taps = [self._lane_taps(builder, col, v, min(w, lanes - v * w), w) for v in range(-(-lanes // w))]
        with for_range(builder, k_from, kc, name="pb.k") as k:
            image, oh, ow = self._step_position(builder, base, builder.add(k0, k))
            ih = splat(builder, builder.trunc(builder.mul(oh, const64(s.stride[0])), I32), w)
            iw = splat(builder, builder.trunc(builder.mul(ow, const64(s.stride[1])), I32), w)
            row = elem_ptr(builder, panel, builder.mul(k, const64(tiling.nr)))
            for v, (plane, dh, dw, valid) in enumerate(taps):
                rows, cols = builder.add(ih, dh), builder.add(iw, dw)
                inside = builder.and_(valid, builder.and_(builder.icmp_unsigned("<", rows, _vconst(w, s.h)),
                                                          builder.icmp_unsigned("<", cols, _vconst(w, s.w))))
                index = builder.add(plane, builder.add(builder.mul(rows, _vconst(w, s.w)), cols))
                store_vec(builder, gather(builder, image, index, inside), elem_ptr(builder, row, v * w))

    def _lane_taps(self, builder: ir.IRBuilder, col: ir.Value, v: int, count: int, w: int):
        """Per lane of vector v: the channel's plane offset, the tap's row and column offsets (padding included)
        and whether the lane is a column of B."""
        s = self.spec
        j = builder.add(splat(builder, builder.trunc(builder.add(col, const64(v * w)), I32), w),
                        vector_const(ir.VectorType(I32, w), list(range(w))))
        window = s.kh * s.kw
        ci = builder.udiv(j, _vconst(w, window))
        t = builder.sub(j, builder.mul(ci, _vconst(w, window)))
        kh = builder.udiv(t, _vconst(w, s.kw))
        kw = builder.sub(t, builder.mul(kh, _vconst(w, s.kw)))
        dh = builder.sub(builder.mul(kh, _vconst(w, s.dilation[0])), _vconst(w, s.padding[0]))
        dw = builder.sub(builder.mul(kw, _vconst(w, s.dilation[1])), _vconst(w, s.padding[1]))
        valid = builder.and_(builder.icmp_unsigned("<", j, _vconst(w, _taps(s))), lane_mask(w, count))
        return builder.mul(ci, _vconst(w, s.h * s.w)), dh, dw, valid


def grad_weight_problem(spec: ConvSpec, slices: int = 1, width: int = 1) -> Problem:
    """The weight gradient as one GEMM per (image slice, group), summing over the slice's images and positions in
    K: `slices` equal runs of the batch, each writing its own partial weight gradient (slices=1: the whole); its K
    blocks cut at multiples of the vector `width` where the input is packed a run of positions at a time."""
    _check_offsets(spec)
    g, m, taps, positions = spec.groups, spec.c_out // spec.groups, _taps(spec), _positions(spec)
    per = spec.n // slices
    image, grads = spec.c * spec.h * spec.w, spec.c_out * positions
    a = OutputGradRows(spec, (per * grads, m * positions))
    b = InputColumns(spec, (per * image, (spec.c // g) * spec.h * spec.w))
    if b._by_rows(width):
        b = InputColumns(spec, b.batch_strides, width)
    return Problem(m, taps, per * positions, (slices, g), a, b, Strided(taps, 1, (g * m * taps, m * taps)))


def grad_weight_scratch_bytes(spec: ConvSpec, tiling: Tiling, slices: int = 1) -> int:
    return make_plan(grad_weight_problem(spec, slices, tiling.width), tiling).scratch_bytes


def emit_conv2d_grad_weight(module: ir.Module, name: str, spec: ConvSpec, tiling: Tiling,
                            slices: int = 1) -> ir.Function:
    """Emit the threaded weight-gradient kernel `name` (signature in the module docstring); with slices > 1 it
    writes each image slice's partial gradient, one after the other."""
    inner = emit_problem(module, f"{name}.gemm", grad_weight_problem(spec, slices, tiling.width), tiling)
    inner.linkage = "internal"
    fn = define_function(module, name, [("x", PTR), ("g", PTR), ("dw", PTR), ("scratch", PTR)] + _ARGS)
    x, g, dw, scratch, tid, nthreads, claim = fn.args
    builder = entry_builder(fn)
    # One slice: static shares (module doc). Several: the threads claim (slice, panel) units, a chunk at most one
    # slice's column block, so a chunk packs its own slice's K range once.
    null = ir.Constant(PTR, None)
    builder.call(inner, [g, x, dw, scratch, tid, nthreads, claim if slices > 1 else null, null])
    builder.ret_void()
    return fn


# --- input gradient -----------------------------------------------------------------------------------------


def _block_rows(spec: ConvSpec) -> int:
    """Output rows per column block: as many as fit COLUMN_BLOCK_BYTES, at least one, at most all."""
    row_bytes = 4 * _taps(spec) * spec.out_shape[3]
    return max(1, min(spec.out_shape[2], COLUMN_BLOCK_BYTES // max(row_bytes, 1)))


def _column_problem(spec: ConvSpec, rows: int) -> Problem:
    """cols (taps x rows*OW) = W^T (taps x C_out/G) @ g's block (C_out/G x rows*OW) of one image and group."""
    taps, columns = _taps(spec), rows * spec.out_shape[3]
    return Problem(taps, columns, spec.c_out // spec.groups, (), Strided(1, taps), Strided(_positions(spec), 1),
                   Strided(columns, 1))


def _block_shapes(spec: ConvSpec) -> list[int]:
    """The distinct block row counts: the full block, and the last one's when it is shorter."""
    rows, total = _block_rows(spec), spec.out_shape[2]
    return [rows] + ([total % rows] if total % rows else [])


def grad_input_scratch_bytes(spec: ConvSpec, tiling: Tiling) -> int:
    """Per thread: one column block, then the block GEMM's packing scratch (64-byte aligned)."""
    gemm = max(make_plan(_column_problem(spec, rows), tiling).scratch_bytes for rows in _block_shapes(spec))
    return _round64(4 * _taps(spec) * _block_rows(spec) * spec.out_shape[3]) + gemm


def emit_conv2d_grad_input(module: ir.Module, name: str, spec: ConvSpec, tiling: Tiling) -> ir.Function:
    """Emit the threaded input-gradient kernel `name` (signature in the module docstring)."""
    fn = define_function(module, name, [("g", PTR), ("w", PTR), ("dx", PTR), ("scratch", PTR)] + _ARGS)
    g, w, dx, scratch, tid, nthreads, claim = fn.args
    builder = entry_builder(fn)
    shapes = _block_shapes(spec)
    if spec.n * spec.c * spec.h * spec.w == 0 or _positions(spec) == 0:
        builder.ret_void()
        return fn
    gemms = {rows: emit_problem(module, f"{name}.gemm{rows}", _column_problem(spec, rows), tiling)
             for rows in shapes}
    for inner in gemms.values():
        inner.linkage = "internal"
    cols = scratch
    gemm_scratch = elem_ptr(builder, scratch, _round64(4 * _taps(spec) * shapes[0] * spec.out_shape[3]) // 4)
    with claimed_chunks(builder, claim, tid, nthreads, spec.n * spec.groups, name="units") as (u0, u1):
        with for_range(builder, u0, u1, name="unit") as unit:
            _unit(builder, spec, (g, w, dx, cols, gemm_scratch), unit, gemms, tiling.width)
    builder.ret_void()
    return fn


def _unit(builder: ir.IRBuilder, spec: ConvSpec, ptrs, unit: ir.Value, gemms: dict[int, ir.Function],
          width: int) -> None:
    """One (image, group): zero its input planes, then each column block's GEMM and col2im."""
    g, w, dx, cols, gemm_scratch = ptrs
    group = builder.urem(unit, const64(spec.groups))
    image = builder.udiv(unit, const64(spec.groups))
    m, cg, positions = spec.c_out // spec.groups, spec.c // spec.groups, _positions(spec)
    planes = elem_ptr(builder, dx, builder.mul(builder.add(builder.mul(image, const64(spec.c)),
                                                           builder.mul(group, const64(cg))), const64(spec.h * spec.w)))
    _zero(builder, planes, cg * spec.h * spec.w, width)
    if m == 0:
        return
    weights = elem_ptr(builder, w, builder.mul(group, const64(m * _taps(spec))))
    grads = elem_ptr(builder, g, builder.mul(unit, const64(m * positions)))
    null = ir.Constant(PTR, None)
    block, total = _block_shapes(spec)[0], spec.out_shape[2]

    def run(oh0: ir.Value, rows: int) -> None:
        source = elem_ptr(builder, grads, builder.mul(oh0, const64(spec.out_shape[3])))
        builder.call(gemms[rows], [weights, source, cols, gemm_scratch, const64(0), const64(1), null, null])
        _col2im(builder, spec, cols, planes, oh0, rows, width)
    with for_range(builder, 0, total - total % block, block, name="block") as oh0:
        run(oh0, block)
    if total % block:
        run(const64(total - total % block), total % block)


def _col2im(builder: ir.IRBuilder, spec: ConvSpec, cols: ir.Value, planes: ir.Value, oh0: ir.Value, rows: int,
            width: int) -> None:
    """Add each column-block row (ci, kh, kw) into input plane ci where that tap reads, output row by row."""
    s = spec
    ow_count = s.out_shape[3]
    columns = rows * ow_count
    with for_range(builder, 0, s.c // s.groups, name="ci") as ci, for_range(builder, 0, s.kh, name="kh") as kh:
        plane = elem_ptr(builder, planes, builder.mul(ci, const64(s.h * s.w)))
        tap_row = builder.add(builder.mul(ci, const64(s.kh * s.kw)), builder.mul(kh, const64(s.kw)))
        with for_range(builder, 0, rows, name="r") as r:
            ih = builder.add(builder.mul(builder.add(oh0, r), const64(s.stride[0])),
                             builder.sub(builder.mul(kh, const64(s.dilation[0])), const64(s.padding[0])))
            inside = builder.icmp_unsigned("<", ih, const64(s.h))
            with builder.if_then(inside):
                target_row = elem_ptr(builder, plane, builder.mul(ih, const64(s.w)))
                sources = [elem_ptr(builder, cols, builder.add(
                    builder.mul(builder.add(tap_row, const64(kw)), const64(columns)),
                    builder.mul(r, const64(ow_count)))) for kw in range(s.kw)]
                if s.stride[1] in (1, 2):
                    _add_taps(builder, s, sources, target_row, width)
                else:
                    for kw, source in enumerate(sources):
                        _add_row(builder, s, source, target_row, kw)


def _add_taps(builder: ir.IRBuilder, s: ConvSpec, sources: list, target: ir.Value, width: int) -> None:
    """target[ow*sw - pw + kw*dw] += sources[kw][ow] for every tap kw of one input row, stride 1 or 2: sw*W target
    elements at a time, each tap's W sources loaded (masked to the output row) and spread to the lanes they land
    on, summed in registers and added to the target once (one read-modify-write per chunk, not one per tap)."""
    stride, ow_count = s.stride[1], s.out_shape[3]
    span = stride * width
    iota = vector_const(ir.VectorType(I32, width), list(range(width)))
    blank = zeros(ir.VectorType(F32, width))

    def chunk(t0: ir.Value, valid: int) -> None:
        total = None
        for kw, source in enumerate(sources):
            shift = kw * s.dilation[1] - s.padding[1]
            first = shift % stride  # the chunk's first lane a source of this tap lands on
            ow0 = builder.add(builder.udiv(t0, const64(stride)), const64((first - shift) // stride))
            inside = builder.icmp_unsigned("<", builder.add(splat(builder, builder.trunc(ow0, I32), width), iota),
                                           _vconst(width, ow_count))
            value = load_vec(builder, elem_ptr(builder, source, ow0), width, inside)
            if stride == 2:
                spread = [(j - first) // 2 if j >= first and (j - first) % 2 == 0 else width for j in range(span)]
                value = builder.shuffle_vector(value, blank, vector_const(ir.VectorType(I32, span), spread))
            total = value if total is None else builder.fadd(total, value)
        at = elem_ptr(builder, target, t0)
        mask = lane_mask(span, valid) if valid < span else None
        store_vec(builder, builder.fadd(load_vec(builder, at, span, mask), total), at, mask)

    full = s.w - s.w % span
    with for_range(builder, 0, full, span, name="iw") as t0:
        chunk(t0, span)
    if s.w % span:
        chunk(const64(full), s.w % span)


def _add_row(builder: ir.IRBuilder, s: ConvSpec, source: ir.Value, target: ir.Value, kw: int) -> None:
    """target[ow*sw - pw + kw*dw] += source[ow] for the output columns whose tap lands inside the row, one at a
    time (strides above 2)."""
    shift = kw * s.dilation[1] - s.padding[1]
    lo = max(0, -(shift // s.stride[1]))  # the first ow with ow*sw + shift >= 0
    hi = min(s.out_shape[3], (s.w - 1 - shift) // s.stride[1] + 1)
    if hi <= lo:
        return
    with for_range(builder, lo, hi, name="ow") as ow:
        at = elem_ptr(builder, target, builder.add(builder.mul(ow, const64(s.stride[1])), const64(shift)))
        value = builder.load(elem_ptr(builder, source, ow), typ=F32, align=4)
        builder.store(builder.fadd(builder.load(at, typ=F32, align=4), value), at, align=4)


def _zero(builder: ir.IRBuilder, base: ir.Value, count: int, width: int) -> None:
    zero = zeros(ir.VectorType(F32, width))

    def body(i: ir.Value, lanes: int) -> None:
        at = elem_ptr(builder, base, i)
        builder.store(zero if lanes > 1 else ir.Constant(F32, 0.0), at, align=4)
    vector_loop(builder, 0, count, width, body, name="zero")


def _check_offsets(spec: ConvSpec) -> None:
    """The packers index within an image with i32 lanes."""
    if spec.c * spec.h * spec.w >= _I32_LIMIT or _positions(spec) * 64 >= _I32_LIMIT:
        raise ValueError(f"conv2d gradient: an image of {spec.c}x{spec.h}x{spec.w} is too large for 32-bit offsets")


def _vconst(width: int, value: int) -> ir.Constant:
    return vector_const(ir.VectorType(I32, width), [value] * width)


def _round64(nbytes: int) -> int:
    return -(-nbytes // 64) * 64


__all__ = ["emit_conv2d_grad_input", "emit_conv2d_grad_weight", "grad_input_scratch_bytes", "grad_weight_problem",
           "grad_weight_scratch_bytes"]
