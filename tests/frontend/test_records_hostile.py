"""Module records against hostile and damaged files: every defect is a RecordError naming the key or field (never
RecursionError, OverflowError, TypeError or a load that breaks later), saves are byte-reproducible, and the
temporary files of interrupted saves are removed by the next save."""
from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from braze import RecordError
from braze.frontend import atomic_files
from braze.frontend.records import ModuleRecord
from braze.frontend.safetensors_io import decode
from tests.frontend.limited_run import ROOT
from tests.frontend.reader_fuzz import fuzz_settings
from tests.frontend.test_records import Net

VALID = Net(1).into_record().to_bytes()


def split(data: bytes) -> tuple[dict, bytes]:
    (length,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + length]), data[8 + length:]


def rebuilt(header: dict | str, body: bytes) -> bytes:
    text = (header if isinstance(header, str) else json.dumps(header)).encode()
    return struct.pack("<Q", len(text)) + text + body


def with_metadata(key: str, value: str) -> bytes:
    header, body = split(VALID)
    header["__metadata__"][key] = value
    return rebuilt(header, body)


def with_tensor_field(field: str, value: object) -> bytes:
    header, body = split(VALID)
    header["bias"][field] = value
    return rebuilt(header, body)


DEEP = "[" * 100_000 + "]" * 100_000
HOSTILE = {
    "nested header": (lambda: rebuilt('{"x": ' + DEEP + "}", b""), "nested more than 32 levels"),
    "nested param_ids": (lambda: with_metadata("param_ids", DEEP), "'param_ids': JSON nested more than 32"),
    "param id 1e400": (lambda: with_metadata("param_ids", '{"bias": 1e400}'), "'1e400' is not a finite float"),
    "param id 10**30": (lambda: with_metadata("param_ids", json.dumps(
        {**json.loads(decode(VALID, "")[1]["param_ids"]), "bias": 10 ** 30})), "ParamId of 'bias' is 10{30}"),
    "param id of 5000 digits": (lambda: with_metadata("param_ids", '{"bias": ' + "9" * 5000 + "}"),
                                "5000 digits is too long"),
    "param id NaN": (lambda: with_metadata("param_ids", '{"bias": NaN}'), "NaN is not a JSON number"),
    "nested metadata": (lambda: with_metadata("metadata", DEEP), "'metadata': JSON nested"),
    "shape 2**64": (lambda: with_tensor_field("shape", [2 ** 64]), "more than the limit of"),
    "shape wrapping int64": (lambda: with_tensor_field("shape", [4611686018427387905, 4]), "more than the limit"),
    "shape with a bool": (lambda: with_tensor_field("shape", [12, True]), r"invalid shape \[12, True\]"),
    "shape of rank 65": (lambda: with_tensor_field("shape", [1] * 65), "at most 64"),
    "dtype as a list": (lambda: with_tensor_field("dtype", ["F32"]), "unsupported dtype \"\\['F32'\\]\""),
    "offsets as floats": (lambda: with_tensor_field("data_offsets", [0.0, 12.0]), "invalid data offsets"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_record_hostile_header_is_a_record_error_naming_the_field(case):
    make, message = HOSTILE[case]
    with pytest.raises(RecordError, match=message):
        ModuleRecord.from_bytes(make(), source="hostile.safetensors")


@pytest.mark.parametrize("notes", ['{"bias": "lora"}', '["bias"]', '{"bias": {"adapter": 3}}', DEEP])
def test_record_structure_notes_of_the_wrong_type_are_reported(notes):
    record = ModuleRecord.from_bytes(with_metadata("metadata", json.dumps({"reparameterizations": notes})))
    with pytest.raises(RecordError, match="reparameterizations"):
        Net(2).load_record(record)


def test_record_reader_loads_a_bfloat16_scalar():
    header = {"s": {"dtype": "BF16", "shape": [], "data_offsets": [0, 2]}}
    bits = (np.array([-1.75], np.float32).view(np.uint32) >> 16).astype("<u2").tobytes()
    tensors, _ = decode(rebuilt(header, bits), "scalar.safetensors")
    assert isinstance(tensors["s"], np.ndarray) and tensors["s"].shape == () and tensors["s"] == -1.75


def test_record_bytes_do_not_depend_on_metadata_order():
    record = Net(1).into_record()
    a = ModuleRecord(record, metadata={"b": "2", "a": "1", "c": "3"}).to_bytes()
    b = ModuleRecord(record, metadata={"c": "3", "a": "1", "b": "2"}).to_bytes()
    assert a == b


def test_record_bytes_are_the_same_in_another_process():
    script = textwrap.dedent("""
        import hashlib, sys
        from tests.frontend.test_records import Net
        from braze.frontend.records import ModuleRecord
        record = ModuleRecord(Net(3).into_record(), metadata={"z": "1", "a": "2", "m": "3"})
        print(hashlib.sha256(record.to_bytes()).hexdigest())
    """)
    digests = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60,
                              env=dict(os.environ, PYTHONPATH=str(ROOT), PYTHONHASHSEED=seed)).stdout
               for seed in ("1", "2")}
    assert len(digests) == 1


def test_record_encoding_is_read_by_the_safetensors_package():
    import safetensors.numpy
    loaded = safetensors.numpy.load(VALID)
    np.testing.assert_array_equal(loaded["block.weight"], np.asarray(Net(1).block.weight))


# --- temporary files of interrupted saves -------------------------------------------------------------------
def stale(path, age: float = 3600.0) -> None:
    then = time.time() - age
    os.utime(path, (then, then))


def test_save_removes_an_abandoned_temporary_file(tmp_path):
    leftover = tmp_path / f".net.safetensors.x1y2z3{atomic_files.TEMP_SUFFIX}"
    leftover.write_bytes(b"half a record")
    stale(leftover)
    Net(1).into_record().save(tmp_path / "other.safetensors")
    assert not leftover.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.safetensors"]


def test_save_keeps_a_fresh_temporary_file(tmp_path):
    leftover = tmp_path / f".net.safetensors.fresh{atomic_files.TEMP_SUFFIX}"
    leftover.write_bytes(b"being written")
    Net(1).into_record().save(tmp_path / "net.safetensors")
    assert leftover.exists()


def test_save_keeps_a_temporary_file_that_a_live_save_holds(tmp_path):
    held = tmp_path / f".net.safetensors.live{atomic_files.TEMP_SUFFIX}"
    held.write_bytes(b"being written")
    stale(held)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, sys, time
        f = open({str(held)!r}, "rb"); fcntl.flock(f, fcntl.LOCK_EX); print("locked", flush=True); time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        Net(1).into_record().save(tmp_path / "net.safetensors")
        assert held.exists()
    finally:
        holder.kill()
        holder.wait()


def test_save_killed_mid_write_leaves_a_temporary_file_the_next_save_removes(tmp_path):
    target = tmp_path / "net.safetensors"
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, time
        from tests.frontend.test_records import Net
        def stall(fd):
            print("writing", flush=True)
            time.sleep(60)
        os.fsync = stall
        Net(1).into_record().save({str(target)!r})
    """)], stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert child.stdout.readline().strip() == "writing"
    child.send_signal(signal.SIGKILL)
    child.wait()
    (leftover,) = tmp_path.glob(f"*{atomic_files.TEMP_SUFFIX}")
    assert not target.exists()
    stale(leftover)
    Net(2).into_record().save(target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.safetensors"]


def test_record_load_refuses_a_fifo(tmp_path):
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(RecordError, match="not a regular file"):
        ModuleRecord.load(fifo)


# --- fuzzing -------------------------------------------------------------------------------------------------
edits = st.lists(st.tuples(st.integers(0, 10 ** 5), st.integers(1, 255), st.booleans()), min_size=1, max_size=4)


@fuzz_settings(200)
@given(edits=edits)
def test_record_damaged_bytes_raise_only_record_errors(edits):
    data = bytearray(VALID)
    for at, value, cut in edits:
        at %= len(data)
        if cut:
            del data[at:]
            if not data:
                data = bytearray(b"\0")
        else:
            data[at] ^= value
    try:
        Net(2).load_record(ModuleRecord.from_bytes(bytes(data)))
    except RecordError:
        pass


json_values = st.recursive(st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats(allow_nan=False)
                           | st.text(max_size=8) | st.sampled_from([2 ** 63, 2 ** 64, -1, 0, "F32", "BF16"]),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                                      max_size=3), max_leaves=8)


@fuzz_settings(200)
@given(entry=st.sampled_from(["bias", "block.weight", "block.steps", "__metadata__"]),
       field=st.sampled_from(["dtype", "shape", "data_offsets", "param_ids", "metadata", "format_version"]),
       value=json_values)
def test_record_header_with_any_json_value_raises_only_record_errors(entry, field, value):
    header, body = split(VALID)
    if entry == "__metadata__":
        header[entry][field] = json.dumps(value)
    else:
        header[entry][field] = value
    try:
        Net(2).load_record(ModuleRecord.from_bytes(rebuilt(header, body)))
    except RecordError:
        pass
