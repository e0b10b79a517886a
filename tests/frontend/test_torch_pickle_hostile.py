"""braze.load_torch_state_dict against hostile torch files: a few hundred bytes must not allocate gigabytes, change
the reader for later loads, or escape as anything but a RecordError; and the dtypes torch writes load or are
refused by name. Files that could allocate are loaded in a child process under an address-space limit."""
from __future__ import annotations

import io
import os
import struct
import tempfile
import zipfile
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import braze
from braze import RecordError
from braze.frontend import torch_pickle
from braze.frontend.torch_pickle import load_torch_file
from tests.frontend.limited_run import run_limited
from tests.frontend.reader_fuzz import fuzz_settings
from tests.frontend.test_torch_pickle import (ARRAYS, FakeTensor, Global, Storage, dumps, tensors_of, write_legacy,
                                              write_zip)


def zip_with_pickle(path: str, pickle_bytes: bytes, storages: list[Storage] = ()) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickle_bytes)
        for s in storages:
            archive.writestr(f"archive/data/{s.key}", s.data)


def load_in_child(path: str) -> dict:
    """Load `path` under the memory limit and describe what came out (or the RecordError)."""
    return run_limited(f"""
        import json
        import numpy as np
        import braze
        try:
            obj = braze.frontend.torch_pickle.load_torch_file({path!r})
        except braze.RecordError as err:
            print(json.dumps({{"error": str(err)}}))
        else:
            w = obj["w"]
            def depth(x):
                n = 0
                while isinstance(x, list):
                    assert x[0] is x[1]
                    x, n = x[0], n + 1
                return n
            print(json.dumps({{"depth": depth(w), "shape": list(np.shape(w)) if not isinstance(w, list) else None,
                              "strides": list(w.strides) if isinstance(w, np.ndarray) else None,
                              "writeable": bool(w.flags.writeable) if isinstance(w, np.ndarray) else None}}))
    """)


def test_torch_reader_keeps_a_shared_list_dag_shared(tmp_path):
    storage = Storage("0", "FloatStorage", np.ones(1, np.float32).tobytes(), 1)
    node: object = FakeTensor(storage, 0, (1,), (1,))
    for _ in range(40):  # copied instead of shared, this would be 2**40 tensors
        node = [node, node]
    path = str(tmp_path / "dag.pt")
    write_zip(path, {"w": node}, [storage])
    assert load_in_child(path)["depth"] == 40


def test_torch_reader_reads_a_stride_zero_tensor_without_expanding_it(tmp_path):
    storage = Storage("0", "FloatStorage", np.float32(2.5).tobytes(), 1)
    path = str(tmp_path / "stride0.pt")
    write_zip(path, {"w": FakeTensor(storage, 0, (2 ** 15, 2 ** 14), (0, 0))}, [storage])  # 2 GiB if expanded
    report = load_in_child(path)
    assert report == {"depth": 0, "shape": [2 ** 15, 2 ** 14], "strides": [0, 0], "writeable": False}


def test_torch_reader_refuses_a_memo_index_beyond_the_pickle(tmp_path):
    # EMPTY_LIST, LONG_BINPUT 2**28: the C unpickler would size its memo table for 2**28 entries (2 GiB)
    path = str(tmp_path / "memo.pt")
    zip_with_pickle(path, b"\x80\x02]r" + struct.pack("<I", 2 ** 28) + b".")
    assert "memo index 268435456" in load_in_child(path)["error"]


def _patch_sizes(data: bytes, name: bytes, size: int) -> bytes:
    """The zip bytes with the uncompressed size of entry `name` replaced in its local and central headers."""
    out = bytearray(data)
    for signature, field, name_at in ((b"PK\x03\x04", 22, 30), (b"PK\x01\x02", 24, 46)):
        at = out.find(signature)
        while at >= 0:
            if out[at + name_at:at + name_at + len(name)] == name:
                out[at + field:at + field + 4] = struct.pack("<I", size)
            at = out.find(signature, at + 4)
    return bytes(out)


def test_torch_reader_stops_inflating_a_storage_at_its_declared_size(tmp_path):
    storage = Storage("0", "FloatStorage", bytes(2 ** 26), 4)  # 64 MiB of zeros that the pickle calls 16 bytes
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", dumps({"w": FakeTensor(storage, 0, (4,), (1,))}))
        archive.writestr("archive/data/0", storage.data)
    path = tmp_path / "bomb.pt"
    path.write_bytes(_patch_sizes(buffer.getvalue(), b"archive/data/0", 16))
    with pytest.raises(RecordError, match="archive/data/0"):  # zipfile stops at the declared size (bad CRC)
        load_torch_file(path)


def test_torch_reader_refuses_a_storage_declared_larger_than_the_pickle_says(tmp_path):
    storage = Storage("0", "FloatStorage", bytes(64), 4)
    path = str(tmp_path / "long.pt")
    write_zip(path, {"w": FakeTensor(storage, 0, (4,), (1,))}, [storage])
    with pytest.raises(RecordError, match="declares 64 bytes, more than the 16 expected"):
        load_torch_file(path)


@pytest.mark.parametrize("target", ["_rebuild_tensor_v2", "_rebuild_parameter"])
def test_torch_reader_stand_ins_cannot_be_changed_by_build(tmp_path, target):
    before = torch_pickle._ALLOWED[("torch._utils", target)]
    defaults = before._function.__defaults__
    # GLOBAL f; (None, {"__defaults__": (1,)}); BUILD: slot state would setattr the function for the whole process
    payload = (b"\x80\x02ctorch._utils\n" + target.encode() + b"\nN}X\x0c\x00\x00\x00__defaults__K\x01\x85s\x86b.")
    path = str(tmp_path / "build.pt")
    zip_with_pickle(path, payload)
    with pytest.raises(RecordError, match="set the state"):
        load_torch_file(path)
    assert torch_pickle._ALLOWED[("torch._utils", target)] is before
    assert before._function.__defaults__ == defaults


def test_torch_reader_loads_a_bfloat16_scalar(tmp_path):
    bits = (np.array([3.5], np.float32).view(np.uint32) >> 16).astype("<u2")
    storage = Storage("0", "BFloat16Storage", bits.tobytes(), 1)
    path = str(tmp_path / "scalar.pt")
    write_zip(path, OrderedDict(scalar=FakeTensor(storage, 0, (), ())), [storage])
    loaded = braze.load_torch_state_dict(path)["scalar"]
    assert isinstance(loaded, np.ndarray) and loaded.shape == () and loaded.dtype == np.float32 and loaded == 3.5


class TensorV3(FakeTensor):
    """Reduces as torch >= 2.3 does for dtypes without a typed storage: over an untyped storage, with the dtype."""

    def __init__(self, storage: Storage, size: tuple, stride: tuple, dtype: str) -> None:
        super().__init__(storage, 0, size, stride)
        self.dtype = dtype

    def __reduce__(self) -> tuple:
        return (Global("torch._utils", "_rebuild_tensor_v3"),
                (self.storage, 0, self.size, self.stride, False, OrderedDict(), Global("torch", self.dtype)))


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_torch_reader_loads_unsigned_dtypes_over_untyped_storage(tmp_path, dtype):
    array = np.array([[1, 2], [3, 2 ** 15]], dtype=dtype)
    storage = Storage("0", "UntypedStorage", array.astype(array.dtype.newbyteorder("<")).tobytes(), array.nbytes)
    path = str(tmp_path / "u.pt")
    write_zip(path, {"w": TensorV3(storage, (2, 2), (1, 2), dtype)}, [storage])
    loaded = braze.load_torch_state_dict(path)["w"]
    assert loaded.dtype == array.dtype
    np.testing.assert_array_equal(loaded, array.T)


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_torch_reader_refuses_float8_by_name(tmp_path, dtype):
    storage = Storage("0", "UntypedStorage", bytes(4), 4)
    path = str(tmp_path / "f8.pt")
    write_zip(path, {"w": TensorV3(storage, (4,), (1,), dtype)}, [storage])
    with pytest.raises(RecordError, match=f"torch.{dtype}, which braze cannot read"):
        braze.load_torch_state_dict(path)


def test_torch_reader_refuses_tensors_above_the_size_cap(tmp_path, monkeypatch):
    monkeypatch.setenv("BRAZE_MAX_TENSOR_BYTES", str(2 ** 20))
    storage = Storage("0", "FloatStorage", bytes(4), 1)
    path = str(tmp_path / "big.pt")
    write_zip(path, {"w": FakeTensor(storage, 0, (2 ** 20,), (0,))}, [storage])
    with pytest.raises(RecordError, match="more than the limit of 1048576 bytes"):
        load_torch_file(path)


def test_torch_reader_tensors_share_their_storage_like_torch(tmp_path):
    base = np.arange(6, dtype=np.float32)
    storage = Storage("0", "FloatStorage", base.tobytes(), 6)
    path = str(tmp_path / "tied.pt")
    write_zip(path, OrderedDict(a=FakeTensor(storage, 0, (2, 3), (3, 1)), b=FakeTensor(storage, 3, (3,), (1,))),
              [storage])
    loaded = braze.load_torch_state_dict(path)
    assert np.shares_memory(loaded["a"], loaded["b"]) and loaded["a"].flags.writeable
    np.testing.assert_array_equal(loaded["b"], base[3:])


def test_torch_reader_refuses_nesting_deeper_than_the_limit(tmp_path):
    node: object = 1
    for _ in range(torch_pickle.MAX_NESTING + 5):
        node = [node]
    path = str(tmp_path / "deep.pt")
    write_zip(path, {"w": node}, [])
    with pytest.raises(RecordError, match="more than 100 levels"):
        load_torch_file(path)


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64", "complex64"])
def test_torch_reader_matches_torch_for_more_dtypes(tmp_path, dtype):
    torch = pytest.importorskip("torch")
    state = {"w": torch.arange(6).reshape(2, 3).to(getattr(torch, dtype)),
             "scalar": torch.tensor(1.5, dtype=torch.bfloat16), "expanded": torch.ones(1).expand(4)}
    path = str(tmp_path / "more.pt")
    torch.save(state, path)
    loaded = braze.load_torch_state_dict(path)
    for name, tensor in state.items():
        np.testing.assert_array_equal(loaded[name], tensor.float().numpy() if name == "scalar" else tensor.numpy())


# --- fuzzing -------------------------------------------------------------------------------------------------
def _valid_files() -> dict[str, bytes]:
    state, storages = tensors_of(ARRAYS)
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "model.pt")
        files = {}
        for fmt, writer in (("zip", write_zip), ("legacy", write_legacy)):
            writer(path, state, storages)
            with open(path, "rb") as f:
                files[fmt] = f.read()
    return files


VALID = _valid_files()
mutations = st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 255),
                               st.sampled_from(["flip", "cut", "insert"])), min_size=1, max_size=4)


def _mutate(data: bytes, edits: list[tuple[int, int, str]]) -> bytes:
    out = bytearray(data)
    for at, value, kind in edits:
        at %= max(len(out), 1)
        if kind == "flip" and out:
            out[at] ^= value or 1
        elif kind == "cut":
            del out[at:]
        else:
            out[at:at] = bytes([value])
    return bytes(out)


@fuzz_settings(150)
@given(fmt=st.sampled_from(sorted(VALID)), edits=mutations)
def test_torch_reader_damaged_files_raise_only_record_errors(tmp_path, fmt, edits):
    path = tmp_path / "fuzz.pt"
    path.write_bytes(_mutate(VALID[fmt], edits))
    try:
        load_torch_file(path)
    except RecordError:
        pass
