"""Ray Data batch inference with braze.ray.predictor on a local Ray instance: the same outputs as braze.load run
locally, and one thread per CPU Ray assigned unless threads= is given."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import braze
import braze.ray

from .conftest import local_outputs, mlp_rows

pytest.importorskip("ray")

ROWS = 10_000


def test_map_batches_matches_the_artifact_run_locally(local_ray: Any, mlp_path: Path) -> None:
    x = mlp_rows(ROWS)
    dataset = local_ray.data.from_items([{"id": i, "input": row} for i, row in enumerate(x)])
    result = dataset.map_batches(braze.ray.predictor(mlp_path), batch_format="numpy", batch_size=1000, concurrency=2)
    output = braze.load(mlp_path).graph.outputs[0].name
    batches = list(result.iter_batches(batch_format="numpy", batch_size=None))
    ids = np.concatenate([batch["id"] for batch in batches])  # two actors may return batches out of order
    assert sorted(ids.tolist()) == list(range(ROWS))
    got = np.concatenate([batch[output] for batch in batches])[np.argsort(ids)]
    np.testing.assert_allclose(got, local_outputs(mlp_path, {"input": x})[output], rtol=1e-6, atol=1e-6)


def test_predictor_threads_follow_the_cpus_ray_assigns(local_ray: Any, mlp_path: Path) -> None:
    @local_ray.remote(num_cpus=2)
    def threads(predictor: type) -> int:
        return predictor().compiled.threads

    assert local_ray.get(threads.remote(braze.ray.predictor(mlp_path))) == 2
