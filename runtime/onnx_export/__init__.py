"""braze.runtime.onnx_export: an inference graph as an ONNX model, built with the `onnx` package (an optional
extra, imported only when this package is).

`to_onnx(graph, opset=17)` converts each node with the rule registered for its op name (builder.RULES, filled by
this package's modules like codegen's lowering table; `supported_ops()` lists them): params become initializers
named by their paths, with the arrays of the graph's weights; constants become initializers; fusion regions
are inlined (their bodies converted node by node). Every value keeps its braze name and declares its braze type, so
`onnx.checker.check_model(full_check=True)`, whose shape inference must agree with every declared type, checks
each rule against the registry's type inference. An op without a rule raises ExportError naming it and the
module path and source line its node came from.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np
import onnx

from braze.ir.builder import GraphBuilder
from braze.ir.errors import ExportError
from braze.ir.graph import Graph, Node, Value
from braze.ir.ops.attention import attention_decomposition

from . import elementwise, movement, nn, ordering, reduction, reparam  # noqa: F401  (registering)
from .builder import RULES, OnnxBuilder, onnx_dtype, register, where

MIN_OPSET = 17
_LEAVES = ("param", "constant")


def supported_ops() -> frozenset[str]:
    """The registered ops an exported graph may contain."""
    return frozenset(RULES) | frozenset(_LEAVES)


def check_opset(opset: object) -> int:
    """The opset as an int, or ExportError naming the supported range (17 to the onnx package's newest)."""
    newest = onnx.defs.onnx_opset_version()
    if isinstance(opset, bool) or not isinstance(opset, int) or not MIN_OPSET <= opset <= newest:
        raise ExportError(f"export_onnx: opset must be an int from {MIN_OPSET} to {newest} (the newest the "
                          f"installed onnx package knows), got {opset!r}")
    return opset


def default_output_names(count: int) -> list[str]:
    """"output" for one result, "output_0", "output_1", ... for several."""
    return ["output"] if count == 1 else [f"output_{k}" for k in range(count)]


def to_onnx(graph: Graph, opset: int = MIN_OPSET, *, input_names: Sequence[str] | None = None,
            output_names: Sequence[str] | None = None, producer_version: str = "") -> onnx.ModelProto:
    """The checked ONNX model of an inference graph (no flags left; see the package doc)."""
    opset = check_opset(opset)
    inputs = _names("input_names", input_names, [v.name for v in graph.inputs])
    outputs = _names("output_names", output_names, default_output_names(len(graph.outputs)))
    if len(set(inputs) | set(outputs)) != len(inputs) + len(outputs):
        raise ExportError(f"export_onnx: input and output names must all differ, got {inputs} and {outputs}")
    values = [v.name for n in graph.nodes for v in n.outputs]
    e = OnnxBuilder(opset, [*values, *inputs, *outputs])
    names = dict(zip((v.name for v in graph.inputs), inputs))
    reserved = set(inputs) | set(outputs)
    passthrough = _bind_outputs(graph, names, outputs)
    convert(e, graph.nodes, names, graph.weights, lambda v: e.temp(v.name) if v.name in reserved else v.name)
    for value, name in passthrough:
        e.emit("Identity", [names[value.name]], [name])
    declared = set(outputs)
    infos = [_value_info(names[v.name], v) for n in graph.nodes if n.op not in _LEAVES for v in n.outputs
             if names[v.name] not in declared]
    body = onnx.helper.make_graph(
        e.nodes, graph.name, [_value_info(n, v) for n, v in zip(inputs, graph.inputs)],
        [_value_info(n, v) for n, v in zip(outputs, graph.outputs)], initializer=e.initializers, value_info=infos)
    return _checked(graph, _model(body, opset, producer_version))


def convert(e: OnnxBuilder, nodes: Sequence[Node], names: dict[str, str], weights: Mapping[str, np.ndarray],
            name_of: Callable[[Value], str]) -> None:
    """Append the ONNX form of `nodes`; `names` maps braze value names to ONNX names (filled in as results are
    made; results already in it are written there) and `name_of(value)` names the others."""
    for node in nodes:
        for v in node.outputs:
            if v.name not in names:
                names[v.name] = name_of(v)
        outs = [names[v.name] for v in node.outputs]
        e.scope = node.loc.module if node.loc else ""
        if node.op == "param":
            e.initializer(outs[0], _weight(node, weights))
        elif node.op == "constant":
            e.initializer(outs[0], node.attr["value"].array)
        elif node.op in RULES:
            RULES[node.op](e, node, [names[v.name] for v in node.inputs], outs)
        else:
            raise ExportError(f"ONNX export: {where(node)} has no ONNX form (braze.runtime.onnx_export."
                              f"supported_ops() lists the ops that export)")


@register("fused")
def _fused(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    """A fusion region, inlined: its body's nodes converted under fresh names, its outputs written to `outs`."""
    _inline(e, node.attr["body"], ins, outs)


@register("attention")
def _attention(e: OnnxBuilder, node: Node, ins: list[str], outs: list[str]) -> None:
    """Attention as the registered ops it stands for (ir/ops/attention.py's decomposition), inlined like a region."""
    b = GraphBuilder("attention")
    operands = [b.input(f"in{k}", v.type) for k, v in enumerate(node.inputs)]
    _inline(e, b.finish([attention_decomposition(b, *operands, **node.attr)]), ins, outs)


def _inline(e: OnnxBuilder, body: Graph, ins: list[str], outs: list[str]) -> None:
    """The nodes of `body` converted under fresh names, reading `ins` and writing its outputs to `outs`."""
    names = dict(zip((v.name for v in body.inputs), ins))
    passthrough = _bind_outputs(body, names, outs)
    prefix = outs[0].lstrip("_")
    convert(e, body.nodes, names, {}, lambda v: e.temp(f"{prefix}_{v.name}"))
    for value, name in passthrough:
        e.emit("Identity", [names[value.name]], [name])


def _bind_outputs(graph: Graph, names: dict[str, str], outputs: Sequence[str]) -> list[tuple[Value, str]]:
    """Let the node computing each output write it under the output's name; the outputs that are inputs,
    leaves or repeats are returned, to be copied by Identity nodes."""
    produced = {v.name for n in graph.nodes if n.op not in _LEAVES for v in n.outputs}
    copies = []
    for value, name in zip(graph.outputs, outputs):
        if value.name in produced and value.name not in names:
            names[value.name] = name
        else:
            copies.append((value, name))
    return copies


def _names(what: str, given: Sequence[str] | None, default: list[str]) -> list[str]:
    if given is None:
        return default
    names = list(given)
    if len(names) != len(default) or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise ExportError(f"export_onnx: {what} must be {len(default)} distinct non-empty strings, got {given!r}")
    return names


def _weight(node: Node, weights: Mapping[str, np.ndarray]) -> np.ndarray:
    path, typ = node.attr["path"], node.out.type
    if path not in weights:
        raise ExportError(f"ONNX export: param {path} has no value in the graph's weights")
    array = np.asarray(weights[path])
    if array.shape != typ.shape or array.dtype != typ.dtype.numpy:
        raise ExportError(f"ONNX export: the weight of param {path} is {array.dtype}{list(array.shape)}, but the "
                          f"graph declares {typ}")
    return array


def _value_info(name: str, value: Value) -> onnx.ValueInfoProto:
    return onnx.helper.make_tensor_value_info(name, onnx_dtype(value.dtype), list(value.shape))


def _model(body: onnx.GraphProto, opset: int, producer_version: str) -> onnx.ModelProto:
    opsets = [onnx.helper.make_opsetid("", opset)]
    return onnx.helper.make_model(body, opset_imports=opsets, producer_name="braze",
                                  producer_version=producer_version,
                                  ir_version=onnx.helper.find_min_ir_version_for(opsets))


def _checked(graph: Graph, model: onnx.ModelProto) -> onnx.ModelProto:
    """The model after onnx.checker's full check (with strict shape inference against the declared types)."""
    if model.ByteSize() >= 2 ** 31:
        raise ExportError(f"ONNX export: the model of @{graph.name} is over protobuf's 2 GB limit; "
                          f"weights in external data files are not supported")
    try:
        onnx.checker.check_model(model, full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as err:
        raise ExportError(f"ONNX export: the model of @{graph.name} fails onnx.checker: {err}") from None
    return model


__all__ = ["MIN_OPSET", "check_opset", "default_output_names", "supported_ops", "to_onnx"]
