"""Parallel compile work: kernels lowered and compiled at once in worker processes beside this one.

llvmlite serializes every LLVM call of a process behind one lock, and building LLVM IR with llvmlite is Python
work behind the GIL, so threads cannot build or optimize two kernels at once; processes can. A worker
(llvm_object.serve) compiles LLVM IR as soon as llvmlite is imported (about 0.1 s) and loads braze's IR and
lowerings when asked (kernel_worker.py, about 0.3 s more), is kept for the life of this process and reused by every
later compile. Workers are started by `warm_up()` as soon as a compile knows it will
need them (before its passes run where it can, so their start overlaps that work) and take work only once ready.

Two ways to use them:
- run_tasks: kernels to lower and compile. This process lowers them in turn and queues their IR; workers compile
  queued IR and, once they can lower, take whole kernels (sent as the node's IR text), so the Python work of
  lowering is spread as well as LLVM's;
- a Batch of LLVM IR texts (jit.compile_objects), each handed to a worker as soon as it is added, while this process
  builds the next; its finish() compiles what is left here too, the largest first, and returns each object in order.

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
# A worker: llvm_object.py loaded on its own (llvmlite alone, so it compiles IR at once) serving on its pipes, with
# this process's module path; asked, it loads the lowerings (kernel_worker.py, braze registered as a package without
# running braze/__init__.py, whose frontend a worker does not need).
BOOTSTRAP = """
import importlib.util, json, sys
sys.path[:] = json.loads(sys.argv[1])
spec = importlib.util.spec_from_file_location("braze_llvm_object", sys.argv[2])
llvm_object = importlib.util.module_from_spec(spec)
spec.loader.exec_module(llvm_object)

def lowering():
    sys.modules["braze"] = importlib.util.module_from_spec(importlib.util.find_spec("braze"))
    from braze.codegen.kernel_worker import lowered
    return lowered

llvm_object.serve(sys.stdin.buffer, sys.stdout.buffer, lowering)
"""
SPREAD_LOWERING = 8  # from this many kernels a compile asks its workers to load the lowerings and take whole ones
# ... when it has at least this many: building IR is about a third of a compile's work, so this process alone builds
# it as fast as one worker compiles it, and the ~0.3 s a worker spends loading the lowerings would be time lost
SPREAD_WORKERS = 2
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


def worker_pids() -> list[int]:
    """The process ids of the live workers (their CPU time is this process's work: runtime/cpu_load.py)."""
    with _lock:
        return [w.process.pid for w in _workers if w.alive]


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
    """A kernel to lower and compile, here or in a worker: `request` is a worker's "lower" request for it (None: a
    module only this process can build, whose IR text a worker may still compile);
    `lower_here()` lowers it in this process and returns (its value, its LLVM IR text), `finish(value, result)` the
    task's result once that text is compiled; `from_worker(header, object)` the task's result from a worker that
    lowered and compiled it (ValueError when the answer does not describe it: the task is then done here)."""

    name: str
    request: dict[str, Any] | None
    lower_here: Callable[[], tuple[Any, str]]
    finish: Callable[[Any, Result], Any]
    from_worker: Callable[[dict[str, Any], bytes], Any]


def run_tasks(tasks: list[Task], triple: str, cpu: str, features: str, opt: int) -> list[Any]:
    """Every task's result, in order. This process lowers the tasks in turn and queues each one's LLVM IR; a ready
    worker compiles queued IR first and, once it can lower too (asked to load the lowerings when there are at least
    SPREAD_LOWERING tasks and SPREAD_WORKERS workers), takes whole tasks nobody has started, so workers are busy
    from the moment they can compile and the Python work of lowering is spread once they can lower. With no task
    left to lower, this process compiles what is queued too, the largest first. Work a worker fails, answers
    wrongly or dies on is done here. An exception here stops the workers taking work and is raised once the work in
    flight is done; an invalid module raises llvm_object.LLVMFailure (with the job's name in `job`)."""
    machine = {"triple": triple, "cpu": cpu, "features": features, "opt": opt}
    todo: list[int] = list(range(len(tasks)))
    queued: list[tuple[int, Any, Job]] = []  # lowered here, waiting to be compiled
    mine: list[tuple[int, Any, Job] | int] = []  # work a worker failed: done here, never handed out again
    results: dict[int, Any] = {}
    busy = [0]
    changed = threading.Condition()
    stopped = threading.Event()

    def settle(i: int, result: Any) -> None:
        with changed:
            busy[0] -= 1
            results[i] = result
            changed.notify_all()

    def give_back(work: tuple[int, Any, Job] | int, failed: bool = False) -> None:
        with changed:
            busy[0] -= 1
            if failed:
                mine.append(work)
            elif isinstance(work, int):
                todo.insert(0, work)
            else:
                queued.append(work)
            changed.notify_all()

    def next_for(worker: _Worker) -> tuple[int, Any, Job] | int | None:
        """A worker's next work: queued IR, else a whole task once it can lower; None when nothing is left."""
        with changed:
            while not stopped.is_set() and (queued or todo or mine or busy[0]):
                if queued:
                    busy[0] += 1
                    return queued.pop(max(range(len(queued)), key=lambda k: len(queued[k][2].text)))
                whole = [k for k, i in enumerate(todo) if tasks[i].request is not None] if worker.can_lower else []
                if whole:
                    busy[0] += 1
                    return todo.pop(whole[0])
                changed.wait()
            return None

    def serve(worker: _Worker) -> None:
        if not worker.wait_ready(lambda: stopped.is_set() or not (todo or queued or mine or busy[0])):
            return
        if spread and not worker.can_lower:
            try:
                worker.request({"kind": "load"})  # ~0.3 s of imports: worth it for many kernels only
            except _WorkerLost:
                return
        while (work := next_for(worker)) is not None:
            try:
                if isinstance(work, int):
                    header, payload = worker.request({**tasks[work].request, **machine})
                    if header is None:
                        raise ValueError(str(payload.get("error")))
                    settle(work, tasks[work].from_worker(header, payload))
                else:
                    i, value, job = work
                    settle(i, tasks[i].finish(value, worker.compile(job, triple, cpu, features, opt)))
            except _WorkerLost:
                give_back(work, failed=True)
                return
            except Exception:  # noqa: BLE001 - whatever went wrong in the worker, the work is done here
                give_back(work, failed=True)

    with _lock:
        helpers = [w for w in _workers if w.alive][:worker_count()]
    spread = len(tasks) >= SPREAD_LOWERING and len(helpers) >= SPREAD_WORKERS
    threads = [threading.Thread(target=serve, args=(w,), daemon=True) for w in helpers]
    for thread in threads:
        thread.start()
    try:
        while True:
            with changed:
                while not todo and not queued and not mine and busy[0]:
                    changed.wait()
                if mine:
                    work: tuple[int, Any, Job] | int = mine.pop(0)
                elif todo:
                    work = todo.pop(0)
                elif queued:
                    work = queued.pop(max(range(len(queued)), key=lambda k: len(queued[k][2].text)))
                else:
                    break
                busy[0] += 1
            if isinstance(work, int):
                value, text = tasks[work].lower_here()
                give_back((work, value, Job(tasks[work].name, text)))
            else:
                i, value, job = work
                settle(i, tasks[i].finish(value, _compile_here(job, triple, cpu, features, opt)))
    except BaseException:
        _stop(stopped, changed)
        for thread in threads:
            thread.join()
        raise
    _stop(stopped, changed)  # a thread still loading its worker's lowerings ends on its own, holding no work
    return [results[i] for i in range(len(tasks))]


def _stop(stopped: threading.Event, changed: threading.Condition) -> None:
    stopped.set()
    with changed:
        changed.notify_all()


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
        self.can_lower = False  # set from its answers once it has imported the lowerings

    @classmethod
    def start(cls) -> _Worker | None:
        try:
            process = subprocess.Popen([sys.executable, "-c", BOOTSTRAP, json.dumps(sys.path),
                                        str(Path(llvm_object.__file__).resolve())],
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
                self.can_lower = header.get("lowering") is True
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
