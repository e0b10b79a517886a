"""Golden IR text of traced models: a small MLP and the same MLP with LoRA, in tests/frontend/golden/.

The text is `print(graph)` with ParamIds renumbered 0, 1, 2... in order of appearance (ids come from a
process-wide counter, so they depend on what ran before). Regenerate the files after an intended change with

    UPDATE_GOLDEN=1 python -m pytest tests/frontend/test_trace_golden.py

and review the diff.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F
from braze import ir

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


class SmallMLP(nn.Module):
    """Linear, ReLU, dropout, linear: params, a flag and a seed constant in a few lines of IR."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x: Any) -> Any:
        return self.fc2(self.drop(F.relu(self.fc1(x))))


def renumber_ids(g: ir.Graph) -> ir.Graph:
    """The graph with the id attribute of param and flag leaves renumbered in order of first appearance."""
    order: dict[int, int] = {}
    nodes = []
    for n in g.nodes:
        if n.op in ("param", "flag"):
            new = order.setdefault(n.attr["id"], len(order))
            n = n.replace(attrs=tuple((k, new if k == "id" else v) for k, v in n.attrs))
        nodes.append(n)
    return g.replace(nodes=tuple(nodes))


def traced_text(lora: bool) -> str:
    m = SmallMLP()
    if lora:
        m.apply_lora(nn.Lora(2, 4))
    for _, p in m.named_param_slots():  # lazy initialization draws from the generator: before the seed
        p.stored_tensors()
    braze.manual_seed(0)
    return str(renumber_ids(braze.trace(m, braze.zeros(3, 4))))


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing {path}; create it with UPDATE_GOLDEN=1 python -m pytest {__file__}"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, (f"traced IR differs from {path}; if the change is intended, regenerate with "
                              f"UPDATE_GOLDEN=1 python -m pytest {__file__}\n--- found:\n{text}")


def test_trace_golden_small_mlp() -> None:
    check_golden("mlp.ir", traced_text(lora=False))


def test_trace_golden_small_lora_mlp() -> None:
    check_golden("lora_mlp.ir", traced_text(lora=True))


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.glob("*.ir")))
def test_golden_files_parse_and_print_back_unchanged(name: str) -> None:
    text = (GOLDEN / name).read_text(encoding="utf-8")
    assert str(ir.parse(text)) == text


def test_golden_mlp_runs_in_the_interpreter() -> None:
    g = ir.parse((GOLDEN / "mlp.ir").read_text(encoding="utf-8"))
    rng = np.random.default_rng(0)
    weights = {p.path: rng.standard_normal(p.type.shape).astype(np.float32) for p in g.params()}
    x = rng.standard_normal((3, 4)).astype(np.float32)
    (out,) = ir.interpret(g, [x], params=weights, flags={"drop.training": False})
    hidden = np.maximum(x @ weights["fc1.weight"].T + weights["fc1.bias"], 0)
    np.testing.assert_allclose(out, hidden @ weights["fc2.weight"].T + weights["fc2.bias"], rtol=1e-6)
