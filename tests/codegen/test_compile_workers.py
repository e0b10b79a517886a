"""Compile workers: kernels compiled in other processes give the very objects this process would, and a worker
that dies or cannot start only makes a compile slower, never wrong."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from braze.codegen import compile_workers, host_target, llvm_object
from braze.codegen.compile_workers import Job
from braze.codegen.jit import compile_objects
from braze.codegen.target import OPT_LEVEL
from braze.ir.errors import CodegenError
from braze.codegen.module_builder import build_module
from braze.runtime.executable import Executable
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


def test_compile_workers_start_only_on_idle_cpus_unless_asked(monkeypatch) -> None:
    started = []
    monkeypatch.setattr(compile_workers._Worker, "start", classmethod(lambda cls: started.append(1)))
    monkeypatch.setattr(compile_workers, "_workers", [])
    monkeypatch.setattr(compile_workers, "_cpus", lambda: 4)
    monkeypatch.delenv(compile_workers.WORKERS_ENV, raising=False)
    monkeypatch.setattr(compile_workers, "_idle_cpus", lambda: 0)  # every core taken: no worker
    compile_workers.warm_up()
    assert started == []
    monkeypatch.setattr(compile_workers, "_idle_cpus", lambda: 1)
    compile_workers.warm_up()  # start() returned None: the first failure stops the loop
    assert started == [1]
    monkeypatch.setattr(compile_workers, "_idle_cpus", lambda: 0)
    monkeypatch.setenv(compile_workers.WORKERS_ENV, "2")  # asked for: started whatever the load
    compile_workers.warm_up()
    assert started == [1, 1]


def test_compile_workers_messages_refuse_torn_lengths() -> None:
    import io
    with pytest.raises(EOFError):
        llvm_object.read_message(io.BytesIO((2 ** 40).to_bytes(8, "little")))
    with pytest.raises(EOFError):
        llvm_object.read_message(io.BytesIO((10).to_bytes(8, "little") + b"short"))
    assert llvm_object.read_message(io.BytesIO(b"")) is None


def _silent_worker() -> compile_workers._Worker:
    """A worker process that never says it is ready (as one still importing)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE)
    return compile_workers._Worker(process)


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
    compile_workers._stop_workers()
    silent = _silent_worker()
    compile_workers._workers.append(silent)  # its thread waits for it to be ready while this process lowers
    monkeypatch.setattr(compile_workers, "warm_up", lambda: None)
    before = threading.active_count()
    try:
        with pytest.raises(CodegenError, match="no kernel for"):
            compile_module(planned_stack(3, batch=6), use_cache=False)
        assert threading.active_count() == before
    finally:
        silent.retire()


def _until_it_can_lower(worker: compile_workers._Worker) -> None:
    """Ask a worker to load its lowerings (a compile does so by itself for many kernels)."""
    header, _ = worker.request({"kind": "load"})
    assert header is not None and worker.can_lower


def test_compile_workers_lower_kernels_as_this_process_does(workers, monkeypatch) -> None:
    from braze.codegen.graph_cache import compile_module
    graph = planned_stack(4, batch=5)
    compile_workers.warm_up()
    for worker in compile_workers._workers:
        _until_it_can_lower(worker)
    spread, spread_library = compile_module(graph, use_cache=False)
    lowered_there = [p for p in spread.parts if p.module is None]
    assert lowered_there, "the ready worker took no kernel"
    monkeypatch.setenv(compile_workers.WORKERS_ENV, "0")
    alone, alone_library = compile_module(graph, use_cache=False)
    assert [(p.key, p.name, p.scratch_bytes, p.prepared, p.checks) for p in spread.parts] == \
        [(p.key, p.name, p.scratch_bytes, p.prepared, p.checks) for p in alone.parts]
    assert spread_library.symbols == alone_library.symbols
    x = np.random.default_rng(0).standard_normal(graph.inputs[0].type.shape).astype(np.float32)
    outputs = [Executable(b, lib, threads=1).run([x])[0] for b, lib in ((spread, spread_library),
                                                                        (alone, alone_library))]
    assert np.array_equal(outputs[0], outputs[1])


def test_compile_workers_lower_convs_with_the_tuned_choices_they_are_sent(workers, monkeypatch, tmp_path) -> None:
    """The worker starts before BRAZE_TUNE is set (its environment lacks it): the choices come with the request."""
    import braze
    from braze.codegen import conv_tuning
    from braze.codegen.conv_search import graph_convs
    from braze.codegen.graph_cache import compile_module
    compile_workers.warm_up()
    for worker in compile_workers._workers:
        _until_it_can_lower(worker)
    braze.manual_seed(0)
    nn = braze.nn
    model = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(16, 8, 3, padding=1)).eval()
    graph = braze.compile(model, np.zeros((2, 8, 12, 12), np.float32)).graph
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(conv_tuning.TUNE_ENV, "1")
    target = host_target()
    for kernel, scratch in (("direct", lambda n: n == 0), ("im2col", lambda n: n > 0)):
        table = {conv_tuning.spec_key(spec, target.vector_width): {"kernel": kernel, "seconds": {}}
                 for spec in graph_convs(graph)}
        conv_tuning.table_path(target.identity).parent.mkdir(parents=True, exist_ok=True)
        conv_tuning.table_path(target.identity).write_text(json.dumps(table))
        built, _ = compile_module(graph, use_cache=False)
        assert [p for p in built.parts if p.module is None], "the ready worker took no kernel"
        assert all(scratch(p.scratch_bytes) for p in built.parts), (kernel, [p.scratch_bytes for p in built.parts])


def test_compile_workers_a_kernel_request_gives_the_object_of_this_process(workers) -> None:
    from braze.codegen.graph_cache import _from_worker
    from braze.codegen.kernel_worker import part_request
    from braze.codegen.module_builder import build_module as build
    target, pending = host_target(), []

    def keep(parts, here):
        pending.extend(parts)
        return {p.key: here(p) for p in parts}
    graph = planned_stack(2, batch=3)
    built = build(graph, lower_parts=keep)
    worker = compile_workers._Worker.start()
    try:
        _until_it_can_lower(worker)
        for p, part in zip(pending, built.parts):
            header, payload = worker.request({"kind": "lower", "part": part_request(p, target),
                                              "triple": target.triple, "cpu": target.cpu,
                                              "features": target.features, "opt": OPT_LEVEL})
            remote, result = _from_worker(p, header, payload)
            here = compile_objects([Job(part.name, str(part.module))], target, {})[0]
            assert remote == part.__class__(**{**part.__dict__, "module": None})
            assert result.payload == here.payload and set(result.symbols) == set(here.symbols)
    finally:
        worker.retire()


def _scripted_worker(body: str) -> compile_workers._Worker:
    """The only worker of this process: a script that says it is ready, then runs `body` (a fake worker)."""
    script = ("import json, sys\n"
              "from braze.codegen.llvm_object import read_message, write_message\n"
              "write_message(sys.stdout.buffer, b'{\"ready\": true}')\n" + body)
    compile_workers._stop_workers()
    worker = compile_workers._Worker(subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                                                      stdout=subprocess.PIPE))
    compile_workers._workers.append(worker)
    return worker


def test_compile_workers_a_worker_answer_that_does_not_fit_is_done_here(workers, monkeypatch) -> None:
    """A worker that answers every kernel with another kernel's description: the parts are lowered here."""
    liar = _scripted_worker("while read_message(sys.stdin.buffer) is not None:\n"
                            "    write_message(sys.stdout.buffer, json.dumps({'ok': True, 'lowering': True,\n"
                            "        'symbols': ['k_0_x'], 'part': {'name': 'k_0_x', 'op': 'x', 'outputs': 1,\n"
                            "        'inputs': 1, 'scratch_bytes': 0, 'prepared': [], 'checks': []}}).encode())\n"
                            "    write_message(sys.stdout.buffer, b'not an object')\n")
    monkeypatch.setattr(compile_workers, "warm_up", lambda: None)
    from braze.codegen.graph_cache import compile_module
    try:
        assert liar.wait_ready()
        built, _ = compile_module(planned_stack(3, batch=2), use_cache=False)
        assert all(p.module is not None for p in built.parts)  # every part lowered here
    finally:
        liar.retire()


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


def test_compile_workers_a_compile_does_not_wait_for_a_worker_still_loading(workers, monkeypatch) -> None:
    """A worker that never finishes loading its lowerings: the compile ends without it, its work all done here."""
    import threading

    from braze.codegen.graph_cache import compile_module
    stuck = _scripted_worker("read_message(sys.stdin.buffer)\nimport time; time.sleep(600)\n")
    monkeypatch.setattr(compile_workers, "warm_up", lambda: None)
    monkeypatch.setattr(compile_workers, "SPREAD_LOWERING", 1)  # ask it to load, which it never answers
    monkeypatch.setattr(compile_workers, "SPREAD_WORKERS", 1)
    try:
        assert stuck.wait_ready()
        done: list = []
        compiling = threading.Thread(target=lambda: done.append(compile_module(planned_stack(3, batch=2),
                                                                               use_cache=False)))
        compiling.start()
        compiling.join(timeout=120)
        assert done and all(p.module is not None for p in done[0][0].parts)
    finally:
        stuck.retire()


def test_compile_workers_start_before_this_process_loads_llvm() -> None:
    script = ("import sys; from braze.codegen import compile_workers; compile_workers._Worker.start(); "
              "print('llvmlite.binding' in sys.modules)")
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "False"  # the worker's start overlaps this process's ~0.1 s import of LLVM


def test_compile_workers_one_worker_compiles_and_this_process_builds_every_kernel(workers) -> None:
    """With one worker the lowerings stay here: loading them would cost the worker more than it takes off."""
    import braze
    from braze.codegen.graph_cache import compile_module
    from braze.runtime.compile_path import planned_graph
    widths = list(range(20, 20 + compile_workers.SPREAD_LOWERING + 2))
    model = braze.nn.Sequential(*(braze.nn.Linear(a, b) for a, b in zip(widths, widths[1:]))).eval()
    graph = planned_graph(braze.trace(model, braze.tensor(np.ones((3, widths[0]), np.float32))))
    compile_workers.warm_up()
    built, _ = compile_module(graph, use_cache=False)
    assert len(built.parts) >= compile_workers.SPREAD_LOWERING and all(p.module is not None for p in built.parts)
    assert compile_workers._workers and not any(w.can_lower for w in compile_workers._workers)
