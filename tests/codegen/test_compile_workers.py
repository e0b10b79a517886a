"""Compile workers: kernels compiled in other processes give the very objects this process would, and a worker
that dies or cannot start only makes a compile slower, never wrong."""
from __future__ import annotations

import subprocess
import sys

import pytest

from braze.codegen import compile_workers, host_target, llvm_object
from braze.codegen.compile_workers import Job
from braze.codegen.jit import compile_objects
from braze.codegen.target import OPT_LEVEL
from braze.ir.errors import CodegenError
from braze.codegen.module_builder import build_module
from tests.codegen.test_graph_cache import planned_stack


def _jobs() -> list[Job]:
    built = build_module(planned_stack(3, batch=4))
    return [Job(p.name, str(p.module)) for p in built.parts] + [Job(built.name, str(built.module))]


@pytest.fixture
def workers(monkeypatch):
    """One compile worker, stopped after the test."""
    monkeypatch.setenv(compile_workers.WORKERS_ENV, "1")
    yield
    compile_workers._stop_workers()


def test_compile_workers_give_the_objects_this_process_gives(workers, monkeypatch) -> None:
    jobs, target = _jobs(), host_target()
    spread = compile_objects(jobs, target, {})
    monkeypatch.setenv(compile_workers.WORKERS_ENV, "0")
    alone = compile_objects(jobs, target, {})
    assert [r.payload for r in spread] == [r.payload for r in alone]
    assert [r.symbols for r in spread] == [r.symbols for r in alone]
    assert all(r.optimized is not None for r in alone)
    worker = compile_workers._Worker.start()
    try:
        remote = [worker.compile(job, target.triple, target.cpu, target.features, OPT_LEVEL) for job in jobs]
    finally:
        worker.retire()
    assert [r.payload for r in remote] == [r.payload for r in alone] and all(r.optimized is None for r in remote)


def test_compile_workers_a_dead_worker_hands_its_jobs_back(workers, monkeypatch) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    dead.wait()
    compile_workers._stop_workers()
    compile_workers._workers.append(compile_workers._Worker(dead))
    monkeypatch.setattr(compile_workers, "warm_up", lambda: None)
    results = compile_objects(_jobs(), host_target(), {})
    assert all(r.optimized is not None for r in results)  # all compiled here
    assert not compile_workers._workers[0].alive


def test_compile_workers_report_invalid_ir_by_module_name(workers) -> None:
    bad = Job("broken_module", "define void @f() {\n  ret i32 0\n}\n")
    with pytest.raises(CodegenError, match="broken_module"):
        compile_objects([*_jobs()[:2], bad], host_target(), {})


def test_compile_workers_count_follows_the_environment(monkeypatch) -> None:
    monkeypatch.setenv(compile_workers.WORKERS_ENV, "2")
    assert compile_workers.worker_count() == 2
    monkeypatch.setenv(compile_workers.WORKERS_ENV, "zero")
    assert compile_workers.worker_count() == 0
    monkeypatch.delenv(compile_workers.WORKERS_ENV)
    assert 0 <= compile_workers.worker_count() <= compile_workers.MAX_DEFAULT_WORKERS


def test_compile_workers_messages_refuse_torn_lengths() -> None:
    import io
    with pytest.raises(EOFError):
        llvm_object.read_message(io.BytesIO((2 ** 40).to_bytes(8, "little")))
    with pytest.raises(EOFError):
        llvm_object.read_message(io.BytesIO((10).to_bytes(8, "little") + b"short"))
    assert llvm_object.read_message(io.BytesIO(b"")) is None


def test_compile_workers_a_lowering_error_mid_compile_leaves_no_thread_behind(workers, monkeypatch) -> None:
    import threading

    from braze.codegen import lower
    from braze.codegen.graph_cache import compile_module
    real, calls = lower.lower_node, []

    def failing_second(node, ctx):
        calls.append(node.op)
        if len(calls) == 2:
            raise CodegenError(f"no kernel for {node.op} here")
        return real(node, ctx)
    monkeypatch.setattr(lower, "lower_node", failing_second)
    before = threading.active_count()
    with pytest.raises(CodegenError, match="no kernel for"):
        compile_module(planned_stack(3, batch=6), use_cache=False)
    assert threading.active_count() == before


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_compile_workers_a_forked_child_starts_its_own(workers) -> None:
    import os
    compile_objects(_jobs()[:2], host_target(), {})
    assert compile_workers._workers
    pid = os.fork()
    if pid == 0:  # the child: the parent's workers are not its own
        os._exit(0 if not compile_workers._workers else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and compile_workers._workers
