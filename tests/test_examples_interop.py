"""The interop examples run as written, each in a fresh process in a scratch directory; skipped without the
optional packages they need."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLES / name)], cwd=cwd, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_export_onnx_example_runs(tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    out = run_example("export_onnx.py", tmp_path)
    assert "3. onnxruntime vs braze" in out and "5. the loss in onnxruntime" in out


def test_peft_adapter_example_runs(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    out = run_example("peft_adapter.py", tmp_path)
    assert "with the PEFT adapter 1.00" in out and "max |loaded - adapted|" in out
    assert "5. PEFT loads braze's adapter" in out


def test_ray_batch_inference_example_runs(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    out = run_example("ray_batch_inference.py", tmp_path)
    assert "3. map_batches with 2 actors: 19200 rows" in out
    assert float(re.search(r"max \|ray - local\| = (\S+);", out).group(1)) <= 1e-6
