"""torch.optim's per-tensor update rules, written once against an Emitter: the eager optimizers run them on numpy
arrays (`numpy_step`, through the registry's references) and a compiled training step records them into its graph
(ir/train_step.py), so the two cannot drift apart.

A rule splits torch's step in two, as torch itself does:
- `coefficients(hyper, lr, step)`: the host-side scalar arithmetic (bias corrections, -lr, 1 - beta) in Python
  floats, exactly as torch computes it; a compiled step passes these as rank-0 call inputs, so a scheduler that
  changes lr, betas or momentum needs no recompile.
- `update(e, hyper, c, param, grad, state)`: the tensor arithmetic, term by term in torch's order, where `c` holds
  the coefficients (Python floats eagerly, graph values in a step graph) and `state` the state arrays.
`structure(hyper)` holds the choices the tensor arithmetic branches on (nesterov, maximize, which terms exist); a
compiled step is built for one structure. `hyper` is a mapping of torch's parameter-group keys.
"""
from __future__ import annotations

from typing import Any, ClassVar, Mapping

import numpy as np

from .evaluate import Concrete, NumpyEmitter
from .registry import Emitter

Hyper = Mapping[str, Any]


def signed(e: Emitter, grad: Any, param: Any, maximize: bool) -> Any:
    """The gradient in the parameter's dtype, negated when maximizing."""
    if grad.dtype != param.dtype:
        grad = e.cast(grad, dtype=param.dtype)
    return e.neg(grad) if maximize else grad


def lerp(e: Emitter, start: Any, end: Any, coefficient: Any, high: bool) -> Any:
    """torch.lerp with weight w: start + w * (end - start) below 0.5, else end - (end - start) * (1 - w), which
    keeps the endpoints exact; `coefficient` is w, or 1 - w when `high` (w >= 0.5)."""
    if high:
        return e.sub(end, e.mul(e.sub(end, start), coefficient))
    return e.add(start, e.mul(coefficient, e.sub(end, start)))


class UpdateRule:
    """A per-tensor update rule of torch.optim (see the module doc)."""

    name: ClassVar[str]

    def state_arrays(self, hyper: Hyper) -> tuple[str, ...]:
        """The state arrays kept per parameter, shaped like it (zero before the first step in a compiled step)."""
        raise NotImplementedError

    def structure(self, hyper: Hyper) -> tuple[Any, ...]:
        """The hyper-parameter choices the tensor arithmetic branches on."""
        raise NotImplementedError

    def coefficients(self, hyper: Hyper, lr: float, step: int) -> dict[str, float]:
        """The scalars of step number `step` (1 for the first) at learning rate `lr`."""
        raise NotImplementedError

    def update(self, e: Emitter, hyper: Hyper, c: Mapping[str, Any], param: Any, grad: Any,
               state: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The new parameter and state arrays."""
        raise NotImplementedError


class Sgd(UpdateRule):
    """torch.optim.SGD: momentum, dampening (skipped on the first step), Nesterov, L2 weight decay, maximize."""

    name = "sgd"

    def state_arrays(self, hyper: Hyper) -> tuple[str, ...]:
        return ("momentum_buffer",) if hyper["momentum"] != 0 else ()

    def structure(self, hyper: Hyper) -> tuple[Any, ...]:
        return hyper["momentum"] != 0, hyper["weight_decay"] != 0, bool(hyper["nesterov"]), bool(hyper["maximize"])

    def coefficients(self, hyper: Hyper, lr: float, step: int) -> dict[str, float]:
        # torch's first step copies the gradient into the buffer: from a zero buffer, a gradient scale of 1 does
        return {"neg_lr": -lr, "weight_decay": hyper["weight_decay"], "momentum": hyper["momentum"],
                "dampening_scale": 1.0 if step == 1 else 1 - hyper["dampening"]}

    def update(self, e: Emitter, hyper: Hyper, c: Mapping[str, Any], param: Any, grad: Any,
               state: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        g = signed(e, grad, param, hyper["maximize"])
        if hyper["weight_decay"] != 0:
            g = e.add(g, e.mul(c["weight_decay"], param))
        new_state: dict[str, Any] = {}
        if hyper["momentum"] != 0:
            buf = state.get("momentum_buffer")
            buf = g if buf is None else e.add(e.mul(buf, c["momentum"]), e.mul(c["dampening_scale"], g))
            new_state["momentum_buffer"] = buf
            g = e.add(g, e.mul(c["momentum"], buf)) if hyper["nesterov"] else buf
        return e.add(param, e.mul(c["neg_lr"], g)), new_state


class Adam(UpdateRule):
    """torch.optim.Adam and AdamW: bias-corrected moments, L2 or decoupled weight decay, AMSGrad, maximize."""

    name = "adam"

    def state_arrays(self, hyper: Hyper) -> tuple[str, ...]:
        return ("exp_avg", "exp_avg_sq", *(("max_exp_avg_sq",) if hyper["amsgrad"] else ()))

    def structure(self, hyper: Hyper) -> tuple[Any, ...]:
        return (hyper["weight_decay"] != 0, bool(hyper["decoupled_weight_decay"]), bool(hyper["amsgrad"]),
                bool(hyper["maximize"]), 1 - hyper["betas"][0] >= 0.5)

    def coefficients(self, hyper: Hyper, lr: float, step: int) -> dict[str, float]:
        (beta1, beta2), weight_decay = hyper["betas"], hyper["weight_decay"]
        weight = 1 - beta1
        return {"decay": 1 - lr * weight_decay, "weight_decay": weight_decay,
                "lerp_weight": 1 - weight if weight >= 0.5 else weight, "beta2": beta2, "one_minus_beta2": 1 - beta2,
                "neg_step_size": -(lr / (1 - beta1 ** step)), "bias_correction2_sqrt": (1 - beta2 ** step) ** 0.5,
                "eps": hyper["eps"]}

    def update(self, e: Emitter, hyper: Hyper, c: Mapping[str, Any], param: Any, grad: Any,
               state: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        g = signed(e, grad, param, hyper["maximize"])
        if hyper["weight_decay"] != 0:
            if hyper["decoupled_weight_decay"]:
                param = e.mul(param, c["decay"])
            else:
                g = e.add(g, e.mul(c["weight_decay"], param))
        exp_avg = lerp(e, _zeros(e, state, "exp_avg", param), g, c["lerp_weight"], 1 - hyper["betas"][0] >= 0.5)
        exp_avg_sq = e.add(e.mul(_zeros(e, state, "exp_avg_sq", param), c["beta2"]),
                           e.mul(e.mul(c["one_minus_beta2"], g), g))
        new_state = {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
        second = exp_avg_sq
        if hyper["amsgrad"]:
            previous = state.get("max_exp_avg_sq")
            second = exp_avg_sq if previous is None else e.maximum(previous, exp_avg_sq)
            new_state["max_exp_avg_sq"] = second
        denom = e.add(e.div(e.sqrt(second), c["bias_correction2_sqrt"]), c["eps"])
        return e.add(param, e.div(e.mul(c["neg_step_size"], exp_avg), denom)), new_state


def _zeros(e: Emitter, state: Mapping[str, Any], key: str, like: Any) -> Any:
    """A state array, or zeros shaped like the parameter before the first step (torch's zeros_like)."""
    value = state.get(key)
    return value if value is not None else e.constant(np.zeros(like.shape, like.dtype.numpy))


RULES: dict[str, UpdateRule] = {rule.name: rule for rule in (Sgd(), Adam())}


def numpy_step(rule: UpdateRule, hyper: Hyper, lr: float, step: int, param: np.ndarray, grad: np.ndarray,
               state: Mapping[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """One eager step of `rule` on numpy arrays; the results never alias the arguments."""
    e = NumpyEmitter()
    new_param, new_state = rule.update(e, hyper, rule.coefficients(hyper, lr, step), Concrete(param),
                                       Concrete(grad), {k: Concrete(v) for k, v in state.items()})
    inputs = (param, grad, *state.values())
    return new_param.array, {k: _unaliased(v.array, inputs) for k, v in new_state.items()}


def _unaliased(array: np.ndarray, inputs: tuple[np.ndarray, ...]) -> np.ndarray:
    return np.array(array, copy=True) if any(array is x for x in inputs) else array
