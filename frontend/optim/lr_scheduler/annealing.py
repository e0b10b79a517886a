"""Cosine schedules: CosineAnnealingLR and CosineAnnealingWarmRestarts (torch.optim.lr_scheduler, same forms)."""
from __future__ import annotations

import math
from typing import Any

from ..options import OptionError, reject_unknown
from .base import LRScheduler, group_values


class CosineAnnealingLR(LRScheduler):
    """Anneal from the initial learning rate to eta_min along a cosine of period 2 * T_max (torch's recursion)."""

    def __init__(self, optimizer: Any, T_max: int, eta_min: float = 0.0, last_epoch: int = -1,  # noqa: N803
                 **unknown: Any) -> None:
        reject_unknown("CosineAnnealingLR", unknown, CosineAnnealingLR.__init__)
        if isinstance(T_max, bool) or not isinstance(T_max, (int, float)) or not T_max > 0:
            raise OptionError(f"CosineAnnealingLR: T_max must be a positive number of epochs, got {T_max!r}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        self._warn_outside_step()
        groups = self.optimizer.param_groups
        if self._is_initial:
            return group_values(self.optimizer, "lr")
        if self._step_count == 1 and self.last_epoch > 0:
            return [self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(self.last_epoch * math.pi / self.T_max)) / 2
                    for base_lr in self.base_lrs]
        if (self.last_epoch - 1 - self.T_max) % (2 * self.T_max) == 0:
            return [group["lr"] + (base_lr - self.eta_min) * (1 - math.cos(math.pi / self.T_max)) / 2
                    for base_lr, group in zip(self.base_lrs, groups)]
        return [(1 + math.cos(math.pi * self.last_epoch / self.T_max))
                / (1 + math.cos(math.pi * (self.last_epoch - 1) / self.T_max)) * (group["lr"] - self.eta_min)
                + self.eta_min for group in groups]

    def _closed_form_lr(self) -> list[float]:
        return [self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base_lr in self.base_lrs]


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing restarted every T_i epochs, T_i starting at T_0 and multiplied by T_mult at each restart."""

    def __init__(self, optimizer: Any, T_0: int, T_mult: int = 1, eta_min: float = 0.0,  # noqa: N803
                 last_epoch: int = -1, **unknown: Any) -> None:
        reject_unknown("CosineAnnealingWarmRestarts", unknown, CosineAnnealingWarmRestarts.__init__)
        if isinstance(T_0, bool) or not isinstance(T_0, int) or T_0 <= 0:
            raise OptionError(f"CosineAnnealingWarmRestarts: expected a positive integer T_0, but got {T_0!r}")
        if isinstance(T_mult, bool) or not isinstance(T_mult, int) or T_mult < 1:
            raise OptionError(f"CosineAnnealingWarmRestarts: expected an integer T_mult >= 1, but got {T_mult!r}")
        if isinstance(eta_min, bool) or not isinstance(eta_min, (float, int)):
            raise OptionError(f"CosineAnnealingWarmRestarts: expected a float or int eta_min, but got {eta_min!r}")
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        self._warn_outside_step()
        return [self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
                for base_lr in self.base_lrs]

    def step(self, epoch: float | None = None) -> None:
        """Advance one epoch, or go to the (possibly fractional) `epoch` within the restart cycles."""
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur = self.T_cur + 1
            if self.T_cur >= self.T_i:
                self.T_cur = self.T_cur % self.T_i
                self.T_i = self.T_i * self.T_mult
        else:
            self._jump(epoch)
        self.last_epoch = math.floor(epoch)
        self._get_lr_called_within_step = True
        try:
            values = self.get_lr()
        finally:
            self._get_lr_called_within_step = False
        self._set_lrs(values)

    def _jump(self, epoch: float) -> None:
        """Set T_cur and T_i for `epoch` epochs since the start."""
        if epoch < 0:
            raise OptionError(f"CosineAnnealingWarmRestarts: expected a non-negative epoch, but got {epoch}")
        if epoch < self.T_0:
            self.T_i, self.T_cur = self.T_0, epoch
        elif self.T_mult == 1:
            self.T_cur = epoch % self.T_0
        else:
            n = int(math.log((epoch / self.T_0 * (self.T_mult - 1) + 1), self.T_mult))
            self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
            self.T_i = self.T_0 * self.T_mult ** n
