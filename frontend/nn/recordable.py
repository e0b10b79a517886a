"""The record methods of document 001, shared by Module and by a lone Param (which document 002 makes a module).

Anything with `named_param_slots()` can be recorded; the work is done in braze.frontend.records, imported when
called because records itself builds on Param.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from ..records import ModuleRecord
    from .group import ParamGroup

Self = TypeVar("Self", bound="Recordable")


def _records() -> Any:
    from .. import records
    return records


class Recordable:
    """into_record / load_record / save_file and their group and fallible variants."""

    __slots__ = ()

    def into_record(self) -> ModuleRecord:
        """The parameters and persistent buffers (through their save mappers) with their ids; flags are not recorded."""
        return _records().into_record(self)

    def into_record_group(self, group: ParamGroup) -> ModuleRecord:
        """The record of the values `group` matches; the others are skipped before their data is read."""
        return _records().into_record_group(self, group)

    def try_load_record(self: Self, record: ModuleRecord) -> Self:
        """Apply a record (its dtype policy, validate and allow_partial); RecordError leaves the module unchanged."""
        return _records().try_load_record(self, record)

    def load_record(self: Self, record: ModuleRecord) -> Self:
        """Apply a record and return the module; raises RecordError as try_load_record does."""
        return _records().load_record(self, record)

    def save_file(self, path: str | os.PathLike[str]) -> None:
        """Save the parameters to a record file (safetensors, written atomically)."""
        _records().save_file(self, path)

    def load_file(self: Self, path: str | os.PathLike[str]) -> Self:
        """Load the parameters from a record file with the default options; raises RecordError on failure."""
        return _records().load_file(self, path)

    def try_load_file(self: Self, path: str | os.PathLike[str]) -> Self:
        """Load the parameters from a record file with the default options; RecordError on any problem."""
        return _records().try_load_file(self, path)
