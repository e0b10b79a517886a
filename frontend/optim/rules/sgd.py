"""The SGD rule: momentum, dampening, Nesterov momentum, L2 weight decay and maximize (torch.optim.SGD)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from braze.ir.update_rules import RULES, numpy_step

from .base import OptimizerConfig, StateLayout, TensorState, check, check_nonnegative


@dataclass(frozen=True)
class SgdConfig(OptimizerConfig):
    """Stochastic gradient descent with momentum, dampening, Nesterov momentum and L2 weight decay (torch.optim.SGD)."""

    momentum: float = 0.0
    dampening: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False
    maximize: bool = False
    name: ClassVar[str] = "sgd"
    label: ClassVar[str] = "SGD"

    def __post_init__(self) -> None:
        check_nonnegative(self.label, momentum=self.momentum, weight_decay=self.weight_decay)
        check(not self.nesterov or (self.momentum > 0 and self.dampening == 0),
              "SGD: Nesterov momentum requires a momentum and zero dampening")

    def step(self, lr: float, param: np.ndarray, grad: np.ndarray,
             state: TensorState | None) -> tuple[np.ndarray, TensorState]:
        buffers = {} if state is None or state.get("momentum_buffer") is None else \
            {"momentum_buffer": state["momentum_buffer"]}
        # SGD counts no steps: only whether this is the first (no buffer yet) changes the arithmetic
        return numpy_step(RULES["sgd"], self.hyperparameters(), lr, 2 if buffers else 1, param, grad, buffers)

    def state_layout(self) -> StateLayout:
        # torch keeps no buffer without momentum and creates it on the first step with momentum
        return StateLayout(optional=("momentum_buffer",))
