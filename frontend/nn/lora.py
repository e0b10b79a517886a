"""LoRA and QLoRA: low-rank adapters attached to weights as reparameterizations, with the PEFT library's
semantics (factor shapes, initialization, scaling and adapter dropout).

An adapted weight's value is base + scale * delta with scale = alpha / rank (alpha / sqrt(rank) with
use_rslora) and delta = b @ a: `param.adapter.a` is PEFT's lora_A weight (rank, in_features), initialized
kaiming-uniform with a=sqrt(5) (U(-1/sqrt(fan_in), 1/sqrt(fan_in))) or, with init="gaussian", N(0, 1/rank^2);
`param.adapter.b` is lora_B (out_features, rank), zeros, so an adapted model starts equal to its base model.
The factors are trainable Params with their own ids at `<weight path>.lora_a` and `.lora_b`.

Which weights are adapted (rules by the owning module's type):
- Linear.weight ("linear"): the rule above; adapter dropout as PEFT: y = x @ W.T + bias + scale *
  (dropout(x) @ a.T) @ b.T, the dropout following the adapter's flag `<weight path>.lora_dropout`.
- MultiheadAttention's in_proj_weight (3E, E), or q/k/v_proj_weight ("attention"): the matrix rule, merged into
  the weight (PEFT merges these too); no adapter dropout. Its out_proj is a Linear.
- Conv2d.weight (out, in/groups, kh, kw) ("conv2d"): PEFT's Conv2d factors a (rank, in/groups, kh, kw) (lora_A,
  a conv with the base's kernel) and b (out, rank, 1, 1) (lora_B, a 1x1 conv); delta = b.reshape(out, rank) @
  a.reshape(rank, -1). Adapter dropout as PEFT (conv(conv(dropout(x), a), b)) for groups == 1 only.
- Embedding.weight (num_embeddings, dim) ("embedding"): PEFT's embedding adapter with its factors transposed
  into the matrix rule: a (rank, dim) is lora_embedding_B transposed, N(0, 1); b (num_embeddings, rank) is
  lora_embedding_A transposed, zeros; no adapter dropout (as PEFT).
- any other module's 2-D floating-point parameters, and a lone 2-D Param ("matrix"): the matrix rule, no adapter
  dropout.
Without targets, every Linear and MultiheadAttention weight (or a lone 2-D Param) is adapted. `targets` are globs over module paths
(PEFT's target_modules): a pattern selects a module whose path matches it or ends with "." + a match, so
"fc1" selects "fc1" and "encoder.fc1"; a pattern that selects no adaptable weight is an error.
"""
from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from braze.ir.errors import BrazeError

from .. import functions as _f
from ..dispatch import apply
from ..tensor import Tensor
from . import functional as F
from .flag import Flag
from .layers import Conv2d, Embedding, Linear, MultiheadAttention
from .layers._init import constant, fan_in_bound, lazy, normal, uniform
from .param import Param
from .quant import Quantizer
from .reparam import Offered, Reparameterization, Reparameterizer, is_weight, store_quantized

if TYPE_CHECKING:
    from .module import Module

_ATTENTION_WEIGHTS = ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight")
_DEFAULT_RULES = ("linear", "attention")
_INITS = ("kaiming", "gaussian")


class LoraAdapter(Reparameterization):
    """A weight's LoRA state: factors a and b (Params), scale, adapter dropout and its flag, and the rule used."""

    def __init__(self, a: Param, b: Param, scale: float, dropout: float = 0.0, flag: Flag | None = None,
                 rule: str = "linear") -> None:
        if flag is None and dropout > 0.0:
            flag = Flag(True)
        super().__init__({"lora_a": a, "lora_b": b}, {} if flag is None else {"lora_dropout": flag})
        self.scale, self.dropout, self.rule = float(scale), float(dropout), rule

    @property
    def a(self) -> Param:
        """lora_A: (rank, in_features), or (rank,) + the kernel's trailing dims for a convolution."""
        return self.params["lora_a"]

    @property
    def b(self) -> Param:
        """lora_B: (out_features, rank), or (out, rank, 1, 1) for a convolution; starts at zero."""
        return self.params["lora_b"]

    @property
    def flag(self) -> Flag | None:
        """The adapter dropout's training flag (None without adapter dropout)."""
        return self.flags.get("lora_dropout")

    @property
    def rank(self) -> int:
        return int(self.a.lazy_shape[0])

    def compose(self, base: Tensor) -> Tensor:
        """base + scale * (b @ a), through the registered op lora_merge."""
        return apply("lora_merge", base, self.a.val(), self.b.val(), scale=self.scale)

    def linear(self, input: Any, base: Tensor, bias: Any = None) -> Tensor:
        """PEFT's Linear forward: input @ base.T + bias + scale * (dropout(input) @ a.T) @ b.T."""
        out = F.linear(input, base, bias)
        dropped = F.dropout(input, self.dropout, training=self.flag)
        low_rank = F.linear(F.linear(dropped, self.a.val()), self.b.val())
        return _f.add(out, _f.mul(low_rank, self.scale))

    def conv2d(self, input: Any, base: Tensor, bias: Any, stride: Any, padding: Any, dilation: Any,
               groups: int) -> Tensor:
        """PEFT's Conv2d forward: conv(input, base) + scale * conv(conv(dropout(input), a), b) (b a 1x1 conv)."""
        out = F.conv2d(input, base, bias, stride, padding, dilation, groups)
        dropped = F.dropout(input, self.dropout, training=self.flag)
        low_rank = F.conv2d(F.conv2d(dropped, self.a.val(), None, stride, padding, dilation, 1), self.b.val())
        return _f.add(out, _f.mul(low_rank, self.scale))

    def metadata(self) -> dict[str, Any]:
        return {"kind": "lora", "rank": self.rank, "scale": self.scale}

    def __repr__(self) -> str:
        drop = f", dropout={self.dropout}" if self.dropout else ""
        return f"LoraAdapter(rank={self.rank}, scale={self.scale:g}{drop}, rule={self.rule!r})"


class Lora(Reparameterizer):
    """LoRA configuration (PEFT's LoraConfig): `module.apply_lora(Lora(rank, alpha, ...))`.

    rank: the factors' inner dimension (PEFT's r); alpha: lora_alpha; targets: module-path globs (None: every
    Linear and MultiheadAttention weight); dropout: adapter dropout probability; init: "kaiming" or "gaussian"
    (lora_A's initialization); use_rslora: scale alpha / sqrt(rank) instead of alpha / rank.
    Applying it freezes every floating-point parameter of the module (flags are left alone) and attaches
    trainable adapters to the selected weights.
    """

    def __init__(self, rank: int, alpha: float, targets: Sequence[str] | str | None = None, dropout: float = 0.0,
                 init: str = "kaiming", use_rslora: bool = False) -> None:
        if isinstance(rank, bool) or not isinstance(rank, int) or rank <= 0:
            raise BrazeError(f"Lora: rank must be a positive int, got {rank!r}")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
            raise BrazeError(f"Lora: alpha must be a finite number, got {alpha!r}")
        if not 0.0 <= dropout < 1.0:
            raise BrazeError(f"Lora: dropout must be in [0, 1), got {dropout!r}")
        if init not in _INITS:
            raise BrazeError(f"Lora: init must be one of {', '.join(_INITS)}, got {init!r}")
        if isinstance(targets, str):
            targets = [targets]
        if targets is not None and (not targets or not all(isinstance(t, str) for t in targets)):
            raise BrazeError(f"Lora: targets must be None or a non-empty list of module-path globs, got {targets!r}")
        self.rank, self.alpha, self.dropout, self.init = rank, float(alpha), float(dropout), init
        self.targets = None if targets is None else tuple(targets)
        self.use_rslora = bool(use_rslora)

    @property
    def scale(self) -> float:
        """alpha / rank, or alpha / sqrt(rank) with use_rslora."""
        return self.alpha / (math.sqrt(self.rank) if self.use_rslora else self.rank)

    # --- selection ------------------------------------------------------------------------------------------
    def selects(self, module_path: str, pattern: str) -> bool:
        """Whether `pattern` selects the module at `module_path` (a match, or a match of a trailing part)."""
        return fnmatch.fnmatchcase(module_path, pattern) or fnmatch.fnmatchcase(module_path, "*." + pattern)

    def rule_for(self, path: str, param: Param, owner: Module | None) -> str | None:
        """The rule adapting the parameter at `path`, or None when this configuration leaves it alone (a lone
        2-D Param, its own module at the empty path, is a weight the default selects)."""
        module_path, _, name = path.rpartition(".")
        rule = weight_rule(owner, name, param)
        if rule is None:
            return None
        if self.targets is None:
            return rule if rule in _DEFAULT_RULES or owner is None else None
        return rule if any(self.selects(module_path, t) for t in self.targets) else None

    def validate(self, offered: Sequence[Offered]) -> None:
        """Every target must select an adaptable weight; grouped convolutions cannot take adapter dropout."""
        chosen = [(path, p, owner) for path, p, owner in offered if self.rule_for(path, p, owner) is not None]
        if self.targets is None and not chosen:
            raise BrazeError("Lora: the module has no Linear or MultiheadAttention weight to adapt; pass targets "
                             "(module-path globs) to select other weights")
        for pattern in self.targets or ():
            if not any(self.selects(path.rpartition(".")[0], pattern) for path, _, _ in chosen):
                paths = sorted({path.rpartition(".")[0] for path, _, _ in offered} - {""})
                raise BrazeError(f"Lora: target {pattern!r} selects no module with an adaptable weight (a Linear, "
                                 f"MultiheadAttention, Conv2d, Embedding or a module's 2-D parameter); patterns "
                                 f"match module paths, such as: {', '.join(paths[:12]) or '(none)'}")
        for path, p, owner in chosen:
            if self.dropout > 0 and isinstance(owner, Conv2d) and owner.groups != 1:
                raise BrazeError(f"Lora: adapter dropout on the grouped convolution {path} (groups={owner.groups}) "
                                 f"is not supported; use dropout=0.0 or leave it out of targets")

    # --- attaching --------------------------------------------------------------------------------------------
    def reparameterize(self, path: str, param: Param, owner: Module | None) -> LoraAdapter | None:
        """Freeze the parameter; give it an adapter when this configuration selects it."""
        param.set_require_grad(False)
        rule = self.rule_for(path, param, owner)
        return None if rule is None else self.adapter(param, rule, owner)

    def adapter(self, param: Param, rule: str, owner: Module | None) -> LoraAdapter:
        """A new adapter for `param` under `rule`: lazy factors of its dtype on its device, b at zero."""
        shape, dtype, device, r = param.lazy_shape, param.lazy_dtype, param.lazy_device, self.rank
        if rule == "embedding":
            a = lazy((r, shape[1]), normal(1.0), dtype, device)
            b = lazy((shape[0], r), constant(0.0), dtype, device)
        else:
            fan_in = math.prod(shape[1:])
            init = uniform(fan_in_bound(fan_in)) if self.init == "kaiming" else normal(1.0 / r)
            a = lazy((r,) + tuple(shape[1:]), init, dtype, device)
            b = lazy((shape[0], r) + (1,) * (len(shape) - 2), constant(0.0), dtype, device)
        dropout = self.dropout if rule in ("linear", "conv2d") else 0.0
        flag = None
        if dropout > 0.0:
            flag = Flag(True)
            if owner is not None and not owner.training:  # a module in evaluation mode: the adapter too
                flag.disable()
        return LoraAdapter(a, b, self.scale, dropout, flag, rule)

    def __repr__(self) -> str:
        extra = "".join([f", targets={list(self.targets)}" if self.targets else "",
                         f", dropout={self.dropout}" if self.dropout else "",
                         f", init={self.init!r}" if self.init != "kaiming" else "",
                         ", use_rslora=True" if self.use_rslora else ""])
        return f"Lora(rank={self.rank}, alpha={self.alpha:g}{extra})"


class QLora(Reparameterizer):
    """QLoRA: quantize the frozen base weights (nf4 by default) and attach trainable LoRA adapters.

    The weights quantize_weights would quantize (floating-point parameters of rank >= 2) are stored quantized;
    the adapters follow `Lora(rank, alpha, **lora_options)`. Each eager forward dequantizes a weight to a dense
    value before composing it with its adapter, so dense weights do appear while training eagerly; a compiled
    training step (braze.compile_train_step) reads a float32 base packed instead.
    """

    def __init__(self, rank: int, alpha: float, quantizer: Quantizer | None = None, **lora_options: Any) -> None:
        self.lora = Lora(rank, alpha, **lora_options)
        self.quantizer = Quantizer("nf4") if quantizer is None else quantizer
        if not isinstance(self.quantizer, Quantizer):
            raise BrazeError(f"QLora: quantizer must be a braze.nn.Quantizer, got {type(quantizer).__name__}")

    @property
    def scale(self) -> float:
        return self.lora.scale

    def validate(self, offered: Sequence[Offered]) -> None:
        self.lora.validate(offered)

    def reparameterize(self, path: str, param: Param, owner: Module | None) -> LoraAdapter | None:
        """Quantize the parameter when it is a weight, then freeze it and attach an adapter as Lora does."""
        if is_weight(param):
            store_quantized(param, self.quantizer.quantize(param.base()))
        return self.lora.reparameterize(path, param, owner)

    def __repr__(self) -> str:
        return f"QLora({self.lora!r}, quantizer={self.quantizer!r})"


def weight_rule(owner: Module | None, name: str, param: Param) -> str | None:
    """Which rule adapts the parameter `name` of `owner` (None: not an adaptable weight)."""
    if not param.lazy_dtype.is_float or param.is_buffer:
        return None
    rank = len(param.lazy_shape)
    if isinstance(owner, Linear):
        return "linear" if name == "weight" else None
    if isinstance(owner, MultiheadAttention):
        return "attention" if name in _ATTENTION_WEIGHTS else None
    if isinstance(owner, Conv2d):
        return "conv2d" if name == "weight" else None
    if isinstance(owner, Embedding):
        return "embedding" if name == "weight" else None
    return "matrix" if rank == 2 else None


__all__ = ["Lora", "LoraAdapter", "QLora"]
