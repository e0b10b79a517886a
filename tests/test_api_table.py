"""docs/TORCH_API.md is what `python -m braze.api_table` generates now, and the table says what runs eagerly."""
from __future__ import annotations

from pathlib import Path

from braze import api_table

DOC = Path(__file__).resolve().parents[1] / "docs" / "TORCH_API.md"


def test_torch_api_doc_is_current() -> None:
    assert DOC.read_text() == api_table.table(), "regenerate: python -m braze.api_table > docs/TORCH_API.md"


def test_api_table_marks_the_data_dependent_functions_eager_only() -> None:
    text = api_table.table()
    for row in ("| `torch.nonzero` | eager only: the result's shape depends on the values |",
                "| `Tensor.item` | eager only: reads the values into Python |",
                "| `torch.einsum` | traces |", "| `torch.zeros` | a constant when traced |",
                "| `nn.Hardtanh` | traces |"):
        assert row in text
