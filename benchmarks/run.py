"""The benchmark harness: braze compiled vs numpy eager, braze eager, torch eager, torch.compile (default and
freezing) and onnxruntime (the peers where installed) at 1 and 2 threads, for the models of benchmarks/models.py,
SGEMM and the call overhead.

Run from the repository root:

    python -m benchmarks.run            # several minutes (torch.compile's compiles take most of them)
    python -m benchmarks.run --quick    # shorter timing, SGEMM up to n = 512
    python -m benchmarks.run --quick --no-torch-compile --readme perf.md   # and the README's table, in perf.md

Every system runs in a child process of its own, one after another, for each thread count N: bound to N CPUs (its
affinity mask, where the platform has one), with BLAS, OpenMP and torch thread counts N set before numpy is
imported, so every system may use up to N threads and chooses how many itself (braze uses one thread for small
graphs; the table notes what it chose). No other system's thread pool exists while one is timed: the worker threads
of onnxruntime, OpenMP (torch) and OpenBLAS keep spinning after a call and would take the CPUs of the system timed
next. The two torch.compile variants share a child (and torch's pool); the child of braze compiled also measures
the FMA peak on its N threads (benchmarks/peak.py), the denominator of every "% of peak". Within a child, the
figure reported for a model is the median per-call time over rounds of batches of calls (with two or more threads,
after a pause that lets the child's own spinning worker threads go idle); first calls (torch.compile's compile) are
made before timing, and braze's first call after compiling is reported on its own. Ratios are another system's time
over braze compiled's (above 1: braze compiled is faster), all from the same run. Every system's output is checked
against braze eager before timing. onnxruntime runs the model torch.onnx.export writes or, where that export fails
(the transformer: the legacy exporter rejects is_causal as a Tensor) or torch is not installed, the model
braze.export_onnx writes. Results go to benchmarks/results/: results.json, results.md and a PNG per model
(benchmarks/report.py; with matplotlib installed).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks import peers, report

THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
RESULTS = Path(__file__).resolve().parent / "results"


# --- timing -------------------------------------------------------------------------------------------------------

def _per_call(fn: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def interleaved(systems: dict[str, Callable[[], Any]], rounds: int, budget: float, settle: float = 0.0,
                statistic: Callable[[list[float]], float] = statistics.median) -> dict[str, float]:
    """Median (or `statistic`) seconds per call of each system over the rounds; each round runs every system for
    about `budget` seconds.

    `settle` seconds of sleep before each batch let the previous system's worker threads go idle: OpenBLAS and
    OpenMP threads keep spinning for tens of milliseconds after a call and would otherwise take the CPUs of the
    next system's threads.
    """
    calls = {}
    for name, fn in systems.items():
        fn()  # warm up
        once = _per_call(fn, 1)
        calls[name] = max(1, min(10_000, int(budget / max(once, 1e-7))))
    samples: dict[str, list[float]] = {name: [] for name in systems}
    for _ in range(rounds):
        for name, fn in systems.items():
            time.sleep(settle)
            fn()
            samples[name].append(_per_call(fn, calls[name]))
    return {name: statistic(s) for name, s in samples.items()}


# --- one system at one thread count (the child process) ----------------------------------------------------------

# The systems, one child process each (torch.compile's group: its two variants), in the order they run.
GROUPS = ("braze compiled", "numpy eager", "braze eager", "torch eager", "torch.compile", "onnxruntime")


def _add_braze(systems: dict[str, Callable[[], Any]], notes: dict[str, Any], case: Any) -> None:
    """braze compiled, with its compile time, the time of its first call, its thread count and the FLOPs of one
    call (twice the op traits' work estimate) in notes."""
    import braze
    from braze.runtime.threads import estimate_work
    x = case.x
    start = time.perf_counter()
    try:
        compiled = braze.compile(case.model, x)
        notes["compile_s"] = round(time.perf_counter() - start, 3)
        start = time.perf_counter()
        compiled(x)
        notes["first_call_s"] = time.perf_counter() - start
        notes["braze threads"] = compiled.threads
        notes["flops"] = 2 * estimate_work(compiled.graph)
        systems["braze compiled"] = lambda: compiled(x)
    except Exception as exc:  # a model the compiler cannot handle yet is reported, not fatal
        notes["braze compiled"] = f"error: {type(exc).__name__}: {exc}"[:300]


def _systems(group: str, case: Any, threads: int) -> tuple[dict[str, Callable[[], Any]], dict[str, Any]]:
    """The callables of one group's systems for one case (none when not installed), and notes (compile times,
    errors, skips)."""
    import numpy as np

    import braze
    notes: dict[str, Any] = {}
    systems: dict[str, Callable[[], Any]] = {}
    tensor = braze.tensor(case.x)

    def eager() -> Any:
        with braze.no_grad():
            return case.model(tensor)
    if group == "braze compiled":
        _add_braze(systems, notes, case)
    elif group == "numpy eager":
        systems["numpy eager"] = lambda: case.numpy_forward(case.x)
    elif group == "braze eager":
        systems["braze eager"] = eager
    elif group == "torch eager":
        peers.add_torch(systems, notes, case, threads)
    elif group == "torch.compile":
        peers.add_torch_compile(systems, notes, case, peers.torch_module(notes, case, threads))
    else:
        peers.add_onnxruntime(systems, notes, case, peers.torch_module({}, case, threads), threads)
    reference = eager().numpy()
    for name, fn in list(systems.items()):
        got = np.asarray(fn())
        error = float(np.max(np.abs(got - reference))) if got.size else 0.0
        notes[f"max_abs_error[{name}]"] = error
        if not error <= 1e-3 * max(1.0, float(np.max(np.abs(reference)))):
            notes[name] = f"wrong output (max abs error {error:.3g}); not timed"
            del systems[name]
    return systems, notes


def _sgemm(group: str, sizes: list[int], rounds: int, budget: float, settle: float) -> list[dict[str, Any]]:
    """GFLOP/s of numpy's (group "numpy eager") or braze's (group "braze compiled") n x n float32 matmul, each
    writing into one output array made before (out=): a fresh 4-16 MB result per call would add its page faults,
    a few percent at n >= 1024, to both."""
    import numpy as np

    import braze
    rows = []
    for n in sizes:
        rng = np.random.default_rng(n)
        a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
        out = np.empty((n, n), np.float32)
        row: dict[str, Any] = {"n": n}
        systems: dict[str, Callable[[], Any]] = {}
        if group == "numpy eager":
            systems["numpy"] = lambda: np.matmul(a, b, out=out)
        else:
            try:
                compiled = braze.compile(lambda p, q: p @ q, a, b)
                row["braze threads"] = compiled.threads
                row["max_abs_error"] = float(np.max(np.abs(compiled(a, b) - a @ b)))
                systems["braze"] = lambda: compiled(a, b, out=out)
            except Exception as exc:
                row["braze"] = f"error: {type(exc).__name__}: {exc}"[:300]
        for name, seconds in interleaved(systems, rounds, budget, settle).items():
            row[f"{name}_gflops"] = round(2.0 * n ** 3 / seconds / 1e9, 2)
        rows.append(row)
        print(f"  sgemm n={n}: {row}", file=sys.stderr)
    return rows


def child(threads: int, group: str, quick: bool, only: set[str] | None) -> dict[str, Any]:
    """Time one group's systems on every case at one thread count (in a process whose thread variables are
    already set); the group of braze compiled also measures the FMA peak."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])
    from benchmarks import models, peak
    rounds, budget = (3, 0.02) if quick else (7, 0.1)
    settle = 0.1 if threads > 1 else 0.0
    out: dict[str, Any] = {"threads": threads, "models": {}}
    if group == "braze compiled":
        out["peak_gflops"] = round(peak.measure(threads), 1)
        print(f"  [{threads} thread(s)] FMA peak {out['peak_gflops']} GFLOP/s", file=sys.stderr)
    for case in models.cases(quick):
        if only and case.name.split()[0] not in only:
            continue
        systems, notes = _systems(group, case, threads)
        times = interleaved(systems, rounds, budget, settle)
        out["models"][case.name] = {"seconds": times, "notes": notes}
        shown = ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in times.items()) or "not timed"
        print(f"  [{threads} thread(s)] {case.name}: {shown}", file=sys.stderr)
    if group in ("braze compiled", "numpy eager") and (not only or "sgemm" in only):
        sizes = [64, 128, 256, 512] if quick else [64, 128, 256, 512, 1024, 2048]
        out["sgemm"] = _sgemm(group, sizes, rounds, budget, settle)
    return out


# --- the parent: run the children, merge, print and write the results ----------------------------------------------

def _run_child(threads: int, group: str, args: argparse.Namespace) -> dict[str, Any]:
    # In braze's own child numpy's BLAS only computes the reference output: one thread, so its pool (OpenBLAS spins
    # for about 0.1 s after a call) never competes with braze's threads for the cores being measured.
    blas = 1 if group == "braze compiled" else threads
    env = dict(os.environ, **{var: str(blas) for var in THREAD_VARS})
    env.pop("BRAZE_NUM_THREADS", None)  # braze chooses within the CPUs the child may use
    root = Path(__file__).resolve().parent.parent
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    command = [sys.executable, "-m", "benchmarks.run", "--child", str(threads), "--group", group]
    command += ["--quick"] if args.quick else []
    command += ["--only", args.only] if args.only else []
    done = subprocess.run(command, env=env, cwd=root, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def merge(children: list[dict[str, Any]]) -> dict[str, Any]:
    """One thread count's run from its children's: every model's times and notes side by side, the SGEMM rows of
    braze and numpy joined by n, the FMA peak of the child that measured it."""
    run: dict[str, Any] = {"threads": children[0]["threads"], "models": {}}
    sgemm: dict[int, dict[str, Any]] = {}
    for part in children:
        if "peak_gflops" in part:
            run["peak_gflops"] = part["peak_gflops"]
        for name, entry in part["models"].items():
            merged = run["models"].setdefault(name, {"seconds": {}, "notes": {}})
            merged["seconds"].update(entry["seconds"])
            merged["notes"].update(entry["notes"])
        for row in part.get("sgemm", []):
            sgemm.setdefault(row["n"], {}).update(row)
    if sgemm:
        run["sgemm"] = [sgemm[n] for n in sorted(sgemm)]
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter timing and SGEMM up to n = 512")
    parser.add_argument("--threads", default="1,2", help="thread counts to measure (default 1,2)")
    parser.add_argument("--only", help="comma-separated subset: mlp, cnn, transformer, linear4, sgemm")
    parser.add_argument("--out", default=str(RESULTS), help="directory for results.json and results.md")
    parser.add_argument("--readme", metavar="FILE", help="also write the README's performance table (markdown with "
                        "date, CPU, versions and the machine's load) to FILE")
    parser.add_argument("--no-torch-compile", dest="torch_compile", action="store_false",
                        help="leave torch.compile out (its compiles take most of a minute per model)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--group", choices=GROUPS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    if args.child is not None:
        print(json.dumps(child(args.child, args.group or "braze compiled", args.quick, only)))
        return 0
    counts = [int(t) for t in args.threads.split(",")]
    groups = [g for g in GROUPS if args.torch_compile or g != "torch.compile"]
    started, load_before = time.time(), list(os.getloadavg())
    runs = [merge([_run_child(t, group, args) for group in groups]) for t in counts]
    results = {"machine": report.machine(), "quick": args.quick, "seconds": round(time.time() - started, 1),
               "load": {"before": load_before, "after": list(os.getloadavg())}, "command": _command(argv),
               "runs": runs}
    table = report.markdown(results)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "results.md").write_text(f"# braze benchmarks\n\n{json.dumps(results['machine'])}\n\n{table}")
    written = [out / "results.json", out / "results.md", *report.plots(results, out)]
    if args.readme:
        Path(args.readme).write_text(report.readme_table(results))
        written.append(Path(args.readme))
    print("wrote " + ", ".join(map(str, written)))
    return 0


def _command(argv: list[str] | None) -> str:
    return " ".join(["python -m benchmarks.run", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
