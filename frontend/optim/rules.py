"""Per-tensor update rules of SGD, Adam and AdamW as pure functions on numpy arrays with explicit state.

Each config's `step(lr, param, grad, state)` returns the updated parameter and the new state and never
mutates its arguments. The arithmetic follows torch.optim's single-tensor implementations term by term
(same operation order, scalars folded the same way), so results agree with torch to rounding. State is a
plain dict of arrays and Python scalars, which is what OptimizerRecord and state_dict() serialize.
Both optimizer front ends (ModuleOptimizer and the torch-style classes) call these rules.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Union

import numpy as np

from braze.ir.errors import BrazeError, RecordError

TensorState = dict[str, Union[np.ndarray, int, float]]


def lerp(start: np.ndarray, end: np.ndarray, weight: float) -> np.ndarray:
    """torch.lerp: the two-branch formula that keeps the endpoints exact."""
    if weight < 0.5:
        return start + weight * (end - start)
    return end - (end - start) * (1 - weight)


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise BrazeError(message)


def _array(state: TensorState, key: str, shape: tuple[int, ...], name: str) -> None:
    value = state.get(key)
    if not isinstance(value, np.ndarray):
        raise RecordError(f"{name} state lacks the array {key!r}")
    if value.shape != shape:
        raise RecordError(f"{name} state {key!r} has shape {value.shape}, the parameter {shape}")


class OptimizerConfig:
    """Base of the per-tensor update rules: a named, immutable set of hyper-parameters."""

    name: ClassVar[str]

    def step(self, lr: float, param: np.ndarray, grad: np.ndarray,
             state: TensorState | None) -> tuple[np.ndarray, TensorState]:
        """The updated parameter and state after one step with learning rate `lr`."""
        raise NotImplementedError

    def check_state(self, state: TensorState, shape: tuple[int, ...]) -> None:
        """Raise RecordError unless `state` is a state this rule produces for a parameter of `shape`."""
        raise NotImplementedError

    def hyperparameters(self) -> dict[str, Any]:
        """The hyper-parameters by name (torch's param-group keys)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]


@dataclass(frozen=True)
class SgdConfig(OptimizerConfig):
    """Stochastic gradient descent with momentum, dampening, Nesterov momentum and L2 weight decay (torch.optim.SGD)."""

    momentum: float = 0.0
    dampening: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False
    maximize: bool = False
    name: ClassVar[str] = "sgd"

    def __post_init__(self) -> None:
        _check(self.momentum >= 0.0, f"SGD: invalid momentum {self.momentum}")
        _check(self.weight_decay >= 0.0, f"SGD: invalid weight_decay {self.weight_decay}")
        _check(not self.nesterov or (self.momentum > 0 and self.dampening == 0),
               "SGD: Nesterov momentum requires a momentum and zero dampening")

    def step(self, lr: float, param: np.ndarray, grad: np.ndarray,
             state: TensorState | None) -> tuple[np.ndarray, TensorState]:
        grad = grad.astype(param.dtype, copy=False)
        g = -grad if self.maximize else grad
        if self.weight_decay != 0:
            g = g + self.weight_decay * param
        new_state: TensorState = {}
        if self.momentum != 0:
            buf = None if state is None else state.get("momentum_buffer")
            buf = np.array(g, copy=True) if buf is None else buf * self.momentum + (1 - self.dampening) * g
            new_state["momentum_buffer"] = buf
            g = g + self.momentum * buf if self.nesterov else buf
        return param + (-lr) * g, new_state

    def check_state(self, state: TensorState, shape: tuple[int, ...]) -> None:
        extra = set(state) - {"momentum_buffer"}
        if extra:
            raise RecordError(f"SGD state has unknown entries {sorted(extra)}")
        if "momentum_buffer" in state:
            _array(state, "momentum_buffer", shape, "SGD")


@dataclass(frozen=True)
class AdamConfig(OptimizerConfig):
    """Adam with bias correction, L2 weight decay added to the gradient, and optional AMSGrad (torch.optim.Adam)."""

    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    amsgrad: bool = False
    maximize: bool = False
    name: ClassVar[str] = "adam"
    decoupled: ClassVar[bool] = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "betas", tuple(float(b) for b in self.betas))
        _check(len(self.betas) == 2 and all(0.0 <= b < 1.0 for b in self.betas),
               f"{type(self).__name__}: invalid betas {self.betas}")
        _check(self.eps >= 0.0, f"{type(self).__name__}: invalid eps {self.eps}")
        _check(self.weight_decay >= 0.0, f"{type(self).__name__}: invalid weight_decay {self.weight_decay}")

    def step(self, lr: float, param: np.ndarray, grad: np.ndarray,
             state: TensorState | None) -> tuple[np.ndarray, TensorState]:
        beta1, beta2 = self.betas
        grad = grad.astype(param.dtype, copy=False)
        g = -grad if self.maximize else grad
        if state:
            step, exp_avg, exp_avg_sq = int(state["step"]) + 1, state["exp_avg"], state["exp_avg_sq"]
        else:
            step, exp_avg, exp_avg_sq = 1, np.zeros_like(param), np.zeros_like(param)
        if self.weight_decay != 0:
            if self.decoupled:
                param = param * (1 - lr * self.weight_decay)
            else:
                g = g + self.weight_decay * param
        exp_avg = lerp(exp_avg, g, 1 - beta1)
        exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * g * g
        step_size = lr / (1 - beta1 ** step)
        bias_correction2_sqrt = (1 - beta2 ** step) ** 0.5
        new_state: TensorState = {"step": step, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
        second = exp_avg_sq
        if self.amsgrad:
            previous = state.get("max_exp_avg_sq") if state else None
            second = exp_avg_sq if previous is None else np.maximum(previous, exp_avg_sq)
            new_state["max_exp_avg_sq"] = second
        denom = np.sqrt(second) / bias_correction2_sqrt + self.eps
        return param + (-step_size) * (exp_avg / denom), new_state

    def check_state(self, state: TensorState, shape: tuple[int, ...]) -> None:
        name = type(self).__name__.removesuffix("Config")
        keys = {"step", "exp_avg", "exp_avg_sq"} | ({"max_exp_avg_sq"} if self.amsgrad else set())
        if set(state) != keys:
            raise RecordError(f"{name} state has entries {sorted(state)}, expected {sorted(keys)}")
        step = state["step"]
        if not isinstance(step, (int, np.integer)) or step < 1:
            raise RecordError(f"{name} state has an invalid step count {step!r}")
        for key in keys - {"step"}:
            _array(state, key, shape, name)


@dataclass(frozen=True)
class AdamWConfig(AdamConfig):
    """Adam with decoupled weight decay: the parameter shrinks by lr * weight_decay each step (torch.optim.AdamW)."""

    weight_decay: float = 1e-2
    name: ClassVar[str] = "adamw"
    decoupled: ClassVar[bool] = True


CONFIGS: dict[str, type[OptimizerConfig]] = {c.name: c for c in (SgdConfig, AdamConfig, AdamWConfig)}
