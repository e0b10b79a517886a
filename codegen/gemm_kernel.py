"""The SGEMM micro-kernel: an R x (nv*W) tile of C held in <W x float> registers, fed by broadcasts of A.

One kernel function is emitted per tile shape a GEMM needs (the full MR x NR tile and the edge tiles of the
last row and column panels, whose sizes are static). Each call multiplies a `kc`-long slice of A (rows) by a
`kc`-long slice of B (vectors of W columns), adds the old C unless it is the first K block, applies the epilogue
on the last K block and stores the tile, masking the lanes beyond N.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import llvmlite.ir as ir

from .cache_sizes import CacheSizes, host_cache_sizes
from .loops import F32, I1, I32, I64, PTR, define_function, entry_builder, lane_mask, splat, zeros
from .target import HALF_WIDTH_CPUS, host_target


@dataclass(frozen=True)
class Tiling:
    """Register tile (mr x nv vectors of `width` lanes) and cache blocks (kc, mc, nc) of one target."""

    width: int
    mr: int
    nv: int
    kc: int
    mc: int
    nc: int
    fma: bool = True
    rows_outer: bool = False  # tile loops: A's micro-panels outer (each meets all of B's in turn), else B's
    a_in_place: bool = False  # a row-major A is read where it lies, not packed (a_in_place())
    prefetch_b: bool = False  # the micro-kernel hints packed B B_PREFETCH_STEPS ahead into L1
    private_bytes: int = 512 * 1024  # the largest operand packed whole that each thread keeps a copy of: one L2

    @property
    def nr(self) -> int:
        return self.nv * self.width


CACHE_LINE = 64  # bytes
L1, L2 = 1, 2  # cache levels for prefetch()

# Register tile (mr, nv, fma) per vector width. Without AVX2 there is usually no FMA unit, and llvm.fma would become
# a libm call: multiply and add with the `contract` flag instead, which LLVM fuses wherever the target has FMA.
_TILES = {16: (12, 2, True), 8: (6, 2, True), 4: (6, 2, False)}


def tiling_for(width: int, caches: CacheSizes | None = None, cpu: str | None = None) -> Tiling:
    """The tiling for `width` float32 lanes: 12x32 on AVX-512 (24 of 32 zmm registers), 6x16 on AVX2 (12 of 16 ymm),
    with cache blocks sized from the host's caches (or `caches`) for the target's CPU (or `cpu`)."""
    if width not in _TILES:
        raise ValueError(f"unsupported vector width {width}")
    mr, nv, fma = _TILES[width]
    caches = caches or host_cache_sizes()
    half_width = (cpu if cpu is not None else host_target().cpu) in HALF_WIDTH_CPUS
    kc, mc, nc = cache_blocks(mr, nv * width, caches, half_width)
    outer = rows_outer(nv * width, caches)
    return Tiling(width=width, mr=mr, nv=nv, kc=kc, mc=mc, nc=nc, fma=fma, rows_outer=outer,
                  a_in_place=a_in_place(mr, nv * width, caches), prefetch_b=outer and not half_width,
                  private_bytes=caches.l2)


def a_in_place(mr: int, nr: int, caches: CacheSizes) -> bool:
    """Whether a row-major A is better read in place than packed: in the A-outer order (rows_outer), where each A
    micro-panel is read once per B block and then from L1, when a set of the L1 holds the micro-panel's MR rows even
    where they alias (rows a multiple of 4 KB apart map to one set). Packing then only adds a copy of A. One thread
    of a Xeon with two 512-bit FMA ports and a 12-way L1, GFLOP/s packed / in place: the models' 1024 x 256 -> 768
    173 / 176, -> 256 171 / 178, 1024 x 1024 -> 256 (rows 4 KB apart) 164 / 177, SGEMM n = 512-2048 169-173 /
    174-178. Zen 4's 8-way L1 ran that 1024 x 1024 -> 256 at 109 packed, 103 in place on the AVX-512 tile (12 rows);
    the B-outer order (AVX2's) reads A's block once per B panel, and lost 2-8% in place on the same Xeon."""
    return rows_outer(nr, caches) and mr <= caches.l1d_ways


def rows_outer(nr: int, caches: CacheSizes) -> bool:
    """Whether a block's tile loops take A's micro-panels outer, each one meeting all of B's panels in turn as they
    stream from L2: when B's panel at the L1 block depth (_l1_kc) would take more than half of L1. The AVX-512
    tile's B panel, 32 columns, fills a 32 KB L1 at kc = 256, and with A's outer SGEMM measured 2-6% faster at
    n = 512-2048 on Zen 4 (the AVX2 tile's 16 columns: no change)."""
    return 4 * _l1_kc(caches) * nr > caches.l1d // 2


# The deepest K block of the A-outer order (rows_outer), whose micro-panels stream from L2. There the micro-panels
# of A and B are read from L2 anyway: each k step of the AVX-512 tile is 24 FMAs to its 2 vector loads and 12
# broadcasts, which L2 keeps up with, so a deeper block only saves work: a pass over C (load, add and store every
# tile) and a tile's start per K block. SGEMM on one Zen 4 thread (half-width, its B block from L3), median GFLOP/s at
# kc = 256 / 512 / 1024 / 2048: n = 1024 108.6 / 109.5 / 110.3 / 110.5, 2048 108.5 / 110.5 / 111.2 / 111.3, 4096
# 109.9 / 111.1 / 111.9 / 111.7; the transformer's K = 1024 feed-forward GEMM (1024 x 1024 -> 256) 103.6 -> 108.0 at
# 1024. Past 1024 nothing gains and the packed B block (kc x nc) grows. A Xeon with two 512-bit FMA ports (its B
# block kept in half of its 2 MB L2: 256 columns at this depth), compiled side by side, medians, kc = 384 / 1024:
# that GEMM, B pre-packed, 189.8 / 198.2 GFLOP/s, 128 x 1024 -> 256 195.3 / 197.9; SGEMM n = 512-2048 on one thread
# 186.7-193.2 / 188.7-194.4, on two 348.7-356.4 / 349.6-359.6; whole models on one thread MLP b64 444 / 439 us,
# transformer b1 1.183 / 1.172 ms, b8 9.91 / 9.79 ms, CNN b64 6.79 / 6.72 ms (on two threads within the noise).
STREAMED_KC = 1024


def cache_blocks(mr: int, nr: int, caches: CacheSizes, half_width: bool = False) -> tuple[int, int, int]:
    """(kc, mc, nc) for an mr x nr register tile (the BLIS analytical model, rounded to what measured best).

    KC steps of a 16-column B panel (64 bytes a step) fill half of L1, except in the A-outer order (rows_outer),
    where each A micro-panel meets every B panel of the block in turn, streamed from L2: there KC is as deep as an A
    micro-panel and a B panel fit in half of L2, at most STREAMED_KC. The B block (KC x NC) then takes half of L2
    on a full-width core; on a half-width one, NC is such that a block of packed B at the L1 depth takes half of this
    core's share of L3, at most 1024 columns (wider blocks measured slower at n = 2048; the deeper blocks measured
    best at the same width: SGEMM n = 1024 and 2048 at kc = 1024, one Zen 4 thread: 256 columns 105-106 GFLOP/s, 512
    109, 1024 110-111). Blocks that outgrow L2 cost a full-width core a third: SGEMM n = 1024 and 2048 on one thread
    of a Xeon with 48 KB L1 and 2 MB L2 (two 512-bit FMA ports) ran 102-150 GFLOP/s with them, 159-173 with blocks
    in half of it. An MC x KC block of packed A takes a quarter of L2.
    """
    depth, outer = _l1_kc(caches), rows_outer(nr, caches)
    kc = _clamp(caches.l2 // (8 * (mr + nr)) // 32 * 32, 64, STREAMED_KC) if outer else depth
    mc = _clamp(caches.l2 // (16 * kc) // mr * mr, mr, 256 // mr * mr)
    if outer and not half_width:
        nc = _clamp(caches.l2 // (8 * kc) // nr * nr, 256 // nr * nr, 1024)
    else:
        nc = _clamp(caches.l3_per_core // (8 * depth) // nr * nr, 256 // nr * nr, 1024)
    return kc, mc, nc


def _l1_kc(caches: CacheSizes) -> int:
    """The K steps of a 16-column B panel (64 bytes a step) that fill half of L1."""
    return _clamp(caches.l1d // 128 // 32 * 32, 64, 512)


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


@dataclass(frozen=True)
class TilePos:
    """Where an accumulator vector lands: batch index, row, first column of the vector, lanes inside N."""

    batch: ir.Value
    row: ir.Value
    col: ir.Value
    mask: ir.Value | None
    args: tuple[ir.Value, ...]


# An epilogue maps (builder, accumulator vector, position) to the vector stored in C.
Epilogue = Callable[[ir.IRBuilder, ir.Value, TilePos], ir.Value]
# Maps (builder, batch, row, col, mask, extra args) in GEMM coordinates to the position an epilogue sees.
PosMap = Callable[[ir.IRBuilder, ir.Value, ir.Value, ir.Value, "ir.Value | None", tuple], TilePos]


def default_pos(builder: ir.IRBuilder, batch, row, col, mask, args) -> TilePos:
    """GEMM coordinates unchanged."""
    return TilePos(batch, row, col, mask, tuple(args))


@dataclass(frozen=True)
class KernelShape:
    """A tile shape and how the kernel addresses its operands (all strides in elements, static).

    A element (r, k) is at a + r*a_rs + k*a_ks; B vector v of step k at b + k*b_ks + v*W; C row r at c + r*ldc.
    `tail` is the number of valid lanes of the last vector (W when the tile is full width); `b_masked` masks
    the B loads of that vector too (B read in place, where lanes beyond N are outside the buffer).
    """

    rows: int
    nv: int
    tail: int
    a_rs: int
    a_ks: int
    b_ks: int
    ldc: int
    b_masked: bool = False

    def tag(self) -> str:
        return f"r{self.rows}v{self.nv}t{self.tail}"


# --- vector building blocks -------------------------------------------------------------------------------


def vec_type(width: int) -> ir.VectorType:
    return ir.VectorType(F32, width)


def intrinsic(module: ir.Module, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
    """The declaration of an LLVM intrinsic, declared once per module."""
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(ret, list(args)), name)


def masked_load(builder: ir.IRBuilder, ptr: ir.Value, mask: ir.Value, width: int) -> ir.Value:
    """Load the lanes selected by `mask` (others 0.0); lanes outside the mask are never touched."""
    vt = vec_type(width)
    fn = intrinsic(builder.module, f"llvm.masked.load.v{width}f32.p0", vt, [PTR, I32, mask.type, vt])
    return builder.call(fn, [ptr, ir.Constant(I32, 4), mask, zeros(vt)])


def masked_store(builder: ir.IRBuilder, value: ir.Value, ptr: ir.Value, mask: ir.Value) -> None:
    """Store the lanes of `value` selected by `mask`."""
    vt = value.type
    fn = intrinsic(builder.module, f"llvm.masked.store.v{vt.count}f32.p0", ir.VoidType(), [vt, PTR, I32, mask.type])
    builder.call(fn, [value, ptr, ir.Constant(I32, 4), mask])


def load_vec(builder: ir.IRBuilder, ptr: ir.Value, width: int, mask: ir.Value | None = None) -> ir.Value:
    """An unaligned vector load, masked when `mask` is given."""
    if mask is not None:
        return masked_load(builder, ptr, mask, width)
    return builder.load(ptr, typ=vec_type(width), align=4)


def store_vec(builder: ir.IRBuilder, value: ir.Value, ptr: ir.Value, mask: ir.Value | None = None) -> None:
    """An unaligned vector store, masked when `mask` is given."""
    if mask is not None:
        masked_store(builder, value, ptr, mask)
    else:
        builder.store(value, ptr, align=4)


def elem_ptr(builder: ir.IRBuilder, base: ir.Value, offset: ir.Value | int) -> ir.Value:
    """base + offset float32 elements (not inbounds: masked accesses may start before a buffer)."""
    if isinstance(offset, int):
        offset = ir.Constant(I64, offset)
    return builder.gep(base, [offset], source_etype=F32)


def mul_add(builder: ir.IRBuilder, a: ir.Value, b: ir.Value, c: ir.Value, fma: bool) -> ir.Value:
    """a*b + c on float32 or float64 vectors: one llvm.fma where the target has FMA, else a multiply and an add LLVM
    may contract."""
    if fma:
        element = "f32" if a.type.element == F32 else "f64"
        fn = intrinsic(builder.module, f"llvm.fma.v{a.type.count}{element}", a.type, [a.type] * 3)
        return builder.call(fn, [a, b, c])
    return builder.fadd(builder.fmul(a, b, flags=("contract",)), c, flags=("contract",))


def const64(value: int) -> ir.Constant:
    return ir.Constant(I64, value)


# --- the kernel -------------------------------------------------------------------------------------------


# Independent FMA chains a tile keeps at least, in accumulator sets over k: two FMA ports of latency 4 need 8; twice
# that gives the slack a tile of few rows lacks. On the Xeon with two 512-bit ports, a linear layer 64 x 784 -> 512
# (a 4-row edge tile: two sets of 8 accumulators, not one) ran 167-168 GFLOP/s against 165-166 in three runs side by
# side; the edge tiles alone (4 or 8 rows) within the noise.
FMA_CHAINS = 16


def _acc_sets(shape: KernelShape, tiling: Tiling) -> int:
    """Independent accumulator sets over k, so that a small tile still keeps FMA_CHAINS FMAs in flight, with no more
    accumulators than the full tile has (those fit the registers: two sets of an AVX2 edge tile of 4 rows spilled,
    and ran a 64 x 784 -> 512 layer at 59 GFLOP/s instead of 104)."""
    tile = shape.rows * shape.nv
    return max(1, min(4, -(-FMA_CHAINS // tile), tiling.mr * tiling.nv // tile))


def emit_microkernel(module: ir.Module, name: str, shape: KernelShape, tiling: Tiling, n_extra: int,
                     epilogue: Epilogue | None, pos_map: PosMap = default_pos) -> ir.Function:
    """Emit `void name(a, b, kc, c, first, last, batch, row, col, extra...)` computing one tile of C, `epilogue`
    (if any) applied to its accumulators on the last K block."""
    args = [("a", PTR), ("b", PTR), ("kc", I64), ("c", PTR), ("first", I1), ("last", I1), ("batch", I64),
            ("row", I64), ("col", I64)] + [(f"extra{i}", PTR) for i in range(n_extra)]
    fn = define_function(module, name, args, internal=True)
    fn.attributes.add("noinline")  # a tile's work dwarfs a call; inlined, it multiplies its driver's compile time
    a, b, kc, c, first, last, batch, row, col, *extra = fn.args
    builder = entry_builder(fn)
    _prefetch_tile(builder, c, shape, tiling)
    acc = _k_loop(builder, a, b, kc, shape, tiling)
    _finish(builder, acc, c, first, last, (batch, row, col, tuple(extra)), shape, tiling, epilogue, pos_map)
    return fn


def _step(builder: ir.IRBuilder, a, b, k, acc, shape: KernelShape, tiling: Tiling):
    """One k step: load the B vectors, broadcast each A element, multiply-add into the tile."""
    w = tiling.width
    tail_mask = lane_mask(w, shape.tail) if shape.b_masked and shape.tail < w else None
    b_row = builder.mul(k, const64(shape.b_ks))
    if tiling.prefetch_b and not shape.b_masked:
        _prefetch_b(builder, b, b_row, shape, w)
    bvec = []
    for v in range(shape.nv):
        ptr = elem_ptr(builder, b, builder.add(b_row, const64(v * w)))
        bvec.append(load_vec(builder, ptr, w, tail_mask if v == shape.nv - 1 else None))
    a_col = builder.mul(k, const64(shape.a_ks))
    out = []
    for r in range(shape.rows):
        scalar = builder.load(elem_ptr(builder, a, builder.add(a_col, const64(r * shape.a_rs))), typ=F32, align=4)
        av = splat(builder, scalar, w)
        out.append([mul_add(builder, av, bvec[v], acc[r][v], tiling.fma) for v in range(shape.nv)])
    return out


# How many k steps ahead the micro-kernel hints its packed B panel into L1 (2 KB for the AVX-512 tile), in the A-outer
# order of a full-width core (Tiling.prefetch_b). There each A micro-panel meets all of the block's B panels in turn,
# so a panel comes from L2 every time, in short streams the hardware prefetchers learn late. One thread of a Xeon with
# two 512-bit FMA ports, compiled side by side, median of 40 rounds, GFLOP/s without / with: a linear layer's 64 x 784
# -> 512 (A read in place, B pre-packed) 158 / 168, 64 x 512 -> 512 176 / 184, SGEMM n = 512-2048 167-171 / 172-176.
# The B-outer order (the AVX2 tile, whose panel stays in L1) measured 3-5% slower with it; Zen 4's streamed blocks
# were not measured with it and keep their code.
B_PREFETCH_STEPS = 16


def _prefetch_b(builder: ir.IRBuilder, b, b_row, shape: KernelShape, width: int) -> None:
    """Hint the lines of the B step B_PREFETCH_STEPS ahead into L1 (past the panel's end: a harmless hint)."""
    ahead = builder.add(b_row, const64(B_PREFETCH_STEPS * shape.b_ks))
    for line in range(-(-shape.nv * width * 4 // CACHE_LINE)):
        prefetch(builder, elem_ptr(builder, b, builder.add(ahead, const64(line * CACHE_LINE // 4))), L1)


def carried_loop(builder: ir.IRBuilder, start, stop, step: int, init, body, label: str):
    """A guarded loop k = start, start+step, ... while k + step <= stop, carrying the flat values `init`."""
    pre = builder.block
    head = builder.append_basic_block(f"{label}.body")
    done = builder.append_basic_block(f"{label}.done")
    enter = builder.icmp_signed("<=", builder.add(start, const64(step)), stop)
    builder.cbranch(enter, head, done)
    builder.position_at_end(head)
    k = builder.phi(I64, name=f"{label}.k")
    carried = [builder.phi(v.type) for v in init]
    k.add_incoming(start, pre)
    for phi, v in zip(carried, init):
        phi.add_incoming(v, pre)
    new = body(k, carried)
    k_next = builder.add(k, const64(step))
    tail = builder.block
    k.add_incoming(k_next, tail)
    for phi, v in zip(carried, new):
        phi.add_incoming(v, tail)
    builder.cbranch(builder.icmp_signed("<=", builder.add(k_next, const64(step)), stop), head, done)
    builder.position_at_end(done)
    k_out = builder.phi(I64)
    k_out.add_incoming(start, pre)
    k_out.add_incoming(k_next, tail)
    results = []
    for v, n in zip(init, new):
        phi = builder.phi(v.type)
        phi.add_incoming(v, pre)
        phi.add_incoming(n, tail)
        results.append(phi)
    return k_out, results


# k steps per iteration of a tile with one accumulator set (a tile of several sets takes a step of each): a step of
# the AVX-512 tile is 24 FMAs, 14 loads and 2 prefetches, and the loop's own 6 instructions then held the front end
# near its width (llvm-mca: 13.1 cycles an iteration against 12 for the FMAs). One Xeon thread with two 512-bit FMA
# ports, one step / four steps an iteration, side by side: the micro-kernel alone in L1 191 / 201 GFLOP/s, GEMMs
# (B pre-packed) 64 x 784 -> 512 165 / 169 (medians), 64 x 512 -> 512 161 / 173, 1024 x 256 -> 768 176 / 178,
# SGEMM n = 512 and 1024 170 / 174 and 169 / 171; whole models 0.5-4% faster (MLP b64 on two threads 313 / 301 us).
K_UNROLL = 4


def _k_loop(builder: ir.IRBuilder, a, b, kc, shape: KernelShape, tiling: Tiling):
    """Accumulate the tile over k in [0, kc): an unrolled loop over `sets` accumulator sets (K_UNROLL steps of the
    one set), then the rest one step at a time."""
    rows, nv = shape.rows, shape.nv
    zero = zeros(vec_type(tiling.width))
    sets = _acc_sets(shape, tiling)
    per_set = rows * nv

    def unflat(flat):
        return [flat[r * nv:(r + 1) * nv] for r in range(rows)]

    def flat(tile):
        return [x for row in tile for x in row]

    k = const64(0)
    state = [zero] * (per_set * sets)
    if sets > 1:
        def body_multi(kv, carried):
            out = []
            for s in range(sets):
                tile = unflat(carried[s * per_set:(s + 1) * per_set])
                out += flat(_step(builder, a, b, builder.add(kv, const64(s)), tile, shape, tiling))
            return out
        k, state = carried_loop(builder, k, kc, sets, state, body_multi, "kx")
    else:
        def body_unrolled(kv, carried):
            tile = unflat(carried)
            for step in range(K_UNROLL):
                tile = _step(builder, a, b, builder.add(kv, const64(step)), tile, shape, tiling)
            return flat(tile)
        k, state = carried_loop(builder, k, kc, K_UNROLL, state, body_unrolled, "ku")

    def body_one(kv, carried):
        return flat(_step(builder, a, b, kv, unflat(carried), shape, tiling))
    _, first_set = carried_loop(builder, k, kc, 1, state[:per_set], body_one, "k")
    total = list(first_set)
    for s in range(1, sets):
        total = [builder.fadd(x, y) for x, y in zip(total, state[s * per_set:(s + 1) * per_set])]
    return unflat(total)


def _prefetch_tile(builder: ir.IRBuilder, c: ir.Value, shape: KernelShape, tiling: Tiling) -> None:
    """Hint the tile's lines of C into L1 before its k loop, which hides their latency: the tile adds the old C
    after the loop on every K block but the first, and stores it on every one. C blocks reread per K block come from
    L2 or L3 (a transformer's K = 1024 feed-forward GEMM, 1024 x 256: 1 MB of C, four K blocks), and the hardware
    prefetchers see a tile's rows as short streams. Compiled side by side with and without, median GFLOP/s on a
    Zen 4: that GEMM 1-5% faster on one and two threads, SGEMM n = 512-2048 and the models' other GEMMs 0-6%, none
    slower beyond noise."""
    lines = -(-shape.nv * tiling.width * 4 // CACHE_LINE)
    for r in range(shape.rows):
        for line in range(lines):
            prefetch(builder, elem_ptr(builder, c, r * shape.ldc + line * CACHE_LINE // 4), L1)


def prefetch(builder: ir.IRBuilder, ptr: ir.Value, level: int) -> None:
    """A hint to bring the cache line at `ptr` into cache `level` (L1: prefetcht0, L2: prefetcht1 on x86): it never
    faults, whatever the address."""
    fn = intrinsic(builder.module, "llvm.prefetch.p0", ir.VoidType(), [PTR, I32, I32, I32])
    read, data = 0, 1
    builder.call(fn, [ptr, ir.Constant(I32, read), ir.Constant(I32, 4 - level), ir.Constant(I32, data)])


def _finish(builder: ir.IRBuilder, acc, c, first, last, where, shape: KernelShape, tiling: Tiling,
            epilogue: Epilogue | None, pos_map: PosMap) -> None:
    """Add the old C unless first; on the last K block apply the epilogue; store with the edge mask."""
    w = tiling.width
    tail_mask = lane_mask(w, shape.tail) if shape.tail < w else None
    masks = [tail_mask if v == shape.nv - 1 else None for v in range(shape.nv)]
    ptrs = [[elem_ptr(builder, c, r * shape.ldc + v * w) for v in range(shape.nv)] for r in range(shape.rows)]
    fn = builder.function
    add_old = fn.append_basic_block("add_old")
    merged = fn.append_basic_block("merged")
    start = builder.block
    builder.cbranch(first, merged, add_old)
    builder.position_at_end(add_old)
    summed = [[builder.fadd(acc[r][v], load_vec(builder, ptrs[r][v], w, masks[v])) for v in range(shape.nv)]
              for r in range(shape.rows)]
    builder.branch(merged)
    builder.position_at_end(merged)
    tile = []
    for r in range(shape.rows):
        row = []
        for v in range(shape.nv):
            phi = builder.phi(acc[r][v].type)
            phi.add_incoming(acc[r][v], start)
            phi.add_incoming(summed[r][v], add_old)
            row.append(phi)
        tile.append(row)
    plain = fn.append_basic_block("store")
    if epilogue is None:
        builder.branch(plain)
    else:
        final = fn.append_basic_block("epilogue")
        builder.cbranch(last, final, plain)
        builder.position_at_end(final)
        batch, row0, col0, extra = where
        for r in range(shape.rows):
            row = builder.add(row0, const64(r))
            for v in range(shape.nv):
                pos = pos_map(builder, batch, row, builder.add(col0, const64(v * w)), masks[v], extra)
                store_vec(builder, epilogue(builder, tile[r][v], pos), ptrs[r][v], masks[v])
        builder.ret_void()
    builder.position_at_end(plain)
    for r in range(shape.rows):
        for v in range(shape.nv):
            store_vec(builder, tile[r][v], ptrs[r][v], masks[v])
    builder.ret_void()
