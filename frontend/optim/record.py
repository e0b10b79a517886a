"""OptimizerRecord: per-parameter optimizer state keyed by ParamId, saved and loaded as a safetensors file.

Arrays become tensors named "<param id>/<state key>"; scalars (step counts), the rule's name and the state's
device go in the JSON metadata header, so a loaded record is equal to the saved one, value for value.
"""
from __future__ import annotations

import json
import os
from typing import Iterator, Mapping

import numpy as np

from braze.ir.errors import BrazeError, RecordError

from ..device import as_device
from ..nn.param import ParamId
from ..read_limits import load_json
from ..atomic_files import read_bytes, write_atomic
from ..safetensors_io import decode, encode
from .rules import TensorState
from .state import ParamState

FORMAT = "braze.optimizer_record"
VERSION = 1


class OptimizerRecord(Mapping[ParamId, ParamState]):
    """Optimizer state by ParamId, plus string metadata; a read-only mapping."""

    def __init__(self, states: Mapping[int, ParamState], metadata: Mapping[str, str] | None = None) -> None:
        self._states = {ParamId(int(k)): v for k, v in states.items()}
        self.metadata: dict[str, str] = dict(metadata or {})

    def __getitem__(self, param_id: int) -> ParamState:
        return self._states[int(param_id)]

    def __iter__(self) -> Iterator[ParamId]:
        return iter(self._states)

    def __len__(self) -> int:
        return len(self._states)

    def __repr__(self) -> str:
        kinds = sorted({s.optimizer for s in self._states.values()})
        return f"OptimizerRecord({len(self)} parameters, {', '.join(kinds) or 'empty'})"

    # --- serialization -----------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The record as safetensors bytes."""
        tensors: dict[str, np.ndarray] = {}
        entries: dict[str, dict[str, object]] = {}
        for pid, ps in self._states.items():
            scalars: dict[str, int | float] = {}
            arrays: list[str] = []
            for key, value in ps.state.items():
                if isinstance(value, np.ndarray):
                    tensors[f"{int(pid)}/{key}"] = value
                    arrays.append(key)
                elif isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
                    raise RecordError(f"optimizer state {key!r} of parameter {int(pid)} is a "
                                      f"{type(value).__name__}; only arrays, ints and floats are recorded")
                else:
                    scalars[key] = value.item() if isinstance(value, np.number) else value
            entries[str(int(pid))] = {"optimizer": ps.optimizer, "device": str(ps.device), "scalars": scalars,
                                      "arrays": arrays}
        header = {"format": FORMAT, "format_version": str(VERSION), "states": json.dumps(entries, sort_keys=True),
                  "metadata": json.dumps(self.metadata, sort_keys=True)}
        return encode(tensors, header)

    @classmethod
    def from_bytes(cls, data: bytes, source: str = "<bytes>") -> OptimizerRecord:
        """A record from safetensors bytes; `source` names the data in errors."""
        tensors, header = decode(data, source)
        if header.get("format") != FORMAT:
            raise RecordError(f"{source}: not an optimizer record (format {header.get('format')!r}, "
                              f"expected {FORMAT!r})")
        if header.get("format_version") != str(VERSION):
            raise RecordError(f"{source}: unsupported optimizer record version {header.get('format_version')!r}")
        if "states" not in header:
            raise RecordError(f"{source}: corrupt optimizer record (no 'states')")
        entries = load_json(header["states"], f"{source}: corrupt optimizer record 'states'")
        metadata = load_json(header.get("metadata", "{}"), f"{source}: corrupt optimizer record 'metadata'")
        if not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
            raise RecordError(f"{source}: corrupt optimizer record (metadata is not a string mapping)")
        try:
            states = {int(pid): _param_state(entry, pid, tensors) for pid, entry in entries.items()}
            used = {f"{pid}/{k}" for pid, e in entries.items() for k in e["arrays"]}
            record = cls(states, metadata)
        except (KeyError, TypeError, ValueError, AttributeError, BrazeError) as err:
            raise RecordError(f"{source}: corrupt optimizer record ({type(err).__name__}: {err})") from None
        if set(tensors) != used:
            raise RecordError(f"{source}: corrupt optimizer record (tensors without an entry: "
                              f"{sorted(set(tensors) - used)})")
        return record

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the record to `path` atomically (a temporary file in the same directory, then a rename)."""
        write_atomic(path, self.to_bytes())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> OptimizerRecord:
        """Read a record written by save()."""
        return cls.from_bytes(read_bytes(path), os.fspath(path))


def _param_state(entry: dict, pid: str, tensors: Mapping[str, np.ndarray]) -> ParamState:
    state: TensorState = {}
    for key, value in entry["scalars"].items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"scalar {key!r} of parameter {pid} is {value!r}")
        state[key] = value
    for key in entry["arrays"]:
        state[key] = tensors[f"{pid}/{key}"]
    return ParamState(str(entry["optimizer"]), as_device(entry["device"]), state)
