"""Document 001, records and files (into_record, into_record_group, try_load_record, load_record, save_file,
load_file, try_load_file), with the sentences of documents 000, 002 and the seeds README that concern them.

Each test's docstring quotes the sentence it checks. A "burnpack file" of the documents is a safetensors
file in braze (README: "The record file format is safetensors").
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import braze
from braze import RecordError, nn
from braze.frontend.records import ModuleRecord, RecordEntry


class Inner(nn.Module):
    def __init__(self, rng: np.random.Generator) -> None:
        super().__init__()
        self.weight = nn.Param(rng.standard_normal((4, 3)).astype(np.float32))
        self.register_buffer("running", braze.tensor(rng.standard_normal(4).astype(np.float32)))
        self.training_flag = nn.Flag(True)


class Model(nn.Module):
    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        rng = np.random.default_rng(seed)
        self.inner = Inner(rng)
        self.scale = nn.Param(np.full(4, float(seed + 1), np.float32))


def values(model):
    return {k: np.array(v, copy=True) for k, v in model.state_dict().items()}


def assert_same_values(a, b):
    va, vb = values(a), values(b)
    assert va.keys() == vb.keys()
    for key in va:
        np.testing.assert_array_equal(va[key], vb[key])


def lazy(shape, calls, device=None):
    def init(device, requires_grad):
        calls.append(device)
        return braze.ones(*shape)
    return nn.Param.uninitialized(init, shape, device=device)


# --- Module trait --------------------------------------------------------------------------------------------
def test_modules_are_savable_and_loadable_via_records():
    """ "This will make your module trainable, savable and loadable via into_record and load_record." """
    source, target = Model(1), Model(2)
    assert_same_values(target.load_record(source.into_record()), source)


def test_records_store_parameters_separately_from_configuration():
    """ "Configuration describes a module's structure and hyperparameters; records store its parameters
    separately." (document 000) """
    record = Model(1).into_record()
    assert all(isinstance(e, RecordEntry) and isinstance(e.array, np.ndarray) for e in record.values())
    assert sorted(record) == ["inner.running", "inner.weight", "scale"]


# --- into_record ---------------------------------------------------------------------------------------------
def test_into_record_collects_tensor_parameters():
    """ "Collect this module's tensor parameters into a ModuleRecord." """
    model = Model(1)
    record = model.into_record()
    assert isinstance(record, ModuleRecord)
    assert record.ids() == {path: p.id for path, p in model.named_param_slots()}
    np.testing.assert_array_equal(record["inner.weight"].array, np.asarray(model.inner.weight))


def test_record_saves_to_a_file_or_byte_buffer_and_applies_back(tmp_path):
    """ "The record can be saved to a burnpack file or byte buffer and applied back with load_record." """
    source = Model(1)
    source.into_record().save(tmp_path / "model.safetensors")
    from_file = Model(2).load_record(ModuleRecord.load(tmp_path / "model.safetensors"))
    from_bytes = Model(3).load_record(ModuleRecord.from_bytes(source.into_record().to_bytes()))
    assert_same_values(from_file, source)
    assert_same_values(from_bytes, source)


def test_flags_are_not_recorded_and_loading_keeps_the_destination_flags():
    """ "Module-owned control values such as Flag are runtime configuration and are not recorded; loading
    preserves their state and identity from the destination module." """
    source, target = Model(1), Model(2)
    source.inner.training_flag.set(False)
    record = source.into_record()
    assert "inner.training_flag" not in record and len(record) == 3
    flag = target.inner.training_flag
    target.eval()
    target.load_record(record)
    assert target.inner.training_flag is flag and flag.id == flag.id
    assert not bool(flag) and flag.configured
    target.train()
    assert bool(target.inner.training_flag)


# --- into_record_group ---------------------------------------------------------------------------------------
def test_into_record_group_collects_the_group():
    """ "Collect the tensor parameters group names into a ModuleRecord." """
    model = Model(1)
    record = model.into_record_group(nn.ParamGroup.ids_from_module(model.inner))
    assert sorted(record) == ["inner.running", "inner.weight"]


def test_a_group_record_applies_over_its_checkpoint_with_allow_partial(tmp_path):
    """ "The record of a part of the module rather than all of it — what a run that trained a group writes
    when the rest of the module is the checkpoint it started from, and what load_record applies back over
    that checkpoint (with allow_partial, since the record holds nothing for the parameters outside the
    group)." """
    checkpoint = Model(1)
    checkpoint.save_file(tmp_path / "checkpoint.safetensors")
    trained = Model(1)
    trained.inner.weight.assign(np.full((4, 3), 9.0, np.float32))
    trained.into_record_group(nn.ParamGroup.paths("inner.weight")).save(tmp_path / "group.safetensors")

    restored = Model(5).load_file(tmp_path / "checkpoint.safetensors")
    with pytest.raises(RecordError, match="allow_partial"):
        restored.load_record(ModuleRecord.load(tmp_path / "group.safetensors"))
    restored.load_record(ModuleRecord.load(tmp_path / "group.safetensors", allow_partial=True))
    np.testing.assert_array_equal(np.asarray(restored.inner.weight), np.full((4, 3), 9.0))
    np.testing.assert_array_equal(np.asarray(restored.scale), np.asarray(checkpoint.scale))


def test_into_record_group_never_reads_unmatched_parameters():
    """ "A parameter the group does not match is skipped before its data is read, so this never materializes
    the rest of the module." """
    calls = []
    model = Model(1)
    model.scale = lazy((4,), calls)
    model.into_record_group(nn.ParamGroup.paths("inner.*"))
    assert calls == [] and not model.scale.is_initialized


# --- try_load_record / load_record ---------------------------------------------------------------------------
def test_try_load_record_returns_the_loaded_module():
    """ "Apply a ModuleRecord to this module, returning the loaded module." """
    source, target = Model(1), Model(2)
    assert target.try_load_record(source.into_record()) is target
    assert_same_values(target, source)


def test_try_load_record_honors_dtype_policy_validate_and_allow_partial():
    """ "Honors the record's DTypePolicy, validate, and allow_partial settings." """
    entries = dict(Model(1).into_record())
    entries["scale"] = RecordEntry(entries["scale"].id, np.arange(4, dtype=np.float64))
    cast = Model(2).try_load_record(ModuleRecord(entries))
    assert cast.scale.dtype == braze.float32
    np.testing.assert_array_equal(np.asarray(cast.scale), np.arange(4))
    with pytest.raises(RecordError, match="dtype_policy='strict'"):
        Model(2).try_load_record(ModuleRecord(entries, dtype_policy="strict"))

    entries["scale"] = RecordEntry(entries["scale"].id, np.zeros(6, np.float32))
    with pytest.raises(RecordError, match=r"scale: the record has shape \(6,\), the module has \(4,\)"):
        Model(2).try_load_record(ModuleRecord(entries))
    assert Model(2).try_load_record(ModuleRecord(entries, validate=False)).scale.shape == (6,)

    del entries["scale"]
    with pytest.raises(RecordError, match="missing from the record: scale"):
        Model(2).try_load_record(ModuleRecord(entries))
    partial = Model(2).try_load_record(ModuleRecord(entries, allow_partial=True))
    np.testing.assert_array_equal(np.asarray(partial.scale), np.full(4, 3.0))


def test_try_load_record_changes_nothing_on_error():
    """ "Apply a ModuleRecord to this module, returning the loaded module." (on a RecordError the module is
    left as it was: everything is validated before anything is applied) """
    entries = dict(Model(1).into_record())
    entries["inner.weight"] = RecordEntry(entries["inner.weight"].id, np.zeros((3, 4), np.float32))
    entries["unknown"] = RecordEntry(nn.ParamId(), np.zeros(1, np.float32))
    target = Model(2)
    before, ids = values(target), [p.id for _, p in target.named_param_slots()]
    with pytest.raises(RecordError) as info:
        target.try_load_record(ModuleRecord(entries))
    assert "inner.weight" in str(info.value) and "unknown" in str(info.value)
    assert_same_values(target, Model(2))
    assert values(target).keys() == before.keys()
    assert [p.id for _, p in target.named_param_slots()] == ids


def test_load_record_consumes_and_returns_the_module():
    """ "Apply a ModuleRecord to this module, consuming and returning it." """
    source, target = Model(1), Model(2)
    assert target.load_record(source.into_record()) is target
    assert_same_values(target, source)


def test_load_record_raises_when_validation_fails():
    """ "Panics if validation fails; use try_load_record for the fallible variant." """
    entries = dict(Model(1).into_record())
    entries["scale"] = RecordEntry(entries["scale"].id, np.zeros(5, np.float32))
    with pytest.raises(RecordError, match="scale"):
        Model(2).load_record(ModuleRecord(entries))


# --- files ---------------------------------------------------------------------------------------------------
def test_save_file_writes_the_parameters_to_disk(tmp_path):
    """ "Save this module's parameters to a burnpack file on disk." """
    from safetensors import safe_open
    model = Model(1)
    assert model.save_file(tmp_path / "m.safetensors") is None
    with safe_open(str(tmp_path / "m.safetensors"), framework="np") as f:
        np.testing.assert_array_equal(f.get_tensor("scale"), np.asarray(model.scale))


def test_save_file_is_into_record_then_save(tmp_path):
    """ "Convenience for into_record followed by ModuleRecord::save. For non-default load behavior (dtype
    policy, partial loading, validation), go through the record directly." """
    model = Model(1)
    model.save_file(tmp_path / "a.safetensors")
    model.into_record().save(tmp_path / "b.safetensors")
    a, b = ModuleRecord.load(tmp_path / "a.safetensors"), ModuleRecord.load(tmp_path / "b.safetensors")
    assert a.ids() == b.ids() and a.metadata == b.metadata
    for path in a:
        np.testing.assert_array_equal(a[path].array, b[path].array)
    record = ModuleRecord.load(tmp_path / "a.safetensors", dtype_policy="strict", allow_partial=True)
    assert (record.dtype_policy, record.allow_partial, record.validate) == ("strict", True, True)


def test_load_file_returns_the_loaded_module(tmp_path):
    """ "Load this module's parameters from a burnpack file on disk, returning the loaded module." """
    source = Model(1)
    source.save_file(tmp_path / "m.safetensors")
    target = Model(2)
    assert target.load_file(tmp_path / "m.safetensors") is target
    assert_same_values(target, source)


def test_load_file_uses_defaults_and_raises_on_io_or_validation_errors(tmp_path):
    """ "Uses the default load behavior. Panics on I/O or validation errors; use try_load_file for the fallible
    variant, or go through ModuleRecord to configure dtype policy, partial loading or validation." """
    partial = Model(1)
    partial.into_record_group(nn.ParamGroup.paths("scale")).save(tmp_path / "part.safetensors")
    with pytest.raises(RecordError, match="missing from the record"):
        Model(2).load_file(tmp_path / "part.safetensors")
    with pytest.raises(RecordError, match="cannot read"):
        Model(2).load_file(tmp_path / "absent.safetensors")
    Model(2).load_record(ModuleRecord.load(tmp_path / "part.safetensors", allow_partial=True))


def test_try_load_file_is_the_fallible_variant(tmp_path):
    """ "Fallible variant of load_file." """
    source = Model(1)
    source.save_file(tmp_path / "m.safetensors")
    assert_same_values(Model(2).try_load_file(tmp_path / "m.safetensors"), source)
    (tmp_path / "bad.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{")
    with pytest.raises(RecordError, match=r"bad\.safetensors: truncated"):
        Model(2).try_load_file(tmp_path / "bad.safetensors")


def test_the_record_file_is_safetensors_with_ids_and_metadata_in_its_header(tmp_path):
    """ "The record file format is safetensors (a standard container with a JSON header), not a private
    format; parameter ids and record metadata go in its metadata header." (seeds README) """
    from safetensors import safe_open
    model = Model(1)
    ModuleRecord(model.into_record(), metadata={"step": "100"}).save(tmp_path / "m.safetensors")
    with safe_open(str(tmp_path / "m.safetensors"), framework="np") as f:
        header = f.metadata()
    assert json.loads(header["param_ids"]) == {path: int(p.id) for path, p in model.named_param_slots()}
    assert json.loads(header["metadata"]) == {"step": "100"} and header["format_version"] == "1"


# --- Param behaviour through records (document 002) ----------------------------------------------------------
def test_param_ids_are_stable_across_save_and_load(tmp_path):
    """ "The unique ID of this parameter. This is used by eg. optimizers to associate a gradient with a
    specific parameter." (the ids survive a save and load, so optimizer state still finds its parameter) """
    source = Model(1)
    source.save_file(tmp_path / "m.safetensors")
    target = Model(2).load_file(tmp_path / "m.safetensors")
    assert [p.id for _, p in target.named_param_slots()] == [p.id for _, p in source.named_param_slots()]
    assert nn.ParamId() > max(p.id for p in source.parameters())


def test_load_mapper_runs_when_loading_and_save_mapper_when_saving():
    """ "Runs a transformation on the parameter when loading." / "Runs a transformation on the parameter when
    saving." """
    source = Model(1)
    source.scale.save_mapper(lambda t: t * 10.0)
    record = source.into_record()
    np.testing.assert_array_equal(record["scale"].array, np.full(4, 20.0))
    target = Model(2)
    target.scale.load_mapper(lambda t: t / 10.0)
    target.load_record(record)
    np.testing.assert_array_equal(np.asarray(target.scale), np.full(4, 2.0))


def test_transform_for_load_moves_maps_and_keeps_gradient_settings():
    """ "It ensures the tensor is moved to the expected device, applies the param mapper's on_load
    transformation, and preserves the autodiff settings (require_grad)." """
    target = Model(2).fork(braze.Device("cpu", 3))
    target.inner.weight.set_require_grad(False)
    target.scale.load_mapper(lambda t: t + 1.0)
    target.load_record(Model(1).into_record())
    assert target.scale.device == braze.Device("cpu", 3) and target.scale.requires_grad
    np.testing.assert_array_equal(np.asarray(target.scale), np.full(4, 3.0))
    assert not target.inner.weight.requires_grad and not target.inner.weight.is_require_grad()


def test_transform_for_save_can_convert_precision():
    """ "It applies the param mapper's on_save transformation, which can be used to modify the tensor before
    serialization (e.g., quantization, precision conversion)." """
    source = Model(1)
    source.scale.save_mapper(lambda t: t.double())
    assert source.into_record()["scale"].array.dtype == np.float64
    assert source.scale.dtype == braze.float32
    assert Model(2).load_record(source.into_record()).scale.dtype == braze.float32


def test_loading_into_a_lazy_parameter_uses_its_lazy_device_without_initializing():
    """ "This is critical for the load optimization: when loading tensors into an uninitialized parameter, we
    need to know the target device to move the loaded tensor appropriately, but we don't want to trigger the
    initialization function (which would allocate an unnecessary tensor)." """
    calls = []
    target = Model(2)
    target.scale = lazy((4,), calls, device=braze.Device("cpu", 4))
    target.load_record(Model(1).into_record())
    assert calls == [] and target.scale.device == braze.Device("cpu", 4)
    np.testing.assert_array_equal(np.asarray(target.scale), np.full(4, 2.0))


def test_loading_validates_lazy_shapes_without_initializing():
    """ "This is critical for shape validation during loading: when applying tensors to an uninitialized
    parameter, we need to validate the shape without triggering the initialization function" """
    calls = []
    target = Model(2)
    target.scale = lazy((5,), calls)
    with pytest.raises(RecordError, match=r"scale: the record has shape \(4,\), the module has \(5,\)"):
        target.load_record(Model(1).into_record())
    assert calls == [] and not target.scale.is_initialized


def test_parameters_are_loaded_for_inference():
    """ "Parameters are the fundamental building blocks of modules where they serve as containers for tensors
    that can be updated during training, and loaded during inference." """
    source = Model(1)
    inference = Model(2).valid()
    inference.load_record(source.into_record())
    assert_same_values(inference, source)
    assert not inference.scale.requires_grad and inference.scale.is_require_grad()
