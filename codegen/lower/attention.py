"""attention (ir/ops/attention.py): softmax(q @ k^T * scale, masked) @ v in one kernel that never stores the
(L, S) scores, in float32 and float64.

The units are (batch point, block of query rows), claimed by the threads (codegen/claims.py). A unit walks the
keys in blocks of `cols` (a multiple of the vector width W, at most 8 W, fewer where the transposed block would pass
BLOCK_BYTES, so that it stays in L1 beside the value rows): it copies the block of k transposed into its scratch
(E x cols, so the scores of one query row are W keys wide), then takes its rows a group of G at a time (TILES: 4
rows, 6 on a full-width AVX-512 core; the last unit's rows left over in one group of their own, one by one with
`causal`, where a row's first key block varies). For a group it computes the block's scores up
to P key vectors per pass over E (4 with 32 vector registers, 3 with 16; the passes as even as P allows, since a pass
of one vector leaves only G FMA chains), in G x P vector accumulators (each key vector loaded once feeds an FMA for
every row of the group), scales them, applies the mask, the causal mask and the end of the keys as -inf lanes and
stores them before the next pass, and folds each row's scores into its online softmax: the running maximum m, the
running sum l of exp(s - m) and the output accumulator (Ev elements), both rescaled by exp(m_old - m_new) when the
maximum grows; the rows' folds run side by side, not one after another. In float32 the exponentials are powers of
two, 2^((s - m) log2 e) (vecmath.exp2_nonpositive: 12 instructions a vector against 16 through exp), and a positive
scale without a float mask goes into that factor, so the scores are stored unscaled (the transformer's attention ran
2-3% faster). The group's p @ v then runs P output vectors at a time with G rows of accumulators, so each value vector
is loaded once per group (from a contiguous copy of the block's value rows where their stride would crowd them into
a few sets of the L1: copied_values). Only the group's rows of scores (G x cols elements) are ever in memory.
With `causal`, key blocks wholly above the diagonal of a unit are never visited, and a row skips the blocks that
start past it. Where S is not a multiple of the block, the last block runs on code of its own width, its scores and
exponentials covering its keys rounded up to a vector rather than a whole block: 197 keys of 64 dimensions (a
ViT's) are blocks of 64, 64, 64 and 5, and 4 x 12 heads of them ran at 83 GFLOP/s against 76 on one Zen 4 thread
(AVX2: 72 against 62), 77 keys (CLIP's text) at 87 against 67, for about 50 ms more of compile.

The kernel reads q, k and v as rows of unit stride at any offset and row and batch strides, and writes its result
the same way: a plain attention node reads contiguous operands, an attention region (ir/ops/fused.py, formed by the
fuse pass) the views its body's slices, reshapes and transposes make of the region's operands and result
(ir/views.py), so MultiheadAttention's QKV split and head merge copy nothing. A region whose views are not of that
form is lowered op by op.

A maximum that is still -inf (every score so far masked) is used as 0, so exp(-inf - 0) = 0 keeps the sums at 0
instead of NaN; a row masked everywhere then ends as 0 / 0 = NaN, the softmax's answer, or 0 with
zero_masked_rows. A NaN or +inf score makes its row NaN, as in the reference: the maxima drop NaN scores (one
vmaxps each, reducers.quiet_maximum), whose exponentials are NaN and make the row's sum NaN. No keys (S = 0) gives
zeros (an empty sum). Each unit's arithmetic is the same whichever thread computes it, so any thread count gives the
same bytes.
"""
from __future__ import annotations

import math

import llvmlite.ir as ir

from braze.ir.graph import Graph, Node, Value
from braze.ir.registry import get_op
from braze.ir.types import DType
from braze.ir.views import View, contiguous, follow, follow_back, unit_last

from ..loops import CONTRACT, F32, I32, I64, alloca, for_range, i64, vector_const, vector_loop, vector_registers
from ..target import Target
from ..vecmath import exp2_nonpositive
from ..vecmath_emit import VectorEmit
from .base import (Kernel, KernelContext, KernelSpec, Unfusable, begin_kernel, broadcast_strides, claimed_unit_loop,
                   constant, iota, load, offset_of, register, register_type, store, unsupported, widen)
from .elementwise import ELEMENTWISE
from .reducers import Reducer, quiet_maximum

# Query rows per unit, at most: each copied key block serves that many rows, and each key and value block is read
# once per unit. Against 64, the transformer's attention (4 heads, L = 128) ran 1.3% faster on one Zen 4 thread and
# 4-11% on two at 128 rows; at L = 256-1024, 256 rows gained 2-4% on one thread and 7-11% on two over 64 (medians).
ROWS = 256
ACC_BYTES = 64 * 1024  # a unit's output accumulators at most (ROWS rows of 64 float32)
# Units a node is cut into at least, where halving its blocks down to MIN_ROWS rows gets there: one per thread of
# two. One head of 128 rows on two threads: 2 units of 64 rows 171 GFLOP/s, 4 of 32 rows 163 (on one thread 93 / 90).
UNITS = 2
MIN_ROWS = 32
KEY_VECTORS = 8      # key block width in vectors, at most: the scores of one row folded at a time
# (rows G, vectors P) of a group's register tile per vector register count: G x P accumulators, P key (value)
# vectors and a broadcast. With 16 registers (AVX2), 2 x 4 tiles left the FMAs short of independent chains and
# loaded 6 vectors per 8 FMAs: 4 x 3 ran the transformer's attention 1.2x faster. A core with two full-width 512-bit
# FMA ports takes 6 x 4 (24 of 32 registers, 4 vector loads per 24 FMAs): on such a Xeon, one thread, GFLOP/s 4 x 4 /
# 6 x 4, heads of 64 dimensions at L = S = 128 108 / 118, 512 130 / 140, 197 90 / 96, 77 65 / 67, and of 128 at 128
# 110 / 116. Zen 4 (half-width, Target.half_width) keeps the 4 x 4 it was measured with.
TILES = {32: (4, 4), 16: (4, 3)}
FULL_WIDTH_TILE = (6, 4)
BLOCK_BYTES = 16 * 1024   # the transposed key block stays within half of a 32 KB L1 beside the value rows


class _Shapes:
    """The static sizes of one attention node and the blocking chosen for them (`value_row`: the stride of the value
    rows the kernel reads)."""

    def __init__(self, node: Node, target: Target, value_row: int) -> None:
        width = target.vector_width
        q, k, v = node.inputs[:3]
        self.dtype: DType = q.dtype
        self.batch = q.shape[:-2]
        self.L, self.E = q.shape[-2:]
        self.S, self.Ev = k.shape[-2], v.shape[-1]
        self.W = max(width * 4 // self.dtype.itemsize, 1)
        # G rows share each loaded key or value vector; P vectors of each row per pass
        self.G, self.P = group_tile(target)
        fits = BLOCK_BYTES // max(self.E * self.dtype.itemsize * self.W, 1)
        cols = min(max(fits, 1), KEY_VECTORS) * self.W
        self.cols = min(cols, max(-(-self.S // self.W), 1) * self.W)
        self.key_blocks = -(-self.S // self.cols)
        self.vectors = self.cols // self.W  # score vectors of a row in a block, and in the last (narrower) block
        self.last_vectors = -(-(self.S - (self.key_blocks - 1) * self.cols) // self.W) if self.S else self.vectors
        self.rows = unit_rows(math.prod(self.batch), self.L, self.Ev * self.dtype.itemsize, self.G)
        self.query_blocks = -(-self.L // self.rows)
        self.mask = node.inputs[3] if len(node.inputs) > 3 else None
        scores = self.batch + (self.L, self.S)
        self.mask_strides = broadcast_strides(self.mask.shape, scores) if self.mask is not None else None
        # the exponent of a softmax term is (s - m) c: in float32 base 2 (c holds log2 e); where no float mask is
        # added to the scaled scores and scale > 0 (so that the maximum is the same unscaled), scale goes into c too
        # and the scores stay unscaled
        scale = node.attr["scale"]
        self.base2 = self.dtype.itemsize == 4
        self.scaled_in_exponent = scale > 0 and (self.mask is None or self.mask.dtype.name == "bool")
        self.exponent = (scale if self.scaled_in_exponent else 1.0) * (math.log2(math.e) if self.base2 else 1.0)
        self.copy_values = copied_values(value_row, self.Ev, self.dtype.itemsize)

    @property
    def tail_rows(self) -> int:
        """Rows of the last unit past its whole groups (the other units' rows are whole groups)."""
        return (self.L - (self.query_blocks - 1) * self.rows) % self.G if self.L else 0

    @property
    def value_block(self) -> int:
        """Elements of the copy of a key block's value rows (none where the kernel reads them in place)."""
        return self.cols * self.Ev if self.copy_values else 0

    @property
    def scratch_elements(self) -> int:
        """Transposed key block, its value rows where copied, a group's rows of scores, and per row of a unit its
        accumulator, maximum and sum."""
        return self.E * self.cols + self.value_block + self.G * self.cols + self.rows * (self.Ev + 2)


def group_tile(target: Target) -> tuple[int, int]:
    """(G, P): the rows of a group and the key (value) vectors of a pass, by the target's registers and FMA units."""
    registers = vector_registers(target.vector_width)
    full_width = registers == 32 and target.is_x86 and not target.half_width
    return FULL_WIDTH_TILE if full_width else TILES[registers]


def unit_rows(points: int, length: int, row_bytes: int, group: int) -> int:
    """The query rows of one unit for `points` batch points of `length` rows whose output rows take `row_bytes`:
    blocks of at most ROWS rows and ACC_BYTES of accumulators, halved (not below MIN_ROWS) until there are UNITS of
    them, then made equal (a multiple of the row group)."""
    limit = max(min(ROWS, ACC_BYTES // max(row_bytes, 1)), MIN_ROWS)
    while limit > MIN_ROWS and points * -(-length // limit) < UNITS:
        limit //= 2
    blocks = max(-(-length // limit), 1)
    return -(-max(-(-length // blocks), 1) // group) * group


class _Operand:
    """Where the kernel reads q, k, v or the mask, or writes the result: a kernel pointer and the value's view in
    its buffer (unit stride along the last axis for q, k, v and the result)."""

    def __init__(self, pointer: ir.Value, view: View) -> None:
        self.pointer, self.view = pointer, view

    @property
    def row(self) -> int:
        return self.view.strides[-2]


@register("attention")
def lower_attention(node: Node, ctx: KernelContext) -> KernelSpec:
    """The tiled online-softmax kernel described in the module doc."""
    k = begin_kernel(ctx, node.outputs, node.inputs)
    operands = [_Operand(p, contiguous(v.shape)) for p, v in zip(k.ins, node.inputs)]
    return _kernel(k, node, operands, _Operand(k.outs[0], contiguous(node.out.shape)), "attention")


def lower_attention_region(node: Node, ctx: KernelContext, body: Graph) -> KernelSpec:
    """An attention region (ir/ops/fused.py): the kernel reads q, k and v through the body's view ops from the
    region's operands and writes the result through the view ops after it into the region's result, so none of
    them copies; Unfusable where the views are not what the kernel reads (the region then runs op by op)."""
    attention = next(n for n in body.nodes if n.op == "attention")
    if len(body.outputs) != 1:
        raise Unfusable("an attention region has one result")
    sources = [_source(body, v, mask=position == 3) for position, v in enumerate(attention.inputs)]
    view = follow_back(contiguous(body.outputs[0].shape), _chain_from(body, attention.out, body.outputs[0]),
                       get_op)
    if view is None or not unit_last(view, attention.out.shape):
        raise Unfusable("the attention's result is not written through strided views of the region's result")
    k = begin_kernel(ctx, node.outputs, node.inputs)
    operands = [_Operand(k.ins[index], source) for index, source in sources]
    return _kernel(k, attention, operands, _Operand(k.outs[0], view), "fused")


def _source(body: Graph, value: Value, mask: bool) -> tuple[int, View]:
    """Which region operand `value` is read from through the body's view ops, and its view there (the mask is read
    as it is, broadcast to the scores)."""
    producers = body.producers
    chain = []
    while value.name in producers:
        chain.insert(0, producers[value.name])
        if get_op(chain[0].op).view is None:
            raise Unfusable(f"an attention operand is computed by {chain[0].op}, not a view op")
        value = chain[0].inputs[0]
    index = next((i for i, v in enumerate(body.inputs) if v.name == value.name), None)
    view = follow(contiguous(value.shape), chain, get_op) if index is not None else None
    if view is None or (mask and chain) or not unit_last(view, chain[-1].out.shape if chain else value.shape):
        raise Unfusable("an attention operand is not a strided view of a region operand")
    return index, view


def _chain_from(body: Graph, start: Value, end: Value) -> list[Node]:
    """The body's view ops carrying `start` on to `end`, in order."""
    producers, chain = body.producers, []
    while end.name != start.name:
        node = producers.get(end.name)
        if node is None or get_op(node.op).unview is None:
            raise Unfusable("the region's result is not the attention's written through view ops")
        chain.insert(0, node)
        end = node.inputs[0]
    return chain


def copied_values(row: int, Ev: int, itemsize: int) -> bool:
    """Whether a unit copies each key block's value rows to its scratch before the groups' p @ v: where they are
    not contiguous and their stride is a multiple of 1 KB, so that the rows of a block share a few sets of the L1
    (MultiheadAttention's values, every 3 x 256 floats of the fused QKV projection: 16 sets for a block's 64 rows
    of 4 lines each). On one thread of a Xeon with two 512-bit FMA ports, 8 x 4 heads of 64 dimensions at L = S =
    128, GFLOP/s: read in place through such views 119, copied 129, contiguous operands 131-132; the transformer
    layer's attention at batch 8 1.02-1.06 -> 0.99-1.00 ms."""
    return row != Ev and (row * itemsize) % 1024 == 0


def _kernel(k: Kernel, node: Node, operands: list[_Operand], out: _Operand, op: str) -> KernelSpec:
    shapes = _Shapes(node, k.target, operands[2].row)
    if not shapes.dtype.is_float or shapes.dtype.itemsize not in (4, 8):
        raise unsupported(node, "attention compiles in float32 and float64")
    if node.out.type.size:
        with claimed_unit_loop(k, shapes.batch + (shapes.query_blocks,), name="unit") as index:
            _unit(k, node, shapes, index[:-1], index[-1], operands, out)
    return k.finish(op, shapes.scratch_elements * shapes.dtype.itemsize)


class _Unit:
    """Pointers and offsets of one unit: its batch point, its query rows and its scratch areas."""

    def __init__(self, k: Kernel, sh: _Shapes, batch: tuple[ir.Value, ...], block: ir.Value,
                 operands: list[_Operand], out: _Operand) -> None:
        b = k.builder
        self.k, self.sh, self.b = k, sh, b
        self.q, self.keys, self.v = operands[:3]
        self.mask = operands[3] if sh.mask is not None else None
        self.out = out
        self.base = {name: b.add(offset_of(b, batch, operand.view.strides[:-2]), i64(operand.view.offset))
                     for name, operand in (("q", self.q), ("k", self.keys), ("v", self.v), ("out", out))}
        self.mask_base = offset_of(b, batch, sh.mask_strides[:-2]) if sh.mask is not None else None
        self.i0 = b.mul(block, i64(sh.rows))
        end = b.add(self.i0, i64(sh.rows))
        self.rows = b.sub(b.select(b.icmp_signed("<", end, i64(sh.L)), end, i64(sh.L)), self.i0)
        e = sh.dtype.itemsize
        self.kt = k.scratch
        self.vb = b.gep(k.scratch, [i64(sh.E * sh.cols * e)], source_etype=ir.IntType(8))
        self.srow = b.gep(self.vb, [i64(sh.value_block * e)], source_etype=ir.IntType(8))
        self.acc = b.gep(self.srow, [i64(sh.G * sh.cols * e)], source_etype=ir.IntType(8))
        self.m = b.gep(self.acc, [i64(sh.rows * sh.Ev * e)], source_etype=ir.IntType(8))
        self.l = b.gep(self.m, [i64(sh.rows * e)], source_etype=ir.IntType(8))

    def c(self, value: float, lanes: int = 1) -> ir.Constant:
        return constant(self.sh.dtype, value, lanes)


def _unit(k: Kernel, node: Node, sh: _Shapes, batch: tuple[ir.Value, ...], block: ir.Value,
          operands: list[_Operand], out: _Operand) -> None:
    u = _Unit(k, sh, batch, block, operands, out)
    b = u.b
    with for_range(b, 0, u.rows, name="init") as r:
        store(b, u.c(float("-inf")), u.m, r, sh.dtype)
        store(b, u.c(0.0), u.l, r, sh.dtype)
        vector_loop(b, 0, sh.Ev, sh.W, lambda e, lanes: store(b, u.c(0.0, lanes), u.acc,
                                                               b.add(b.mul(r, i64(sh.Ev)), e), sh.dtype), name="zero")
    blocks = i64(sh.key_blocks)
    if node.attr["causal"]:  # the last block holding a key j <= i for the unit's last row i
        last = b.add(b.sdiv(b.add(u.i0, b.sub(u.rows, i64(1))), i64(sh.cols)), i64(1))
        blocks = b.select(b.icmp_signed("<", last, blocks), last, blocks)
    if sh.last_vectors == sh.vectors:
        with for_range(b, 0, blocks, name="kblock") as kb:
            _key_block(u, node, kb, sh.vectors)
    else:  # the last block, narrower, on code of its own width (blocks is key_blocks or, causal, fewer)
        full = i64(sh.key_blocks - 1)
        with for_range(b, 0, b.select(b.icmp_signed("<", blocks, full), blocks, full), name="kblock") as kb:
            _key_block(u, node, kb, sh.vectors)
        with b.if_then(b.icmp_signed("==", blocks, i64(sh.key_blocks))):
            _key_block(u, node, full, sh.last_vectors)
    with for_range(b, 0, u.rows, name="final") as r:
        _finish_row(u, node, r)


def _key_block(u: _Unit, node: Node, kb: ir.Value, vectors: int) -> None:
    """Fold key block kb, whose scores take `vectors` vectors a row, into the unit's rows: its keys transposed,
    then its rows G at a time and the rows left over in one group (with causal, from the block's diagonal on, the
    rows left over one by one). On one thread of a Xeon with two 512-bit FMA ports, 8 x 4 heads of 64 dimensions,
    one by one / in a group, GFLOP/s: L = S = 128 (2 rows left over) 120.0 / 121.9, 197 101.1 / 104.3, 77 63.8 /
    68.3."""
    b, sh = u.b, u.sh
    j0 = b.mul(kb, i64(sh.cols))
    _transpose_keys(u, j0)
    if sh.copy_values:
        _copy_values(u, j0)
    first = b.sub(j0, u.i0) if node.attr["causal"] else i64(0)
    first = b.select(b.icmp_signed(">", first, i64(0)), first, i64(0))
    grouped = b.add(first, b.mul(b.sdiv(b.sub(u.rows, first), i64(sh.G)), i64(sh.G)))
    with for_range(b, first, grouped, sh.G, name="group") as r:
        _row_block(u, node, [b.add(r, i64(t)) for t in range(sh.G)], j0, vectors)
    if node.attr["causal"]:
        with for_range(b, grouped, u.rows, name="row") as r:
            _row_block(u, node, [r], j0, vectors)
    elif sh.tail_rows:  # only the last unit has rows past its groups: all of them in one group
        with b.if_then(b.icmp_signed("<", grouped, u.rows)):
            _row_block(u, node, [b.add(grouped, i64(t)) for t in range(sh.tail_rows)], j0, vectors)


def passes(vectors: int, most: int) -> list[range]:
    """The score vectors of a block cut into as few passes of at most `most` as can be, of sizes differing by at
    most one: a pass of one vector gives a group of G rows G FMA chains, too few to keep the FMA units busy."""
    count = -(-vectors // most)
    bounds = [vectors * i // count for i in range(count + 1)]
    return [range(lo, hi) for lo, hi in zip(bounds, bounds[1:])]


def _cols_in(u: _Unit, j0: ir.Value) -> ir.Value:
    """The keys of the block starting at j0: cols, or fewer in the last block."""
    b, sh = u.b, u.sh
    left = b.sub(i64(sh.S), j0)
    return b.select(b.icmp_signed("<", left, i64(sh.cols)), left, i64(sh.cols))


def _transpose_keys(u: _Unit, j0: ir.Value) -> None:
    """kt[e * cols + c] = k[batch, j0 + c, e] for the block's keys: W x W tiles transposed in registers, the keys
    and elements of E past the last whole tile one by one."""
    b, sh = u.b, u.sh
    base = b.add(u.base["k"], b.mul(j0, i64(u.keys.row)))
    cols = _cols_in(u, j0)
    whole = b.mul(b.sdiv(cols, i64(sh.W)), i64(sh.W)) if sh.W > 1 else cols
    tiled_e = sh.E // sh.W * sh.W if sh.W > 1 else 0
    with for_range(b, 0, whole, sh.W, name="kt.tile") as c0:
        with for_range(b, 0, tiled_e, sh.W, name="kt.e") as e0:
            rows = [load(b, u.keys.pointer, b.add(base, b.add(b.mul(b.add(c0, i64(t)), i64(u.keys.row)), e0)),
                         sh.dtype, sh.W) for t in range(sh.W)]
            for t, column in enumerate(_transposed(b, rows)):
                store(b, column, u.kt, b.add(b.mul(b.add(e0, i64(t)), i64(sh.cols)), c0), sh.dtype)
        _copy_keys(u, base, c0, b.add(c0, i64(sh.W)), tiled_e)
    _copy_keys(u, base, whole, cols, 0)


def _copy_values(u: _Unit, j0: ir.Value) -> None:
    """vb[c * Ev + e] = v[batch, j0 + c, e] for the block's keys: its value rows, contiguous."""
    b, sh = u.b, u.sh
    base = b.add(u.base["v"], b.mul(j0, i64(u.v.row)))
    with for_range(b, 0, _cols_in(u, j0), name="vb.c") as c:
        row, to = b.add(base, b.mul(c, i64(u.v.row))), b.mul(c, i64(sh.Ev))
        vector_loop(b, 0, sh.Ev, sh.W, lambda e, lanes: store(
            b, load(b, u.v.pointer, b.add(row, e), sh.dtype, lanes), u.vb, b.add(to, e), sh.dtype), name="vb.e")


def _copy_keys(u: _Unit, base: ir.Value, first: ir.Value, stop: ir.Value, e_first: int) -> None:
    """kt[e * cols + c] = k[batch, j0 + c, e] one element at a time, for keys [first, stop) and e >= e_first."""
    b, sh = u.b, u.sh
    if e_first >= sh.E:
        return
    with for_range(b, first, stop, name="kt.c") as c:
        row = b.add(base, b.mul(c, i64(u.keys.row)))
        with for_range(b, e_first, sh.E, name="kt.x") as e:
            store(b, load(b, u.keys.pointer, b.add(row, e), sh.dtype), u.kt, b.add(b.mul(e, i64(sh.cols)), c),
                  sh.dtype)


def _transposed(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The columns of a W x W tile held as W row vectors (W a power of two): for each bit h of a position, the
    off-diagonal blocks of size h swap between rows i and i + h (the recursive block transpose)."""
    width = len(rows)
    rows = list(rows)
    h = width // 2
    while h:
        low = vector_const(ir.VectorType(I32, width), [l if not l & h else width + l - h for l in range(width)])
        high = vector_const(ir.VectorType(I32, width), [l + h if not l & h else width + l for l in range(width)])
        for i in range(width):
            if not i & h:
                rows[i], rows[i + h] = (b.shuffle_vector(rows[i], rows[i + h], low),
                                        b.shuffle_vector(rows[i], rows[i + h], high))
        h //= 2
    return rows


def _scores(u: _Unit, node: Node, rows: list[ir.Value], j0: ir.Value, vectors: int) -> list[ir.Value]:
    """The block's scores (`vectors` vectors) of each query row (unit-relative) in `rows`, masked lanes -inf,
    stored to srow (row g's at g * cols) pass by pass, so that only a pass's accumulators live in registers;
    returns each row's lane-wise maximum of them (one vector per row)."""
    b, sh = u.b, u.sh
    vt = register_type(sh.dtype, sh.W)
    queries = [b.add(u.i0, r) for r in rows]
    qrows = [b.add(u.base["q"], b.mul(i, i64(u.q.row))) for i in queries]
    lanes = iota(I64, sh.W)
    tops: list[ir.Value | None] = [None] * len(rows)
    for chunk in passes(vectors, sh.P):
        slots = [[alloca(b, vt, name=f"s{g}.{c}") for c in chunk] for g in range(len(rows))]
        for slot in (slot for group in slots for slot in group):
            b.store(u.c(0.0, sh.W), slot)
        with for_range(b, 0, sh.E, name="dot") as e:
            keys = [load(b, u.kt, b.add(b.mul(e, i64(sh.cols)), i64(c * sh.W)), sh.dtype, sh.W) for c in chunk]
            for qrow, row_slots in zip(qrows, slots):
                qe = widen(b, load(b, u.q.pointer, b.add(qrow, e), sh.dtype), sh.W)
                for kv, slot in zip(keys, row_slots):
                    b.store(b.fadd(b.load(slot, typ=vt), b.fmul(qe, kv, flags=CONTRACT), flags=CONTRACT), slot)
        for g, (i, row_slots) in enumerate(zip(queries, slots)):
            for c, slot in zip(chunk, row_slots):
                j = b.add(widen(b, b.add(j0, i64(c * sh.W)), sh.W), lanes)
                valid = b.icmp_signed("<", j, widen(b, i64(sh.S), sh.W))
                if node.attr["causal"]:
                    valid = b.and_(valid, b.icmp_signed("<=", j, widen(b, i, sh.W)))
                score = b.load(slot, typ=vt)
                if not sh.scaled_in_exponent:
                    score = b.fmul(score, u.c(node.attr["scale"], sh.W))
                if sh.mask is not None:
                    score = _masked(u, score, i, b.add(j0, i64(c * sh.W)), valid)
                score = b.select(valid, score, u.c(float("-inf"), sh.W))
                store(b, score, u.srow, g * sh.cols + c * sh.W, sh.dtype)
                tops[g] = score if tops[g] is None else quiet_maximum(b, tops[g], score)
    return tops


def _masked(u: _Unit, s: ir.Value, i: ir.Value, j: ir.Value, valid: ir.Value) -> ir.Value:
    """The scores with the mask applied: a bool mask's False lanes -inf, a float mask added."""
    b, sh = u.b, u.sh
    row_stride, col_stride = sh.mask_strides[-2:]
    offset = b.add(u.mask_base, b.add(b.mul(i, i64(row_stride)), b.mul(j, i64(col_stride))))
    dtype, ptr = sh.mask.dtype, u.mask.pointer
    m = load(b, ptr, offset, dtype, sh.W, mask=valid) if col_stride else widen(b, load(b, ptr, offset, dtype), sh.W)
    if dtype.name == "bool":
        return b.select(m, s, u.c(float("-inf"), sh.W))
    return b.fadd(s, m)


def _row_block(u: _Unit, node: Node, rows: list[ir.Value], j0: ir.Value, vectors: int) -> None:
    """Fold one key block (`vectors` score vectors a row) into the running maximum, sum and output accumulator of
    each row in `rows` (consecutive unit rows): their scores go to srow, are folded (_fold_scores) and the
    block's p @ v is accumulated."""
    _accumulate(u, rows, j0, _fold_scores(u, rows, _scores(u, node, rows, j0, vectors), vectors))


def _fold_scores(u: _Unit, rows: list[ir.Value], tops: list[ir.Value], vectors: int) -> list[ir.Value]:
    """The online softmax step of each row r of `rows` over its block of scores in srow (row g's at g * cols, their
    lane-wise maximum in tops[g]): its new maximum and sum stored, its scores replaced by their exponentials
    (_exponential of (s - max) c), and the factor alpha = exponential of (m_old - m_new) c its accumulator is to be
    rescaled by, returned per row. The rows' steps are independent chains side by side, not one row after another:
    their rescale factors come from one vector exponential, and their scores' from one loop over the score vectors
    that takes that vector of every row (a copy of the polynomial per row, not per vector) and sums them as it goes."""
    b, sh = u.b, u.sh
    vt = register_type(sh.dtype, sh.W)
    c = u.c(sh.exponent)
    m_old = [load(b, u.m, r, sh.dtype) for r in rows]
    top_of = Reducer("max", sh.dtype, quiet=True).horizontal
    m_new = [quiet_maximum(b, top_of(b, (top,))[0], old) for top, old in zip(tops, m_old)]
    shifts = [b.fmul(b.select(b.fcmp_ordered("==", m, u.c(float("-inf"))), u.c(0.0), m), c) for m in m_new]
    alphas = _exponentials(u, [b.fsub(b.fmul(old, c, flags=CONTRACT), shift, flags=CONTRACT)
                               for old, shift in zip(m_old, shifts)])
    spread = [widen(b, shift, sh.W) for shift in shifts]
    sums = [alloca(b, vt, name=f"sum{g}") for g in range(len(rows))]
    for total in sums:
        b.store(u.c(0.0, sh.W), total)
    with for_range(b, 0, vectors, name="exp") as v:
        for g, (shift, total) in enumerate(zip(spread, sums)):
            offset = b.add(i64(g * sh.cols), b.mul(v, i64(sh.W)))
            s = load(b, u.srow, offset, sh.dtype, sh.W)
            p = _exponential(u, b.fsub(b.fmul(s, u.c(sh.exponent, sh.W), flags=CONTRACT), shift, flags=CONTRACT))
            store(b, p, u.srow, offset, sh.dtype)
            b.store(b.fadd(b.load(total, typ=vt), p), total)
    for r, alpha, m, total in zip(rows, alphas, m_new, sums):
        block_sum = Reducer("sum", sh.dtype).horizontal(b, (b.load(total, typ=vt),))[0]
        store(b, b.fadd(b.fmul(load(b, u.l, r, sh.dtype), alpha), block_sum), u.l, r, sh.dtype)
        store(b, m, u.m, r, sh.dtype)
    return alphas


def _exponential(u: _Unit, y: ir.Value) -> ir.Value:
    """2^y in float32 (y <= 0 here, or NaN), e^y in float64: a softmax term's exponential in the kernel's base."""
    if u.sh.base2:
        lanes = y.type.count if isinstance(y.type, ir.VectorType) else 1
        return exp2_nonpositive(VectorEmit(u.b, u.b.module, lanes, F32), y)
    return ELEMENTWISE["exp"](u.b, [y], {}, u.sh.dtype)


def _exponentials(u: _Unit, values: list[ir.Value]) -> list[ir.Value]:
    """_exponential of each scalar, W of them at a time in the lanes of one vector (the unused lanes take 0)."""
    b, sh = u.b, u.sh
    if sh.W == 1:
        return [_exponential(u, value) for value in values]
    out = []
    for first in range(0, len(values), sh.W):
        part = values[first:first + sh.W]
        vector = u.c(0.0, sh.W)
        for lane, value in enumerate(part):
            vector = b.insert_element(vector, value, ir.Constant(I32, lane))
        result = _exponential(u, vector)
        out += [b.extract_element(result, ir.Constant(I32, lane)) for lane in range(len(part))]
    return out


def _accumulate(u: _Unit, rows: list[ir.Value], j0: ir.Value, alphas: list[ir.Value]) -> None:
    """acc[r] = acc[r] * alpha_r + sum over the block's keys c of p_r[c] * v[batch, j0 + c, :] for each row r of
    `rows`: P vectors of every row at a time (independent FMA chains sharing each loaded value vector), then the
    vectors left over, then the scalar tail of Ev in pieces of at most P."""
    b, sh = u.b, u.sh
    cols = _cols_in(u, j0)
    if sh.copy_values:
        values = (u.vb, i64(0), sh.Ev)
    else:
        values = (u.v.pointer, b.add(u.base["v"], b.mul(j0, i64(u.v.row))), u.v.row)
    vectors = sh.Ev // sh.W
    groups, left = divmod(vectors, sh.P)
    with for_range(b, 0, groups, name="pv.group") as g:
        _pv(u, rows, values, cols, alphas, b.mul(g, i64(sh.P * sh.W)), sh.P, sh.W)
    if left:
        _pv(u, rows, values, cols, alphas, i64(groups * sh.P * sh.W), left, sh.W)
    for e0 in range(vectors * sh.W, sh.Ev, sh.P):
        _pv(u, rows, values, cols, alphas, i64(e0), min(sh.P, sh.Ev - e0), 1)


def _pv(u: _Unit, rows: list[ir.Value], values: tuple[ir.Value, ir.Value, int], cols: ir.Value,
        alphas: list[ir.Value], e0: ir.Value, count: int, lanes: int) -> None:
    """`count` accumulators of `lanes` elements of acc[r] from column e0 on, for each row r of `rows`: rescaled by
    the row's alpha, then the block's p_r[c] * v[c, ...] added for every key c, the block's value rows read from
    `values` (pointer, offset of the block's first row, row stride)."""
    pointer, vbase, stride = values
    b, sh = u.b, u.sh
    vt = register_type(sh.dtype, lanes)
    at = [[b.add(b.add(b.mul(r, i64(sh.Ev)), e0), i64(a * lanes)) for a in range(count)] for r in rows]
    slots = [[alloca(b, vt, name=f"acc{lanes}.{g}.{a}") for a in range(count)] for g in range(len(rows))]
    for row_slots, row_at, alpha in zip(slots, at, alphas):
        for slot, offset in zip(row_slots, row_at):
            b.store(b.fmul(load(b, u.acc, offset, sh.dtype, lanes), widen(b, alpha, lanes)), slot)
    with for_range(b, 0, cols, name=f"pv{lanes}") as c:
        row = b.add(vbase, b.add(b.mul(c, i64(stride)), e0))
        loaded = [load(b, pointer, b.add(row, i64(a * lanes)), sh.dtype, lanes) for a in range(count)]
        for g, row_slots in enumerate(slots):
            p = widen(b, load(b, u.srow, b.add(c, i64(g * sh.cols)), sh.dtype), lanes)
            for value, slot in zip(loaded, row_slots):
                b.store(b.fadd(b.load(slot, typ=vt), b.fmul(p, value, flags=CONTRACT), flags=CONTRACT), slot)
    for row_slots, row_at in zip(slots, at):
        for slot, offset in zip(row_slots, row_at):
            store(b, b.load(slot, typ=vt), u.acc, offset, sh.dtype)


def _finish_row(u: _Unit, node: Node, r: ir.Value) -> None:
    """out[batch, i0 + r, :] = acc[r] / l[r]; 0 for no keys, and for a row masked everywhere with zero_masked_rows."""
    b, sh = u.b, u.sh
    l_r = load(b, u.l, r, sh.dtype)
    empty = b.fcmp_ordered("==", load(b, u.m, r, sh.dtype), u.c(float("-inf")))
    out = b.add(u.base["out"], b.mul(b.add(u.i0, r), i64(u.out.row)))

    def chunk(e: ir.Value, lanes: int) -> None:
        value = b.fdiv(load(b, u.acc, b.add(b.mul(r, i64(sh.Ev)), e), sh.dtype, lanes), widen(b, l_r, lanes))
        if sh.S == 0:
            value = u.c(0.0, lanes)
        elif node.attr["zero_masked_rows"]:
            value = b.select(widen(b, empty, lanes), u.c(0.0, lanes), value)
        store(b, value, u.out.pointer, b.add(out, e), sh.dtype)
    vector_loop(b, 0, sh.Ev, sh.W, chunk, name="out")


__all__ = ["lower_attention", "lower_attention_region"]
