"""Checks of the options optimizers and schedulers take: unknown names, unsupported values, parameter-group keys.

braze's constructors keep torch's argument names and defaults; an argument torch does not have, a group key no
optimizer or scheduler uses, or a torch implementation switch braze cannot honour raises OptionError naming the
owner, the option and what is valid, where torch would raise a bare TypeError or ignore a misspelt group key.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Iterable, Mapping

from braze.ir.errors import BrazeError


class OptionError(BrazeError, ValueError):
    """An optimizer or scheduler option that is unknown or has a value braze does not support."""


# torch's switches that pick an implementation, not an algorithm. braze always runs the single-tensor rule (torch's
# foreach=False numerics), so foreach and fused are accepted as given; capturable (CUDA graphs) and differentiable
# (an update inside autograd) change what a step means and are refused when set.
IMPLEMENTATION_SWITCHES: dict[str, tuple[Any, ...]] = {
    "foreach": (None, False, True), "fused": (None, False, True), "capturable": (False,), "differentiable": (False,)}

# Keys torch's schedulers write into parameter groups (and so into optimizer state dicts), plus torch's
# "param_names" for parameters given as (name, parameter) pairs.
SCHEDULER_GROUP_KEYS = ("initial_lr", "max_lr", "min_lr", "max_momentum", "base_momentum")
GROUP_KEYS = ("params", "param_names", *SCHEDULER_GROUP_KEYS)


def reject_unknown(owner: str, unknown: Mapping[str, Any], function: Callable[..., Any]) -> None:
    """Raise OptionError if `unknown` (a constructor's **kwargs) is not empty, listing `function`'s arguments."""
    if unknown:
        valid = [n for n, p in inspect.signature(function).parameters.items()
                 if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and n != "self"]
        raise OptionError(f"{owner}: unknown option{'s' if len(unknown) > 1 else ''} {', '.join(sorted(unknown))}; "
                          f"valid options: {', '.join(valid)}")


def check_switches(owner: str, options: Mapping[str, Any]) -> None:
    """Raise OptionError for an implementation switch set to a value braze does not support."""
    for name, supported in IMPLEMENTATION_SWITCHES.items():
        value = options.get(name)
        if name in options and (not (value is None or isinstance(value, bool)) or value not in supported):
            raise OptionError(f"{owner}: {name}={value!r} is not supported; supported values: "
                              f"{', '.join(repr(v) for v in supported)}")


def check_group_keys(owner: str, keys: Iterable[str], options: Iterable[str]) -> None:
    """Raise OptionError for a parameter-group key that is neither an option of the optimizer nor a known extra."""
    valid = [*options, *GROUP_KEYS]
    unknown = sorted(set(keys) - set(valid))
    if unknown:
        raise OptionError(f"{owner}: unknown parameter-group option{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(unknown)}; valid options: {', '.join(valid)}")
