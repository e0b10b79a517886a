"""Per-parameter optimizer state and the one update routine both optimizer front ends call.

`update` applies a rule to one parameter: it migrates the state to the parameter's device, checks that the
state belongs to the rule and fits the parameter, runs the rule outside autodiff and installs the result
with Param.assign (or the data slot of a plain Tensor), which keeps the parameter's identity, id, device and
configured gradient requirement, so a parameter that required grad still does, as a fresh leaf.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from braze.ir.errors import BrazeError

from ..autodiff import no_grad
from ..device import Device
from ..nn.param import Param
from ..tensor import Tensor
from .rules import OptimizerConfig, TensorState


@dataclass
class ParamState:
    """The optimizer state of one parameter: which rule produced it, the device it lives on, its values."""

    optimizer: str
    device: Device
    state: TensorState = field(default_factory=dict)

    def to(self, device: Device) -> ParamState:
        """The state on `device` (copied, as a transfer between devices copies)."""
        if device == self.device:
            return self
        moved = {k: np.array(v, copy=True) if isinstance(v, np.ndarray) else v for k, v in self.state.items()}
        return ParamState(self.optimizer, device, moved)


def value_of(param: Param | Tensor) -> Tensor:
    """The tensor an optimizer reads and replaces: a Param's stored value (its base, under an adapter), or the
    Tensor itself."""
    return param.base() if isinstance(param, Param) else param


def update(config: OptimizerConfig, lr: float, param: Param | Tensor, grad: Any, previous: ParamState | None,
           label: str) -> ParamState:
    """One step of `config` on `param` with gradient `grad`; returns the parameter's new state."""
    value = value_of(param)
    device = value.device
    array = np.asarray(value)
    grad_array = np.asarray(grad)
    if grad_array.shape != array.shape:
        raise BrazeError(f"optimizer: the gradient of {label} has shape {grad_array.shape}, "
                         f"the parameter {array.shape}")
    state = None
    if previous is not None:
        if previous.optimizer != config.name:
            raise BrazeError(f"optimizer: the state of {label} was made by {previous.optimizer}, but it is now "
                             f"updated by {config.name}")
        previous = previous.to(device)
        config.check_state(previous.state, array.shape)
        state = previous.state
    with no_grad():
        new_value, new_state = config.step(lr, array, grad_array, state)
        if isinstance(param, Param):
            param.assign(new_value)
        else:
            param.data = new_value.astype(array.dtype, copy=False)
    return ParamState(config.name, device, new_state)
