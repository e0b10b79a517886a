"""torch.optim-style optimizers: SGD, Adam and AdamW over a list of parameters, with param_groups and state_dict.

    opt = braze.optim.Adam(model.parameters(), lr=1e-3)
    opt.zero_grad(); loss.backward(); opt.step()

Each step reads a parameter's `.grad`, builds the group's rule config from the group's hyper-parameters
(so editing `opt.param_groups[i]["lr"]` takes effect, as schedulers expect) and applies it through the
same per-tensor rules and update routine as ModuleOptimizer.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

from braze.ir.errors import BrazeError, RecordError

from ..autodiff import enable_grad
from ..creation import zeros_like
from ..nn.param import Param
from ..tensor import Tensor
from .rules import AdamConfig, AdamWConfig, OptimizerConfig, SgdConfig, TensorState
from .state import ParamState, update, value_of

Parameter = Param | Tensor


class Optimizer:
    """Base of the torch-style optimizers: parameter groups, per-parameter state, zero_grad, state_dict."""

    rule: type[OptimizerConfig]

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        if float(defaults["lr"]) < 0.0:
            raise BrazeError(f"{type(self).__name__}: invalid learning rate {defaults['lr']}")
        self._config_of(defaults)  # validates the hyper-parameters
        self.defaults = defaults
        self.param_groups: list[dict[str, Any]] = []
        self._states: dict[int, ParamState] = {}
        groups = list(params)
        if not groups:
            raise BrazeError(f"{type(self).__name__}: got an empty parameter list")
        for group in groups if isinstance(groups[0], dict) else [{"params": groups}]:
            self.add_param_group(group)

    def _config_of(self, group: dict[str, Any]) -> OptimizerConfig:
        names = self.rule().hyperparameters()
        return self.rule(**{k: group[k] for k in names})

    def add_param_group(self, group: dict[str, Any]) -> None:
        """Add a group: a dict with "params" and optional hyper-parameters (the defaults fill the rest)."""
        params = group["params"]
        params = [params] if isinstance(params, (Param, Tensor)) else list(params)
        for p in params:
            if not isinstance(p, (Param, Tensor)):
                raise BrazeError(f"{type(self).__name__}: can only optimize Params and Tensors, got {type(p).__name__}")
            if isinstance(p, Tensor) and not p.is_leaf:
                raise BrazeError(f"{type(self).__name__}: can't optimize a non-leaf Tensor")
            if not value_of(p).dtype.is_float:
                raise BrazeError(f"{type(self).__name__}: can only optimize floating-point parameters, "
                                 f"got {value_of(p).dtype}")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if len({id(p) for p in params}) != len(params) or seen & {id(p) for p in params}:
            raise BrazeError(f"{type(self).__name__}: some parameters appear in more than one group")
        full = {**self.defaults, **{k: v for k, v in group.items() if k != "params"}, "params": params}
        self._config_of(full)
        self.param_groups.append(full)

    @property
    def state(self) -> dict[Parameter, TensorState]:
        """The per-parameter state, keyed by parameter (as torch's optimizer.state)."""
        return {p: self._states[id(p)].state for g in self.param_groups for p in g["params"] if id(p) in self._states}

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's gradient: None (the default, as torch), or zeros."""
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none or p.grad is None:
                    p.grad = None
                else:
                    p.grad = zeros_like(p.grad)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; returns the closure's loss (None without a closure)."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        for g, group in enumerate(self.param_groups):
            config, lr = self._config_of(group), float(group["lr"])
            for i, p in enumerate(group["params"]):
                if p.grad is None:
                    continue
                label = f"parameter {i} of group {g}"
                self._states[id(p)] = update(config, lr, p, p.grad, self._states.get(id(p)), label)
        return loss

    # --- state dict ----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """{"state": {index: state}, "param_groups": [hyper-parameters with "params" as indices]}, as torch."""
        state: dict[int, TensorState] = {}
        groups = []
        index = 0
        for group in self.param_groups:
            indices = []
            for p in group["params"]:
                if id(p) in self._states:
                    state[index] = {k: np.array(v, copy=True) if isinstance(v, np.ndarray) else v
                                    for k, v in self._states[id(p)].state.items()}
                indices.append(index)
                index += 1
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": indices})
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore hyper-parameters and state saved by state_dict() (arrays may be any __array__ objects)."""
        saved = state_dict["param_groups"]
        if len(saved) != len(self.param_groups) or any(
                len(s["params"]) != len(g["params"]) for s, g in zip(saved, self.param_groups)):
            raise RecordError(f"{type(self).__name__}.load_state_dict: the saved groups have sizes "
                              f"{[len(s['params']) for s in saved]}, this optimizer's "
                              f"{[len(g['params']) for g in self.param_groups]}")
        groups = [{**g, **{k: v for k, v in s.items() if k != "params"}} for s, g in zip(saved, self.param_groups)]
        states: dict[int, ParamState] = {}
        problems = []
        for group, saved_group in zip(groups, saved):
            config = self._config_of(group)
            for index, p in zip(saved_group["params"], group["params"]):
                if index in state_dict["state"]:
                    try:
                        states[id(p)] = _restored(config, p, state_dict["state"][index])
                    except (RecordError, TypeError, ValueError) as err:
                        problems.append(f"state {index}: {err}")
        if problems:
            raise RecordError(f"{type(self).__name__}.load_state_dict:\n  " + "\n  ".join(problems))
        self.param_groups, self._states = groups, states

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {v}" for k, v in group.items() if k != "params"]
        return "\n".join(lines + [")"])


def _restored(config: OptimizerConfig, param: Parameter, saved: dict[str, Any]) -> ParamState:
    """A parameter's state from a state dict: steps as ints, arrays in the parameter's dtype, checked."""
    value = value_of(param)
    state: TensorState = {}
    for key, item in saved.items():
        if item is None:
            continue
        array = np.asarray(item)
        if key == "step":
            if array.size != 1 or float(array) != int(array.reshape(())):
                raise RecordError(f"step {item!r} is not a whole number")
            state[key] = int(array.reshape(()))
        else:
            state[key] = np.array(array, dtype=value.dtype.numpy, copy=True)
    config.check_state(state, tuple(value.shape))
    return ParamState(config.name, value.device, state)


class SGD(Optimizer):
    """torch.optim.SGD: momentum, dampening, Nesterov momentum, weight decay, maximize."""

    rule = SgdConfig

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening,
                                  "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize})


class Adam(Optimizer):
    """torch.optim.Adam: bias-corrected moments, L2 weight decay, AMSGrad, maximize."""

    rule = AdamConfig

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, amsgrad: bool = False, *,
                 maximize: bool = False) -> None:
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                                  "amsgrad": amsgrad, "maximize": maximize})


class AdamW(Adam):
    """torch.optim.AdamW: Adam with decoupled weight decay (default 1e-2)."""

    rule = AdamWConfig

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 maximize: bool = False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize)
