"""Module records: a module's tensor parameters and buffers by path, each with its ParamId, and their files.

A ModuleRecord is what `module.into_record()` collects (values through each Param's save mapper) and what
`module.load_record(record)` applies back (through each Param's load mapper, keeping the record's ids). A
record file is a standard safetensors file: the arrays are its tensors, named by module path, and the
format name, version, ParamIds and user metadata are in its string metadata header, so any safetensors
reader opens it. Flags are runtime configuration and are not recorded. Loading validates everything first
and changes nothing when any check fails.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Literal, Mapping

import numpy as np

from braze.ir.errors import RecordError

from . import record_layout as layout
from .nn.param import Param, ParamId
from .read_limits import checked_id, load_json
from .atomic_files import read_bytes, write_atomic
from .safetensors_io import decode, encode
from .tensor import Tensor

if TYPE_CHECKING:
    from .nn.group import ParamGroup
    from .nn.module import Module

FORMAT = "braze.module_record"
VERSION = 1
DTypePolicy = Literal["cast", "strict"]
_POLICIES = ("cast", "strict")


@dataclass(frozen=True)
class RecordEntry:
    """One recorded tensor: the id of the parameter it came from and its array."""

    id: ParamId
    array: np.ndarray


class ModuleRecord(Mapping[str, RecordEntry]):
    """A module's tensors by path with their ParamIds, plus the options that govern applying them.

    dtype_policy: "cast" converts each array to the dtype of the module's parameter; "strict" requires equal
    dtypes. validate: check shapes against the module's (lazy) shapes. allow_partial: the record may omit
    some of the module's tensors (a record of a group), and entries for adapters or quantization that the
    module's parameters do not have are skipped; other paths the module lacks are always an error.
    """

    def __init__(self, entries: Mapping[str, RecordEntry], *, dtype_policy: DTypePolicy = "cast",
                 validate: bool = True, allow_partial: bool = False, metadata: Mapping[str, str] | None = None,
                 source: str = "record") -> None:
        if dtype_policy not in _POLICIES:
            raise RecordError(f"ModuleRecord: dtype_policy must be one of {_POLICIES}, got {dtype_policy!r}")
        self._entries = {str(path): _entry(path, e) for path, e in entries.items()}
        self.dtype_policy, self.validate, self.allow_partial = dtype_policy, bool(validate), bool(allow_partial)
        self.metadata: dict[str, str] = dict(metadata or {})
        self.source = source

    def with_options(self, *, dtype_policy: DTypePolicy | None = None, validate: bool | None = None,
                     allow_partial: bool | None = None) -> ModuleRecord:
        """The same entries with some options changed."""
        return ModuleRecord(self._entries, dtype_policy=dtype_policy or self.dtype_policy,
                            validate=self.validate if validate is None else validate,
                            allow_partial=self.allow_partial if allow_partial is None else allow_partial,
                            metadata=self.metadata, source=self.source)

    def __getitem__(self, path: str) -> RecordEntry:
        return self._entries[path]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays by path (a state dict)."""
        return {path: e.array for path, e in self._entries.items()}

    def ids(self) -> dict[str, ParamId]:
        return {path: e.id for path, e in self._entries.items()}

    def __repr__(self) -> str:
        size = sum(e.array.size for e in self._entries.values())
        return (f"ModuleRecord({len(self)} tensors, {size} elements, dtype_policy={self.dtype_policy!r}, "
                f"validate={self.validate}, allow_partial={self.allow_partial})")

    # --- serialization -----------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        """The record as safetensors bytes (tensors by path; ids, format and metadata in the header)."""
        header = {"format": FORMAT, "format_version": str(VERSION),
                  "param_ids": json.dumps({p: int(e.id) for p, e in self._entries.items()}, sort_keys=True),
                  "metadata": json.dumps(self.metadata, sort_keys=True)}
        return encode(self.arrays(), header)

    @classmethod
    def from_bytes(cls, data: bytes, *, source: str = "<bytes>", dtype_policy: DTypePolicy = "cast",
                   validate: bool = True, allow_partial: bool = False) -> ModuleRecord:
        """A record from safetensors bytes written by to_bytes(); `source` names the data in errors."""
        tensors, header = decode(data, source)
        if header.get("format") != FORMAT:
            raise RecordError(f"{source}: not a braze module record (format {header.get('format')!r}, "
                              f"expected {FORMAT!r})")
        if header.get("format_version") != str(VERSION):
            raise RecordError(f"{source}: unsupported module record version {header.get('format_version')!r} "
                              f"(this braze reads version {VERSION})")
        if "param_ids" not in header:
            raise RecordError(f"{source}: corrupt module record header (no 'param_ids')")
        ids = load_json(header["param_ids"], f"{source}: corrupt module record header 'param_ids'")
        metadata = load_json(header.get("metadata", "{}"), f"{source}: corrupt module record header 'metadata'")
        if not (isinstance(ids, dict) and set(ids) == set(tensors)):
            raise RecordError(f"{source}: corrupt module record header (the ids do not match the tensors)")
        if not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
            raise RecordError(f"{source}: corrupt module record header (metadata is not a string mapping)")
        entries = {path: RecordEntry(ParamId(checked_id(f"{source}: the ParamId of {path!r}", ids[path])), array)
                   for path, array in tensors.items()}
        return cls(entries, dtype_policy=dtype_policy, validate=validate, allow_partial=allow_partial,
                   metadata=metadata, source=source)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the record to `path` atomically (a temporary file in the same directory, then a rename)."""
        write_atomic(path, self.to_bytes())

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, dtype_policy: DTypePolicy = "cast", validate: bool = True,
             allow_partial: bool = False) -> ModuleRecord:
        """Read a record file; a missing, truncated or corrupt file raises RecordError naming it."""
        return cls.from_bytes(read_bytes(path), source=os.fspath(path), dtype_policy=dtype_policy,
                              validate=validate, allow_partial=allow_partial)


def _entry(path: str, entry: Any) -> RecordEntry:
    """An entry given as a RecordEntry or an (id, array) pair, with a ParamId and a numpy array."""
    if isinstance(entry, RecordEntry):
        entry = (entry.id, entry.array)
    if not (isinstance(entry, tuple) and len(entry) == 2):
        raise RecordError(f"ModuleRecord: entry {path!r} must be a RecordEntry or an (id, array) pair")
    return RecordEntry(ParamId(int(entry[0])), np.asarray(entry[1]))


# --- collecting ------------------------------------------------------------------------------------------
def _recorded_slots(module: Module) -> Iterator[tuple[str, Param]]:
    """The parameters and persistent buffers a record holds, by path."""
    for path, param in module.named_param_slots():
        if not (param.is_buffer and not param.persistent):
            yield path, param


def _collect(module: Module, group: ParamGroup | None = None) -> ModuleRecord:
    """The record of the module's parameters (those `group` matches): their tensors and structure notes."""
    slots = list(_recorded_slots(module))
    entries = {key: RecordEntry(pid, array) for path, p in slots if group is None or group.matches(path, p)
               for key, pid, array in layout.recorded_tensors(path, p)}
    return ModuleRecord(entries, allow_partial=group is not None, metadata=layout.structure_metadata(slots, entries))


def into_record(module: Module) -> ModuleRecord:
    """Collect the module's parameters and persistent buffers, through their save mappers, into a record."""
    return _collect(module)


def into_record_group(module: Module, group: ParamGroup) -> ModuleRecord:
    """Collect only the tensors the group matches; the others are skipped before their data is read."""
    return _collect(module, group)


# --- applying --------------------------------------------------------------------------------------------
def _prepared(path: str, param: Param, entry: RecordEntry, record: ModuleRecord, problems: list[str]) -> Any:
    """The array to load into `param` (cast per the dtype policy), or None after noting a problem."""
    array, dtype = entry.array, param.lazy_dtype
    if array.dtype != dtype.numpy:
        if record.dtype_policy == "strict":
            problems.append(f"{path}: the record holds {array.dtype}, the module {dtype} (dtype_policy='strict')")
            return None
        array = array.astype(dtype.numpy)
    mapped = None
    if param.mapper.load:
        try:
            mapped = param.mapper.on_load(Tensor._wrap(array, True, param.lazy_device))
        except Exception as err:  # user code: report it with the path, as every other problem
            problems.append(f"{path}: the load mapper raised {type(err).__name__}: {err}")
            return None
    shape = tuple(mapped.shape) if mapped is not None else array.shape
    if record.validate and shape != tuple(param.lazy_shape):
        loaded = "loads as" if mapped is not None else "has"
        problems.append(f"{path}: the record {loaded} shape {shape}, the module has {tuple(param.lazy_shape)}")
        return None
    if mapped is not None and mapped.dtype != dtype:
        problems.append(f"{path}: the load mapper turns {dtype} into {mapped.dtype}")
        return None
    return array


def try_load_record(module: Module, record: ModuleRecord) -> Module:
    """Apply a record: each tensor through its Param's load mapper, the record's ids kept; all-or-nothing.

    A quantized parameter loads its codes and scales; adapter factors load as the parameters they are. Entries
    for adapters or quantization the module's parameter does not have are errors, skipped with allow_partial.
    """
    slots = dict(_recorded_slots(module))
    expected = layout.expected_keys(slots)
    unexpected = [p for p in record if p not in expected]
    mismatched, explained, differs = layout.structural_mismatches(unexpected, slots)
    # a parameter whose structure differs is reported once, by its note, not also as missing
    path_of = {id(param): path for path, param in slots.items()}
    missing = [p for p, (param, _) in expected.items() if p not in record and path_of[id(param)] not in differs]
    unknown = [p for p in unexpected if p not in explained]
    problems: list[str] = []
    if mismatched and not record.allow_partial:
        problems += mismatched + ["(use allow_partial=True to load only what the module's structure holds)"]
    if missing and not record.allow_partial:
        problems.append(f"missing from the record: {', '.join(missing)} (use allow_partial=True to load a part)")
    if unknown:
        problems.append(f"not in the module: {', '.join(unknown)}")
    prepared = {}
    for key, entry in record.items():
        if key in expected:
            param, suffix = expected[key]
            array = (_prepared(key, param, entry, record, problems) if not suffix else
                     layout.prepared_packed(key, param, suffix, entry.array, record.validate, problems))
            if array is not None:
                prepared[key] = array
    problems += layout.structure_problems(record.metadata, slots, prepared)
    if problems:
        raise RecordError(f"cannot load {record.source} into {type(module).__name__}:\n  " + "\n  ".join(problems))
    for key, array in prepared.items():
        param, suffix = expected[key]
        if suffix:
            layout.load_packed(param, suffix, array, record[key].id)
        else:
            param.transform_for_load(array, record[key].id)
    return module


def load_record(module: Module, record: ModuleRecord) -> Module:
    """Apply a record, consuming and returning the module; raises RecordError as try_load_record does."""
    return try_load_record(module, record)


def save_file(module: Module, path: str | os.PathLike[str]) -> None:
    """Save the module's parameters to a record file (into_record, then ModuleRecord.save)."""
    into_record(module).save(path)


def try_load_file(module: Module, path: str | os.PathLike[str]) -> Module:
    """Load the module's parameters from a record file with the default options; RecordError on any problem."""
    return try_load_record(module, ModuleRecord.load(path))


def load_file(module: Module, path: str | os.PathLike[str]) -> Module:
    """Load the module's parameters from a record file, returning the module; raises RecordError on failure."""
    return try_load_file(module, path)
