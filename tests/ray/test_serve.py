"""The Ray Serve deployment of an artifact on a local Ray instance, over HTTP on 127.0.0.1: 200 concurrent requests
answered as braze.load answers them locally, in JSON and safetensors, and bad requests answered 4xx with the braze
message."""
from __future__ import annotations

import json
import re
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import braze
import braze.ray
from braze.frontend.safetensors_io import decode, encode

from .conftest import local_outputs, mlp_rows

pytest.importorskip("ray")

REQUESTS, CLIENTS = 200, 16
SAFETENSORS = "application/safetensors"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def post(url: str, body: bytes, content_type: str = "application/json") -> tuple[int, str, bytes]:
    """The status, content type and body of the answer to a POST."""
    request = urllib.request.Request(url, data=body, headers={"Content-Type": content_type}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


def post_json(url: str, inputs: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    status, _, body = post(url, json.dumps({"inputs": inputs}).encode())
    return status, json.loads(body)


@pytest.fixture(scope="module")
def served(local_ray: Any, mlp_path: Path, scorer_path: Path) -> Iterator[str]:
    """The MLP served at http://127.0.0.1:PORT/mlp and the Scorer at /scorer; Serve shut down afterwards."""
    from ray import serve
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(braze.ray.deployment(mlp_path, max_batch_size=16), name="mlp", route_prefix="/mlp")
    serve.run(braze.ray.deployment(scorer_path, num_cpus=0.5), name="scorer", route_prefix="/scorer")
    yield f"http://127.0.0.1:{port}"
    serve.shutdown()


def test_deployment_answers_concurrent_requests_as_the_artifact_runs_locally(served: str, mlp_path: Path) -> None:
    x = mlp_rows(REQUESTS * 4)
    output = braze.load(mlp_path).graph.outputs[0].name
    expected = local_outputs(mlp_path, {"input": x})[output]
    sizes = [1 + k % 4 for k in range(REQUESTS)]  # rows per request: 1 to 4, so batches mix and pad
    with ThreadPoolExecutor(CLIENTS) as clients:
        answers = list(clients.map(lambda k: post_json(f"{served}/mlp", {"input": x[4 * k:4 * k + sizes[k]].tolist()}),
                                   range(REQUESTS)))
    assert [status for status, _ in answers] == [200] * REQUESTS
    for k, (_, body) in enumerate(answers):
        got = np.asarray(body["outputs"][output], np.float32)
        np.testing.assert_allclose(got, expected[4 * k:4 * k + sizes[k]], rtol=1e-6, atol=1e-6)


def test_deployment_answers_safetensors_with_safetensors(served: str, scorer_path: Path) -> None:
    ids, scale = np.arange(24).reshape(8, 3) % 10, np.linspace(0.5, 2, 8, dtype=np.float32).reshape(8, 1)
    status, content_type, body = post(f"{served}/scorer", encode({"ids": ids, "scale": scale}, {}), SAFETENSORS)
    assert (status, content_type) == (200, SAFETENSORS)
    tensors, _ = decode(body, "response")
    expected = local_outputs(scorer_path, {"ids": ids, "scale": scale})
    assert sorted(tensors) == sorted(expected)
    for name, array in expected.items():
        np.testing.assert_allclose(tensors[name], array, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("inputs, message", [
    ({"input": [[0.0] * 7]}, r"request: column 'input' \(rows of float32\[8\]\) got rows of shape \[7\]"),
    ({"input": [[True] * 8]}, r"request: input 'input' \(rows of float32\[8\]\): expected JSON numbers; got values "
                              r"numpy reads as bool"),
    ({"x": [[0.0] * 8]}, r"request: unknown input\(s\) 'x'; the artifact's inputs are 'input'"),
])
def test_deployment_answers_wrong_inputs_422_with_the_braze_message(served: str, inputs: dict, message: str) -> None:
    status, body = post_json(f"{served}/mlp", inputs)
    assert status == 422 and list(body) == ["error"]
    assert re.match(message, body["error"]), body["error"]


def test_deployment_answers_a_wrong_dtype_422(served: str) -> None:
    body = encode({"ids": np.zeros((2, 3), np.float32), "scale": np.ones((2, 1), np.float32)}, {})
    status, content_type, answer = post(f"{served}/scorer", body, SAFETENSORS)
    assert (status, content_type) == (422, "application/json")
    assert json.loads(answer)["error"].startswith("request: column 'ids' (rows of int64[3]) got dtype float32, which "
                                                  "does not convert safely to int64")


@pytest.mark.parametrize("body, content_type, status, message", [
    (b"{", "application/json", 400, "request body: not valid JSON"),
    (b"\x00" * 4, SAFETENSORS, 400, "request body:"),
    (b"a,b", "text/csv", 415, "unsupported content type 'text/csv'"),
])
def test_deployment_answers_a_bad_body_4xx(served: str, body: bytes, content_type: str, status: int,
                                           message: str) -> None:
    got, _, answer = post(f"{served}/mlp", body, content_type)
    assert got == status and json.loads(answer)["error"].startswith(message)


def test_deployment_answers_get_405(served: str) -> None:
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{served}/mlp", timeout=60)
    assert caught.value.code == 405 and caught.value.headers["Allow"] == "POST"
    assert "POST the inputs" in json.loads(caught.value.read())["error"]


def test_deployment_refuses_only_the_request_whose_index_is_out_of_range(served: str) -> None:
    good = {"ids": [[1, 2, 3]], "scale": [[1.0]]}
    bad = {"ids": [[1, 2, 10]], "scale": [[1.0]]}
    with ThreadPoolExecutor(CLIENTS) as clients:
        answers = list(clients.map(lambda inputs: post_json(f"{served}/scorer", inputs), [good, bad] * 8))
    assert [status for status, _ in answers] == [200, 422] * 8
    assert "index 10 is out of range" in answers[1][1]["error"]


def test_serve_shutdown_stops_the_replicas_and_frees_the_port(served: str, local_ray: Any) -> None:
    """Runs last in this file: it shuts down the module's deployment (the fixture's own shutdown then does nothing)."""
    from ray import serve
    assert post_json(f"{served}/mlp", {"input": [[0.0] * 8]})[0] == 200
    serve.shutdown()
    named = [a["name"] for a in local_ray.util.list_named_actors(all_namespaces=True)]
    assert not [name for name in named if name.startswith("SERVE_")], named
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{served}/mlp", timeout=10)
