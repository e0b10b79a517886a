"""The installed package: version, the error hierarchy at top level, no optional dependency pulled in, the CLI."""
from __future__ import annotations

import subprocess
import sys

import pytest

import braze


def test_version_is_exported() -> None:
    assert isinstance(braze.__version__, str) and braze.__version__.count(".") == 2


def test_import_pulls_in_no_optional_dependency() -> None:
    optional = ('torch', 'onnx', 'onnxruntime', 'scipy', 'ray', 'braze.ray')
    code = ("import sys, braze, braze.nn, braze.optim, braze.ir; "
            f"print(','.join(sorted(m for m in {optional!r} if m in sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == ""


def test_import_defers_the_optimizers_the_data_loader_and_numpy_random() -> None:
    deferred = ("braze.frontend.optim", "braze.frontend.data", "braze.frontend.checkpoint", "numpy.random")
    code = (f"import sys, braze; print(','.join(m for m in {deferred!r} if m in sys.modules)); "
            "import braze.optim, braze.utils.data, braze.frontend.optim as real; "
            "print(braze.optim is real is sys.modules['braze.optim'], braze.utils.data.DataLoader.__module__, "
            "braze.utils.checkpoint.__name__, braze.randn(2).shape == (2,))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split("\n")[:2] == ["", "True braze.frontend.data.loader braze.frontend.checkpoint True"]


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


def test_every_source_package_is_installed_by_a_plain_install() -> None:
    """`pip install .` (not editable) copies only the packages pyproject.toml lists; a forgotten one breaks it."""
    tomllib = pytest.importorskip("tomllib")
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {"braze": "braze", "ir": "braze.ir", "frontend": "braze.frontend", "codegen": "braze.codegen",
               "runtime": "braze.runtime"}
    found = set()
    for folder, package in folders.items():
        for init in (root / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(root / folder).parts
            found.add(".".join((package, *parts)))
    assert found <= set(config["packages"]), f"missing from pyproject.toml: {sorted(found - set(config['packages']))}"
    for package in config["packages"]:  # a subpackage lives below its nearest mapped parent
        parent = max((p for p in config["package-dir"] if package == p or package.startswith(p + ".")), key=len)
        folder = root / config["package-dir"][parent] / Path(*package[len(parent):].split(".")[1:])
        assert (folder / "__init__.py").is_file(), package
