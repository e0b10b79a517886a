"""The worker pool at process exit: its workers leave the JIT's code before the process frees it.

Each test runs in a fresh process: stopping the pool is for good (a stopped pool's calls run on one thread)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

MODEL = """
import numpy as np
import braze
from braze.runtime import pool

model = braze.nn.Sequential(braze.nn.Linear(256, 512), braze.nn.ReLU(), braze.nn.Linear(512, 256)).eval()
x = braze.tensor(np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32))
compiled = braze.compile(model, x, threads=2)
reference = compiled(x.numpy())
"""

STOP = MODEL + """
workers = pool.pool()._workers
assert workers and all(w.thread.is_alive() for w in workers)
pool.pool().stop()
assert not any(w.thread.is_alive() for w in workers), "a worker thread outlived the pool's stop"
calls = pool.pool().counters()["entries"]
np.testing.assert_array_equal(compiled(x.numpy()), reference)
assert pool.pool().counters()["entries"] == calls, "a stopped pool's worker entered a call"
braze.compile(braze.nn.Linear(256, 256).eval(), x, threads=2)(x.numpy())  # a new executable starts no thread
assert not any(w.thread.is_alive() for w in pool.pool()._workers)
print("stopped")
"""

# Registered before braze is imported, the check runs after braze's own exit hook (atexit runs hooks last-in first).
EXIT_AT_ONCE = """
import atexit, threading
atexit.register(lambda: print("workers alive at exit:",
                              sum(t.name.startswith("braze-worker") and t.is_alive() for t in threading.enumerate())))
""" + MODEL + """
for _ in range(50):
    compiled(x.numpy())
"""  # and the process ends at once, while the worker still spins (it spins about a millisecond after a call)


def _run(script: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True,
                          timeout=300)


def test_pool_stop_ends_the_worker_threads_and_later_calls_run_alone() -> None:
    done = _run(STOP)
    assert done.returncode == 0 and done.stdout.strip() == "stopped", done.stderr


def test_pool_process_exits_cleanly_right_after_a_parallel_call() -> None:
    for _ in range(3):
        done = _run(EXIT_AT_ONCE)
        assert done.returncode == 0, f"exit status {done.returncode}: {done.stderr[-2000:]}"
        assert done.stdout.strip() == "workers alive at exit: 0"
