"""LRScheduler, the base of torch's learning-rate schedulers, and LearningRates, a schedule without an optimizer.

A scheduler drives the "lr" of its optimizer's parameter groups. Like torch's, it runs one step at construction
(last_epoch becomes 0), `step()` advances it, `get_last_lr()` returns the rates it set, and its attributes carry
torch's names, so `state_dict()` holds the same entries as torch's. The schedulers compute in Python floats
with torch's recursive forms (and its closed forms for `step(epoch)`), term by term, so the sequences are equal.

ModuleOptimizer takes the learning rate per call, `optim.step(lr, model, grads)`. To schedule it, give the
scheduler the starting rate instead of an optimizer (or a LearningRates holding several) and pass its rate on:

    sched = lr_scheduler.CosineAnnealingLR(0.1, T_max=100)
    for batch in data:
        model = optim.step(sched.get_last_lr()[0], model, grads_of(batch))
        sched.step()
"""
from __future__ import annotations

import warnings
from typing import Any, Iterable

from braze.ir.errors import RecordError

from ..optimizer import Optimizer
from ..options import OptionError

EPOCH_DEPRECATION_WARNING = (
    "The epoch parameter in `scheduler.step()` was not necessary and is being deprecated where possible. Please "
    "use `scheduler.step()` to step the scheduler. During the deprecation, if epoch is different from None, the "
    "closed form is used instead of the new chainable form, where available.")


class LearningRates:
    """The parameter groups of a schedule without a torch-style optimizer: one {"lr": rate} per learning rate."""

    def __init__(self, lr: float | Iterable[float]) -> None:
        rates = [lr] if isinstance(lr, (int, float)) else list(lr)
        if not rates or any(isinstance(r, bool) or not isinstance(r, (int, float)) or not r >= 0 for r in rates):
            raise OptionError(f"LearningRates: expected learning rates >= 0, got {lr!r:.80}")
        self.param_groups: list[dict[str, Any]] = [{"lr": float(r)} for r in rates]
        self.defaults: dict[str, Any] = {"lr": self.param_groups[0]["lr"]}
        self._opt_called = True  # the rate is used by whoever reads it; there is no step to miss

    def __repr__(self) -> str:
        return f"LearningRates({[g['lr'] for g in self.param_groups]})"


Scheduled = Optimizer | LearningRates


def scheduled(owner: str, optimizer: Any) -> Scheduled:
    """The optimizer a scheduler drives: an Optimizer, a LearningRates, or learning rates to wrap in one."""
    if isinstance(optimizer, (Optimizer, LearningRates)):
        return optimizer
    if isinstance(optimizer, (int, float, list, tuple)) and not isinstance(optimizer, bool):
        return LearningRates(optimizer)
    raise OptionError(f"{owner}: expected an Optimizer, a LearningRates or learning rates, got "
                      f"{type(optimizer).__name__}")


def format_param(name: str, optimizer: Scheduled, value: Any) -> list[Any]:
    """One value per parameter group: a list of that length as given, or a scalar repeated (torch's _format_param)."""
    if isinstance(value, (list, tuple)):
        if len(value) != len(optimizer.param_groups):
            raise OptionError(f"{name} must have the same length as optimizer.param_groups. {name} has "
                              f"{len(value)} values, param_groups has {len(optimizer.param_groups)}.")
        return list(value)
    return [value] * len(optimizer.param_groups)


def group_values(optimizer: Scheduled, key: str) -> list[Any]:
    """The value of `key` in every parameter group."""
    return [group[key] for group in optimizer.param_groups]


def _kind(value: Any) -> tuple[type, ...]:
    """The types a loaded state entry may have to replace `value`."""
    if isinstance(value, bool):
        return (bool,)
    if isinstance(value, (int, float)):
        return (int, float)
    if isinstance(value, (list, tuple)):
        return (list, tuple)
    if isinstance(value, dict):
        return (dict,)
    return (type(value),) if value is not None else (object,)


class LRScheduler:
    """Base of the learning-rate schedulers (torch.optim.lr_scheduler.LRScheduler)."""

    def __init__(self, optimizer: Any, last_epoch: int = -1) -> None:
        self.optimizer = scheduled(type(self).__name__, optimizer)
        if last_epoch == -1:
            for group in self.optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(self.optimizer.param_groups):
                if "initial_lr" not in group:
                    raise OptionError(f"{type(self).__name__}: param 'initial_lr' is not specified in "
                                      f"param_groups[{i}] when resuming a scheduler with last_epoch >= 0")
        self.base_lrs: list[float] = group_values(self.optimizer, "initial_lr")
        self.last_epoch = last_epoch
        self._get_lr_called_within_step = False
        self._is_initial = False
        self._initial_step()

    def _initial_step(self) -> None:
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list[float]:
        """The learning rates of the current step (torch's recursive form); read them with get_last_lr()."""
        raise NotImplementedError

    def _warn_outside_step(self) -> None:
        """Warn, as torch does, when get_lr() is called other than by step()."""
        if not self._get_lr_called_within_step:
            warnings.warn("To get the last learning rate computed by the scheduler, please use `get_last_lr()`.",
                          UserWarning, stacklevel=3)

    def get_last_lr(self) -> list[float]:
        """The learning rates the last step set, one per parameter group."""
        return self._last_lr

    def step(self, epoch: int | None = None) -> None:
        """Advance one step (or, deprecated as in torch, to `epoch` by the closed form) and set the rates."""
        if self._step_count == 1 and not getattr(self.optimizer, "_opt_called", False):
            warnings.warn("Detected call of `lr_scheduler.step()` before `optimizer.step()`. You should call them in "
                          "the opposite order: `optimizer.step()` before `lr_scheduler.step()`. Failure to do this "
                          "will result in skipping the first value of the learning rate schedule.",
                          UserWarning, stacklevel=2)
        self._step_count += 1
        if epoch is not None:
            warnings.warn(EPOCH_DEPRECATION_WARNING, UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None = None) -> None:
        self._get_lr_called_within_step = True
        try:
            if epoch is None:
                self.last_epoch += 1
                values = self.get_lr()
            else:
                self.last_epoch = epoch
                values = self._closed_form_lr() if hasattr(self, "_closed_form_lr") else self.get_lr()
        finally:
            self._get_lr_called_within_step = False
        self._set_lrs(values)

    def _set_lrs(self, values: list[float]) -> None:
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            group["lr"] = lr
        self._last_lr = group_values(self.optimizer, "lr")

    # --- state dict ----------------------------------------------------------------------------------------
    _not_saved: tuple[str, ...] = ("optimizer",)

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's attributes except the optimizer (torch's entries, by torch's names)."""
        return {k: v for k, v in self.__dict__.items() if k not in self._not_saved}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the attributes saved by state_dict(); an entry this scheduler does not have is refused."""
        self._check_loaded(state_dict, self.state_dict())
        self.__dict__.update(state_dict)

    def _check_loaded(self, state_dict: Any, current: dict[str, Any]) -> None:
        name = f"{type(self).__name__}.load_state_dict"
        if not isinstance(state_dict, dict):
            raise RecordError(f"{name}: expected a dict, got {type(state_dict).__name__}")
        unknown = sorted(str(k) for k in set(state_dict) - set(current))
        if unknown:
            raise RecordError(f"{name}: unknown entries {', '.join(unknown)}; this scheduler saves "
                              f"{', '.join(sorted(current))}")
        for key, value in state_dict.items():
            if not isinstance(value, _kind(current[key])):
                raise RecordError(f"{name}: entry {key!r} is a {type(value).__name__}, expected "
                                  f"{type(current[key]).__name__}")

    def __repr__(self) -> str:
        epoch = f"last_epoch={self.last_epoch}, " if hasattr(self, "last_epoch") else ""
        return f"{type(self).__name__}({epoch}lr={self.get_last_lr()})"
