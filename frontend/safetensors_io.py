"""Reading and writing safetensors containers: checked decoding and canonical encoding.

Decoding is done here rather than by the safetensors package so that every defect of a damaged file (truncated
header, malformed or deeply nested JSON, invalid shapes, offsets outside the data, overlapping tensors, sizes over
the BRAZE_MAX_TENSOR_BYTES cap) becomes a RecordError that names the file and the problem, and so that bfloat16
tensors (which numpy lacks) can be read as float32. Encoding is done here too, so that the same tensors and
metadata always give the same bytes: the header's keys are sorted and the tensors laid out by alignment, then name.
"""
from __future__ import annotations

import json
import struct
from typing import Mapping

import numpy as np

from braze.ir.errors import RecordError

from .read_limits import is_int, load_json, tensor_bytes

_HEADER_LIMIT = 100 * 1024 * 1024  # the safetensors specification caps the JSON header at 100 MB

_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U64": np.dtype("<u8"), "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("bool"), "BF16": np.dtype("<u2"),
}
_NAMES = {dtype.newbyteorder("="): name for name, dtype in _DTYPES.items() if name != "BF16"}


def bfloat16_to_float32(bits: np.ndarray) -> np.ndarray:
    """Widen raw bfloat16 bit patterns (uint16) to float32 exactly: bfloat16 is the top half of a float32.

    Shifting in place keeps a 0-dim input an array (an operator on it would give a numpy scalar)."""
    wide = np.array(bits, dtype=np.uint32)
    wide <<= 16
    return wide.view(np.float32)


def encode(tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> bytes:
    """The safetensors bytes of named arrays with a string metadata header, the same bytes for the same input."""
    arrays = {str(name): np.asarray(array) for name, array in tensors.items()}
    header: dict[str, object] = {"__metadata__": {str(k): str(v) for k, v in metadata.items()}} if metadata else {}
    chunks, position = [], 0
    for name in sorted(arrays, key=lambda n: (-arrays[n].dtype.itemsize, n)):  # widest first keeps alignment
        array = arrays[name]
        dtype_name = _NAMES.get(array.dtype.newbyteorder("="))
        if dtype_name is None:
            raise RecordError(f"cannot encode tensor {name!r} as safetensors: unsupported dtype {array.dtype}")
        data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype_name, "shape": list(array.shape),
                        "data_offsets": [position, position + len(data)]}
        chunks.append(data)
        position += len(data)
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data section starts 8-byte aligned
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def decode(data: bytes, source: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Named arrays and the string metadata of a safetensors buffer; `source` names it in errors."""
    header, start = _header(data, source)
    raw_meta = header.pop("__metadata__", None) or {}
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
        text = bytes(data[8:8 + length]).decode("utf-8")
    except UnicodeDecodeError as err:
        raise RecordError(f"{source}: corrupt safetensors header (not UTF-8: {err})") from None
    header = load_json(text, f"{source}: corrupt safetensors header")
    if not isinstance(header, dict):
        raise RecordError(f"{source}: corrupt safetensors header (a JSON object was expected)")
    return header, 8 + length


def _tensor(name: str, info: object, body: memoryview, source: str) -> tuple[np.ndarray, tuple[int, int]]:
    """One tensor's array (a copy) and its byte span, after checking its entry."""
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise RecordError(f"{source}: corrupt safetensors header: entry {name!r} lacks dtype, shape or data_offsets")
    dtype_name, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not (isinstance(dtype_name, str) and dtype_name in _DTYPES):
        raise RecordError(f"{source}: tensor {name!r} has unsupported dtype {str(dtype_name)[:40]!r} (supported: "
                          f"{', '.join(_DTYPES)})")
    dtype = _DTYPES[dtype_name]
    expected = tensor_bytes(f"{source}: tensor {name!r}", shape, dtype.itemsize)
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(is_int(o) for o in offsets)
            and 0 <= offsets[0] <= offsets[1]):
        raise RecordError(f"{source}: tensor {name!r} has invalid data offsets {str(offsets)[:80]}")
    begin, end = offsets
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
