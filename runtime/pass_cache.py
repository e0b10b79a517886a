"""The optimized graph of a traced graph, found on disk when the same model went through the same passes before.

A warm compile in a new process then costs the trace, this lookup and the link of the cached object
(codegen/graph_cache.py): no pass runs.

Key: a digest of the traced graph's text (param and flag ids zeroed, see module_layout.with_leaf_ids), the weights
(every param's path, dtype, shape and the sha256 of its bytes: folding passes compute new weights from their
values), the pass names, the passes' options and the version of the IR code (a hash of braze.ir's sources, passes
included). The passes do not depend on the target, so it is not part of the key. Pipelines with a pass registered
by the user (whose code the key cannot name) and options that are not plain JSON data are not cached.

Entry (codegen/cache.py's format, no symbols): `meta` holds the optimized, planned graph's text (param ids zeroed)
and, per weight of the optimized graph, either the traced weight it is (a param the passes left alone) or where its
bytes are in the payload (a weight a pass derived: a folded batch norm, a merged LoRA; each starts 64-byte aligned,
so the arrays of a large entry, mapped read-only, are what an Executable keeps without a copy). A hit parses the
text, puts the traced graph's param ids back, attaches the weights and checks them; an entry that fails any of that
is deleted and the passes run. The parser checks each line, but the verifier does not run again: the entry's digest
covers the text (codegen/cache.py) and its key names the version of braze.ir that printed it from a verified graph.
"""
from __future__ import annotations

import functools
import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from braze.codegen import cache
from braze.codegen.module_layout import sources_digest, with_leaf_ids
from braze.ir.errors import BrazeError
from braze.ir.graph import Graph
from braze.ir.parser import parse
from braze.ir.passes import BUILTIN_PASSES
from braze.ir.types import as_dtype
from braze.ir.verify import verify_weights

from . import memory
from .memory import map_bytes

KIND = "braze-optimized-graph 1"


@functools.lru_cache(maxsize=None)
def ir_version() -> str:
    """The sha256 of braze.ir's sources (ops, passes, printer and parser): any change to a pass changes it."""
    import braze.ir
    return sources_digest(Path(braze.ir.__file__).resolve().parent, ("*.py", "*/*.py"))


def key(graph: Graph, passes: Sequence[str], options: Mapping[str, Any]) -> str | None:
    """The cache key of `graph` optimized by `passes` with `options`; None when a pass is not built in or the
    options are not JSON data."""
    if not set(passes) <= set(BUILTIN_PASSES):
        return None
    try:
        options_text = json.dumps(dict(options), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):
        return None
    paths = sorted(graph.weights)
    arrays = [np.ascontiguousarray(graph.weights[path]) for path in paths]
    with ThreadPoolExecutor(1) as pool:
        # large weights are hashed (hashlib releases the GIL) while this thread prints the graph's text
        digests = pool.submit(_digests, arrays) if sum(a.nbytes for a in arrays) >= memory.PARALLEL_BYTES else None
        h = hashlib.sha256()
        for part in (KIND, ir_version(), json.dumps(list(passes)), options_text, str(with_leaf_ids(graph))):
            _field(h, part.encode("utf-8"))
        for path, array, digest in zip(paths, arrays, _digests(arrays) if digests is None else digests.result()):
            _field(h, f"{path}|{array.dtype.str}|{array.shape}".encode("utf-8"))
            _field(h, digest)
    return h.hexdigest()


def _digests(arrays: list[np.ndarray]) -> list[bytes]:
    """The sha256 of each array's bytes; a model's weights (tens of MB) are hashed on every core (hashlib releases
    the GIL while it hashes)."""
    return map_bytes(lambda a: hashlib.sha256(a.reshape(-1).view(np.uint8)).digest(), arrays,
                     [a.nbytes for a in arrays])


def _field(h: Any, data: bytes) -> None:
    h.update(len(data).to_bytes(8, "little"))
    h.update(data)


def store(entry_key: str, traced: Graph, optimized: Graph) -> None:
    """Write the entry of `optimized`, the result of the passes over `traced` (see the module doc)."""
    weights, chunks, offset = [], [], 0
    for path in sorted(optimized.weights):
        array = optimized.weights[path]
        if traced.weights.get(path) is array:
            weights.append([path, "traced"])
            continue
        data = memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8))
        weights.append([path, as_dtype(np.asarray(array).dtype).name, list(np.shape(array)), offset, len(data)])
        padding = b"\0" * (-len(data) % cache.PAYLOAD_ALIGNMENT)  # each weight aligned as the payload is
        chunks += [data, padding]
        offset += len(data) + len(padding)
    meta = {"kind": KIND, "graph": str(with_leaf_ids(optimized)), "weights": weights}
    cache.store(entry_key, chunks, (), meta)


def load(entry_key: str, traced: Graph) -> Graph | None:
    """The optimized graph stored under `entry_key` for `traced`, or None (no entry, or one that is deleted because
    it does not parse, verify or hold the weights it lists)."""
    entry = cache.load(entry_key)
    if entry is None:
        return None
    try:
        graph = _graph(entry.meta, entry.payload, traced)
    except (BrazeError, KeyError, TypeError, ValueError, RecursionError):
        cache.discard(entry_key)
        return None
    cache.count("hits")
    return graph


def _graph(meta: dict[str, Any], payload: bytes, traced: Graph) -> Graph:
    """The entry's graph with the traced graph's param ids and its weights (ValueError if malformed): the graph
    is parsed (not verified again: see below), then its weights are checked against its params."""
    if meta.get("kind") != KIND or not isinstance(meta.get("graph"), str):
        raise ValueError("not an optimized-graph entry")
    weights = dict(_weight(item, payload, traced) for item in meta["weights"])
    # the entry's digest covers its meta, and its key the version of braze.ir that printed the verified graph
    graph = with_leaf_ids(parse(meta["graph"], verify=False), {leaf.path: leaf.id for leaf in traced.params()})
    return verify_weights(graph.replace(weights=weights))


def _weight(item: list[Any], payload: bytes, traced: Graph) -> tuple[str, np.ndarray]:
    """One weight of an entry: the traced graph's own array, or a derived one read from the payload."""
    if item[1] == "traced":
        return item[0], traced.weights[item[0]]
    path, dtype, shape, offset, nbytes = item
    if not (isinstance(dtype, str) and isinstance(offset, int) and isinstance(nbytes, int)
            and 0 <= offset <= offset + nbytes <= len(payload)):
        raise ValueError(f"weight {path!r} is not a dtype and a span of the entry")
    numpy_dtype = as_dtype(dtype).numpy
    array = np.frombuffer(payload, numpy_dtype, count=nbytes // numpy_dtype.itemsize, offset=offset)
    return path, array.reshape(shape)
