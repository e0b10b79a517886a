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


def test_demo_trains_and_matches_its_ir(capsys: pytest.CaptureFixture[str]) -> None:
    from braze.cli import main
    assert main(["demo", "--steps", "5"]) == 0
    out = capsys.readouterr().out
    assert "graph @spiral_mlp" in out
    assert "IR interpreter vs eager: max |difference| = 0.00e+00" in out
