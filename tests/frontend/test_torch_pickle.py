"""braze.load_torch_state_dict: torch's zip and legacy formats and safetensors, read without torch and without
running code from the file.

Files are written two ways: by torch itself when it is installed, and by a small pickle writer below that
emits the same opcodes torch.save does (protocol 2, persistent storage ids, references to torch globals),
so the reader is exercised whether or not torch is present.
"""
from __future__ import annotations

import io
import os
import pickle
import struct
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import braze
from braze import RecordError
from braze.frontend.torch_pickle import load_torch_file

STORAGES = {np.dtype("float32"): "FloatStorage", np.dtype("float64"): "DoubleStorage",
            np.dtype("float16"): "HalfStorage", np.dtype("int64"): "LongStorage", np.dtype("int32"): "IntStorage",
            np.dtype("int8"): "CharStorage", np.dtype("uint8"): "ByteStorage", np.dtype("bool"): "BoolStorage"}


# --- a pickle writer that emits torch.save's opcodes --------------------------------------------------------
class Global:
    """Pickles as a GLOBAL reference to module.name (callable so pickle accepts it as a reduce function)."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def __call__(self, *args: object) -> None:
        raise AssertionError("a reference, never called")


class Storage:
    """A storage: raw bytes written beside the pickle, referenced through a persistent id."""

    def __init__(self, key: str, type_name: str, data: bytes, numel: int) -> None:
        self.key, self.type_name, self.data, self.numel = key, type_name, data, numel


class FakeTensor:
    """Reduces the way a torch tensor does: _rebuild_tensor_v2(storage, offset, size, stride, grad, hooks)."""

    def __init__(self, storage: Storage, offset: int, size: tuple, stride: tuple,
                 rebuild: str = "_rebuild_tensor_v2") -> None:
        self.storage, self.offset, self.size, self.stride, self.rebuild = storage, offset, size, stride, rebuild

    def __reduce__(self) -> tuple:
        return (Global("torch._utils", self.rebuild),
                (self.storage, self.offset, self.size, self.stride, False, OrderedDict()))


class Writer(pickle._Pickler):  # the pure-Python pickler, whose dispatch table accepts new types
    dispatch = dict(pickle._Pickler.dispatch)

    def __init__(self, file: io.BytesIO, legacy: bool = False) -> None:
        super().__init__(file, protocol=2)
        self.legacy = legacy

    def save_global_ref(self, obj: Global) -> None:
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())
        self.memoize(obj)

    dispatch[Global] = save_global_ref

    def persistent_id(self, obj: object) -> tuple | None:
        if not isinstance(obj, Storage):
            return None
        kind = Global("torch", obj.type_name)
        if self.legacy:
            return ("storage", kind, obj.key, "cpu", obj.numel, None)
        return ("storage", kind, obj.key, "cpu", obj.numel)


def dumps(obj: object, legacy: bool = False) -> bytes:
    buffer = io.BytesIO()
    Writer(buffer, legacy).dump(obj)
    return buffer.getvalue()


def tensors_of(arrays: dict[str, np.ndarray]) -> tuple[OrderedDict, list[Storage]]:
    """A state dict of FakeTensors over one storage per array."""
    state, storages = OrderedDict(), []
    for i, (name, array) in enumerate(arrays.items()):
        array = np.array(array, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
        storage = Storage(str(i), STORAGES[array.dtype], array.astype(array.dtype.newbyteorder("<")).tobytes(),
                          array.size)
        strides = tuple(s // array.itemsize for s in array.strides)
        state[name] = FakeTensor(storage, 0, array.shape, strides)
        storages.append(storage)
    return state, storages


def write_zip(path: str, obj: object, storages: list[Storage], root: str = "archive") -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{root}/data.pkl", dumps(obj))
        archive.writestr(f"{root}/byteorder", "little")
        for s in storages:
            archive.writestr(f"{root}/data/{s.key}", s.data)
        archive.writestr(f"{root}/version", "3\n")


def write_legacy(path: str, obj: object, storages: list[Storage]) -> None:
    parts = [pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2), pickle.dumps(1001, protocol=2),
             pickle.dumps({"protocol_version": 1001, "little_endian": True}, protocol=2), dumps(obj, legacy=True),
             pickle.dumps([s.key for s in storages], protocol=2)]
    parts += [struct.pack("<q", s.numel) + s.data for s in storages]
    with open(path, "wb") as f:
        f.write(b"".join(parts))


ARRAYS = {"fc.weight": np.arange(6, dtype=np.float32).reshape(2, 3), "fc.bias": np.array([0.5, -1.5], np.float64),
          "half": np.array([1.0, 2.5], np.float16), "steps": np.array(7, np.int64), "i32": np.arange(3, dtype=np.int32),
          "i8": np.array([-3, 4], np.int8), "u8": np.array([200, 1], np.uint8), "mask": np.array([True, False]),
          "empty": np.zeros((0, 4), np.float32)}


# --- the hand-written files ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_load_torch_state_dict_reads_every_dtype(tmp_path, fmt):
    state, storages = tensors_of(ARRAYS)
    path = str(tmp_path / "model.pt")
    (write_zip if fmt == "zip" else write_legacy)(path, state, storages)
    loaded = braze.load_torch_state_dict(path)
    assert list(loaded) == list(ARRAYS)
    for name, array in ARRAYS.items():
        assert loaded[name].dtype == array.dtype and loaded[name].shape == array.shape
        np.testing.assert_array_equal(loaded[name], array)


def test_load_torch_state_dict_applies_offsets_and_strides(tmp_path):
    base = np.arange(12, dtype=np.float32)
    storage = Storage("0", "FloatStorage", base.tobytes(), 12)
    state = OrderedDict(t=FakeTensor(storage, 1, (3, 2), (1, 4)), row=FakeTensor(storage, 8, (4,), (1,)))
    path = str(tmp_path / "views.pt")
    write_zip(path, state, [storage])
    loaded = braze.load_torch_state_dict(path)
    np.testing.assert_array_equal(loaded["t"], np.lib.stride_tricks.as_strided(base[1:], (3, 2), (4, 16)))
    np.testing.assert_array_equal(loaded["row"], base[8:12])


def test_load_torch_state_dict_widens_bfloat16_to_float32(tmp_path):
    values = np.array([1.5, -2.25, 2.0 ** 100], np.float32)
    bits = (values.view(np.uint32) >> 16).astype("<u2")  # these values are exact in bfloat16
    storage = Storage("0", "BFloat16Storage", bits.tobytes(), 3)
    path = str(tmp_path / "bf16.pt")
    write_zip(path, OrderedDict(w=FakeTensor(storage, 0, (3,), (1,))), [storage])
    loaded = braze.load_torch_state_dict(path)["w"]
    assert loaded.dtype == np.float32
    np.testing.assert_array_equal(loaded, values)


def test_load_torch_state_dict_accepts_any_archive_root_and_parameters(tmp_path):
    state, storages = tensors_of({"w": np.ones((2, 2), np.float32)})
    state["w"].rebuild = "_rebuild_tensor_v2"
    wrapped = OrderedDict(w=_Parameter(state["w"]))
    path = str(tmp_path / "p.pth")
    write_zip(path, wrapped, storages, root="checkpoint_name")
    np.testing.assert_array_equal(braze.load_torch_state_dict(path)["w"], np.ones((2, 2)))


class _Parameter:
    """Reduces as torch.nn.Parameter does: _rebuild_parameter(tensor, requires_grad, hooks)."""

    def __init__(self, tensor: FakeTensor) -> None:
        self.tensor = tensor

    def __reduce__(self) -> tuple:
        return Global("torch._utils", "_rebuild_parameter"), (self.tensor, True, OrderedDict())


def test_load_torch_state_dict_selects_a_nested_state_dict_by_key(tmp_path):
    state, storages = tensors_of({"w": np.ones(2, np.float32)})
    path = str(tmp_path / "ckpt.pt")
    write_zip(path, {"model": state, "epoch": 3}, storages)
    with pytest.raises(RecordError, match="key='model'"):
        braze.load_torch_state_dict(path)
    assert list(braze.load_torch_state_dict(path, key="model")) == ["w"]
    assert load_torch_file(path)["epoch"] == 3


# --- hostile and damaged files -------------------------------------------------------------------------------
class Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("fmt", ["zip", "legacy"])
def test_load_torch_state_dict_refuses_code_in_the_pickle(tmp_path, fmt):
    marker = tmp_path / "ran"
    path = str(tmp_path / "evil.pt")
    payload = {"w": Evil(str(marker))}
    if fmt == "zip":
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("archive/data.pkl", pickle.dumps(payload, protocol=2))
    else:
        head = [pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2), pickle.dumps(1001, protocol=2),
                pickle.dumps({"little_endian": True}, protocol=2)]
        with open(path, "wb") as f:
            f.write(b"".join(head) + pickle.dumps(payload, protocol=2))
    with pytest.raises(RecordError, match=r"posix\.system|nt\.system") as info:
        braze.load_torch_state_dict(path)
    assert path in str(info.value)
    assert not marker.exists()


@pytest.mark.parametrize("module,name", [("builtins", "eval"), ("subprocess", "Popen"), ("torch", "load"),
                                         ("numpy", "frombuffer"),
                                         ("torch._utils", "_rebuild_device_tensor_from_numpy")])
def test_load_torch_state_dict_names_the_forbidden_global(tmp_path, module, name):
    path = str(tmp_path / "bad.pt")
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", dumps({"w": (Global(module, name), ("x",))}))
    with pytest.raises(RecordError, match=f"{module}.{name}"):
        braze.load_torch_state_dict(path)


def test_load_torch_state_dict_rejects_strides_outside_the_storage(tmp_path):
    storage = Storage("0", "FloatStorage", np.zeros(4, np.float32).tobytes(), 4)
    path = str(tmp_path / "oob.pt")
    write_zip(path, OrderedDict(w=FakeTensor(storage, 2, (2, 2), (2, 1))), [storage])
    with pytest.raises(RecordError, match="reaches element 5 of storage '0', which has 4"):
        braze.load_torch_state_dict(path)


def test_load_torch_state_dict_rejects_a_storage_of_the_wrong_size(tmp_path):
    storage = Storage("0", "FloatStorage", np.zeros(3, np.float32).tobytes(), 4)
    path = str(tmp_path / "short.pt")
    write_zip(path, OrderedDict(w=FakeTensor(storage, 0, (4,), (1,))), [storage])
    with pytest.raises(RecordError, match="holds 12 bytes but the pickle declares 4 elements"):
        braze.load_torch_state_dict(path)


def test_load_torch_state_dict_rejects_a_truncated_file(tmp_path):
    state, storages = tensors_of({"w": np.ones((8, 8), np.float32)})
    path = tmp_path / "cut.pt"
    write_zip(str(path), state, storages)
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(RecordError, match="cut.pt"):
        braze.load_torch_state_dict(path)


def test_load_torch_state_dict_rejects_files_of_other_kinds(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"just some text, not a checkpoint")
    with pytest.raises(RecordError, match="not a torch state-dict file"):
        braze.load_torch_state_dict(path)
    with pytest.raises(RecordError, match="cannot read"):
        braze.load_torch_state_dict(tmp_path / "missing.pt")


def test_load_torch_state_dict_refuses_state_set_on_a_storage(tmp_path):
    storage = Storage("0", "FloatStorage", np.zeros(4, np.float32).tobytes(), 4)

    class Tampered(FakeTensor):
        def __reduce__(self) -> tuple:
            return (Global("torch._utils", "_rebuild_tensor_v2"),
                    (self.storage, 0, (4,), (1,), False, OrderedDict()), {"numel": 10 ** 9})

    path = str(tmp_path / "tamper.pt")
    write_zip(path, OrderedDict(w=Tampered(storage, 0, (4,), (1,))), [storage])
    with pytest.raises(RecordError, match="set the state"):
        braze.load_torch_state_dict(path)


# --- safetensors ---------------------------------------------------------------------------------------------
def test_load_torch_state_dict_reads_safetensors(tmp_path):
    import safetensors.numpy
    path = str(tmp_path / "model.safetensors")
    arrays = {"w": np.arange(4, dtype=np.float16).reshape(2, 2), "b": np.array([1, 2], np.int64)}
    safetensors.numpy.save_file(arrays, path)
    loaded = braze.load_torch_state_dict(path)
    for name, array in arrays.items():
        assert loaded[name].dtype == array.dtype
        np.testing.assert_array_equal(loaded[name], array)


# --- against torch itself ------------------------------------------------------------------------------------
@pytest.mark.parametrize("legacy", [False, True])
def test_load_torch_state_dict_matches_torch_save(tmp_path, legacy):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    extra = {"t": torch.arange(12.0).reshape(3, 4).t(), "slice": torch.arange(10, dtype=torch.int32)[2:9:3],
             "bf16": torch.tensor([1.5, -0.375], dtype=torch.bfloat16), "half": torch.ones(2, dtype=torch.float16),
             "flags": torch.tensor([True, False]), "i8": torch.tensor([-1, 2], dtype=torch.int8),
             "u8": torch.tensor([255, 0], dtype=torch.uint8), "f64": torch.tensor([0.1], dtype=torch.float64)}
    state = {**model.state_dict(), **extra, "param": torch.nn.Parameter(torch.ones(2))}
    path = str(tmp_path / "torch.pt")
    torch.save(state, path, _use_new_zipfile_serialization=not legacy)
    loaded = braze.load_torch_state_dict(path)
    assert list(loaded) == list(state)
    for name, tensor in state.items():
        expected = tensor.detach().float().numpy() if tensor.dtype == torch.bfloat16 else tensor.detach().numpy()
        assert loaded[name].dtype == expected.dtype, name
        np.testing.assert_array_equal(loaded[name], expected)
