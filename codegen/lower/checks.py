"""Run-time checks in kernels: an index operand out of range is reported through the call's status words
(codegen/abi.py) and raised by the runtime, instead of silently reading a clamped slice.

A check carries its error message as a template with one "{}" for the offending value and is numbered by that
message (a 62-bit hash, so kernels compiled and cached apart agree on numbers): a private constant
`braze.check.<n>` of the kernel's module holds it, and module_checks(module) reads every check back, so the runtime
learns the messages from the modules it loaded and no table travels beside them.

In the hot loop a check costs an unsigned compare and an or per index (a negative index is a huge unsigned one);
the index is still clamped, so every access stays inside its operand. Only when some index was bad does the kernel,
after its loop, scan the whole index operand for the first bad value in row-major order (the one the reference
reports, whichever thread found one) and report it; the first report of a call wins.
"""
from __future__ import annotations

import hashlib

import llvmlite.ir as ir

from braze.ir.graph import Node
from braze.ir.ops.indexing import index_range_message
from braze.ir.types import DType

from ..loops import I1, I8, I64, alloca, for_range, i64, splat
from .base import Kernel, intrinsic, load

CHECK_PREFIX = "braze.check."


def check_number(message: str) -> int:
    """The number of the check with this message: nonzero, the same in every module and process."""
    return int.from_bytes(hashlib.sha256(message.encode("utf-8")).digest()[:8], "little") >> 2 | 1


def _declare_check(module: ir.Module, message: str) -> int:
    """The check number of `message`, its message stored under it in the module once."""
    number = check_number(message)
    if f"{CHECK_PREFIX}{number}" in module.globals:
        return number
    data = bytearray(message.encode("utf-8")) + b"\0"
    typ = ir.ArrayType(I8, len(data))
    glob = ir.GlobalVariable(module, typ, f"{CHECK_PREFIX}{number}")
    glob.initializer = ir.Constant(typ, data)
    glob.global_constant, glob.linkage = True, "private"
    return number


def module_checks(module: ir.Module) -> dict[int, str]:
    """Every check of a module: its number and message template."""
    checks = {}
    for name, glob in module.globals.items():
        if name.startswith(CHECK_PREFIX):
            checks[int(name[len(CHECK_PREFIX):])] = bytes(glob.initializer.constant).rstrip(b"\0").decode("utf-8")
    return checks


class IndexCheck:
    """The range check of one index operand of a kernel: `index(raw)` gives the clamped i64 index and notes an
    out-of-range one (`outside(lanes)` notes those of a vector); `finish()`, emitted after the kernel's loops,
    reports the first bad value of the operand. The operand is `count` dense elements, or with `walk` (its shape,
    element strides and offset) the elements a kernel reads through a broadcast or strided view, in that shape's
    row-major order."""

    def __init__(self, kernel: Kernel, message: str, indices: ir.Value, count: int, dtype: DType, size: int,
                 walk: tuple[tuple[int, ...], tuple[int, ...], int] | None = None) -> None:
        self.kernel, self.indices, self.count, self.dtype, self.size = kernel, indices, count, dtype, size
        self.walk = walk
        self.number = _declare_check(kernel.fn.module, message)
        self.bad = alloca(kernel.builder, I1, name="index.bad")
        kernel.builder.store(ir.Constant(I1, 0), self.bad)

    def _outside(self, b: ir.IRBuilder, index: ir.Value) -> ir.Value:
        return b.icmp_unsigned(">=", index, i64(self.size))

    def index(self, raw: ir.Value) -> ir.Value:
        """`raw` (any int width) as i64 clamped into [0, size); an index outside marks the check failed."""
        b = self.kernel.builder
        index = b.sext(raw, I64) if raw.type != I64 else raw
        b.store(b.or_(b.load(self.bad, typ=I1), self._outside(b, index)), self.bad)
        index = b.select(b.icmp_signed("<", index, i64(0)), i64(0), index)
        return b.select(b.icmp_signed(">=", index, i64(self.size)), i64(max(self.size - 1, 0)), index)

    def outside(self, index: ir.Value, mask: ir.Value | None = None) -> ir.Value:
        """Which lanes of the i64 vector `index` lie outside [0, size), noting any in `mask` (all without one) as a
        failed check."""
        b = self.kernel.builder
        lanes = index.type.count
        outside = b.icmp_unsigned(">=", index, splat(b, i64(self.size), lanes))
        noted = outside if mask is None else b.and_(outside, mask)
        any_outside = intrinsic(b, f"llvm.vector.reduce.or.v{lanes}i1", [noted], I1)
        b.store(b.or_(b.load(self.bad, typ=I1), any_outside), self.bad)
        return outside

    def finish(self) -> None:
        """If an index was bad: find the operand's first bad value and report it (once per call)."""
        b = self.kernel.builder
        with b.if_then(b.load(self.bad, typ=I1), likely=False):
            first = alloca(b, I64, name="index.first")
            b.store(i64(0), first)
            with for_range(b, 0, self.count, name="scan") as k:
                at = b.sub(i64(self.count - 1), k)  # backwards: the last bad one seen is the first in order
                value = load(b, self.indices, self._position(b, at), self.dtype)
                value = b.sext(value, I64) if value.type != I64 else value
                b.store(b.select(self._outside(b, value), value, b.load(first, typ=I64)), first)
            _report(b, self.kernel.status, self.number, b.load(first, typ=I64))


    def _position(self, b: ir.IRBuilder, at: ir.Value) -> ir.Value:
        """Where element `at` (row-major) of the checked operand lies in its buffer."""
        if self.walk is None:
            return at
        shape, strides, offset = self.walk
        position: ir.Value = i64(offset)
        for dim, stride in zip(reversed(shape), reversed(strides)):
            if stride:
                position = b.add(position, b.mul(b.urem(at, i64(dim)), i64(stride)))
            at = b.udiv(at, i64(dim))
        return position


def index_check(k: Kernel, node: Node, position: int, size: int, where: str, *, ptr: ir.Value | None = None,
                walk: tuple[tuple[int, ...], tuple[int, ...], int] | None = None) -> IndexCheck:
    """The range check of the node's operand `position` (its kernel argument, or `ptr` read through `walk`), with
    the reference's message and the node it is in."""
    indices = node.inputs[position]
    loc = f", from {node.loc}" if node.loc is not None and str(node.loc) else ""
    message = f"{index_range_message(node.op, '{}', size, where)} (in %{node.out.name} = {node.op}{loc})"
    return IndexCheck(k, message, k.ins[position] if ptr is None else ptr, indices.type.size, indices.dtype, size,
                      walk)


def _report(b: ir.IRBuilder, status: ir.Value, number: int, value: ir.Value) -> None:
    """Record (number, value) in the status words unless an earlier check of the call did."""
    pair = b.cmpxchg(status, i64(0), i64(number), "monotonic", "monotonic")
    with b.if_then(b.extract_value(pair, 1)):
        slot = b.gep(status, [i64(8)], inbounds=True, source_etype=I8)
        b.atomic_rmw("xchg", slot, value, "monotonic")
