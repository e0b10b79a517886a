"""The Adam family: Adam and AdamW (AMSGrad, L2 or decoupled weight decay), Adamax, NAdam and RAdam.

Each follows the single-tensor form of its torch.optim class; the step count and NAdam's running momentum product
are Python scalars (torch keeps them as 0-d tensors of its default dtype: the same values in float64).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from braze.ir.update_rules import RULES, numpy_step

from .base import (OptimizerConfig, StateLayout, TensorState, addcdiv, addcmul, check_nonnegative, checked_betas,
                   l2_decayed, lerp, signed, step_count)


def _decayed(param: np.ndarray, grad: np.ndarray, lr: float, weight_decay: float,
             decoupled: bool) -> tuple[np.ndarray, np.ndarray]:
    """Weight decay before the update: shrink the parameter (decoupled) or add the L2 term to the gradient."""
    if weight_decay != 0 and decoupled:
        return param * (1 - lr * weight_decay), grad
    return param, l2_decayed(grad, param, weight_decay)


def _begin(rule: NAdamConfig | RAdamConfig, lr: float, param: np.ndarray, grad: np.ndarray,
           state: TensorState | None) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The first half of a step: the step number, the decayed parameter and gradient, and the updated first and
    second moment estimates (zero before the first step)."""
    beta1, beta2 = rule.betas
    param, g = _decayed(param, signed(grad, param, rule.maximize), lr, rule.weight_decay, rule.decoupled_weight_decay)
    exp_avg = state["exp_avg"] if state else np.zeros_like(param)
    exp_avg_sq = state["exp_avg_sq"] if state else np.zeros_like(param)
    return (step_count(state), param, g, lerp(exp_avg, g, 1 - beta1),
            addcmul(exp_avg_sq * beta2, g, g, 1 - beta2))


@dataclass(frozen=True)
class _MomentRule(OptimizerConfig):
    """The options every rule of the family starts with (betas, eps, weight_decay), checked as torch does."""

    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "betas", checked_betas(self.label, self.betas))
        check_nonnegative(self.label, eps=self.eps, weight_decay=self.weight_decay)


@dataclass(frozen=True)
class AdamConfig(_MomentRule):
    """Adam with bias correction, L2 or decoupled weight decay and optional AMSGrad (torch.optim.Adam)."""

    amsgrad: bool = False
    maximize: bool = False
    decoupled_weight_decay: bool = False
    name: ClassVar[str] = "adam"
    label: ClassVar[str] = "Adam"

    def step(self, lr: float, param: np.ndarray, grad: np.ndarray,
             state: TensorState | None) -> tuple[np.ndarray, TensorState]:
        step = step_count(state)
        arrays = {k: v for k, v in (state or {}).items() if isinstance(v, np.ndarray)}
        param, new_state = numpy_step(RULES["adam"], self.hyperparameters(), lr, step, param, grad, arrays)
        return param, {"step": step, **new_state}

    def state_layout(self) -> StateLayout:
        return StateLayout(arrays=("exp_avg", "exp_avg_sq", *(("max_exp_avg_sq",) if self.amsgrad else ())),
                           scalars=(("step", int),))


@dataclass(frozen=True)
class AdamWConfig(AdamConfig):
    """Adam with decoupled weight decay: the parameter shrinks by lr * weight_decay each step (torch.optim.AdamW)."""

    weight_decay: float = 1e-2
    decoupled_weight_decay: bool = True
    name: ClassVar[str] = "adamw"
    label: ClassVar[str] = "AdamW"


@dataclass(frozen=True)
class AdamaxConfig(_MomentRule):
    """Adamax: Adam with the infinity norm in place of the second moment (torch.optim.Adamax)."""

    maximize: bool = False
    name: ClassVar[str] = "adamax"
    label: ClassVar[str] = "Adamax"

    def step(self, lr: float, param: np.ndarray, grad: np.ndarray,
             state: TensorState | None) -> tuple[np.ndarray, TensorState]:
        beta1, beta2 = self.betas
        step = step_count(state)
        g = l2_decayed(signed(grad, param, self.maximize), param, self.weight_decay)
        exp_avg = lerp(state["exp_avg"] if state else np.zeros_like(param), g, 1 - beta1)
        exp_inf = np.maximum((state["exp_inf"] if state else np.zeros_like(param)) * beta2, np.abs(g) + self.eps)
        clr = lr / (1 - beta1 ** step)
        return addcdiv(param, exp_avg, exp_inf, -clr), {"step": step, "exp_avg": exp_avg, "exp_inf": exp_inf}

    def state_layout(self) -> StateLayout:
        return StateLayout(arrays=("exp_avg", "exp_inf"), scalars=(("step", int),))


@dataclass(frozen=True)
class NAdamConfig(_MomentRule):
    """NAdam: Adam with Nesterov momentum and a momentum schedule (torch.optim.NAdam)."""

    momentum_decay: float = 4e-3
    decoupled_weight_decay: bool = False
    maximize: bool = False
    name: ClassVar[str] = "nadam"
    label: ClassVar[str] = "NAdam"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_nonnegative(self.label, momentum_decay=self.momentum_decay)

    def _mu(self, step: int) -> float:
        """The momentum coefficient of step `step`."""
        return self.betas[0] * (1.0 - 0.5 * (0.96 ** (step * self.momentum_decay)))

    def step(self, lr: float, param: np.ndarray, grad: np.ndarray,
             state: TensorState | None) -> tuple[np.ndarray, TensorState]:
        step, param, g, exp_avg, exp_avg_sq = _begin(self, lr, param, grad, state)
        bias_correction2 = 1 - self.betas[1] ** step
        mu, mu_next = self._mu(step), self._mu(step + 1)
        mu_product = (float(state["mu_product"]) if state else 1.0) * mu
        denom = np.sqrt(exp_avg_sq / bias_correction2) + self.eps
        param = addcdiv(param, g, denom, -lr * (1.0 - mu) / (1.0 - mu_product))
        param = addcdiv(param, exp_avg, denom, (-lr * mu_next) / (1.0 - mu_product * mu_next))
        return param, {"step": step, "mu_product": mu_product, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}

    def state_layout(self) -> StateLayout:
        return StateLayout(arrays=("exp_avg", "exp_avg_sq"), scalars=(("step", int), ("mu_product", float)))


@dataclass(frozen=True)
class RAdamConfig(_MomentRule):
    """RAdam: Adam with the variance of the adaptive learning rate rectified (torch.optim.RAdam)."""

    decoupled_weight_decay: bool = False
    maximize: bool = False
    name: ClassVar[str] = "radam"
    label: ClassVar[str] = "RAdam"

    def step(self, lr: float, param: np.ndarray, grad: np.ndarray,
             state: TensorState | None) -> tuple[np.ndarray, TensorState]:
        beta1, beta2 = self.betas
        step, param, g, exp_avg, exp_avg_sq = _begin(self, lr, param, grad, state)
        bias_correction1, bias_correction2 = 1 - beta1 ** step, 1 - beta2 ** step
        corrected = exp_avg / bias_correction1
        rho_inf = 2 / (1 - beta2) - 1  # the maximum length of the approximated simple moving average
        rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
        if rho_t > 5.0:
            rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
            adaptive = (bias_correction2 ** 0.5) / (np.sqrt(exp_avg_sq) + self.eps)
            update = corrected * lr * adaptive * rect
        else:
            update = corrected * lr
        return param - update, {"step": step, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}

    def state_layout(self) -> StateLayout:
        return StateLayout(arrays=("exp_avg", "exp_avg_sq"), scalars=(("step", int),))
