"""The Module interface of a lone parameter: visitors, devices, gradient configuration and transitions.

A Param can be handled like a module of one value (document 002 implements Module for Param): visiting it
calls the hook of its dtype kind with the empty path, and the transitions act on its own state.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ..device import Device
from .recordable import Recordable

if TYPE_CHECKING:
    from .param import Param


class ParamAsModule(Recordable):
    """Mixin giving Param the module methods that make sense for a single value."""

    __slots__ = ()

    def named_param_slots(self: Param) -> Iterator[tuple[str, Param]]:
        """A lone parameter is the one value of its module, at the empty path; a reparameterization's nested
        parameters follow at their names ("lora_a", "lora_b")."""
        yield "", self
        if self._reparam is not None:
            yield from ((suffix.lstrip("."), q) for suffix, q in self._reparam.named_params())

    def _kind(self: Param) -> str:
        kind = self.lazy_dtype.kind
        return "float" if kind == "float" else "bool" if kind == "bool" else "int"

    def visit(self: Param, visitor: Any) -> None:
        """Call the visitor's hook for this parameter's dtype kind, with the empty path."""
        getattr(visitor, f"visit_{self._kind()}")("", self)

    def collect_devices(self: Param, devices: list[Device]) -> list[Device]:
        return list(devices) + ([] if self.lazy_device in devices else [self.lazy_device])

    def devices(self: Param) -> list[Device]:
        return [self.lazy_device]

    def num_params(self: Param) -> int:
        return int(np.prod(self.lazy_shape, dtype=np.int64))

    def no_grad(self: Param) -> Param:
        return self.set_require_grad(False) if self.lazy_dtype.is_float else self

    def freeze_group(self: Param, group: Any) -> Param:
        return self.no_grad() if group.matches("", self) else self

    def unfreeze_group(self: Param, group: Any) -> Param:
        return self.set_require_grad(True) if group.matches("", self) and self.lazy_dtype.is_float else self

    def train(self: Param) -> Param:
        """Enable autodiff and apply the configured gradient requirement, in place."""
        self._set_autodiff(True)
        return self

    def valid(self: Param) -> Param:
        """A clone without autodiff (the array is shared); the configured requirement is kept for train()."""
        p = self.clone()
        p._set_autodiff(False)
        return p

    # --- reparameterizations (reparam.py): the parameter is the module's one weight -------------------------
    def apply_lora(self: Param, lora: Any) -> Param:
        """Freeze this parameter and, when it is 2-D, attach a trainable LoRA adapter (the matrix rule)."""
        return _reparam().apply_reparameterization(self, lora, "Lora")

    def apply_qlora(self: Param, qlora: Any) -> Param:
        """Quantize this parameter (when 2-D), freeze it and attach a trainable LoRA adapter."""
        return _reparam().apply_reparameterization(self, qlora, "QLora")

    def quantize_weights(self: Param, quantizer: Any) -> Param:
        """Store this parameter quantized when it is a weight (floating-point, rank >= 2)."""
        return _reparam().quantize_weights(self, quantizer)

    def quantize_weights_group(self: Param, quantizer: Any, group: Any) -> Param:
        """quantize_weights when `group` matches this parameter (at the empty path)."""
        return _reparam().quantize_weights(self, quantizer, group)


def _reparam() -> Any:
    from . import reparam  # builds on Param, which builds on this module
    return reparam
