"""The installed package: version, the error hierarchy at top level, no optional dependency pulled in, the CLI."""
from __future__ import annotations

import subprocess
import sys

import pytest

import braze


def test_version_is_exported() -> None:
    assert isinstance(braze.__version__, str) and braze.__version__.count(".") == 2


def test_import_pulls_in_no_optional_dependency() -> None:
    code = ("import sys, braze, braze.nn, braze.optim, braze.ir; "
            "print(','.join(sorted(m for m in ('torch', 'onnx', 'onnxruntime', 'scipy') if m in sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


@pytest.mark.parametrize("name", ["ShapeError", "DTypeError", "ParseError", "VerifyError", "TraceError", "RecordError"])
def test_errors_share_one_base_class(name: str) -> None:
    assert issubclass(getattr(braze, name), braze.BrazeError)


def test_shape_error_names_op_and_shapes() -> None:
    with pytest.raises(braze.ShapeError, match=r"matmul.*f32\[2,3\].*f32\[4,5\]"):
        braze.randn(2, 3) @ braze.randn(4, 5)


def test_cli_version_prints_the_version() -> None:
    result = subprocess.run([sys.executable, "-m", "braze", "version"], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == braze.__version__


def test_demo_runs_the_main_job_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    import re

    from braze.cli import main
    assert main(["demo", "--steps", "5"]) == 0
    out = capsys.readouterr().out
    before, after = out.split("4. after the inference pipeline")
    assert "lora_merge" in before and "batch_norm_flag" in before
    optimized = after.split("graph @")[1]
    assert "fold_reparameterizations" in after and "fold_batchnorm" in after  # the pass report
    assert "lora_merge" not in optimized and "lora_a" not in optimized and "batch_norm" not in optimized
    difference = float(re.search(r"compiled vs eager: max \|difference\| = (\S+)", out).group(1))
    assert difference < 1e-5
    assert re.search(r"eager [\d.]+ ms, compiled [\d.]+ ms: \d+x faster", out)
