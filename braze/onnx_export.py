"""braze.export_onnx: the merged inference graph of a model as an ONNX file, for other runtimes.

    braze.export_onnx(model, "model.onnx", example_x)          # trace, optimize, convert, check, write

The model's valid() snapshot is traced on the example inputs (as torch.onnx.export exports in evaluation mode)
and optimized by the inference pipeline up to, not including, fusion: flags specialized, LoRA and QLoRA merged,
batch norm folded, constants folded, simplified, CSE and DCE. Fusion regions and the memory plan are how braze's
own code generator runs a graph; another runtime fuses and plans for itself, so the export stops before them
(a graph that is already fused, such as `compiled.graph`, exports too: its regions are inlined). The converter is
braze.runtime.onnx_export (the `onnx` package is needed, and imported, only when exporting).
"""
from __future__ import annotations

import os
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Sequence


from braze.compiled import example_array, inference_source
from braze.frontend.nn.module import Module
from braze.frontend.atomic_files import write_atomic
from braze.frontend.trace import trace
from braze.ir.errors import ExportError
from braze.ir.graph import Graph
from braze.ir.passes import PIPELINES, optimize

if TYPE_CHECKING:
    import onnx

_INFERENCE = PIPELINES["inference"]
EXPORT_PIPELINE: tuple[str, ...] = _INFERENCE[:_INFERENCE.index("fuse")]


def export_onnx(model_or_graph: Module | Callable[..., Any] | Graph, path: str | os.PathLike[str],
                *example_inputs: Any, opset: int = 17, input_names: Sequence[str] | None = None,
                output_names: Sequence[str] | None = None, **options: Any) -> onnx.ModelProto:
    """Write the merged inference graph of a Module, a function of tensors or an ir.Graph to `path` as an ONNX
    model of `opset` (17 or newer) checked by onnx.checker; returns the ModelProto.

    example_inputs fix the input shapes and dtypes (a Graph has its own: pass none). input_names default to the
    graph's input names, output_names to "output" ("output_0", ... for several). Other keyword arguments are
    options for the passes, as for braze.compile; policy defaults to "merge" (quantized bases are dequantized
    and merged: ONNX's standard operators have no packed 4-bit matmul), "keep" or "auto" keep them quantized.
    """
    converter = _converter()
    converter.check_opset(opset)
    options.setdefault("policy", "merge")
    graph = inference_graph(model_or_graph, example_inputs, options)
    from braze import __version__
    model = converter.to_onnx(graph, opset, input_names=input_names, output_names=output_names,
                              producer_version=__version__)
    write_atomic(path, model.SerializeToString())
    return model


def inference_graph(source: Module | Callable[..., Any] | Graph, example_inputs: Sequence[Any],
                    options: dict[str, Any]) -> Graph:
    """The graph to export: traced from the evaluation snapshot, optimized up to fusion (see the module doc)."""
    source = inference_source(source, True, False, options, EXPORT_PIPELINE)
    if isinstance(source, Graph):
        if example_inputs:
            raise ExportError("export_onnx: a Graph has its input types in it; pass no example inputs")
        graph = source
    elif not example_inputs:
        raise ExportError("export_onnx: tracing needs example inputs (arrays or Tensors of the input shapes)")
    else:
        graph = trace(source, *(example_array(x, k, "export_onnx") for k, x in enumerate(example_inputs)))
    # a graph compiled already keeps its fused regions (no pass undoes fusion): the converter inlines them
    return optimize(graph, EXPORT_PIPELINE, **options)



def _converter() -> ModuleType:
    """braze.runtime.onnx_export, or ExportError saying how to install the onnx package it needs."""
    try:
        from braze.runtime import onnx_export
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] != "onnx":
            raise
        raise ExportError("export_onnx needs the onnx package: pip install 'braze[onnx]' (or pip install onnx)") \
            from None
    return onnx_export
