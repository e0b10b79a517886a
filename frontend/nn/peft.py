"""PEFT LoRA adapters in and out: `Module.load_peft_adapter(path)` and `Module.save_peft_adapter(directory)`.

A PEFT adapter is a directory with adapter_config.json (peft_config.py reads it) and adapter_model.safetensors,
whose tensors are named after the torch module paths of the model PEFT wrapped: `base_model.model.<path>.lora_A
.weight` and `.lora_B.weight` (Linear, Conv2d, MultiheadAttention), `.lora_embedding_A` and `.lora_embedding_B`
(Embedding), with or without the adapter's name before `.weight`. A braze model written from the same source has
the same module paths, so the factors map onto braze's LoRA adapters (frontend/nn/lora.py) one to one:
- Linear and Conv2d: lora_A is the adapter's a and lora_B its b;
- Embedding: a is lora_embedding_B transposed, b is lora_embedding_A transposed;
- MultiheadAttention at <path>: the factors at <path> adapt in_proj_weight, and those at
  <path>.base_layer.out_proj its out_proj (PEFT adapts both, with the attention module's rank and alpha); an adapter
  saved by a PEFT before 0.22.0, which applied the out_proj factors twice, is read with its lora_B doubled, as PEFT
  0.22.0 reads it (peft_config.py).

Loading checks everything before the module changes (a RecordError leaves it as it was): every module the
configuration targets exists and can be adapted, every factor it needs is in the file with the rank the
configuration gives, and no tensor is left over. A model without adapters gets them (as apply_lora: every
floating-point parameter frozen, the adapters trainable, dropout from lora_dropout); a model whose adapters
already sit on exactly the targeted weights with those ranks has its factors and scales replaced.
"""
from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from braze.ir.errors import RecordError

from ..atomic_files import read_bytes, write_atomic
from ..safetensors_io import decode, encode
from .layers import Conv2d, Embedding, Linear, MultiheadAttention
from .lora import Lora, LoraAdapter, weight_rule
from .param import Param
from .peft_config import PeftLoraConfig, parse_config, selects
from .reparam import Reparameterizer, apply_reparameterization, structural_params

if TYPE_CHECKING:
    from .module import Module

CONFIG_FILE, WEIGHTS_FILE = "adapter_config.json", "adapter_model.safetensors"
PREFIX = "base_model.model."
_OUT_PROJ = ".base_layer.out_proj"
_KEY = re.compile(r"(?P<path>.+?)\.(?:(?P<factor>lora_[AB])(?:\.(?P<name>[^.]+))?\.weight"
                  r"|(?P<embedding>lora_embedding_[AB])(?:\.(?P<ename>[^.]+))?)")


@dataclass(frozen=True)
class Target:
    """One adapted weight: the PEFT module key of its factors, the key its rank and alpha come from, the braze
    parameter path and LoRA rule, and braze's factor shapes."""

    key: str
    config_key: str
    param: str
    rule: str
    a_shape: tuple[int, ...]
    b_shape: tuple[int, ...]

    def file_names(self) -> tuple[str, str]:
        """The tensor names of (a, b) in PEFT's file (for an embedding: lora_embedding_B, lora_embedding_A)."""
        if self.rule == "embedding":
            return f"{PREFIX}{self.key}.lora_embedding_B", f"{PREFIX}{self.key}.lora_embedding_A"
        return f"{PREFIX}{self.key}.lora_A.weight", f"{PREFIX}{self.key}.lora_B.weight"

    def to_file(self, a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
        """braze's factors as PEFT's tensors."""
        names = self.file_names()
        if self.rule == "embedding":
            return {names[0]: np.ascontiguousarray(a.T), names[1]: np.ascontiguousarray(b.T)}
        return {names[0]: a, names[1]: b}


# --- loading ------------------------------------------------------------------------------------------------------
def load_peft_adapter(module: Module, path: str | os.PathLike[str]) -> Module:
    """Read a PEFT LoRA adapter (a directory, or its config or weights file) onto `module` (see the module doc)."""
    config_path, weights_path = adapter_files(path)
    config = parse_config(read_bytes(config_path), str(config_path))
    tensors = _factor_tensors(weights_path)
    targets = plan(module, config, str(config_path))
    factors = {t.param: _factors(t, tensors, config, str(weights_path)) for t in targets}
    if tensors:
        name = sorted(tensors)[0]
        raise RecordError(f"{weights_path}: tensor {name!r} is not a LoRA factor of a module the adapter "
                          f"configuration targets")
    _attach(module, targets, config, str(weights_path))
    for t in targets:
        adapter: LoraAdapter = module.get_parameter(t.param).adapter
        a, b = factors[t.param]
        if config.out_proj_twice and t.key.endswith(_OUT_PROJ):  # what that PEFT computed (peft_config.py)
            b = 2 * b
        adapter.a.assign(a)
        adapter.b.assign(b)
        adapter.scale = config.scale(t.config_key)
    return module


def adapter_files(path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """adapter_config.json and adapter_model.safetensors of a directory, or beside the given file."""
    path = Path(path)
    directory = path if path.is_dir() else path.parent
    weights = path if path.is_file() and path.name != CONFIG_FILE else directory / WEIGHTS_FILE
    config = directory / CONFIG_FILE
    for needed in (config, weights):
        if not needed.is_file():
            legacy = " (adapter_model.bin, a pickle, is not read: save with safe_serialization)" \
                if needed == weights and (directory / "adapter_model.bin").is_file() else ""
            raise RecordError(f"{path}: no PEFT adapter here: {needed} does not exist{legacy}")
    return config, weights


def _factor_tensors(path: Path) -> dict[str, np.ndarray]:
    """The file's tensors by name with the adapter name dropped; RecordError for any other kind of tensor."""
    tensors, _ = decode(read_bytes(path), str(path))
    out, names = {}, set()
    for key, array in tensors.items():
        match = _KEY.fullmatch(key[len(PREFIX):]) if key.startswith(PREFIX) else None
        if match is None:
            raise RecordError(f"{path}: tensor {key!r} is not a PEFT LoRA factor (base_model.model.<module>"
                              f".lora_A.weight, .lora_B.weight, .lora_embedding_A or .lora_embedding_B)")
        if not np.issubdtype(array.dtype, np.floating):
            raise RecordError(f"{path}: tensor {key!r} has dtype {array.dtype}; LoRA factors are floating point")
        names.add(match["name"] or match["ename"])
        if match["factor"]:
            out[f"{PREFIX}{match['path']}.{match['factor']}.weight"] = array
        else:
            out[f"{PREFIX}{match['path']}.{match['embedding']}"] = array
    if len(names) > 1:
        raise RecordError(f"{path}: the tensors belong to several adapters ({sorted(map(str, names))}); "
                          f"save one adapter per directory")
    return out


def plan(module: Module, config: PeftLoraConfig, source: str) -> list[Target]:
    """The weights the configuration adapts in `module`, in module order; RecordError naming a target that
    selects nothing or a module LoRA cannot adapt."""
    targets: list[Target] = []
    for key, owner in module.named_modules():
        if key and config.targets(key):
            targets += _module_targets(key, owner, config, source)
    twice = [t.param for k, t in enumerate(targets) if any(t.param == u.param for u in targets[:k])]
    if twice:
        raise RecordError(f"{source}: target_modules select {twice[0]} twice (directly and through its "
                          f"MultiheadAttention, which PEFT adapts with its out_proj)")
    if not targets:
        paths = [k for k, _ in module.named_modules() if k][:12]
        raise RecordError(f"{source}: target_modules {_shown(config.target_modules)} select no module of the "
                          f"{type(module).__name__}; its module paths include: {', '.join(paths) or '(none)'}")
    return targets


def _shown(targets: tuple[str, ...] | str) -> str:
    return repr(targets if isinstance(targets, str) else list(targets))


def _module_targets(key: str, owner: Module, config: PeftLoraConfig, source: str) -> list[Target]:
    rank = config.rank(key)
    if isinstance(owner, MultiheadAttention):
        if not owner._qkv_same_embed_dim:
            raise RecordError(f"{source}: {key} is a MultiheadAttention with separate q, k and v projections; PEFT "
                              f"adapts only in_proj_weight")
        return [_target(key, key, f"{key}.in_proj_weight", owner.in_proj_weight, owner, rank),
                _target(f"{key}{_OUT_PROJ}", key, f"{key}.out_proj.weight", owner.out_proj.weight, owner.out_proj,
                        rank)]
    if isinstance(owner, (Linear, Conv2d, Embedding)):
        return [_target(key, key, f"{key}.weight", owner.weight, owner, rank)]
    raise RecordError(f"{source}: target_modules select {key}, a {type(owner).__name__}; LoRA adapts Linear, "
                      f"Conv2d, Embedding and MultiheadAttention modules")


def _target(key: str, config_key: str, path: str, param: Param, owner: Module, rank: int) -> Target:
    rule = weight_rule(owner, path.rpartition(".")[2], param)
    shape = tuple(param.lazy_shape)
    if rule == "embedding":
        return Target(key, config_key, path, rule, (rank, shape[1]), (shape[0], rank))
    return Target(key, config_key, path, rule, (rank,) + shape[1:], (shape[0], rank) + (1,) * (len(shape) - 2))


def _factors(t: Target, tensors: dict[str, np.ndarray], config: PeftLoraConfig,
             source: str) -> tuple[np.ndarray, np.ndarray]:
    """braze's (a, b) for a target, taken out of `tensors`; RecordError naming a missing or misshapen one."""
    transposed = t.rule == "embedding"
    arrays = []
    for name, shape in zip(t.file_names(), (t.a_shape, t.b_shape)):
        if name not in tensors:
            raise RecordError(f"{source}: missing tensor {name!r} (adapter_config.json targets {t.config_key})")
        array, expected = tensors.pop(name), shape[::-1] if transposed else shape
        if array.shape != expected:
            raise RecordError(f"{source}: tensor {name!r} has shape {array.shape}, expected {expected}: "
                              f"adapter_config.json gives {t.config_key} rank {config.rank(t.config_key)}")
        arrays.append(np.ascontiguousarray(array.T if transposed else array))
    return arrays[0], arrays[1]


class _Adapters(Reparameterizer):
    """Attaches the planned adapters (each with its own rank and alpha) and freezes every parameter, as apply_lora."""

    def __init__(self, loras: dict[str, Lora]) -> None:
        self.loras = loras

    def reparameterize(self, path: str, param: Param, owner: Module | None) -> LoraAdapter | None:
        param.set_require_grad(False)
        lora = self.loras.get(path)
        return None if lora is None else lora.adapter(param, weight_rule(owner, path.rpartition(".")[2], param), owner)


def _attach(module: Module, targets: list[Target], config: PeftLoraConfig, source: str) -> None:
    """Give the targeted weights adapters of the planned shapes, or check that they have them already."""
    adapted = {path: p.adapter for path, p, _ in structural_params(module) if p.adapter is not None}
    if not adapted:
        loras = {t.param: Lora(config.rank(t.config_key), config.alpha(t.config_key), dropout=config.lora_dropout,
                               use_rslora=config.use_rslora) for t in targets}
        apply_reparameterization(module, _Adapters(loras))
        return
    wanted = {t.param: t for t in targets}
    mismatched = sorted(set(adapted) ^ set(wanted))
    if mismatched:
        path = mismatched[0]
        state = "has an adapter the PEFT adapter does not target" if path in adapted else \
            "has no adapter while other weights do"
        raise RecordError(f"{source}: {path} {state}; load a PEFT adapter onto a model without adapters or with "
                          f"adapters on exactly its targets")
    for path, t in wanted.items():
        adapter = adapted[path]
        if not isinstance(adapter, LoraAdapter) or \
                (tuple(adapter.a.lazy_shape), tuple(adapter.b.lazy_shape)) != (t.a_shape, t.b_shape):
            raise RecordError(f"{source}: {path} has {adapter!r}, but the PEFT adapter gives it rank "
                              f"{t.a_shape[0]} (factors {t.a_shape} and {t.b_shape})")


# --- saving -------------------------------------------------------------------------------------------------------
def save_peft_adapter(module: Module, directory: str | os.PathLike[str]) -> None:
    """Write the module's LoRA adapters as a PEFT adapter directory (each file written atomically)."""
    entries = saved_targets(module)
    config = _config_for(module, entries)
    tensors: dict[str, np.ndarray] = {}
    for t, adapter in entries:
        tensors.update(t.to_file(adapter.a.val().detach().numpy(), adapter.b.val().detach().numpy()))
    target = Path(directory)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RecordError(f"{target}: cannot create the adapter directory: {err.strerror or err}") from None
    write_atomic(target / WEIGHTS_FILE, encode(tensors, {"format": "pt"}))
    write_atomic(target / CONFIG_FILE, (json.dumps(config.to_json(), indent=2) + "\n").encode())


def saved_targets(module: Module) -> list[tuple[Target, LoraAdapter]]:
    """Every adapter of the module as PEFT names it; RecordError for one PEFT cannot express."""
    entries = []
    for path, p, owner in structural_params(module):
        adapter = p.adapter
        if adapter is None:
            continue
        if not isinstance(adapter, LoraAdapter):
            raise RecordError(f"save_peft_adapter: {path} has a {type(adapter).__name__}, not a LoRA adapter")
        key, config_key = _peft_key(module, path, owner, adapter)
        entries.append((_target(key, config_key, path, p, owner, adapter.rank), adapter))
    if not entries:
        raise RecordError(f"save_peft_adapter: the {type(module).__name__} has no LoRA adapters to save")
    return entries


def _peft_key(module: Module, path: str, owner: Module | None, adapter: LoraAdapter) -> tuple[str, str]:
    """The PEFT module key of an adapted weight and the key its rank and alpha are configured under."""
    key, _, name = path.rpartition(".")
    if adapter.rule == "attention" and name == "in_proj_weight":
        return key, key
    parent, _, child = key.rpartition(".")
    inside_attention = child == "out_proj" and isinstance(module.get_submodule(parent), MultiheadAttention)
    if adapter.rule == "linear" and inside_attention:
        if module.get_parameter(f"{parent}.in_proj_weight").adapter is None:
            raise RecordError(f"save_peft_adapter: {path} is adapted but {parent}.in_proj_weight is not; PEFT adapts "
                              f"a MultiheadAttention's out_proj only together with its in_proj")
        return f"{parent}{_OUT_PROJ}", parent
    if adapter.rule in ("linear", "conv2d", "embedding") and key:
        return key, key
    raise RecordError(f"save_peft_adapter: PEFT names adapters by module (Linear, Conv2d, Embedding, "
                      f"MultiheadAttention in_proj); {path or 'the parameter'} ({adapter.rule} rule) is not one")


def _config_for(module: Module, entries: list[tuple[Target, LoraAdapter]]) -> PeftLoraConfig:
    """The configuration of the saved adapters: the commonest rank and alpha, patterns for the others."""
    ranks: dict[str, int] = {}
    scales: dict[str, float] = {}
    for t, adapter in entries:
        if ranks.setdefault(t.config_key, adapter.rank) != adapter.rank or \
                scales.setdefault(t.config_key, adapter.scale) != adapter.scale:
            raise RecordError(f"save_peft_adapter: {t.param} and the other adapter of {t.config_key} differ in "
                              f"rank or scale; PEFT gives a MultiheadAttention's two adapters one rank and alpha")
    dropouts = {a.dropout for t, a in entries if t.rule in ("linear", "conv2d")} or {0.0}
    if len(dropouts) > 1:
        raise RecordError(f"save_peft_adapter: the adapters use different dropout ({sorted(dropouts)}); PEFT's "
                          f"configuration has one lora_dropout")
    alphas = {k: scales[k] * ranks[k] for k in ranks}
    r = Counter(ranks.values()).most_common(1)[0][0]
    alpha = Counter(alphas.values()).most_common(1)[0][0]
    return PeftLoraConfig(
        r=r, lora_alpha=alpha, target_modules=_target_modules(module, set(ranks)), lora_dropout=dropouts.pop(),
        rank_pattern={f"^{re.escape(k)}": v for k, v in ranks.items() if v != r},
        alpha_pattern={f"^{re.escape(k)}": v for k, v in alphas.items() if v != alpha})


def _target_modules(module: Module, keys: set[str]) -> tuple[str, ...] | str:
    """The module paths as a list when PEFT's list rule selects exactly them, else as one regular expression."""
    listed = tuple(sorted(keys))
    if {k for k, _ in module.named_modules() if k and selects(listed, k)} == keys:
        return listed
    return "(?:" + "|".join(re.escape(k) for k in listed) + ")"
