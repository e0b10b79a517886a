"""Run a snippet of Python in a child process under an address-space limit, for inputs that could crash the process
or allocate gigabytes if a check were missing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT_BYTES = 1536 * 2 ** 20  # numpy and braze need a few hundred MiB of address space; the attacks ask for GiBs


def _limit() -> None:
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


def run_limited(code: str, timeout: float = 60) -> dict:
    """The JSON object the snippet prints last; the snippet runs with braze importable and one BLAS thread."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=timeout, preexec_fn=_limit)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])
