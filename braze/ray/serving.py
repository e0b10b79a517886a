"""`braze.ray.deployment`: a .braze artifact served over HTTP by Ray Serve, with request batching.

    serve.run(braze.ray.deployment("model.braze", num_replicas=2), route_prefix="/")
    # POST / {"inputs": {"x": [[0.5, 1.0, ...], ...]}} -> {"outputs": {"y": [[...], ...]}}

Each replica loads the artifact once, with one thread per CPU Ray gave it (`num_cpus`, 1 by default) unless
`threads` is given. A request holds any number of rows (JSON or safetensors bodies: braze/ray/bodies.py); it is
checked on its own before it joins a batch, so a bad request is answered 4xx with the braze message and never
fails the others. `@serve.batch` gathers up to max_batch_size requests arriving within batch_wait_timeout_s; their
rows run together as calls of the artifact's compiled batch (braze/ray/rows.py) on a thread beside the replica's
event loop, which keeps accepting requests meanwhile. When a batch fails on a braze error raised by the compiled
code (an index out of range), each of its requests is run again alone, so only the one at fault gets the 422.
"""
from __future__ import annotations

import asyncio
import os
from typing import Any, Sequence

import numpy as np

from braze.ir.errors import BrazeError

from .bodies import JSON_TYPE, RequestError, answer, error_body, media_type, parse
from .workers import checked_source, load_in_worker

Columns = dict[str, np.ndarray]
MAX_REQUEST_BYTES = 64 << 20


class ArtifactServer:
    """One Serve replica: answers POST requests with the artifact's outputs (see the module doc)."""

    def __init__(self, source: str, threads: int | None, max_batch_size: int, batch_wait_timeout_s: float,
                 max_request_bytes: int) -> None:
        from ray import serve
        self.compiled, self.rows = load_in_worker(source, threads)
        self.max_request_bytes = max_request_bytes
        self._batched = serve.batch(max_batch_size=max_batch_size,
                                    batch_wait_timeout_s=batch_wait_timeout_s)(self._run_batch)

    async def __call__(self, request: Any) -> Any:
        """The response to one HTTP request (a starlette Request)."""
        from starlette.responses import Response
        try:
            if request.method != "POST":
                raise RequestError(f"{request.method} is not served: POST the inputs", 405)
            media = media_type(request.headers.get("content-type"))
            columns, rows = parse(await request.body(), media, self.rows, self.max_request_bytes)
            outputs = await self._batched((columns, rows))
            if isinstance(outputs, RequestError):
                raise outputs
        except RequestError as err:
            allow = {"Allow": "POST"} if err.status == 405 else None
            return Response(error_body(str(err)), status_code=err.status, media_type=JSON_TYPE, headers=allow)
        return Response(answer(outputs, media), media_type=media)

    async def _run_batch(self, requests: list[tuple[Columns, int]]) -> list[Columns | RequestError]:
        return await asyncio.to_thread(self._run_requests, requests)

    def _run_requests(self, requests: Sequence[tuple[Columns, int]]) -> list[Columns | RequestError]:
        """Each request's outputs (or the RequestError of one the compiled code refused), rows run together."""
        counts = [rows for _, rows in requests]
        combined = {c.name: np.concatenate([columns[c.name] for columns, _ in requests]) for c in self.rows.inputs}
        try:
            return self.rows.split(self.rows.run(self.compiled.executable, combined, sum(counts)), counts)
        except BrazeError as err:
            if len(requests) == 1:
                return [RequestError(f"request: {err}", 422)]
        return [self._run_requests([request])[0] for request in requests]


def deployment(path: str | os.PathLike[str], *, num_replicas: int = 1, max_batch_size: int = 32,
               batch_wait_timeout_s: float = 0.005, num_cpus: float = 1.0, threads: int | None = None,
               max_request_bytes: int = MAX_REQUEST_BYTES) -> Any:
    """A Ray Serve application serving the .braze file at `path` (validated now), ready for `serve.run`.

    num_replicas: replicas, each holding `num_cpus` CPUs and running calls on as many threads (or `threads`).
    max_batch_size, batch_wait_timeout_s: `@serve.batch`'s, in requests and seconds. max_request_bytes: larger
    bodies are answered 413.
    """
    from ray import serve
    _check_positive("num_replicas", num_replicas, int)
    _check_positive("max_batch_size", max_batch_size, int)
    _check_positive("max_request_bytes", max_request_bytes, int)
    _check_positive("num_cpus", num_cpus, (int, float), zero=True)
    _check_positive("batch_wait_timeout_s", batch_wait_timeout_s, (int, float), zero=True)
    source = checked_source(path, threads)
    server = serve.deployment(ArtifactServer, name="braze", num_replicas=num_replicas,
                              max_ongoing_requests=2 * max_batch_size, ray_actor_options={"num_cpus": num_cpus})
    return server.bind(source, threads, max_batch_size, float(batch_wait_timeout_s), max_request_bytes)


def _check_positive(name: str, value: Any, kinds: type | tuple[type, ...], zero: bool = False) -> None:
    fine = isinstance(value, kinds) and not isinstance(value, bool) and (value >= 0 if zero else value > 0)
    if not fine:
        wanted = "a non-negative number" if zero else f"a positive {'integer' if kinds is int else 'number'}"
        raise BrazeError(f"braze.ray.deployment: {name} must be {wanted}, got {value!r}")
