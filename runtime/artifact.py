"""The `.braze` artifact: one safetensors file holding a merged inference graph, its weights and a manifest.

Tensors: one per param leaf of the graph, named by the param's path, holding the merged weights (LoRA merged,
batch norm folded, constants folded). String metadata:

    "format"          "braze.artifact"
    "braze.graph"     the optimized graph's IR text (braze.ir printer), without a memory plan
    "braze.manifest"  JSON: format_version, braze_version, graph (its name), inputs and outputs (name, dtype,
                      shape), pipeline (pass names), passes (per pass: name, nodes_before, nodes_after, notes,
                      details; what was merged or folded and the merge error), parameters (tensors, count,
                      bytes) and content_hash

Content hash: "sha256:" and the hex sha256 of a byte stream made of fields, each written as its length (8 bytes,
little-endian) followed by its bytes: b"braze.artifact", the IR text (UTF-8), the manifest without its
content_hash key as canonical JSON (sorted keys, separators "," and ":", ASCII), and then, for every tensor in
order of name, its name (UTF-8), its dtype's IR name ("f32"), its shape (8 bytes little-endian per dimension,
so the field is 8 x rank bytes long) and its data (little-endian, C order).

Reading trusts nothing in the file. `unpack` checks, before anything is compiled, each once: the format marker and
version (a newer version is refused), the manifest's fields, the content hash, that the graph parses (the parser
verifies it), that every size in it fits in this machine's memory (in exact integer arithmetic), that the
manifest's inputs, outputs and parameter totals are the graph's, and that every param leaf has a tensor of its
dtype and shape and every tensor belongs to a param leaf. A memory plan in the graph is dropped; the compile path
(runtime/compile_path.py) makes a new one and checks it, and that it fits in this machine's memory, without
verifying the graph again.
Nothing in the file is ever executed as code: the graph is IR text and the weights are arrays.
"""
from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from braze.ir.errors import BrazeError, RecordError
from braze.ir.graph import Graph, Value
from braze.ir.parser import parse
from braze.ir.passes import PassReport
from braze.ir.types import as_dtype

FORMAT = "braze.artifact"
VERSION = 1
SUFFIX = ".braze"
GRAPH_KEY, MANIFEST_KEY = "braze.graph", "braze.manifest"
_MANIFEST_FIELDS = {"format_version": int, "braze_version": str, "graph": str, "inputs": list, "outputs": list,
                    "pipeline": list, "passes": list, "parameters": dict, "content_hash": str}


class ArtifactError(RecordError):
    """A .braze file that cannot be written, read or trusted; the message names the file and the problem."""


@dataclass(frozen=True)
class Artifact:
    """A validated artifact: its graph (verified, no memory plan, weights attached) and its manifest."""

    graph: Graph
    manifest: Mapping[str, Any]


# --- writing --------------------------------------------------------------------------------------------------

def pack(graph: Graph, reports: Sequence[PassReport], pipeline: Sequence[str], braze_version: str
         ) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The tensors and string metadata of the artifact of an optimized graph and the reports of its passes."""
    graph = _without_plan(graph)
    tensors = {leaf.path: np.ascontiguousarray(graph.weights[leaf.path]) for leaf in graph.params()}
    ir_text = str(graph)
    manifest = {
        "format_version": VERSION, "braze_version": braze_version, "graph": graph.name,
        "inputs": _specs(graph.inputs), "outputs": _specs(graph.outputs), "pipeline": list(pipeline),
        "passes": [_pass_entry(r) for report in reports for r in report.records],
        "parameters": _totals(tensors),
    }
    manifest = json.loads(_canonical(manifest))  # what a reader gets back, so the hash is over the same values
    manifest["content_hash"] = content_hash(ir_text, manifest, tensors)
    metadata = {"format": FORMAT, GRAPH_KEY: ir_text, MANIFEST_KEY: json.dumps(manifest, indent=1, sort_keys=True)}
    return tensors, metadata


def _specs(values: Sequence[Value]) -> list[dict[str, Any]]:
    return [{"name": v.name, "dtype": v.type.dtype.numpy_name, "shape": list(v.type.shape)} for v in values]


def _pass_entry(record: Any) -> dict[str, Any]:
    """One pass of the run without its wall time, so the same model always gives the same file."""
    return {"name": record.name, "nodes_before": record.nodes_before, "nodes_after": record.nodes_after,
            "notes": list(record.notes), "details": record.details}


def _totals(tensors: Mapping[str, np.ndarray]) -> dict[str, int]:
    return {"tensors": len(tensors), "count": sum(int(a.size) for a in tensors.values()),
            "bytes": sum(int(a.nbytes) for a in tensors.values())}


def _canonical(manifest: Mapping[str, Any]) -> str:
    return json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=_plain)


def _plain(value: Any) -> Any:
    """JSON for what pass details may hold besides plain values: numpy scalars and arrays, tuples, sets."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    return str(value)


def content_hash(ir_text: str, manifest: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> str:
    """The artifact's content hash (defined in the module doc); the manifest's own content_hash is left out."""
    digest = hashlib.sha256()
    for field in _hashed_fields(ir_text, manifest, tensors):
        digest.update(struct.pack("<Q", len(field)))
        digest.update(field)
    return "sha256:" + digest.hexdigest()


def _hashed_fields(ir_text: str, manifest: Mapping[str, Any], tensors: Mapping[str, np.ndarray]
                   ) -> Iterator[bytes | memoryview]:
    yield FORMAT.encode()
    yield ir_text.encode("utf-8")
    yield _canonical({k: v for k, v in manifest.items() if k != "content_hash"}).encode("ascii")
    for name in sorted(tensors):
        array = np.asarray(tensors[name])
        yield name.encode("utf-8")
        yield as_dtype(array.dtype).name.encode("ascii")
        yield struct.pack(f"<{array.ndim}Q", *array.shape)
        yield memoryview(np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))).cast("B")


# --- reading --------------------------------------------------------------------------------------------------

def is_artifact(metadata: Mapping[str, str]) -> bool:
    """Whether safetensors metadata marks its file as a braze artifact."""
    return metadata.get("format") == FORMAT


def unpack(tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str], source: str) -> Artifact:
    """The artifact in decoded safetensors content, after every check of the module doc (ArtifactError)."""
    if not is_artifact(metadata):
        raise ArtifactError(f"{source}: not a braze artifact (its safetensors metadata has no format "
                            f"{FORMAT!r})")
    for key in (GRAPH_KEY, MANIFEST_KEY):
        if key not in metadata:
            raise ArtifactError(f"{source}: corrupt braze artifact: the metadata has no {key!r} entry")
    manifest = _manifest(metadata[MANIFEST_KEY], source)
    ir_text = metadata[GRAPH_KEY]
    if content_hash(ir_text, manifest, tensors) != manifest["content_hash"]:
        raise ArtifactError(f"{source}: the content hash does not match: the graph, the manifest or the weights "
                            f"were altered or corrupted after export")
    graph = _graph(ir_text, source)  # parsed and verified; every type checked against the size limit
    _check_signature(graph, manifest, source)
    weights = _weights(graph, tensors, manifest, source)  # what verifying the graph with its weights would check
    return Artifact(graph.replace(weights=weights), manifest)


def _manifest(text: str, source: str) -> dict[str, Any]:
    try:
        manifest = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as err:
        raise ArtifactError(f"{source}: corrupt braze artifact: the manifest is not valid JSON ({err})") from None
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{source}: corrupt braze artifact: the manifest is not a JSON object")
    version = manifest.get("format_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
        raise ArtifactError(f"{source}: written with artifact format version {version} (braze "
                            f"{manifest.get('braze_version', '?')}); this braze reads format version {VERSION}: "
                            f"upgrade braze to load it")
    for key, kind in _MANIFEST_FIELDS.items():
        if not isinstance(manifest.get(key), kind) or isinstance(manifest.get(key), bool):
            raise ArtifactError(f"{source}: corrupt braze artifact: the manifest's {key!r} is missing or not a "
                                f"JSON {kind.__name__}")
    if version < 1:
        raise ArtifactError(f"{source}: corrupt braze artifact: format version {version} (versions start at 1)")
    _check_passes(manifest, source)
    return manifest


def _check_passes(manifest: Mapping[str, Any], source: str) -> None:
    """The pipeline is pass names; each pass entry has the fields and types `pack` writes."""
    if not all(isinstance(name, str) for name in manifest["pipeline"]):
        raise ArtifactError(f"{source}: corrupt braze artifact: the manifest's pipeline is not a list of pass names")
    for k, entry in enumerate(manifest["passes"]):
        fine = (isinstance(entry, dict) and isinstance(entry.get("name"), str)
                and isinstance(entry.get("details"), dict)
                and all(type(entry.get(n)) is int for n in ("nodes_before", "nodes_after"))
                and isinstance(entry.get("notes"), list) and all(isinstance(t, str) for t in entry["notes"]))
        if not fine:
            raise ArtifactError(f"{source}: corrupt braze artifact: pass entry {k} of the manifest lacks a name, node "
                                f"counts, notes or details of the right types")


def _graph(ir_text: str, source: str) -> Graph:
    """The parsed graph without a memory plan (a plan in the file is never trusted)."""
    try:
        graph = parse(ir_text)
    except BrazeError as err:
        raise ArtifactError(f"{source}: the graph does not parse: {err}") from None
    except RecursionError:
        raise ArtifactError(f"{source}: the graph does not parse: it is nested too deeply") from None
    return _without_plan(graph)


def _without_plan(graph: Graph) -> Graph:
    if "memory_plan" not in graph.attributes:
        return graph
    return graph.replace(attributes={k: v for k, v in graph.attributes.items() if k != "memory_plan"})


def _check_signature(graph: Graph, manifest: Mapping[str, Any], source: str) -> None:
    for what, values in (("inputs", graph.inputs), ("outputs", graph.outputs)):
        if manifest[what] != _specs(values):
            raise ArtifactError(f"{source}: the manifest's {what} ({_shown(manifest[what])}) are not the graph's "
                                f"({_shown(_specs(values))})")
    if manifest["graph"] != graph.name:
        raise ArtifactError(f"{source}: the manifest names graph {manifest['graph']!r}, the IR text @{graph.name}")


def _shown(specs: Any) -> str:
    if not isinstance(specs, list) or not all(isinstance(s, dict) for s in specs):
        return repr(specs)[:200]
    return ", ".join(f"{s.get('name')}: {s.get('dtype')}{s.get('shape')}" for s in specs) or "none"


def _weights(graph: Graph, tensors: Mapping[str, np.ndarray], manifest: Mapping[str, Any], source: str
             ) -> dict[str, np.ndarray]:
    """The tensors as the graph's weights: exactly one of its declared type per param leaf, none left over."""
    leaves = {leaf.path: leaf.type for leaf in graph.params()}
    for path, declared in leaves.items():
        if path not in tensors:
            raise ArtifactError(f"{source}: param '{path}' ({declared}) has no tensor in the file")
        array = tensors[path]
        if array.dtype != declared.dtype.numpy or tuple(array.shape) != declared.shape:
            raise ArtifactError(f"{source}: tensor '{path}' is {array.dtype}{list(array.shape)}; the graph's param "
                                f"leaf declares {declared} ({declared.dtype.numpy_name}{list(declared.shape)})")
    unused = sorted(set(tensors) - set(leaves))
    if unused:
        raise ArtifactError(f"{source}: tensor(s) {', '.join(map(repr, unused[:5]))} belong to no param of the "
                            f"graph")
    weights = {path: tensors[path] for path in leaves}
    if manifest["parameters"] != _totals(weights):
        raise ArtifactError(f"{source}: the manifest's parameter totals {manifest['parameters']} are not the "
                            f"file's {_totals(weights)}")
    return weights
