"""Schedulers made of schedulers: SequentialLR (one after another at milestones) and ChainedScheduler (all at once)."""
from __future__ import annotations

from bisect import bisect_right
from typing import Any, Sequence

from braze.ir.errors import RecordError

from ..options import OptionError, reject_unknown
from .base import LRScheduler, Scheduled, group_values, scheduled
from .plateau import ReduceLROnPlateau


def _check_members(owner: str, optimizer: Scheduled, schedulers: Sequence[Any]) -> None:
    if len(schedulers) < 1:
        raise OptionError(f"{owner} expects at least one scheduler, but got none")
    for i, s in enumerate(schedulers):
        if not isinstance(s, LRScheduler):
            raise OptionError(f"{owner}: the scheduler at index {i} is a {type(s).__name__}, not an LRScheduler")
        if isinstance(s, ReduceLROnPlateau):
            raise OptionError(f"{owner} does not support ReduceLROnPlateau (its step needs the metric), but got "
                              f"one at index {i}")
        if s.optimizer is not optimizer:
            raise OptionError(f"{owner} expects all schedulers to belong to the same optimizer, but the "
                              f"{type(s).__name__} at index {i} has another")


class _Composite(LRScheduler):
    """The state dict of a composite scheduler holds its members' state dicts under "_schedulers"."""

    _not_saved = ("optimizer", "_schedulers")

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "_schedulers": [s.state_dict() for s in self._schedulers]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict) if isinstance(state_dict, dict) else state_dict
        members = state.pop("_schedulers", None) if isinstance(state, dict) else None
        if not isinstance(members, list) or len(members) != len(self._schedulers):
            raise RecordError(f"{type(self).__name__}.load_state_dict: expected {len(self._schedulers)} scheduler "
                              f"states in '_schedulers'")
        super().load_state_dict(state)
        for s, saved in zip(self._schedulers, members):
            s.load_state_dict(saved)


class SequentialLR(_Composite):
    """Run schedulers[i] from milestones[i - 1] on; each starts from the initial learning rate."""

    def __init__(self, optimizer: Any, schedulers: list[LRScheduler], milestones: list[int], last_epoch: int = -1,
                 **unknown: Any) -> None:
        reject_unknown("SequentialLR", unknown, SequentialLR.__init__)
        optimizer = scheduled("SequentialLR", optimizer)
        _check_members("SequentialLR", optimizer, schedulers)
        if len(milestones) != len(schedulers) - 1:
            raise OptionError(f"SequentialLR expects one milestone fewer than schedulers, but got "
                              f"{len(schedulers)} schedulers and {len(milestones)} milestones")
        self._schedulers, self._milestones = list(schedulers), list(milestones)
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        for s in self._schedulers:  # undo the step each member took when it was made
            _undo_step(s)
        idx = bisect_right(self._milestones, 0)
        self._schedulers[idx]._initial_step()
        self._last_lr = self._schedulers[idx].get_last_lr()

    def step(self) -> None:  # type: ignore[override]
        """Step the scheduler whose span holds the next epoch; at a milestone it restarts from epoch 0."""
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()


def _undo_step(scheduler: LRScheduler) -> None:
    if isinstance(scheduler, _Composite):
        for s in scheduler._schedulers:
            _undo_step(s)
    else:
        scheduler.last_epoch -= 1


class ChainedScheduler(_Composite):
    """Step every scheduler in turn on each step, so their factors compose."""

    def __init__(self, schedulers: Sequence[LRScheduler], optimizer: Any = None, **unknown: Any) -> None:
        reject_unknown("ChainedScheduler", unknown, ChainedScheduler.__init__)
        if len(schedulers) < 1:
            raise OptionError("ChainedScheduler expects at least one scheduler to be chained, but got none")
        optimizer = scheduled("ChainedScheduler", optimizer) if optimizer is not None else schedulers[0].optimizer
        _check_members("ChainedScheduler", optimizer, schedulers)
        self._schedulers = list(schedulers)
        self.optimizer = optimizer
        self._last_lr = group_values(optimizer, "lr")

    def step(self) -> None:  # type: ignore[override]
        """Step every member scheduler."""
        for scheduler in self._schedulers:
            scheduler.step()
        self._last_lr = group_values(self.optimizer, "lr")
