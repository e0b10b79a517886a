"""Module records: collecting, applying, the safetensors file format, options and bad input."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import braze
from braze import RecordError, nn
from braze.frontend.records import ModuleRecord, RecordEntry


class Block(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        rng = np.random.default_rng(seed)
        self.weight = nn.Param(rng.standard_normal((3, 2)).astype(np.float32))
        self.register_buffer("steps", braze.tensor(np.array(seed, np.int64)))
        self.register_buffer("scratch", braze.zeros(2), persistent=False)
        self.training_flag = nn.Flag(True)


class Net(nn.Module):
    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.block = Block(seed)
        self.bias = nn.Param(np.full(3, float(seed), np.float32))


def values(model):
    return {k: np.array(v, copy=True) for k, v in model.state_dict().items()}


def ids(model):
    return {path: p.id for path, p in model.named_param_slots()}


# --- collecting and applying ---------------------------------------------------------------------------------
def test_into_record_holds_parameters_and_persistent_buffers_with_ids():
    model = Net(1)
    record = model.into_record()
    assert list(record) == ["bias", "block.weight", "block.steps"]
    assert record.ids() == {k: v for k, v in ids(model).items() if k != "block.scratch"}
    np.testing.assert_array_equal(record["block.weight"].array, np.asarray(model.block.weight))


def test_into_record_is_a_snapshot():
    model = Net(1)
    record = model.into_record()
    model.bias.assign(np.zeros(3, np.float32))
    np.testing.assert_array_equal(record["bias"].array, np.ones(3))


def test_load_record_restores_values_and_ids():
    source, target = Net(1), Net(2)
    target.load_record(source.into_record())
    for key, value in values(source).items():
        np.testing.assert_array_equal(values(target)[key], value)
    assert {k: v for k, v in ids(target).items() if k != "block.scratch"} == \
        {k: v for k, v in ids(source).items() if k != "block.scratch"}


def test_load_record_keeps_gradient_configuration_and_tensor_identity():
    source, target = Net(1), Net(2)
    target.block.weight.set_require_grad(False)
    tensor = target.bias.val()
    target.load_record(source.into_record())
    assert target.bias.val() is tensor and target.bias.requires_grad and target.bias.val().is_leaf
    assert not target.block.weight.requires_grad and not target.block.weight.is_require_grad()
    assert target.block.steps.dtype == braze.int64


def test_load_record_leaves_flags_alone():
    source, target = Net(1), Net(2)
    flag = target.block.training_flag
    flag_value = bool(flag)
    source.eval()
    target.load_record(source.into_record())
    assert target.block.training_flag is flag and bool(flag) == flag_value


def test_shared_parameter_is_recorded_once():
    model = Net(1)
    model.alias = model.bias
    assert list(model.into_record()).count("bias") == 1
    assert "alias" not in model.into_record()


# --- the file ------------------------------------------------------------------------------------------------
def test_save_file_writes_standard_safetensors(tmp_path):
    from safetensors import safe_open
    model = Net(1)
    path = tmp_path / "net.safetensors"
    model.save_file(path)
    with safe_open(str(path), framework="np") as f:
        assert sorted(f.keys()) == ["bias", "block.steps", "block.weight"]
        np.testing.assert_array_equal(f.get_tensor("block.weight"), np.asarray(model.block.weight))
        meta = f.metadata()
    assert meta["format"] == "braze.module_record" and meta["format_version"] == "1"
    assert json.loads(meta["param_ids"]) == {"bias": int(model.bias.id), "block.weight": int(model.block.weight.id),
                                             "block.steps": int(model.block._buffers["steps"].id)}


def test_file_and_bytes_round_trip(tmp_path):
    source = Net(1)
    record = ModuleRecord(source.into_record(), metadata={"epoch": "4"})
    record.save(tmp_path / "r.safetensors")
    for loaded in (ModuleRecord.load(tmp_path / "r.safetensors"), ModuleRecord.from_bytes(record.to_bytes())):
        assert loaded.metadata == {"epoch": "4"} and loaded.ids() == record.ids()
        target = Net(2).load_record(loaded)
        for key, value in values(source).items():
            np.testing.assert_array_equal(values(target)[key], value)


def test_save_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "net.safetensors"
    Net(1).save_file(path)
    before = path.read_bytes()
    renames = []

    def failing_replace(src, dst):
        renames.append((os.path.dirname(src), dst))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(RecordError, match="No space left"):
        Net(2).save_file(path)
    assert renames and renames[0][0] == str(tmp_path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["net.safetensors"]


def test_truncated_file_is_a_record_error_naming_the_file(tmp_path):
    path = tmp_path / "net.safetensors"
    Net(1).save_file(path)
    path.write_bytes(path.read_bytes()[:-5])
    model = Net(2)
    before = values(model)
    with pytest.raises(RecordError, match=r"net\.safetensors: truncated"):
        model.load_file(path)
    for key, value in before.items():
        np.testing.assert_array_equal(values(model)[key], value)


@pytest.mark.parametrize("damage,message", [
    (lambda b: b[:4], "no header length"),
    (lambda b: b[:8] + b"{not json" + b[17:], "corrupt safetensors header"),
    (lambda b: b[:8] + b[8:].replace(b'"F32"', b'"Q32"', 1), "unsupported dtype"),
    (lambda b: b + b"trailing", "bytes after the last tensor"),
])
def test_corrupt_file_is_a_record_error(tmp_path, damage, message):
    path = tmp_path / "net.safetensors"
    Net(1).save_file(path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(RecordError, match=message):
        Net(2).try_load_file(path)


def test_foreign_safetensors_file_is_not_a_record(tmp_path):
    import safetensors.numpy
    path = tmp_path / "plain.safetensors"
    safetensors.numpy.save_file({"bias": np.zeros(3, np.float32)}, str(path))
    with pytest.raises(RecordError, match="not a braze module record"):
        Net(1).try_load_file(path)


def test_missing_file_is_a_record_error(tmp_path):
    with pytest.raises(RecordError, match="missing.safetensors: cannot read"):
        Net(1).load_file(tmp_path / "missing.safetensors")


# --- options and bad records ---------------------------------------------------------------------------------
def record_with(model, **changes):
    entries = dict(model.into_record())
    for path, array in changes.items():
        if array is None:
            entries.pop(path)
        else:
            entries[path] = RecordEntry(entries[path].id if path in entries else nn.ParamId(), array)
    return ModuleRecord(entries)


def assert_unchanged(model, before_values, before_ids):
    for key, value in before_values.items():
        np.testing.assert_array_equal(values(model)[key], value)
    assert ids(model) == before_ids


def test_wrong_shape_names_path_and_shapes_and_changes_nothing():
    model = Net(2)
    before_values, before_ids = values(model), ids(model)
    record = record_with(Net(1), **{"block.weight": np.zeros((2, 3), np.float32)})
    with pytest.raises(RecordError, match=r"block\.weight: the record has shape \(2, 3\), the module has \(3, 2\)"):
        model.try_load_record(record)
    assert_unchanged(model, before_values, before_ids)


def test_missing_and_unexpected_keys_are_reported_together():
    model = Net(2)
    before_values, before_ids = values(model), ids(model)
    record = record_with(Net(1), bias=None, extra=np.zeros(1, np.float32))
    with pytest.raises(RecordError) as info:
        model.load_record(record)
    assert "missing from the record: bias" in str(info.value) and "not in the module: extra" in str(info.value)
    assert_unchanged(model, before_values, before_ids)


def test_allow_partial_loads_a_subset_but_never_unknown_paths():
    source, model = Net(1), Net(2)
    record = record_with(source, bias=None).with_options(allow_partial=True)
    model.load_record(record)
    np.testing.assert_array_equal(np.asarray(model.block.weight), np.asarray(source.block.weight))
    np.testing.assert_array_equal(np.asarray(model.bias), np.full(3, 2.0))
    with pytest.raises(RecordError, match="not in the module: extra"):
        model.load_record(record_with(source, extra=np.zeros(1)).with_options(allow_partial=True))


def test_dtype_policy_cast_keeps_the_module_dtype():
    model = Net(2)
    record = record_with(Net(1), bias=np.array([0.1, 0.2, 0.3], np.float64))
    model.load_record(record)
    assert model.bias.dtype == braze.float32
    np.testing.assert_array_equal(np.asarray(model.bias), np.array([0.1, 0.2, 0.3], np.float32))


def test_dtype_policy_strict_requires_equal_dtypes():
    model = Net(2)
    before_values, before_ids = values(model), ids(model)
    record = record_with(Net(1), bias=np.zeros(3, np.float64)).with_options(dtype_policy="strict")
    with pytest.raises(RecordError, match=r"bias: the record holds float64, the module float32"):
        model.load_record(record)
    assert_unchanged(model, before_values, before_ids)
    with pytest.raises(RecordError, match="dtype_policy"):
        ModuleRecord({}, dtype_policy="loose")


def test_validate_false_skips_the_shape_check():
    model = Net(2)
    model.load_record(record_with(Net(1), bias=np.zeros(5, np.float32)).with_options(validate=False))
    assert model.bias.shape == (5,)


def test_save_and_load_mappers_are_applied():
    source = Net(1)
    source.bias.save_mapper(lambda t: t * 2.0)
    record = source.into_record()
    np.testing.assert_array_equal(record["bias"].array, np.full(3, 2.0))
    np.testing.assert_array_equal(np.asarray(source.bias), np.ones(3))
    target = Net(2)
    target.bias.load_mapper(lambda t: t + 1.0)
    target.load_record(record)
    np.testing.assert_array_equal(np.asarray(target.bias), np.full(3, 3.0))


def test_load_mapper_output_shape_is_validated():
    target = Net(2)
    target.bias.load_mapper(lambda t: t.reshape(3, 1))
    with pytest.raises(RecordError, match=r"bias: the record loads as shape \(3, 1\)"):
        target.load_record(Net(1).into_record())


def test_loading_into_a_lazy_parameter_never_initializes_it():
    calls = []

    def init(device, requires_grad):
        calls.append(device)
        return braze.zeros(3)

    model = Net(2)
    model.bias = nn.Param.uninitialized(init, (3,), device=braze.Device("cpu", 1))
    model.load_record(Net(1).into_record())
    assert calls == []
    assert model.bias.is_initialized and model.bias.device == braze.Device("cpu", 1)
    np.testing.assert_array_equal(np.asarray(model.bias), np.ones(3))

    wrong = Net(2)
    wrong.bias = nn.Param.uninitialized(init, (4,))
    with pytest.raises(RecordError, match=r"bias: the record has shape \(3,\), the module has \(4,\)"):
        wrong.load_record(Net(1).into_record())
    assert calls == [] and not wrong.bias.is_initialized


def test_into_record_group_reads_only_the_group():
    calls = []
    model = Net(1)
    model.bias = nn.Param.uninitialized(lambda d, r: calls.append(d) or braze.zeros(3), (3,))
    record = model.into_record_group(nn.ParamGroup.paths("block.*"))
    assert sorted(record) == ["block.steps", "block.weight"] and record.allow_partial
    assert calls == [] and not model.bias.is_initialized
    target = Net(2).load_record(record)
    np.testing.assert_array_equal(np.asarray(target.block.weight), np.asarray(model.block.weight))
    np.testing.assert_array_equal(np.asarray(target.bias), np.full(3, 2.0))


def test_a_failing_load_mapper_is_a_record_error_and_changes_nothing():
    def broken(t):
        raise ValueError("cannot convert")

    model = Net(2)
    before_values, before_ids = values(model), ids(model)
    model.bias.load_mapper(broken)
    with pytest.raises(RecordError, match="bias: the load mapper raised ValueError: cannot convert"):
        model.load_record(Net(1).into_record())
    assert_unchanged(model, before_values, before_ids)
