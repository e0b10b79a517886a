"""`braze dump FILE.py:FACTORY --input SHAPE ...`: build, trace and print (or write) a model's IR."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from braze import ir
from braze.cli import main

FACTORY = '''
import braze.nn as nn
import braze.nn.functional as F

from sibling_layers import Scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(0.2)
        self.fc = nn.Linear(4 * 6 * 6, 5)
        self.scale = Scale()

    def forward(self, x):
        x = self.drop(F.relu(self.bn(self.conv(x))))
        return self.scale(self.fc(x.flatten(1)))  # head line


def make():
    return Net()


class TwoInputs(nn.Module):
    def forward(self, a, b):
        return a @ b


def two_inputs():
    return TwoInputs()


def not_a_module():
    return 42
'''

SIBLING = '''
import braze.nn as nn


class Scale(nn.Module):
    def forward(self, x):
        return x * 2.0
'''


@pytest.fixture
def factory(tmp_path: Path) -> Path:
    (tmp_path / "sibling_layers.py").write_text(SIBLING)  # the factory file's folder is importable
    path = tmp_path / "model.py"
    path.write_text(FACTORY)
    return path


def dump(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["dump", *args]) == 0
    return capsys.readouterr().out


def test_dump_prints_the_traced_graph_in_eval_mode(factory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    g = ir.parse(dump(capsys, f"{factory}:make", "--input", "2x3x6x6"))
    assert g.name == "Net" and [v.type for v in g.inputs] == [ir.TensorType((2, 3, 6, 6), ir.float32)]
    assert {f.path: f.value for f in g.flags()} == {"bn.training": False, "drop.training": False}
    assert {"conv2d", "batch_norm_flag", "dropout", "matmul"} <= {n.op for n in g.ops()}


def test_dump_train_mode_keeps_true_flags_and_buffer_updates(factory: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    g = ir.parse(dump(capsys, f"{factory}:make", "--input", "2x3x6x6", "--mode", "train"))
    assert all(f.value for f in g.flags())
    assert "buffer_update:bn.running_mean" in g.attributes["outputs"]


def test_dump_is_repeatable_up_to_param_ids(factory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = (f"{factory}:make", "--input", "2x3x6x6", "--mode", "train")
    first, second = (re.sub(r"id=\d+", "id=_", dump(capsys, *args)) for _ in range(2))
    assert first == second  # weights, inputs and the dropout seed repeat; ids continue a process-wide counter


def test_dump_provenance_names_the_factory_file_line(factory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = dump(capsys, f"{factory}:make", "--input", "1x3x6x6", "--provenance")
    line = next(n for n, src in enumerate(FACTORY.splitlines(), 1) if src.endswith("# head line"))
    assert f'loc("fc" "{factory}":{line})' in text
    assert ir.parse(text) is not None


def test_dump_dot_and_summary_formats(factory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert dump(capsys, f"{factory}:make", "--input", "1x3x6x6", "--format", "dot").startswith("digraph")
    summary = dump(capsys, f"{factory}:make", "--input", "1x3x6x6", "--format", "summary")
    assert summary.startswith("graph @Net: 1 input(s)") and "conv2d" in summary


def test_dump_writes_to_a_file(factory: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "net.ir"
    assert dump(capsys, f"{factory}:make", "--input", "1x3x6x6", "-o", str(out)) == ""
    assert ir.parse(out.read_text()).name == "Net"


def test_dump_takes_several_inputs_and_a_dtype(factory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    g = ir.parse(dump(capsys, f"{factory}:two_inputs", "--input", "2x3", "--input", "3x4", "--dtype", "float64"))
    assert [str(v.type) for v in g.inputs] == ["f64[2,3]", "f64[3,4]"] and [v.name for v in g.inputs] == ["a", "b"]


@pytest.mark.parametrize("target,error", [
    ("{factory}:missing", "defines no function 'missing'"),
    ("{factory}:not_a_module", "returned a int, not a braze.nn.Module"),
    ("{factory}", "expected FILE.py:FACTORY"),
    ("{factory}.nothere:make", "no such file"),
])
def test_dump_reports_bad_targets(factory: Path, capsys: pytest.CaptureFixture[str], target: str, error: str) -> None:
    assert main(["dump", target.format(factory=factory), "--input", "2x3"]) == 2
    assert error in capsys.readouterr().err


def test_dump_reports_a_bad_shape(factory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["dump", f"{factory}:make", "--input", "2xthree"])
    assert "expected a shape like 1x3x32x32" in capsys.readouterr().err


def test_dump_runs_as_a_command(factory: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "braze", "dump", f"{factory}:make", "--input", "1x3x6x6"],
                            capture_output=True, text=True, check=True)
    assert ir.parse(result.stdout).name == "Net"


def test_dump_passes_shows_the_optimized_graph(factory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = dump(capsys, f"{factory}:make", "--input", "2x3x6x6", "--passes", "specialize_flags,dce")
    graph = ir.parse(text)
    assert not graph.flags() and not any(n.op == "dropout" for n in graph.nodes)


def test_dump_after_each_shows_every_stage(factory: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = dump(capsys, f"{factory}:make", "--input", "2x3x6x6", "--passes", "specialize_flags,dce,fuse",
                "--after-each")
    headers = re.findall(r"^# (.+)$", text, re.M)
    assert headers == ["traced", "after specialize_flags", "after dce", "after fuse"]
    stages = re.split(r"^# .+\n", text, flags=re.M)[1:]
    assert all(ir.parse(stage) for stage in stages)
    assert "fused" in stages[-1] and "fused" not in stages[0]


def test_braze_dump_shows_each_pass_of_a_module() -> None:
    import braze
    import braze.nn as nn
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.5)).eval()
    text = braze.dump(model, braze.randn(2, 4), passes="inference", after_each=True)
    headers = re.findall(r"^# (.+)$", text, re.M)
    assert headers[0] == "traced" and headers[1:] == [f"after {p}" for p in
                                                     ir.passes.PassManager("inference").names]
    last = ir.parse(re.split(r"^# .+\n", text, flags=re.M)[-1])
    assert not last.flags() and "memory_plan" in last.attributes
    assert braze.dump(model, braze.randn(2, 4), passes="inference") == str(last)
