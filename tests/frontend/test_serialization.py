"""braze.save / braze.load: state dicts as plain safetensors, nested objects in the documented code-free
container, torch .pt files through the restricted reader, atomic writes and clear errors for bad files."""
from __future__ import annotations

import io
import math
import os
import pickle

import numpy as np
import pytest
import safetensors.numpy

import braze
from braze import nn
from braze.frontend import serialization
from braze.frontend.safetensors_io import encode


def test_state_dict_is_a_plain_safetensors_file_in_key_order(tmp_path):
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2, dtype=braze.float64))
    path = tmp_path / "model.safetensors"
    braze.save(model.state_dict(), path)
    on_disk = safetensors.numpy.load_file(str(path))
    loaded = braze.load(path)
    assert list(loaded) == list(model.state_dict()) and set(on_disk) == set(loaded)
    for key, value in model.state_dict().items():
        assert isinstance(loaded[key], braze.Tensor) and loaded[key].dtype == braze.tensor(value).dtype
        np.testing.assert_array_equal(np.asarray(loaded[key]), value)
        np.testing.assert_array_equal(on_disk[key], value)


def test_loaded_state_dict_loads_into_a_model(tmp_path):
    source, target = nn.Linear(3, 2), nn.Linear(3, 2)
    braze.save(source.state_dict(), tmp_path / "w.pt")
    target.load_state_dict(braze.load(tmp_path / "w.pt"))
    np.testing.assert_array_equal(np.asarray(target.weight), np.asarray(source.weight))


def nested():
    shared = braze.ones(2, dtype=braze.float64)
    return {"state": {0: {"step": braze.tensor(3.0), "exp_avg": shared, "again": shared}},
            "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0, 1], "foreach": None, "amsgrad": False,
                              "eps": float("inf"), "name": "group"}],
            "array": np.arange(6, dtype=np.int32).reshape(2, 3), ("a", 1): [braze.zeros(0), -2**40],
            "weight": braze.randn(2, 2, requires_grad=True)}


def test_nested_objects_round_trip_exactly(tmp_path):
    obj = nested()
    braze.save(obj, tmp_path / "opt.pt")
    back = braze.load(tmp_path / "opt.pt")
    assert back["param_groups"] == obj["param_groups"] and back[("a", 1)][1] == -2**40
    assert isinstance(back["param_groups"][0]["betas"], tuple) and back["state"][0]["step"].shape == ()
    assert isinstance(back["array"], np.ndarray) and back["array"].dtype == np.int32
    np.testing.assert_array_equal(back["array"], obj["array"])
    assert back["state"][0]["exp_avg"] is back["state"][0]["again"]
    assert back["weight"].requires_grad and not back["state"][0]["step"].requires_grad
    np.testing.assert_array_equal(np.asarray(back["weight"]), np.asarray(obj["weight"]))
    assert back[("a", 1)][0].shape == (0,)


def test_nested_container_documents_its_structure_in_metadata(tmp_path):
    braze.save({"a": [braze.ones(1), 2]}, tmp_path / "x")
    with safetensors.safe_open(str(tmp_path / "x"), "np") as f:
        meta = f.metadata()
        assert meta["format"] == "braze.save" and list(f.keys()) == ["obj['a'][0]"]
    assert meta["braze.structure"] == ('{"dict": [[{"str": "a"}, {"list": [{"tensor": "obj[\'a\'][0]", '
                                       '"requires_grad": false}, {"int": 2}]}]]}')


def test_save_and_load_through_file_objects():
    buffer = io.BytesIO()
    braze.save({"x": braze.arange(3)}, buffer)
    buffer.seek(0)
    assert braze.load(buffer)["x"].tolist() == [0, 1, 2]


def test_a_single_tensor_and_plain_values_round_trip(tmp_path):
    braze.save(braze.tensor([1.5, math.nan]), tmp_path / "t")
    assert np.isnan(np.asarray(braze.load(tmp_path / "t"))[1])
    braze.save([1, "two", None, 3.25], tmp_path / "v")
    assert braze.load(tmp_path / "v") == [1, "two", None, 3.25]


def test_map_location_places_tensors():
    buffer = io.BytesIO()
    braze.save({"x": braze.ones(1)}, buffer)
    buffer.seek(0)
    assert braze.load(buffer, map_location="cpu:1")["x"].device == braze.Device("cpu", 1)


# --- errors -----------------------------------------------------------------------------------------------------


def test_unsupported_objects_raise_naming_the_path_and_leave_the_file(tmp_path):
    path = tmp_path / "keep"
    braze.save({"x": braze.ones(1)}, path)
    before = path.read_bytes()
    with pytest.raises(braze.BrazeError, match=r"obj\['model'\] is a Linear; .* never code"):
        braze.save({"model": nn.Linear(2, 2)}, path)
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["keep"]


def test_cyclic_objects_raise():
    obj: list = [1]
    obj.append(obj)
    with pytest.raises(braze.BrazeError, match="contains itself"):
        braze.save(obj, io.BytesIO())


def test_pickle_module_is_refused():
    with pytest.raises(braze.BrazeError, match="pickle_module is not supported"):
        braze.save({}, io.BytesIO(), pickle_module=pickle)


def corrupt(structure: str) -> io.BytesIO:
    data = encode({"t": np.ones(1)}, {"format": "braze.save", "version": "1", "braze.structure": structure})
    return io.BytesIO(data)


@pytest.mark.parametrize("structure, problem", [
    ("{not json", "not valid JSON"),
    ('{"tensor": "missing"}', "refers to a tensor 'missing'"),
    ('{"float": "x"}', "malformed node 'float'"),
    ('{"code": "os.system"}', "unknown or malformed node 'code'"),
    ('{"dict": [[{"list": []}, {"int": 1}]]}', "not hashable"),
    ('[1, 2]', "one-key object"),
    ('{"list": [' * 300 + ']}' * 300, "nested more than 200 levels"),
])
def test_corrupt_structures_raise_record_errors(structure, problem):
    with pytest.raises(braze.RecordError, match=problem):
        braze.load(corrupt(structure))


def test_a_file_that_is_neither_safetensors_nor_torch_raises(tmp_path):
    (tmp_path / "junk").write_bytes(b"hello world, not a checkpoint")
    with pytest.raises(braze.RecordError, match="junk: not a torch state-dict file"):
        braze.load(tmp_path / "junk")


def test_a_pickle_that_asks_for_code_is_refused_without_running_it(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned > " + str(tmp_path / "ran"),))
    (tmp_path / "evil.pt").write_bytes(pickle.dumps(Evil(), protocol=2))
    with pytest.raises(braze.RecordError, match="global"):
        braze.load(tmp_path / "evil.pt")
    assert not (tmp_path / "ran").exists()


# --- torch files --------------------------------------------------------------------------------------------------


def test_torch_files_load_as_braze_tensors(tmp_path):
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(3, 2).double()
    torch.save({"model": model.state_dict(), "epoch": 4, "betas": (0.9, 0.99)}, tmp_path / "ckpt.pt")
    back = braze.load(tmp_path / "ckpt.pt")
    assert back["epoch"] == 4 and back["betas"] == (0.9, 0.99)
    assert isinstance(back["model"]["weight"], braze.Tensor) and back["model"]["weight"].dtype == braze.float64
    np.testing.assert_array_equal(np.asarray(back["model"]["weight"]), model.weight.detach().numpy())


def test_torch_reads_a_braze_state_dict(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file
    model = nn.Linear(3, 2)
    braze.save(model.state_dict(), tmp_path / "w.safetensors")
    theirs = torch.nn.Linear(3, 2)
    theirs.load_state_dict(load_file(str(tmp_path / "w.safetensors")))
    np.testing.assert_array_equal(theirs.weight.detach().numpy(), np.asarray(model.weight))


def test_braze_load_reads_what_the_frontend_loader_reads(tmp_path):
    braze.save({"a": braze.ones(2), "nested": {"n": 3}}, tmp_path / "obj.safetensors")
    ours, theirs = braze.load(tmp_path / "obj.safetensors"), serialization.load(tmp_path / "obj.safetensors")
    assert serialization.save is braze.save and ours["nested"] == theirs["nested"] == {"n": 3}
    np.testing.assert_array_equal(ours["a"].numpy(), theirs["a"].numpy())
