"""Schedulers that scale the learning rate by a factor per step: LambdaLR, MultiplicativeLR, StepLR, MultiStepLR,
ConstantLR, LinearLR, ExponentialLR and PolynomialLR (torch.optim.lr_scheduler, same recursive and closed forms)."""
from __future__ import annotations

import types
from bisect import bisect_right
from collections import Counter
from typing import Any, Callable, Iterable

from ..options import OptionError, reject_unknown
from .base import LRScheduler, group_values, scheduled


def _lambdas(owner: str, optimizer: Any, lr_lambda: Any) -> list[Callable[[int], float]]:
    """One multiplier function per parameter group: a list as given, or one function repeated."""
    groups = scheduled(owner, optimizer).param_groups
    lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * len(groups)
    if len(lambdas) != len(groups):
        raise OptionError(f"{owner}: expected {len(groups)} lr_lambdas, but got {len(lambdas)}")
    for fn in lambdas:
        if not callable(fn):
            raise OptionError(f"{owner}: lr_lambda should be a function, but got {type(fn).__name__}")
    return lambdas


class _LambdaScheduler(LRScheduler):
    """Shared by LambdaLR and MultiplicativeLR: one function per group; in the state dict the functions are not
    saved, callable objects' attributes are."""

    _not_saved = ("optimizer", "lr_lambdas")

    def __init__(self, optimizer: Any, lr_lambda: Callable[[int], float] | list[Callable[[int], float]],
                 last_epoch: int = -1, **unknown: Any) -> None:
        reject_unknown(type(self).__name__, unknown, type(self).__init__)
        self.lr_lambdas = _lambdas(type(self).__name__, optimizer, lr_lambda)
        super().__init__(optimizer, last_epoch)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["lr_lambdas"] = [None if isinstance(fn, types.FunctionType) else fn.__dict__.copy()
                               for fn in self.lr_lambdas]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict) if isinstance(state_dict, dict) else state_dict
        saved = state.pop("lr_lambdas", None) if isinstance(state, dict) else None
        super().load_state_dict(state)
        for fn, attributes in zip(self.lr_lambdas, saved or []):
            if attributes is not None:
                fn.__dict__.update(attributes)


class LambdaLR(_LambdaScheduler):
    """The initial learning rate times lr_lambda(epoch)."""

    def get_lr(self) -> list[float]:
        self._warn_outside_step()
        return [base_lr * lmbda(self.last_epoch) for lmbda, base_lr in zip(self.lr_lambdas, self.base_lrs)]


class MultiplicativeLR(_LambdaScheduler):
    """The previous learning rate times lr_lambda(epoch)."""

    def get_lr(self) -> list[float]:
        self._warn_outside_step()
        if self._is_initial:
            return group_values(self.optimizer, "lr")
        return [group["lr"] * lmbda(self.last_epoch)
                for lmbda, group in zip(self.lr_lambdas, self.optimizer.param_groups)]


class StepLR(LRScheduler):
    """Decay by gamma every step_size epochs."""

    def __init__(self, optimizer: Any, step_size: int, gamma: float = 0.1, last_epoch: int = -1,
                 **unknown: Any) -> None:
        reject_unknown("StepLR", unknown, StepLR.__init__)
        if isinstance(step_size, bool) or not isinstance(step_size, (int, float)) or not step_size > 0:
            raise OptionError(f"StepLR: step_size must be a positive number of epochs, got {step_size!r}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        self._warn_outside_step()
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return group_values(self.optimizer, "lr")
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]

    def _closed_form_lr(self) -> list[float]:
        return [base_lr * self.gamma ** (self.last_epoch // self.step_size) for base_lr in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Decay by gamma at each milestone epoch (a milestone given twice decays twice)."""

    def __init__(self, optimizer: Any, milestones: Iterable[int], gamma: float = 0.1, last_epoch: int = -1,
                 **unknown: Any) -> None:
        reject_unknown("MultiStepLR", unknown, MultiStepLR.__init__)
        self.milestones = Counter(milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        self._warn_outside_step()
        if self.last_epoch not in self.milestones:
            return group_values(self.optimizer, "lr")
        return [group["lr"] * self.gamma ** self.milestones[self.last_epoch] for group in self.optimizer.param_groups]

    def _closed_form_lr(self) -> list[float]:
        milestones = sorted(self.milestones.elements())
        return [base_lr * self.gamma ** bisect_right(milestones, self.last_epoch) for base_lr in self.base_lrs]

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        self.milestones = Counter(self.milestones)


class ConstantLR(LRScheduler):
    """The learning rate times factor until epoch total_iters, then the learning rate itself."""

    def __init__(self, optimizer: Any, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1,
                 **unknown: Any) -> None:
        reject_unknown("ConstantLR", unknown, ConstantLR.__init__)
        if factor > 1.0 or factor < 0:
            raise OptionError(f"ConstantLR: factor must be between 0 and 1, got {factor}")
        self.factor, self.total_iters = factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        self._warn_outside_step()
        if self.last_epoch == 0:
            return [group["lr"] * self.factor for group in self.optimizer.param_groups]
        if self.last_epoch != self.total_iters:
            return group_values(self.optimizer, "lr")
        return [group["lr"] * (1.0 / self.factor) for group in self.optimizer.param_groups]

    def _closed_form_lr(self) -> list[float]:
        return [base_lr * (self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor))
                for base_lr in self.base_lrs]


class LinearLR(LRScheduler):
    """A factor moving linearly from start_factor to end_factor over total_iters epochs."""

    def __init__(self, optimizer: Any, start_factor: float = 1.0 / 3, end_factor: float = 1.0, total_iters: int = 5,
                 last_epoch: int = -1, **unknown: Any) -> None:
        reject_unknown("LinearLR", unknown, LinearLR.__init__)
        if start_factor > 1.0 or start_factor <= 0:
            raise OptionError(f"LinearLR: start_factor must be in (0, 1], got {start_factor}")
        if end_factor > 1.0 or end_factor < 0:
            raise OptionError(f"LinearLR: end_factor must be in [0, 1], got {end_factor}")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        self._warn_outside_step()
        if self.last_epoch == 0:
            return [group["lr"] * self.start_factor for group in self.optimizer.param_groups]
        if self._is_initial or self.last_epoch > self.total_iters:
            return group_values(self.optimizer, "lr")
        change = self.end_factor - self.start_factor
        factor = 1.0 + change / (self.total_iters * self.start_factor + (self.last_epoch - 1) * change)
        return [group["lr"] * factor for group in self.optimizer.param_groups]

    def _closed_form_lr(self) -> list[float]:
        return [base_lr * (self.start_factor + (self.end_factor - self.start_factor)
                           * min(self.total_iters, self.last_epoch) / self.total_iters) for base_lr in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Decay by gamma every epoch."""

    def __init__(self, optimizer: Any, gamma: float, last_epoch: int = -1, **unknown: Any) -> None:
        reject_unknown("ExponentialLR", unknown, ExponentialLR.__init__)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        self._warn_outside_step()
        if self._is_initial:
            return group_values(self.optimizer, "lr")
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]

    def _closed_form_lr(self) -> list[float]:
        return [base_lr * self.gamma ** self.last_epoch for base_lr in self.base_lrs]


class PolynomialLR(LRScheduler):
    """Decay to zero over total_iters epochs as (1 - epoch / total_iters) ** power."""

    def __init__(self, optimizer: Any, total_iters: int = 5, power: float = 1.0, last_epoch: int = -1,
                 **unknown: Any) -> None:
        reject_unknown("PolynomialLR", unknown, PolynomialLR.__init__)
        self.total_iters, self.power = total_iters, power
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        self._warn_outside_step()
        if self._is_initial or self.last_epoch > self.total_iters:
            return group_values(self.optimizer, "lr")
        decay_factor = ((1.0 - self.last_epoch / self.total_iters)
                        / (1.0 - (self.last_epoch - 1) / self.total_iters)) ** self.power
        return [group["lr"] * decay_factor for group in self.optimizer.param_groups]

    def _closed_form_lr(self) -> list[float]:
        return [base_lr * (1.0 - min(self.total_iters, self.last_epoch) / self.total_iters) ** self.power
                for base_lr in self.base_lrs]
