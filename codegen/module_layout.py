"""What the runtime needs to call a whole graph's module, apart from its code, and the key that finds that code.

A BuiltModule is the LLVM module of a graph (module_builder.py) plus its layout: the entry and prepare function
names, the weight slots, the prepared-weight buffers, the per-thread scratch stride and the kernels in call order.
The layout is stored as the `meta` object of the graph's disk-cache entry (codegen/cache.py), keyed by
`module_key`: a digest of the optimized graph's text (with its memory plan), the target identity (triple, CPU name,
features, optimization level, llvmlite version) and the code generator's version (BUILDER_VERSION and a hash of
its own source files, so a changed lowering never meets an object built by an older one). A warm load reads the
entry, rebuilds the BuiltModule from the layout and the graph, and links the object: no LLVM IR is built, printed,
parsed or optimized. Weight slots are derived from the graph again (`weight_slots`), never read from the entry.
"""
from __future__ import annotations

import functools
import glob
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from braze.ir.errors import CodegenError
from braze.ir.graph import Graph, Value
from braze.ir.types import TensorType

from . import cache, conv_tuning

if TYPE_CHECKING:  # llvmlite.ir and the target are needed only to build a module, not to describe one
    import llvmlite.ir as ir

    from .target import Target

BUILDER_VERSION = 3
INLINE_CONSTANT_BYTES = 8192


@dataclass(frozen=True)
class WeightSlot:
    """One entry of the weights array: a param leaf (by path) or a constant too large to inline."""

    value: str
    type: TensorType
    kind: str            # "param" or "constant"
    path: str            # the param's path; for constants the value name

    def array(self, graph: Graph) -> np.ndarray:
        """This slot's data: the param's array from the graph's weights, or the constant's value."""
        if self.kind == "constant":
            return graph.producers[self.value].attr["value"].array
        try:
            return np.asarray(graph.weights[self.path])
        except KeyError:
            raise CodegenError(f"graph @{graph.name} has no weight for param '{self.path}'; "
                               f"its weights hold {', '.join(sorted(graph.weights)) or 'nothing'}") from None


@dataclass(frozen=True)
class PreparedSlot:
    """A param in a prepared form: `function(weights[source], weights[slot])` fills `nbytes` bytes once per load."""

    slot: int
    source: int
    function: str
    nbytes: int
    key: str


@dataclass(frozen=True)
class KernelInfo:
    """A kernel the entry calls: its function name, the node it computes and its scratch bytes per thread.

    Nodes whose kernels would be identical (kernel reuse, module_builder.kernel_key) share one function name."""

    name: str
    index: int
    op: str
    results: tuple[str, ...]
    scratch_bytes: int
    loc: str = ""


@dataclass(frozen=True)
class PreparedForm:
    """A prepared operand of a kernel part: `function` fills `nbytes` bytes from operand `operand`; `form` names
    the prepared form (the buffer key is the param's name and the form, so kernels sharing both share a buffer)."""

    operand: int
    function: str
    nbytes: int
    form: str


@dataclass(frozen=True)
class KernelPart:
    """One distinct kernel of a module, compiled and cached as an object of its own (see module_builder.py).

    `key` is the disk-cache key of its object (kernel_part_key: the node's kernel key, the target and the builder
    version); `name` the kernel function it exports beside its prepare functions; `module` its llvmlite module, or
    None when its object came from the cache and no LLVM IR was built for it; `shared_bytes` the size of the call's
    shared area it uses (codegen/abi.py)."""

    key: str
    name: str
    op: str
    outputs: int
    inputs: int
    scratch_bytes: int
    prepared: tuple[PreparedForm, ...] = ()
    checks: tuple[tuple[int, str], ...] = ()
    module: ir.Module | None = None
    shared_bytes: int = 0

    @property
    def symbols(self) -> tuple[str, ...]:
        """The functions its object exports: the kernel, then its prepare functions."""
        return (self.name, *dict.fromkeys(p.function for p in self.prepared))


def part_meta(part: KernelPart) -> dict[str, Any]:
    """A kernel part's description as JSON data, stored beside its object."""
    return {"name": part.name, "op": part.op, "outputs": part.outputs, "inputs": part.inputs,
            "scratch_bytes": part.scratch_bytes, "shared_bytes": part.shared_bytes,
            "prepared": [[p.operand, p.function, p.nbytes, p.form] for p in part.prepared],
            "checks": [[number, message] for number, message in part.checks]}


def part_from_meta(key: str, meta: dict[str, Any]) -> KernelPart | None:
    """The kernel part stored under `key`, or None when its description is malformed."""
    try:
        name, op, outputs, inputs, scratch, shared = _typed(
            [meta["name"], meta["op"], meta["outputs"], meta["inputs"], meta["scratch_bytes"], meta["shared_bytes"]],
            (str, str, int, int, int, int))
        prepared = tuple(PreparedForm(*_typed(p, (int, str, int, str))) for p in meta["prepared"])
        checks = tuple(tuple(_typed(c, (int, str))) for c in meta["checks"])
    except (KeyError, TypeError, ValueError):
        return None
    if min(outputs, inputs, scratch, shared) < 0 or any(not 0 <= p.operand < inputs or p.nbytes <= 0
                                                        for p in prepared):
        return None
    return KernelPart(key, name, op, outputs, inputs, scratch, prepared, checks,  # type: ignore[arg-type]
                      shared_bytes=shared)


@dataclass(frozen=True)
class BuiltModule:
    """The modules of a whole graph and what the runtime needs to call its entry: `module` holds the entry and
    prepare functions (None when its object came from the disk cache and no LLVM IR was built), `parts` the
    distinct kernels, each a module and object of its own."""

    name: str
    entry: str
    module: ir.Module | None
    target: Target
    graph: Graph
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    weights: tuple[WeightSlot, ...]
    arena_bytes: int
    scratch_stride: int
    kernels: tuple[KernelInfo, ...]
    prepared: tuple[PreparedSlot, ...] = ()
    prepare: str | None = None   # the exported prepare function, None when nothing is prepared
    checks: tuple[tuple[int, str], ...] = ()  # the run-time checks' numbers and messages (codegen/lower/checks.py)
    parts: tuple[KernelPart, ...] = ()
    chunks: int = 1  # the entry runs the batch in this many chunks, the kernels and arena_bytes sized for one
    # (codegen/batch_chunks.py); `graph`, `inputs` and `outputs` are the whole batch's

    def arena_for(self, threads: int) -> int:
        """The arena a call on `threads` threads needs: with chunks, one chunk's (rounded to 64 bytes) per thread
        that may run chunks of its own (the entry lets each do so with two chunks a thread or more), else one."""
        if self.chunks == 1:
            return self.arena_bytes
        return -(-self.arena_bytes // 64) * 64 * max(1, min(threads, self.chunks // 2))

    @property
    def rows(self) -> int | None:
        """The rows of one chunk of the batch, or None when the entry runs it whole."""
        return None if self.chunks == 1 else self.inputs[0].shape[0] // self.chunks

    @property
    def shared_bytes(self) -> int:
        """The size of the call's shared area (codegen/abi.py): the most any of its kernels uses."""
        return max((part.shared_bytes for part in self.parts), default=0)

    def kernel(self, name: str) -> KernelInfo:
        """The (first) kernel called `name`; raises CodegenError listing the kernels."""
        for k in self.kernels:
            if k.name == name:
                return k
        raise CodegenError(f"module {self.name!r} has no kernel {name!r}; kernels: "
                           f"{', '.join(k.name for k in self.kernels) or 'none'}")

    @property
    def distinct_kernels(self) -> int:
        """How many kernel functions the module holds (nodes with identical kernels share one)."""
        return len({k.name for k in self.kernels})


def weight_slots(graph: Graph) -> tuple[WeightSlot, ...]:
    """The weight slots in order: every param, and every constant larger than INLINE_CONSTANT_BYTES."""
    slots = []
    for node in graph.nodes:
        if node.op == "param":
            slots.append(WeightSlot(node.out.name, node.out.type, "param", node.attr["path"]))
        elif node.op == "constant" and node.out.type.nbytes > INLINE_CONSTANT_BYTES:
            slots.append(WeightSlot(node.out.name, node.out.type, "constant", node.out.name))
    return tuple(slots)


def memory_plan(graph: Graph) -> tuple[int, dict[str, int]]:
    """The arena size and offsets of plan_memory; raises CodegenError when the graph was not planned."""
    plan = graph.attributes.get("memory_plan")
    if not isinstance(plan, dict) or "offsets" not in plan or "arena_bytes" not in plan:
        raise CodegenError(f"graph @{graph.name} has no memory plan; optimize it with the inference pipeline "
                           f"(or a pipeline ending in plan_memory) before building its module")
    return int(plan["arena_bytes"]), {str(k): int(v) for k, v in dict(plan["offsets"]).items()}


def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def sources_digest(root: Path, patterns: tuple[str, ...]) -> str:
    """The sha256 of the names and text of the files under `root` matching `patterns` (a version of that code).
    Reading and hashing a megabyte of sources costs a new process milliseconds, so the digest is recorded in the
    disk cache under a stamp of the files (name, size, modification time in ns, inode: what Python's own bytecode
    cache trusts, and finer) and read back while no file's stamp changes."""
    names = sorted(name for pattern in patterns for name in glob.glob(pattern, root_dir=root))
    stamps = []
    for name in names:
        info = os.stat(os.path.join(root, name))
        stamps.append(f"{Path(name).as_posix()} {info.st_size} {info.st_mtime_ns} {info.st_ino}")
    key = _digest("braze-sources-stamp", str(root), *stamps) if cache.enabled() else None
    entry = cache.load(key, counted=False) if key is not None else None
    recorded = entry.meta.get("sha256") if entry is not None else None
    if isinstance(recorded, str) and len(recorded) == 64:
        return recorded
    h = hashlib.sha256()
    for name in names:
        for data in (Path(name).as_posix().encode("utf-8"), (root / name).read_bytes()):
            h.update(len(data).to_bytes(8, "little"))
            h.update(data)
    if key is not None:
        cache.store(key, b"", (), {"sha256": h.hexdigest()}, counted=False)
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def builder_version() -> str:
    """BUILDER_VERSION and the sha256 of the code generator's sources: any change to a lowering changes it."""
    return f"{BUILDER_VERSION}:" + sources_digest(Path(__file__).resolve().parent, ("*.py", "lower/*.py"))


def graph_digest(graph: Graph, target: Target, rows: int | None = None) -> str:
    """A hex digest naming everything the module depends on: the graph text (with its memory plan, without param
    ids), the target, the builder version, the rows of the batch's chunks (codegen/batch_chunks.py; None: whole)
    and, while tuning is on, the conv kernel choices (conv_tuning.digest)."""
    chunks = () if rows is None else (f"rows {rows}",)
    return _digest(f"braze-module {builder_version()}", target.identity, conv_tuning.digest(target.identity),
                   *chunks, str(with_leaf_ids(graph)))


def with_leaf_ids(graph: Graph, ids: Mapping[str, int] | None = None) -> Graph:
    """The graph with every param's and flag's id set to ids[path] (0 without `ids`, or for a path it lacks). Ids
    count the parameters and flags a process created before this model and no code depends on them, so the same
    model traced in another process finds the same cache entry."""
    ids = ids or {}
    nodes = tuple(n.replace(attrs=tuple((k, ids.get(n.attr["path"], 0) if k == "id" else v) for k, v in n.attrs))
                  if n.op in ("param", "flag") else n for n in graph.nodes)
    return graph.replace(nodes=nodes)


def module_names(digest: str) -> tuple[str, str, str]:
    """The module, entry and prepare function names of the default lowering's module of the graph with `digest`:
    they name the target and builder too, so a cache entry built for another CPU or version exports other names."""
    code = digest[:16]
    return f"braze_{code}", f"braze_entry_{code}", f"braze_prepare_{code}"


def module_key(digest: str) -> str:
    """The disk-cache key of the objects of a whole graph's module built by the default lowering."""
    return _digest("braze-graph-object", digest)


def kernel_part_key(kernel_key: str, target: Target) -> str:
    """The disk-cache key (and, in its first hex digits, the name) of the object of a kernel with this kernel key
    (module_builder.kernel_key) built by the default lowering for `target`."""
    return _digest("braze-kernel-object", builder_version(), target.identity, conv_tuning.digest(target.identity),
                   kernel_key)


def layout_meta(built: BuiltModule) -> dict[str, Any]:
    """The layout of a built module as JSON data, for its cache entry (weights are left out: see the module doc)."""
    return {"name": built.name, "entry": built.entry, "prepare": built.prepare,
            "scratch_stride": built.scratch_stride, "chunks": built.chunks, "arena_bytes": built.arena_bytes,
            "prepared": [[p.slot, p.source, p.function, p.nbytes, p.key] for p in built.prepared],
            "kernels": [[k.name, k.index, k.op, list(k.results), k.scratch_bytes, k.loc] for k in built.kernels],
            "checks": [[number, message] for number, message in built.checks],
            "parts": [[p.key, part_meta(p)] for p in built.parts]}


def built_from_meta(graph: Graph, target: Target, meta: dict[str, Any]) -> BuiltModule | None:
    """The BuiltModule of `graph` from a cache entry's layout, or None when the layout is malformed."""
    try:
        prepared = tuple(PreparedSlot(*_typed(p, (int, int, str, int, str))) for p in meta["prepared"])
        kernels = tuple(KernelInfo(k[0], k[1], k[2], tuple(_strings(k[3])), k[4], k[5])
                        for k in (_typed(k, (str, int, str, list, int, str)) for k in meta["kernels"]))
        name, entry, stride = _typed([meta["name"], meta["entry"], meta["scratch_stride"]], (str, str, int))
        chunks, arena_bytes = _typed([meta["chunks"], meta["arena_bytes"]], (int, int))
        prepare = meta["prepare"]
        checks = tuple(tuple(_typed(c, (int, str))) for c in meta["checks"])
        parts = tuple(part_from_meta(*_typed(p, (str, dict))) for p in meta["parts"])
    except (KeyError, TypeError, ValueError):
        return None
    if any(p is None for p in parts):
        return None
    if not (prepare is None or isinstance(prepare, str)) or stride < 0 or bool(prepared) != (prepare is not None):
        return None
    whole, _ = memory_plan(graph)
    batch = graph.inputs[0].shape[0] if graph.inputs and graph.inputs[0].shape else 1
    if chunks < 1 or batch % chunks or arena_bytes < 0 or (chunks == 1 and arena_bytes != whole):
        return None
    return BuiltModule(name, entry, None, target, graph, graph.inputs, graph.outputs, weight_slots(graph),
                       arena_bytes, stride, kernels, prepared, prepare, checks, parts, chunks)  # type: ignore[arg-type]


def _typed(items: Any, types: tuple[type, ...]) -> list[Any]:
    """`items` as a list when each has the type at its position (bool is not an int here), else ValueError."""
    if not isinstance(items, list) or len(items) != len(types):
        raise ValueError("layout entry of the wrong length")
    if any(not isinstance(x, t) or (t is int and isinstance(x, bool)) for x, t in zip(items, types)):
        raise ValueError("layout entry of the wrong type")
    return items


def _strings(items: list[Any]) -> list[str]:
    if not all(isinstance(x, str) for x in items):
        raise ValueError("layout names must be strings")
    return items
