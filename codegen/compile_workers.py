"""Parallel LLVM work: the kernels of a module compiled at once in worker processes beside this one.

llvmlite serializes every LLVM call of a process behind one lock, so threads cannot optimize two modules at once;
processes can. A worker is `python llvm_object.py` (llvmlite alone, about 0.2 s to start), kept for the life of
this process and reused by every later compile. Workers are started by `warm_up()` as soon as a compile knows it
will need LLVM (before its IR is built, so their start overlaps that work); `compile_all(jobs)` hands the largest
jobs out first, to the workers and to this process alike, and returns each job's object in order.

A worker that dies, answers out of protocol or cannot be started is retired and its job compiled here: workers
only ever make a compile faster, never fail it. An invalid module fails the same way wherever it is compiled.

Environment: BRAZE_COMPILE_WORKERS sets how many workers to use (default: the CPUs this process may run on, minus
one, at most 3; 0 compiles everything in this process).
"""
from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import llvm_object

WORKERS_ENV = "BRAZE_COMPILE_WORKERS"
MAX_DEFAULT_WORKERS = 3

_lock = threading.Lock()
_workers: list[_Worker] = []


@dataclass(frozen=True)
class Job:
    """One module to compile: its name (for errors) and LLVM IR text."""

    name: str
    text: str


@dataclass
class Result:
    """A compiled job: its exported symbols and object file; `optimized` is the optimized module when it was
    compiled in this process (None from a worker), `timings` the stage times of the process that compiled it."""

    symbols: tuple[str, ...]
    payload: bytes
    optimized: object | None = None
    timings: dict[str, float] = field(default_factory=dict)


def worker_count() -> int:
    """How many worker processes a compile uses (see the module doc)."""
    raw = os.environ.get(WORKERS_ENV, "").strip()
    if raw:
        try:
            return max(0, int(raw))
        except ValueError:
            return 0
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(0, min(cpus - 1, MAX_DEFAULT_WORKERS))


def warm_up() -> None:
    """Start the workers a compile will use, without waiting for them to be ready."""
    with _lock:
        _workers[:] = [w for w in _workers if w.alive]
        while len(_workers) < worker_count():
            worker = _Worker.start()
            if worker is None:
                return
            _workers.append(worker)


def compile_all(jobs: list[Job], triple: str, cpu: str, features: str, opt: int) -> list[Result]:
    """Every job's object, compiled here and in the workers at once (one job, or no workers: all here). Raises
    llvm_object.LLVMFailure (with the job's name in `job`) for a module LLVM rejects."""
    results: list[Result | None] = [None] * len(jobs)
    order = sorted(range(len(jobs)), key=lambda i: -len(jobs[i].text))
    if len(jobs) > 1:
        warm_up()
    with _lock:
        helpers = [w for w in _workers if w.alive][:worker_count()] if len(jobs) > 1 else []
    taken = threading.Lock()
    failures: list[tuple[int, BaseException]] = []

    def next_job() -> int | None:
        with taken:
            return order.pop(0) if order else None

    def work(worker: _Worker | None) -> None:
        while (i := next_job()) is not None:
            try:
                results[i] = _compile_here(jobs[i], triple, cpu, features, opt) if worker is None or \
                    not worker.alive else worker.compile(jobs[i], triple, cpu, features, opt)
            except _WorkerLost:
                results[i] = _compile_here(jobs[i], triple, cpu, features, opt)
            except BaseException as exc:  # noqa: BLE001 - re-raised below, in job order
                failures.append((i, exc))
                with taken:
                    order.clear()
                return

    threads = [threading.Thread(target=work, args=(w,), daemon=True) for w in helpers]
    for thread in threads:
        thread.start()
    start = time.perf_counter()
    work(None)
    for thread in threads:
        thread.join()
    waited = time.perf_counter() - start
    if failures:
        raise min(failures, key=lambda f: f[0])[1]
    done = [r for r in results if r is not None]
    if len(done) != len(jobs):
        raise RuntimeError("a compile job was neither compiled nor failed")
    here = sum(sum(r.timings.values()) for r in done if r.optimized is not None)
    if helpers and done:
        done[0].timings["waiting for workers"] = max(0.0, waited - here)
    return done


def _compile_here(job: Job, triple: str, cpu: str, features: str, opt: int) -> Result:
    timings: dict[str, float] = {}
    try:
        optimized, symbols, payload = llvm_object.compile_text(
            job.text, triple, cpu, features, opt, lambda stage, seconds: timings.__setitem__(stage, seconds))
    except llvm_object.LLVMFailure as exc:
        exc.job = job.name  # type: ignore[attr-defined]
        raise
    return Result(symbols, payload, optimized, timings)


class _WorkerLost(Exception):
    """The worker died or broke the protocol; its job is compiled in this process."""


class _Worker:
    """One worker process and the lock that gives it one job at a time."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process, self.lock, self.alive = process, threading.Lock(), True

    @classmethod
    def start(cls) -> _Worker | None:
        script = Path(llvm_object.__file__).resolve()
        try:
            process = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, cwd=str(script.parent), close_fds=True)
        except OSError:
            return None
        return cls(process)

    def compile(self, job: Job, triple: str, cpu: str, features: str, opt: int) -> Result:
        request = json.dumps({"triple": triple, "cpu": cpu, "features": features, "opt": opt, "text": job.text})
        with self.lock:
            try:
                llvm_object.write_message(self.process.stdin, request.encode("utf-8"))
                header = json.loads(llvm_object.read_message(self.process.stdout) or b"null")
                if not isinstance(header, dict):
                    raise EOFError("no reply")
                if not header.get("ok"):
                    failure = llvm_object.LLVMFailure(str(header.get("stage")), str(header.get("error")))
                    failure.job = job.name  # type: ignore[attr-defined]
                    raise failure
                payload = llvm_object.read_message(self.process.stdout)
                symbols = tuple(str(s) for s in header["symbols"])
                timings = {str(k): float(v) for k, v in dict(header.get("timings", {})).items()}
            except llvm_object.LLVMFailure:
                raise
            except (OSError, EOFError, ValueError, KeyError, TypeError) as exc:
                self.retire()
                raise _WorkerLost(str(exc)) from None
        if payload is None:
            self.retire()
            raise _WorkerLost("the worker closed its output")
        return Result(symbols, payload, None, {f"worker {k}": v for k, v in timings.items()})

    def retire(self) -> None:
        self.alive = False
        try:
            self.process.kill()
            self.process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass


@atexit.register
def _stop_workers() -> None:
    """Close every worker's input (it then exits) and reap it."""
    with _lock:
        workers, _workers[:] = list(_workers), []
    for worker in workers:
        try:
            worker.process.stdin.close()
            worker.process.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            worker.retire()
