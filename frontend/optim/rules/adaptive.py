"""Rules with per-coordinate step sizes from running squares: RMSprop, Adagrad and Adadelta (torch.optim)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .base import (OptimizerConfig, StateLayout, TensorState, addcdiv, addcmul, check, check_nonnegative, l2_decayed,
                   lerp, signed, step_count)


def _running(state: TensorState | None, key: str, param: np.ndarray) -> np.ndarray:
    """A state array, or zeros shaped like the parameter before the first step."""
    return state[key] if state and key in state else np.zeros_like(param)


@dataclass(frozen=True)
class RmsPropConfig(OptimizerConfig):
    """RMSprop: divide by a running root mean square, optionally centered and with momentum (torch.optim.RMSprop)."""

    alpha: float = 0.99
    eps: float = 1e-8
    weight_decay: float = 0.0
    momentum: float = 0.0
    centered: bool = False
    maximize: bool = False
    name: ClassVar[str] = "rmsprop"
    label: ClassVar[str] = "RMSprop"

    def __post_init__(self) -> None:
        check_nonnegative(self.label, alpha=self.alpha, eps=self.eps, momentum=self.momentum,
                          weight_decay=self.weight_decay)

    def step(self, lr: float, param: np.ndarray, grad: np.ndarray,
             state: TensorState | None) -> tuple[np.ndarray, TensorState]:
        g = l2_decayed(signed(grad, param, self.maximize), param, self.weight_decay)
        square_avg = addcmul(_running(state, "square_avg", param) * self.alpha, g, g, 1 - self.alpha)
        new_state: TensorState = {"step": step_count(state), "square_avg": square_avg}
        if self.centered:
            grad_avg = lerp(_running(state, "grad_avg", param), g, 1 - self.alpha)
            new_state["grad_avg"] = grad_avg
            avg = np.sqrt(addcmul(square_avg, grad_avg, grad_avg, -1)) + self.eps
        else:
            avg = np.sqrt(square_avg) + self.eps
        if self.momentum > 0:
            buf = addcdiv(_running(state, "momentum_buffer", param) * self.momentum, g, avg, 1)
            new_state["momentum_buffer"] = buf
            return param + (-lr) * buf, new_state
        return addcdiv(param, g, avg, -lr), new_state

    def state_layout(self) -> StateLayout:
        arrays = ("square_avg", *(("momentum_buffer",) if self.momentum > 0 else ()),
                  *(("grad_avg",) if self.centered else ()))
        return StateLayout(arrays=arrays, scalars=(("step", int),))


@dataclass(frozen=True)
class AdagradConfig(OptimizerConfig):
    """Adagrad: divide by the root of the summed squared gradients, with a decaying lr (torch.optim.Adagrad)."""

    lr_decay: float = 0.0
    weight_decay: float = 0.0
    initial_accumulator_value: float = 0.0
    eps: float = 1e-10
    maximize: bool = False
    name: ClassVar[str] = "adagrad"
    label: ClassVar[str] = "Adagrad"
    eager_state: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_nonnegative(self.label, lr_decay=self.lr_decay, weight_decay=self.weight_decay,
                          initial_accumulator_value=self.initial_accumulator_value, eps=self.eps)

    def initial_state(self, param: np.ndarray) -> TensorState:
        """torch's Adagrad creates its state with the optimizer: step 0 and the sum at the initial value."""
        return {"step": 0, "sum": np.full_like(param, self.initial_accumulator_value)}

    def step(self, lr: float, param: np.ndarray, grad: np.ndarray,
             state: TensorState | None) -> tuple[np.ndarray, TensorState]:
        state = state or self.initial_state(param)
        step = step_count(state)
        g = l2_decayed(signed(grad, param, self.maximize), param, self.weight_decay)
        clr = lr / (1 + (step - 1) * self.lr_decay)
        total = addcmul(state["sum"], g, g, 1)
        return addcdiv(param, g, np.sqrt(total) + self.eps, -clr), {"step": step, "sum": total}

    def state_layout(self) -> StateLayout:
        return StateLayout(arrays=("sum",), scalars=(("step", int),))


@dataclass(frozen=True)
class AdadeltaConfig(OptimizerConfig):
    """Adadelta: steps scaled by the ratio of running RMS of updates and of gradients (torch.optim.Adadelta)."""

    rho: float = 0.9
    eps: float = 1e-6
    weight_decay: float = 0.0
    maximize: bool = False
    name: ClassVar[str] = "adadelta"
    label: ClassVar[str] = "Adadelta"

    def __post_init__(self) -> None:
        check(0.0 <= self.rho <= 1.0, f"Adadelta: invalid rho {self.rho} (must be in [0, 1])")
        check_nonnegative(self.label, eps=self.eps, weight_decay=self.weight_decay)

    def step(self, lr: float, param: np.ndarray, grad: np.ndarray,
             state: TensorState | None) -> tuple[np.ndarray, TensorState]:
        g = l2_decayed(signed(grad, param, self.maximize), param, self.weight_decay)
        square_avg = addcmul(_running(state, "square_avg", param) * self.rho, g, g, 1 - self.rho)
        acc_delta = _running(state, "acc_delta", param)
        std = np.sqrt(square_avg + self.eps)
        delta = np.sqrt(acc_delta + self.eps) / std * g
        acc_delta = addcmul(acc_delta * self.rho, delta, delta, 1 - self.rho)
        return param + (-lr) * delta, {"step": step_count(state), "square_avg": square_avg, "acc_delta": acc_delta}

    def state_layout(self) -> StateLayout:
        return StateLayout(arrays=("square_avg", "acc_delta"), scalars=(("step", int),))
