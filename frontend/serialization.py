"""braze.save and braze.load: tensors and containers of them in code-free files, and torch .pt files read back.

A flat mapping of str -> tensor or numpy array (a state dict) is written as a plain safetensors file any
reader opens; its metadata keeps the key order, and it loads as a dict of Tensors, as torch's state dicts do. Anything else (nested dicts, lists and tuples of tensors, numpy arrays and the
plain values str, int, float, bool and None, as an optimizer's state dict holds) is written as a safetensors
file too: the tensors, each named by its path in the object, plus the object's structure as JSON in the
metadata entry "braze.structure". Its nodes are one-key objects:

    {"tensor": name, "requires_grad": bool}   {"array": name}          (a Tensor / a numpy array)
    {"dict": [[key, value], ...]}   {"list": [...]}   {"tuple": [...]}   (key and value are nodes)
    {"str": s}   {"int": n}   {"float": repr}   {"bool": b}   {"none": null}

A tensor that appears twice is stored once and loads as one object. Nothing in a file is ever run: loading
rebuilds only these node kinds, and a torch file is read by the restricted unpickler of torch_pickle.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, BinaryIO, Union

import numpy as np

from braze.ir.errors import BrazeError, RecordError

from .device import Device, as_device
from .nn.param import Param
from .atomic_files import read_bytes, write_atomic
from .safetensors_io import decode, encode
from .tensor import Tensor
from .torch_pickle import load_torch_bytes

FORMAT = "braze.save"
VERSION = "1"
_MAX_DEPTH = 200
File = Union[str, os.PathLike, BinaryIO]


def save(obj: Any, f: File, pickle_module: Any = None, pickle_protocol: int = 2,
         _use_new_zipfile_serialization: bool = True) -> None:
    """Write `obj` (a tensor, or dicts/lists/tuples of tensors and plain values) to a path, atomically, or to a
    binary file object; braze never pickles, so `pickle_module` must stay None."""
    if pickle_module is not None:
        raise BrazeError("braze.save: pickle_module is not supported (braze writes safetensors, never pickles); "
                         "leave it None")
    data = _encode(obj)
    if hasattr(f, "write"):
        f.write(data)  # type: ignore[union-attr]
    else:
        write_atomic(f, data)  # type: ignore[arg-type]


def _encode(obj: Any) -> bytes:
    if _is_flat_state(obj):
        arrays = {key: _array(value) for key, value in obj.items()}
        meta = {"format": FORMAT, "version": VERSION, "braze.keys": json.dumps(list(obj))}
        return encode(arrays, meta)
    writer = _Writer()
    structure = writer.node(obj, "obj", 0, set())
    meta = {"format": FORMAT, "version": VERSION, "braze.structure": json.dumps(structure)}
    return encode(writer.arrays, meta)


def _is_flat_state(obj: Any) -> bool:
    return (isinstance(obj, Mapping) and all(isinstance(k, str) for k in obj)
            and all(isinstance(v, (Tensor, Param, np.ndarray)) for v in obj.values())
            and len({id(v) for v in obj.values()}) == len(obj))


def _array(value: Tensor | Param | np.ndarray) -> np.ndarray:
    """The array of a state-dict value (braze's state_dict() holds numpy arrays, torch's Tensors)."""
    if isinstance(value, Param):
        value = value.val()
    return np.asarray(value._data if isinstance(value, Tensor) else value, order="C")


class _Writer:
    """Turns an object into its structure node, collecting its tensors by path name."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.names: dict[int, str] = {}

    def node(self, obj: Any, path: str, depth: int, open_: set[int]) -> dict[str, Any]:
        if depth > _MAX_DEPTH:
            raise BrazeError(f"braze.save: {path} is nested more than {_MAX_DEPTH} levels deep")
        if isinstance(obj, (Tensor, Param)):
            t = obj.val() if isinstance(obj, Param) else obj
            return {"tensor": self._store(obj, t._data, path), "requires_grad": bool(t.requires_grad)}
        if isinstance(obj, np.ndarray):
            return {"array": self._store(obj, obj, path)}
        scalar = _scalar_node(obj)
        if scalar is not None:
            return scalar
        if isinstance(obj, (Mapping, list, tuple)):
            if id(obj) in open_:
                raise BrazeError(f"braze.save: {path} contains itself; cyclic objects cannot be saved")
            open_.add(id(obj))
            try:
                return self._container(obj, path, depth, open_)
            finally:
                open_.discard(id(obj))
        raise BrazeError(f"braze.save: {path} is a {type(obj).__name__}; braze saves tensors, numpy arrays, "
                         f"str/int/float/bool/None and dicts, lists and tuples of them, never code "
                         f"(save a module's state_dict(), not the module)")

    def _container(self, obj: Any, path: str, depth: int, open_: set[int]) -> dict[str, Any]:
        if isinstance(obj, Mapping):
            items = []
            for key, value in obj.items():
                if _scalar_node(key) is None and not isinstance(key, tuple):
                    raise BrazeError(f"braze.save: {path} has a key of type {type(key).__name__}; keys must be "
                                     f"str, int, float, bool, None or tuples of them")
                items.append([self.node(key, f"{path}[key]", depth + 1, open_),
                              self.node(value, f"{path}[{key!r}]", depth + 1, open_)])
            return {"dict": items}
        kind = "list" if isinstance(obj, list) else "tuple"
        return {kind: [self.node(v, f"{path}[{i}]", depth + 1, open_) for i, v in enumerate(obj)]}

    def _store(self, owner: Any, array: np.ndarray, path: str) -> str:
        name = self.names.get(id(owner))
        if name is None:
            name = path
            while name in self.arrays:
                name += "'"
            self.names[id(owner)] = name
            self.arrays[name] = np.asarray(array, order="C")
        return name


def _scalar_node(value: Any) -> dict[str, Any] | None:
    if value is None:
        return {"none": None}
    if isinstance(value, (bool, np.bool_)):
        return {"bool": bool(value)}
    if isinstance(value, (int, np.integer)):
        return {"int": int(value)}
    if isinstance(value, (float, np.floating)):
        return {"float": repr(float(value))}
    if isinstance(value, str):
        return {"str": value}
    return None


# --- loading ---------------------------------------------------------------------------------------------------


def load(f: File, map_location: Any = None, pickle_module: Any = None, *, weights_only: bool | None = None,
         mmap: bool | None = None, **pickle_load_args: Any) -> Any:
    """Read an object written by braze.save, any safetensors file (a dict of Tensors) or a torch .pt file
    (through the restricted reader: only tensors and plain containers, nothing run, whatever `weights_only`);
    tensors are placed on `map_location` (a braze device or its name; default cpu:0)."""
    if pickle_module is not None:
        raise BrazeError("braze.load: pickle_module is not supported (files are read without unpickling code); "
                         "leave it None")
    device = _device(map_location)
    source, data = _read(f)
    if len(data) >= 9 and data[8:9] == b"{":
        arrays, meta = decode(data, source)
        return _from_safetensors(arrays, meta, device, source)
    return _tensors(load_torch_bytes(data, source), device)


def _device(map_location: Any) -> Device:
    if map_location is None or isinstance(map_location, (str, Device)):
        return as_device(map_location)
    raise BrazeError(f"braze.load: map_location must be None, a braze Device or a device name such as 'cpu', got "
                     f"{type(map_location).__name__}")


def _read(f: File) -> tuple[str, bytes]:
    if hasattr(f, "read"):
        data = f.read()  # type: ignore[union-attr]
        if not isinstance(data, bytes):
            raise BrazeError("braze.load: the file object must be opened in binary mode ('rb')")
        return getattr(f, "name", "<file>"), data
    return os.fspath(f), read_bytes(f)  # type: ignore[arg-type]


def _from_safetensors(arrays: dict[str, np.ndarray], meta: dict[str, str], device: Device, source: str) -> Any:
    if "braze.structure" in meta:
        structure = _json(meta["braze.structure"], source)
        return _Reader(arrays, device, source).node(structure, 0)
    keys = list(arrays)
    if "braze.keys" in meta:
        listed = _json(meta["braze.keys"], source)
        if not isinstance(listed, list) or sorted(map(str, listed)) != sorted(keys):
            raise RecordError(f"{source}: the metadata key list does not match the file's tensors")
        keys = [str(k) for k in listed]
    return {key: Tensor._wrap(arrays[key], True, device) for key in keys}


def _json(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as err:
        raise RecordError(f"{source}: corrupt braze.save metadata (not valid JSON: {err})") from None


class _Reader:
    """Rebuilds an object from its structure node; every malformed node is a RecordError naming the file."""

    def __init__(self, arrays: dict[str, np.ndarray], device: Device, source: str) -> None:
        self.arrays, self.device, self.source = arrays, device, source
        self.made: dict[str, Any] = {}

    def fail(self, problem: str) -> RecordError:
        return RecordError(f"{self.source}: corrupt braze.save structure: {problem}")

    def node(self, node: Any, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise self.fail(f"nested more than {_MAX_DEPTH} levels deep")
        kind = next(iter(node), None) if isinstance(node, dict) else None
        if kind is None or not (len(node) == 1 or (kind == "tensor" and set(node) == {"tensor", "requires_grad"})):
            raise self.fail(f"a node must be a one-key object, got {str(node)[:60]}")
        value = node[kind]
        if kind in ("tensor", "array"):
            return self._tensor(kind, value, node.get("requires_grad", False))
        if kind in ("list", "tuple") and isinstance(value, list):
            items = [self.node(v, depth + 1) for v in value]
            return items if kind == "list" else tuple(items)
        if kind == "dict" and isinstance(value, list):
            return self._dict(value, depth)
        return self._scalar(kind, value)

    def _dict(self, items: list[Any], depth: int) -> dict[Any, Any]:
        out = {}
        for item in items:
            if not (isinstance(item, list) and len(item) == 2):
                raise self.fail("a dict entry must be a [key, value] pair")
            key, value = self.node(item[0], depth + 1), self.node(item[1], depth + 1)
            try:
                out[key] = value
            except TypeError:
                raise self.fail(f"a dict key of type {type(key).__name__} is not hashable") from None
        return out

    def _tensor(self, kind: str, name: Any, requires_grad: Any) -> Any:
        if not isinstance(name, str) or name not in self.arrays:
            raise self.fail(f"it refers to a tensor {str(name)[:60]!r} the file does not hold")
        key = f"{kind}:{name}"
        if key not in self.made:
            array = self.arrays[name]
            if kind == "array":
                self.made[key] = array
            else:
                t = Tensor._wrap(array, True, self.device)
                self.made[key] = t.requires_grad_(True) if requires_grad is True and t.dtype.is_float else t
        return self.made[key]

    def _scalar(self, kind: str, value: Any) -> Any:
        checks = {"str": str, "int": int, "bool": bool}
        if kind == "none" and value is None:
            return None
        if kind in checks and type(value) is checks[kind]:
            return value
        if kind == "float" and isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise self.fail(f"unknown or malformed node {kind!r}: {str(value)[:40]}")


def _tensors(obj: Any, device: Device) -> Any:
    """A torch file's object with every numpy array (a torch tensor) as a braze Tensor."""
    if isinstance(obj, np.ndarray):
        return Tensor._wrap(obj, True, device)
    if isinstance(obj, dict):
        return type(obj)((k, _tensors(v, device)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(_tensors(v, device) for v in obj)
    return obj


__all__ = ["save", "load"]
