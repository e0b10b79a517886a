"""ModuleOptimizer: the update sequence of the module-system documents.

    grads = loss.backward()
    gp = GradientsParams.from_grads(grads, model)
    model = optim.step(lr, model, gp)

The optimizer walks the module, finds each parameter's gradient by ParamId, picks the rule of the first
parameter group that matches the parameter (or the default rule), keeps per-parameter state by ParamId on
the parameter's device, and updates values outside the autodiff graph; trainability is preserved.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Iterator, Mapping

import numpy as np

from braze.ir.errors import RecordError

from ..autodiff import Gradients
from ..nn.param import Param, ParamId
from ..tensor import Tensor
from .record import OptimizerRecord
from .rules import OptimizerConfig
from .state import ParamState, update

if TYPE_CHECKING:
    from ..nn.group import ParamGroup
    from ..nn.module import Module


class GradientsParams(Mapping[ParamId, Tensor]):
    """Gradients keyed by ParamId: the link between a backward pass and the parameters of a module."""

    def __init__(self, grads: Mapping[int, Tensor] | None = None) -> None:
        self._grads = {ParamId(int(k)): v for k, v in (grads or {}).items()}

    @classmethod
    def from_grads(cls, grads: Gradients, module: Module) -> GradientsParams:
        """The gradients of `module`'s parameters among those one backward call returned."""
        found = {}
        for _, param in module.named_parameters():
            if not param.is_initialized:
                continue
            value = dict(param.stored_tensors()).get("")  # the dense stored value; quantized codes never train
            if value is not None and value in grads:
                found[param.id] = grads[value]
        return cls(found)

    @classmethod
    def from_module(cls, module: Module) -> GradientsParams:
        """The gradients accumulated in the `.grad` of `module`'s parameters."""
        return cls({p.id: p.grad for _, p in module.named_parameters() if p.is_initialized and p.grad is not None})

    def __getitem__(self, param_id: int) -> Tensor:
        return self._grads[int(param_id)]

    def __iter__(self) -> Iterator[ParamId]:
        return iter(self._grads)

    def __len__(self) -> int:
        return len(self._grads)

    def remove(self, param_id: int) -> Tensor | None:
        """Take a gradient out (None when there is none)."""
        return self._grads.pop(int(param_id), None)

    def __repr__(self) -> str:
        return f"GradientsParams({len(self)} parameters)"


class ModuleOptimizer:
    """Applies per-tensor rules to a module's parameters, with parameter groups and state by ParamId.

    `ModuleOptimizer(AdamConfig())` updates every parameter with Adam; `.add_group(group, SgdConfig(...),
    lr_scale=0.1)` gives the parameters a ParamGroup matches another rule and a learning-rate multiplier
    (the first matching group wins); `default=None` leaves unmatched parameters untouched.
    """

    def __init__(self, default: OptimizerConfig | None) -> None:
        self.default = default
        self.groups: list[tuple[ParamGroup, OptimizerConfig, float]] = []
        self._states: dict[ParamId, ParamState] = {}

    def add_group(self, group: ParamGroup, config: OptimizerConfig, *, lr_scale: float = 1.0) -> ModuleOptimizer:
        """Update the parameters `group` matches with `config` at lr * lr_scale; returns self."""
        self.groups.append((group, config, float(lr_scale)))
        return self

    def step(self, lr: float, module: Module, grads: GradientsParams) -> Module:
        """Update every parameter that has a gradient in `grads`; returns the (same, updated) module.

        The gradients used are consumed: the updated parameters' `.grad` is cleared, since each parameter's
        new value is a fresh leaf.
        """
        lr = float(lr)
        for path, param in module.named_parameters():
            grad = grads.get(param.id)
            if grad is None:
                continue
            config, scale = self._rule(path, param)
            if config is None:
                continue
            self._states[param.id] = update(config, lr * scale, param, grad, self._states.get(param.id), path)
            param.grad = None
        return module

    def _rule(self, path: str, param: Param) -> tuple[OptimizerConfig | None, float]:
        for group, config, scale in self.groups:
            if group.matches(path, param):
                return config, scale
        return self.default, 1.0

    def state(self, param_id: int) -> ParamState | None:
        """The state kept for a parameter (None before its first update)."""
        return self._states.get(int(param_id))

    # --- records -------------------------------------------------------------------------------------------
    def into_record(self) -> OptimizerRecord:
        """The per-parameter state as an OptimizerRecord (arrays copied)."""
        return OptimizerRecord({pid: ParamState(s.optimizer, s.device, {k: np.array(v, copy=True)
                                                                        if isinstance(v, np.ndarray) else v
                                                                        for k, v in s.state.items()})
                                for pid, s in self._states.items()})

    def load_record(self, record: OptimizerRecord) -> ModuleOptimizer:
        """Replace the state with a record's; each entry is checked against its rule when next used."""
        known = {c.name for c in [self.default, *(g[1] for g in self.groups)] if c is not None}
        foreign = sorted({s.optimizer for s in record.values()} - known)
        if foreign:
            raise RecordError(f"ModuleOptimizer.load_record: the record holds state of {', '.join(foreign)}, "
                             f"which this optimizer does not use ({', '.join(sorted(known))})")
        self._states = {pid: ParamState(s.optimizer, s.device, dict(s.state)) for pid, s in record.items()}
        return self

    def save_file(self, path: str | os.PathLike[str]) -> None:
        """Save the state to a safetensors file (atomically)."""
        self.into_record().save(path)

    def load_file(self, path: str | os.PathLike[str]) -> ModuleOptimizer:
        """Load the state from a file written by save_file."""
        return self.load_record(OptimizerRecord.load(path))

    def __repr__(self) -> str:
        groups = "".join(f", {type(c).__name__} for {g!r} (lr x{s})" for g, c, s in self.groups)
        return f"ModuleOptimizer({self.default!r}{groups}; {len(self._states)} states)"
