"""Reverse-mode autodiff for eager tensors: the grad mode, the recorded graph and the backward sweep.

`apply` records one Node per differentiable op whose operands require grad. `backward` walks the nodes
reachable from a tensor in reverse topological order and calls each op's registered VJP through an Emitter
whose values are Tensors, under no_grad (higher-order gradients are not recorded).
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Callable, Sequence

import numpy as np

from braze.ir.errors import BrazeError
from braze.ir.registry import Emitter, OpDef

from .tensor import Tensor


class _GradMode(threading.local):
    """Whether ops record for autodiff; per thread, as torch's grad mode."""

    enabled = True


GRAD_MODE = _GradMode()


def is_grad_enabled() -> bool:
    """True when ops on tensors that require grad are recorded for backward."""
    return GRAD_MODE.enabled


class set_grad_enabled(contextlib.ContextDecorator):
    """Turn recording on or off: at once when called, restored on exit when used as a context or decorator."""

    def __init__(self, mode: bool) -> None:
        self.prev = GRAD_MODE.enabled
        self.mode = bool(mode)
        GRAD_MODE.enabled = self.mode

    def __call__(self, func: Callable[..., Any]) -> Callable[..., Any]:
        GRAD_MODE.enabled = self.prev  # as a decorator, the mode applies only inside calls
        return super().__call__(func)

    def _recreate_cm(self) -> set_grad_enabled:
        return set_grad_enabled(self.mode)

    def __enter__(self) -> None:
        GRAD_MODE.enabled = self.mode

    def __exit__(self, *exc: object) -> None:
        GRAD_MODE.enabled = self.prev


class _GradContext(contextlib.ContextDecorator):
    """Set the grad mode inside a block or a decorated function (`@no_grad()` or bare `@no_grad`)."""

    mode = True

    def __new__(cls, func: Callable[..., Any] | None = None) -> Any:
        if func is None:
            return super().__new__(cls)
        return cls()(func)

    def __init__(self, func: Callable[..., Any] | None = None) -> None:
        self.prev = GRAD_MODE.enabled

    def _recreate_cm(self) -> _GradContext:
        return type(self)()  # a fresh instance per call, so nested and recursive calls restore correctly

    def __enter__(self) -> None:
        self.prev = GRAD_MODE.enabled
        GRAD_MODE.enabled = self.mode

    def __exit__(self, *exc: object) -> None:
        GRAD_MODE.enabled = self.prev


class no_grad(_GradContext):
    """Context manager and decorator: ops inside record nothing and their results do not require grad."""

    mode = False


class enable_grad(_GradContext):
    """Context manager and decorator: turn recording back on inside a no_grad region."""

    mode = True


class inference_mode(_GradContext):  # noqa: N801  (torch's name)
    """torch.inference_mode: no_grad (braze has no separate inference tensors); inference_mode(False) leaves the
    grad mode as it is. A context manager and decorator, bare (`@inference_mode`) or called."""

    mode = False

    def __new__(cls, mode: bool | Callable[..., Any] = True) -> Any:
        if callable(mode):
            return cls()(mode)
        return object.__new__(cls)

    def __init__(self, mode: bool | Callable[..., Any] = True) -> None:
        super().__init__()
        self.active = callable(mode) or bool(mode)

    def _recreate_cm(self) -> inference_mode:
        return type(self)(self.active)

    def __enter__(self) -> None:
        self.prev = GRAD_MODE.enabled
        if self.active:
            GRAD_MODE.enabled = False


class Node:
    """One recorded op application: the op, its checked attributes, its operand tensors and result arrays.

    Each operand's producer (node, result index, whether it required grad) and version are taken when recorded:
    an in-place update later moves the tensor to a new producer, while this op's gradient must reach the old one;
    the versions are checked at backward for the operands the VJP reads.
    """

    __slots__ = ("op", "attrs", "inputs", "edges", "versions", "outputs")

    def __init__(self, op: OpDef, attrs: dict[str, Any], inputs: Sequence[Tensor],
                 outputs: Sequence[np.ndarray]) -> None:
        self.op, self.attrs, self.inputs, self.outputs = op, attrs, tuple(inputs), tuple(outputs)
        self.edges = tuple((t._node, t._index, t._requires_grad) for t in self.inputs)
        self.versions = tuple(t._version for t in self.inputs)

    def __repr__(self) -> str:
        return f"Node({self.op.name}, inputs={len(self.inputs)}, outputs={len(self.outputs)})"


class Gradients(Mapping):
    """Gradients of one backward call, keyed by tensor identity (Tensor equality is elementwise)."""

    def __init__(self, items: dict[int, tuple[Tensor, Tensor]] | None = None) -> None:
        self._items = items or {}

    def __getitem__(self, tensor: Tensor) -> Tensor:
        try:
            return self._items[id(tensor)][1]
        except KeyError:
            raise KeyError("no gradient for this tensor (not a leaf that requires grad and was reached)") from None

    def __contains__(self, tensor: object) -> bool:
        entry = self._items.get(id(tensor))
        return entry is not None and entry[0] is tensor

    def __iter__(self) -> Iterator[Tensor]:
        return (t for t, _ in self._items.values())

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{tuple(t.shape)}" for t in self)
        return f"Gradients({len(self)} tensors: {shapes})"


class TensorEmitter(Emitter):
    """Binds ops eagerly on Tensors; VJP rules run through it during backward."""

    def __init__(self, apply: Callable[..., Any]) -> None:
        self._apply = apply

    def bind(self, name: str, operands: Sequence[Any], attrs: dict[str, Any]) -> Any:
        """Apply the op eagerly on Tensors."""
        return self._apply(name, *operands, **attrs)

    def constant(self, array: np.ndarray) -> Tensor:
        """A constant leaf Tensor over `array`."""
        return Tensor._wrap(np.asarray(array))


def _topological(root: Node) -> list[Node]:
    """Nodes reachable from `root` through operands that require grad, operands before their users."""
    order: list[Node] = []
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:  # marked when expanded, not when pushed: a node reached twice must finish last
            continue
        seen.add(id(node))
        stack.append((node, True))
        for producer, _, _ in node.edges:
            if producer is not None and id(producer) not in seen:
                stack.append((producer, False))
    return order


def _accumulate(slot: dict[Any, Any], key: Any, grad: Tensor, add: Callable[..., Any]) -> None:
    prev = slot.get(key)
    slot[key] = grad if prev is None else add("add", prev, grad)


def _seed(root: Tensor, gradient: Any) -> Tensor:
    if gradient is None:
        if root._data.size != 1:
            raise BrazeError(f"backward: gradient can be implicitly created only for a single-element tensor; "
                             f"this one has shape {root.shape}; pass gradient=")
        return Tensor._wrap(np.ones_like(root._data))
    seed = gradient if isinstance(gradient, Tensor) else Tensor._wrap(np.asarray(gradient, root._data.dtype))
    if seed.shape != root.shape:
        raise BrazeError(f"backward: gradient of shape {seed.shape} does not match the tensor's shape {root.shape}")
    return seed.detach()


def backward(root: Tensor, gradient: Any = None) -> Gradients:
    """Accumulate d(root)/d(leaf) into every reached leaf's .grad and return this call's gradients."""
    from .dispatch import apply
    if not root._requires_grad:
        raise BrazeError("backward: the tensor does not require grad and has no recorded producer "
                         "(was it computed under no_grad, from detached tensors, or without autodiff?)")
    seed = _seed(root, gradient)
    leaves: dict[int, Tensor] = {}
    leaf_grads: dict[int, Tensor] = {}
    with no_grad():
        if root._node is None:
            leaves[id(root)], leaf_grads[id(root)] = root, seed
        else:
            _sweep(root, seed, leaves, leaf_grads, apply)
        items = {}
        for key, leaf in leaves.items():
            grad = leaf_grads[key]
            leaf.grad = grad if leaf.grad is None else apply("add", leaf.grad, grad)
            items[key] = (leaf, grad)
    return Gradients(items)


def _sweep(root: Tensor, seed: Tensor, leaves: dict[int, Tensor], leaf_grads: dict[int, Tensor],
           apply: Callable[..., Any]) -> None:
    """Propagate cotangents from `root` back to the leaves, one recorded node at a time."""
    emitter = TensorEmitter(apply)
    cotangents: dict[int, list[Tensor | None]] = {}
    cotangents[id(root._node)] = [None] * len(root._node.outputs)
    cotangents[id(root._node)][root._index] = seed
    for node in reversed(_topological(root._node)):
        cots = cotangents.pop(id(node), None)
        if cots is None or all(c is None for c in cots):
            continue
        grads = _node_vjp(node, cots, emitter)
        for operand, (producer, index, requires), grad in zip(node.inputs, node.edges, grads):
            if grad is None or not requires:
                continue
            if tuple(grad.shape) != operand.shape:
                raise BrazeError(f"{node.op.name}: the vjp rule returned a gradient of shape {tuple(grad.shape)} "
                                 f"for an operand of shape {operand.shape} (an op-definition bug)")
            if grad._device is not operand._device:  # a device copy's gradient goes back to the source device
                grad = Tensor._wrap(grad._data, grad._autodiff, operand._device)
            if producer is None:
                leaves[id(operand)] = operand
                _accumulate(leaf_grads, id(operand), grad, apply)
            else:
                slots = cotangents.setdefault(id(producer), [None] * len(producer.outputs))
                prev = slots[index]
                slots[index] = grad if prev is None else apply("add", prev, grad)


def _check_unmodified(node: Node) -> None:
    """Refuse, as torch, a VJP whose operands it reads (OpDef.vjp_reads) were changed in place after the op was
    recorded."""
    reads = node.op.vjp_reads
    for k, (t, version) in enumerate(zip(node.inputs, node.versions)):
        if t._version != version and (reads is None or k in reads):
            raise BrazeError(f"backward: one of the variables needed for gradient computation has been modified "
                             f"by an inplace operation: operand {k} of {node.op.name} (shape {tuple(t.shape)}, "
                             f"{t.dtype}) is at version {t._version}; expected version {version} instead")


def _node_vjp(node: Node, cots: list[Tensor | None], emitter: TensorEmitter) -> tuple[Any, ...]:
    """Call the op's VJP with Tensor cotangents and results (tuples for multi-result ops)."""
    _check_unmodified(node)
    outs = tuple(Tensor._wrap(o) for o in node.outputs)
    if node.op.num_results == 1:
        g: Any = cots[0]
        out: Any = outs[0]
    else:
        g, out = tuple(cots), outs
    grads = node.op.vjp(emitter, g, out, *node.inputs, **node.attrs)
    if len(grads) != len(node.inputs):
        raise BrazeError(f"{node.op.name}: the vjp rule returned {len(grads)} gradients for "
                         f"{len(node.inputs)} operands (an op-definition bug)")
    return grads
