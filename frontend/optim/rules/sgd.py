"""The SGD rule: momentum, dampening, Nesterov momentum, L2 weight decay and maximize (torch.optim.SGD)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .base import OptimizerConfig, StateLayout, TensorState, check, check_nonnegative, l2_decayed, signed


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
        g = l2_decayed(signed(grad, param, self.maximize), param, self.weight_decay)
        new_state: TensorState = {}
        if self.momentum != 0:
            buf = None if state is None else state.get("momentum_buffer")
            buf = np.array(g, copy=True) if buf is None else buf * self.momentum + (1 - self.dampening) * g
            new_state["momentum_buffer"] = buf
            g = g + self.momentum * buf if self.nesterov else buf
        return param + (-lr) * g, new_state

    def state_layout(self) -> StateLayout:
        # torch keeps no buffer without momentum and creates it on the first step with momentum
        return StateLayout(optional=("momentum_buffer",))
