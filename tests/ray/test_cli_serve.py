"""`braze serve FILE.braze` as a user runs it: a local Ray instance serving the artifact until Ctrl-C, then shut
down cleanly with exit status 0."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .conftest import local_outputs, mlp_rows
from .test_serve import free_port, post_json

pytest.importorskip("ray")


# `python -m braze ARGS` with Ctrl-C raising KeyboardInterrupt, as in a terminal: a process started from a shell's
# background job inherits SIGINT ignored, and Python then leaves it ignored, so the test would wait for nothing.
AS_FROM_A_TERMINAL = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                      "sys.argv[0] = 'braze'; runpy.run_module('braze', run_name='__main__', alter_sys=True)")


@pytest.mark.slow
def test_braze_serve_answers_until_interrupted(mlp_path: Path) -> None:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", AS_FROM_A_TERMINAL, "serve", str(mlp_path), "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        line = server.stdout.readline()
        assert line.startswith(f"serving {mlp_path} at http://127.0.0.1:{port}/"), server.stderr.read()
        x = mlp_rows(4)
        status, body = post_json(f"http://127.0.0.1:{port}/", {"input": x.tolist()})
        assert status == 200
        (expected,) = local_outputs(mlp_path, {"input": x}).values()
        (got,) = body["outputs"].values()
        np.testing.assert_allclose(np.asarray(got, np.float32), expected, rtol=1e-6, atol=1e-6)
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=120)
    finally:
        server.kill()
    assert server.returncode == 0, err
    assert out.strip().endswith("stopped")


def test_braze_serve_checks_the_file_before_starting_ray(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from braze.cli import main
    damaged = tmp_path / "damaged.braze"
    damaged.write_bytes(b"\x00" * 16)
    assert main(["serve", str(damaged)]) == 2
    assert capsys.readouterr().err.startswith(f"braze: error: {damaged}")
