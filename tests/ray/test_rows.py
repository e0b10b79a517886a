"""Rows of any count run through an artifact compiled for a batch of 4: split, padded, named as the manifest names
the inputs and outputs, and checked first with errors naming the column (no Ray needed)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import braze
from braze.artifacts import read
from braze.ray.rows import Rows

from .conftest import BATCH, local_outputs, mlp_rows


def test_rows_columns_follow_the_manifest(scorer_path: Path) -> None:
    artifact = read(scorer_path)
    rows = Rows.of(artifact.graph, str(scorer_path))
    described = [{"name": c.name, "dtype": c.dtype.name, "shape": [BATCH, *c.row_shape]}
                 for c in (*rows.inputs, *rows.outputs)]
    assert rows.batch == BATCH
    assert described == [*artifact.manifest["inputs"], *artifact.manifest["outputs"]]


@pytest.mark.parametrize("count", [1, 4, 7, 9])
def test_rows_run_splits_and_pads_to_the_compiled_batch(mlp_path: Path, count: int) -> None:
    compiled = braze.load(mlp_path)
    rows = Rows.of(compiled.graph, str(mlp_path))
    x = mlp_rows(12)
    expected = local_outputs(mlp_path, {"input": x})
    got = rows.run(compiled.executable, {"input": x[:count]}, count)
    output = compiled.graph.outputs[0].name
    assert list(got) == [output] and got[output].shape == (count, 3)
    np.testing.assert_allclose(got[output], expected[output][:count], rtol=1e-6, atol=1e-6)


def test_rows_run_of_no_rows_gives_empty_columns(mlp_path: Path) -> None:
    compiled = braze.load(mlp_path)
    got = Rows.of(compiled.graph, "mlp").run(compiled.executable, {"input": np.zeros((0, 8), np.float32)}, 0)
    assert [a.shape for a in got.values()] == [(0, 3)]


def test_rows_split_gives_each_request_its_rows(mlp_path: Path) -> None:
    rows = Rows.of(read(mlp_path).graph, "mlp")
    parts = rows.split({"y": np.arange(6)}, [1, 3, 2])
    assert [p["y"].tolist() for p in parts] == [[0], [1, 2, 3], [4, 5]]


def test_rows_refuse_an_artifact_without_a_batch_axis(tmp_path: Path) -> None:
    path = tmp_path / "total.braze"
    braze.export(lambda x: (x * 2.0).sum(), path, np.ones((4, 8), np.float32))
    with pytest.raises(braze.BrazeError, match=r"total.braze: no batch axis .*same leading dimension"):
        Rows.of(read(path).graph, str(path))


def test_rows_refuse_an_artifact_without_inputs() -> None:
    graph = braze.trace(lambda: braze.ones(4, 2))
    with pytest.raises(braze.BrazeError, match=r"no batch axis to split rows on: the artifact needs an input"):
        Rows.of(graph, "constant")


@pytest.mark.parametrize("columns, error, message", [
    ({"scale": np.ones((2, 1), np.float32)}, braze.BrazeError, r"batch: no column 'ids'; the artifact's inputs are "
                                                               r"'ids' \(rows of int64\[3\]\)"),
    ({"ids": np.zeros((2, 4), np.int64), "scale": np.ones((2, 1), np.float32)}, braze.ShapeError,
     r"column 'ids' \(rows of int64\[3\]\) got rows of shape \[4\] \(an array of shape \[2, 4\]\)"),
    ({"ids": np.zeros((2, 3), np.float64), "scale": np.ones((2, 1), np.float32)}, braze.DTypeError,
     r"column 'ids' \(rows of int64\[3\]\) got dtype float64, which does not convert safely to int64"),
    ({"ids": np.zeros((2, 3), np.int64), "scale": np.ones((3, 1), np.float32)}, braze.ShapeError,
     r"different numbers of rows \('ids' 2, 'scale' 3\)"),
    ({"ids": [[0, 1, 2]], "scale": np.ones((1, 1), np.float32)}, braze.BrazeError, r"is a list, not a numpy array"),
])
def test_rows_check_names_the_column_at_fault(scorer_path: Path, columns: dict, error: type, message: str) -> None:
    rows = Rows.of(read(scorer_path).graph, "scorer")
    with pytest.raises(error, match=message):
        rows.check(columns, "batch")


def test_rows_check_accepts_a_safe_widening(scorer_path: Path) -> None:
    rows = Rows.of(read(scorer_path).graph, "scorer")
    assert rows.check({"ids": np.zeros((5, 3), np.int32), "scale": np.ones((5, 1), np.float32)}, "batch") == 5
