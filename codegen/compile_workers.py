"""Parallel compile work: kernels lowered and compiled at once in worker processes beside this one.

llvmlite serializes every LLVM call of a process behind one lock, and building LLVM IR with llvmlite is Python
work behind the GIL, so threads cannot build or optimize two kernels at once; processes can. A worker
(kernel_worker.py) imports braze's IR and code generator (about 0.3 s to start), is kept for the life of this
process and reused by every later compile. Workers are started by `warm_up()` as soon as a compile knows it will
need them (before its passes run where it can, so their start overlaps that work) and take work only once ready.

Two ways to use them:
- run_tasks: whole tasks (a kernel part to lower and compile, sent as its node's IR text) taken in turn by this
  process and every ready worker, so the Python work of lowering is spread as well as LLVM's;
- a Batch of LLVM IR texts (compile_all), each handed to a worker as soon as it is added, while this process builds
  the next; its finish() compiles what is left here too, the largest first, and returns each object in order.

A worker that dies, answers out of protocol or cannot be started is retired and its job compiled here: workers
only ever make a compile faster, never fail it. An invalid module fails the same way wherever it is compiled.

Environment: BRAZE_COMPILE_WORKERS sets how many workers to use (default: the CPUs this process may run on, minus
one, at most 3, and started only while that many CPUs are idle; 0 compiles everything in this process).
"""
from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import llvm_object

WORKERS_ENV = "BRAZE_COMPILE_WORKERS"
MAX_DEFAULT_WORKERS = 3
# A worker is braze.codegen.kernel_worker run with this process's module path, without braze/__init__.py (whose
# frontend a worker does not need): it imports numpy, braze.ir, braze.codegen and llvmlite only.
BOOTSTRAP = ("import importlib.util, json, sys; sys.path[:] = json.loads(sys.argv[1]); "
             "spec = importlib.util.find_spec('braze'); sys.modules['braze'] = importlib.util.module_from_spec(spec); "
             "from braze.codegen.kernel_worker import main; main()")
READY_POLL_S = 0.005  # how often a thread waiting for a starting worker checks whether it is still wanted

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
    return max(0, min(_cpus() - 1, MAX_DEFAULT_WORKERS))


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _idle_cpus() -> int:
    """The CPUs no runnable thread holds right now, this one's aside (Linux: /proc/loadavg's count of runnable
    threads; elsewhere no limit): on a machine whose cores are taken, a worker only competes with the compile it
    was meant to help."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            running = int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return MAX_DEFAULT_WORKERS
    return _cpus() - max(running, 1)


def warm_up() -> None:
    """Start the workers a compile will use, without waiting for them to be ready: by default no more than the CPUs
    that are idle now (a worker started on a machine whose cores are taken only competes with this compile)."""
    wanted = worker_count() if os.environ.get(WORKERS_ENV, "").strip() else min(worker_count(), _idle_cpus())
    with _lock:
        _workers[:] = [w for w in _workers if w.alive]
        while len(_workers) < wanted:
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
        if worker is not None and not worker.wait_ready(lambda: self.closed and not self.waiting):
            return
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


@dataclass(frozen=True)
class Task:
    """Work a worker does from `request` (answered with a header and an object) or this process does by calling
    `here`; `from_worker(header, object)` turns a worker's answer into what `here` returns, raising ValueError when
    the answer does not describe one (the task is then done here)."""

    name: str
    request: dict[str, Any]
    here: Callable[[], Any]
    from_worker: Callable[[dict[str, Any], bytes], Any]


def run_tasks(tasks: list[Task], triple: str, cpu: str, features: str, opt: int) -> list[Any]:
    """Every task's result, in order. This process and every ready worker each take the next task in turn, so the
    first tasks (put the largest first) start at once; a task a worker fails, answers wrongly or dies on is done
    here. An exception from `here` stops the others taking tasks and is raised once the tasks in flight are done."""
    machine = {"triple": triple, "cpu": cpu, "features": features, "opt": opt}
    todo, results, busy = list(range(len(tasks))), {}, [0]
    changed = threading.Condition()
    stopped = threading.Event()

    def take() -> int | None:
        with changed:
            if not todo or stopped.is_set():
                return None
            busy[0] += 1
            return todo.pop(0)

    def settle(i: int, result: Any = None, failed: bool = False) -> None:
        with changed:
            busy[0] -= 1
            if failed:
                todo.insert(0, i)
            else:
                results[i] = result
            changed.notify_all()

    def serve(worker: _Worker) -> None:
        if not worker.wait_ready(lambda: stopped.is_set() or not todo):
            return
        while (i := take()) is not None:
            task = tasks[i]
            try:
                header, payload = worker.request({**task.request, **machine})
                if header is None:
                    raise ValueError(str(payload.get("error")))
                settle(i, task.from_worker(header, payload))
            except _WorkerLost:
                settle(i, failed=True)
                return
            except Exception:  # noqa: BLE001 - whatever is wrong with a worker's answer, the task is done here
                settle(i, failed=True)

    with _lock:
        helpers = [w for w in _workers if w.alive][:worker_count()]
    threads = [threading.Thread(target=serve, args=(w,), daemon=True) for w in helpers]
    for thread in threads:
        thread.start()
    try:
        while True:
            with changed:
                while not todo and busy[0]:
                    changed.wait()
                if not todo:
                    break
                busy[0] += 1
                i = todo.pop(0)
            value = tasks[i].here()
            settle(i, value)
    finally:
        stopped.set()
        with changed:
            changed.notify_all()
        for thread in threads:
            thread.join()
    return [results[i] for i in range(len(tasks))]


def _compile_here(job: Job, triple: str, cpu: str, features: str, opt: int) -> Result:
    timings: dict[str, float] = {}
    try:
        optimized, symbols, payload = llvm_object.compile_text(
            job.text, triple, cpu, features, opt, lambda stage, seconds: timings.__setitem__(stage, seconds))
    except llvm_object.LLVMFailure as exc:
        exc.job = job.name  # type: ignore[attr-defined]
        raise
    return Result(symbols, payload, optimized, timings)


def _result(header: dict[str, Any], payload: bytes) -> Result:
    """A worker's compile result from its reply; _WorkerLost when the reply is malformed."""
    try:
        symbols = tuple(str(s) for s in header["symbols"])
        timings = {str(k): float(v) for k, v in dict(header.get("timings", {})).items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise _WorkerLost(f"a malformed reply: {exc}") from None
    return Result(symbols, payload, None, {f"worker {k}": v for k, v in timings.items()})


class _WorkerLost(Exception):
    """The worker died or broke the protocol; its job is compiled in this process."""


class _Worker:
    """One worker process and the lock that gives it one job at a time."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process, self.lock, self.alive, self.ready = process, threading.Lock(), True, False

    @classmethod
    def start(cls) -> _Worker | None:
        try:
            process = subprocess.Popen([sys.executable, "-c", BOOTSTRAP, json.dumps(sys.path)],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                       cwd=str(Path(__file__).resolve().parent), close_fds=True)
        except OSError:
            return None
        return cls(process)

    def wait_ready(self, give_up: Callable[[], bool] = lambda: False) -> bool:
        """Wait for the worker's first message, sent once its imports are done: True when it is ready, False when
        it died (it is retired) or `give_up()` says to stop waiting."""
        while True:
            with self.lock:
                if not self.ready and self.alive:
                    self._hear_ready()
                if self.ready or not self.alive:
                    return self.alive
            if give_up():
                return False

    def _hear_ready(self) -> None:
        """Read the worker's first message if it has come within READY_POLL_S; retire the worker if it died."""
        try:
            if not select.select([self.process.stdout], [], [], READY_POLL_S)[0]:
                return
            hello = json.loads(llvm_object.read_message(self.process.stdout) or b"null")
        except (OSError, EOFError, ValueError):
            hello = None
        if isinstance(hello, dict) and hello.get("ready") is True:
            self.ready = True
        else:
            self.retire()

    def compile(self, job: Job, triple: str, cpu: str, features: str, opt: int) -> Result:
        header, payload = self.request({"kind": "compile", "triple": triple, "cpu": cpu, "features": features,
                                        "opt": opt, "text": job.text})
        if header is None:
            failure = llvm_object.LLVMFailure(str(payload.get("stage")), str(payload.get("error")))
            failure.job = job.name  # type: ignore[attr-defined]
            raise failure
        try:
            return _result(header, payload)
        except _WorkerLost:
            self.retire()
            raise

    def request(self, request: dict[str, Any]) -> tuple[dict[str, Any] | None, Any]:
        """Send one request; (header, object) on success, (None, failure header) when the worker answered that it
        failed. Raises _WorkerLost (and retires the worker) when it died or broke the protocol."""
        if not self.wait_ready():
            raise _WorkerLost("the worker did not start")
        with self.lock:
            try:
                llvm_object.write_message(self.process.stdin, json.dumps(request).encode("utf-8"))
                header = json.loads(llvm_object.read_message(self.process.stdout) or b"null")
                if not isinstance(header, dict):
                    raise EOFError("no reply")
                if not header.get("ok"):
                    return None, header
                payload = llvm_object.read_message(self.process.stdout)
                if payload is None:
                    raise EOFError("the worker closed its output")
                return header, payload
            except (OSError, EOFError, ValueError) as exc:
                self.retire()
                raise _WorkerLost(str(exc)) from None

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
