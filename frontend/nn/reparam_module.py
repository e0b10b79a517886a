"""The reparameterization methods of Module (document 001): apply_reparameterization, apply_lora, apply_qlora,
quantize_weights, quantize_weights_group and materialize, each changing the module in place and returning it; and
PEFT's adapter files in and out: load_peft_adapter and save_peft_adapter.

The work is done in reparam.py, lora.py, quant.py and peft.py.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from . import reparam

if TYPE_CHECKING:
    from .group import ParamGroup
    from .lora import Lora, QLora
    from .module import Module
    from .quant import Quantizer
    from .reparam import Reparameterizer


class ReparamMixin:
    """Attaching, quantizing and folding parameter reparameterizations."""

    def apply_reparameterization(self, reparameterizer: Reparameterizer) -> Module:
        """Offer every floating-point parameter, with its path, to the reparameterizer, which prepares its base and
        may return the state Param.val() composes; raises if the module already has reparameterized parameters."""
        return reparam.apply_reparameterization(self, reparameterizer)  # type: ignore[arg-type]

    def apply_lora(self, lora: Lora) -> Module:
        """Freeze every floating-point parameter and attach trainable LoRA adapters to the selected weights (every
        Linear and MultiheadAttention weight by default); flags keep their state."""
        return reparam.apply_reparameterization(self, lora, "Lora")  # type: ignore[arg-type]

    def apply_qlora(self, qlora: QLora) -> Module:
        """Quantize the weights (nf4 by default), freeze every floating-point parameter and attach trainable LoRA
        adapters to the selected weights; flags keep their state."""
        return reparam.apply_reparameterization(self, qlora, "QLora")  # type: ignore[arg-type]

    def quantize_weights(self, quantizer: Quantizer) -> Module:
        """Store every weight (floating-point parameter of rank >= 2) quantized; val() dequantizes it."""
        return reparam.quantize_weights(self, quantizer)  # type: ignore[arg-type]

    def quantize_weights_group(self, quantizer: Quantizer, group: ParamGroup) -> Module:
        """Store the weights that `group` matches quantized; the rest is untouched."""
        return reparam.quantize_weights(self, quantizer, group)  # type: ignore[arg-type]

    def materialize(self) -> Module:
        """Fold every reparameterization and quantized base into a dense parameter equal to its effective value,
        keeping its id, mappers and configured trainability, detached; other parameters stay lazy and flags are
        unchanged. `model.valid().materialize()` gives merged inference weights and leaves `model` as it was."""
        return reparam.materialize(self)  # type: ignore[arg-type]

    def load_peft_adapter(self, path: str | os.PathLike[str]) -> Module:
        """Read a PEFT LoRA adapter (its directory, or adapter_config.json or adapter_model.safetensors in it)
        onto the modules of the same paths, attaching LoRA adapters where needed; raises RecordError naming the
        bad key or module path, and then leaves the module unchanged."""
        from . import peft
        return peft.load_peft_adapter(self, path)  # type: ignore[arg-type]

    def save_peft_adapter(self, path: str | os.PathLike[str]) -> None:
        """Write the LoRA adapters as a PEFT adapter directory (adapter_config.json, adapter_model.safetensors),
        which peft's PeftModel.from_pretrained loads onto a torch model of the same module paths."""
        from . import peft
        peft.save_peft_adapter(self, path)  # type: ignore[arg-type]
