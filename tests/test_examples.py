"""The quickstart and GPT-2 LoRA fine-tuning examples run and their compiled models match eager execution
(lora_finetune.py is run by tests/frontend/test_lora.py)."""
from __future__ import annotations

import runpy
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_quickstart_compiled_model_matches_eager() -> None:
    result = runpy.run_path(str(EXAMPLES / "quickstart.py"))["run"](show=False, calls=10)
    assert result["difference"] <= 1e-5 and result["fused"] == 2.0


def test_lora_finetune_gpt2_trains_merges_and_reloads_in_a_fresh_process() -> None:
    result = runpy.run_path(str(EXAMPLES / "lora_finetune_gpt2.py"))["run"](steps=30)
    assert result["last_loss"] < result["first_loss"] - 0.5 and result["base_unchanged"] == 1.0
    assert result["adapters_left"] == 0.0 and result["merge_difference"] <= 1e-5
    assert result["artifact_same"] == 1.0 and result["artifact_difference"] <= 1e-5
