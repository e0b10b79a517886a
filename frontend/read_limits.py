"""Limits for reading untrusted files: tensor sizes against the BRAZE_MAX_TENSOR_BYTES cap, JSON headers of bounded
depth and number length, and ids that fit the IR's 64-bit integers.

Every check happens before anything is allocated from the file's numbers, and every failure is a RecordError
naming what was being read, so a damaged or hostile file never escapes as RecursionError, OverflowError or
MemoryError.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

from braze.ir.errors import RecordError
from braze.ir.types import MAX_RANK, MAX_TENSOR_BYTES_ENV, max_tensor_bytes  # the one size cap, shared with the IR

MAX_ID = 2 ** 63 - 1  # ParamIds are printed into IR text as signed 64-bit integers
MAX_JSON_DEPTH = 32
_MAX_NUMBER_CHARS = 40
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def is_int(value: Any) -> bool:
    """True for a Python int that is not a bool (JSON and pickles give both)."""
    return isinstance(value, int) and not isinstance(value, bool)


def tensor_bytes(what: str, shape: Any, itemsize: int) -> int:
    """The byte size of a tensor of `shape`, after checking the shape's rank and entries and the size cap."""
    if not (isinstance(shape, (list, tuple)) and len(shape) <= MAX_RANK and all(is_int(d) and d >= 0 for d in shape)):
        raise RecordError(f"{what} has an invalid shape {_short(shape)} (at most {MAX_RANK} non-negative integers)")
    nbytes = math.prod(shape) * itemsize
    limit = max_tensor_bytes()
    if nbytes > limit:
        raise RecordError(f"{what} of shape {_short(shape)} needs {nbytes} bytes, more than the limit of {limit} "
                          f"bytes ({MAX_TENSOR_BYTES_ENV})")
    return nbytes


def checked_id(what: str, value: Any) -> int:
    """A recorded id: an integer from 0 to 2**63 - 1."""
    if not (is_int(value) and 0 <= value <= MAX_ID):
        raise RecordError(f"{what} is {_short(value)}, not an integer from 0 to {MAX_ID}")
    return value


def load_json(text: str, what: str) -> Any:
    """Parse JSON from a file header, refusing nesting deeper than MAX_JSON_DEPTH, overlong numbers, NaN and
    Infinity; every problem is a RecordError naming `what`."""
    depth = 0
    for token in _JSON_TOKENS.finditer(text):
        bracket = token.group()
        if bracket in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise RecordError(f"{what}: JSON nested more than {MAX_JSON_DEPTH} levels deep")
        elif bracket in "]}":
            depth -= 1
    try:
        return json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_refuse_constant)
    except RecordError as err:
        raise RecordError(f"{what}: {err}") from None
    except (ValueError, RecursionError) as err:
        raise RecordError(f"{what}: not valid JSON ({err})") from None


def _parse_int(text: str) -> int:
    if len(text) > _MAX_NUMBER_CHARS:
        raise RecordError(f"a number of {len(text)} digits is too long")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text) if len(text) <= _MAX_NUMBER_CHARS else math.inf
    if not math.isfinite(value):
        raise RecordError(f"the number {text[:_MAX_NUMBER_CHARS]!r} is not a finite float")
    return value


def _refuse_constant(name: str) -> None:
    raise RecordError(f"{name} is not a JSON number")


def _short(value: Any) -> str:
    if is_int(value) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"  # repr() refuses integers of more than 4300 digits
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
