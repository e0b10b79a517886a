"""braze.compile: signatures, Tensors in and out, training mode, inspection, the disk cache across processes and
`braze dump --stage llvm|asm`."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import braze
import braze.nn as nn
from braze import ir
from braze.cli import main
from braze.ir.errors import BrazeError, CodegenError, ShapeError

ROOT = Path(__file__).resolve().parents[2]


def softmax_of_exp(a: braze.Tensor) -> braze.Tensor:
    return braze.softmax(braze.exp(a) * 0.5, dim=-1)


def data(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def eager(fn, *arrays: np.ndarray) -> np.ndarray:
    with braze.no_grad():
        return fn(*(braze.tensor(a) for a in arrays)).numpy()


def test_compile_with_examples_fixes_the_signature() -> None:
    a = data(3, 5)
    compiled = braze.compile(softmax_of_exp, a)
    np.testing.assert_allclose(compiled(a), eager(softmax_of_exp, a), rtol=1e-5, atol=1e-7)
    assert compiled.signatures() == [(((3, 5), "float32"),)]
    with pytest.raises(ShapeError, match=r"input 0 \('a'\): expected a float32 array of shape \(3, 5\)"):
        compiled(data(4, 5))


def test_compile_without_examples_compiles_per_signature() -> None:
    compiled = braze.compile(softmax_of_exp)
    assert "not compiled yet" in repr(compiled)
    with pytest.raises(BrazeError, match="nothing is compiled yet"):
        compiled.graph
    for shape in [(2, 3), (4, 7), (2, 3)]:
        a = data(*shape, seed=len(shape))
        np.testing.assert_allclose(compiled(a), eager(softmax_of_exp, a), rtol=1e-5, atol=1e-7)
        assert compiled.graph.inputs[0].shape == shape
    assert len(compiled.signatures()) == 2


def test_compile_without_examples_names_a_non_array_input() -> None:
    compiled = braze.compile(softmax_of_exp)
    with pytest.raises(BrazeError, match=r"input 0: expected a numpy array or a braze Tensor, got list"):
        compiled([[1.0, 2.0]])


def test_compile_tensors_in_give_tensors_out() -> None:
    a = data(2, 4)
    compiled = braze.compile(softmax_of_exp, braze.tensor(a))
    out = compiled(braze.tensor(a))
    assert isinstance(out, braze.Tensor) and not out.requires_grad
    assert isinstance(compiled(a), np.ndarray)
    np.testing.assert_allclose(out.numpy(), compiled(a))


def test_compile_several_outputs_give_a_tuple() -> None:
    compiled = braze.compile(lambda a: (braze.exp(a), a.transpose(0, 1)), data(2, 3))
    first, second = compiled(data(2, 3))
    assert first.shape == (2, 3) and second.shape == (3, 2)


def test_compile_refuses_a_model_in_training_mode() -> None:
    model = nn.Sequential(nn.ReLU(), nn.Dropout(0.5))
    with pytest.raises(BrazeError, match=r"in training mode \(modules <root>, 0, 1\).*model.eval\(\).*mode='eval'"):
        braze.compile(model, data(2, 3))
    with pytest.raises(BrazeError, match="braze.compile_train_step"):
        braze.compile(model.eval(), data(2, 3), mode="train")


@pytest.mark.parametrize("how", [{"mode": "eval"}, {"eval": True}])
def test_compile_eval_snapshot_of_a_training_model(how: dict) -> None:
    model = nn.Sequential(nn.ReLU(), nn.Dropout(0.5))
    a = data(4, 6)
    compiled = braze.compile(model, a, **how)
    np.testing.assert_array_equal(compiled(a), np.maximum(a, 0))
    assert model.training  # the model itself is untouched
    assert "dropout" not in {n.op for n in compiled.graph.nodes}


def test_compile_a_graph() -> None:
    b = ir.GraphBuilder("g")
    x = b.input("x", ir.TensorType((2, 8), ir.float32))
    graph = b.finish([b.softmax(b.exp(x), axis=1)])
    compiled = braze.compile(graph)
    a = data(2, 8)
    np.testing.assert_allclose(compiled(a), ir.interpret(graph, [a])[0], rtol=1e-5, atol=1e-7)
    with pytest.raises(BrazeError, match="a Graph has its input types in it"):
        braze.compile(graph, a)


def test_compile_inspection_llvm_ir_asm_and_kernels() -> None:
    compiled = braze.compile(softmax_of_exp, data(3, 5))
    kernels = compiled.kernels()
    assert kernels and all(k.name.startswith("k_") for k in kernels)
    whole = compiled.llvm_ir()
    assert f"define void @{compiled.executable.built.entry}(" in whole
    one = compiled.llvm_ir(kernels[0].name)
    assert one.lstrip().startswith(("define", "; Function Attrs")) and kernels[0].name in one
    assert kernels[0].name + ":" in compiled.asm(kernels[0].name)
    assert compiled.executable.built.entry + ":" in compiled.asm()
    with pytest.raises(CodegenError, match="has no kernel 'nope'"):
        compiled.llvm_ir("nope")


@pytest.mark.parametrize("bad", [0, -1, 2.0])
def test_compile_rejects_bad_thread_counts(bad: object) -> None:
    with pytest.raises(BrazeError, match="threads must be a positive integer"):
        braze.compile(softmax_of_exp, data(2, 2), threads=bad)


CACHE_SCRIPT = """
import json, numpy as np, braze
from braze.codegen import cache
a = np.linspace(-2, 2, 40, dtype=np.float32).reshape(5, 8)
compiled = braze.compile(lambda a: braze.softmax(braze.exp(a) * 0.25, dim=-1), a)
print(json.dumps({"stats": cache.stats().as_dict(), "sum": float(compiled(a).sum())}))
"""


def test_compile_second_process_hits_the_disk_cache(tmp_path: Path) -> None:
    env = dict(os.environ, BRAZE_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    env.pop("BRAZE_CACHE", None)
    runs = [json.loads(subprocess.run([sys.executable, "-c", CACHE_SCRIPT], env=env, capture_output=True, text=True,
                                      check=True, cwd=tmp_path).stdout.splitlines()[-1]) for _ in range(2)]
    first, second = runs[0]["stats"], runs[1]["stats"]
    assert first["misses"] >= 1 and first["hits"] == 0 and first["stores"] == first["misses"]
    # the second finds the optimized graph, the graph's objects and the call stub: nothing is compiled or stored
    assert (second["hits"], second["misses"], second["rebuilds"], second["stores"]) == (3, 0, 0, 0)
    assert runs[0]["sum"] == runs[1]["sum"]


FACTORY = '''
import braze.nn as nn


def make():
    return nn.Sequential(nn.ReLU(), nn.Softmax(dim=-1))
'''


@pytest.mark.parametrize("stage,marker", [("llvm", "define void @braze_entry_"), ("asm", "braze_entry_")])
def test_compile_dump_stage_prints_code(tmp_path: Path, capsys: pytest.CaptureFixture[str], stage: str,
                                        marker: str) -> None:
    (tmp_path / "m.py").write_text(FACTORY)
    assert main(["dump", f"{tmp_path / 'm.py'}:make", "--input", "2x6", "--stage", stage]) == 0
    out = capsys.readouterr().out
    assert "kernels in call order" in out and marker in out
    kernel = next(line.split()[1].rstrip(":") for line in out.splitlines() if line.lstrip(";# ").startswith("k_"))
    assert main(["dump", f"{tmp_path / 'm.py'}:make", "--input", "2x6", "--stage", stage, "--kernel", kernel]) == 0
    assert kernel in capsys.readouterr().out


def test_compile_dump_stage_refuses_graph_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "m.py").write_text(FACTORY)
    assert main(["dump", f"{tmp_path / 'm.py'}:make", "--input", "2x6", "--stage", "llvm", "--format", "dot"]) == 2
    assert "cannot be combined" in capsys.readouterr().err


def test_compile_dump_stage_of_a_training_model_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    (tmp_path / "m.py").write_text(FACTORY)
    assert main(["dump", f"{tmp_path / 'm.py'}:make", "--input", "2x6", "--stage", "asm", "--mode", "train"]) == 2
    assert "training mode" in capsys.readouterr().err


@pytest.mark.parametrize("bad,error,message", [
    (lambda a: (a, a), BrazeError, r"takes 1 input\(s\) \(a: f32\[3,5\]\); got 2"),
    (lambda a: (a[None],), ShapeError, r"input 0 \('a'\): expected rank 2, a float32 array of shape \(3, 5\)"),
    (lambda a: (a.astype(np.float64),), braze.DTypeError, r"input 0 \('a'\): expected a float32 .*got dtype float64"),
    (lambda a: (a.tolist(),), BrazeError, r"input 0 \('a'\): expected a float32 array of shape \(3, 5\) .*got list"),
    (lambda a: (None,), BrazeError, r"input 0 \('a'\): expected a float32 array .*got NoneType"),
])
def test_compile_bad_inputs_name_the_input_and_the_expected_type(bad, error, message) -> None:
    a = data(3, 5)
    compiled = braze.compile(softmax_of_exp, a)
    with pytest.raises(error, match=message):
        compiled(*bad(a))
    np.testing.assert_allclose(compiled(a), eager(softmax_of_exp, a), rtol=1e-5, atol=1e-7)


class _Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb, self.fc = nn.Embedding(10, 4), nn.Linear(4, 2)

    def forward(self, ids: Any) -> Any:
        return self.fc(self.emb(ids.reshape(-1)))


def test_compiled_index_inputs_are_checked_before_native_code() -> None:
    """Native kernels cannot raise, so out-of-range token ids are refused by the runtime with the input's name."""
    model = _Embed().eval()
    ids = np.array([[1, 2, 9]], dtype=np.int64)
    compiled = braze.compile(model, ids)
    with braze.no_grad():
        np.testing.assert_allclose(compiled(ids), model(braze.tensor(ids)).numpy(), rtol=1e-6, atol=1e-6)
    for bad in (10, -1):
        with pytest.raises(braze.BrazeError, match=rf"input 0 \('ids'\): index {bad} is out of range.*\[0, 10\)"):
            compiled(np.array([[1, bad, 3]], dtype=np.int64))
