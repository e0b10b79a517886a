"""Read PyTorch state-dict files (.pt/.pth, zip or legacy format, and safetensors) into numpy arrays without torch.

A torch checkpoint is a pickle, and unpickling runs whatever callables the file names. The unpickler here
resolves only the globals a state dict needs (the tensor-rebuild functions, the storage types, the dtypes and
a few plain containers) to immutable stand-ins defined here, and refuses every other global with a RecordError,
so a file can describe tensors but never run code or change how later files load. Before unpickling, the memo
indices are checked (the C unpickler sizes its memo by them); zip entries are read only up to the size the pickle
declares; objects the pickle shares stay shared when tensor references become arrays. Tensors are views of their
storages (torch_storage.py); bfloat16 becomes float32, every other dtype keeps its numpy equivalent, and dtypes
numpy lacks (float8, quantized) are refused by name.
"""
from __future__ import annotations

import io
import os
import pickle
import pickletools
import re
import struct
import warnings
import zipfile
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from braze.ir.errors import RecordError

from .atomic_files import read_bytes
from .read_limits import is_int, max_tensor_bytes
from .safetensors_io import decode
from .torch_storage import STORAGE_TYPES, TORCH_DTYPES, Inert, Storage, TensorRef, check_readable

_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL = 1001
MAX_NESTING = 100  # containers in containers: a state dict needs a few levels
_SMALL_ENTRY_BYTES = 4096  # the byteorder entry of a zip file
_MEMO_OPS = {"PUT", "BINPUT", "LONG_BINPUT", "GET", "BINGET", "LONG_BINGET"}


class _StorageType(Inert):
    """Stands for torch.FloatStorage and its kind: names the element type of a storage."""

    __slots__ = ("name", "element")

    def __init__(self, name: str, element: str | None) -> None:
        self.name, self.element = name, element


class _DType(Inert):
    """Stands for torch.float32 and the other dtypes."""

    __slots__ = ("name", "element")

    def __init__(self, name: str, element: str | None) -> None:
        self.name, self.element = name, element


class _Function(Inert):
    """Stands for one of torch's rebuild functions; immutable, so a pickle cannot change it for later loads."""

    __slots__ = ("name", "_function")

    def __init__(self, function: Callable[..., Any]) -> None:
        self.name, self._function = function.__name__.lstrip("_"), function

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._function(*args, **kwargs)


def _rebuild_tensor(storage: Any, offset: Any, size: Any, stride: Any) -> TensorRef:
    return TensorRef(storage, offset, size, stride)


def _rebuild_tensor_v2(storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any = False,
                       backward_hooks: Any = None, metadata: Any = None) -> TensorRef:
    return TensorRef(storage, offset, size, stride)


def _rebuild_tensor_v3(storage: Any, offset: Any, size: Any, stride: Any, requires_grad: Any = False,
                       backward_hooks: Any = None, dtype: Any = None, metadata: Any = None) -> TensorRef:
    """torch >= 2.3 writes tensors of dtypes without a typed storage (uint16/32/64, float8) over an untyped one."""
    if not isinstance(dtype, _DType):
        raise RecordError(f"a tensor is rebuilt with dtype {str(dtype)[:40]}, not a torch dtype")
    return TensorRef(storage, offset, size, stride, check_readable("dtype", dtype.name, dtype.element))


def _rebuild_parameter(data: Any, requires_grad: Any = True, backward_hooks: Any = None,
                       state: Any = None) -> TensorRef:
    if not isinstance(data, TensorRef):
        raise RecordError(f"a parameter wraps a {type(data).__name__}, not a tensor")
    return data


def _rebuild_qtensor(*args: Any) -> TensorRef:
    raise RecordError("the file holds a quantized torch tensor (torch.quantize_per_tensor and kin), which braze "
                      "cannot read: save its dequantize() instead")


def _encode(text: Any, encoding: str = "latin1") -> bytes:
    """pickle protocol 2 writes bytes as _codecs.encode(str, "latin1"); nothing else is allowed."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise RecordError("the pickle calls _codecs.encode with arguments other than a latin1 string")
    return text.encode("latin1")


_ALLOWED: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch._utils", "_rebuild_tensor"): _Function(_rebuild_tensor),
    ("torch._utils", "_rebuild_tensor_v2"): _Function(_rebuild_tensor_v2),
    ("torch._utils", "_rebuild_tensor_v3"): _Function(_rebuild_tensor_v3),
    ("torch._utils", "_rebuild_parameter"): _Function(_rebuild_parameter),
    ("torch._utils", "_rebuild_parameter_with_state"): _Function(_rebuild_parameter),
    ("torch._utils", "_rebuild_qtensor"): _Function(_rebuild_qtensor),
    ("_codecs", "encode"): _Function(_encode),
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    **{("torch", name): _StorageType(name, element) for name, element in STORAGE_TYPES.items()},
    ("torch.storage", "UntypedStorage"): _StorageType("UntypedStorage", "u1"),
    **{("torch", name): _DType(name, element) for name, element in TORCH_DTYPES.items()},
}


class _Unpickler(pickle.Unpickler):
    """An unpickler that resolves only the globals in _ALLOWED and hands storages to `on_storage`."""

    def __init__(self, file: io.BytesIO, on_storage: Callable[[tuple[Any, ...]], Storage] | None) -> None:
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
            raise RecordError(f"the pickle has an unsupported persistent id {str(pid)[:80]}")
        return self._on_storage(pid[1:])


def _unpickle(stream: io.BytesIO, on_storage: Callable[[tuple[Any, ...]], Storage] | None = None) -> Any:
    """The next pickle in `stream`, after checking its memo indices: the C unpickler sizes its memo table by the
    largest index, so a few bytes could otherwise make it allocate gigabytes."""
    start = stream.tell()
    count = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # genops decodes damaged STRING escapes noisily
        for opcode, argument, _ in pickletools.genops(stream):
            count += 1
            if opcode.name in _MEMO_OPS and argument is not None and argument > count:
                raise RecordError(f"the pickle uses memo index {argument} after only {count} opcodes")
    stream.seek(start)
    return _Unpickler(stream, on_storage).load()


def _text(value: Any) -> Any:
    return value.decode("ascii", "replace") if isinstance(value, bytes) else value


def _storage_type(value: Any) -> _StorageType:
    if not isinstance(value, _StorageType):
        raise RecordError(f"a storage has type {str(value)[:60]}, not a torch storage type")
    check_readable("storage type", value.name, value.element)
    return value


def _materialize(obj: Any, memo: dict[int, Any], depth: int = 0) -> Any:
    """The unpickled object with every tensor reference replaced by its array. An object the pickle references
    twice is converted once and stays shared (so a shared-list DAG stays as small as the pickle)."""
    if not isinstance(obj, (TensorRef, dict, list, tuple)):
        return obj
    if id(obj) in memo:
        return memo[id(obj)]
    if depth > MAX_NESTING:
        raise RecordError(f"the pickle nests containers more than {MAX_NESTING} levels deep")
    if isinstance(obj, TensorRef):
        out: Any = obj.materialize()
    elif isinstance(obj, dict):
        out = memo[id(obj)] = {}  # registered before its items, so a cycle ends here
        out.update((k, _materialize(v, memo, depth + 1)) for k, v in obj.items())
    elif isinstance(obj, list):
        out = memo[id(obj)] = []
        out.extend(_materialize(v, memo, depth + 1) for v in obj)
    else:
        out = tuple(_materialize(v, memo, depth + 1) for v in obj)
    memo[id(obj)] = out
    return out


def _read_entry(archive: zipfile.ZipFile, name: str, limit: int) -> bytes:
    """An archive entry of at most `limit` bytes, checked before it is read (its declared size) and while it is
    read (never inflating past limit + 1 bytes, whatever it declares)."""
    info = archive.getinfo(name)
    if info.file_size > limit:
        raise RecordError(f"the archive entry {name} declares {info.file_size} bytes, more than the {limit} expected")
    with archive.open(info) as entry:
        data = entry.read(limit + 1)
    if len(data) > limit:
        raise RecordError(f"the archive entry {name} inflates to more than the {limit} bytes expected")
    return data


def _load_zip(data: bytes, source: str) -> Any:
    """The object of a zip-format file (torch >= 1.6): <root>/data.pkl plus one entry per storage."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pickles) != 1:
            raise RecordError(f"{source}: the zip archive has no <root>/data.pkl entry; not a torch state-dict file")
        root = pickles[0][: -len("data.pkl")]
        names = set(archive.namelist())
        byteorder = "little"
        if root + "byteorder" in names:
            byteorder = _read_entry(archive, root + "byteorder", _SMALL_ENTRY_BYTES).decode("ascii", "replace").strip()
        storages: dict[str, Storage] = {}

        def on_storage(fields: tuple[Any, ...]) -> Storage:
            if len(fields) != 4:
                raise RecordError(f"a storage id has {len(fields)} fields, 4 expected")
            kind, key, _location, numel = _storage_type(fields[0]), _text(fields[1]), fields[2], fields[3]
            if not (isinstance(key, str) and re.fullmatch(r"\w+", key) and is_int(numel) and numel >= 0):
                raise RecordError(f"a storage id names key {str(key)[:40]!r} with {str(numel)[:20]} elements")
            if key not in storages:
                entry = f"{root}data/{key}"
                if entry not in names:
                    raise RecordError(f"the archive lacks the data of storage {key!r} ({entry})")
                storage = storages[key] = Storage(key, kind.element, numel)
                storage.fill(_read_entry(archive, entry, storage.nbytes), byteorder)
            return storages[key]

        return _unpickle(io.BytesIO(_read_entry(archive, pickles[0], max_tensor_bytes())), on_storage)


def _load_legacy(data: bytes, source: str) -> Any:
    """The object of a pre-1.6 file: magic, protocol and system pickles, the object, its storage keys, the data."""
    stream = io.BytesIO(data)
    if _unpickle(stream) != _LEGACY_MAGIC:
        raise RecordError(f"{source}: not a torch file (a pickle, but without torch's magic number)")
    if _unpickle(stream) != _LEGACY_PROTOCOL:
        raise RecordError(f"{source}: unsupported legacy torch protocol version")
    info = _unpickle(stream)
    byteorder = "little" if not isinstance(info, dict) or info.get("little_endian", True) else "big"
    storages: dict[str, Storage] = {}

    def on_storage(fields: tuple[Any, ...]) -> Storage:
        if len(fields) != 5:
            raise RecordError(f"a legacy storage id has {len(fields)} fields, 5 expected")
        kind, key, _location, numel, view = _storage_type(fields[0]), _text(fields[1]), *fields[2:]
        if not (isinstance(key, str) and is_int(numel) and numel >= 0):
            raise RecordError(f"a storage id names key {str(key)[:40]!r} with {str(numel)[:20]} elements")
        root = storages.setdefault(key, Storage(key, kind.element, numel))
        if view is None:
            return root
        if not (isinstance(view, tuple) and len(view) == 3 and is_int(view[1]) and is_int(view[2])
                and 0 <= view[1] and view[1] + view[2] <= root.numel):
            raise RecordError(f"storage view {str(view)[:60]} lies outside storage {key!r}")
        return storages.setdefault(_text(view[0]), Storage(_text(view[0]), root.element, view[2], root, view[1]))

    obj = _unpickle(stream, on_storage)
    keys = _unpickle(stream)
    if not isinstance(keys, list):
        raise RecordError(f"{source}: corrupt legacy torch file (the storage key list is missing)")
    for key in keys:
        storage = storages.get(_text(key))
        if storage is None or storage.root is not None:
            raise RecordError(f"{source}: the data section names storage {str(key)[:40]!r}, which no tensor uses")
        header = stream.read(8)
        if len(header) != 8:
            raise RecordError(f"{source}: truncated legacy torch file (storage {key!r} has no size)")
        (numel,) = struct.unpack("<q" if byteorder == "little" else ">q", header)
        if numel != storage.numel:
            raise RecordError(f"{source}: storage {key!r} holds {numel} elements but the pickle declares "
                              f"{storage.numel}")
        storage.fill(stream.read(storage.nbytes), byteorder)
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
        return _materialize(loader(data, source), {})
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
