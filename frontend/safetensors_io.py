"""Reading and writing safetensors containers: checked decoding, encoding through the safetensors package, and
atomic file writes.

Decoding is done here rather than by the package so that every defect of a damaged file (truncated header,
malformed JSON, offsets outside the data, overlapping tensors) becomes a RecordError that names the file and
the problem, and so that bfloat16 tensors (which numpy lacks) can be read as float32.
"""
from __future__ import annotations

import json
import math
import os
import stat
import struct
import tempfile
from typing import Mapping

import numpy as np
import safetensors.numpy

from braze.ir.errors import RecordError

_HEADER_LIMIT = 100 * 1024 * 1024  # the safetensors specification caps the JSON header at 100 MB
_UMASK = os.umask(0o022)
os.umask(_UMASK)

_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("bool"), "BF16": np.dtype("<u2"),
}


def bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    """Widen raw bfloat16 bit patterns (uint16) to float32 exactly: bfloat16 is the top half of a float32."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def encode(tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> bytes:
    """The safetensors bytes of named arrays with a string metadata header."""
    arrays = {name: np.asarray(array, order="C") for name, array in tensors.items()}
    try:
        return safetensors.numpy.save(arrays, metadata=dict(metadata))
    except Exception as err:  # the package raises its own error types for unsupported dtypes
        raise RecordError(f"cannot encode tensors as safetensors: {err}") from err


def decode(data: bytes, source: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Named arrays and the string metadata of a safetensors buffer; `source` names it in errors."""
    header, start = _header(data, source)
    raw_meta = header.pop("__metadata__", {}) or {}
    if not isinstance(raw_meta, dict) or not all(isinstance(v, str) for v in raw_meta.values()):
        raise RecordError(f"{source}: the safetensors metadata must map strings to strings")
    body = memoryview(data)[start:]
    spans: list[tuple[int, int, str]] = []
    tensors: dict[str, np.ndarray] = {}
    for name, info in header.items():
        array, span = _tensor(name, info, body, source)
        tensors[name] = array
        spans.append((*span, name))
    _check_layout(spans, len(body), source)
    return tensors, dict(raw_meta)


def _header(data: bytes, source: str) -> tuple[dict, int]:
    if len(data) < 8:
        raise RecordError(f"{source}: not a safetensors file (truncated: {len(data)} bytes, no header length)")
    (length,) = struct.unpack("<Q", data[:8])
    if length > _HEADER_LIMIT:
        raise RecordError(f"{source}: not a safetensors file (header length {length} exceeds the 100 MB limit)")
    if 8 + length > len(data):
        raise RecordError(f"{source}: truncated safetensors file: the header declares {length} bytes but only "
                          f"{len(data) - 8} follow")
    try:
        header = json.loads(bytes(data[8:8 + length]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RecordError(f"{source}: corrupt safetensors header (not valid JSON: {err})") from None
    if not isinstance(header, dict):
        raise RecordError(f"{source}: corrupt safetensors header (a JSON object was expected)")
    return header, 8 + length


def _tensor(name: str, info: object, body: memoryview, source: str) -> tuple[np.ndarray, tuple[int, int]]:
    """One tensor's array (a copy) and its byte span, after checking its entry."""
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise RecordError(f"{source}: corrupt safetensors header: entry {name!r} lacks dtype, shape or data_offsets")
    dtype_name, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if dtype_name not in _DTYPES:
        raise RecordError(f"{source}: tensor {name!r} has unsupported dtype {dtype_name!r}")
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise RecordError(f"{source}: tensor {name!r} has an invalid shape {shape!r}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
            and 0 <= offsets[0] <= offsets[1]):
        raise RecordError(f"{source}: tensor {name!r} has invalid data offsets {offsets!r}")
    begin, end = offsets
    dtype = _DTYPES[dtype_name]
    expected = math.prod(shape) * dtype.itemsize  # exact: a crafted shape must not wrap around to a small size
    if end - begin != expected:
        raise RecordError(f"{source}: tensor {name!r} of dtype {dtype_name} and shape {tuple(shape)} needs "
                          f"{expected} bytes but its offsets span {end - begin}")
    if end > len(body):
        raise RecordError(f"{source}: truncated safetensors file: tensor {name!r} ends at byte {end} of the data "
                          f"section, which has only {len(body)} bytes")
    array = np.frombuffer(body[begin:end], dtype=dtype).reshape(shape)
    array = bfloat16_to_float32(array) if dtype_name == "BF16" else array.astype(dtype.newbyteorder("="))
    return array, (begin, end)


def _check_layout(spans: list[tuple[int, int, str]], size: int, source: str) -> None:
    """Tensors must tile the data section exactly: no overlaps, no gaps, no trailing bytes."""
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            problem = "overlaps the previous tensor" if begin < position else f"leaves a gap before byte {begin}"
            raise RecordError(f"{source}: corrupt safetensors file: tensor {name!r} {problem}")
        position = end
    if position != size:
        raise RecordError(f"{source}: corrupt safetensors file: {size - position} bytes after the last tensor")


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """The contents of a file, or RecordError naming it."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as err:
        raise RecordError(f"{os.fspath(path)}: cannot read: {err.strerror or err}") from None


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write a file so that readers see the old contents or the new, never a partial one."""
    target = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(target)
    try:
        fd, temp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=directory)
    except OSError as err:
        raise RecordError(f"{target}: cannot write: {err.strerror or err}") from None
    try:
        # mkstemp creates the file private (0600); give it the mode a plain open() would have
        mode = stat.S_IMODE(os.stat(target).st_mode) if os.path.exists(target) else 0o666 & ~_UMASK
        os.chmod(temp, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, target)
    except OSError as err:
        _remove_quietly(temp)
        raise RecordError(f"{target}: cannot write: {err.strerror or err}") from None
    except BaseException:
        _remove_quietly(temp)
        raise


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
