"""Kernel parts lowered in a compile worker process from their node's IR text, with the code this process runs (the
same lowering, the same LLVM pipeline: the same object bytes).

A part is sent as a one-node graph (the node's distinct operands as the graph's inputs, its results as the outputs)
in braze IR text, with the names of the operands that are params, its kernel key, its part key and the conv
kernel choices the key names (conv_tuning.choices: the worker lowers with those, not its own environment's). The
worker parses it (the parser verifies), checks that the node it read has that very kernel key (so its object is the
one the key names), lowers it with the default lowering and compiles it; the reply is the part's description
(module_layout.part_meta), its exported symbols and its object. Whatever goes wrong in a worker (a node it cannot
lower, a lowering that fails) is answered as a failure, and the parent then lowers the part itself, where the error
surfaces as it would without workers.

A worker (llvm_object.serve, started by compile_workers.py) compiles LLVM IR texts as soon as llvmlite is imported
and loads this module when asked, with braze registered as a package without running braze/__init__.py, so
it imports braze.ir and braze.codegen only (no frontend).
"""
from __future__ import annotations

from typing import Any

from braze.ir.errors import BrazeError
from braze.ir.graph import Graph, Node
from braze.ir.parser import parse
from braze.ir.registry import is_leaf

from . import conv_tuning
from .module_builder import PendingPart, kernel_key, lower_part
from .module_layout import KernelPart, part_meta
from .target import Target


def part_request(pending: PendingPart, target: Target) -> dict[str, Any]:
    """What a worker needs to lower and compile `pending` as this process would (see the module doc)."""
    node = pending.node
    operands = tuple({v.name: v for v in node.inputs}.values())
    graph = Graph("kernel", operands, (node,), node.outputs)
    return {"key": pending.key, "kernel": pending.kernel, "index": pending.index, "graph": str(graph),
            "fixed": sorted(v.name for v in operands if v.name in pending.fixed),
            "target": [target.triple, target.cpu, target.features, target.vector_width],
            "conv_kernels": conv_tuning.choices(target.identity)}


def lower_requested(request: dict[str, Any]) -> KernelPart:
    """The kernel part a part request describes, lowered here; BrazeError when the request does not describe one
    node whose kernel key is the one it states."""
    triple, cpu, features, width = request["target"]
    target = Target(str(triple), str(cpu), str(features), int(width))
    graph = parse(str(request["graph"]))
    nodes = [n for n in graph.nodes if not is_leaf(n)]
    fixed = frozenset(str(name) for name in request["fixed"])
    if len(nodes) != 1:
        raise BrazeError(f"a part request holds {len(nodes)} computing nodes, not one")
    node: Node = nodes[0]
    if kernel_key(node, fixed) != request["kernel"]:
        raise BrazeError("the node of a part request does not have the kernel key it was sent with")
    with conv_tuning.choices_in_use(request.get("conv_kernels")):
        return lower_part(node, int(request["index"]), str(request["key"]), target, None, fixed)


def lowered(request: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A part request's kernel lowered here: its description (module_layout.part_meta) and its LLVM IR text, which
    the worker compiles (llvm_object.serve)."""
    part = lower_requested(request)
    return part_meta(part), str(part.module)
