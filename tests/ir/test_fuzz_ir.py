"""The maintainers' fuzz run (tests/ir/fuzz_ir.py) with a small budget: mutated sample graphs compile and run like
the interpreter or are refused with a braze error, with no crash, hang or other exception. The run uses worker
processes, so a crash in native code fails this test instead of ending pytest."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_fuzz_run_compiles_mutants_like_the_interpreter_or_refuses_them(tmp_path: Path) -> None:
    child = subprocess.run([sys.executable, "-m", "tests.ir.fuzz_ir", "--budget", "400", "--seed", "0", "--compile",
                            "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    findings = {p.name: p.read_text(errors="replace")[-2000:] for p in tmp_path.glob("*-0-*")}
    assert child.returncode == 0 and not findings, (child.stdout, child.stderr, findings)
    summary = json.loads(child.stdout.strip().splitlines()[-1])
    outcomes = {k: v for k, v in summary.items() if k not in ("seed", "cases", "seconds")}
    assert sum(outcomes.values()) == summary["cases"] and outcomes["compiled"] >= 10, summary
