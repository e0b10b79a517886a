"""What every ONNX conversion rule shares: the rule table keyed by registered op name and the OnnxBuilder that
collects ONNX nodes and initializers while a graph is converted.

A rule is `fn(e, node, ins, outs)`: `ins` are the ONNX names of the node's operands, `outs` the names its
results must be written to (one per result); helper values get fresh names from `e.temp`. Rules read the node's
attributes and operand types; the op's meaning is the registry's (ir/ops/), and a rule only restates it in ONNX
operators for the opset `e.opset`.
"""
from __future__ import annotations

import itertools
from typing import Callable, Iterable, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from braze.ir.errors import ExportError
from braze.ir.graph import Node
from braze.ir.types import DType

Rule = Callable[["OnnxBuilder", Node, list[str], list[str]], None]
RULES: dict[str, Rule] = {}


def register(*ops: str) -> Callable[[Rule], Rule]:
    """Register a conversion rule for the named ops (each op has at most one)."""
    def wrap(fn: Rule) -> Rule:
        for op in ops:
            if op in RULES:
                raise ExportError(f"op {op!r} already has an ONNX conversion rule")
            RULES[op] = fn
        return fn
    return wrap


def onnx_dtype(dtype: DType) -> int:
    """The ONNX TensorProto element type of a braze dtype."""
    return onnx.helper.np_dtype_to_tensor_dtype(dtype.numpy)


def where(node: Node) -> str:
    """The node's op and provenance for error messages: `matmul (from encoder.0.attn @ model.py:12)`."""
    loc = str(node.loc) if node.loc else ""
    return f"{node.op} (from {loc})" if loc else f"{node.op} (at the graph's top level)"


class OnnxBuilder:
    """The ONNX nodes and initializers of one graph being converted, with fresh-name and constant helpers."""

    def __init__(self, opset: int, taken: Iterable[str]) -> None:
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._taken = set(taken)
        self._counter = itertools.count()
        self._ints: dict[tuple[int, ...], str] = {}
        self.scope = ""  # the module path of the node being converted, for ONNX node names

    def temp(self, hint: str) -> str:
        """A value name no graph value or earlier helper uses."""
        while True:
            name = f"_{hint}_{next(self._counter)}"
            if name not in self._taken:
                self._taken.add(name)
                return name

    def emit(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str] | None = None,
             **attrs: object) -> str:
        """Append one ONNX node; returns its first result's name (a fresh one unless `outputs` names them)."""
        outputs = list(outputs) if outputs is not None else [self.temp(op_type.lower())]
        name = f"{self.scope or 'root'}/{op_type}_{len(self.nodes)}"
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(onnx.helper.make_node(op_type, list(inputs), outputs, name=name, **attrs))
        return outputs[0]

    def initializer(self, name: str, array: np.ndarray) -> str:
        """Store `array` as the initializer `name` (a weight, a captured constant)."""
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def const(self, array: np.ndarray | float | int, dtype: DType | np.dtype | None = None, hint: str = "c") -> str:
        """A helper constant (scalar or array) of `dtype` as an initializer."""
        target = dtype.numpy if isinstance(dtype, DType) else dtype
        return self.initializer(self.temp(hint), np.asarray(array, dtype=target))

    def ints(self, values: Sequence[int]) -> str:
        """A 1-D int64 constant (shapes, axes, pads), shared by every use of the same values."""
        key = tuple(int(v) for v in values)
        if key not in self._ints:
            self._ints[key] = self.const(np.asarray(key, dtype=np.int64), hint="i64")
        return self._ints[key]

    def axes_operand(self, op_type: str, x: str, axes: Sequence[int], out: str, **attrs: object) -> str:
        """A reduction-style node whose axes are an input (opset 18 on; ReduceSum from 13) or an attribute."""
        if op_type == "ReduceSum" or self.opset >= 18:
            return self.emit(op_type, [x, self.ints(axes)], [out], **attrs)
        return self.emit(op_type, [x], [out], axes=list(axes), **attrs)
