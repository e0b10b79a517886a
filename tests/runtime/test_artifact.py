"""The .braze file braze.export writes: a plain safetensors file of the merged weights, the optimized graph's IR
text and a manifest whose content hash covers all three."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy

import braze
from braze import ir
from braze.frontend.safetensors_io import decode
from braze.frontend.trace import trace
from braze.runtime import artifact
from tests.models import MLP as tests_mlp
from tests.runtime.artifact_cases import bn_cnn, inputs, lora_mlp, parts


@pytest.fixture
def exported(tmp_path: Path) -> tuple[braze.nn.Module, Path, dict]:
    model, path = lora_mlp(), tmp_path / "mlp.braze"
    manifest = braze.export(model, path, inputs(4, 6))
    return model, path, manifest


def test_export_weights_open_with_safetensors_and_equal_the_materialized_model(exported) -> None:
    model, path, _ = exported
    weights = safetensors.numpy.load_file(str(path))
    merged = {k: np.asarray(v) for k, v in model.valid().materialize().state_dict().items()}
    assert sorted(weights) == sorted(merged) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    for name, array in weights.items():
        np.testing.assert_array_equal(array, merged[name], err_msg=name)


def test_export_merged_weights_differ_from_the_base_weights(exported) -> None:
    model, path, _ = exported
    base = np.asarray(dict(model.named_parameters())["0.weight"].base())
    assert not np.array_equal(safetensors.numpy.load_file(str(path))["0.weight"], base)


def test_export_manifest_lists_signature_passes_and_totals(exported) -> None:
    _, path, manifest = exported
    assert manifest == parts(path)[2]
    assert manifest["format_version"] == artifact.VERSION and manifest["braze_version"] == braze.__version__
    assert manifest["inputs"] == [{"name": "input", "dtype": "float32", "shape": [4, 6]}]
    assert [(o["dtype"], o["shape"]) for o in manifest["outputs"]] == [("float32", [4, 3])]
    assert manifest["pipeline"] == list(ir.passes.PIPELINES["inference"])
    assert [p["name"] for p in manifest["passes"]] == manifest["pipeline"]
    assert manifest["parameters"] == {"tensors": 4, "count": 16 * 6 + 16 + 3 * 16 + 3, "bytes": 4 * 163}


def test_export_manifest_reports_what_was_merged(exported) -> None:
    fold = next(p for p in exported[2]["passes"] if p["name"] == "fold_reparameterizations")
    assert set(fold["details"]["params"]) == {"0.weight", "2.weight"}
    assert all(d["choice"] == "merge" for d in fold["details"]["params"].values())
    assert any("merged" in note for note in fold["notes"])


def test_export_manifest_reports_the_merge_error_of_qlora(tmp_path: Path) -> None:
    braze.manual_seed(0)
    model = braze.nn.Sequential(braze.nn.Linear(64, 8)).apply_qlora(braze.nn.QLora(rank=2, alpha=4)).eval()
    dict(model.named_parameters())["0.weight.lora_b"].assign(inputs(8, 2))
    manifest = braze.export(model, tmp_path / "q.braze", inputs(2, 64), policy="merge")
    fold = next(p for p in manifest["passes"] if p["name"] == "fold_reparameterizations")
    report = fold["details"]["params"]["0.weight"]
    assert report["choice"] == "merge" and report["scheme"] == "nf4"
    assert isinstance(report["max_abs_error"], float) and report["max_abs_error"] < 1e-5


def test_export_manifest_reports_folded_batch_norm(tmp_path: Path) -> None:
    manifest = braze.export(bn_cnn(), tmp_path / "cnn.braze", inputs(1, 3, 5, 5))
    fold = next(p for p in manifest["passes"] if p["name"] == "fold_batchnorm")
    assert fold["nodes_after"] < fold["nodes_before"]
    assert not any("running" in name for name in safetensors.numpy.load_file(str(tmp_path / "cnn.braze")))


def test_export_graph_text_is_the_optimized_graph_without_a_memory_plan(exported) -> None:
    model, path, _ = exported
    _, text, _ = parts(path)
    compiled = braze.compile(model, inputs(4, 6))
    expected = compiled.graph.replace(attributes={k: v for k, v in compiled.graph.attributes.items() if k != "memory_plan"})
    assert text == str(expected)


def test_export_content_hash_covers_graph_manifest_and_tensors(exported) -> None:
    _, path, manifest = exported
    tensors, text, _ = parts(path)
    assert manifest["content_hash"] == artifact.content_hash(text, manifest, tensors)
    assert artifact.content_hash(text + " ", manifest, tensors) != manifest["content_hash"]
    assert artifact.content_hash(text, {**manifest, "graph": "other"}, tensors) != manifest["content_hash"]
    changed = {**tensors, "2.bias": tensors["2.bias"] + 1}
    assert artifact.content_hash(text, manifest, changed) != manifest["content_hash"]


def test_export_content_is_deterministic(exported, tmp_path: Path) -> None:
    model, path, manifest = exported  # the safetensors header's key order may vary; the content hash may not
    assert braze.export(model, tmp_path / "again.braze", inputs(4, 6)) == manifest


def test_export_of_a_graph_and_of_a_function(tmp_path: Path) -> None:
    graph = trace(lora_mlp().valid(), inputs(4, 6))
    assert braze.export(graph, tmp_path / "g.braze")["graph"] == "Sequential"
    manifest = braze.export(lambda a, b: braze.exp(a) * b, tmp_path / "f.braze", inputs(3), inputs(3))
    assert [i["shape"] for i in manifest["inputs"]] == [[3], [3]]


def test_export_write_is_atomic_and_leaves_no_temporary_files(exported, tmp_path: Path) -> None:
    _, path, _ = exported
    before = path.read_bytes()
    with pytest.raises(braze.BrazeError, match="example input 0 is a str"):
        braze.export(lora_mlp(), path, "not an array")
    assert path.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["mlp.braze"]


def test_export_into_a_missing_directory_names_it(tmp_path: Path) -> None:
    with pytest.raises(artifact.ArtifactError, match="cannot write: No such file or directory"):
        braze.export(lora_mlp(), tmp_path / "missing" / "m.braze", inputs(4, 6))


def test_export_rejects_options_no_pass_reads(tmp_path: Path) -> None:
    with pytest.raises(braze.BrazeError, match="unknown keyword argument.*thread.*valid keywords"):
        braze.export(lora_mlp(), tmp_path / "m.braze", inputs(4, 6), thread=2)
    assert not (tmp_path / "m.braze").exists()


def test_export_refuses_a_graph_traced_in_training_mode(tmp_path: Path) -> None:
    graph = trace(tests_mlp().train(), inputs(2, 8))
    with pytest.raises(braze.BrazeError, match="training mode"):
        braze.export(graph, tmp_path / "m.braze")


def test_export_manifest_is_json_with_sorted_keys(exported) -> None:
    _, path, _ = exported
    metadata = decode(path.read_bytes(), str(path))[1]
    assert metadata["format"] == "braze.artifact"
    assert list(json.loads(metadata["braze.manifest"])) == sorted(json.loads(metadata["braze.manifest"]))
