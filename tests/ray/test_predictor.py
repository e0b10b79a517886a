"""braze.ray.predictor's class called in this process as a Ray actor calls it: batches of any size, other columns
kept, bad batches and bad files refused with a braze error (no Ray instance needed)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import braze
import braze.ray

from .conftest import local_outputs, mlp_rows

pytest.importorskip("ray")


def test_predictor_keeps_the_batch_s_other_columns(mlp_path: Path) -> None:
    x, ids = mlp_rows(8), np.arange(8)
    output = braze.load(mlp_path).graph.outputs[0].name
    got = braze.ray.predictor(mlp_path)()({"id": ids, "input": x[:5]})
    assert sorted(got) == sorted(["id", output]) and got["id"] is ids
    np.testing.assert_allclose(got[output], local_outputs(mlp_path, {"input": x})[output][:5], rtol=1e-6, atol=1e-6)


def test_predictor_threads_given_win(mlp_path: Path) -> None:
    assert braze.ray.predictor(mlp_path, threads=3)().compiled.threads == 3


def test_predictor_refuses_a_column_named_as_an_output(mlp_path: Path) -> None:
    output = braze.load(mlp_path).graph.outputs[0].name
    with pytest.raises(braze.BrazeError, match=rf"column\(s\) '{output}' would be overwritten"):
        braze.ray.predictor(mlp_path)()({"input": mlp_rows(2), output: np.zeros(2)})


def test_predictor_refuses_a_batch_that_is_not_a_dict(mlp_path: Path) -> None:
    with pytest.raises(braze.BrazeError, match=r"got a list; pass batch_format='numpy'"):
        braze.ray.predictor(mlp_path)()([mlp_rows(2)])


def test_predictor_checks_the_file_before_any_worker_starts(tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.braze"
    damaged.write_bytes(b"not a braze file")
    with pytest.raises(braze.ArtifactError, match=r"damaged.braze"):
        braze.ray.predictor(damaged)
