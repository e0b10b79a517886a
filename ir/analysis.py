"""Graph views for analysis and drawing: a networkx DiGraph and Graphviz dot text."""
from __future__ import annotations

from typing import Any

import networkx as nx

from .graph import Graph
from .registry import is_leaf


def to_networkx(graph: Graph) -> nx.DiGraph:
    """Vertices: ("input", name) for graph inputs and node indices for nodes; edges carry the value name."""
    g = nx.DiGraph(name=graph.name)
    where: dict[str, Any] = {}
    for v in graph.inputs:
        g.add_node(("input", v.name), op="input", type=str(v.type))
        where[v.name] = ("input", v.name)
    for i, node in enumerate(graph.nodes):
        g.add_node(i, op=node.op, outputs=[v.name for v in node.outputs], attrs=node.attr)
        for v in node.inputs:
            g.add_edge(where[v.name], i, value=v.name, type=str(v.type))
        for v in node.outputs:
            where[v.name] = i
    return g


def _quoted(*lines: str) -> str:
    """A dot string literal; several lines are joined with dot's line break."""
    return '"' + "\\n".join(line.replace("\\", "\\\\").replace('"', '\\"') for line in lines) + '"'


def to_dot(graph: Graph) -> str:
    """Graphviz dot text: one box per node labelled with its op and result types."""
    lines = [f"digraph {_quoted(graph.name)} {{", "  rankdir=TB;", "  node [shape=box, fontname=monospace];"]
    where: dict[str, str] = {}
    for k, v in enumerate(graph.inputs):
        vid = f"in{k}"
        lines.append(f"  {vid} [label={_quoted(f'%{v.name}: {v.type}')}, shape=ellipse];")
        where[v.name] = vid
    for i, node in enumerate(graph.nodes):
        nid = f"n{i}"
        label = node.op + (f" {node.attr['path']}" if "path" in node.attr and is_leaf(node) else "")
        style = ", style=filled, fillcolor=lightyellow" if is_leaf(node) else ""
        types = ", ".join(str(v.type) for v in node.outputs)
        lines.append(f"  {nid} [label={_quoted(label, types)}{style}];")
        for v in node.inputs:
            lines.append(f"  {where[v.name]} -> {nid};")
        for v in node.outputs:
            where[v.name] = nid
    for k, v in enumerate(graph.outputs):
        lines.append(f"  out{k} [label={_quoted(f'return {k}: {v.type}')}, shape=ellipse];")
        lines.append(f"  {where[v.name]} -> out{k};")
    lines.append("}")
    return "\n".join(lines) + "\n"
