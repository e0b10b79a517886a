"""A compile worker process: it compiles LLVM IR text, or lowers a kernel part from its node's IR text and compiles
it, with the code this process runs (the same lowering, the same LLVM pipeline: the same object bytes).

A part is sent as a one-node graph (the node's distinct operands as the graph's inputs, its results as the outputs)
in braze IR text, with the names of the operands that are params, its kernel key and its part key. The worker
parses it (the parser verifies), checks that the node it read has that very kernel key (so its object is the one
the key names), lowers it with the default lowering and compiles it; the reply is the part's description
(module_layout.part_meta), its exported symbols and its object. Whatever goes wrong in a worker (a node it cannot
lower, a lowering that fails) is answered as a failure, and the parent then lowers the part itself, where the error
surfaces as it would without workers.

The parent starts a worker as `python -c compile_workers.BOOTSTRAP <the parent's sys.path as JSON>`: the
bootstrap takes the parent's module path and registers the braze package without running braze/__init__.py, so a
worker imports braze.ir and braze.codegen only (no frontend). Messages are length-prefixed
(llvm_object.read_message / write_message): first the worker's `{"ready": true}` once its imports are done, then per
request (JSON: {"kind": "compile", machine..., "text"} or {"kind": "lower", machine..., "part"}) a JSON header
({"ok": true, "symbols", "timings"[, "part"]} or {"ok": false, "stage", "error"}) and, on success, the object.
"""
from __future__ import annotations

import json
import sys
import time
from typing import Any, BinaryIO

from braze.ir.errors import BrazeError
from braze.ir.graph import Graph, Node
from braze.ir.parser import parse
from braze.ir.registry import is_leaf

from . import llvm_object
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
            "target": [target.triple, target.cpu, target.features, target.vector_width]}


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
    return lower_part(node, int(request["index"]), str(request["key"]), target, None, fixed)


def serve(stdin: BinaryIO, stdout: BinaryIO) -> None:
    """The worker's loop (see the module doc); returns at the end of stdin."""
    llvm_object.write_message(stdout, b'{"ready": true}')
    while (message := llvm_object.read_message(stdin)) is not None:
        job = json.loads(message)
        timings: dict[str, float] = {}
        header: dict[str, Any] = {}
        try:
            if job.get("kind") == "lower":
                start = time.perf_counter()
                part = lower_requested(job["part"])
                text = str(part.module)
                timings["lower"] = time.perf_counter() - start
                header["part"] = part_meta(part)
            else:
                text = job["text"]
            _, symbols, payload = llvm_object.compile_text(
                text, job["triple"], job["cpu"], job["features"], job["opt"],
                lambda stage, seconds: timings.__setitem__(stage, seconds))
        except llvm_object.LLVMFailure as exc:
            llvm_object.write_message(stdout, json.dumps({"ok": False, "stage": exc.stage,
                                                          "error": str(exc)}).encode())
            continue
        except Exception as exc:  # noqa: BLE001 - the parent lowers the part itself and reports the error there
            llvm_object.write_message(stdout, json.dumps({"ok": False, "stage": "lower",
                                                          "error": f"{type(exc).__name__}: {exc}"}).encode())
            continue
        header.update(ok=True, symbols=list(symbols), timings=timings)
        llvm_object.write_message(stdout, json.dumps(header).encode())
        llvm_object.write_message(stdout, payload)


def main() -> None:
    serve(sys.stdin.buffer, sys.stdout.buffer)
