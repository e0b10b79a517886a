"""How reparameterized and quantized parameters appear in module records.

A dense parameter is one tensor at its path. A quantized parameter is two: `<path>.codes` and `<path>.scales`
(both with the parameter's id). A reparameterization's nested parameters are parameters of their own at their
paths (`<path>.lora_a`, `<path>.lora_b`, with their own ids). Beside the tensors, a record notes each such
parameter's structure in its metadata under "reparameterizations" (JSON: path -> {"adapter": {"kind", "rank",
"scale"}, "quantized": {"scheme", "block_size"}}), so loading into a module whose adapters or quantization
differ is reported instead of silently giving other outputs.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from braze.ir.errors import RecordError

from .nn.param import Param, ParamId
from .read_limits import load_json

STRUCTURE_KEY = "reparameterizations"
_PACKED_SUFFIXES = (".codes", ".scales")


def recorded_tensors(path: str, param: Param) -> Iterator[tuple[str, ParamId, np.ndarray]]:
    """(record path, id, array) of what a parameter records: its value through the save mapper, or its codes and
    scales (a quantized value is recorded as stored; mappers apply to dense values)."""
    if param._packed is not None:
        for suffix, t in param.stored_tensors():
            yield nested_path(path, suffix), param.id, np.array(t._data, copy=True)
    else:
        yield path, param.id, np.array(param.transform_for_save().base()._data, copy=True)


def nested_path(path: str, suffix: str) -> str:
    """The record path of a tensor stored under a parameter (a lone Param's own path is empty)."""
    return path + suffix if path else suffix.lstrip(".")


def _prefixes(keys: Iterable[str]) -> set[str]:
    """Every record path and each of its dotted prefixes: the parameter paths those record paths touch (a lone
    Param's empty path included)."""
    out = {""}
    for key in keys:
        parts = key.split(".")
        out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return out


def structure(slots: Iterable[tuple[str, Param]], keys: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The adapters and quantization of the parameters that have any, among those the record paths `keys` touch
    (a parameter's own path, or a path nested in it)."""
    touched = _prefixes(keys)
    out: dict[str, dict[str, Any]] = {}
    for path, p in slots:
        if (p._reparam is None and p._packed is None) or path not in touched:
            continue
        note: dict[str, Any] = {}
        if p._reparam is not None:
            note["adapter"] = p._reparam.metadata()
        if p._packed is not None:
            note["quantized"] = {"scheme": p._packed.scheme, "block_size": p._packed.block_size}
        out[path] = note
    return out


def structure_metadata(slots: Iterable[tuple[str, Param]], keys: Iterable[str]) -> dict[str, str]:
    """The record metadata noting the structure of the parameters that the recorded `keys` touch (empty when
    they are all plain)."""
    notes = structure(slots, keys)
    return {STRUCTURE_KEY: json.dumps(notes, sort_keys=True)} if notes else {}


def expected_keys(slots: Mapping[str, Param]) -> dict[str, tuple[Param, str]]:
    """Record path -> (parameter, stored suffix) for every tensor the module's parameters store."""
    out: dict[str, tuple[Param, str]] = {}
    for path, p in slots.items():
        if p._packed is not None:
            out.update((nested_path(path, suffix), (p, suffix)) for suffix in _PACKED_SUFFIXES)
        else:
            out[path] = (p, "")
    return out


def structural_mismatches(keys: Iterable[str], slots: Mapping[str, Param]) -> tuple[list[str], set[str], set[str]]:
    """Among record paths the module lacks, those that belong to a parameter the module has but structures
    differently: adapter state of a parameter without that adapter, a quantized value of a dense parameter, a
    dense value of a quantized one. Returns one note per parameter and difference, the record paths explained,
    and the paths of the parameters concerned."""
    groups: dict[tuple[str, str], list[str]] = {}
    for key in keys:
        owner, _, leaf = key.rpartition(".")
        if owner in slots:  # a parameter has no children in the module tree: this is state nested in it
            kind = "quantized" if f".{leaf}" in _PACKED_SUFFIXES and slots[owner]._packed is None else "adapter"
            groups.setdefault((owner, kind), []).append(key)
        elif key in slots and slots[key]._packed is not None:
            groups.setdefault((key, "dense"), []).append(key)
    notes = []
    for (path, kind), found in groups.items():
        listed, path = ", ".join(found), path or "the parameter"
        if kind == "quantized":
            notes.append(f"{path}: the record holds it quantized ({listed}), the module holds it dense (quantize the "
                         f"module the same way before loading)")
        elif kind == "adapter":
            notes.append(f"{path}: the record holds adapter state ({listed}) that the module's parameter does not "
                         f"have (apply the same reparameterization, e.g. apply_lora, before loading)")
        else:
            notes.append(f"{path}: the record holds a dense value, the module stores it quantized "
                         f"({slots[found[0]]._packed.scheme}); load the dense record before quantizing")
    return notes, {key for found in groups.values() for key in found}, {path for path, _ in groups}


def structure_problems(record_metadata: Mapping[str, str], slots: Mapping[str, Param],
                       loaded: Iterable[str]) -> list[str]:
    """Differences between the structure a record notes and the module's, for the parameters that the record
    paths being `loaded` touch."""
    try:
        noted = load_json(record_metadata.get(STRUCTURE_KEY, "{}"), f"the record's {STRUCTURE_KEY!r} metadata")
    except RecordError as err:
        return [str(err)]
    if not (isinstance(noted, dict) and all(isinstance(note, dict) and all(
            isinstance(note.get(part, {}), dict) for part in ("adapter", "quantized")) for note in noted.values())):
        return [f"the record's {STRUCTURE_KEY!r} metadata is not a mapping of parameter paths to "
                f"{{'adapter': {{...}}, 'quantized': {{...}}}} notes"]
    mine = structure(slots.items(), loaded)
    problems = []
    for path in sorted(set(noted) & set(mine)):
        for part in ("adapter", "quantized"):
            theirs, ours = noted[path].get(part), mine[path].get(part)
            if theirs is not None and ours is not None and theirs != ours:
                what = "quantization" if part == "quantized" else part
                problems.append(f"{path}: the record's {what} is {_describe(theirs)}, the module's "
                                f"{_describe(ours)}")
    return problems


def _describe(note: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in sorted(note.items()))


def prepared_packed(key: str, param: Param, suffix: str, array: np.ndarray, validate: bool,
                    problems: list[str]) -> np.ndarray | None:
    """The array to store as a quantized parameter's codes or scales, or None after noting a problem.

    Codes keep their integer type exactly (a cast would change their meaning); scales may be cast to float32.
    """
    layout = {s: (shape, dtype) for s, shape, dtype in param._packed.layout()}
    shape, dtype = layout[suffix]
    if array.dtype != dtype.numpy:
        if suffix == ".codes" or array.dtype.kind != "f":
            problems.append(f"{key}: the record holds {array.dtype}, the module's {param._packed.scheme} "
                            f"{suffix[1:]} are {dtype}")
            return None
        array = array.astype(dtype.numpy)
    if validate and tuple(array.shape) != tuple(shape):
        problems.append(f"{key}: the record has shape {tuple(array.shape)}, the module's {param._packed.scheme} "
                        f"{suffix[1:]} have shape {tuple(shape)}")
        return None
    return array


def load_packed(param: Param, suffix: str, array: np.ndarray, param_id: int) -> None:
    """Store a loaded array as the codes or scales of a quantized parameter (new tensors) and take the id."""
    param._packed = param._packed.replaced(suffix, array)
    param.id = ParamId(int(param_id))
