"""The README's Python examples run as written (in a scratch directory); an example that needs an optional
package (onnx, onnxruntime, torch, peft) is skipped where that package is not installed."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
OPTIONAL = ("onnx", "onnxruntime", "torch", "peft", "ray")


def optional_needs(code: str) -> list[str]:
    """The optional packages an example imports (braze.export_onnx needs onnx)."""
    needs = [name for name in OPTIONAL if re.search(rf"^\s*(import|from) {name}\b", code, re.M)]
    return needs + ["onnx"] * ("braze.export_onnx(" in code and "onnx" not in needs)


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_example_runs(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in optional_needs(code):
        pytest.importorskip(name)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, str(README), "exec"), {"__name__": "__readme__"})
