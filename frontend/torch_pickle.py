"""Read PyTorch state-dict files (.pt/.pth, zip or legacy format, and safetensors) into numpy arrays without torch.

A torch checkpoint is a pickle, and unpickling runs whatever callables the file names. The unpickler here
resolves only the globals a state dict needs (the tensor-rebuild functions, the storage types, the dtypes and
a few plain containers) to inert stand-ins defined in this file, and refuses every other global with a
RecordError, so a file can describe tensors but never run code. Tensors are rebuilt from their storages with
bounds-checked strides and offsets; bfloat16 becomes float32, every other dtype keeps its numpy equivalent.
"""
from __future__ import annotations

import io
import os
import pickle
import re
import struct
import zipfile
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from braze.ir.errors import RecordError

from .safetensors_io import bfloat16_to_float32, decode, read_bytes

_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001
_BF16 = "bfloat16"

# element dtype of each storage type (little-endian layout; "bfloat16" is read as uint16 bits, then widened)
_STORAGE_TYPES: dict[str, str] = {
    "DoubleStorage": "f8", "FloatStorage": "f4", "HalfStorage": "f2", "BFloat16Storage": _BF16,
    "LongStorage": "i8", "IntStorage": "i4", "ShortStorage": "i2", "CharStorage": "i1", "ByteStorage": "u1",
    "BoolStorage": "?", "UntypedStorage": "u1",
}
_TORCH_DTYPES: dict[str, str] = {
    "float64": "f8", "double": "f8", "float32": "f4", "float": "f4", "float16": "f2", "half": "f2",
    "bfloat16": _BF16, "int64": "i8", "long": "i8", "int32": "i4", "int": "i4", "int16": "i2", "short": "i2",
    "int8": "i1", "uint8": "u1", "bool": "?",
}


class _Inert:
    """Base of the stand-ins a pickle may reference: pickle's BUILD opcode must not alter them."""

    __slots__ = ()

    def __setstate__(self, state: Any) -> None:
        raise RecordError(f"the pickle tries to set the state of a {type(self).__name__.lstrip('_')}")


class _StorageType(_Inert):
    """Stands for torch.FloatStorage and its kind: names the element type of a storage."""

    __slots__ = ("name", "element")

    def __init__(self, name: str, element: str) -> None:
        self.name, self.element = name, element


class _DType(_Inert):
    """Stands for torch.float32 and the other dtypes."""

    __slots__ = ("name", "element")

    def __init__(self, name: str, element: str) -> None:
        self.name, self.element = name, element


class _Storage(_Inert):
    """A flat run of elements; its bytes arrive with the persistent id (zip) or after the pickle (legacy)."""

    __slots__ = ("key", "element", "numel", "root", "offset", "raw")

    def __init__(self, key: str, element: str, numel: int, root: _Storage | None = None, offset: int = 0) -> None:
        self.key, self.element, self.numel, self.root, self.offset = key, element, numel, root, offset
        self.raw: np.ndarray | None = None

    @property
    def storage_dtype(self) -> np.dtype:
        return np.dtype("<u2" if self.element == _BF16 else "<" + self.element if len(self.element) > 1
                        else self.element)

    def fill(self, data: bytes, byteorder: str) -> None:
        dtype = self.storage_dtype.newbyteorder(">" if byteorder == "big" else "<")
        expected = self.numel * dtype.itemsize
        if len(data) != expected:
            raise RecordError(f"storage {self.key!r} holds {len(data)} bytes but the pickle declares {self.numel} "
                              f"elements ({expected} bytes)")
        self.raw = np.frombuffer(data, dtype=dtype)

    def array(self) -> np.ndarray:
        if self.root is not None:
            return self.root.array()[self.offset:self.offset + self.numel]
        if self.raw is None:
            raise RecordError(f"the data of storage {self.key!r} is missing from the file")
        return self.raw


class _TensorRef(_Inert):
    """A tensor described by the pickle, rebuilt into an array once every storage holds its bytes."""

    __slots__ = ("storage", "offset", "size", "stride")

    def __init__(self, storage: Any, offset: Any, size: Any, stride: Any) -> None:
        if not isinstance(storage, _Storage):
            raise RecordError(f"a tensor is rebuilt from a {type(storage).__name__}, not from a tensor storage")
        if not (_is_int(offset) and offset >= 0):
            raise RecordError(f"a tensor has an invalid storage offset {offset!r}")
        if not (isinstance(size, tuple) and isinstance(stride, tuple) and len(size) == len(stride)
                and all(_is_int(d) and d >= 0 for d in size) and all(_is_int(s) and s >= 0 for s in stride)):
            raise RecordError(f"a tensor has an invalid size {size!r} or stride {stride!r}")
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride

    def materialize(self) -> np.ndarray:
        element = self.storage.element
        flat = self.storage.array()
        if 0 in self.size:
            out = np.empty(self.size, dtype=flat.dtype)
        else:
            last = self.offset + sum((d - 1) * s for d, s in zip(self.size, self.stride))
            if last >= flat.size:
                raise RecordError(f"a tensor of size {self.size} with stride {self.stride} at offset {self.offset} "
                                  f"reaches element {last} of storage {self.storage.key!r}, which has {flat.size}")
            view = np.lib.stride_tricks.as_strided(flat[self.offset:], shape=self.size,
                                                   strides=tuple(s * flat.itemsize for s in self.stride))
            out = np.array(view, copy=True)
        out = out.astype(out.dtype.newbyteorder("="), copy=False)
        return bfloat16_to_float32(out) if element == _BF16 else out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any) -> _TensorRef:
    return _TensorRef(storage, offset, size, stride)


def _rebuild_tensor_v2(storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any = False,
                       backward_hooks: Any = None, metadata: Any = None) -> _TensorRef:
    return _TensorRef(storage, offset, size, stride)


def _rebuild_parameter(data: Any, requires_grad: Any = True, backward_hooks: Any = None,
                       state: Any = None) -> _TensorRef:
    if not isinstance(data, _TensorRef):
        raise RecordError(f"a parameter wraps a {type(data).__name__}, not a tensor")
    return data


def _encode(text: Any, encoding: str = "latin1") -> bytes:
    """pickle protocol 2 writes bytes as _codecs.encode(str, "latin1"); nothing else is allowed."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise RecordError("the pickle calls _codecs.encode with arguments other than a latin1 string")
    return text.encode("latin1")


_ALLOWED: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("_codecs", "encode"): _encode,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    **{("torch", name): _StorageType(name, element) for name, element in _STORAGE_TYPES.items()},
    ("torch.storage", "UntypedStorage"): _StorageType("UntypedStorage", "u1"),
    **{("torch", name): _DType(name, element) for name, element in _TORCH_DTYPES.items()},
}


class _Unpickler(pickle.Unpickler):
    """An unpickler that resolves only the globals in _ALLOWED and hands storages to `on_storage`."""

    def __init__(self, file: io.BytesIO, on_storage: Callable[[tuple[Any, ...]], _Storage] | None) -> None:
        super().__init__(file)
        self._on_storage = on_storage

    def find_class(self, module: str, name: str) -> Any:
        found = _ALLOWED.get((module, name))
        if found is None:
            raise RecordError(f"the pickle asks for the global {module}.{name}, which a state-dict file may not "
                              f"reference (only tensor storages and plain containers are allowed; nothing from "
                              f"the file is run)")
        return found

    def persistent_load(self, pid: Any) -> Any:
        if (self._on_storage is None or not isinstance(pid, tuple) or not pid
                or _text(pid[0]) != "storage"):
            raise RecordError(f"the pickle has an unsupported persistent id {pid!r:.80}")
        return self._on_storage(pid[1:])


def _text(value: Any) -> Any:
    return value.decode("ascii", "replace") if isinstance(value, bytes) else value


def _storage_type(value: Any) -> _StorageType:
    if not isinstance(value, _StorageType):
        raise RecordError(f"a storage has type {value!r:.60}, not a torch storage type")
    return value


def _materialize(obj: Any) -> Any:
    """The unpickled object with every tensor reference replaced by its array."""
    if isinstance(obj, _TensorRef):
        return obj.materialize()
    if isinstance(obj, dict):
        return {k: _materialize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_materialize(v) for v in obj)
    return obj


def _load_zip(data: bytes, source: str) -> Any:
    """The object of a zip-format file (torch >= 1.6): <root>/data.pkl plus one entry per storage."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pickles) != 1:
            raise RecordError(f"{source}: the zip archive has no <root>/data.pkl entry; not a torch state-dict file")
        root = pickles[0][: -len("data.pkl")]
        names = set(archive.namelist())
        byteorder = archive.read(root + "byteorder").decode().strip() if root + "byteorder" in names else "little"
        storages: dict[str, _Storage] = {}

        def on_storage(fields: tuple[Any, ...]) -> _Storage:
            if len(fields) != 4:
                raise RecordError(f"a storage id has {len(fields)} fields, 4 expected")
            kind, key, _location, numel = _storage_type(fields[0]), _text(fields[1]), fields[2], fields[3]
            if not (isinstance(key, str) and re.fullmatch(r"\w+", key) and _is_int(numel) and numel >= 0):
                raise RecordError(f"a storage id names key {key!r:.40} with {numel!r:.20} elements")
            if key not in storages:
                entry = f"{root}data/{key}"
                if entry not in names:
                    raise RecordError(f"the archive lacks the data of storage {key!r} ({entry})")
                storage = storages[key] = _Storage(key, kind.element, numel)
                storage.fill(archive.read(entry), byteorder)
            return storages[key]

        return _Unpickler(io.BytesIO(archive.read(pickles[0])), on_storage).load()


def _load_legacy(data: bytes, source: str) -> Any:
    """The object of a pre-1.6 file: magic, protocol and system pickles, the object, its storage keys, the data."""
    stream = io.BytesIO(data)
    if _Unpickler(stream, None).load() != _LEGACY_MAGIC:
        raise RecordError(f"{source}: not a torch file (a pickle, but without torch's magic number)")
    if _Unpickler(stream, None).load() != _LEGACY_PROTOCOL:
        raise RecordError(f"{source}: unsupported legacy torch protocol version")
    info = _Unpickler(stream, None).load()
    byteorder = "little" if not isinstance(info, dict) or info.get("little_endian", True) else "big"
    storages: dict[str, _Storage] = {}

    def on_storage(fields: tuple[Any, ...]) -> _Storage:
        if len(fields) != 5:
            raise RecordError(f"a legacy storage id has {len(fields)} fields, 5 expected")
        kind, key, _location, numel, view = _storage_type(fields[0]), _text(fields[1]), *fields[2:]
        if not (isinstance(key, str) and _is_int(numel) and numel >= 0):
            raise RecordError(f"a storage id names key {key!r:.40} with {numel!r:.20} elements")
        root = storages.setdefault(key, _Storage(key, kind.element, numel))
        if view is None:
            return root
        if not (isinstance(view, tuple) and len(view) == 3 and _is_int(view[1]) and _is_int(view[2])
                and 0 <= view[1] and view[1] + view[2] <= root.numel):
            raise RecordError(f"storage view {view!r:.60} lies outside storage {key!r}")
        return storages.setdefault(_text(view[0]), _Storage(_text(view[0]), root.element, view[2], root, view[1]))

    obj = _Unpickler(stream, on_storage).load()
    keys = _Unpickler(stream, None).load()
    if not isinstance(keys, list):
        raise RecordError(f"{source}: corrupt legacy torch file (the storage key list is missing)")
    for key in keys:
        storage = storages.get(_text(key))
        if storage is None or storage.root is not None:
            raise RecordError(f"{source}: the data section names storage {key!r:.40}, which no tensor uses")
        header = stream.read(8)
        if len(header) != 8:
            raise RecordError(f"{source}: truncated legacy torch file (storage {key!r} has no size)")
        (numel,) = struct.unpack("<q" if byteorder == "little" else ">q", header)
        storage.fill(stream.read(max(numel, 0) * storage.storage_dtype.itemsize), byteorder)
    return obj


def load_torch_file(path: str | os.PathLike[str]) -> Any:
    """The object saved in a torch file (containers of numpy arrays), read without torch and without running code."""
    return load_torch_bytes(read_bytes(path), os.fspath(path))


def load_torch_bytes(data: bytes, source: str) -> Any:
    """The object of a torch file's contents; `source` names it in errors."""
    if len(data) >= 9 and data[8:9] == b"{":  # safetensors: a little-endian header length, then its JSON
        return decode(data, source)[0]
    if data[:4] == b"PK\x03\x04":
        loader = _load_zip
    elif data[:2] == b"\x80\x02":
        loader = _load_legacy
    elif len(data) > 262 and data[257:262] == b"ustar":
        raise RecordError(f"{source}: the tar-based torch format (before PyTorch 0.4) is not supported; re-save the "
                          f"file with a recent torch")
    else:
        raise RecordError(f"{source}: not a torch state-dict file (neither a zip archive, a legacy pickle nor "
                          f"safetensors)")
    try:
        return _materialize(loader(data, source))
    except RecordError as err:
        message = str(err)
        raise RecordError(message if message.startswith(source) else f"{source}: {message}") from None
    except zipfile.BadZipFile as err:
        raise RecordError(f"{source}: corrupt zip archive ({err})") from None
    except Exception as err:  # a damaged or hostile pickle fails inside pickle with many error types
        raise RecordError(f"{source}: corrupt torch file ({type(err).__name__}: {err})") from None


def load_torch_state_dict(path: str | os.PathLike[str], key: str | None = None) -> dict[str, np.ndarray]:
    """A PyTorch state dict (.pt/.pth, zip or legacy format, or safetensors) as a dict of numpy arrays.

    `key` selects a nested state dict in a checkpoint that stores more than one (e.g. key="model").
    """
    source = os.fspath(path)
    obj = load_torch_file(path)
    if key is not None:
        if not isinstance(obj, dict) or key not in obj:
            raise RecordError(f"{source}: the file holds no entry {key!r}")
        obj = obj[key]
    if not isinstance(obj, dict):
        raise RecordError(f"{source}: the file holds a {type(obj).__name__}, not a state dict")
    for name, value in obj.items():
        if not isinstance(value, np.ndarray):
            hint = f"; pass key={name!r} to read the state dict inside it" if isinstance(value, dict) else ""
            raise RecordError(f"{source}: entry {name!r} is a {type(value).__name__}, not a tensor{hint}")
    return {str(name): value for name, value in obj.items()}
