"""The thread cap from other processes' load (runtime/cpu_load.py): /proc/stat parsed, the others' load measured
from samples, the cap's hysteresis, executables following it, and a real busy core lowering it."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

import braze
from braze.runtime import cpu_load
from braze.runtime.cpu_load import LoadMonitor, busy_seconds, next_cap, process_seconds
from braze.runtime.threads import estimated_seconds
from tests.runtime.test_executable import executable, inputs

STAT = """cpu  900 0 300 5000 10 0 5 0 0 0
cpu0 400 0 100 2500 5 0 5 0 0 0
cpu1 500 0 200 2500 5 0 0 7 0 0
intr 12345
"""


def _stat(cpu0: int, cpu1: int) -> str:
    """A /proc/stat text whose two CPUs have been busy for `cpu0` and `cpu1` ticks of user time."""
    return f"cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 {cpu0} 0 0 100 0 0 0 0 0 0\ncpu1 {cpu1} 0 0 100 0 0 0 0 0 0\n"


def test_busy_seconds_sums_user_nice_system_irq_softirq_of_the_cpus_asked() -> None:
    assert busy_seconds(STAT, [0], 100) == pytest.approx(5.05)
    assert busy_seconds(STAT, [0, 1], 100) == pytest.approx(12.05)  # steal (7) and idle not counted


@pytest.mark.parametrize("text, cpus", [(STAT, [0, 2]), ("cpu0 1 2\n", [0]), ("cpu0 a b c d e f g\n", [0]),
                                        ("", [0])], ids=["missing-cpu", "short-line", "not-numbers", "empty"])
def test_busy_seconds_of_a_text_it_cannot_read_is_none(text, cpus) -> None:
    assert busy_seconds(text, cpus, 100) is None


def test_others_load_is_the_cpus_busy_time_beyond_this_process() -> None:
    monitor = LoadMonitor([0, 1], 100)
    assert monitor.sample(_stat(0, 0), own=0.0, now=0.0)
    # 0.1 s: the CPUs were busy 0.15 s (15 ticks), this process ran 0.05 s of it: others kept one core busy
    monitor.sample(_stat(10, 5), own=0.05, now=0.1)
    assert monitor.others == pytest.approx(cpu_load.SMOOTHING * 1.0)
    for step in range(2, 30):
        monitor.sample(_stat(10 * step, 5 * step), own=0.05 * step, now=0.1 * step)
    assert monitor.others == pytest.approx(1.0)
    # this process's own time beyond the ticks (their 10 ms grain) never reads as a negative load
    monitor.sample(_stat(300, 150), own=10.0, now=3.1)
    assert 0.0 <= monitor.others < 1.0


def test_a_sample_without_proc_stat_fails_and_changes_nothing(tmp_path) -> None:
    monitor = LoadMonitor([0], 100, path=str(tmp_path / "missing"))
    assert not monitor.sample()
    assert not monitor.sample("cpu7 1 1 1 1 1 1 1\n")
    assert monitor.others == 0.0


@pytest.mark.parametrize("cap, idle, cpus, want", [
    (2, 1.0, 2, 1), (2, 1.5, 2, 2), (1, 1.5, 2, 1), (1, 1.7, 2, 2), (2, 0.0, 2, 1), (8, 2.9, 8, 3),
    (1, 8.0, 8, 8), (4, 3.5, 8, 4)])
def test_the_cap_moves_only_past_the_hysteresis(cap, idle, cpus, want) -> None:
    assert next_cap(cap, idle, cpus) == want


def test_calls_follow_the_cap_and_keep_their_configured_thread_count(monkeypatch) -> None:
    """A cap below the configured count makes calls run on fewer threads, with the same bits, and lifting it
    restores them; Executable.threads stays what was asked for."""
    exe = executable(2, shape=(256, 512), threads=2)
    x = inputs((256, 512))
    want = exe(*x)
    monkeypatch.setattr(cpu_load, "cap", lambda: 1)
    monkeypatch.setattr(cpu_load, "version", cpu_load.version + 1)
    assert exe(*x).tobytes() == want.tobytes()
    assert exe._calls == 1 and exe.threads == 2
    monkeypatch.setattr(cpu_load, "cap", lambda: None)
    monkeypatch.setattr(cpu_load, "version", cpu_load.version + 1)
    assert exe(*x).tobytes() == want.tobytes()
    assert exe._calls == 2


def test_a_compile_forgets_the_load_of_its_own_child_processes(monkeypatch) -> None:
    """A compile's workers and linker run as child processes, which /proc/stat shows as others' load: once it ends,
    the measure starts afresh with the cap at the CPU count, so the calls right after it use every thread."""
    monitor = LoadMonitor([0, 1], 100)
    monitor.sample(_stat(0, 0), own=0.0, now=0.0)
    monitor.sample(_stat(10, 0), own=0.0, now=0.1)
    assert monitor.others > 0.5
    monkeypatch.setattr(cpu_load, "_monitor", monitor)
    monkeypatch.setattr(cpu_load, "_cap", 1)
    version = cpu_load.version
    braze.compile(lambda x: x + 1, np.ones(4, np.float32))
    assert cpu_load._cap == 2 and cpu_load.version == version + 1 and monitor.others == 0.0
    assert monitor.sample(_stat(20, 0), own=0.0, now=0.2) and monitor.others == 0.0  # a fresh window begins


def test_a_long_call_keeps_its_threads_under_the_cap(monkeypatch) -> None:
    """A call estimated at LONG_CALL_SECONDS or more on one thread is not capped: a stall is a small part of it."""
    a = np.ones((1024, 1024), np.float32)
    compiled = braze.compile(lambda x, y: x @ y, a, a, threads=2)
    assert estimated_seconds(compiled.executable._work) >= cpu_load.LONG_CALL_SECONDS
    monkeypatch.setattr(cpu_load, "cap", lambda: 1)
    monkeypatch.setattr(cpu_load, "version", cpu_load.version + 1)
    np.testing.assert_array_equal(compiled(a, a), np.full((1024, 1024), 1024, np.float32))
    assert compiled.executable._calls == 2
    assert compiled.executable._load_version == cpu_load.version  # followed once, not rebound at every call


@pytest.mark.skipif(not os.path.exists("/proc/stat") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs /proc/stat and two CPUs")
def test_a_helper_process_counts_as_this_process_not_as_another() -> None:
    """A spinning process is another process's load, unless it is one of this process's helpers (its compile
    workers): then its CPU time is this process's own."""
    ticks = os.sysconf("SC_CLK_TCK")
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        assert process_seconds(spinner.pid, ticks) is not None
        foreign = LoadMonitor(os.sched_getaffinity(0), ticks, helpers=lambda: [])
        helped = LoadMonitor(os.sched_getaffinity(0), ticks, helpers=lambda: [spinner.pid])
        time.sleep(0.2)
        for _ in range(6):
            foreign.sample()
            helped.sample()
            time.sleep(0.1)
        # the two sample the same moments: whatever else the machine runs reads the same in both
        assert foreign.others > 0.6 and helped.others < foreign.others - 0.4, (foreign.others, helped.others)
    finally:
        spinner.kill()
        spinner.wait()
    assert process_seconds(spinner.pid, ticks) is None


BUSY_CORE = """
import os, subprocess, sys, time
import numpy as np
import braze
from braze.runtime import cpu_load
model = braze.nn.Sequential(braze.nn.Linear(256, 512), braze.nn.ReLU(), braze.nn.Linear(512, 256)).eval()
x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
compiled = braze.compile(model, x, threads=2)
want = compiled(x)
others = len(os.sched_getaffinity(0)) - 1
spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(others)]
try:
    deadline = time.monotonic() + 10
    while compiled.executable._calls == 2 and time.monotonic() < deadline:
        assert compiled(x).tobytes() == want.tobytes()
        time.sleep(0.01)
    print("calls on", compiled.executable._calls, "thread(s) of", compiled.executable.threads)
finally:
    for spinner in spinners:
        spinner.kill()
"""


@pytest.mark.skipif(not os.path.exists("/proc/stat") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs /proc/stat and two CPUs")
def test_with_the_other_cores_busy_calls_run_on_one_thread(tmp_path) -> None:
    """Processes spinning on all CPUs but one (of a machine of two, on one): within a few samples a module compiled
    for two threads calls on one, with the same bits. In a process of its own, with the cap on as users have it."""
    env = {k: v for k, v in os.environ.items() if k != cpu_load.ADAPT_ENV}
    result = subprocess.run([sys.executable, "-c", BUSY_CORE], env=env, capture_output=True, text=True, timeout=120,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "calls on 1 thread(s) of 2" in result.stdout
