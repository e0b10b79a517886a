"""matmul, linear and conv2d, alone or as the anchor of a gemm/conv region whose elementwise epilogue is fused into
the store of every accumulator vector.

float32 runs on codegen.gemm / codegen.conv (blocked, packed, register-tiled; threads split C's panels). The
epilogue evaluates the region body after the anchor on each <W x float> accumulator at its tile position: operands
are read through their broadcast strides (masked at the edge of C), every region result other than the one stored
as C is written from the epilogue too. C is a float32 result of the region (the GEMM accumulates K blocks in it);
a region without one accumulates in per-thread scratch. linear(x, W) is matmul(x, W^T) with W stored (out, in): B
is W read with swapped strides (B's packing then does the transpose). When B is a fixed operand (a param, see
KernelContext.fixed) that the GEMM would pack on every call, the kernel instead reads B pre-packed: it lists a
PreparedWeight whose prepack function the module runs once when it is loaded. At one to three rows of x the GEMM
is a GEMV that streams W as stored (codegen/gemv.py), with nothing to pack. A conv2d (other than depthwise,
which reads its weight in place) whose weight is fixed likewise reads the weight pre-packed as its GEMM's A.

float64 matmul and linear run on the packed blocks and register tiles of matmul_tiled.py, float64 conv2d on the
register tile of conv_tiled.py, both applying a region's epilogue to C's final values the same way; integer matmul
runs on a row kernel vectorized along C's columns, and integer regions are lowered op by op (fused.py).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import llvmlite.ir as ir

from braze.ir.graph import Graph, Node, Value
from braze.ir.registry import is_leaf
from braze.ir.types import float32, float64

from ..conv import (ConvSpec, conv2d_scratch_bytes, conv2d_shared_bytes, conv_weight_floats, emit_conv2d,
                    emit_conv_weight_prepack, weight_kernel)
from ..gemm import (GemmSpec, Prepacked, Strided, TilePos, Tiling, emit_gemm, emit_prepack_b, gemm_plan,
                    gemm_scratch_bytes, gemm_shared_bytes, matmul_spec, prepacked_b_floats, tiling_for, uses_gemv)
from ..gemm_pack import batch_offset
from ..loops import I8, PTR, alloca, for_range, i64, vector_loop
from .base import (KernelContext, KernelSpec, PreparedWeight, Unfusable, begin_kernel, broadcast_strides,
                   claim_words, claimed_unit_loop, constant, contiguous_strides, load, offset_of, register, round_up,
                   share_words, store, unsupported, widen)
from .conv_tiled import tiled_conv2d
from .elementwise import apply_node
from .matmul_tiled import Operands, tiled_matmul
from .reduction import single_body

# Maps a shape broadcasting to the anchor's result to (offset of a tile position, stride along the columns).
Mapper = Callable[[tuple[int, ...]], tuple[Callable[[ir.IRBuilder, TilePos], ir.Value], int]]


def anchor_of(body: Graph) -> Node:
    return next(n for n in body.nodes if not is_leaf(n))


def _b_operand(anchor: Node) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """B's shape and element strides as the GEMM reads it: a linear's (out, in) weight with its axes swapped."""
    y = anchor.inputs[1]
    if anchor.op != "linear":
        return y.shape, None
    rows, cols = contiguous_strides(y.shape)
    return y.shape[::-1], (cols, rows)


def _prepack_b(ctx: KernelContext, spec: GemmSpec, param: Value, operand: int,
               tiling: Tiling) -> tuple[GemmSpec, PreparedWeight] | None:
    """`spec` reading B pre-packed once from `param` (constant for the module's life), when the kernel would
    otherwise pack B on every call and one packed matrix serves every batch (B broadcast over the batch)."""
    b = spec.b
    if not isinstance(b, Strided) or any(b.batch_strides) or spec.k * spec.n == 0 or uses_gemv(spec) \
            or gemm_plan(spec, tiling).b_mode != "pack":
        return None
    source = Strided(b.rs, b.cs)
    fn = emit_prepack_b(ctx.module, f"{ctx.name}.prepack_b", spec.k, spec.n, source, tiling)
    fn.linkage = "internal"
    nbytes = 4 * prepacked_b_floats(spec.k, spec.n, tiling)
    key = f"{param.name}:gemm_b:{spec.k}x{spec.n}:{b.rs},{b.cs}:{tiling.nr}"
    packed = GemmSpec(spec.m, spec.n, spec.k, spec.a, Prepacked(b.batch_strides), spec.c, spec.batch)
    return packed, PreparedWeight(operand, fn, nbytes, key)


def _prepack_conv_weight(ctx: KernelContext, spec: ConvSpec, param: Value, operand: int,
                         tiling: Tiling) -> tuple[ConvSpec, PreparedWeight] | None:
    """`spec` reading its weight as A panels packed once from `param`, for a conv that runs on the GEMM."""
    m, _, k = spec.gemm_dims
    if spec.depthwise or m * k == 0:
        return None
    fn = emit_conv_weight_prepack(ctx.module, f"{ctx.name}.prepack_w", spec, tiling)
    fn.linkage = "internal"
    nbytes = 4 * conv_weight_floats(spec, tiling)
    layout = f"{weight_kernel(spec, tiling)}:{tiling.width}x{tiling.mr}"
    key = f"{param.name}:conv_w:{'x'.join(map(str, spec.weight_shape))}:g{spec.groups}:{layout}"
    return replace(spec, prepacked_weight=True), PreparedWeight(operand, fn, nbytes, key)


def epilogue_of(body: Graph, anchor: Node, mapper: Mapper, slots: dict[str, int], c_name: str | None,
                bias_slot: int | None):
    """The GEMM epilogue evaluating the body after the anchor; `slots` maps body inputs and side-stored results to
    extra-pointer indices. Returns None when there is nothing to do (C is the anchor and nothing else leaves)."""
    side = [v for v in body.outputs if v.name != c_name]
    rest = [n for n in body.nodes if n is not anchor]
    if not rest and not side and bias_slot is None:
        return None
    used = {v.name for n in rest for v in n.inputs}
    readers = {v.name: mapper(v.shape) for v in body.inputs if v.name in used}
    dtypes = {v.name: v.dtype for v in body.inputs}
    out_offset, _ = mapper(anchor.out.shape)

    def apply(b: ir.IRBuilder, acc: ir.Value, pos: TilePos) -> ir.Value:
        lanes = acc.type.count
        if bias_slot is not None:
            acc = b.fadd(acc, widen(b, load(b, pos.args[bias_slot], pos.row, float32), lanes))
        env = {anchor.out.name: acc}

        def value(v: Value) -> ir.Value:
            if v.name not in env:
                offset, step = readers[v.name]
                ptr = pos.args[slots[v.name]]
                env[v.name] = load(b, ptr, offset(b, pos), dtypes[v.name], lanes, pos.mask) if step else \
                    widen(b, load(b, ptr, offset(b, pos), dtypes[v.name]), lanes)
            return env[v.name]
        for node in rest:
            env[node.outputs[0].name] = apply_node(b, node, [value(v) for v in node.inputs], lanes)
        for v in side:
            store(b, env[v.name], pos.args[slots[v.name]], out_offset(b, pos), v.dtype, pos.mask)
        return env[c_name] if c_name is not None else acc
    return apply


def plan_region(body: Graph, anchor: Node) -> tuple[dict[str, int], str | None]:
    """Extra-pointer slots (epilogue inputs, then side-stored results) and the result stored as C."""
    used = {v.name for n in body.nodes if n is not anchor for v in n.inputs}
    inputs = [v.name for v in body.inputs if v.name in used]
    floats = [v.name for v in body.outputs if v.dtype == anchor.out.dtype]
    c_name = floats[-1] if floats else None
    slots = {name: i for i, name in enumerate(inputs)}
    for v in body.outputs:
        if v.name != c_name:
            slots.setdefault(v.name, len(slots))
    return slots, c_name


def _gemm_region(node: Node, ctx: KernelContext, body: Graph) -> KernelSpec:
    anchor = anchor_of(body)
    x, y = anchor.inputs
    index = {v.name: i for i, v in enumerate(body.inputs)}
    if x.name not in index or y.name not in index or anchor.out.dtype not in (float32, float64):
        raise Unfusable("the matmul's operands are not region operands of float32 or float64")
    if anchor.out.dtype == float64:
        return _tiled_region(node, ctx, body, anchor, index)
    # B read pre-packed replaces the operand's buffer in the whole kernel, so nothing else may read it there.
    reads_y = any(y in n.inputs for n in body.nodes if n is not anchor) or x.name == y.name
    weight = node.inputs[index[y.name]]
    y_shape, y_strides = _b_operand(anchor)
    spec = matmul_spec(x.shape, y_shape, None, y_strides)
    tiling = tiling_for(ctx.target.vector_width, cpu=ctx.target.cpu)
    fixed = not reads_y and weight.name in ctx.fixed
    prepared = _prepack_b(ctx, spec, weight, index[y.name], tiling) if fixed else None
    if prepared is not None:
        spec = prepared[0]
    slots, c_name = plan_region(body, anchor)
    epilogue = epilogue_of(body, anchor, _gemm_mapper(anchor, spec), slots, c_name, None)
    k = begin_kernel(ctx, node.outputs, node.inputs)
    fn = emit_gemm(ctx.module, f"{ctx.name}.gemm", spec, tiling, epilogue, len(slots))
    fn.linkage = "internal"
    scratch, shared = gemm_scratch_bytes(spec, tiling), gemm_shared_bytes(spec, tiling)
    return _call(k, fn, [k.ins[index[x.name]], k.ins[index[y.name]]], body, slots, c_name, anchor, (scratch, shared),
                 node.op, () if prepared is None else (prepared[1],), counts_calls=uses_gemv(spec))


def _gemm_mapper(anchor: Node, spec: GemmSpec) -> Mapper:
    """Offsets of the GEMM's tile positions in a shape broadcasting to the matmul's result (Mapper)."""
    x, y = anchor.inputs
    out_shape = anchor.out.shape
    nbatch = len(spec.batch)

    def mapper(shape: tuple[int, ...]):
        s = broadcast_strides(shape, out_shape)
        rows = s[nbatch] if x.type.rank > 1 else 0
        cols = s[-1] if y.type.rank > 1 else 0
        batch_strides = s[:nbatch]

        def offset(b: ir.IRBuilder, pos: TilePos) -> ir.Value:
            total = b.add(b.mul(pos.row, i64(rows)), b.mul(pos.col, i64(cols)))
            return b.add(total, batch_offset(b, pos.batch, spec.batch, batch_strides)) if nbatch else total
        return offset, cols
    return mapper


def _tiled_region(node: Node, ctx: KernelContext, body: Graph, anchor: Node, index: dict[str, int]) -> KernelSpec:
    """A float64 gemm region: matmul_tiled with the region's epilogue applied to C's final values, C the float64
    result the region stores last (plan_region)."""
    x, y = anchor.inputs
    y_shape, y_strides = _b_operand(anchor)
    spec = matmul_spec(x.shape, y_shape, None, y_strides)
    slots, c_name = plan_region(body, anchor)
    if c_name is None:
        raise Unfusable("no float64 result of the region to accumulate C in")
    epilogue = epilogue_of(body, anchor, _gemm_mapper(anchor, spec), slots, c_name, None)
    k = begin_kernel(ctx, node.outputs, node.inputs)
    where, extras = _region_pointers(k, body, slots)
    operands = Operands(k.ins[index[x.name]], k.ins[index[y.name]], where[c_name], epilogue, tuple(extras))
    return tiled_matmul(node.op, k, spec, anchor.out.dtype, operands)


def _region_pointers(k, body: Graph, slots: dict[str, int]) -> tuple[dict[str, ir.Value], list[ir.Value]]:
    """The kernel's buffer of every region operand and result by name, and the extra pointers in slot order."""
    where = {v.name: k.ins[i] for i, v in enumerate(body.inputs)}
    where |= {v.name: k.outs[i] for i, v in enumerate(body.outputs)}
    return where, [where[name] for name, _ in sorted(slots.items(), key=lambda item: item[1])]


def _call(k, fn: ir.Function, operands: list[ir.Value], body: Graph, slots: dict[str, int], c_name: str | None,
          anchor: Node, sizes: tuple[int, int], op: str, prepared: tuple[PreparedWeight, ...] = (), *,
          counts_calls: bool = False) -> KernelSpec:
    """Call the GEMM/conv function with C, the scratch, the share words and the extra pointers in slot order;
    `sizes` are the bytes of scratch per thread and of the shared area it needs. A GEMV (`counts_calls`) gets the
    share words for the call count beside them (codegen/abi.py: CALLS)."""
    b = k.builder
    scratch, shared = sizes
    where, extras = _region_pointers(k, body, slots)
    total = scratch
    if c_name is None:
        c = b.gep(k.scratch, [i64(round_up(scratch))], source_etype=I8)
        total = round_up(scratch) + anchor.out.type.nbytes
    else:
        c = where[c_name]
    share = share_words(k) if shared or counts_calls else ir.Constant(PTR, None)
    b.call(fn, operands + [c, k.scratch, k.tid, k.nthreads, claim_words(k), share] + extras)
    return k.finish(op, total, prepared, shared)


def _conv_region(node: Node, ctx: KernelContext, body: Graph) -> KernelSpec:
    anchor = anchor_of(body)
    x, w = anchor.inputs[:2]
    index = {v.name: i for i, v in enumerate(body.inputs)}
    if any(v.name not in index for v in anchor.inputs) or anchor.out.dtype not in (float32, float64):
        raise Unfusable("the conv2d's operands are not region operands of float32 or float64")
    if anchor.out.dtype == float64:
        return _tiled_conv_region(node, ctx, body, anchor, index)
    attrs = anchor.attr
    n, c, h, wd = x.shape
    spec = ConvSpec(n, c, h, wd, w.shape[0], w.shape[2], w.shape[3], attrs["stride"], attrs["padding"],
                    attrs["dilation"], attrs["groups"])
    slots, c_name = plan_region(body, anchor)
    bias_slot = None
    if len(anchor.inputs) == 3:
        bias_slot = slots.setdefault(anchor.inputs[2].name, len(slots))
    epilogue = epilogue_of(body, anchor, _conv_mapper(anchor), slots, c_name, bias_slot)
    tiling = tiling_for(ctx.target.vector_width, cpu=ctx.target.cpu)
    weight = node.inputs[index[w.name]]
    prepared = _prepack_conv_weight(ctx, spec, weight, index[w.name], tiling) if weight.name in ctx.fixed else None
    if prepared is not None:
        spec = prepared[0]
    k = begin_kernel(ctx, node.outputs, node.inputs)
    fn = emit_conv2d(ctx.module, f"{ctx.name}.conv", spec, tiling, epilogue, len(slots))
    fn.linkage = "internal"
    scratch, shared = conv2d_scratch_bytes(spec, tiling), conv2d_shared_bytes(spec, tiling)
    return _call(k, fn, [k.ins[index[x.name]], k.ins[index[w.name]]], body, slots, c_name, anchor, (scratch, shared),
                 node.op, () if prepared is None else (prepared[1],))


def _conv_mapper(anchor: Node) -> Mapper:
    """Offsets of the conv's tile positions (image, output channel, output position) in a shape broadcasting to its
    result, which must be linear in the output position (Mapper)."""
    out_shape = anchor.out.shape
    width = out_shape[3]

    def mapper(shape: tuple[int, ...]):
        s = broadcast_strides(shape, out_shape)
        if s[2] != s[3] * width and out_shape[2] > 1:  # one output row (a 1-d conv): any row stride is linear
            raise Unfusable(f"an epilogue operand of shape {shape} is not linear in the output position")

        def offset(b: ir.IRBuilder, pos: TilePos) -> ir.Value:
            return offset_of(b, [pos.batch, pos.row, pos.col], [s[0], s[1], s[3]])
        return offset, s[3]
    return mapper


def _tiled_conv_region(node: Node, ctx: KernelContext, body: Graph, anchor: Node, index: dict[str, int]
                       ) -> KernelSpec:
    """A float64 conv region: conv_tiled starting from the bias, the region's epilogue applied to each stored
    vector, C the float64 result the region stores last (plan_region)."""
    slots, c_name = plan_region(body, anchor)
    if c_name is None:
        raise Unfusable("no float64 result of the region to store the conv in")
    epilogue = epilogue_of(body, anchor, _conv_mapper(anchor), slots, c_name, None)
    k = begin_kernel(ctx, node.outputs, node.inputs)
    where, extras = _region_pointers(k, body, slots)
    x, w, *bias = (k.ins[index[v.name]] for v in anchor.inputs)
    operands = Operands(x, w, where[c_name], epilogue, tuple(extras), bias[0] if bias else None)
    return tiled_conv2d(anchor, k, operands, node.op)


# --- other dtypes ---------------------------------------------------------------------------------------------


def _generic_matmul(node: Node, ctx: KernelContext) -> KernelSpec:
    """C[i, j..j+W] = sum_k A[i, k] B[k, j..j+W] per row of every batch, for integer dtypes; float64 goes to
    matmul_tiled."""
    x = node.inputs[0]
    y_shape, y_strides = _b_operand(node)
    spec = matmul_spec(x.shape, y_shape, None, y_strides)
    dtype = node.out.dtype
    k = begin_kernel(ctx, node.outputs, node.inputs)
    b = k.builder
    if spec.m * spec.n * spec.count == 0:
        return k.finish(node.op)
    if dtype == float64:
        return tiled_matmul(node.op, k, spec, dtype)
    with claimed_unit_loop(k, list(spec.batch) + [spec.m], name="row") as index:
        batch, i = index[:-1], index[-1]
        a0 = offset_of(b, list(batch) + [i], spec.a.batch_strides + (spec.a.rs,))
        b0 = offset_of(b, batch, spec.b.batch_strides)
        c0 = offset_of(b, list(batch) + [i], spec.c.batch_strides + (spec.c.rs,))

        def body(j: ir.Value, lanes: int) -> None:
            zero = constant(dtype, 0, lanes)
            acc = alloca(b, zero.type)
            b.store(zero, acc)
            with for_range(b, 0, spec.k, name="k") as kk:
                a = widen(b, load(b, k.ins[0], b.add(a0, b.mul(kk, i64(spec.a.cs))), dtype), lanes)
                col = b.add(b0, b.mul(kk, i64(spec.b.rs)))
                bv = load(b, k.ins[1], b.add(col, b.mul(j, i64(spec.b.cs))), dtype, lanes)
                old = b.load(acc, typ=zero.type)
                new = b.fadd(old, b.fmul(a, bv)) if dtype.is_float else b.add(old, b.mul(a, bv))
                b.store(new, acc)
            store(b, b.load(acc, typ=zero.type), k.outs[0], b.add(c0, j), dtype)
        vector_loop(b, 0, spec.n, k.width if spec.b.cs == 1 else 1, body, name="j")
    return k.finish(node.op)


@register("matmul", "linear")
def lower_matmul(node: Node, ctx: KernelContext) -> KernelSpec:
    if node.out.dtype != float32:
        return _generic_matmul(node, ctx)
    return _gemm_region(node, ctx, single_body(node))


@register("conv2d")
def lower_conv2d(node: Node, ctx: KernelContext) -> KernelSpec:
    if node.out.dtype != float32:
        return tiled_conv2d(node, begin_kernel(ctx, node.outputs, node.inputs))
    try:
        return _conv_region(node, ctx, single_body(node))
    except Unfusable as exc:
        raise unsupported(node, str(exc)) from None


# Region kernels of anchors other than matmul, linear and conv2d, by the anchor's op (quant_gemm.py adds its own).
ANCHORED: dict[str, Callable[[Node, KernelContext, Graph], KernelSpec]] = {}


def lower_anchored(node: Node, ctx: KernelContext, body: Graph) -> KernelSpec:
    """A gemm or conv region (raises Unfusable for regions these kernels cannot run)."""
    own = ANCHORED.get(anchor_of(body).op)
    if own is not None:
        return own(node, ctx, body)
    return (_gemm_region if node.attr["kind"] == "gemm" else _conv_region)(node, ctx, body)


__all__ = ["ANCHORED", "anchor_of", "epilogue_of", "lower_anchored", "lower_conv2d", "lower_matmul", "plan_region"]
