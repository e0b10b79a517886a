"""Module hooks, as torch's: forward pre-hooks, forward hooks and full backward hooks, removed through handles.

A call with hooks runs torch's sequence: pre-hooks (they may replace the arguments), forward, forward hooks
(they may replace the result). Forward hooks run while tracing too, on traced values, so a hook that only reads
(shapes, module names) sees the traced call. Full backward hooks are eager: the module's tensor inputs and
outputs pass through one identity step each in the recorded autodiff graph, whose backward calls
`hook(module, grad_input, grad_output)` once the gradients of the inputs are known; that step is an autodiff
callback, not an op, so it never appears in a traced graph (tracing skips backward hooks).
"""
from __future__ import annotations

import itertools
import warnings
from typing import TYPE_CHECKING, Any, Callable

from braze.ir.errors import BrazeError

from ..autodiff import GRAD_MODE, Node
from ..tensor import Tensor

if TYPE_CHECKING:
    from .module import Module

_IDS = itertools.count()
REGISTRIES = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks", "_forward_hooks_with_kwargs",
              "_forward_hooks_always_called", "_backward_hooks")


class RemovableHandle:
    """What register_*_hook returns: `remove()` (or leaving a `with` block) unregisters the hook."""

    def __init__(self, *registries: dict[int, Any]) -> None:
        self.id = next(_IDS)
        self._registries = registries

    def remove(self) -> None:
        for registry in self._registries:
            registry.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def _add(registry: dict[int, Any], key: int, value: Any, prepend: bool) -> None:
    """Insert in place (handles keep the dict), first when prepending."""
    if prepend:
        rest = list(registry.items())
        registry.clear()
        registry[key] = value
        registry.update(rest)
    else:
        registry[key] = value


class HooksMixin:
    """The hook registration methods of Module."""

    def _registry(self, name: str) -> dict[int, Any]:
        return self.__dict__.setdefault(name, {})

    def register_forward_pre_hook(self, hook: Callable[..., Any], *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """`hook(module, args)` (or `hook(module, args, kwargs)`) before forward; a non-None result replaces the
        arguments (a tuple, or one value; with kwargs, an (args, kwargs) pair)."""
        hooks, kw = self._registry("_forward_pre_hooks"), self._registry("_forward_pre_hooks_with_kwargs")
        handle = RemovableHandle(hooks, kw)
        _add(hooks, handle.id, hook, prepend)
        if with_kwargs:
            kw[handle.id] = True
        return handle

    def register_forward_hook(self, hook: Callable[..., Any], *, prepend: bool = False, with_kwargs: bool = False,
                              always_call: bool = False) -> RemovableHandle:
        """`hook(module, args, output)` (or `hook(module, args, kwargs, output)`) after forward; a non-None result
        replaces the output. With always_call it also runs when forward raises."""
        hooks = self._registry("_forward_hooks")
        kw, always = self._registry("_forward_hooks_with_kwargs"), self._registry("_forward_hooks_always_called")
        handle = RemovableHandle(hooks, kw, always)
        _add(hooks, handle.id, hook, prepend)
        if with_kwargs:
            kw[handle.id] = True
        if always_call:
            always[handle.id] = True
        return handle

    def register_full_backward_hook(self, hook: Callable[..., Any], prepend: bool = False) -> RemovableHandle:
        """`hook(module, grad_input, grad_output)` when the gradients of the module's inputs are computed (eager);
        a non-None result (a tuple, one entry per positional input) replaces grad_input."""
        hooks = self._registry("_backward_hooks")
        handle = RemovableHandle(hooks)
        _add(hooks, handle.id, hook, prepend)
        return handle

    def register_backward_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        raise BrazeError("Module.register_backward_hook: the non-full backward hook is deprecated in torch and not "
                         "supported; use register_full_backward_hook")


def has_hooks(module: Module) -> bool:
    d = module.__dict__
    return bool(d.get("_forward_pre_hooks") or d.get("_forward_hooks") or d.get("_backward_hooks"))


def call_with_hooks(module: Module, args: tuple[Any, ...], kwargs: dict[str, Any], tracing: bool) -> Any:
    """torch's Module._call_impl sequence around `module.forward`."""
    d = module.__dict__
    args, kwargs = _run_pre_hooks(module, d.get("_forward_pre_hooks", {}), d.get("_forward_pre_hooks_with_kwargs", {}),
                                  args, kwargs)
    backward = None if tracing or not d.get("_backward_hooks") else _BackwardHooks(module, d["_backward_hooks"])
    if backward is not None:
        args = backward.wrap_inputs(args)
    hooks = d.get("_forward_hooks", {})
    try:
        result = module.forward(*args, **kwargs)
    except BaseException:
        _run_always_called(module, hooks, d, args, kwargs)
        raise
    with_kwargs = d.get("_forward_hooks_with_kwargs", {})
    for key, hook in list(hooks.items()):
        out = hook(module, args, kwargs, result) if key in with_kwargs else hook(module, args, result)
        if out is not None:
            result = out
    return result if backward is None else backward.wrap_outputs(result)


def _run_pre_hooks(module: Module, hooks: dict[int, Any], with_kwargs: dict[int, Any], args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    for key, hook in list(hooks.items()):
        if key in with_kwargs:
            out = hook(module, args, kwargs)
            if out is not None:
                if not (isinstance(out, tuple) and len(out) == 2):
                    raise BrazeError(f"forward pre-hook must return None or a tuple of (new_args, new_kwargs), but "
                                     f"got {out}.")
                args, kwargs = out
        else:
            out = hook(module, args)
            if out is not None:
                args = out if isinstance(out, tuple) else (out,)
    return args, kwargs


def _run_always_called(module: Module, hooks: dict[int, Any], d: dict[str, Any], args: tuple[Any, ...],
                       kwargs: dict[str, Any]) -> None:
    """The always_call forward hooks after forward raised (with output None); their own errors only warn."""
    always, with_kwargs = d.get("_forward_hooks_always_called", {}), d.get("_forward_hooks_with_kwargs", {})
    for key, hook in list(hooks.items()):
        if key in always:
            try:
                hook(module, args, kwargs, None) if key in with_kwargs else hook(module, args, None)
            except Exception as err:
                warnings.warn(f"forward hook with always_call=True raised an exception that was silenced as another "
                              f"error was raised in forward: {err}", stacklevel=3)


class _Identity:
    """The duck-typed op of a hook step in the recorded graph: results are the operands, the vjp a callback."""

    name = "backward_hook"
    vjp_reads: tuple[int, ...] = ()   # the callback reads gradients only

    def __init__(self, count: int, vjp: Callable[..., tuple[Any, ...]]) -> None:
        self.num_results, self.vjp = count, vjp


def _pass_through(tensors: list[Tensor], vjp: Callable[..., tuple[Any, ...]]) -> list[Tensor]:
    node = Node(_Identity(len(tensors), vjp), {}, tensors, [t._data for t in tensors])  # type: ignore[arg-type]
    return [Tensor._make(t._data, node, i, t._autodiff, t._device) for i, t in enumerate(tensors)]


class _BackwardHooks:
    """One call's full backward hooks: grad_output is captured at the outputs, the hooks run at the inputs."""

    def __init__(self, module: Module, hooks: dict[int, Any]) -> None:
        self.module, self.hooks = module, list(hooks.values())
        self.n_inputs, self.n_outputs = 0, 0
        self.input_slots: list[int] = []
        self.grad_output: tuple[Any, ...] = ()

    def wrap_inputs(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        self.n_inputs = len(args)
        self.input_slots = [i for i, a in enumerate(args) if isinstance(a, Tensor) and a.requires_grad]
        if not self.input_slots or not GRAD_MODE.enabled:
            self.input_slots = []
            return args
        wrapped = _pass_through([args[i] for i in self.input_slots], self._input_vjp)
        out = list(args)
        for i, t in zip(self.input_slots, wrapped):
            out[i] = t
        return tuple(out)

    def wrap_outputs(self, result: Any) -> Any:
        outputs = list(result) if isinstance(result, (tuple, list)) else [result]
        slots = [i for i, o in enumerate(outputs) if isinstance(o, Tensor) and o.requires_grad]
        if not slots or not GRAD_MODE.enabled:
            return result
        self.n_outputs = len(outputs)
        wrapped = _pass_through([outputs[i] for i in slots], lambda e, g, out, *xs: self._output_vjp(slots, g))
        for i, t in zip(slots, wrapped):
            outputs[i] = t
        return type(result)(outputs) if isinstance(result, (tuple, list)) else outputs[0]

    def _output_vjp(self, slots: list[int], g: Any) -> tuple[Any, ...]:
        cots = g if isinstance(g, tuple) else (g,)
        grads: list[Any] = [None] * self.n_outputs
        for i, c in zip(slots, cots):
            grads[i] = c
        self.grad_output = tuple(grads)
        if not self.input_slots:  # no input needs a gradient: torch calls the hooks with grad_input all None
            self._call_hooks((None,) * self.n_inputs)
        return cots

    def _input_vjp(self, e: Any, g: Any, out: Any, *inputs: Tensor) -> tuple[Any, ...]:
        cots = g if isinstance(g, tuple) else (g,)
        grad_input: list[Any] = [None] * self.n_inputs
        for i, c in zip(self.input_slots, cots):
            grad_input[i] = c
        replaced = self._call_hooks(tuple(grad_input))
        return tuple(replaced[i] for i in self.input_slots)

    def _call_hooks(self, grad_input: tuple[Any, ...]) -> tuple[Any, ...]:
        for hook in self.hooks:
            out = hook(self.module, grad_input, self.grad_output)
            if out is None:
                continue
            out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
            if len(out) != len(grad_input):
                raise BrazeError(f"Module.register_full_backward_hook: the hook returned {len(out)} gradients, "
                                 f"the module has {len(grad_input)} inputs")
            grad_input = out
        return grad_input
