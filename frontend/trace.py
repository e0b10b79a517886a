"""braze.trace: run a module's forward pass once on traced tensors and record it as an IR graph.

Every op goes through `dispatch.apply`, the single entry point eager execution uses, so the tracer records
exactly the ops the eager forward pass runs. The tracer maps each op's operands to graph values:

- a traced tensor to its value; a graph input starts as one;
- a Flag to a `flag` leaf (its path, id and effective value);
- a tensor stored by one of the module's parameters or buffers (`named_param_slots()`, `Param.stored_tensors()`)
  to a `param` leaf (path, ParamId, trainability, buffer); its array goes into the graph's weights,
  shared, not copied. A leaf is trainable when its parameter is configured to require grad and has autodiff
  enabled, so every leaf of a valid() snapshot (no autodiff) is frozen and passes may fold it. A
  reparameterized parameter's `val()` applies its composing op (lora_merge, dequantize) through `apply` too,
  so the graph shows the base and adapter leaves and that op;
- any other tensor, array or Python number to a `constant` node. An op whose operands are all constants runs
  eagerly and its result is a constant: the seed dropout draws from the global generator, for example, is
  captured as an i64 constant, so interpreting the graph repeats the eager call's mask after the same
  `braze.manual_seed`.

Module calls, flag reads and buffer assignments reach the tracer through `nn.watch`: each node records the path
of the module whose forward created it and the user's file and line (its Loc); reading a flag's value in
Python specializes the graph and records a guard {path: value} in graph attribute "guards"; `Param.assign` of a
buffer becomes an extra graph output instead of a write. Graph attribute "outputs" lists each output's role,
"output" or "buffer_update:<path>". Nothing in the module changes.
"""
from __future__ import annotations

import inspect
import re
import sys
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from braze.ir.builder import GraphBuilder
from braze.ir.errors import BrazeError, ShapeError
from braze.ir.graph import Graph, Loc, Value
from braze.ir.registry import is_op
from braze.ir.types import type_of

from .arrangement import trace as diagonal_sum
from .dispatch import eager_apply, intercept
from .nn.flag import Flag
from .nn.module import Module
from .nn.param import Param
from .nn.visitor import join_path
from .nn.watch import Watcher, watching
from .tensor import Tensor, as_array
from .trace_context import TRACE
from .trace_state import ModuleState
from .traced import TracedTensor, trace_error, user_frame

_NUMBERS = (bool, int, float, np.generic)


class _Leaf(NamedTuple):
    """A tensor a parameter stores, as the graph's param leaf `path` shows it."""

    path: str
    param: Param
    tensor: Tensor


class Tracer(Watcher):
    """Records one forward pass: the dispatch interceptor (`apply`) and the module watcher in one object."""

    def __init__(self, root: Module | None, name: str) -> None:
        self.builder = GraphBuilder(name)
        self.leaves: dict[int, _Leaf] = {}  # id(stored tensor) -> leaf; the tensors stay referenced here
        self.param_paths: dict[int, str] = {}
        self.flag_paths: dict[int, str] = {}
        self.module_paths: dict[int, str] = {}
        self.scope: list[str] = [""]
        self.constants: dict[int, tuple[Any, Value]] = {}  # id(tensor or array) -> (it, its constant)
        self.guards: dict[str, bool] = {}
        self.updates: dict[str, Value] = {}  # buffer path -> the value assigned last
        self.assigned: dict[int, Value] = {}  # id(Param) -> that value, which later reads see
        self.weights: dict[str, np.ndarray] = {}
        if root is not None:
            self._index(root)

    def _index(self, root: Module) -> None:
        for path, p in root.named_param_slots():
            self.param_paths[id(p)] = path
            for suffix, t in p.stored_tensors():  # a value, or a quantized one's codes and scales
                self.leaves[id(t)] = _Leaf(path + suffix, p, t)
        for path, flag in root.named_flags():
            self.flag_paths[id(flag)] = path
        for path, m in root.named_modules():
            self.module_paths[id(m)] = path

    # --- the graph's inputs and outputs ---------------------------------------------------------------------
    def inputs(self, examples: Sequence[Any], names: Sequence[str]) -> list[TracedTensor]:
        """A traced tensor per example input (a Tensor or a numpy array), named after forward's parameters."""
        out = []
        for k, (example, name) in enumerate(zip(examples, names)):
            if isinstance(example, TracedTensor):
                raise trace_error(f"example input {k} is a traced tensor; trace takes concrete example inputs")
            if isinstance(example, Tensor):
                array, device = example._data, example._device
            elif isinstance(example, (np.ndarray, np.generic)):
                array, device = as_array(example), None
            else:
                raise trace_error(f"example input {k} is a {type(example).__name__}; trace takes tensors or numpy "
                                  f"arrays (bind other arguments first, e.g. with functools.partial)")
            out.append(TracedTensor.of(self.builder.input(name, type_of(array)), self, device))
        return out

    def finish(self, result: Any) -> Graph:
        """The graph: forward's tensors (tuples and lists flattened, None dropped), then the buffer updates."""
        self.builder.loc = self._loc()
        outputs = [self.lift(t) for t in _flatten(result)]
        if not outputs and not self.updates:
            raise trace_error("the traced forward pass returned no tensors, so its graph would compute nothing")
        roles = ["output"] * len(outputs) + [f"buffer_update:{path}" for path in self.updates]
        meta: dict[str, Any] = {"outputs": roles}
        if self.guards:
            meta["guards"] = dict(self.guards)
        return self.builder.finish(outputs + list(self.updates.values()), attributes=meta, weights=self.weights)

    # --- op applications (the dispatch interceptor) --------------------------------------------------------------
    def apply(self, name: str, operands: tuple[Any, ...], attrs: dict[str, Any]) -> Any:
        """Append a node for `name` when an operand is a graph value; evaluate constants eagerly."""
        if not is_op(name):
            raise trace_error(f"op {name!r} is not in the op registry, so a graph cannot record it; define it once "
                              f"with braze.ir.defop (infer, impl, vjp) and call it through apply")
        operands = tuple(self._resolve(o) for o in operands)
        if not any(self._symbolic(o) for o in operands):
            return eager_apply(name, *operands, **attrs)
        self.builder.loc = self._loc()
        like = next((self._dtype(o) for o in operands if not isinstance(o, _NUMBERS)), None)
        values = [self.lift(o, like) for o in operands]
        try:
            results = self.builder.add_node(name, values, attrs)
        except BrazeError as exc:  # the op's own error (shapes, dtypes, attributes), placed at the user's line
            loc = self.builder.loc
            if loc is None or not loc.file:
                raise
            raise type(exc)(f"{loc.file}:{loc.line}: {exc}") from exc
        device = next((o._device for o in operands if isinstance(o, Tensor) and o._device is not None), None)
        outs = tuple(TracedTensor.of(v, self, device) for v in results)
        return outs[0] if len(outs) == 1 else outs

    @staticmethod
    def _resolve(o: Any) -> Any:
        """Parameters (anything with __braze_tensor__ but flags) as their value Tensor; the rest unchanged."""
        if isinstance(o, (Tensor, Flag)):
            return o
        convert = getattr(type(o), "__braze_tensor__", None)
        if convert is None:
            return o
        t = convert(o)
        if not isinstance(t, Tensor):
            raise TypeError(f"{type(o).__name__}.__braze_tensor__ returned {type(t).__name__}, not a Tensor")
        return t

    def _symbolic(self, o: Any) -> bool:
        return isinstance(o, (TracedTensor, Flag)) or (isinstance(o, Tensor) and self._leaf(o) is not None)

    @staticmethod
    def _dtype(o: Any) -> np.dtype:
        if isinstance(o, Flag):
            return np.dtype(bool)
        return o.dtype.numpy if isinstance(o, Tensor) else as_array(o).dtype

    def _leaf(self, t: Tensor) -> _Leaf | None:
        leaf = self.leaves.get(id(t))
        return leaf if leaf is not None and leaf.tensor is t else None

    def lift(self, o: Any, like: np.dtype | None = None) -> Value:
        """The graph value of an operand; Python numbers take the dtype `like`, as eager apply gives them."""
        if isinstance(o, TracedTensor):
            if o.tracer is not self:
                raise trace_error("a tensor traced by another (finished or enclosing) trace is used here")
            return o.value
        if isinstance(o, Flag):
            return self.builder.flag(self._flag_path(o), id=int(o.id), value=o._effective)
        if isinstance(o, Tensor):
            leaf = self._leaf(o)
            return self._param(leaf) if leaf is not None else self._constant(o, o._data)
        if getattr(type(o), "__braze_tensor__", None) is not None:
            return self.lift(self._resolve(o), like)
        if isinstance(o, _NUMBERS):
            return self.builder.constant(np.asarray(o, dtype=like) if like is not None else as_array(o))
        return self._constant(o, as_array(o))

    def _param(self, leaf: _Leaf) -> Value:
        assigned = self.assigned.get(id(leaf.param))
        if assigned is not None and leaf.path == self.param_paths[id(leaf.param)]:
            return assigned
        p = leaf.param
        value = self.builder.param(leaf.path, type_of(leaf.tensor._data), id=int(p.id),
                                   trainable=p.is_require_grad() and p.is_autodiff(), buffer=p.is_buffer)
        self.weights[leaf.path] = leaf.tensor._data
        return value

    def _constant(self, key: Any, array: np.ndarray) -> Value:
        """One constant node per tensor or array object, however often it is used."""
        known = self.constants.get(id(key))
        if known is not None and known[0] is key:
            return known[1]
        value = self.builder.constant(array)
        self.constants[id(key)] = (key, value)
        return value

    def _flag_path(self, flag: Flag) -> str:
        return self.flag_paths.get(id(flag), f"flag{int(flag.id)}")

    def _loc(self) -> Loc:
        where = user_frame()
        return Loc(self.scope[-1], where[0], where[1]) if where is not None else Loc(self.scope[-1])

    # --- module events (the watcher) ---------------------------------------------------------------------------
    def enter_module(self, module: Module) -> None:
        self.scope.append(self.module_paths.get(id(module), self.scope[-1]))

    def exit_module(self, module: Module) -> None:
        self.scope.pop()

    def read_flag(self, flag: Flag) -> None:
        self.guards[self._flag_path(flag)] = flag._effective

    def read_mode(self, module: Module, value: bool) -> None:
        self.guards[join_path(self.module_paths.get(id(module), self.scope[-1]), "training")] = value

    def assign(self, param: Param, value: Any) -> bool:
        """A buffer of the traced module takes `value` as a graph output; assigning a parameter is an error."""
        path = self.param_paths.get(id(param))
        if path is None:
            return False
        if not param.is_buffer:
            raise trace_error(f"the forward pass assigns to parameter '{path}'; a traced forward pass may update "
                              f"buffers only (parameters change in training steps, outside the graph)")
        self.builder.loc = self._loc()
        dtype = param.lazy_dtype
        value = self.lift(value, dtype.numpy)
        if value.shape != tuple(param.lazy_shape):
            raise ShapeError(f"Param.assign: got shape {value.shape}, buffer '{path}' has shape {param.lazy_shape}")
        if value.dtype != dtype:
            value = self.builder.add_node("cast", [value], {"dtype": dtype})[0]
        self.updates[path] = self.assigned[id(param)] = value
        return True


def _flatten(result: Any) -> list[Any]:
    if result is None:
        return []
    if isinstance(result, (tuple, list)):
        return [t for r in result for t in _flatten(r)]
    if isinstance(result, (Tensor, Flag)) or getattr(type(result), "__braze_tensor__", None) is not None:
        return [result]
    raise trace_error(f"the traced forward pass returned a {type(result).__name__}; it must return tensors "
                      f"(or tuples and lists of them)")


def _input_names(fn: Callable[..., Any], count: int) -> list[str]:
    """forward's positional parameter names for the graph inputs (input<k> past them), made distinct."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        params = []  # type: ignore[assignment]
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    declared = [p.name for p in params if p.kind in kinds]
    names: list[str] = []
    for k in range(count):
        base = name = declared[k] if k < len(declared) else f"input{k}"
        while name in names:
            name = f"{base}_{len(names)}"
        names.append(name)
    return names


def trace(module_or_fn: Module | Callable[..., Any] | Tensor, *example_inputs: Any, name: str | None = None
          ) -> Graph | Tensor:
    """Record `module_or_fn(*example_inputs)` as a verified IR graph carrying its weights (see the module doc).
    Given a Tensor instead, torch.trace, whose name this shares: the sum of the matrix's diagonal.

    A Module (or a bound method of one) gets param and flag leaves with the module's paths; a plain function
    sees every tensor it closes over as a constant. Example inputs are Tensors or numpy arrays; they become the
    graph inputs, named after forward's parameters. Raises braze.TraceError, naming the user's line, when the
    forward pass needs a traced value in Python or applies an op outside the registry, and when it changes
    Python state of its modules that a graph cannot repeat (trace_state.py).
    """
    if isinstance(module_or_fn, Tensor) and not example_inputs and name is None:
        return diagonal_sum(module_or_fn)
    root = module_or_fn if isinstance(module_or_fn, Module) else getattr(module_or_fn, "__self__", None)
    root = root if isinstance(root, Module) else None
    if not callable(module_or_fn):
        raise TypeError(f"trace: expected a Module or a function, got {type(module_or_fn).__name__}")
    fn = module_or_fn.forward if isinstance(module_or_fn, Module) else module_or_fn
    if name is None:
        raw = type(module_or_fn).__name__ if isinstance(module_or_fn, Module) else getattr(fn, "__name__", "")
        name = re.sub(r"\W", "", raw) or "main"
    state = ModuleState(root) if root is not None else None
    TRACE.entries.append(sys._getframe())
    try:
        tracer = Tracer(root, name)
        inputs = tracer.inputs(example_inputs, _input_names(fn, len(example_inputs)))
        with watching(tracer), intercept(tracer.apply):
            result = module_or_fn(*inputs)
            if state is not None:
                state.check()
            return tracer.finish(result)
    finally:
        TRACE.entries.pop()


__all__ = ["trace", "Tracer", "TracedTensor"]
