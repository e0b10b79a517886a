"""A Serve replica's batch run called in this process: requests run together, and when the compiled code refuses
one of them, only that one gets the 422 (no Ray instance needed)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from braze.ray.bodies import RequestError
from braze.ray.serving import ArtifactServer

from .conftest import local_outputs

pytest.importorskip("ray")


def request(ids: list[list[int]]) -> tuple[dict[str, np.ndarray], int]:
    return {"ids": np.array(ids, np.int64), "scale": np.ones((len(ids), 1), np.float32)}, len(ids)


def test_run_requests_refuses_only_the_request_at_fault(scorer_path: Path) -> None:
    server = ArtifactServer(str(scorer_path), None, 8, 0.0, 1 << 20)
    good = request([[1, 2, 3], [4, 5, 6]])
    answers = server._run_requests([good, request([[1, 2, 10]]), good])
    expected = local_outputs(scorer_path, {name: np.concatenate([a, a]) for name, a in good[0].items()})
    assert isinstance(answers[1], RequestError) and answers[1].status == 422
    assert "index 10 is out of range" in str(answers[1])
    for answer in (answers[0], answers[2]):
        for name, array in answer.items():
            np.testing.assert_allclose(array, expected[name][:2], rtol=1e-6, atol=1e-6)
