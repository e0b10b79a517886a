"""The IR text form: one node per line, every value's type shown, attributes sorted.

    graph @mlp(%x: f32[4,8]) -> (f32[4,16]) {
      %fc.weight = param {buffer=false, id=3, path="fc.weight", trainable=true} : f32[16,8]
      %0 = transpose %fc.weight {perm=[1, 0]} : f32[8,16]
      %1 = matmul %x, %0 : f32[4,16]
      return %1
    }

A nested graph (an attribute of kind "graph", such as a fusion region's body) prints as its own graph text
inside the attribute dict, its lines indented one level deeper than the node that holds it.

The parser (ir/parser.py) reads exactly this text back into an equal graph.
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from typing import Any

import numpy as np

from .attrs import ArrayAttr
from .graph import Graph, Loc, Node, Value
from .types import DType

_BARE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.$\-]*\Z")


def format_name(name: str) -> str:
    """`%name`, quoted when the name holds characters outside [A-Za-z0-9_.$-]."""
    return f"%{name}" if _BARE_NAME.match(name) else f"%{json.dumps(name)}"


def format_float(value: float, dtype: np.dtype | None = None) -> str:
    """Shortest text that reads back to the same value (of `dtype`, default float64)."""
    if math.isnan(value):
        return "-nan" if math.copysign(1.0, value) < 0 else "nan"  # 0/0 gives -nan on common CPUs
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if dtype is not None and dtype != np.float64:
        text = str(dtype.type(value))
    else:
        text = repr(float(value))
    return text if any(c in text for c in ".en") else text + ".0"


def _format_scalar(value: Any, dtype: np.dtype) -> str:
    if dtype == np.bool_:
        return "true" if value else "false"
    if dtype.kind == "f":
        return format_float(float(value), dtype)
    return str(int(value))


def format_array(attr: ArrayAttr) -> str:
    array = attr.array
    items = ", ".join(_format_scalar(v, array.dtype) for v in array.reshape(-1).tolist())
    return f"array<{attr.type}>[{items}]"


def format_literal(value: Any, provenance: bool = False) -> str:
    """An attribute or graph-attribute value as text; a nested graph spans several lines."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, DType):
        return value.name
    if isinstance(value, ArrayAttr):
        return format_array(value)
    if isinstance(value, Graph):
        return print_graph(value, provenance).rstrip("\n")
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(format_literal(v, provenance) for v in value) + "]"
    if isinstance(value, dict):
        items = sorted(value.items())
        return "{" + ", ".join(f"{format_key(k)}={format_literal(v, provenance)}" for k, v in items) + "}"
    raise TypeError(f"cannot print attribute value {value!r} of type {type(value).__name__}")


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def format_key(key: str) -> str:
    """An attribute name; graph attributes may use any string and are quoted unless they are identifiers."""
    return key if _IDENT.match(key) and key not in ("inf", "nan") else json.dumps(key)


def format_attrs(attrs: tuple[tuple[str, Any], ...], provenance: bool = False) -> str:
    return "{" + ", ".join(f"{format_key(k)}={format_literal(v, provenance)}" for k, v in attrs) + "}"


def format_loc(loc: Loc) -> str:
    return f"loc({json.dumps(loc.module)} {json.dumps(loc.file)}:{loc.line})"


def format_node(node: Node, provenance: bool = False) -> str:
    """One node as text: a single line unless an attribute holds a nested graph."""
    text = ""
    if node.outputs:
        text = ", ".join(format_name(v.name) for v in node.outputs) + " = "
    text += node.op
    if node.inputs:
        text += " " + ", ".join(format_name(v.name) for v in node.inputs)
    if node.attrs:
        text += " " + format_attrs(node.attrs, provenance)
    text += " : " + ", ".join(str(v.type) for v in node.outputs)
    if provenance and node.loc is not None:
        text += "  " + format_loc(node.loc)
    return text


def _format_input(value: Value) -> str:
    return f"{format_name(value.name)}: {value.type}"


def print_graph(graph: Graph, provenance: bool = False) -> str:
    """The whole graph as text, ending with a newline."""
    head = f"graph @{format_name(graph.name)[1:]}({', '.join(_format_input(v) for v in graph.inputs)})"
    head += " -> (" + ", ".join(str(v.type) for v in graph.outputs) + ")"
    if graph.attributes:
        head += " attributes " + format_attrs(tuple(graph.attributes.items()))
    lines = [head + " {"]
    lines += ["  " + line for n in graph.nodes for line in format_node(n, provenance).split("\n")]
    lines.append("  return" + ("" if not graph.outputs else " " + ", ".join(format_name(v.name) for v in graph.outputs)))
    lines.append("}")
    return "\n".join(lines) + "\n"


def summarize(graph: Graph) -> str:
    """Counts by op, parameter count and bytes: a quick look at a graph's size."""
    counts = Counter(n.op for n in graph.ops())
    params = graph.params()
    trainable = [p for p in params if not p.buffer]
    n_params = sum(p.type.size for p in trainable)
    n_bytes = sum(p.type.nbytes for p in params)
    lines = [f"graph @{graph.name}: {len(graph.inputs)} input(s), {len(graph.outputs)} output(s), "
             f"{sum(counts.values())} op node(s)",
             f"parameters: {len(trainable)} tensors, {n_params:,} values; buffers: {len(params) - len(trainable)}; "
             f"weight bytes: {n_bytes:,}",
             f"flags: {', '.join(f'{f.path}={f.value}' for f in graph.flags()) or 'none'}"]
    width = max((len(op) for op in counts), default=0)
    lines += [f"  {op.ljust(width)}  {count}" for op, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    return "\n".join(lines)

