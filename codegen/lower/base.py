"""What every lowering shares: the kernel contract (KernelContext in, KernelSpec out), the kernel function, element
types with their register and memory forms, loads and stores of any dtype, the thread split and row iteration.

Kernel ABI: `void @name(ptr %out0, ..., ptr %in0, ..., ptr %scratch, i64 %tid, i64 %nthreads, ptr %status)`:
result buffers first, then operand buffers in node order, then this thread's scratch area (64-byte aligned,
KernelSpec.scratch_bytes long), the thread's index and the thread count, and the call's status words, where a
kernel's run-time checks report what they find (codegen/abi.py, codegen/lower/checks.py) and beyond which it finds
the claim words and the share words (the call's shared area of KernelSpec.shared_bytes: share_words). Kernels are
internal and never inlined, so each one stays a function of its own in the optimized module and in the assembly.
Every buffer is dense row-major with its value's static shape and dtype; loads and stores claim only element
alignment.

Registers hold bool as i1 and memory as i8 (0 or 1); every other dtype is its own LLVM type in both places (u8 is
i8, read with unsigned semantics). A "lanes" count of 1 means a scalar, more means a <lanes x T> vector.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from math import prod
from typing import Callable, Iterator, Sequence

import llvmlite.ir as ir

from braze.ir.errors import CodegenError
from braze.ir.graph import Node, Value
from braze.ir import views
from braze.ir.types import DType

from ..abi import CLAIM_OFFSET, CLAIM_SLOT_BYTES, CLAIM_SLOTS, SHARE_OFFSET, STATUS_OFFSET
from ..claims import claimed_chunks
from ..loops import (F32, F64, I1, I8, I32, I64, PTR, alloca, for_range, i64, lane_mask, splat, store_prefix,
                     vector_const, zeros)
from ..target import Target

SCRATCH_ALIGN = 64

_REGISTER = {"f32": F32, "f64": F64, "i32": I32, "i64": I64, "i8": I8, "u8": I8, "bool": I1}
_MEMORY = {**_REGISTER, "bool": I8}
_SUFFIX = {"f32": "f32", "f64": "f64", "i32": "i32", "i64": "i64", "i8": "i8", "u8": "i8", "bool": "i8"}


@dataclass(frozen=True)
class KernelContext:
    """Where a lowering emits its kernel: the module, the target and the kernel's unique, deterministic name.

    `fixed` names the operand values whose buffers hold the same bytes for the module's life (params): a lowering
    may read those in a prepared form (KernelSpec.prepared). A lowering reads nothing but its node and this context.
    """

    module: ir.Module
    target: Target
    name: str
    fixed: frozenset[str] = frozenset()

    def sub(self, suffix: str) -> KernelContext:
        """The context of an inner kernel (a region lowered op by op): same module and target, the name extended by
        `suffix`, no fixed operands (an inner kernel's operands are the region's values)."""
        return KernelContext(self.module, self.target, f"{self.name}.{suffix}")


@dataclass(frozen=True)
class PreparedWeight:
    """An operand the kernel reads in a form prepared once per loaded module (a GEMM's pre-packed B).

    `function` is `void (ptr src, ptr dst)`: it rewrites the buffer of the kernel's input number `operand` (a param,
    constant for the module's life) into `nbytes` bytes, and the kernel receives those bytes instead of the param.
    Equal `key`s prepare equal bytes from the same param, so kernels sharing a key may share one buffer.
    """

    operand: int
    function: ir.Function
    nbytes: int
    key: str


@dataclass(frozen=True)
class KernelSpec:
    """An emitted kernel: call `function(*results, *operands, scratch, tid, nthreads, status)` with the buffers of the
    lowered node's results and operands.

    `scratch_bytes` is per thread, a multiple of 64 (0 when the kernel needs none); `shared_bytes` the size of the
    call's shared area the kernel uses (codegen/abi.py: shared packing). `prepared` lists the operands passed in a
    prepared form instead of their own buffer.
    """

    name: str
    function: ir.Function
    scratch_bytes: int
    op: str
    prepared: tuple[PreparedWeight, ...] = ()
    shared_bytes: int = 0


@dataclass
class Kernel:
    """A kernel function being emitted: its builder and its arguments by role (`outs` and `ins` are the pointer
    arguments of the node's results and operands)."""

    fn: ir.Function
    builder: ir.IRBuilder
    outs: list[ir.Value]
    ins: list[ir.Value]
    scratch: ir.Value
    tid: ir.Value
    nthreads: ir.Value
    status: ir.Value
    target: Target
    claim_sites: int = 0  # claimed loops emitted so far (claim_words)
    shares: int = 0  # users of the share words so far (share_words)

    @property
    def width(self) -> int:
        """Lanes of the vectors the kernel's inner loops use."""
        return self.target.vector_width

    def finish(self, op: str, scratch_bytes: int = 0, prepared: Sequence[PreparedWeight] = (),
               shared_bytes: int = 0) -> KernelSpec:
        """Close the function and describe it."""
        if not self.builder.block.is_terminated:
            self.builder.ret_void()
        return KernelSpec(self.fn.name, self.fn, round_up(scratch_bytes), op, tuple(prepared), round_up(shared_bytes))


def begin_kernel(ctx: KernelContext, outputs: Sequence[Value], inputs: Sequence[Value], *,
                 noalias: bool = True) -> Kernel:
    """Declare the kernel function of the ABI above; `noalias` is off for kernels whose results may be written
    over an operand (elementwise kernels, which the memory plan lets work in place)."""
    args = kernel_arguments(len(outputs), len(inputs))
    fn = ir.Function(ctx.module, ir.FunctionType(ir.VoidType(), args), name=ctx.name)
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    fn.attributes.add("noinline")
    names = [f"out{i}" for i in range(len(outputs))] + [f"in{i}" for i in range(len(inputs))]
    for arg, name in zip(fn.args, names + ["scratch", "tid", "nthreads", "status"]):
        arg.name = name
        if noalias and isinstance(arg.type, ir.PointerType):
            arg.add_attribute("noalias")
    n = len(outputs)
    builder = ir.IRBuilder(fn.append_basic_block("entry"))
    scratch, tid, nthreads, status = fn.args[-4:]
    return Kernel(fn, builder, list(fn.args[:n]), list(fn.args[n:n + len(inputs)]), scratch, tid, nthreads, status,
                  ctx.target)


def kernel_arguments(outputs: int, inputs: int) -> list[ir.Type]:
    """The parameter types of a kernel with this many results and operands (the kernel ABI above)."""
    return [PTR] * (outputs + inputs + 1) + [I64, I64, PTR]


class Unfusable(Exception):
    """A fused region a specialized kernel cannot run as one loop nest; the region is then lowered op by op."""


def unsupported(node: Node, why: str) -> CodegenError:
    """The error for a node no lowering can compile, naming the op, its operand types and its provenance."""
    where = f" (from {node.loc})" if node.loc and str(node.loc) else ""
    types = ", ".join(str(v.type) for v in node.inputs)
    return CodegenError(f"cannot compile {node.op}({types}){where}: {why}")


def round_up(value: int, to: int = SCRATCH_ALIGN) -> int:
    return -(-value // to) * to


# --- element types ------------------------------------------------------------------------------------------


def register_type(dtype: DType, lanes: int = 1) -> ir.Type:
    """The LLVM type that holds `lanes` elements of dtype in registers (bool as i1)."""
    element = _REGISTER[dtype.name]
    return element if lanes == 1 else ir.VectorType(element, lanes)


def memory_type(dtype: DType) -> ir.Type:
    """The LLVM type of one stored element (bool as i8)."""
    return _MEMORY[dtype.name]


def lanes_of(value: ir.Value) -> int:
    return value.type.count if isinstance(value.type, ir.VectorType) else 1


def constant(dtype: DType, value: float | int | bool, lanes: int = 1) -> ir.Constant:
    """A constant of dtype in register form, splatted to `lanes`."""
    element = _REGISTER[dtype.name]
    if dtype.is_float:
        scalar = ir.Constant(element, float(value))
    else:
        bits = element.width
        number = int(value) & ((1 << bits) - 1)
        scalar = ir.Constant(element, number - (1 << bits) if bits > 1 and number >= 1 << (bits - 1) else number)
    return scalar if lanes == 1 else vector_const(ir.VectorType(element, lanes), [scalar] * lanes)


def widen(builder: ir.IRBuilder, value: ir.Value, lanes: int) -> ir.Value:
    """A scalar splatted to `lanes` (a value that already has them is returned as is)."""
    return value if lanes_of(value) == lanes else splat(builder, value, lanes)


def pointer(builder: ir.IRBuilder, base: ir.Value, index: ir.Value | int, dtype: DType) -> ir.Value:
    """The address of element `index` of a buffer of dtype."""
    return builder.gep(base, [i64(index)], source_etype=memory_type(dtype))


def _intrinsic(module: ir.Module, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
    existing = module.globals.get(name)
    return existing if existing is not None else ir.Function(module, ir.FunctionType(ret, list(args)), name)


def load(builder: ir.IRBuilder, base: ir.Value, index: ir.Value | int, dtype: DType, lanes: int = 1,
         mask: ir.Value | None = None) -> ir.Value:
    """`lanes` consecutive elements from base[index] in register form; with a mask, only its lanes are read."""
    element = memory_type(dtype)
    typ = element if lanes == 1 else ir.VectorType(element, lanes)
    ptr = pointer(builder, base, index, dtype)
    if mask is None:
        raw = builder.load(ptr, typ=typ, align=dtype.itemsize)
    else:
        fn = _intrinsic(builder.module, f"llvm.masked.load.v{lanes}{_SUFFIX[dtype.name]}.p0", typ,
                        [PTR, I32, mask.type, typ])
        raw = builder.call(fn, [ptr, ir.Constant(I32, dtype.itemsize), mask, zeros(typ)])
    if dtype.name == "bool":
        return builder.icmp_unsigned("!=", raw, zeros(typ))
    return raw


def store(builder: ir.IRBuilder, value: ir.Value, base: ir.Value, index: ir.Value | int, dtype: DType,
          mask: ir.Value | None = None) -> None:
    """Store a register value (scalar or vector) at base[index]; with a mask, only its lanes are written."""
    lanes = lanes_of(value)
    element = memory_type(dtype)
    typ = element if lanes == 1 else ir.VectorType(element, lanes)
    if dtype.name == "bool":
        value = builder.zext(value, typ)
    ptr = pointer(builder, base, index, dtype)
    if mask is None:
        builder.store(value, ptr, align=dtype.itemsize)
        return
    fn = _intrinsic(builder.module, f"llvm.masked.store.v{lanes}{_SUFFIX[dtype.name]}.p0", ir.VoidType(),
                    [typ, PTR, I32, mask.type])
    builder.call(fn, [value, ptr, ir.Constant(I32, dtype.itemsize), mask])


# A contiguous row's last n % W elements (row engine, elementwise nest) go one by one up to this many, else as one
# vector whose lanes past the row are masked. Side by side on one Zen 4 thread (ns per element, rows of 48 + tail,
# masked / one by one), AVX-512: softmax 0.55 / 0.51 at a tail of 1, 0.57 / 0.57 at 2, 0.56 / 0.57 at 3, 0.52 /
# 0.90 at 8; layer norm 0.35 / 0.41 at 1, 0.31 / 0.35 at 8. AVX2 code: softmax 0.86 / 0.79 at 1, 0.87 / 0.85 at 2,
# 0.86 / 0.90 at 3, 0.79 / 1.03 at 6.
SCALAR_TAIL = 1


def masked_tail(n: int, width: int) -> int:
    """How many elements the partial last vector of a row of n holds: n % W, or 0 when the row ends in whole vectors
    or in a few elements that go one by one (SCALAR_TAIL)."""
    tail = n % width if width > 1 else 0
    return tail if tail > SCALAR_TAIL else 0


def store_first(builder: ir.IRBuilder, value: ir.Value, base: ir.Value, index: ir.Value | int, dtype: DType,
                count: int, target: Target) -> None:
    """Store the first `count` lanes of vector `value` at base[index]: one masked store where the target's are cheap
    (Target.native_masks), else plain stores of power-of-two pieces."""
    lanes = lanes_of(value)
    if target.native_masks:
        store(builder, value, base, index, dtype, lane_mask(lanes, count))
        return
    if dtype.name == "bool":
        value = builder.zext(value, ir.VectorType(memory_type(dtype), lanes))
    store_prefix(builder, value, pointer(builder, base, index, dtype), count)


def intrinsic(builder: ir.IRBuilder, name: str, args: Sequence[ir.Value], ret: ir.Type | None = None) -> ir.Value:
    """Call an LLVM intrinsic (or libm function) declared once per module from the arguments' types."""
    fn = _intrinsic(builder.module, name, ret or args[0].type, [a.type for a in args])
    return builder.call(fn, list(args))


def iota(dtype: ir.IntType, lanes: int) -> ir.Constant:
    """The vector (0, 1, ..., lanes-1)."""
    return vector_const(ir.VectorType(dtype, lanes), list(range(lanes)))


# --- shapes and strides ---------------------------------------------------------------------------------------


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, inner = [], 1
    for dim in reversed(shape):
        strides.append(inner)
        inner *= dim
    return tuple(reversed(strides))


def broadcast_strides(shape: Sequence[int], target: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a dense array of `shape` read as if broadcast to `target` (0 along repeated axes)."""
    return views.broadcast(views.contiguous(shape), shape, target).strides


def broadcasts_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    return len(shape) <= len(target) and all(d in (1, t) for d, t in zip(reversed(shape), reversed(target)))


def coalesce(shape: Sequence[int], strides: Sequence[Sequence[int]], labels: Sequence[object] | None = None
             ) -> tuple[list[int], list[list[int]], list[object]]:
    """Drop size-1 axes and merge neighbours that every array walks as one (same label, stride[i] equal to
    stride[i+1] * shape[i+1] for every array), so loop nests are as shallow and inner loops as long as possible."""
    labels = list(labels) if labels is not None else [None] * len(shape)
    keep = [a for a, d in enumerate(shape) if d != 1]
    dims = [shape[a] for a in keep]
    walks = [[s[a] for a in keep] for s in strides]
    marks = [labels[a] for a in keep]
    a = len(dims) - 2
    while a >= 0:
        if marks[a] == marks[a + 1] and all(w[a] == w[a + 1] * dims[a + 1] for w in walks):
            dims[a:a + 2] = [dims[a] * dims[a + 1]]
            for w in walks:
                w[a:a + 2] = [w[a + 1]]
            marks[a:a + 2] = [marks[a]]
        a -= 1
    return dims, walks, marks


def offset_of(builder: ir.IRBuilder, index: Sequence[ir.Value], strides: Sequence[int],
              base: ir.Value | int = 0) -> ir.Value:
    """base + sum(index[d] * strides[d]), skipping zero strides."""
    total = i64(base)
    for value, stride in zip(index, strides):
        if stride:
            total = builder.add(total, value if stride == 1 else builder.mul(value, i64(stride)))
    return total


# --- threads and rows -----------------------------------------------------------------------------------------


def thread_share(builder: ir.IRBuilder, tid: ir.Value, nthreads: ir.Value, units: int) -> tuple[ir.Value, ir.Value]:
    """The units [u0, u1) thread `tid` of `nthreads` takes: contiguous, balanced, together covering [0, units) once.
    An invalid tid gets nothing; a thread count below 1 counts as 1."""
    count = builder.select(builder.icmp_signed("<", nthreads, i64(1)), i64(1), nthreads)
    valid = builder.and_(builder.icmp_signed(">=", tid, i64(0)), builder.icmp_signed("<", tid, count))
    first = builder.sdiv(builder.mul(tid, i64(units)), count)
    last = builder.sdiv(builder.mul(builder.add(tid, i64(1)), i64(units)), count)
    return builder.select(valid, first, i64(0)), builder.select(valid, last, i64(0))


def claim_words(k: Kernel) -> ir.Value:
    """The claim words for the kernel's next claimed loop, which it reaches from its status pointer: slot n of
    CLAIM_SLOTS for its nth loop (codegen/abi.py), a null pointer (a static share per thread) past the last slot."""
    site, k.claim_sites = k.claim_sites, k.claim_sites + 1
    if site >= CLAIM_SLOTS:
        return ir.Constant(PTR, None)
    return k.builder.gep(k.status, [i64(CLAIM_OFFSET - STATUS_OFFSET + CLAIM_SLOT_BYTES * site)], inbounds=True,
                         source_etype=I8, name=f"claim{site}")


def share_words(k: Kernel) -> ir.Value:
    """The share words (codegen/abi.py) for the kernel's first user of them, from its status pointer; a null
    pointer (no sharing) for any later one, which could meet the first one's words before they are zeroed."""
    k.shares += 1
    if k.shares > 1:
        return ir.Constant(PTR, None)
    return k.builder.gep(k.status, [i64(SHARE_OFFSET - STATUS_OFFSET)], inbounds=True, source_etype=I8, name="share")


@contextmanager
def claimed_unit_loop(k: Kernel, dims: Sequence[int], *, name: str = "unit") -> Iterator[tuple[ir.Value, ...]]:
    """unit_loop over the units of the row-major product of `dims` this thread claims, chunk by chunk, from the
    call's claim words (codegen/claims.py): for loops whose units are independent of each other."""
    with claimed_chunks(k.builder, claim_words(k), k.tid, k.nthreads, prod(dims), name=f"{name}.claim") as chunk:
        with unit_loop(k.builder, dims, *chunk, name=name) as index:
            yield index


@contextmanager
def unit_loop(builder: ir.IRBuilder, dims: Sequence[int], start: ir.Value, stop: ir.Value, *,
              name: str = "unit") -> Iterator[tuple[ir.Value, ...]]:
    """Loop over units [start, stop) of the row-major product of `dims`, yielding each unit's index tuple.

    The start index is split into coordinates once (one division per axis per call); after that the coordinates
    advance like an odometer, with a compare and a select per axis and no division. With an empty axis there are
    no units: the body is emitted in a loop that never runs.
    """
    if 0 in dims:
        with for_range(builder, i64(0), i64(0), name=name):
            yield tuple(i64(0) for _ in dims)
        return
    if len(dims) <= 1:
        with for_range(builder, start, stop, name=name) as unit:
            yield (unit,) if dims else ()
        return
    slots = [alloca(builder, I64, name=f"{name}.c{axis}") for axis in range(len(dims))]
    inner = prod(dims)
    for axis, dim in enumerate(dims):
        inner //= dim
        coordinate = builder.udiv(start, i64(inner)) if inner > 1 else start
        builder.store(builder.urem(coordinate, i64(dim)) if axis else coordinate, slots[axis])
    with for_range(builder, start, stop, name=name):
        index = tuple(builder.load(slot, typ=I64) for slot in slots)
        yield index
        carry: ir.Value = ir.Constant(I1, 1)
        for axis in reversed(range(len(dims))):
            moved = builder.add(index[axis], builder.zext(carry, I64))
            wrap = builder.icmp_signed("==", moved, i64(dims[axis]))
            builder.store(builder.select(wrap, i64(0), moved), slots[axis])
            carry = wrap


def by_size(b: ir.IRBuilder, block: ir.Value, blocks: int, size: int, last: int, emit: Callable[[int], None]) -> None:
    """emit(n) for block `block` of `blocks`, n its static size: `size`, or in a branch of its own `last` for the
    last block where that is smaller."""
    if last == size:
        emit(size)
        return
    with b.if_else(b.icmp_unsigned("==", block, i64(blocks - 1))) as (is_last, is_full):
        with is_last:
            emit(last)
        with is_full:
            emit(size)


# --- the lowering table ---------------------------------------------------------------------------------------

Lowering = Callable[[Node, KernelContext], KernelSpec]
LOWERINGS: dict[str, Lowering] = {}


def register(*ops: str) -> Callable[[Lowering], Lowering]:
    """Register a lowering for the named ops (each op has exactly one)."""
    def wrap(fn: Lowering) -> Lowering:
        for op in ops:
            if op in LOWERINGS:
                raise CodegenError(f"op {op!r} already has a lowering")
            LOWERINGS[op] = fn
        return fn
    return wrap


def scatter(builder: ir.IRBuilder, value: ir.Value, base: ir.Value, offsets: ir.Value, dtype: DType,
            mask: ir.Value) -> None:
    """base[offsets[i]] = value[i] for the lanes in `mask` (i64 offsets); gather's inverse. Register form (bool as
    i1) like `store`."""
    lanes = offsets.type.count
    element = memory_type(dtype)
    typ = ir.VectorType(element, lanes)
    ptrs = builder.gep(base, [offsets], source_etype=element)
    ptrs.type = ir.VectorType(PTR, lanes)  # llvmlite types a vector-indexed gep as a scalar pointer
    fn = _intrinsic(builder.module, f"llvm.masked.scatter.v{lanes}{_SUFFIX[dtype.name]}.v{lanes}p0", ir.VoidType(),
                    [typ, ptrs.type, I32, mask.type])
    if dtype.name == "bool":
        value = builder.zext(value, typ)
    builder.call(fn, [value, ptrs, ir.Constant(I32, dtype.itemsize), mask])


def gather(builder: ir.IRBuilder, base: ir.Value, offsets: ir.Value, dtype: DType, mask: ir.Value,
           fill: ir.Value) -> ir.Value:
    """base[offsets[i]] in lane i for the lanes in `mask` (i64 offsets, or i32 ones sign-extended), `fill` in the
    others; masked-off lanes never touch memory. Register form (bool as i1) like `load`."""
    lanes = offsets.type.count
    element = memory_type(dtype)
    typ = ir.VectorType(element, lanes)
    ptrs = builder.gep(base, [offsets], source_etype=element)
    ptrs.type = ir.VectorType(PTR, lanes)  # llvmlite types a vector-indexed gep as a scalar pointer
    fn = _intrinsic(builder.module, f"llvm.masked.gather.v{lanes}{_SUFFIX[dtype.name]}.v{lanes}p0", typ,
                    [ptrs.type, I32, mask.type, typ])
    if dtype.name == "bool":
        fill = builder.zext(fill, typ)
    raw = builder.call(fn, [ptrs, ir.Constant(I32, dtype.itemsize), mask, fill])
    return builder.icmp_unsigned("!=", raw, zeros(typ)) if dtype.name == "bool" else raw
