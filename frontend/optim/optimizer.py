"""The base of the torch-style optimizers: parameter groups, per-parameter state, zero_grad, step and state dicts.

Each step reads a parameter's `.grad`, builds the group's rule config from the group's hyper-parameters (so editing
`opt.param_groups[i]["lr"]` takes effect, as schedulers expect) and applies it through the same per-tensor rules
and update routine as ModuleOptimizer. state_dict() has torch's layout, {"state": {index: {key: value}},
"param_groups": [{option: value, ..., "params": [index, ...]}]}, and load_state_dict() accepts a torch optimizer's
state dict (tensors are read through __array__; steps and NAdam's momentum product become Python scalars).
"""
from __future__ import annotations

import math
from typing import Any, Callable, ClassVar, Iterable

import numpy as np

from braze.ir.errors import RecordError

from ..autodiff import enable_grad
from ..creation import zeros_like
from ..nn.param import Param
from ..tensor import Tensor
from .options import OptionError, check_group_keys, check_switches
from .rules import OptimizerConfig, TensorState
from .state import ParamState, update, value_of

Parameter = Param | Tensor


class Optimizer:
    """Base of the torch-style optimizers: parameter groups, per-parameter state, zero_grad, state_dict."""

    rule: ClassVar[type[OptimizerConfig]]

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        check_switches(type(self).__name__, defaults)
        self._check_options(defaults)
        self.defaults = defaults
        self.param_groups: list[dict[str, Any]] = []
        self._states: dict[int, ParamState] = {}
        self._opt_called = False  # whether step() ran, for the schedulers' order warning
        for group in self._groups_of(params):
            self.add_param_group(group)
        self._create_initial_states()

    def _groups_of(self, params: Iterable[Any]) -> list[dict[str, Any]]:
        if isinstance(params, (Param, Tensor, set)):
            raise OptionError(f"{type(self).__name__}: params must be an ordered iterable of parameters or of "
                              f"parameter-group dicts, got a {type(params).__name__}")
        items = list(params)
        if not items:
            raise OptionError(f"{type(self).__name__}: got an empty parameter list")
        return items if isinstance(items[0], dict) else [{"params": items}]

    def _create_initial_states(self) -> None:
        """The states a rule creates before the first step (torch's Adagrad), for the parameters given now."""
        if not self.rule.eager_state:
            return
        for group in self.param_groups:
            config = self._config_of(group)
            for p in group["params"]:
                value = value_of(p)
                self._states[id(p)] = ParamState(config.name, value.device, config.initial_state(np.asarray(value)))

    def _check_options(self, group: dict[str, Any]) -> OptimizerConfig:
        """The group's rule config; OptionError unless its learning rate and hyper-parameters are valid."""
        lr = group["lr"]
        if isinstance(lr, bool) or not isinstance(lr, (int, float, np.floating, np.integer)) or not lr >= 0.0:
            raise OptionError(f"{type(self).__name__}: invalid learning rate {lr!r} (must be a number >= 0)")
        return self._config_of(group)

    def _config_of(self, group: dict[str, Any]) -> OptimizerConfig:
        return self.rule(**{k: group[k] for k in self.rule.option_names()})

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group: a dict with "params" and optional hyper-parameters (the defaults fill the rest)."""
        name = type(self).__name__
        if not isinstance(param_group, dict) or "params" not in param_group:
            raise OptionError(f"{name}: a parameter group must be a dict with 'params', got {param_group!r:.80}")
        check_group_keys(name, param_group, self.defaults)
        params, names = self._parameters_of(param_group["params"])
        ids = {id(p) for p in params}
        if len(ids) != len(params):
            raise OptionError(f"{name}: a parameter group holds the same parameter more than once")
        if ids & {id(p) for g in self.param_groups for p in g["params"]}:
            raise OptionError(f"{name}: some parameters appear in more than one parameter group")
        full = {**self.defaults, **{k: v for k, v in param_group.items() if k != "params"}, "params": params}
        if names:
            full["param_names"] = names
        self._check_options(full)
        check_switches(name, full)
        self.param_groups.append(full)

    def _parameters_of(self, params: Any) -> tuple[list[Parameter], list[str]]:
        """The parameters of a group, and their names when given as (name, parameter) pairs as torch allows."""
        if isinstance(params, set):
            raise OptionError(f"{type(self).__name__}: parameters must be in an ordered collection, not a set")
        items = [params] if isinstance(params, (Param, Tensor)) else list(params)
        named = [isinstance(p, tuple) and len(p) == 2 for p in items]
        if any(named) and not all(named):
            raise OptionError(f"{type(self).__name__}: give every parameter of a group with a name, or none")
        names = [str(p[0]) for p in items] if any(named) else []
        tensors = [p[1] for p in items] if any(named) else items
        for p in tensors:
            self._check_parameter(p)
        return tensors, names

    def _check_parameter(self, p: Any) -> None:
        name = type(self).__name__
        if not isinstance(p, (Param, Tensor)):
            raise OptionError(f"{name}: can only optimize Params and Tensors, got {type(p).__name__}")
        if isinstance(p, Tensor) and not p.is_leaf:
            raise OptionError(f"{name}: can't optimize a non-leaf Tensor")
        if not value_of(p).dtype.is_float:
            raise OptionError(f"{name}: can only optimize floating-point parameters, got {value_of(p).dtype}")

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
        self._opt_called = True
        for g, group in enumerate(self.param_groups):
            config, lr = self._check_options(group), float(group["lr"])
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
        """Restore hyper-parameters and state saved by state_dict() or torch (arrays may be any __array__ objects).

        Nothing changes unless the whole state dict applies."""
        name = f"{type(self).__name__}.load_state_dict"
        if not isinstance(state_dict, dict) or not isinstance(state_dict.get("state"), dict) \
                or not isinstance(state_dict.get("param_groups"), list):
            raise RecordError(f"{name}: expected a dict with a 'state' dict and a 'param_groups' list")
        saved = state_dict["param_groups"]
        if any(not isinstance(s, dict) or not isinstance(s.get("params"), list) for s in saved) \
                or len(saved) != len(self.param_groups) \
                or any(len(s["params"]) != len(g["params"]) for s, g in zip(saved, self.param_groups)):
            raise RecordError(f"{name}: the saved groups have sizes "
                              f"{[len(s['params']) if isinstance(s, dict) else s for s in saved]!r:.200}, "
                              f"this optimizer's {[len(g['params']) for g in self.param_groups]}")
        groups = []
        for s, g in zip(saved, self.param_groups):
            check_group_keys(name, s, self.defaults)
            group = {**g, **{k: v for k, v in s.items() if k != "params"}, "params": g["params"]}
            self._check_options(group)
            groups.append(self._loaded_group(group))
        self._states = self._loaded_states(name, groups, saved, state_dict["state"])
        self.param_groups = groups

    def _loaded_group(self, group: dict[str, Any]) -> dict[str, Any]:
        """A group as loaded from a state dict (a hook for options an optimizer fixes, as AdamW's decay)."""
        return group

    def _loaded_states(self, name: str, groups: list[dict[str, Any]], saved: list[dict[str, Any]],
                       state: dict[Any, Any]) -> dict[int, ParamState]:
        states: dict[int, ParamState] = {}
        problems = []
        for group, saved_group in zip(groups, saved):
            config = self._config_of(group)
            for index, p in zip(saved_group["params"], group["params"]):
                if index not in state:
                    continue
                try:
                    states[id(p)] = _restored(config, p, state[index])
                except (RecordError, TypeError, ValueError, AttributeError) as err:
                    problems.append(f"state {index!r:.40}: {err}")
        if problems:
            raise RecordError(f"{name}:\n  " + "\n  ".join(problems))
        return states

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {group[k]}" for k in sorted(group) if k != "params"]
        return "\n".join(lines + [")"])


def _restored(config: OptimizerConfig, param: Parameter, saved: dict[str, Any]) -> ParamState:
    """A parameter's state from a state dict: scalars as the rule's Python types, arrays in the parameter's dtype."""
    if not isinstance(saved, dict):
        raise RecordError(f"expected a dict of state entries, got {type(saved).__name__}")
    value = value_of(param)
    scalars = dict(config.state_layout().scalars)
    state: TensorState = {}
    for key, item in saved.items():
        if item is None:  # torch's SGD keeps momentum_buffer = None without momentum
            continue
        array = np.asarray(item)
        if key in scalars:
            if array.size != 1:
                raise RecordError(f"{key} {item!r:.40} is not a scalar")
            number = array.reshape(()).item()
            if scalars[key] is int and not (isinstance(number, (int, float)) and math.isfinite(number)
                                            and number == int(number)):
                raise RecordError(f"{key} {item!r:.40} is not a whole number")
            state[key] = scalars[key](number)
        else:
            state[key] = np.array(array, dtype=value.dtype.numpy, copy=True)
    config.check_state(state, tuple(value.shape))
    return ParamState(config.name, value.device, state)
