"""The blocked, threaded GEMM loop nest around the micro-kernel (the GotoBLAS/BLIS structure).

For each batch and each chunk of panels a thread claims: column blocks of NC, K blocks of KC (B block packed into
scratch), row blocks of MC (A block packed into scratch), then MR x NR tiles handed to the micro-kernel (column
panels outer, or row panels outer where B's panels are too wide for L1: Tiling.rows_outer). The units
of work are (batch, panel) pairs in row-major order, where a panel is NR columns (or MR rows when the matrix has
more row panels than column panels); the threads claim them in chunks from the call's claim words
(codegen/claims.py), so a slower thread computes fewer, and each thread packs what it reads. A chunk may span
several column (row) blocks: every chunk packs all of the operand the split does not cut, so chunks capped at one
block (as they were) packed that operand more often where it is too large to keep: SGEMM n = 3072 and 4096 on two
threads ran 180 and 185 GFLOP/s with them, 193 and 195 without (n <= 2048 and the benchmark models alike).
A thread claims several chunks of a problem, and every chunk reads all of the operand the split does not cut (all
of B when rows are split, all of A when columns are). In a problem of one batch, when that operand packed whole fits
in one core's L2 cache (Tiling.private_bytes), a thread packs each of its blocks once into its scratch and keeps them
for its later chunks (SGEMM n=512 on two threads packed B eight times per call, as many times as there are chunks);
a chunk that covers a whole batch packs into one block's space, as without keeping. A larger one (up to
SHARED_BYTES) is packed once per call into the call's shared area on more than one thread (codegen/abi.py: shared
packing), its (K block, panel) units claimed from the share words as the tiles' panels are, and the threads compute
their chunks once all of it is packed (each waits for the count of units packed, after packing what it claimed).
SGEMM on two Zen 4 threads (1 MB L2), the variants compiled in one process and interleaved, median GFLOP/s: n = 512
(B 1 MB) 214 kept, 213 shared; n = 768 209-210 kept, 212 shared; n = 1024 211 kept (each thread then kept B up to
16 MB), 214 shared; n = 1536 212 against 216-218; n = 2048 207-208 against 209; n = 3072 and 4096, whose B each
chunk packed again, 192-203 (best of several) against 216-221. On one thread the blocks are packed as they come.
The split is chosen for 2 and 4 threads at once (EVENER); a problem of one batch whose panels fall more evenly to
two threads the other way, with no operand packed more often then, carries that split too, for calls on one or two
threads (Plan.pair; the kernel branches on its thread count).
Every tile sits at the same place in the blocking whoever computes it, so the result does not depend on the thread
count.
Small problems (M <= MR) read A in place and, when B's rows are contiguous, B as well: nothing is packed. A row-major
A is read in place at any size where the L1 holds a micro-panel's rows even when they alias (Tiling.a_in_place).
K is blocked whenever an operand is packed or pre-packed, also with A read in place: a linear layer's A micro-panel
then stays in L1 while the weight's panels stream past it (64 x 784 -> 512 on one thread of a Xeon with 48 KB L1,
two 512-bit FMA ports: 149 -> 161 GFLOP/s; 128 x 1024 -> 256: 168 -> 180).
An A that is neither strided nor pre-packed (an ABlockSource: a conv's output gradient) is always packed, by itself.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace
from math import lcm, prod
from typing import Iterator, Union

import llvmlite.ir as ir

from .abi import SHARE_AREA, SHARE_DONE, SHARE_OFFSET
from .claims import claimed_chunks
from .gemm_epilogue import costly, emit_tile_epilogue
from .gemm_kernel import (I64, PTR, Epilogue, KernelShape, PosMap, Tiling, const64, default_pos, elem_ptr,
                          emit_microkernel)
from .gemm_pack import (ABlockSource, PanelSource, Prepacked, Strided, batch_offset, pack_a_block, pack_b_block, smax,
                        smin)
from .loops import alloca, define_function, entry_builder, for_range, mark_explicit, optimize_for_size
from .sync import emit_wait_for_count

BSource = Union[Strided, Prepacked, PanelSource]


@dataclass(frozen=True)
class Problem:
    """C[b] (m x n) = A[b] (m x k) @ B[b] (k x n) for every batch index b over `batch` (row-major)."""

    m: int
    n: int
    k: int
    batch: tuple[int, ...]
    a: Strided | Prepacked | ABlockSource
    b: BSource
    c: Strided
    pos_map: PosMap = default_pos

    @property
    def count(self) -> int:
        return prod(self.batch)


@dataclass(frozen=True)
class Plan:
    """Static decisions for one problem: operand modes, block sizes, thread split and scratch layout."""

    a_mode: str  # "pack" | "direct" | "prepacked"
    b_mode: str
    kc: int
    blocks: int
    mc: int
    nc: int
    split_n: bool
    panels: int
    a_floats: int
    b_floats: int
    keep_a: bool = False  # A packed whole, block (ic, pc) at ic*K + pc*rows(ic), reused across a thread's chunks
    keep_b: bool = False  # B packed whole, block (jc, pc) at jc*K + pc*cols(jc), likewise
    share: str | None = None  # "a" or "b": the operand packed whole into the call's shared area on several threads,
    # laid out as a kept one
    shared_floats: int = 0
    pair: Plan | None = None  # the plan of a call on one or two threads, where its split differs (make_plan)

    @property
    def b_offset(self) -> int:
        """Float offset of the packed-B area in scratch (64-byte aligned)."""
        return -(-self.a_floats // 16) * 16

    @property
    def scratch_bytes(self) -> int:
        own = 4 * (self.b_offset + -(-self.b_floats // 16) * 16)
        return max(own, self.pair.scratch_bytes) if self.pair is not None else own

    @property
    def shared_bytes(self) -> int:
        """Bytes of the call's shared area the GEMM uses (for either split)."""
        own = 4 * self.shared_floats
        return max(own, self.pair.shared_bytes) if self.pair is not None else own


def _round_up(x: int, to: int) -> int:
    return -(-x // to) * to


# An operand up to this size stays in the L2 cache: packing it costs more than reading it in place.
CACHED_BYTES = 384 * 1024


def _cached(rows: int, cols: int) -> bool:
    return 4 * rows * cols <= CACHED_BYTES


# The largest operand packed whole into the call's shared area (the area is about the operand's size, once per
# executable): past it (SGEMM n > 8192), each chunk packs the blocks it reads.
SHARED_BYTES = 256 << 20


def _balanced(size: int, limit: int, unit: int) -> int:
    """A block size <= limit (a multiple of unit) cutting `size` into equal blocks, the last possibly shorter."""
    blocks = max(1, -(-size // limit))
    return _round_up(max(-(-size // blocks), 1), unit)


# The threads split a GEMM's C along its longer side in panels, unless the panels of the other side fall more evenly
# to 2 and 4 threads by more than this factor: a transformer's 128 x 256 output at batch 1 has 11 row panels (12
# rows each), 6 and 5 for 2 threads, but 8 column panels, 4 and 4.
EVENER = 1.05


def _uneven(panels: int) -> float:
    """How unevenly `panels` units fall to 2 and to 4 threads: the sum of the largest share over the mean share
    (1.0 each for a count that divides them; an empty side counts as one panel)."""
    panels = max(panels, 1)
    return sum(-(-panels // threads) * threads / panels for threads in (2, 4))


def make_plan(p: Problem, t: Tiling) -> Plan:
    """Choose how to read each operand and how to block and split the problem (and, for one batch, the split two
    threads take where it differs: Plan.pair)."""
    small = p.m <= t.mr
    if isinstance(p.a, Prepacked):
        a_mode = "prepacked"
    elif isinstance(p.a, Strided) and (small or _cached(p.m, p.k) or (t.a_in_place and p.a.cs == 1)):
        a_mode = "direct"
    else:
        a_mode = "pack"
    if isinstance(p.b, Prepacked):
        b_mode = "prepacked"
    elif isinstance(p.b, Strided) and p.b.cs == 1 and (small or _cached(p.k, p.n)):
        b_mode = "direct"
    else:
        b_mode = "pack"
    if (a_mode, b_mode) != ("direct", "direct") and p.k > 0:
        unit = lcm(getattr(p.a, "k_unit", 1), getattr(p.b, "k_unit", 1))
        kc = _round_up(-(-p.k // -(-p.k // t.kc)), unit)
        blocks = -(-p.k // kc)
    else:
        blocks, kc = 1, p.k
    mc = _balanced(p.m, t.mc, t.mr)
    nc = _balanced(p.n, t.nc, t.nr)
    col_panels, row_panels = -(-p.n // t.nr), -(-p.m // t.mr)
    split_n = col_panels >= row_panels
    by_cols, by_rows = _uneven(p.count * col_panels), _uneven(p.count * row_panels)  # units: (batch, panel)
    if by_rows > EVENER * by_cols:
        split_n = True
    elif by_cols > EVENER * by_rows:
        split_n = False

    def plan(by_cols: bool, pair: Plan | None = None) -> Plan:
        # every block of the operand, packed in whole panels
        whole_a, whole_b = p.k * _round_up(p.m, t.mr), p.k * _round_up(p.n, t.nr)
        # only for one batch: with several, a chunk mostly spans a batch or more (a conv's weight gradient per image
        # slice), and keeping measured 4% slower on the CNN's training step
        whole = {"a": whole_a, "b": whole_b}
        whole_of = None
        if p.count == 1 and by_cols and a_mode == "pack" and col_panels > 1:
            whole_of = "a"
        elif p.count == 1 and not by_cols and b_mode == "pack" and row_panels > 1:
            whole_of = "b"
        kept = whole_of if whole_of is not None and 4 * whole[whole_of] <= t.private_bytes else None
        share = whole_of if whole_of is not None and t.private_bytes < 4 * whole[whole_of] <= SHARED_BYTES else None
        a_floats = (whole_a if kept == "a" else mc * kc) if a_mode == "pack" else 0
        b_floats = (whole_b if kept == "b" else kc * nc) if b_mode == "pack" else 0
        return Plan(a_mode, b_mode, kc, blocks, mc, nc, by_cols, col_panels if by_cols else row_panels, a_floats,
                    b_floats, kept == "a", kept == "b", share, whole[share] if share else 0, pair)
    pair = _pair_split(p.count, split_n, col_panels, row_panels, a_mode, b_mode)
    return plan(split_n, None if pair is None else plan(pair))


def _pair_split(count: int, split_n: bool, col_panels: int, row_panels: int, a_mode: str, b_mode: str) -> bool | None:
    """The other split, for two threads, where it halves the panels more evenly (by more than EVENER) and packs no
    operand more often: a single image's conv (11 row panels, 2 column panels, its weight A pre-packed) splits its
    rows 6/5 for up to 4 threads, and each thread packs all of the im2col matrix; its columns fall 1/1 to 2 threads,
    each packing only its own (measured 104-105 against 111-112 us for the benchmark CNN at batch 1 on 2 threads)."""
    if count != 1 or not col_panels or not row_panels:
        return None
    share = {True: -(-col_panels // 2) / col_panels, False: -(-row_panels // 2) / row_panels}
    other = not split_n
    packs_more = a_mode == "pack" if other else b_mode == "pack"  # what every chunk of the other split packs whole
    return other if share[split_n] > EVENER * share[other] and not packs_more else None


def kernel_shapes(p: Problem, plan: Plan, t: Tiling) -> dict[tuple[bool, bool], KernelShape]:
    """The micro-kernel tile shapes this problem reaches, keyed by (full rows, full columns)."""
    if plan.a_mode == "direct":
        a_rs, a_ks = p.a.rs, p.a.cs
    else:
        a_rs, a_ks = 1, t.mr
    b_ks = p.b.rs if plan.b_mode == "direct" else t.nr
    rows = {True: t.mr, False: p.m % t.mr}
    cols = {True: t.nr, False: p.n % t.nr}
    shapes = {}
    for full_rows in (True, False):
        for full_cols in (True, False):
            r, c = rows[full_rows], cols[full_cols]
            if r == 0 or c == 0 or (full_rows and p.m < t.mr) or (full_cols and p.n < t.nr):
                continue
            nv = -(-c // t.width)
            shapes[full_rows, full_cols] = KernelShape(r, nv, c - (nv - 1) * t.width, a_rs, a_ks, b_ks, p.c.rs,
                                                       b_masked=plan.b_mode == "direct")
    return shapes


@dataclass
class _Ctx:
    """Values shared by the emitters of one GEMM function."""

    p: Problem
    plan: Plan
    t: Tiling
    builder: ir.IRBuilder
    kernels: dict
    extra: tuple
    scratch: ir.Value
    kept: ir.Value | None = None  # i64 slot: the batch whose kept operand (Plan.keep_a / keep_b) scratch holds
    area: ir.Value | None = None  # the shared area holding plan.share's operand, packed (None: this thread packs)
    panel_epilogue: ir.Function | None = None  # a costly epilogue, out of line (gemm_epilogue.py)


def emit_problem(module: ir.Module, name: str, p: Problem, t: Tiling, epilogue: Epilogue | None = None,
                 n_extra: int = 0) -> ir.Function:
    """Emit `void name(a, b, c, scratch, tid, nthreads, claim, share, extra...)` computing the units of `p` thread
    `tid` claims from the claim words at `claim` (null: a fixed share per thread; codegen/claims.py), packing the
    operand every chunk reads whole into the shared area with the share words at `share` where the plan says so and
    there are several threads (null: each thread packs what it reads; codegen/abi.py)."""
    if p.c.cs != 1:
        raise ValueError("C must have unit column stride")
    plan = make_plan(p, t)
    mark_explicit(module)
    args = [("a", PTR), ("b", PTR), ("c", PTR), ("scratch", PTR), ("tid", I64), ("nthreads", I64), ("claim", PTR),
            ("share", PTR)]
    fn = optimize_for_size(define_function(module, name, args + [(f"extra{i}", PTR) for i in range(n_extra)]))
    a, b, c, scratch, tid, nthreads, claim, share, *extra = fn.args
    panel_epilogue = None
    if epilogue is not None and costly(epilogue, t.width, n_extra, p.pos_map):
        panel_epilogue = emit_tile_epilogue(module, f"{name}.epilogue", t.width, p.c.rs, p.n % t.width != 0, epilogue,
                                            n_extra, p.pos_map)
        epilogue = None  # the micro-kernels store plain tiles; _panel_epilogue applies it
    kernels = {key: emit_microkernel(module, f"{name}.uk.{shape.tag()}", shape, t, n_extra, epilogue, p.pos_map)
               for key, shape in kernel_shapes(p, plan, t).items()}
    builder = entry_builder(fn)
    ctx = _Ctx(p, plan, t, builder, kernels, tuple(extra), scratch, panel_epilogue=panel_epilogue)
    if p.m == 0 or p.n == 0 or p.count == 0:
        builder.ret_void()
        return fn
    threads = (tid, nthreads, claim, share)
    if plan.pair is None:
        _claimed(ctx, (a, b, c), *threads)
    else:  # one or two threads split the other way (make_plan)
        with builder.if_else(builder.icmp_signed("<=", nthreads, const64(2))) as (pair, many):
            with pair:
                _claimed(replace(ctx, plan=plan.pair), (a, b, c), *threads)
            with many:
                _claimed(ctx, (a, b, c), *threads)
    builder.ret_void()
    return fn


def _claimed(ctx: _Ctx, operands, tid, nthreads, claim, share) -> None:
    """The chunks of ctx.plan's units this thread claims, computed: after the shared operand is packed, where the
    plan shares one and the call runs on several threads with share words (an invalid tid, which takes nothing,
    does not wait for the packing either)."""
    builder, plan, p = ctx.builder, ctx.plan, ctx.p
    units, work = p.count * plan.panels, 2 * p.m * p.n * p.k * p.count
    if plan.share is None:
        if plan.keep_a or plan.keep_b:  # the batch whose kept operand this thread's scratch holds (-1: none yet)
            ctx.kept = alloca(builder, I64, "kept")
            builder.store(const64(-1), ctx.kept)
        with claimed_chunks(builder, claim, tid, nthreads, units, name="panels", work=work) as chunk:
            _units(ctx, *operands, *chunk)
        return
    valid = builder.and_(builder.icmp_signed(">=", tid, const64(0)), builder.icmp_signed("<", tid, nthreads))
    sharing = builder.and_(builder.and_(builder.icmp_signed(">", nthreads, const64(1)), valid),
                           builder.icmp_unsigned("!=", share, ir.Constant(PTR, None)))
    with builder.if_else(sharing) as (shared, alone):
        with shared:
            area = builder.load(_word(builder, share, SHARE_AREA), typ=PTR, name="area")
            done = _word(builder, share, SHARE_DONE)
            _pack_shared(ctx, operands, area, tid, nthreads, share, done)
            with claimed_chunks(builder, claim, tid, nthreads, units, name="panels", also=(done,), work=work) as chunk:
                _units(replace(ctx, area=area), *operands, *chunk)
        with alone:
            with claimed_chunks(builder, claim, tid, nthreads, units, name="panels", work=work) as chunk:
                _units(ctx, *operands, *chunk)


def _word(builder: ir.IRBuilder, share: ir.Value, offset: int) -> ir.Value:
    """The share word at byte `offset` of the sync block (codegen/abi.py), from the share pointer."""
    return builder.gep(share, [const64(offset - SHARE_OFFSET)], inbounds=True, source_etype=ir.IntType(8))


def _pack_shared(ctx: _Ctx, operands, area, tid, nthreads, share, done) -> None:
    """Pack all of plan.share's operand into `area`, one (K block, panel) unit at a time as the threads claim them
    from the share words; add the units packed to `done` and wait until it counts all of them."""
    builder, plan, p, t = ctx.builder, ctx.plan, ctx.p, ctx.t
    a, b, _ = operands
    size, unit, block = (p.m, t.mr, plan.mc) if plan.share == "a" else (p.n, t.nr, plan.nc)
    panels = -(-size // unit)
    with claimed_chunks(builder, share, tid, nthreads, plan.blocks * panels, name="share") as (u0, u1):
        with for_range(builder, u0, u1, name="share.unit") as u:
            pc = builder.mul(builder.sdiv(u, const64(panels)), const64(plan.kc))
            kc = smin(builder, const64(plan.kc), builder.sub(const64(p.k), pc))
            at = builder.mul(builder.srem(u, const64(panels)), const64(unit))
            start = builder.sub(at, builder.srem(at, const64(block)))
            extent = smin(builder, const64(block), builder.sub(const64(size), start))
            panel = elem_ptr(builder, _shared_block(ctx, area, start, pc, extent, unit),
                             builder.mul(builder.sub(at, start), kc))
            count = smin(builder, const64(unit), builder.sub(const64(size), at))
            if plan.share == "b":
                pack_b_block(builder, p.b, b, panel, pc, kc, at, count, p.n, t)
            elif isinstance(p.a, Strided):
                pack_a_block(builder, p.a, a, panel, at, count, pc, kc, p.m, t)
            else:
                p.a.pack_a_block(builder, a, panel, at, count, pc, kc, p.m, t)
        builder.atomic_rmw("add", done, builder.sub(u1, u0), "release")
    emit_wait_for_count(builder, done, const64(plan.blocks * panels))


def _shared_block(ctx: _Ctx, area, start, pc, extent, unit: int) -> ir.Value:
    """Where block (start, pc) of the shared operand lies in the area (_block_place)."""
    return elem_ptr(ctx.builder, area, _block_place(ctx, start, pc, extent, unit))


def _block_place(ctx: _Ctx, start, pc, extent, unit: int) -> ir.Value:
    """The float offset of block (start, pc) of an operand packed whole: start*K + pc*width, where the block spans
    `extent` rows (columns) packed in panels of `unit`, `width` of them rounded up to whole panels (the blocks before
    it are MC rows or NC columns, whole panels)."""
    builder = ctx.builder
    width = builder.mul(builder.sdiv(builder.add(extent, const64(unit - 1)), const64(unit)), const64(unit))
    return builder.add(builder.mul(start, const64(ctx.p.k)), builder.mul(pc, width))


def _units(ctx: _Ctx, a, b, c, u0, u1) -> None:
    """The (batch, panel) units [u0, u1): per batch they touch, the rectangle of C their panels cover."""
    builder, plan, p = ctx.builder, ctx.plan, ctx.p
    panels = const64(plan.panels)
    b_end = builder.sdiv(builder.add(u1, const64(plan.panels - 1)), panels)
    with for_range(builder, builder.sdiv(u0, panels), b_end, name="batch") as index:
        first_unit = builder.mul(index, panels)
        lo = smax(builder, builder.sub(u0, first_unit), const64(0))
        hi = smin(builder, builder.sub(u1, first_unit), panels)
        base_a = elem_ptr(builder, a, batch_offset(builder, index, p.batch, p.a.batch_strides))
        base_b = elem_ptr(builder, b, batch_offset(builder, index, p.batch, p.b.batch_strides))
        base_c = elem_ptr(builder, c, batch_offset(builder, index, p.batch, p.c.batch_strides))
        if plan.split_n:
            rows = (const64(0), const64(p.m))
            cols = (builder.mul(lo, const64(ctx.t.nr)), smin(builder, builder.mul(hi, const64(ctx.t.nr)), const64(p.n)))
        else:
            rows = (builder.mul(lo, const64(ctx.t.mr)), smin(builder, builder.mul(hi, const64(ctx.t.mr)), const64(p.m)))
            cols = (const64(0), const64(p.n))
        # a chunk that covers all of a batch's panels is the only one of that batch (the claims go forward): a kept
        # operand gains nothing there, and is packed into one block's space, as without keeping
        whole = None if ctx.kept is None else builder.and_(builder.icmp_signed("==", lo, const64(0)),
                                                            builder.icmp_signed("==", hi, panels))
        _rectangle(ctx, index, base_a, base_b, base_c, rows, cols, whole)


def _rectangle(ctx: _Ctx, index, base_a, base_b, base_c, rows, cols, whole) -> None:
    """C[rows, cols] of one batch: the column-block / K-block / row-block loops with packing (a kept operand's
    blocks only where this thread's scratch does not hold them for this batch yet, all of them in one block's space
    where this chunk is the batch's `whole`; a shared one's not at all, packed already)."""
    builder, plan, p, t = ctx.builder, ctx.plan, ctx.p, ctx.t
    shared_a, shared_b = (ctx.area is not None and plan.share == which for which in ("a", "b"))
    fresh = None
    if ctx.kept is not None:
        fresh = builder.or_(builder.icmp_signed("!=", builder.load(ctx.kept), index), whole, name="fresh")
    with for_range(builder, cols[0], cols[1], plan.nc, name="jc") as jc:
        nc = smin(builder, const64(plan.nc), builder.sub(cols[1], jc))
        with for_range(builder, 0, plan.blocks, name="kb") as kb:
            pc = builder.mul(kb, const64(plan.kc))
            kc = smin(builder, const64(plan.kc), builder.sub(const64(p.k), pc))
            first = builder.icmp_signed("==", kb, const64(0))
            last = builder.icmp_signed("==", kb, const64(plan.blocks - 1))
            if shared_b:
                b_pack = _shared_block(ctx, ctx.area, jc, pc, nc, t.nr)
            else:
                b_pack = _pack_area(ctx, plan.b_offset, plan.keep_b, whole, jc, pc, nc, t.nr)
                if plan.b_mode == "pack":
                    with _packing(builder, fresh if plan.keep_b else None):
                        pack_b_block(builder, p.b, base_b, b_pack, pc, kc, jc, nc, p.n, t)
            with for_range(builder, rows[0], rows[1], plan.mc, name="ic") as ic:
                mc = smin(builder, const64(plan.mc), builder.sub(rows[1], ic))
                if shared_a:
                    a_pack = _shared_block(ctx, ctx.area, ic, pc, mc, t.mr)
                else:
                    a_pack = _pack_area(ctx, 0, plan.keep_a, whole, ic, pc, mc, t.mr)
                    with _packing(builder, fresh if plan.keep_a else None):
                        if plan.a_mode == "pack" and isinstance(p.a, Strided):
                            pack_a_block(builder, p.a, base_a, a_pack, ic, mc, pc, kc, p.m, t)
                        elif plan.a_mode == "pack":
                            p.a.pack_a_block(builder, base_a, a_pack, ic, mc, pc, kc, p.m, t)
                block = _Block(index, base_a, base_b, base_c, a_pack, b_pack, pc, kc, first, last)
                _tiles(ctx, block, ic, mc, jc, nc)
    if ctx.kept is not None:
        builder.store(builder.select(whole, const64(-1), index), ctx.kept)


def _pack_area(ctx: _Ctx, offset: int, kept: bool, whole, start, pc, extent, unit: int) -> ir.Value:
    """Where a packed block goes in scratch: at `offset` (floats), or for a kept operand at block (start, pc)'s own
    place, offset + start*K + pc*width (_block_place); at `offset` again where the chunk is its batch's `whole`."""
    builder = ctx.builder
    if not kept:
        return elem_ptr(builder, ctx.scratch, const64(offset))
    place = builder.select(whole, const64(0), _block_place(ctx, start, pc, extent, unit))
    return elem_ptr(builder, ctx.scratch, builder.add(const64(offset), place))


@contextmanager
def _packing(builder: ir.IRBuilder, fresh: ir.Value | None) -> Iterator[None]:
    """The packing emitted inside: always (fresh None), or only where `fresh` holds."""
    if fresh is None:
        yield
        return
    with builder.if_then(fresh):
        yield


@dataclass
class _Block:
    index: ir.Value
    base_a: ir.Value
    base_b: ir.Value
    base_c: ir.Value
    a_pack: ir.Value
    b_pack: ir.Value
    pc: ir.Value
    kc: ir.Value
    first: ir.Value
    last: ir.Value


def _tiles(ctx: _Ctx, blk: _Block, ic, mc, jc, nc) -> None:
    """The tile loops of one packed block: NR-column panels outer and MR-row panels inner, or the other way round
    where the tiling says rows_outer; on the last K block, a costly epilogue over each inner loop's panel of C."""
    builder, t = ctx.builder, ctx.t
    if t.rows_outer:
        with for_range(builder, 0, mc, t.mr, name="ir") as ir_:
            a_ptr = _a_panel(ctx, blk, ic, ir_)
            with for_range(builder, 0, nc, t.nr, name="jr") as jr:
                _tile(ctx, blk, builder.add(ic, ir_), a_ptr, builder.add(jc, jr), _b_panel(ctx, blk, jc, jr))
            row = builder.add(ic, ir_)
            _panel_epilogue(ctx, blk, row, smin(builder, const64(t.mr), builder.sub(const64(ctx.p.m), row)), jc, nc)
        return
    with for_range(builder, 0, nc, t.nr, name="jr") as jr:
        b_ptr = _b_panel(ctx, blk, jc, jr)
        with for_range(builder, 0, mc, t.mr, name="ir") as ir_:
            _tile(ctx, blk, builder.add(ic, ir_), _a_panel(ctx, blk, ic, ir_), builder.add(jc, jr), b_ptr)
        _panel_epilogue(ctx, blk, ic, mc, builder.add(jc, jr), smin(builder, const64(t.nr), builder.sub(nc, jr)))


def _panel_epilogue(ctx: _Ctx, blk: _Block, row, rows, col, cols) -> None:
    """On the last K block, the out-of-line epilogue over C[row:row+rows, col:col+cols], whose tiles this thread
    has just stored: one call per panel of tiles, not per tile (gemm_epilogue.py)."""
    if ctx.panel_epilogue is None:
        return
    builder, p, t = ctx.builder, ctx.p, ctx.t
    with builder.if_then(blk.last):
        c_ptr = elem_ptr(builder, blk.base_c, builder.add(builder.mul(row, const64(p.c.rs)), col))
        vectors = builder.sdiv(cols, const64(t.width))
        tail = builder.sub(cols, builder.mul(vectors, const64(t.width)))
        builder.call(ctx.panel_epilogue, [c_ptr, rows, vectors, tail, blk.index, row, col, *ctx.extra])


def _a_panel(ctx: _Ctx, blk: _Block, ic, ir_) -> ir.Value:
    """Where the micro-kernel reads the A panel of rows ic + ir_ in this block."""
    builder, plan, p, t = ctx.builder, ctx.plan, ctx.p, ctx.t
    if plan.a_mode == "pack":
        return elem_ptr(builder, blk.a_pack, builder.mul(ir_, blk.kc))
    row = builder.add(ic, ir_)
    if plan.a_mode == "prepacked":
        return elem_ptr(builder, blk.base_a, builder.add(builder.mul(row, const64(p.k)),
                                                         builder.mul(blk.pc, const64(t.mr))))
    return elem_ptr(builder, blk.base_a, builder.add(builder.mul(row, const64(p.a.rs)),
                                                     builder.mul(blk.pc, const64(p.a.cs))))


def _b_panel(ctx: _Ctx, blk: _Block, jc, jr) -> ir.Value:
    """Where the micro-kernel reads the B panel of columns jc + jr in this block."""
    builder, plan, p, t = ctx.builder, ctx.plan, ctx.p, ctx.t
    if plan.b_mode == "pack":
        return elem_ptr(builder, blk.b_pack, builder.mul(jr, blk.kc))
    col = builder.add(jc, jr)
    if plan.b_mode == "prepacked":
        return elem_ptr(builder, blk.base_b, builder.add(builder.mul(col, const64(p.k)),
                                                         builder.mul(blk.pc, const64(t.nr))))
    return elem_ptr(builder, blk.base_b, builder.add(builder.mul(blk.pc, const64(p.b.rs)), col))


def _tile(ctx: _Ctx, blk: _Block, row, a_ptr, col, b_ptr) -> None:
    """One micro-kernel call: C[row:row+MR, col:col+NR] of this block."""
    builder, p = ctx.builder, ctx.p
    c_ptr = elem_ptr(builder, blk.base_c, builder.add(builder.mul(row, const64(p.c.rs)), col))
    _dispatch(ctx, row, col, [a_ptr, b_ptr, blk.kc, c_ptr, blk.first, blk.last, blk.index, row, col, *ctx.extra])


def _dispatch(ctx: _Ctx, row, col, call) -> None:
    """Call the kernel for this tile's shape: full, or the static edge shape of the last row/column panel."""
    builder, p, t = ctx.builder, ctx.p, ctx.t

    def by_cols(full_rows: bool) -> None:
        options = [key for key in ((full_rows, True), (full_rows, False)) if key in ctx.kernels]
        if len(options) == 1:
            builder.call(ctx.kernels[options[0]], call)
            return
        full = builder.icmp_signed("<=", builder.add(col, const64(t.nr)), const64(p.n))
        with builder.if_else(full) as (then, otherwise):
            with then:
                builder.call(ctx.kernels[full_rows, True], call)
            with otherwise:
                builder.call(ctx.kernels[full_rows, False], call)

    row_options = sorted({key[0] for key in ctx.kernels}, reverse=True)
    if len(row_options) == 1:
        by_cols(row_options[0])
        return
    full = builder.icmp_signed("<=", builder.add(row, const64(t.mr)), const64(p.m))
    with builder.if_else(full) as (then, otherwise):
        with then:
            by_cols(True)
        with otherwise:
            by_cols(False)
