"""The `braze` command line as the README shows it: dump, export, info, run, bench and --version, then every bad
argument or file giving one `braze: error:` line and a non-zero exit status."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import braze
from braze.cli import main

MODEL = '''
import braze.nn as nn
import braze.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def make():
    return Net()


def failing():
    return helper()


def helper():
    raise ValueError("the factory failed")


class Broken(nn.Module):
    def forward(self, x):
        return x.no_such_method()


def broken_forward():
    return Broken()
'''


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "model.py").write_text(MODEL)
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def ok(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def error(capsys: pytest.CaptureFixture[str], *argv: str, status: int = 2) -> str:
    """The one line a failing command prints (and its status)."""
    try:
        got = main(list(argv))
    except SystemExit as exit:
        got = exit.code
    assert got == status
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("braze: error: "), lines
    return lines[0]


# --- the README walk-through ----------------------------------------------------------------------------------

def test_cli_export_info_run_as_the_readme_shows(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = ok(capsys, "export", "model.py:make", "--input", "1x8", "-o", "net.braze")
    assert out == "wrote net.braze: (x: float32[1,8]) -> (1: float32[1,4]); 212 values in 4 tensor(s), 848 bytes\n"
    info = ok(capsys, "info", "net.braze")
    assert info.startswith("net.braze: braze artifact, format version 1")
    assert "fuse" in info and "fused (gemm)                2" in info and "212 values in 4 tensor(s)" in info
    assert ok(capsys, "run", "net.braze", "--input", "x.npy", "-o", "y.npy") == ""
    spec = importlib.util.spec_from_file_location("readme_model", folder / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    braze.manual_seed(0)
    expected = braze.compile(module.make().eval(), np.load("x.npy"))(np.load("x.npy"))
    np.testing.assert_allclose(np.load("y.npy"), expected, rtol=1e-6, atol=1e-6)


def test_cli_run_without_output_prints_a_summary(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ok(capsys, "export", "model.py:make", "--input", "1x8", "-o", "net.braze")
    out = ok(capsys, "run", "net.braze", "--input", "x.npy")
    assert out.startswith("output 0 ('1'): float32[1, 4] min ")


def test_cli_dump_as_the_readme_shows(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = ok(capsys, "dump", "model.py:make", "--input", "1x8", "--passes", "inference")
    assert braze.ir.parse(text).name == "Net" and "fused" in text


@pytest.mark.parametrize("stage, roles", [("forward", {"output"}), ("backward", {"output", "gradient"}),
                                          ("step", {"output", "param_update", "state_update"})])
def test_cli_dump_shows_the_graphs_of_a_training_step(folder: Path, capsys: pytest.CaptureFixture[str], stage: str,
                                                      roles: set[str]) -> None:
    text = ok(capsys, "dump", "model.py:make", "--input", "2x8", "--mode", "train", "--stage", stage,
              "--optimizer", "adamw")
    graph = braze.ir.parse(text)
    assert {role.split(":")[0] for role in graph.attributes["outputs"]} == roles
    assert ("coefficient:0.neg_step_size" in graph.attributes.get("inputs", ())) == (stage == "step")


def test_cli_dump_of_a_training_stage_needs_train_mode(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = error(capsys, "dump", "model.py:make", "--input", "2x8", "--stage", "backward")
    assert "--stage backward shows a graph of the compiled training step: it needs --mode train" in line


def test_cli_dump_of_an_artifact_shows_its_graph_and_code(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ok(capsys, "export", "model.py:make", "--input", "1x8", "-o", "net.braze")
    assert braze.ir.parse(ok(capsys, "dump", "net.braze")) == braze.artifacts.read("net.braze").graph
    assert "; entry braze_entry_" in ok(capsys, "dump", "net.braze", "--stage", "llvm")


def test_cli_dump_timings_lists_every_compile_stage(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    table = ok(capsys, "dump", "model.py:make", "--input", "1x8", "--timings")
    stages = [line.rsplit(maxsplit=2)[0] for line in table.splitlines()[1:-1]]
    assert stages[0] == "trace" and {"pass fuse", "cached passes"} & set(stages) and stages[-2:] == ["prepare", "warm"]
    assert {"link", "linked before", "open shared object"} & set(stages) and table.splitlines()[-1].startswith("total")


def test_cli_dump_timings_of_an_artifact_shows_the_load(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ok(capsys, "export", "model.py:make", "--input", "1x8", "-o", "net.braze")
    table = ok(capsys, "dump", "net.braze", "--timings")
    stages = [line.rsplit(maxsplit=2)[0] for line in table.splitlines()[1:-1]]
    assert stages[0] == "pass plan_memory" and "trace" not in stages and stages[-2:] == ["prepare", "warm"]
    assert "native code found, not compiled" in table  # export compiled the same graph in this process


def test_cli_dump_timings_refuses_a_stage(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "--timings prints the compile-time breakdown" in error(
        capsys, "dump", "model.py:make", "--input", "1x8", "--timings", "--stage", "llvm")


def test_cli_bench_of_a_model_and_of_an_artifact(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = ok(capsys, "bench", "model.py:make", "--input", "4x8", "--threads", "1", "--seconds", "0.1")
    assert "p50 ms" in out and out.splitlines()[2].startswith("braze ") and "1.00x" in out
    rows = {line.split()[0]: line for line in out.splitlines()[2:]}
    assert set(rows) == {"braze", "onnxruntime", "torch"}
    if importlib.util.find_spec("torch") is not None:  # the model file runs under torch with braze's weights
        assert "skipped" not in rows["torch"], rows["torch"]
    ok(capsys, "export", "model.py:make", "--input", "4x8", "-o", "net.braze")
    out = ok(capsys, "bench", "net.braze", "--seconds", "0.1")
    assert "torch        skipped: a .braze file has no model source" in out


def test_cli_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0 and capsys.readouterr().out == f"braze {braze.__version__}\n"


def test_cli_every_command_has_help_with_an_example(capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("dump", "export", "info", "run", "bench", "cache", "demo", "version"):
        with pytest.raises(SystemExit):
            main([name, "--help"])
        assert "example:\n  braze " + name in capsys.readouterr().out


def test_cli_cache_info_shows_the_directory_and_clear_empties_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("BRAZE_CACHE", raising=False)
    braze.compile(lambda a: braze.exp(a) * 2, np.ones((3, 5), np.float32))  # the optimized graph, its objects and
    stored = len(list((tmp_path / "cache").glob("*.bzo")))                    # its kernel's (and, in a new process,
    assert stored >= 3                                                        # the host's record and runtime code)
    shown = ok(capsys, "cache", "info")
    assert f"path     {tmp_path / 'cache'}\n" in shown and f"entries  {stored}\n" in shown
    assert "cap      1024.0 MB" in shown
    assert ok(capsys, "cache", "clear") == f"removed {stored} entries from {tmp_path / 'cache'}\n"
    assert "entries  0\n" in ok(capsys, "cache", "info")


def test_cli_cache_info_counts_the_measured_conv_choices(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from braze.codegen import conv_tuning, host_target
    from braze.codegen.conv import ConvSpec
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(conv_tuning.TUNE_ENV, raising=False)
    assert "tuning   off (BRAZE_TUNE=1 turns it on); 0 conv shapes measured" in ok(capsys, "cache", "info")
    monkeypatch.setenv(conv_tuning.TUNE_ENV, "1")
    spec = ConvSpec(1, 4, 8, 8, 8, 3, 3, padding=(1, 1), prepacked_weight=True)
    conv_tuning.record(spec, 16, host_target().identity, {"im2col": 2.0, "direct": 1.0})
    assert "tuning   on; 1 conv shapes measured" in ok(capsys, "cache", "info")
    ok(capsys, "cache", "clear")
    assert "1 conv shapes measured" in ok(capsys, "cache", "info")


def test_cli_export_merges_a_peft_adapter_and_writes_onnx(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    onnxruntime = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    spec = importlib.util.spec_from_file_location("adapter_model", folder / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    braze.manual_seed(1)
    tuned = module.make().apply_lora(braze.nn.Lora(rank=2, alpha=4, targets=["fc1"]))
    with braze.no_grad():
        tuned.fc1.weight.adapter.b.copy_(braze.randn(16, 2))  # a trained (non-zero) adapter
    tuned.save_peft_adapter(str(folder / "adapter"))
    ok(capsys, "export", "model.py:make", "--input", "1x8", "-o", "net.braze", "--onnx", "net.onnx",
       "--lora-adapter", "adapter")
    x = np.load(folder / "x.npy")
    ours = braze.load(folder / "net.braze")(x)
    session = onnxruntime.InferenceSession(str(folder / "net.onnx"), providers=["CPUExecutionProvider"])
    (theirs,) = session.run(None, {session.get_inputs()[0].name: x})
    np.testing.assert_allclose(theirs, ours, rtol=1e-5, atol=1e-6)
    plain = braze.load(folder / "net.braze")
    ok(capsys, "export", "model.py:make", "--input", "1x8", "-o", "plain.braze")
    assert not np.allclose(braze.load(folder / "plain.braze")(x), plain(x))  # the adapter changed the outputs


def test_cli_export_and_run_in_fresh_processes(folder: Path) -> None:
    def braze_command(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "braze", *argv], capture_output=True, text=True, cwd=folder)
    assert braze_command("export", "model.py:make", "--input", "1x8", "-o", "net.braze").returncode == 0
    os.remove(folder / "model.py")  # running the artifact needs no model code
    result = braze_command("run", "net.braze", "--input", "x.npy")
    assert result.returncode == 0 and result.stdout.startswith("output 0"), result.stderr


# --- errors: one line, non-zero -------------------------------------------------------------------------------

def test_cli_extra_input_names_the_forward_arguments(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = error(capsys, "export", "model.py:make", "--input", "1x8", "--input", "2x2", "-o", "n.braze")
    assert line == "braze: error: model.py:make: forward(x) takes 1 input(s) (x); got 2 --input shape(s)"


def test_cli_missing_input_is_an_argument_error(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert "model.py:make: give --input SHAPE for every input" in error(capsys, "dump", "model.py:make")


@pytest.mark.parametrize("command", ["dump", "export"])
def test_cli_output_into_a_missing_directory(folder: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    line = error(capsys, command, "model.py:make", "--input", "1x8", "-o", "missing/out")
    assert line.endswith("missing/out: cannot write: No such file or directory")
    assert not (folder / "missing").exists()


def test_cli_syntax_error_in_the_model_file(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (folder / "bad.py").write_text("def make(:\n    pass\n")
    assert error(capsys, "dump", "bad.py:make", "--input", "1x8").endswith("bad.py:1: syntax error: invalid syntax")


def test_cli_kernel_without_stage(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = error(capsys, "dump", "model.py:make", "--input", "1x8", "--kernel", "k_0")
    assert "--kernel names a kernel of the compiled code: add --stage llvm or --stage asm" in line


@pytest.mark.parametrize("factory,where", [("failing", "helper"), ("broken_forward", "forward")])
def test_cli_user_exception_shows_only_the_users_frames(folder: Path, capsys: pytest.CaptureFixture[str],
                                                         factory: str, where: str) -> None:
    assert main(["dump", f"model.py:{factory}", "--input", "1x8"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):\n") and f"in {where}\n" in err
    frames = [line for line in err.splitlines() if line.startswith('  File "')]
    assert frames and all(str(folder / "model.py") in line for line in frames), frames
    assert err.splitlines()[-1].startswith(f"braze: error: model.py:{factory} raised ")


def test_cli_debug_shows_the_traceback(folder: Path) -> None:
    with pytest.raises(braze.BrazeError, match="--kernel"):
        main(["dump", "model.py:make", "--input", "1x8", "--kernel", "k", "--debug"])


@pytest.mark.parametrize("argv,message", [
    (["run", "net.braze", "--input", "x.npy", "--input", "x.npy"], "@Net takes 1 input(s) (x: f32[1,8]); got 2"),
    (["run", "net.braze", "--input", "model.py"], "model.py: cannot read as a .npy array"),
    (["run", "net.braze", "--input", "x.npy", "-o", "missing/y.npy"], "cannot write: No such file or directory"),
    (["run", "model.py", "--input", "x.npy"], "braze run takes a .braze file"),
    (["info", "absent.braze"], "absent.braze: cannot read"),
    (["info", "cut.braze"], "truncated"),
    (["bench", "model.py:make"], "needs --input SHAPE"),
    (["dump", "net.braze", "--input", "1x8"], "net.braze has its input types in it: give no --input"),
    (["bench", "net.braze", "--input", "3x3"], "takes inputs of shapes [(1, 8)]"),
    (["export", "model.py:make", "--input", "1x8"], "nothing to write"),
    (["export", "model.py:make", "--input", "1x8", "-o", "n.braze", "--lora-adapter", "absent"], "absent"),
    (["dump", "model.py:make", "--input", "1xeight"], "expected a shape like 1x3x32x32"),
    (["nonsense"], "invalid choice: 'nonsense'"),
])
def test_cli_bad_arguments_and_files(folder: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                     message: str) -> None:
    ok(capsys, "export", "model.py:make", "--input", "1x8", "-o", "net.braze")
    (folder / "cut.braze").write_bytes((folder / "net.braze").read_bytes()[:300])
    assert message in error(capsys, *argv)
