"""The benchmark harness: braze compiled vs numpy eager vs braze eager (and torch eager / onnxruntime when
installed) at 1 and 2 threads, for the models of benchmarks/models.py, SGEMM and the call overhead.

Run from the repository root:

    python -m benchmarks.run            # about two minutes
    python -m benchmarks.run --quick    # shorter timing, SGEMM up to n = 512

Each thread count N runs in a child process bound to N CPUs (its affinity mask, where the platform has one) whose
BLAS, OpenMP and torch thread counts are N, set before numpy is imported: every system may use up to N threads and
chooses how many itself (braze uses one thread for small graphs; the table notes what it chose).
Within a child, the systems of a model are timed interleaved: each round times a batch of calls of every system in
turn (with two or more threads, after a pause that lets the previous system's spinning worker threads go idle),
and the figure reported is the median per-call time over the rounds. Ratios are another system's time over
braze compiled's (above 1: braze compiled is faster), all from the same run. Every system's output is checked
against braze eager before timing. onnxruntime runs the model torch.onnx.export writes or, where that export fails
(the transformer: the legacy exporter rejects is_causal as a Tensor) or torch is not installed, the model
braze.export_onnx writes. Results go to benchmarks/results/results.json and results.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
SYSTEMS = ("braze compiled", "numpy eager", "braze eager", "torch eager", "onnxruntime")
RESULTS = Path(__file__).resolve().parent / "results"


# --- timing -------------------------------------------------------------------------------------------------------

def _per_call(fn: Callable[[], Any], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def interleaved(systems: dict[str, Callable[[], Any]], rounds: int, budget: float, settle: float = 0.0
                ) -> dict[str, float]:
    """Median seconds per call of each system; each round runs every system for about `budget` seconds.

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
    return {name: statistics.median(s) for name, s in samples.items()}


# --- one thread count (the child process) -------------------------------------------------------------------------

def _systems(case: Any, threads: int) -> tuple[dict[str, Callable[[], Any]], dict[str, Any]]:
    """The callables of every available system for one case, and notes (compile time, errors, skips)."""
    import numpy as np

    import braze
    notes: dict[str, Any] = {}
    x = case.x
    start = time.perf_counter()
    try:
        compiled = braze.compile(case.model, x)
        notes["compile_s"] = round(time.perf_counter() - start, 3)
        notes["braze threads"] = compiled.threads
        systems: dict[str, Callable[[], Any]] = {"braze compiled": lambda: compiled(x)}
    except Exception as exc:  # a model the compiler cannot handle yet is reported, not fatal
        notes["braze compiled"] = f"error: {type(exc).__name__}: {exc}"[:300]
        systems = {}
    systems["numpy eager"] = lambda: case.numpy_forward(x)
    tensor = braze.tensor(x)

    def eager() -> Any:
        with braze.no_grad():
            return case.model(tensor)
    systems["braze eager"] = eager
    _add_onnxruntime(systems, notes, case, _add_torch(systems, notes, case, threads), threads)
    with braze.no_grad():
        reference = case.model(tensor).numpy()
    for name, fn in list(systems.items()):
        got = np.asarray(fn())
        error = float(np.max(np.abs(got - reference))) if got.size else 0.0
        notes[f"max_abs_error[{name}]"] = error
        if not error <= 1e-3 * max(1.0, float(np.max(np.abs(reference)))):
            notes[name] = f"wrong output (max abs error {error:.3g}); not timed"
            del systems[name]
    return systems, notes


def _add_torch(systems: dict[str, Callable[[], Any]], notes: dict[str, Any], case: Any, threads: int) -> Any:
    """Add torch eager; returns the torch module (None without torch) for the onnxruntime row."""
    try:
        import torch
    except ImportError:
        notes["torch eager"] = "not installed"
        return None
    torch.set_num_threads(threads)
    module, tx = case.torch_model(), torch.from_numpy(case.x)

    def run() -> Any:
        with torch.inference_mode():
            return module(tx).numpy()
    systems["torch eager"] = run
    return module


def _add_onnxruntime(systems: dict[str, Callable[[], Any]], notes: dict[str, Any], case: Any, module: Any,
                     threads: int) -> None:
    """Add onnxruntime on the model torch.onnx.export writes, or braze.export_onnx's where torch's fails (or torch
    is not installed); notes["onnx exporter"] says which."""
    try:
        import onnxruntime as ort
    except ImportError:
        notes["onnxruntime"] = "not installed"
        return
    try:
        model, notes["onnx exporter"] = _torch_onnx(module, case.x), "torch.onnx.export"
    except Exception as exc:  # the legacy exporter cannot export every model (is_causal as a Tensor)
        notes["torch.onnx.export"] = f"error: {type(exc).__name__}: {exc}"[:300]
        try:
            model, notes["onnx exporter"] = _braze_onnx(case), "braze.export_onnx"
        except Exception as exc:  # export or loading problems are reported, never fatal
            notes["onnxruntime"] = f"error: {type(exc).__name__}: {exc}"[:300]
            return
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    try:
        runner = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        notes["onnxruntime"] = f"error: {type(exc).__name__}: {exc}"[:300]
        return
    feed = {runner.get_inputs()[0].name: case.x}
    systems["onnxruntime"] = lambda: runner.run(None, feed)[0]


def _torch_onnx(module: Any, x: Any) -> bytes:
    """The model's ONNX bytes from torch's legacy exporter (raises without torch or when the export fails)."""
    import io

    import torch
    if module is None:
        raise ImportError("torch is not installed")
    buffer = io.BytesIO()
    torch.onnx.export(module, (torch.from_numpy(x),), buffer, input_names=["x"], dynamo=False)
    return buffer.getvalue()


def _braze_onnx(case: Any) -> bytes:
    import tempfile

    import braze
    with tempfile.TemporaryDirectory() as directory:
        return braze.export_onnx(case.model, Path(directory) / "model.onnx", case.x).SerializeToString()


def _sgemm(sizes: list[int], threads: int, rounds: int, budget: float, settle: float) -> list[dict[str, Any]]:
    import numpy as np

    import braze
    rows = []
    for n in sizes:
        rng = np.random.default_rng(n)
        a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
        row: dict[str, Any] = {"n": n}
        systems: dict[str, Callable[[], Any]] = {"numpy": lambda: a @ b}
        try:
            compiled = braze.compile(lambda p, q: p @ q, a, b)
            row["braze threads"] = compiled.threads
            error = float(np.max(np.abs(compiled(a, b) - a @ b)))
            row["max_abs_error"] = error
            systems["braze"] = lambda: compiled(a, b)
        except Exception as exc:
            row["braze"] = f"error: {type(exc).__name__}: {exc}"[:300]
        for name, seconds in interleaved(systems, rounds, budget, settle).items():
            row[f"{name}_gflops"] = round(2.0 * n ** 3 / seconds / 1e9, 2)
        rows.append(row)
        print(f"  sgemm n={n}: {row}", file=sys.stderr)
    return rows


def child(threads: int, quick: bool, only: set[str] | None) -> dict[str, Any]:
    """Measure every case at one thread count (runs in a process whose thread variables are already set)."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])
    from benchmarks import models
    rounds, budget = (3, 0.02) if quick else (7, 0.1)
    settle = 0.1 if threads > 1 else 0.0
    out: dict[str, Any] = {"threads": threads, "models": {}}
    for case in models.cases(quick):
        if only and case.name.split()[0] not in only:
            continue
        systems, notes = _systems(case, threads)
        times = interleaved(systems, rounds, budget, settle)
        out["models"][case.name] = {"seconds": times, "notes": notes}
        shown = ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in times.items())
        print(f"  [{threads} thread(s)] {case.name}: {shown}", file=sys.stderr)
    if not only or "sgemm" in only:
        sizes = [64, 128, 256, 512] if quick else [64, 128, 256, 512, 1024, 2048]
        out["sgemm"] = _sgemm(sizes, threads, rounds, budget, settle)
    return out


# --- the parent: run the children, print and write the results ------------------------------------------------------

def _run_child(threads: int, args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ, **{var: str(threads) for var in THREAD_VARS})
    env.pop("BRAZE_NUM_THREADS", None)  # braze chooses within the CPUs the child may use
    root = Path(__file__).resolve().parent.parent
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    command = [sys.executable, "-m", "benchmarks.run", "--child", str(threads)]
    command += ["--quick"] if args.quick else []
    command += ["--only", args.only] if args.only else []
    done = subprocess.run(command, env=env, cwd=root, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def markdown(results: dict[str, Any]) -> str:
    """The results as markdown tables: model latencies with ratios to braze compiled, then SGEMM GFLOP/s."""
    runs = results["runs"]
    present = [s for s in SYSTEMS if any(s in m["seconds"] for r in runs for m in r["models"].values())]
    lines = ["| model | threads | " + " | ".join(present) + " |", "|---|---|" + "---|" * len(present)]
    names = list(dict.fromkeys(name for r in runs for name in r["models"]))
    for name in names:
        for run in runs:
            entry = run["models"].get(name)
            if entry is None:
                continue
            seconds = entry["seconds"]
            base = seconds.get("braze compiled")
            cells = []
            for system in present:
                value = seconds.get(system)
                ratio = f" ({value / base:.2f}x)" if value is not None and base and system != "braze compiled" else ""
                braze_onnx = system == "onnxruntime" and entry["notes"].get("onnx exporter") == "braze.export_onnx"
                cells.append(_time(value) + ratio + (" *" if braze_onnx and value is not None else ""))
            used = entry["notes"].get("braze threads")
            threads = f"{run['threads']}" + (f" (braze: {used})" if used is not None else "")
            lines.append(f"| {name} | {threads} | " + " | ".join(cells) + " |")
    lines += ["", "Ratios: the system's time over braze compiled's (above 1: braze compiled is faster). "
              "threads: the CPUs every system may use (braze: the threads braze chose). onnxruntime runs the model "
              "torch.onnx.export writes; * marks the model braze.export_onnx wrote, where torch's export fails.", ""]
    lines += ["| SGEMM n | threads | braze GFLOP/s | numpy GFLOP/s | braze / numpy |", "|---|---|---|---|---|"]
    for run in runs:
        for row in run.get("sgemm", []):
            ours, theirs = row.get("braze_gflops"), row.get("numpy_gflops")
            ratio = f"{ours / theirs:.2f}" if ours and theirs else "-"
            used = row.get("braze threads")
            threads = f"{run['threads']}" + (f" (braze: {used})" if used is not None else "")
            lines.append(f"| {row['n']} | {threads} | {ours or '-'} | {theirs or '-'} | {ratio} |")
    errors = [f"- {name}, {run['threads']} thread(s), {key}: {value}" for run in runs
              for name, m in run["models"].items() for key, value in m["notes"].items()
              if key in SYSTEMS and value != "not installed"]
    if errors:
        lines += ["", "Not timed:", *errors]
    return "\n".join(lines) + "\n"


def _machine() -> dict[str, Any]:
    import llvmlite.binding as llvm
    import numpy as np
    info = {"python": platform.python_version(), "numpy": np.__version__, "machine": platform.machine(),
            "cpu": llvm.get_host_cpu_name(), "cpus": os.cpu_count()}
    try:
        import torch
        info["torch"] = torch.__version__
    except ImportError:
        pass
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter timing and SGEMM up to n = 512")
    parser.add_argument("--threads", default="1,2", help="thread counts to measure (default 1,2)")
    parser.add_argument("--only", help="comma-separated subset: mlp, cnn, transformer, linear4, sgemm")
    parser.add_argument("--out", default=str(RESULTS), help="directory for results.json and results.md")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    if args.child is not None:
        print(json.dumps(child(args.child, args.quick, only)))
        return 0
    counts = [int(t) for t in args.threads.split(",")]
    started = time.time()
    runs = [_run_child(t, args) for t in counts]
    results = {"machine": _machine(), "quick": args.quick, "seconds": round(time.time() - started, 1), "runs": runs}
    table = markdown(results)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "results.md").write_text(f"# braze benchmarks\n\n{json.dumps(results['machine'])}\n\n{table}")
    print(f"wrote {out / 'results.json'} and {out / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
