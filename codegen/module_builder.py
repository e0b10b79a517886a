"""The whole optimized graph as LLVM modules: one entry function calling one kernel per top-level node, each distinct
kernel in a module of its own.

Input: a graph after the inference pipeline (braze.optimize): leaves (param, constant), `fused` regions and plain
op nodes in topological order, with the memory plan of plan_memory in its attributes. Output: a BuiltModule holding
the kernel parts and an entry module that exports

    void braze_entry_<digest>(ptr inputs, ptr weights, ptr outputs, ptr arena, ptr scratch,
                              i64 tid, i64 nthreads, ptr sync)

`inputs`, `weights` and `outputs` are arrays of data pointers (graph inputs in order; the weight slots of
BuiltModule.weights followed by the buffers of BuiltModule.prepared; graph outputs in order); every intermediate
lives in `arena` at its memory-plan offset; `scratch` holds `scratch_stride` bytes per thread (thread tid's area
starts at scratch + tid * scratch_stride);
`sync` is SYNC_BYTES of zeroed memory for the barrier and the status words of run-time checks (codegen/abi.py),
but for the address of the call's shared area (BuiltModule.shared_bytes; codegen/abi.py: shared packing), which the
runtime stores there before a call runs on several threads.
Every thread of a call runs the entry with its own tid: each kernel's threads claim its work in chunks from a
counter in `sync` (or take fixed shares: codegen/claims.py), and a native barrier (an atomic arrival counter and a
generation counter; a time-bounded spin, then a futex sleep) separates consecutive kernels. A kernel whose work
estimate (the registry's `work` trait) is below SPLIT_WORK runs on thread 0 alone, where splitting it would cost
more in barriers and cache traffic than it saves; consecutive such kernels need no barrier between them. With
nthreads == 1 the barrier returns at once.

Each computing node is lowered by `lower(node, ctx)` (codegen.lower.lower_node by default) into a kernel
`void k(ptr out0, ..., ptr in0, ..., ptr scratch, i64 tid, i64 nthreads, ptr status)` taking the buffers of the
node's results, then its operands (codegen/lower/base.py). Lowering is a pure function of the node's kernel_key and
its context: whatever it needs (a region's domain, a weight stored transposed) the IR states. So a part can be
lowered anywhere the node's IR text goes: `lower_parts` hands the parts no cache knows to the caller, which spreads
them over worker processes (codegen/kernel_worker.py). Each distinct kernel
is a KernelPart: a module of its own whose only exports are the kernel and its prepare functions, named
`k_<key16>_<op>` after module_layout.kernel_part_key (the kernel key, the target, the builder version), so equal
kernels of any two graphs have one name and one cached object and are compiled once (codegen/graph_cache.py). The
entry module declares the parts' functions and the whole is linked as one library (codegen/jit.py).

A kernel may read a param in a prepared form (KernelSpec.prepared: a GEMM's B packed once). Each distinct prepared
form gets a buffer of its stated size after the weight slots, and the module exports

    void braze_prepare_<digest>(ptr weights)

which fills every such buffer from its param; the runtime calls it once, after copying the weights and before the
first call of the entry. Kernels asking for the same form of the same param share one buffer.

Graph outputs that no kernel writes (inputs, params, constants, or a value returned twice) are copied into their
output buffers by thread 0 after the last kernel. Constants up to INLINE_CONSTANT_BYTES become private LLVM
constants; larger ones are weight slots, so their bytes stay out of the IR text. The entry's names derive from a
digest of the graph text, the target and the builder version (module_layout.py), the kernels' from their kernel
keys, so the same graph compiles to the same IR (and the same disk-cache entries) in every process.

Kernel reuse: nodes with equal kernel_key (same op, attributes, region body, operand and result types) share one
kernel part, generated and optimized once; the entry calls it once per node with that node's buffers. Repeated
layers (transformer blocks, ResNet stages) then cost one kernel per distinct shape, and a part some earlier graph
compiled (`known`, the disk cache) is declared without being lowered at all.

Promise to kernels: every buffer pointer they receive refers to a dense row-major array of the value's static shape
and dtype, aligned to the dtype; the arena, weights and scratch are 64-byte aligned (the runtime allocates them), the
graph's inputs and outputs may be the caller's arrays, used in place wherever they start.
"""
from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from typing import Callable, Iterable

import llvmlite.ir as ir
import numpy as np

from braze.ir.errors import CodegenError
from braze.ir.graph import Graph, Node, Value
from braze.ir.printer import format_attrs
from braze.ir.passes.plan_memory import names_storage, storage_aliases
from braze.ir.registry import get_op, is_leaf
from braze.ir.train_step import updated_leaves

from .abi import CALLS, CLAIM_OFFSET, ENTRY, PREPARE, STATUS_OFFSET
from .module_layout import (INLINE_CONSTANT_BYTES, BuiltModule, KernelInfo, KernelPart,  # noqa: F401 (re-exported)
                            PreparedForm, PreparedSlot, WeightSlot, graph_digest, kernel_part_key, memory_plan,
                            module_names, weight_slots)
from .batch_chunks import chunk_graph
from .claims import claimed_chunks
from .sync import declare, emit_barrier
from .lower.base import KernelContext, KernelSpec, PreparedWeight, kernel_arguments
from .lower.checks import module_checks
from .loops import I1, I8, I64, PTR, VOID, for_range, i64, mark_explicit
from .target import Target, host_target

# Work (the registry's estimate: multiply-adds plus elements touched) below which a kernel runs on thread 0 alone:
# a few microseconds on one core, about what a barrier and moving the data between cores cost. At 32 K work a kernel
# already takes 4-7 us on a Zen 4 core (an add of two 128 KB operands 4, a layer norm of 128 rows of 256 7): the
# transformer b1's two layer norms split over two threads ran it 0.6-0.9% faster than at 128 K, the CNN and MLP at
# batch 1 alike.
SPLIT_WORK = 32_768


@dataclass(frozen=True)
class _Place:
    """Where a value lives at run time: base array ("inputs", "weights", "outputs") and index, or arena offset,
    or an LLVM global."""

    where: str
    at: int = 0
    glob: ir.GlobalVariable | None = None


Lowering = Callable[[Node, KernelContext], KernelSpec]
KnownParts = Callable[[str], "KernelPart | None"]


@dataclass(frozen=True)
class PendingPart:
    """A distinct kernel that no cache knows: its part key, kernel key, the first node (at `index`) that needs it
    and the names of the graph's values that are fixed for the module's life (params no step rewrites)."""

    key: str
    kernel: str
    node: Node
    index: int
    fixed: frozenset[str]


# Lowers the pending parts, given the way to lower one of them in this process; returns every part by key.
LowerParts = Callable[[list[PendingPart], Callable[[PendingPart], KernelPart]], dict[str, KernelPart]]


def kernel_name(part_key: str, node: Node) -> str:
    """k_<key16>_<op or fused kind>: named by the kernel's content (kernel_part_key), so equal kernels of any graph
    share one name and one cached object."""
    what = f"{node.attr['kind']}" if node.op == "fused" else node.op
    return f"k_{part_key[:16]}_{re.sub(r'[^A-Za-z0-9_]', '_', what)}"


def build_module(graph: Graph, *, target: Target | None = None, lower: Lowering | None = None,
                 reuse: bool = True, known: KnownParts | None = None,
                 lower_parts: LowerParts | None = None, rows: int | None = None) -> BuiltModule:
    """Lower every node of an optimized graph into a kernel part and emit the entry module (see the module doc);
    with `reuse`, nodes with equal kernel_key share one kernel. `known(key)` may return a part whose object is
    already compiled (the disk cache): that kernel is then declared, not lowered. `lower_parts(pending,
    lower_here)` (default lowering with reuse only) takes over lowering the parts no cache knows, e.g. spreading
    them over worker processes while this process lowers some with `lower_here`. With `rows` (batch_chunks.chunk_rows
    allowed it) the kernels compute chunks of that many rows of the batch and the entry loops over them."""
    target = target or host_target()
    default = lower is None
    if lower is None:
        from .lower import lower_node as lower
    digest = graph_digest(graph, target, rows)
    module = target.new_module(module_names(digest)[0])
    _check_leaves(graph)
    whole = graph
    if rows is not None:  # the kernels compute a chunk of the batch; the entry loops over the chunks
        graph = chunk_graph(graph, rows)
    chunks = 1 if rows is None else whole.inputs[0].shape[0] // rows
    storage = storage_aliases(graph)
    places, weights = _places(graph, module, storage)
    # params a training step rewrites every call are not fixed: a prepared form of them would be redone each call
    updated = updated_leaves(graph)
    fixed = frozenset(p.out.name for p in graph.params() if p.path not in updated)
    uses: list[tuple[str, Node, int]] = []
    parts: dict[str, KernelPart | None] = {}
    pending: list[PendingPart] = []
    for index, node in enumerate(graph.nodes):
        if is_leaf(node) or names_storage(node, storage):
            continue
        key = kernel_key(node, fixed) + ("" if reuse else f" #{index}")
        if not default:  # another lowering's code is not named by the kernel key: keep its names apart
            key += f" lowering={getattr(lower, '__module__', '')}.{getattr(lower, '__qualname__', lower)}"
        part_key = kernel_part_key(key, target)
        if part_key not in parts:
            parts[part_key] = known(part_key) if known is not None and default else None
            if parts[part_key] is None:
                pending.append(PendingPart(part_key, key, node, index, fixed))
        uses.append((part_key, node, index))

    def lower_here(p: PendingPart) -> KernelPart:
        return lower_part(p.node, p.index, p.key, target, lower, fixed)
    if lower_parts is not None and default and reuse and pending:
        parts.update(lower_parts(pending, lower_here))
    else:
        parts.update((p.key, lower_here(p)) for p in pending)
    kernels: list[_Kernel] = []
    for part_key, node, index in uses:
        part = parts.get(part_key)
        if part is None or part.key != part_key:
            raise CodegenError(f"no kernel part was lowered for {node.op} (node {index})")
        _check_part(part, node, index)
        kernels.append(_node_kernel(part, node, index))
    done = [part for part in parts.values() if part is not None]
    _declare_parts(module, done)
    prepared, packed = _prepared_slots(graph, kernels, places, weights)
    stride = max([_round64(k.info.scratch_bytes) for k in kernels] + [0])
    copies = _output_copies(graph, places)
    # The digest covers the default lowering's code (builder_version); another lowering's parts are hashed in, so
    # two lowerings of one graph never share an exported symbol.
    code = digest if default and reuse else _digest_of(digest, reuse, done)
    module.name, entry, prepare_name = module_names(code)
    arena_bytes, _ = memory_plan(graph)
    _emit_entry(module, entry, target, kernels, places, copies, stride, packed, _Chunks.of(graph, chunks, arena_bytes))
    prepare = None
    if prepared:
        prepare = prepare_name
        _emit_prepare(module, prepare, prepared)
    return BuiltModule(module.name, entry, module, target, whole, whole.inputs, whole.outputs, tuple(weights),
                       arena_bytes, stride, tuple(k.info for k in kernels), tuple(prepared), prepare,
                       _all_checks(module, done), tuple(done), chunks)


def kernel_key(node: Node, fixed: frozenset[str]) -> str:
    """Everything a node's kernel depends on: its op, attributes (a region's body included), result types, and per
    operand its type, whether it is fixed (a param) and which operands are the same value. Value names, the node's
    position and where it came from are left out, so repeated layers of a model get equal keys."""
    first: dict[str, int] = {}
    operands = [f"${first.setdefault(v.name, len(first))}:{v.type}{'!' if v.name in fixed else ''}"
                for v in node.inputs]
    results = ", ".join(str(v.type) for v in node.outputs)
    return f"{node.op}({', '.join(operands)}) -> ({results}) {format_attrs(node.attrs)}"


def _digest_of(digest: str, reuse: bool, parts: Iterable[KernelPart]) -> str:
    text = "\n".join([digest, str(reuse), *(p.key for p in parts)])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _node_kernel(part: KernelPart, node: Node, index: int) -> _Kernel:
    """What the entry calls for `node`: its part's kernel with this node's buffers, prepared forms keyed by the
    node's own params."""
    info = KernelInfo(part.name, index, part.op, tuple(v.name for v in node.outputs), part.scratch_bytes,
                      str(node.loc) if node.loc is not None else "")
    prepared = tuple((p, f"{node.inputs[p.operand].name}:{p.form}") for p in part.prepared)
    return _Kernel(info, node.outputs, node.inputs, prepared, get_op(node.op).work_estimate(node))


def _round64(n: int) -> int:
    return -(-int(n) // 64) * 64


def _check_leaves(graph: Graph) -> None:
    flags = [f.path for f in graph.flags()]
    if flags:
        raise CodegenError(f"graph @{graph.name} still has flag leaves ({', '.join(flags)}); specialize them "
                           f"(the specialize_flags pass of the inference pipeline) before building its module")


def _places(graph: Graph, module: ir.Module, storage: dict[str, str]) -> tuple[dict[str, _Place], list[WeightSlot]]:
    """Where every top-level value lives (an alias where its storage does: plan_memory.storage_aliases), and the
    weight slots in order."""
    arena_bytes, offsets = memory_plan(graph)
    places: dict[str, _Place] = {v.name: _Place("inputs", k) for k, v in enumerate(graph.inputs)}
    weights = list(weight_slots(graph))
    places.update((slot.value, _Place("weights", k)) for k, slot in enumerate(weights))
    for node in graph.nodes:
        if node.op == "constant" and node.out.name not in places:
            places[node.out.name] = _constant_global(node, module)
    for k, v in enumerate(graph.outputs):
        places.setdefault(v.name, _Place("outputs", k))
    for node in graph.nodes:
        for v in node.outputs:
            if v.name in places:
                continue
            if v.name in storage:
                places[v.name] = places[storage[v.name]]
                continue
            if v.name not in offsets:
                raise CodegenError(f"graph @{graph.name}: the memory plan has no offset for %{v.name} "
                                   f"(result of {node.op}); run plan_memory last")
            offset = offsets[v.name]
            if offset < 0 or offset % 64 or offset + v.type.nbytes > arena_bytes:
                raise CodegenError(f"graph @{graph.name}: %{v.name} ({v.type}, {v.type.nbytes} bytes) at arena "
                                   f"offset {offset} does not fit an aligned place in {arena_bytes} bytes")
            places[v.name] = _Place("arena", offset)
    return places, weights


def _constant_global(node: Node, module: ir.Module) -> _Place:
    """A constant small enough to inline, as a private LLVM constant."""
    data = bytearray(np.ascontiguousarray(node.attr["value"].array).tobytes()) or bytearray(1)  # never 0 bytes
    typ = ir.ArrayType(I8, len(data))
    glob = ir.GlobalVariable(module, typ, f"braze.const.{node.out.name}")
    glob.initializer = ir.Constant(typ, data)
    glob.global_constant, glob.linkage, glob.unnamed_addr, glob.align = True, "private", True, 64
    return _Place("global", glob=glob)


@dataclass(frozen=True)
class _Kernel:
    """A node's call of a kernel part: the values whose buffers it gets (results first) and, per prepared
    operand, its form and buffer key."""

    info: KernelInfo
    outputs: tuple[Value, ...]
    inputs: tuple[Value, ...]
    prepared: tuple[tuple[PreparedForm, str], ...] = ()
    work: float = 0.0  # the node's work estimate

    @property
    def alone(self) -> bool:
        """Whether thread 0 runs this kernel by itself (see SPLIT_WORK)."""
        return self.work < SPLIT_WORK


def lower_part(node: Node, index: int, part_key: str, target: Target, lower: Lowering | None,
               fixed: frozenset[str]) -> KernelPart:
    """Lower one node (with `lower`, default codegen.lower.lower_node) into a module of its own and check that the
    function it emitted has the kernel signature for its values; the kernel and its prepare functions are the
    module's only exports."""
    if lower is None:
        from .lower import lower_node as lower
    name = kernel_name(part_key, node)
    module = target.new_module(name)
    spec = lower(node, KernelContext(module, target, name, fixed))
    fn = spec.function
    if not isinstance(fn, ir.Function) or fn.module is not module or fn.name != spec.name:
        raise CodegenError(f"lowering {node.op} (node {index}) returned a kernel {spec.name!r} that is not a "
                           f"function of the module being built")
    want = kernel_arguments(len(node.outputs), len(node.inputs))
    if list(fn.function_type.args) != want or fn.function_type.return_type != VOID:
        raise CodegenError(f"kernel {spec.name!r} for {node.op} (node {index}) has signature {fn.function_type}; "
                           f"expected void({', '.join(map(str, want))})")
    _check_prepared(spec, node, index, module)
    if "alwaysinline" not in fn.attributes and "noinline" not in fn.attributes:
        fn.attributes.add("noinline")  # one function per kernel in the optimized IR and the assembly
    exported = {fn.name, *(p.function.name for p in spec.prepared)}
    _export_only(module, exported)
    what = f"fused:{node.attr['kind']}" if node.op == "fused" else spec.op
    prepared = tuple(PreparedForm(p.operand, p.function.name, p.nbytes, _form(p, node)) for p in spec.prepared)
    return KernelPart(part_key, fn.name, what, len(node.outputs), len(node.inputs), int(spec.scratch_bytes),
                      prepared, tuple(sorted(module_checks(module).items())), module, int(spec.shared_bytes))


def _export_only(module: ir.Module, names: set[str]) -> None:
    """Give the listed functions external linkage and every other definition of the module internal linkage."""
    for glob in module.global_values:
        if glob.is_declaration if isinstance(glob, ir.Function) else glob.initializer is None:
            continue
        if glob.name in names:
            glob.linkage = ""
        elif glob.linkage not in ("internal", "private"):
            glob.linkage = "internal"


def _form(p: PreparedWeight, node: Node) -> str:
    """A prepared operand's form without its param's name (lowerings key forms as "<param>:<form>")."""
    name = node.inputs[p.operand].name
    if not p.key.startswith(f"{name}:"):
        raise CodegenError(f"kernel {p.function.name!r} keys a prepared form {p.key!r} that does not start with "
                           f"its param's name {name!r}")
    return p.key[len(name) + 1:]


def _check_part(part: KernelPart, node: Node, index: int) -> None:
    """A part fits the node it computes: as many results and operands, prepared operands among them."""
    if (part.outputs, part.inputs) != (len(node.outputs), len(node.inputs)):
        raise CodegenError(f"kernel {part.name!r} takes {part.outputs} results and {part.inputs} operands; "
                           f"{node.op} (node {index}) has {len(node.outputs)} and {len(node.inputs)}")


def _check_prepared(spec: KernelSpec, node: Node, index: int, module: ir.Module) -> None:
    """Every prepared operand names an input of the kernel, a `void (ptr, ptr)` function of the module and a size."""
    for p in spec.prepared:
        where = f"kernel {spec.name!r} for {node.op} (node {index})"
        if not 0 <= p.operand < len(node.inputs):
            raise CodegenError(f"{where} prepares operand {p.operand}, but it has {len(node.inputs)} inputs")
        fn = p.function
        if not isinstance(fn, ir.Function) or fn.module is not module or \
                list(fn.function_type.args) != [PTR, PTR] or fn.function_type.return_type != VOID:
            raise CodegenError(f"{where} prepares operand {p.operand} with {getattr(fn, 'name', fn)!r}, which is "
                               f"not a void(ptr, ptr) function of the module being built")
        if not isinstance(p.nbytes, int) or p.nbytes <= 0:
            raise CodegenError(f"{where} prepares operand {p.operand} into {p.nbytes!r} bytes; expected a positive "
                               f"byte count")


def _declare_parts(module: ir.Module, parts: Iterable[KernelPart]) -> None:
    """Declare in the entry module every kernel and prepare function the parts export."""
    for part in parts:
        ir.Function(module, ir.FunctionType(VOID, kernel_arguments(part.outputs, part.inputs)), part.name)
        for name in dict.fromkeys(p.function for p in part.prepared):
            ir.Function(module, ir.FunctionType(VOID, [PTR, PTR]), name)


def _all_checks(module: ir.Module, parts: Iterable[KernelPart]) -> tuple[tuple[int, str], ...]:
    """The run-time checks of the entry module and every part; a number two messages share is an error."""
    checks = dict(module_checks(module))
    for part in parts:
        for number, message in part.checks:
            if checks.setdefault(number, message) != message:
                raise CodegenError(f"run-time check {number} has two messages: {checks[number]!r} and {message!r}")
    return tuple(sorted(checks.items()))


def _prepared_slots(graph: Graph, kernels: list[_Kernel], places: dict[str, _Place],
                    weights: list[WeightSlot]) -> tuple[list[PreparedSlot], dict[str, _Place]]:
    """One buffer after the weight slots per distinct prepared form the kernels read, and its place by key."""
    slots: list[PreparedSlot] = []
    by_key: dict[str, PreparedSlot] = {}
    for kernel in kernels:
        for p, key in kernel.prepared:
            value = kernel.inputs[p.operand]
            source = places[value.name]
            if source.where != "weights" or weights[source.at].kind != "param":
                raise CodegenError(f"kernel {kernel.info.name!r} prepares %{value.name}, which is not a param of "
                                   f"graph @{graph.name}: only weights fixed for the module's life can be prepared")
            known = by_key.get(key)
            if known is None:
                known = PreparedSlot(len(weights) + len(slots), source.at, p.function, p.nbytes, key)
                slots.append(known)
                by_key[key] = known
            elif (known.source, known.nbytes) != (source.at, p.nbytes):
                raise CodegenError(f"kernels prepare %{value.name} twice under the key {key!r} with different "
                                   f"sources or sizes")
    return slots, {key: _Place("weights", slot.slot) for key, slot in by_key.items()}


def _emit_prepare(module: ir.Module, name: str, prepared: list[PreparedSlot]) -> None:
    """`void name(ptr weights)`: fill every prepared buffer from its param, in slot order."""
    fn = PREPARE.define(module, name)
    b = ir.IRBuilder(fn.entry_basic_block)
    args = {a.name: a for a in fn.args}
    for slot in prepared:
        function = module.get_global(slot.function)
        src = _pointer(b, args, _Place("weights", slot.source), f"w{slot.source}")
        dst = _pointer(b, args, _Place("weights", slot.slot), f"w{slot.slot}")
        b.call(function, [src, dst])
    b.ret_void()


def _output_copies(graph: Graph, places: dict[str, _Place]) -> list[tuple[int, Value]]:
    """(output index, value) for every output buffer no kernel writes: leaves, inputs and repeated values."""
    copies = []
    for k, v in enumerate(graph.outputs):
        place = places[v.name]
        if not (place.where == "outputs" and place.at == k):
            copies.append((k, v))
    return copies


@dataclass(frozen=True)
class _Chunks:
    """How the entry runs the batch: `count` chunks, input k's and output k's pointers advanced by their
    `inputs[k]` and `outputs[k]` bytes (a chunk's) from one chunk to the next (codegen/batch_chunks.py); a thread
    running chunks of its own keeps their activations at `arena` bytes (one chunk's arena) times its id."""

    count: int = 1
    inputs: tuple[int, ...] = ()
    outputs: tuple[int, ...] = ()
    arena: int = 0

    @classmethod
    def of(cls, graph: Graph, count: int, arena_bytes: int) -> _Chunks:
        """The chunks of a graph cut to one chunk's rows, `count` of them."""
        return cls(count, tuple(v.type.nbytes for v in graph.inputs), tuple(v.type.nbytes for v in graph.outputs),
                   _round64(arena_bytes))

    def pointer(self, b: ir.IRBuilder, args: dict[str, ir.Value], place: _Place, label: str,
                chunk: ir.Value | None) -> ir.Value:
        """The data pointer of a value at its place, in chunk `chunk` when it is an input or output."""
        base = _pointer(b, args, place, label)
        strides = {"inputs": self.inputs, "outputs": self.outputs}.get(place.where)
        if chunk is None or strides is None:
            return base
        return b.gep(base, [b.mul(chunk, i64(strides[place.at]))], inbounds=True, source_etype=I8,
                     name=f"{base.name}.chunk")


def _emit_entry(module: ir.Module, entry: str, target: Target, kernels: list[_Kernel], places: dict[str, _Place],
                copies: list[tuple[int, Value]], stride: int, packed: dict[str, _Place],
                chunks: _Chunks = _Chunks()) -> None:
    mark_explicit(module)  # calls, barriers and copies: nothing for LLVM's loop passes
    fn = ENTRY.define(module, entry)
    b = ir.IRBuilder(fn.entry_basic_block)
    args = {a.name: a for a in fn.args}
    tid, nthreads = args["tid"], args["nthreads"]
    scratch = b.gep(args["scratch"], [b.mul(tid, i64(stride))], inbounds=True, source_etype=I8, name="scratch.t")
    status = b.gep(args["sync"], [i64(STATUS_OFFSET)], inbounds=True, source_etype=I8, name="status")
    barrier = emit_barrier(module, target)
    calls = functools.partial(_emit_calls, b, module, kernels, places, copies, packed, barrier, scratch, status,
                              chunks)
    if chunks.count == 1:
        calls(args, None)
        _count_call(b, args)
        b.ret_void()
        return
    # with at least two chunks per thread, each thread runs the chunks it claims through every kernel by itself,
    # in its own slot of the arena: no barriers, and a chunk's activations stay in one core's cache
    own = b.and_(b.icmp_signed(">", nthreads, i64(1)), b.icmp_signed("<=", b.mul(nthreads, i64(2)), i64(chunks.count)))
    with b.if_else(own) as (by_thread, together):
        with by_thread:
            arena = b.gep(args["arena"], [b.mul(tid, i64(chunks.arena))], inbounds=True, source_etype=I8,
                          name="arena.t")
            claim = b.gep(args["sync"], [i64(CLAIM_OFFSET)], inbounds=True, source_etype=I8, name="chunk.claim")
            with claimed_chunks(b, claim, tid, nthreads, chunks.count, name="chunks") as (start, stop):
                with for_range(b, start, stop, name="chunk") as chunk:
                    calls({**args, "arena": arena}, chunk, alone=True)
        with together:  # every thread takes part in every kernel of each chunk in turn
            with for_range(b, 0, chunks.count, name="chunk") as chunk:
                if kernels and not (kernels[0].alone and kernels[-1].alone):  # the last chunk's results are read
                    with b.if_then(b.icmp_signed("!=", chunk, i64(0))):
                        b.call(barrier, [args["sync"], nthreads])
                calls(args, chunk)
    _count_call(b, args)
    b.ret_void()


def _count_call(b: ir.IRBuilder, args: dict[str, ir.Argument]) -> None:
    """Thread 0 advances the count of calls ended (codegen/abi.py: CALLS) as it leaves the entry; threads still in a
    kernel may read either count, which only sets the order the kernel walks its weight in."""
    with b.if_then(b.icmp_signed("==", args["tid"], i64(0))):
        word = b.gep(args["sync"], [i64(CALLS)], inbounds=True, source_etype=I8, name="calls")
        b.atomic_rmw("add", word, i64(1), "monotonic")


def _emit_calls(b: ir.IRBuilder, module: ir.Module, kernels: list[_Kernel], places: dict[str, _Place],
                copies: list[tuple[int, Value]], packed: dict[str, _Place], barrier: ir.Function, scratch: ir.Value,
                status: ir.Value, chunks: _Chunks, args: dict[str, ir.Value], chunk: ir.Value | None, *,
                alone: bool = False) -> None:
    """Every kernel's call in order, barriers between them, then the copies: the whole batch, or one chunk; with
    `alone`, a chunk this thread runs by itself (each kernel on one thread, no barriers, its own copies)."""
    tid, nthreads = args["tid"], args["nthreads"]
    for k, kernel in enumerate(kernels):
        if k and not alone and not (kernel.alone and kernels[k - 1].alone):  # thread 0 alone reads what it wrote
            b.call(barrier, [args["sync"], nthreads])
        where = [places[v.name] for v in (*kernel.outputs, *kernel.inputs)]
        for p, key in kernel.prepared:
            where[len(kernel.outputs) + p.operand] = packed[key]
        pointers = [chunks.pointer(b, args, place, v.name, chunk)
                    for place, v in zip(where, (*kernel.outputs, *kernel.inputs))]
        function = module.get_global(kernel.info.name)
        if alone:
            b.call(function, [*pointers, scratch, i64(0), i64(1), status])
        elif kernel.alone:
            with b.if_then(b.icmp_signed("==", tid, i64(0))):
                b.call(function, [*pointers, scratch, i64(0), i64(1), status])
        else:
            b.call(function, [*pointers, scratch, tid, nthreads, status])
    if copies:
        if kernels and not alone and not kernels[-1].alone:
            b.call(barrier, [args["sync"], nthreads])
        _emit_copies(b, module, args, places, copies, chunks, chunk, alone)


def _pointer(b: ir.IRBuilder, args: dict[str, ir.Value], place: _Place, label: str) -> ir.Value:
    """The data pointer of a value at its place."""
    name = "p." + re.sub(r"[^A-Za-z0-9_.]", "_", label)
    if place.where == "arena":
        return b.gep(args["arena"], [i64(place.at)], inbounds=True, source_etype=I8, name=name)
    if place.where == "global":
        return place.glob
    slot = b.gep(args[place.where], [i64(place.at)], inbounds=True, source_etype=PTR)
    return b.load(slot, typ=PTR, align=8, name=name)


def _emit_copies(b: ir.IRBuilder, module: ir.Module, args: dict[str, ir.Value], places: dict[str, _Place],
                 copies: list[tuple[int, Value]], chunks: _Chunks, chunk: ir.Value | None, alone: bool) -> None:
    """Thread 0 (or, `alone`, the thread running the chunk) copies each listed value into its output buffer."""
    memcpy = declare(module, "llvm.memcpy.p0.p0.i64", VOID, [PTR, PTR, I64, I1])
    fn = b.function
    copy_block, done = fn.append_basic_block("copy"), fn.append_basic_block("copied")
    b.cbranch(ir.Constant(I1, 1) if alone else b.icmp_signed("==", args["tid"], i64(0)), copy_block, done)
    b.position_at_end(copy_block)
    for k, v in copies:
        if v.type.nbytes:
            dst = chunks.pointer(b, args, _Place("outputs", k), f"out{k}", chunk)
            src = chunks.pointer(b, args, places[v.name], v.name, chunk)
            b.call(memcpy, [dst, src, i64(v.type.nbytes), ir.Constant(I1, 0)])
    b.branch(done)
    b.position_at_end(done)
