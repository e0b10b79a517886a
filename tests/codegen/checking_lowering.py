"""A minimal lowering for module-builder and runtime tests that must not depend on the real per-op lowerings.

It lowers add, mul, relu and neg over float32 operands of one shape (or a one-element operand, splatted): each
kernel takes a share of the flattened elements for (tid, nthreads), a share that differs between kernels (it follows
the kernel's content-derived name), so a missing barrier shows up as wrong results. `asserting_lowering` also checks
the module builder's promise at run time (scratch 64-byte aligned; results and operands, which may be the caller's
arrays, aligned to their float32 elements): a kernel receiving a misaligned pointer writes NaN everywhere instead.
"""
from __future__ import annotations

import llvmlite.ir as ir

from braze.codegen import F32, I64, PTR, define_function, entry_builder, for_range, i64
from braze.codegen.lower.base import KernelContext, KernelSpec
from braze.ir.errors import CodegenError
from braze.ir.graph import Node

SUPPORTED = ("add", "mul", "relu", "neg")


def _apply(b: ir.IRBuilder, op: str, values: list[ir.Value]) -> ir.Value:
    if op == "add":
        return b.fadd(values[0], values[1])
    if op == "mul":
        return b.fmul(values[0], values[1])
    if op == "neg":
        return b.fneg(values[0])
    x = values[0]  # relu that propagates NaN like numpy's maximum
    positive = b.fcmp_unordered(">", x, ir.Constant(F32, 0.0))
    return b.select(positive, x, ir.Constant(F32, 0.0))


def checking_lower(node: Node, ctx: KernelContext, scratch_bytes: int = 0, check_alignment: bool = False
               ) -> KernelSpec:
    """Lower one supported elementwise node (see the module doc)."""
    if node.op not in SUPPORTED:
        raise CodegenError(f"the checking lowering has no rule for {node.op}")
    size = node.out.type.size
    arity = len(node.inputs)
    args = [("out", PTR)] + [(f"in{k}", PTR) for k in range(arity)] + [("scratch", PTR), ("tid", I64),
                                                                           ("nthreads", I64), ("status", PTR)]
    fn = define_function(ctx.module, ctx.name, args, internal=True)
    b = entry_builder(fn)
    out, ins, tid, nthreads = fn.args[0], fn.args[1:1 + arity], fn.args[-3], fn.args[-2]
    if check_alignment:
        _poison_if_misaligned(b, fn, size)
    chunk = b.sdiv(b.add(i64(size), b.sub(nthreads, i64(1))), nthreads)
    # Different kernels give a thread different elements, so a missing barrier shows up as wrong results.
    index = int(ctx.name.split("_")[1][:6], 16)  # k_<content key>_<op>
    share = b.srem(b.add(tid, i64(index)), nthreads)
    start = b.mul(share, chunk)
    stop = b.select(b.icmp_signed("<", b.add(start, chunk), i64(size)), b.add(start, chunk), i64(size))
    scalar = [v.type.size == 1 and size != 1 for v in node.inputs]
    with for_range(b, start, stop, name="i") as i:
        values = [b.load(b.gep(p, [i64(0) if s else i], source_etype=F32), typ=F32, align=4)
                  for p, s in zip(ins, scalar)]
        b.store(_apply(b, node.op, values), b.gep(out, [i], source_etype=F32), align=4)
    b.ret_void()
    return KernelSpec(ctx.name, fn, scratch_bytes, node.op)


def _poison_if_misaligned(b: ir.IRBuilder, fn: ir.Function, size: int) -> None:
    """If the scratch is not 64-byte aligned, or the output or an operand not 4-byte aligned, fill the output with
    NaN and return."""
    misaligned = ir.Constant(ir.IntType(1), 0)
    buffers = fn.args[:-3]
    for k, arg in enumerate(buffers):
        scratch = k == len(buffers) - 1
        low = b.and_(b.ptrtoint(arg, I64), i64(63 if scratch else 3))
        misaligned = b.or_(misaligned, b.icmp_signed("!=", low, i64(0)))
    poison, aligned = fn.append_basic_block("misaligned"), fn.append_basic_block("aligned")
    b.cbranch(misaligned, poison, aligned)
    b.position_at_end(poison)
    with for_range(b, 0, size, name="nan") as i:
        b.store(ir.Constant(F32, float("nan")), b.gep(fn.args[0], [i], source_etype=F32), align=4)
    b.ret_void()
    b.position_at_end(aligned)


def asserting_lowering(node: Node, ctx: KernelContext) -> KernelSpec:
    """checking_lower with 64 scratch bytes and the alignment check in every kernel."""
    return checking_lower(node, ctx, scratch_bytes=64, check_alignment=True)
