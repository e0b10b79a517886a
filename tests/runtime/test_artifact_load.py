"""braze.load of .braze files: the same outputs as the compiled model, in a fresh process without the model's
code, and a clear braze error for every truncated, corrupted, tampered or hostile file."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import braze
from braze.runtime.artifact import ArtifactError
from tests.runtime.artifact_cases import bn_cnn, crafted, inputs, lora_mlp, parts, rewrite

MODEL_SOURCE = '''
import numpy as np
import braze.nn as nn
import braze.nn.functional as F


class Gated(nn.Module):
    """A model whose class exists only in this file."""

    def __init__(self):
        super().__init__()
        self.fc, self.gate = nn.Linear(6, 5), nn.Linear(6, 5)

    def forward(self, x):
        return F.gelu(self.fc(x)) * F.sigmoid(self.gate(x))
'''

LOADER = '''
import importlib.util, sys
import numpy as np
assert importlib.util.find_spec("artifact_private_model") is None, "the model's module is importable"
import braze
compiled = braze.load(sys.argv[1], threads=1)
np.save(sys.argv[3], compiled(np.load(sys.argv[2])))
'''


@pytest.fixture
def exported(tmp_path: Path) -> tuple[braze.nn.Module, Path]:
    model, path = lora_mlp(), tmp_path / "mlp.braze"
    braze.export(model, path, inputs(4, 6))
    return model, path


def test_load_gives_the_compiled_model_outputs_bit_for_bit(exported) -> None:
    model, path = exported
    x = inputs(4, 6, seed=3)
    np.testing.assert_array_equal(braze.load(path, threads=1)(x), braze.compile(model, x, threads=1)(x))


@pytest.mark.parametrize("policy", ["merge", "keep"])
def test_load_of_qlora_gives_the_compiled_outputs_bit_for_bit(tmp_path: Path, policy: str) -> None:
    braze.manual_seed(0)
    model = braze.nn.Sequential(braze.nn.Linear(64, 8)).apply_qlora(braze.nn.QLora(rank=2, alpha=4)).eval()
    x = inputs(2, 64)
    braze.export(model, tmp_path / "q.braze", x, policy=policy)
    expected = braze.compile(model, x, threads=1, policy=policy)(x)
    np.testing.assert_array_equal(braze.load(tmp_path / "q.braze", threads=1)(x), expected)


def test_load_of_a_folded_batch_norm_cnn_matches_eager(tmp_path: Path) -> None:
    model, x = bn_cnn(), inputs(2, 3, 5, 5)
    braze.export(model, tmp_path / "cnn.braze", x)
    with braze.no_grad():
        expected = model(braze.tensor(x)).numpy()
    np.testing.assert_allclose(braze.load(tmp_path / "cnn.braze")(x), expected, rtol=1e-5, atol=1e-5)


def test_load_in_a_fresh_process_without_the_model_code(tmp_path: Path) -> None:
    source_dir, run_dir = tmp_path / "src", tmp_path / "run"
    source_dir.mkdir(), run_dir.mkdir()
    (source_dir / "artifact_private_model.py").write_text(MODEL_SOURCE)
    spec = importlib.util.spec_from_file_location("artifact_private_model", source_dir / "artifact_private_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    braze.manual_seed(0)
    model, x = module.Gated().eval(), inputs(3, 6, seed=5)
    braze.export(model, run_dir / "gated.braze", x)
    np.save(run_dir / "x.npy", x)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-c", LOADER, "gated.braze", "x.npy", "y.npy"], cwd=run_dir, env=env,
                   check=True, capture_output=True, text=True)
    np.testing.assert_array_equal(np.load(run_dir / "y.npy"), braze.compile(model, x, threads=1)(x))


def test_load_replans_memory_and_ignores_a_plan_in_the_file(exported, tmp_path: Path) -> None:
    model, path = exported
    hostile = 'attributes {memory_plan={alignment=64, arena_bytes=0, naive_bytes=0, offsets={"0"=999999999}}, '
    out = rewrite(path, tmp_path / "planned.braze", graph=lambda g: g.replace("attributes {", hostile, 1))
    x = inputs(4, 6, seed=1)
    np.testing.assert_array_equal(braze.load(out, threads=1)(x), braze.compile(model, x, threads=1)(x))


def test_load_checks_inputs_like_a_compiled_model(exported) -> None:
    with pytest.raises(braze.ShapeError, match="input 0 \\('input'\\)"):
        braze.load(exported[1])(inputs(5, 6))


def test_load_rejects_unknown_options(exported) -> None:
    with pytest.raises(braze.BrazeError, match="unknown option\\(s\\) thread .*valid: threads"):
        braze.load(exported[1], thread=2)


# --- hostile files --------------------------------------------------------------------------------------------

def refused(path: Path, match: str) -> None:
    with pytest.raises(ArtifactError, match=match):
        braze.load(path)


def test_load_refuses_a_truncated_file(exported, tmp_path: Path) -> None:
    data = exported[1].read_bytes()
    for size in (0, 5, 200, len(data) - 1):
        (tmp_path / "cut.braze").write_bytes(data[:size])
        refused(tmp_path / "cut.braze", "truncated")


def test_load_refuses_a_flipped_byte_in_the_weights(exported, tmp_path: Path) -> None:
    data = bytearray(exported[1].read_bytes())
    data[-3] ^= 0x10
    (tmp_path / "flip.braze").write_bytes(bytes(data))
    refused(tmp_path / "flip.braze", "content hash does not match")


def test_load_refuses_a_flipped_byte_in_the_header(exported, tmp_path: Path) -> None:
    data = bytearray(exported[1].read_bytes())
    at = data.index(b"relu") if b"relu" in data else data.index(b"fused")
    data[at] ^= 0x01
    (tmp_path / "flip.braze").write_bytes(bytes(data))
    refused(tmp_path / "flip.braze", "content hash does not match|corrupt")


def test_load_refuses_tampered_ir(exported, tmp_path: Path) -> None:
    out = rewrite(exported[1], tmp_path / "t.braze", graph=lambda g: g.replace("relu", "sigmoid"), rehash=False)
    refused(out, "content hash does not match")


def test_load_refuses_a_tampered_manifest(exported, tmp_path: Path) -> None:
    out = rewrite(exported[1], tmp_path / "t.braze", manifest=lambda m: {**m, "braze_version": "9"}, rehash=False)
    refused(out, "content hash does not match")


def test_load_refuses_a_newer_format_version(exported, tmp_path: Path) -> None:
    out = rewrite(exported[1], tmp_path / "new.braze", manifest=lambda m: {**m, "format_version": 2})
    refused(out, "format version 2 .*this braze reads format version 1: upgrade braze")


def test_load_refuses_an_extra_tensor(exported, tmp_path: Path) -> None:
    out = rewrite(exported[1], tmp_path / "x.braze", tensors=lambda t: {**t, "stowaway": np.zeros(3, np.float32)})
    refused(out, "'stowaway' belong to no param of the graph")


def test_load_refuses_a_missing_tensor(exported, tmp_path: Path) -> None:
    out = rewrite(exported[1], tmp_path / "x.braze",
                  tensors=lambda t: {k: v for k, v in t.items() if k != "2.bias"})
    refused(out, "param '2.bias' \\(f32\\[3\\]\\) has no tensor")


def test_load_refuses_a_tensor_of_the_wrong_dtype(exported, tmp_path: Path) -> None:
    out = rewrite(exported[1], tmp_path / "x.braze", tensors=lambda t: {**t, "0.bias": t["0.bias"].astype(np.float64)})
    refused(out, "tensor '0.bias' is float64\\[16\\]; the graph's param leaf declares f32\\[16\\]")


def test_load_refuses_a_tensor_of_the_wrong_shape(exported, tmp_path: Path) -> None:
    out = rewrite(exported[1], tmp_path / "x.braze", tensors=lambda t: {**t, "0.bias": t["0.bias"][:8]})
    refused(out, "tensor '0.bias' is float32\\[8\\]")


def test_load_refuses_a_manifest_that_disagrees_with_the_graph(exported, tmp_path: Path) -> None:
    def wrong_inputs(m: dict) -> dict:
        return {**m, "inputs": [{"name": "input", "dtype": "float32", "shape": [9, 6]}]}
    refused(rewrite(exported[1], tmp_path / "x.braze", manifest=wrong_inputs), "the manifest's inputs")
    refused(rewrite(exported[1], tmp_path / "y.braze", manifest=lambda m: {**m, "parameters": {}}),
            "parameter totals")
    without_passes = rewrite(exported[1], tmp_path / "z.braze",
                             manifest=lambda m: {k: v for k, v in m.items() if k != "passes"})
    refused(without_passes, "manifest's 'passes' is missing")
    refused(rewrite(exported[1], tmp_path / "p.braze", manifest=lambda m: {**m, "passes": [1]}),
            "pass entry 0 of the manifest lacks")


def test_load_refuses_ir_that_does_not_parse(exported, tmp_path: Path) -> None:
    out = rewrite(exported[1], tmp_path / "x.braze", graph=lambda g: g.replace("return", "retrun"))
    refused(out, "the graph does not parse")


def test_load_refuses_huge_declared_sizes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    huge = 1 << 40
    text = textwrap.dedent(f"""\
        graph @g(%x: f32[{huge},4]) -> (f32[{huge},4]) {{
          %0 = relu %x : f32[{huge},4]
          return %0
        }}
        """)
    monkeypatch.setenv("BRAZE_MAX_TENSOR_BYTES", str(1 << 62))  # an exporter with a larger limit wrote it
    path = crafted(tmp_path / "huge.braze", text, {})
    monkeypatch.delenv("BRAZE_MAX_TENSOR_BYTES")
    refused(path, f"does not parse: .*f32\\[{huge},4\\] needs {huge * 16} bytes")


def test_load_refuses_a_graph_that_needs_more_than_this_machines_memory(exported,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import braze.runtime.compile_path as path
    monkeypatch.setattr(path, "physical_memory", lambda: 1024)
    refused(exported[1], "mlp.braze: graph @.* needs [0-9]+ bytes \\(arena [0-9]+\\), more than this machine's "
                         "1024 bytes of memory")


def test_load_refuses_a_tensor_whose_declared_size_wraps_around(exported, tmp_path: Path) -> None:
    data = exported[1].read_bytes()
    tensors, _, _ = parts(exported[1])
    shape = str(list(tensors["2.bias"].shape)).replace(" ", "").encode()
    header_end = 8 + int.from_bytes(data[:8], "little")
    header = data[8:header_end].replace(b'"shape":' + shape, b'"shape":[4294967296,4294967296]', 1)
    (tmp_path / "wrap.braze").write_bytes(len(header).to_bytes(8, "little") + header + data[header_end:])
    refused(tmp_path / "wrap.braze", "needs 73786976294838206464 bytes")


def test_load_refuses_a_safetensors_file_that_is_not_an_artifact(tmp_path: Path) -> None:
    from braze.frontend.safetensors_io import encode
    (tmp_path / "plain.braze").write_bytes(encode({"w": np.zeros(2, np.float32)}, {}))
    refused(tmp_path / "plain.braze", "not a braze artifact")


def test_load_refuses_garbage_and_missing_files(tmp_path: Path) -> None:
    (tmp_path / "junk.braze").write_bytes(b"\xff" * 64)
    refused(tmp_path / "junk.braze", "header length")
    refused(tmp_path / "absent.braze", "cannot read")


def test_load_of_a_non_artifact_goes_to_the_tensor_loader(tmp_path: Path) -> None:
    from braze.frontend.safetensors_io import encode
    (tmp_path / "weights.safetensors").write_bytes(encode({"w": np.arange(2, dtype=np.float32)}, {}))
    loaded = braze.load(tmp_path / "weights.safetensors")
    assert list(loaded) == ["w"] and isinstance(loaded["w"], braze.Tensor)
    np.testing.assert_array_equal(loaded["w"].numpy(), [0.0, 1.0])
    with open(tmp_path / "weights.safetensors", "rb") as f:   # a file object goes to the tensor loader too
        np.testing.assert_array_equal(braze.load(f)["w"].numpy(), [0.0, 1.0])

