"""`braze.export` and `braze.load`: a merged inference graph as one `.braze` file, and back as native code.

    braze.export(model, "model.braze", example_x)   # trace, optimize (merge, fold), write atomically
    compiled = braze.load("model.braze")            # validate, re-plan, compile; no model code needed
    y = compiled(x)

The format and its checks are braze.runtime.artifact; this module traces and optimizes the model, writes and
reads the file, and compiles the loaded graph. `braze.load` is the one public loader: a file whose safetensors
metadata marks it as an artifact (or any file named *.braze) loads as a CompiledModule; any other file goes to
braze.frontend.serialization.load (tensors and dicts saved with braze.save).
"""
from __future__ import annotations

import json
import os
from typing import Any, BinaryIO, Callable, Sequence

import numpy as np

from braze.compiled import CompiledModule, compile_untrusted, example_array
from braze.frontend import serialization
from braze.frontend.nn.module import Module
from braze.frontend.atomic_files import read_bytes, write_atomic
from braze.frontend.safetensors_io import decode, encode
from braze.frontend.trace import trace
from braze.ir.errors import BrazeError, RecordError, TensorSizeError
from braze.ir.graph import Graph
from braze.ir.passes import PassReport, optimize
from braze.ir.passes.manager import check_options
from braze.runtime import artifact as artifact_format
from braze.runtime.compile_path import compile_passes
from braze.runtime.artifact import Artifact, ArtifactError

_LOAD_OPTIONS = ("threads",)


def export(model_or_graph: Module | Callable[..., Any] | Graph, path: str | os.PathLike[str], *example_inputs: Any,
           pipeline: str | Sequence[str] | None = "inference", **options: Any) -> dict[str, Any]:
    """Write the merged inference graph of a model (its valid() snapshot traced on example_inputs), a function
    or an ir.Graph to one .braze file, atomically; returns the manifest written into it.

    pipeline: the pass pipeline (braze.optimize), run between drop_buffer_updates and plan_memory as braze.compile
    runs it; None exports a graph braze.optimize returned as it is. Other keyword arguments are options for the
    passes; an option no pass declares is an error.
    """
    graph = _inference_graph(model_or_graph, example_inputs)
    names = compile_passes(pipeline)
    check_options(names, options, "braze.export", ("pipeline",))
    reports: list[PassReport] = []
    if names:
        graph = optimize(graph, names, report=reports, **options)
    import braze
    tensors, metadata = artifact_format.pack(graph, reports, names, braze.__version__)
    try:
        write_atomic(path, encode(tensors, metadata))
    except RecordError as err:
        raise ArtifactError(str(err)) from None
    return json.loads(metadata[artifact_format.MANIFEST_KEY])


def _inference_graph(source: Any, example_inputs: Sequence[Any]) -> Graph:
    """The graph to export: a Module's valid() snapshot or a function, traced; a Graph not in training mode."""
    if isinstance(source, Graph):
        if example_inputs:
            raise BrazeError("braze.export: a Graph has its input types in it; pass no example inputs")
        training = [f.path for f in source.flags() if f.value]
        if training:
            raise BrazeError(f"braze.export: graph @{source.name} was traced in training mode (flags "
                             f"{', '.join(training)} are on); trace the model in eval mode")
        return source
    if not callable(source):
        raise BrazeError(f"braze.export: expected a Module, a function or an ir.Graph, got {type(source).__name__}")
    if not example_inputs:
        raise BrazeError("braze.export: tracing needs example inputs")
    examples = [example_array(x, k, "braze.export") for k, x in enumerate(example_inputs)]
    return trace(source.valid() if isinstance(source, Module) else source, *examples)



def read(path: str | os.PathLike[str]) -> Artifact:
    """The validated graph and manifest of a .braze file, without compiling it (ArtifactError if unfit)."""
    source = os.fspath(path)
    tensors, metadata = _decoded(source)
    return artifact_format.unpack(tensors, metadata, source)


def _decoded(source: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    try:
        return decode(read_bytes(source), source)
    except RecordError as err:
        raise ArtifactError(str(err)) from None


def load(path: str | os.PathLike[str] | BinaryIO, **kwargs: Any) -> Any:
    """A .braze artifact as a CompiledModule (validated, re-planned and compiled; threads= as braze.compile),
    or anything else braze.frontend.serialization.load reads (what braze.save wrote, safetensors, torch .pt)."""
    if not isinstance(path, (str, os.PathLike)):
        return serialization.load(path, **kwargs)  # a file object: artifacts are read from paths only
    source = os.fspath(path)
    named = source.endswith(artifact_format.SUFFIX)
    try:
        tensors, metadata = _decoded(source)
    except ArtifactError:
        if named:
            raise
        return serialization.load(source, **kwargs)
    if not named and not artifact_format.is_artifact(metadata):
        return serialization.load(source, **kwargs)
    unknown = sorted(set(kwargs) - set(_LOAD_OPTIONS))
    if unknown:
        raise BrazeError(f"braze.load: unknown option(s) {', '.join(unknown)} for a braze artifact; valid: "
                         f"{', '.join(_LOAD_OPTIONS)}")
    graph = artifact_format.unpack(tensors, metadata, source).graph
    return _compile_artifact(graph, kwargs.get("threads"), source)


def _compile_artifact(graph: Graph, threads: int | None, source: str) -> CompiledModule:
    """The one place loaded graphs are compiled: as they are, re-planned (untrusted; unpack verified it), the plan
    checked and its memory refused with an ArtifactError when this machine cannot hold it."""
    try:
        return compile_untrusted(graph, threads, verified=True)
    except TensorSizeError as err:
        raise ArtifactError(f"{source}: {err}") from None
