"""The quickstart example runs and its compiled model matches eager execution (lora_finetune.py is run by
tests/frontend/test_lora.py)."""
from __future__ import annotations

import runpy
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_quickstart_compiled_model_matches_eager() -> None:
    result = runpy.run_path(str(EXAMPLES / "quickstart.py"))["run"](show=False, calls=10)
    assert result["difference"] <= 1e-5 and result["fused"] == 2.0
