"""braze on Ray: Ray Data batch inference with 1 and 2 workers beside a plain local loop over the same artifact,
and Ray Serve latency and throughput at a fixed client concurrency, all from one run.

Run from the repository root (needs pip install 'braze[ray]'):

    python -m benchmarks.ray_inference [--rows 32000] [--requests 2000] [--clients 16] [--json out.json]

The artifact is the benchmark MLP (784-512-512-10, benchmarks/models.py) compiled for a batch of 64 rows, on a
local Ray instance of 2 CPUs. Local loop: braze.load(path, threads=N) called on the rows 64 at a time, N = 1 and 2.
Ray Data: `from_numpy(rows).map_batches(braze.ray.predictor(path), batch_size=1024, concurrency=W)`, W = 1 and 2
actors of one CPU (so one thread) each, timed from the call to the last batch collected: actor start-up and
loading the artifact (compiled code from the disk cache, filled by a warm-up run) are in the figure, as they are
in a real job. Serve: one replica of one CPU, `--clients` client threads on persistent HTTP connections each
posting one row at a time as JSON; latency is each request's round trip, throughput the requests over the wall
time, after a warm-up of 100 requests. The clients share the machine's CPUs with Ray.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

BATCH, CPUS = 64, 2


def local_loop(path: Path, x: np.ndarray, threads: int) -> float:
    """Rows per second of braze.load(path) called on compiled batches in this process."""
    import braze
    compiled = braze.load(path, threads=threads)
    compiled(x[:BATCH])
    start = time.perf_counter()
    for k in range(0, len(x), BATCH):
        compiled(x[k:k + BATCH])
    return len(x) / (time.perf_counter() - start)


def ray_data(ray: Any, path: Path, x: np.ndarray, workers: int) -> float:
    """Rows per second of map_batches with the predictor in `workers` actors, start-up included."""
    import braze.ray
    dataset = ray.data.from_numpy(np.array_split(x, 4 * workers)).rename_columns({"data": "input"})
    start = time.perf_counter()
    scored = dataset.map_batches(braze.ray.predictor(path), batch_format="numpy", batch_size=1024,
                                 concurrency=workers)
    rows = sum(len(next(iter(b.values()))) for b in scored.iter_batches(batch_format="numpy", batch_size=None))
    seconds = time.perf_counter() - start
    assert rows == len(x), (rows, len(x))
    return rows / seconds


def serve_latency(path: Path, x: np.ndarray, requests: int, clients: int) -> dict[str, float]:
    """p50 and p99 latency (ms) and throughput (requests/s) of one-row JSON requests from `clients` threads."""
    import socket

    from ray import serve

    import braze.ray
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(braze.ray.deployment(path, max_batch_size=clients), name="bench", route_prefix="/")
    bodies = [json.dumps({"inputs": {"input": x[k % len(x)][None].tolist()}}).encode() for k in range(requests)]
    local = threading.local()

    def post(body: bytes) -> float:
        if not hasattr(local, "connection"):
            local.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        start = time.perf_counter()
        local.connection.request("POST", "/", body, {"Content-Type": "application/json"})
        response = local.connection.getresponse()
        response.read()
        assert response.status == 200, response.status
        return time.perf_counter() - start

    try:
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(post, bodies[:100]))
            start = time.perf_counter()
            latencies = sorted(pool.map(post, bodies))
            wall = time.perf_counter() - start
    finally:
        serve.shutdown()
    return {"p50_ms": 1e3 * statistics.median(latencies), "p99_ms": 1e3 * latencies[int(0.99 * len(latencies))],
            "requests_per_s": requests / wall}


def measure(rows: int, requests: int, clients: int) -> dict[str, Any]:
    """Every figure of one run (see the module doc)."""
    import ray

    import braze
    from benchmarks import models
    case = models.mlp(BATCH)
    x = np.random.default_rng(0).standard_normal((rows - rows % BATCH, 784)).astype(np.float32)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "mlp.braze"
        braze.export(case.model, path, case.x)
        result: dict[str, Any] = {"rows": len(x), "batch": BATCH, "cpus": CPUS, "clients": clients,
                                  "requests": requests, "host_cpus": os.cpu_count()}
        for threads in (1, 2):
            result[f"local_{threads}_thread_rows_per_s"] = local_loop(path, x, threads)
        ray.init(num_cpus=CPUS, include_dashboard=False, log_to_driver=False)
        try:
            ray_data(ray, path, x[:BATCH * 16], 1)  # warm-up: Ray Data's own actors, the compiled-code cache
            for workers in (1, 2):
                result[f"ray_data_{workers}_worker_rows_per_s"] = ray_data(ray, path, x, workers)
            result["serve"] = serve_latency(path, x, requests, clients)
        finally:
            ray.shutdown()
    return result


def report(result: dict[str, Any]) -> str:
    serve = result["serve"]
    lines = [f"MLP 784-512-512-10, artifact batch {result['batch']}, {result['rows']} rows, Ray with "
             f"{result['cpus']} CPUs (host has {result['host_cpus']})",
             f"  local loop, 1 thread     {result['local_1_thread_rows_per_s']:>10,.0f} rows/s",
             f"  local loop, 2 threads    {result['local_2_thread_rows_per_s']:>10,.0f} rows/s",
             f"  Ray Data, 1 worker       {result['ray_data_1_worker_rows_per_s']:>10,.0f} rows/s (start-up included)",
             f"  Ray Data, 2 workers      {result['ray_data_2_worker_rows_per_s']:>10,.0f} rows/s (start-up included)",
             f"  Serve, 1 replica, {result['clients']} clients, one row per JSON request: "
             f"p50 {serve['p50_ms']:.1f} ms, p99 {serve['p99_ms']:.1f} ms, {serve['requests_per_s']:,.0f} requests/s"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=32_000, help="rows of the batch inference (default 32000)")
    parser.add_argument("--requests", type=int, default=2000, help="timed Serve requests (default 2000)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent Serve clients (default 16)")
    parser.add_argument("--json", metavar="OUT", help="also write the figures as JSON")
    args = parser.parse_args()
    result = measure(args.rows, args.requests, args.clients)
    print(report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
