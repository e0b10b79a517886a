"""Cyclical schedules that may also cycle momentum: CyclicLR and OneCycleLR (torch.optim.lr_scheduler, same forms).

Momentum cycling writes the optimizer's "momentum" (or beta1 of "betas") in each group, as torch does; it needs
an optimizer with one of them, so a schedule over bare LearningRates passes cycle_momentum=False.
"""
from __future__ import annotations

import math
import types
from typing import Any, Callable, Literal

from ..options import OptionError, reject_unknown
from .base import LRScheduler, Scheduled, format_param, scheduled


def _momentum_key(owner: str, optimizer: Scheduled) -> bool:
    """Whether momentum cycling writes beta1 (True) or "momentum" (False); OptionError if there is neither."""
    defaults = getattr(optimizer, "defaults", {})
    if "momentum" not in defaults and "betas" not in defaults:
        raise OptionError(f"{owner}: optimizer must support momentum or beta1 with `cycle_momentum` option enabled "
                          f"(pass cycle_momentum=False to schedule only the learning rate)")
    return "betas" in defaults


def _set_momentum(group: dict[str, Any], momentum: float, use_beta1: bool) -> None:
    if use_beta1:
        group["betas"] = (momentum, *group["betas"][1:])
    else:
        group["momentum"] = momentum


def _set_momentum_range(optimizer: Scheduled, use_beta1: bool, max_momentums: list[float],
                        base_momentums: list[float]) -> None:
    """Start every group at its max momentum and record both ends of the range in the group, as torch does."""
    for m_momentum, b_momentum, group in zip(max_momentums, base_momentums, optimizer.param_groups):
        _set_momentum(group, m_momentum, use_beta1)
        group["max_momentum"], group["base_momentum"] = m_momentum, b_momentum


class CyclicLR(LRScheduler):
    """Cycle between base_lr and max_lr (triangular, triangular2, exp_range or a custom scale_fn), per batch."""

    def __init__(self, optimizer: Any, base_lr: float | list[float], max_lr: float | list[float],
                 step_size_up: int = 2000, step_size_down: int | None = None,
                 mode: Literal["triangular", "triangular2", "exp_range"] = "triangular", gamma: float = 1.0,
                 scale_fn: Callable[[float], float] | None = None, scale_mode: Literal["cycle", "iterations"] = "cycle",
                 cycle_momentum: bool = True, base_momentum: float = 0.8, max_momentum: float = 0.9,
                 last_epoch: int = -1, **unknown: Any) -> None:
        reject_unknown("CyclicLR", unknown, CyclicLR.__init__)
        optimizer = scheduled("CyclicLR", optimizer)
        base_lrs = format_param("base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for lr, group in zip(base_lrs, optimizer.param_groups):
                group["lr"] = lr
        self.max_lrs = format_param("max_lr", optimizer, max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        if not up + down > 0:
            raise OptionError(f"CyclicLR: step_size_up + step_size_down must be positive, got {up} + {down}")
        self.total_size = up + down
        self.step_ratio = up / self.total_size
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise OptionError(f"CyclicLR: mode {mode!r} is invalid and scale_fn is None; valid modes: "
                              f"'triangular', 'triangular2', 'exp_range'")
        if scale_mode not in ("cycle", "iterations"):
            raise OptionError(f"CyclicLR: scale_mode {scale_mode!r} is invalid; valid: 'cycle', 'iterations'")
        self.mode, self.gamma, self._scale_fn_custom, self.scale_mode = mode, gamma, scale_fn, scale_mode
        self._init_scale_fn()
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self.use_beta1 = _momentum_key("CyclicLR", optimizer)
            self.base_momentums = format_param("base_momentum", optimizer, base_momentum)
            self.max_momentums = format_param("max_momentum", optimizer, max_momentum)
            if last_epoch == -1:
                _set_momentum_range(optimizer, self.use_beta1, self.max_momentums, self.base_momentums)
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def _init_scale_fn(self) -> None:
        """The built-in scale function of the mode (and its scale mode), unless a custom one was given."""
        if self._scale_fn_custom is None and self.mode in ("triangular", "triangular2"):
            self.scale_mode = "cycle"
        elif self._scale_fn_custom is None:
            self.scale_mode = "iterations"

    def scale_fn(self, x: float) -> float:
        """The amplitude scale at cycle (or iteration) x."""
        if self._scale_fn_custom is not None:
            return self._scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma ** x

    def get_lr(self) -> list[float]:
        self._warn_outside_step()
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        scale_factor = x / self.step_ratio if x <= self.step_ratio else (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else self.last_epoch)
        lrs = [base_lr + (max_lr - base_lr) * scale_factor * scale for base_lr, max_lr in zip(self.base_lrs,
                                                                                                self.max_lrs)]
        if self.cycle_momentum:
            for base_m, max_m, group in zip(self.base_momentums, self.max_momentums, self.optimizer.param_groups):
                _set_momentum(group, max_m - (max_m - base_m) * scale_factor * scale, self.use_beta1)
        return lrs

    _not_saved = ("optimizer", "_scale_fn_custom")

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        fn = self._scale_fn_custom
        state["_scale_fn_custom"] = None if fn is None or isinstance(fn, types.FunctionType) else fn.__dict__.copy()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict) if isinstance(state_dict, dict) else state_dict
        saved = state.pop("_scale_fn_custom", None) if isinstance(state, dict) else None
        super().load_state_dict(state)
        if saved is not None and self._scale_fn_custom is not None:
            self._scale_fn_custom.__dict__.update(saved)
        self._init_scale_fn()


def _phases(total_steps: int, pct_start: float, three_phase: bool) -> list[dict[str, Any]]:
    """OneCycleLR's phases: the last step of each and the group keys its lr and momentum run between."""
    up = float(pct_start * total_steps) - 1
    if three_phase:
        return [{"end_step": up, "start_lr": "initial_lr", "end_lr": "max_lr",
                 "start_momentum": "max_momentum", "end_momentum": "base_momentum"},
                {"end_step": float(2 * pct_start * total_steps) - 2, "start_lr": "max_lr", "end_lr": "initial_lr",
                 "start_momentum": "base_momentum", "end_momentum": "max_momentum"},
                {"end_step": total_steps - 1, "start_lr": "initial_lr", "end_lr": "min_lr",
                 "start_momentum": "max_momentum", "end_momentum": "max_momentum"}]
    return [{"end_step": up, "start_lr": "initial_lr", "end_lr": "max_lr",
             "start_momentum": "max_momentum", "end_momentum": "base_momentum"},
            {"end_step": total_steps - 1, "start_lr": "max_lr", "end_lr": "min_lr",
             "start_momentum": "base_momentum", "end_momentum": "max_momentum"}]


def _positive_int(owner: str, name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise OptionError(f"{owner}: expected a positive integer {name}, but got {value!r}")
    return value


class OneCycleLR(LRScheduler):
    """The 1cycle policy: warm up to max_lr, then anneal far below the initial rate, over total_steps batches."""

    def __init__(self, optimizer: Any, max_lr: float | list[float], total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None, pct_start: float = 0.3,
                 anneal_strategy: Literal["cos", "linear"] = "cos", cycle_momentum: bool = True,
                 base_momentum: float | list[float] = 0.85, max_momentum: float | list[float] = 0.95,
                 div_factor: float = 25.0, final_div_factor: float = 1e4, three_phase: bool = False,
                 last_epoch: int = -1, **unknown: Any) -> None:
        reject_unknown("OneCycleLR", unknown, OneCycleLR.__init__)
        optimizer = scheduled("OneCycleLR", optimizer)
        if total_steps is not None:
            self.total_steps = _positive_int("OneCycleLR", "total_steps", total_steps)
        elif epochs is not None and steps_per_epoch is not None:
            self.total_steps = (_positive_int("OneCycleLR", "epochs", epochs)
                                * _positive_int("OneCycleLR", "steps_per_epoch", steps_per_epoch))
        else:
            raise OptionError("OneCycleLR: you must define either total_steps OR (epochs AND steps_per_epoch)")
        self._schedule_phases = _phases(self.total_steps, pct_start, three_phase)
        if not isinstance(pct_start, float) or not 0 <= pct_start <= 1:
            raise OptionError(f"OneCycleLR: expected a float between 0 and 1 pct_start, but got {pct_start!r}")
        if anneal_strategy not in ("cos", "linear"):
            raise OptionError(f"OneCycleLR: anneal_strategy must be one of 'cos' or 'linear', instead got "
                              f"{anneal_strategy!r}")
        self._anneal_func_type = anneal_strategy
        max_lrs = format_param("max_lr", optimizer, max_lr)
        if last_epoch == -1:
            for group, top in zip(optimizer.param_groups, max_lrs):
                group["initial_lr"] = top / div_factor
                group["max_lr"] = top
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self.use_beta1 = _momentum_key("OneCycleLR", optimizer)
            if last_epoch == -1:
                _set_momentum_range(optimizer, self.use_beta1, format_param("max_momentum", optimizer, max_momentum),
                                    format_param("base_momentum", optimizer, base_momentum))
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list[float]:
        self._warn_outside_step()
        step_num = self.last_epoch
        if step_num > self.total_steps:
            raise OptionError(f"OneCycleLR: tried to step {step_num} times. The specified number of total steps is "
                              f"{self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start_step = 0.0
            for i, phase in enumerate(self._schedule_phases):
                end_step = phase["end_step"]
                if step_num <= end_step or i == len(self._schedule_phases) - 1:
                    pct = (step_num - start_step) / (end_step - start_step)
                    lrs.append(self._anneal(group[phase["start_lr"]], group[phase["end_lr"]], pct))
                    if self.cycle_momentum:
                        _set_momentum(group, self._anneal(group[phase["start_momentum"]],
                                                          group[phase["end_momentum"]], pct), self.use_beta1)
                    break
                start_step = phase["end_step"]
        return lrs
