"""Parallel LLVM work: the kernels of a module compiled at once in worker processes beside this one.

llvmlite serializes every LLVM call of a process behind one lock, so threads cannot optimize two modules at once;
processes can. A worker is `python llvm_object.py` (llvmlite alone, about 0.2 s to start), kept for the life of
this process and reused by every later compile. Workers are started by `warm_up()` as soon as a compile knows it
will need LLVM (before its IR is built, so their start overlaps that work). A `Batch` hands each job to a worker as
soon as it is added, so the workers compile one kernel while this process lowers the next; its finish() compiles
what is left here too, the largest jobs first, and returns each job's object in order (compile_all: a batch of
jobs known at once).

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
    batch = Batch(triple, cpu, features, opt, parallel=len(jobs) > 1)
    for job in jobs:
        batch.add(job)
    return batch.finish()


class Batch:
    """Jobs compiled as they come: the workers take each job as soon as it is added (the largest waiting first),
    while this process goes on building the next; finish() compiles what is still waiting here too and returns
    every job's result in the order added."""

    def __init__(self, triple: str, cpu: str, features: str, opt: int, *, parallel: bool = True) -> None:
        self.machine = (triple, cpu, features, opt)
        self.jobs: list[Job] = []
        self.results: dict[int, Result] = {}
        self.waiting: list[int] = []
        self.failures: list[tuple[int, BaseException]] = []
        self.closed = False
        self.changed = threading.Condition()
        if parallel:
            warm_up()
        with _lock:
            helpers = [w for w in _workers if w.alive][:worker_count()] if parallel else []
        self.threads = [threading.Thread(target=self._serve, args=(w,), daemon=True) for w in helpers]
        for thread in self.threads:
            thread.start()

    def add(self, job: Job) -> None:
        with self.changed:
            self.jobs.append(job)
            self.waiting.append(len(self.jobs) - 1)
            self.changed.notify()

    def finish(self) -> list[Result]:
        with self.changed:
            self.closed = True
            self.changed.notify_all()
        start = time.perf_counter()
        self._serve(None)
        for thread in self.threads:
            thread.join()
        waited = time.perf_counter() - start
        if self.failures:
            raise min(self.failures, key=lambda f: f[0])[1]
        if len(self.results) != len(self.jobs):
            raise RuntimeError("a compile job was neither compiled nor failed")
        done = [self.results[i] for i in range(len(self.jobs))]
        here = sum(sum(r.timings.values()) for r in done if r.optimized is not None)
        if self.threads and done:
            done[0].timings["waiting for workers"] = max(0.0, waited - here)
        return done

    def cancel(self) -> None:
        """Drop the jobs still waiting and let the workers' threads end (a compile that failed before finish)."""
        with self.changed:
            self.closed = True
            self.waiting.clear()
            self.changed.notify_all()
        for thread in self.threads:
            thread.join()

    def _take(self, block: bool) -> int | None:
        """The largest waiting job; None once the batch is closed and empty (or, unblocking, when none waits)."""
        with self.changed:
            while not self.waiting and block and not self.closed:
                self.changed.wait()
            if not self.waiting or self.failures:
                return None
            best = max(self.waiting, key=lambda i: len(self.jobs[i].text))
            self.waiting.remove(best)
            return best

    def _serve(self, worker: _Worker | None) -> None:
        """Compile jobs in `worker` (None: in this process, only once the batch is closed) until none is left."""
        while (i := self._take(block=worker is not None)) is not None:
            job = self.jobs[i]
            try:
                result = worker.compile(job, *self.machine) if worker is not None and worker.alive else \
                    _compile_here(job, *self.machine)
            except _WorkerLost:
                result = _compile_here(job, *self.machine)
            except BaseException as exc:  # noqa: BLE001 - re-raised by finish(), the first job's first
                with self.changed:
                    self.failures.append((i, exc))
                    self.changed.notify_all()
                return
            with self.changed:
                self.results[i] = result


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


def _forget_workers() -> None:
    """In a forked child: the workers (and their pipes) belong to the parent, so the child starts its own."""
    global _lock
    _lock = threading.Lock()
    _workers.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_workers)


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
