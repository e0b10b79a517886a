"""The base of the per-tensor update rules, the state layout they declare, and torch's pointwise update forms.

A rule is a frozen dataclass of hyper-parameters (torch's parameter-group keys, without lr) whose
`step(lr, param, grad, state)` returns the updated parameter and the new state and never mutates its arguments.
The arithmetic follows torch.optim's single-tensor implementations term by term (same operation order, scalars
folded the same way, the helpers below spelling torch's addcmul/addcdiv/lerp), so results agree with torch to
rounding. State is a plain dict of arrays and Python scalars, which OptimizerRecord and state_dict() serialize.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Union

import numpy as np

from braze.ir.errors import RecordError
from braze.ir.evaluate import Concrete, NumpyEmitter
from braze.ir.update_rules import lerp as emitted_lerp

from ..options import OptionError

TensorState = dict[str, Union[np.ndarray, int, float]]


def lerp(start: np.ndarray, end: np.ndarray, weight: float) -> np.ndarray:
    """torch.lerp: the two-branch formula that keeps the endpoints exact (the one the compiled rules use)."""
    high = weight >= 0.5
    return emitted_lerp(NumpyEmitter(), Concrete(start), Concrete(end), 1 - weight if high else weight, high).array


def addcmul(base: np.ndarray, a: np.ndarray, b: np.ndarray, value: float) -> np.ndarray:
    """torch.addcmul: base + value * a * b, with value applied to `a` first as torch does."""
    return base + value * a * b


def addcdiv(base: np.ndarray, a: np.ndarray, b: np.ndarray, value: float) -> np.ndarray:
    """torch.addcdiv: base + value * a / b, with value applied to `a` first as torch does."""
    return base + (value * a) / b


def check(condition: bool, message: str) -> None:
    """Raise OptionError(message) unless `condition` holds (a hyper-parameter torch would refuse)."""
    if not condition:
        raise OptionError(message)


def check_nonnegative(label: str, **values: float) -> None:
    """Raise OptionError for any of `values` below zero, as torch's constructors do."""
    for name, value in values.items():
        check(value >= 0.0, f"{label}: invalid {name} {value} (must be >= 0)")


def checked_betas(label: str, betas: Any) -> tuple[float, float]:
    """`betas` as a pair of floats in [0, 1), or OptionError naming the bad one."""
    try:
        pair = tuple(float(b) for b in betas)
    except (TypeError, ValueError):
        raise OptionError(f"{label}: betas must be a pair of floats, got {betas!r}") from None
    check(len(pair) == 2, f"{label}: betas must be a pair of floats, got {betas!r}")
    for i, beta in enumerate(pair):
        check(0.0 <= beta < 1.0, f"{label}: invalid beta parameter at index {i}: {beta} (must be in [0, 1))")
    return pair  # type: ignore[return-value]


@dataclass(frozen=True)
class StateLayout:
    """The state entries of a rule: arrays shaped like the parameter, optional arrays, and typed scalars."""

    arrays: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    scalars: tuple[tuple[str, type], ...] = ()


def _check_array(state: TensorState, key: str, shape: tuple[int, ...], label: str) -> None:
    value = state.get(key)
    if not isinstance(value, np.ndarray):
        raise RecordError(f"{label} state lacks the array {key!r}")
    if value.shape != shape:
        raise RecordError(f"{label} state {key!r} has shape {value.shape}, the parameter {shape}")


def _check_scalar(state: TensorState, key: str, kind: type, label: str) -> None:
    value = state[key]
    if kind is int:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 0:
            raise RecordError(f"{label} state has an invalid {key} count {value!r}")
    elif isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)) \
            or not math.isfinite(value):
        raise RecordError(f"{label} state has an invalid {key} {value!r}")


class OptimizerConfig:
    """Base of the per-tensor update rules: a named, immutable set of hyper-parameters."""

    name: ClassVar[str]
    label: ClassVar[str]  # torch's class name, for messages
    eager_state: ClassVar[bool] = False  # whether torch's optimizer creates the state with the optimizer

    def step(self, lr: float, param: np.ndarray, grad: np.ndarray,
             state: TensorState | None) -> tuple[np.ndarray, TensorState]:
        """The updated parameter and state after one step with learning rate `lr`."""
        raise NotImplementedError

    def state_layout(self) -> StateLayout:
        """The entries of the state this rule keeps for a parameter."""
        raise NotImplementedError

    def initial_state(self, param: np.ndarray) -> TensorState:
        """The state before the first step (empty: most rules create their state on the first step)."""
        return {}

    def check_state(self, state: TensorState, shape: tuple[int, ...]) -> None:
        """Raise RecordError unless `state` is a state this rule produces for a parameter of `shape`."""
        layout = self.state_layout()
        required = set(layout.arrays) | {key for key, _ in layout.scalars}
        if not required <= set(state) <= required | set(layout.optional):
            raise RecordError(f"{self.label} state has entries {sorted(state)}, expected {sorted(required)}"
                              + (f" and optionally {sorted(layout.optional)}" if layout.optional else ""))
        for key, kind in layout.scalars:
            _check_scalar(state, key, kind, self.label)
        for key in (*layout.arrays, *(k for k in layout.optional if k in state)):
            _check_array(state, key, shape, self.label)

    def hyperparameters(self) -> dict[str, Any]:
        """The hyper-parameters by name (torch's param-group keys)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The names of the hyper-parameters, in declaration order."""
        return tuple(f.name for f in fields(cls))  # type: ignore[arg-type]


def signed(grad: np.ndarray, param: np.ndarray, maximize: bool) -> np.ndarray:
    """The gradient in the parameter's dtype, negated when maximizing."""
    grad = grad.astype(param.dtype, copy=False)
    return -grad if maximize else grad


def l2_decayed(grad: np.ndarray, param: np.ndarray, weight_decay: float) -> np.ndarray:
    """grad + weight_decay * param (torch's grad.add(param, alpha=weight_decay)); the gradient itself at zero."""
    return grad + weight_decay * param if weight_decay != 0 else grad


def step_count(state: TensorState | None) -> int:
    """The step number of the update being made: the stored count plus one (1 for a fresh state)."""
    return 1 if not state else int(state["step"]) + 1
