"""torch.optim's optimizers over parameter lists, with torch's constructor signatures and defaults.

    opt = braze.optim.Adam(model.parameters(), lr=1e-3)
    opt.zero_grad(); loss.backward(); opt.step()

Each class names its per-tensor rule and passes its options to the Optimizer base as the group defaults.
foreach and fused only choose torch's kernels: braze always runs the single-tensor rule, whose numerics are
torch's foreach=False path; capturable and differentiable must stay False. An option torch does not have raises
OptionError listing the valid ones.
"""
from __future__ import annotations

from typing import Any, Iterable

from .optimizer import Optimizer
from .options import reject_unknown
from .rules import (AdadeltaConfig, AdagradConfig, AdamaxConfig, AdamConfig, AdamWConfig, NAdamConfig, RAdamConfig,
                    RmsPropConfig, SgdConfig)

Betas = tuple[float, float]


class SGD(Optimizer):
    """torch.optim.SGD: momentum, dampening, Nesterov momentum, weight decay, maximize."""

    rule = SgdConfig

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, differentiable: bool = False, fused: bool | None = None,
                 **unknown: Any) -> None:
        reject_unknown("SGD", unknown, SGD.__init__)
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": dampening,
                                  "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize,
                                  "foreach": foreach, "differentiable": differentiable, "fused": fused})


class Adam(Optimizer):
    """torch.optim.Adam: bias-corrected moments, L2 or decoupled weight decay, AMSGrad, maximize."""

    rule = AdamConfig

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: Betas = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False,
                 fused: bool | None = None, decoupled_weight_decay: bool = False, **unknown: Any) -> None:
        reject_unknown(type(self).__name__, unknown, type(self).__init__)
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "amsgrad": amsgrad, "maximize": maximize, "foreach": foreach,
                                  "capturable": capturable, "differentiable": differentiable, "fused": fused,
                                  "decoupled_weight_decay": decoupled_weight_decay})


class AdamW(Adam):
    """torch.optim.AdamW: Adam with decoupled weight decay (default 1e-2)."""

    rule = AdamWConfig

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: Betas = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, capturable: bool = False, differentiable: bool = False,
                 fused: bool | None = None, **unknown: Any) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True, **unknown)

    def _loaded_group(self, group: dict[str, Any]) -> dict[str, Any]:
        return {**group, "decoupled_weight_decay": True}  # as torch: AdamW's decay is always decoupled


class RMSprop(Optimizer):
    """torch.optim.RMSprop: running mean square (alpha), centered, momentum, weight decay, maximize."""

    rule = RmsPropConfig

    def __init__(self, params: Iterable[Any], lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False, capturable: bool = False,
                 foreach: bool | None = None, maximize: bool = False, differentiable: bool = False,
                 **unknown: Any) -> None:
        reject_unknown("RMSprop", unknown, RMSprop.__init__)
        super().__init__(params, {"lr": lr, "momentum": momentum, "alpha": alpha, "eps": eps, "centered": centered,
                                  "weight_decay": weight_decay, "capturable": capturable, "foreach": foreach,
                                  "maximize": maximize, "differentiable": differentiable})


class Adagrad(Optimizer):
    """torch.optim.Adagrad: lr_decay, weight decay, initial_accumulator_value, maximize; state made eagerly."""

    rule = AdagradConfig

    def __init__(self, params: Iterable[Any], lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10, foreach: bool | None = None, *,
                 maximize: bool = False, differentiable: bool = False, fused: bool | None = None,
                 **unknown: Any) -> None:
        reject_unknown("Adagrad", unknown, Adagrad.__init__)
        super().__init__(params, {"lr": lr, "lr_decay": lr_decay, "eps": eps, "weight_decay": weight_decay,
                                  "initial_accumulator_value": initial_accumulator_value, "foreach": foreach,
                                  "maximize": maximize, "differentiable": differentiable, "fused": fused})


class Adadelta(Optimizer):
    """torch.optim.Adadelta: running averages of squared gradients and updates (rho), lr 1.0 by default."""

    rule = AdadeltaConfig

    def __init__(self, params: Iterable[Any], lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0.0, foreach: bool | None = None, *, capturable: bool = False,
                 maximize: bool = False, differentiable: bool = False, **unknown: Any) -> None:
        reject_unknown("Adadelta", unknown, Adadelta.__init__)
        super().__init__(params, {"lr": lr, "rho": rho, "eps": eps, "weight_decay": weight_decay,
                                  "maximize": maximize, "capturable": capturable, "foreach": foreach,
                                  "differentiable": differentiable})


class Adamax(Optimizer):
    """torch.optim.Adamax: Adam with an infinity-norm second moment."""

    rule = AdamaxConfig

    def __init__(self, params: Iterable[Any], lr: float = 2e-3, betas: Betas = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, foreach: bool | None = None, *, maximize: bool = False,
                 differentiable: bool = False, capturable: bool = False, **unknown: Any) -> None:
        reject_unknown("Adamax", unknown, Adamax.__init__)
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "foreach": foreach, "maximize": maximize, "differentiable": differentiable,
                                  "capturable": capturable})


class NAdam(Optimizer):
    """torch.optim.NAdam: Nesterov-accelerated Adam with momentum_decay and optional decoupled weight decay."""

    rule = NAdamConfig

    def __init__(self, params: Iterable[Any], lr: float = 2e-3, betas: Betas = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum_decay: float = 4e-3, decoupled_weight_decay: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, **unknown: Any) -> None:
        reject_unknown("NAdam", unknown, NAdam.__init__)
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "momentum_decay": momentum_decay, "decoupled_weight_decay": decoupled_weight_decay,
                                  "maximize": maximize, "foreach": foreach, "capturable": capturable,
                                  "differentiable": differentiable})


class RAdam(Optimizer):
    """torch.optim.RAdam: rectified Adam with optional decoupled weight decay."""

    rule = RAdamConfig

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: Betas = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, decoupled_weight_decay: bool = False, *, foreach: bool | None = None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False,
                 **unknown: Any) -> None:
        reject_unknown("RAdam", unknown, RAdam.__init__)
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "maximize": maximize, "foreach": foreach, "capturable": capturable,
                                  "decoupled_weight_decay": decoupled_weight_decay,
                                  "differentiable": differentiable})
