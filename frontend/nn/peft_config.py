"""PEFT's LoRA adapter configuration (adapter_config.json): reading and checking it, writing it, and PEFT's rules
for which modules it targets and the rank and alpha each one gets.

The rules follow peft 0.21 (tuners_utils.check_target_module_exists and utils.other.get_pattern_key):
- target_modules as a list selects a module whose path equals an entry or ends with "." + an entry; as a
  string it is a regular expression the whole path must match; exclude_modules (list or string) works the same
  way and wins;
- rank_pattern and alpha_pattern map regular expressions to values: the first key k for which the path matches
  `(.*\\.)?(k)$` gives the module's rank (alpha), else r (lora_alpha);
- the scale is alpha / rank, or alpha / sqrt(rank) with use_rslora.
fan_in_fan_out only transposes transformers' Conv1D weights, which braze has no layer for; PEFT resets it to False
for Linear layers and ignores it for the others, and so does braze.

peft_version: PEFT before 0.22.0 applied the LoRA of a MultiheadAttention's out_proj twice, and PEFT 0.22.0 loads
such an adapter (peft_version below 0.21.1, a release below 0.22.0, or none, as before 0.18.0) with its out_proj
lora_B doubled, so its outputs stay what they were. braze applies every adapter once and reads such an adapter the
same way (PeftLoraConfig.out_proj_twice); it writes peft_version 0.22.0, the first release whose rule it follows.

Options that change what an adapter computes and that braze does not implement (DoRA, trained biases, modules
saved whole, layer selection by index, ...) are refused by name rather than ignored.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from braze.ir.errors import RecordError

# Options that must keep PEFT's default (any of these values) for braze to compute what PEFT computes.
_MUST_BE_OFF: dict[str, str] = {
    "use_dora": "DoRA", "lora_bias": "LoRA biases", "modules_to_save": "modules saved whole",
    "layers_to_transform": "layer selection by index", "layers_pattern": "layer selection by index",
    "layer_replication": "layer replication", "trainable_token_indices": "trainable tokens",
    "target_parameters": "targeting nn.Parameters", "use_qalora": "QA-LoRA", "alora_invocation_tokens": "aLoRA",
    "megatron_config": "Megatron layers", "use_bdlora": "BD-LoRA", "arrow_config": "Arrow routing",
    "velora_config": "VeLoRA", "kasa_config": "KaSA",
}
_OFF_VALUES = (None, False, [], {}, "")
_PATTERN_LIMIT = 1000  # characters: a configuration's regular expressions are short; longer ones are refused
PEFT_VERSION = "0.22.0"  # written: the first PEFT release that applies a MultiheadAttention's out_proj LoRA once
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class PeftLoraConfig:
    """The parts of a PEFT LoraConfig that decide an adapter's shapes and scale (see the module doc)."""

    r: int
    lora_alpha: float
    target_modules: tuple[str, ...] | str
    use_rslora: bool = False
    lora_dropout: float = 0.0
    fan_in_fan_out: bool = False
    rank_pattern: dict[str, int] = field(default_factory=dict)
    alpha_pattern: dict[str, float] = field(default_factory=dict)
    exclude_modules: tuple[str, ...] | str | None = None
    out_proj_twice: bool = False  # saved by a PEFT that applied a MultiheadAttention's out_proj LoRA twice

    def targets(self, key: str) -> bool:
        """Whether PEFT adapts the module at path `key`."""
        if self.exclude_modules and selects(self.exclude_modules, key):
            return False
        return selects(self.target_modules, key)

    def rank(self, key: str) -> int:
        return self.rank_pattern.get(_pattern_key(self.rank_pattern, key), self.r)

    def alpha(self, key: str) -> float:
        return self.alpha_pattern.get(_pattern_key(self.alpha_pattern, key), self.lora_alpha)

    def scale(self, key: str) -> float:
        rank = self.rank(key)
        return self.alpha(key) / (math.sqrt(rank) if self.use_rslora else rank)

    def to_json(self) -> dict[str, Any]:
        """adapter_config.json's contents, with PEFT's defaults for everything braze does not use."""
        targets = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        return {"peft_type": "LORA", "task_type": None, "base_model_name_or_path": None, "revision": None,
                "inference_mode": True, "r": self.r, "lora_alpha": _number(self.lora_alpha),
                "target_modules": targets, "exclude_modules": None, "rank_pattern": dict(self.rank_pattern),
                "alpha_pattern": {k: _number(v) for k, v in self.alpha_pattern.items()},
                "lora_dropout": self.lora_dropout, "fan_in_fan_out": False, "use_rslora": self.use_rslora,
                "bias": "none", "use_dora": False, "init_lora_weights": True, "modules_to_save": None,
                "layers_to_transform": None, "layers_pattern": None, "peft_version": PEFT_VERSION}


def selects(targets: tuple[str, ...] | str, key: str) -> bool:
    """PEFT's target rule: a list entry equal to the path or to a dotted suffix of it; a string regex fullmatch."""
    if isinstance(targets, str):
        return re.fullmatch(targets, key) is not None
    return key in targets or any(key.endswith(f".{t}") for t in targets)


def _pattern_key(patterns: dict[str, Any], key: str) -> str:
    """PEFT's get_pattern_key: the first pattern the path ends with (at a dot), else the path itself."""
    for pattern in patterns:
        if re.match(rf"(.*\.)?({pattern})$", key):
            return pattern
    return key


def _number(value: float) -> float | int:
    """An integral alpha as an int, as PEFT writes it."""
    return int(value) if float(value).is_integer() else value


# --- reading ----------------------------------------------------------------------------------------------------
def parse_config(text: bytes, source: str) -> PeftLoraConfig:
    """The configuration in adapter_config.json's bytes; RecordError naming `source` and the bad key."""
    try:
        raw = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RecordError(f"{source}: not valid JSON ({err})") from None
    if not isinstance(raw, dict):
        raise RecordError(f"{source}: expected a JSON object, got {type(raw).__name__}")
    if raw.get("peft_type") != "LORA":
        raise RecordError(f"{source}: peft_type is {raw.get('peft_type')!r}; braze reads LoRA adapters "
                          f"(peft_type 'LORA') only")
    for key, what in _MUST_BE_OFF.items():
        if raw.get(key) not in _OFF_VALUES:
            raise RecordError(f"{source}: {key}={raw[key]!r} ({what}) is not supported; braze loads plain LoRA "
                              f"adapters")
    if raw.get("bias", "none") != "none":
        raise RecordError(f"{source}: bias={raw['bias']!r} (trained biases) is not supported; only bias='none'")
    return PeftLoraConfig(
        r=_positive_int(raw.get("r", 8), "r", source),
        lora_alpha=_finite(raw.get("lora_alpha", 8), "lora_alpha", source),
        target_modules=_targets(raw.get("target_modules"), "target_modules", source, required=True),
        use_rslora=_flag(raw.get("use_rslora", False), "use_rslora", source),
        lora_dropout=_dropout(raw.get("lora_dropout", 0.0), source),
        fan_in_fan_out=_flag(raw.get("fan_in_fan_out", False), "fan_in_fan_out", source),
        rank_pattern=_patterns(raw.get("rank_pattern"), "rank_pattern", source, _positive_int),
        alpha_pattern=_patterns(raw.get("alpha_pattern"), "alpha_pattern", source, _finite),
        exclude_modules=_targets(raw.get("exclude_modules"), "exclude_modules", source, required=False),
        out_proj_twice=_out_proj_twice(raw.get("peft_version"), source))


def _out_proj_twice(version: Any, source: str) -> bool:
    """PEFT 0.22.0's rule (see the module doc): whether the writer applied a MultiheadAttention's out_proj LoRA
    twice. Dev versions from 0.21.1 on carry the fix."""
    if version is None:
        return True
    match = _VERSION.match(version) if isinstance(version, str) else None
    if match is None:
        raise RecordError(f"{source}: peft_version must be a version string like '0.22.0', got {version!r}")
    release = tuple(int(part) for part in match.groups())
    dev = ".dev" in version.partition("@")[0]
    return release < (0, 21, 1) or (not dev and release < (0, 22, 0))


def _positive_int(value: Any, key: str, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise RecordError(f"{source}: {key} must be a positive integer, got {value!r}")
    return value


def _finite(value: Any, key: str, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RecordError(f"{source}: {key} must be a finite number, got {value!r}")
    return float(value)


def _flag(value: Any, key: str, source: str) -> bool:
    if not isinstance(value, bool):
        raise RecordError(f"{source}: {key} must be true or false, got {value!r}")
    return value


def _dropout(value: Any, source: str) -> float:
    p = _finite(value, "lora_dropout", source)
    if not 0.0 <= p < 1.0:
        raise RecordError(f"{source}: lora_dropout must be in [0, 1), got {value!r}")
    return p


def _regex(pattern: str, key: str, source: str) -> str:
    if len(pattern) > _PATTERN_LIMIT:
        raise RecordError(f"{source}: {key} holds a pattern of {len(pattern)} characters (at most {_PATTERN_LIMIT})")
    try:
        re.compile(pattern)
    except re.error as err:
        raise RecordError(f"{source}: {key} pattern {pattern!r} is not a regular expression ({err})") from None
    return pattern


def _targets(value: Any, key: str, source: str, required: bool) -> tuple[str, ...] | str | None:
    if value is None and not required:
        return None
    if value == "all-linear":
        raise RecordError(f"{source}: {key}='all-linear' needs a transformers model; list the module names")
    if isinstance(value, str):
        return _regex(value, key, source)
    if isinstance(value, list) and value and all(isinstance(t, str) and t for t in value):
        return tuple(value)
    raise RecordError(f"{source}: {key} must be a non-empty list of module names or a regular expression, got "
                      f"{value!r}")


def _patterns(value: Any, key: str, source: str, check: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RecordError(f"{source}: {key} must map module patterns to values, got {value!r}")
    return {_regex(k, key, source): check(v, f"{key}[{k!r}]", source) for k, v in value.items()}
