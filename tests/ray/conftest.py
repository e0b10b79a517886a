"""What the Ray tests share: two small artifacts (compiled for a batch of 4 rows) and one local Ray instance for
the whole folder, started on first use and shut down after its last test."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import braze
import braze.nn as nn

BATCH = 4

# Ray 2.60's OpenTelemetry metrics recorder outlives ray.shutdown() in a process that started a second local instance
# (here: `braze serve`'s, then the fixture's): it keeps exporting every 10 s to the stopped metrics agent and logs each
# failure, and an export that lands while the process exits logs through a logger its static destructors have
# already freed, a segfault after every test has passed. The tests use no Ray metrics: Ray then records them with
# OpenCensus, whose exporter stops with the instance. Set before Ray is imported, for the driver and its workers.
os.environ.setdefault("RAY_enable_open_telemetry", "0")


class Scorer(nn.Module):
    """Two inputs of two dtypes, two outputs: token ids embedded and projected, scaled per row."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.fc = nn.Embedding(10, 4), nn.Linear(4, 2)

    def forward(self, ids: Any, scale: Any) -> Any:
        hidden = self.emb(ids)
        return self.fc(hidden).sum(1) * scale, hidden


@pytest.fixture(scope="package")
def mlp_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLP artifact: input 'input' f32[4, 8], one output f32[4, 3]."""
    braze.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).eval()
    path = tmp_path_factory.mktemp("ray-artifacts") / "mlp.braze"
    braze.export(model, path, np.zeros((BATCH, 8), np.float32))
    return path


@pytest.fixture(scope="package")
def scorer_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Scorer artifact: inputs 'ids' i64[4, 3] (indices below 10) and 'scale' f32[4, 1], two outputs."""
    braze.manual_seed(0)
    path = tmp_path_factory.mktemp("ray-artifacts") / "scorer.braze"
    braze.export(Scorer().eval(), path, np.zeros((BATCH, 3), np.int64), np.ones((BATCH, 1), np.float32))
    return path


def mlp_rows(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, 8)).astype(np.float32)


def local_outputs(path: Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The artifact run locally through braze.load on full compiled batches: the reference for every Ray test."""
    compiled = braze.load(path)
    names = [v.name for v in compiled.graph.inputs]
    rows = len(next(iter(inputs.values())))
    assert rows % BATCH == 0
    results = [compiled.executable.run([inputs[n][start:start + BATCH] for n in names])
               for start in range(0, rows, BATCH)]
    return {v.name: np.concatenate([r[k] for r in results]) for k, v in enumerate(compiled.graph.outputs)}


@pytest.fixture(scope="package")
def local_ray() -> Iterator[Any]:
    """One local Ray instance (2 CPUs, no dashboard) for the folder's tests."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
