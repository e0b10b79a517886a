"""SGEMM C = A @ B (n x n float32): braze's compiled kernel vs numpy's matmul, GFLOP/s side by side; with --models,
the benchmark models' own linear layers instead, each compiled by braze as a model (nn.Linear without bias: the
weight pre-packed once, braze's thread pool, a call with out=) against numpy's x @ W^T (W^T made contiguous once).

Run: python benchmarks/gemm.py [--sizes 64,128,256,512,1024,2048] [--threads 1] [--rounds 5]
                               [--json out.json]
     python benchmarks/gemm.py --models [--shapes 1x784x512,...] [--threads 1]

A shape MxKxN is x (M x K) times a weight of N outputs, as the issue tracker writes them (1x784x512: the MLP's first
layer at batch 1). The --models table also gives each system's share of the FMA peak (benchmarks/peak.py) measured
at the same thread count.

Both run in this process, one after the other for each n; each figure is the best of several rounds (a round
repeats the multiply for about 0.1 s), so the ratio compares the two under nearly the same machine state. numpy's BLAS is held to
the same thread count with threadpoolctl when installed; otherwise the script re-runs itself with
OPENBLAS_NUM_THREADS / OMP_NUM_THREADS / MKL_NUM_THREADS set before numpy is imported. braze runs as users run it:
a module compiled from `lambda a, b: a @ b` at that thread count (its native worker pool), called with out=, as
numpy's matmul is.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import subprocess
import sys
import time
from typing import Callable

THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _blas_limit(threads: int):
    """A context limiting numpy's BLAS to `threads`, or None when only the environment can do it."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return None
    return threadpool_limits(limits=threads, user_api="blas")


def blas_threads(threads: int, command: list[str]):
    """A context holding numpy's BLAS to `threads` threads; without threadpoolctl, re-runs this process as
    `python *command *arguments` with the thread variables set, unless they already are."""
    limit = _blas_limit(threads)
    if limit is None and any(os.environ.get(v) != str(threads) for v in THREAD_VARS):
        env = dict(os.environ, **{v: str(threads) for v in THREAD_VARS})
        sys.exit(subprocess.call([sys.executable, *command, *sys.argv[1:]], env=env))
    return limit or contextlib.nullcontext()


# The benchmark models' linear layers (benchmarks/models.py) as MxKxN: the MLP at batch 1 and 64, the transformer
# layer's QKV, output, FF1 and FF2 projections at batch 1 (128 rows) and 8 (1024 rows).
MODEL_SHAPES = ("1x784x512", "1x512x512", "64x784x512", "64x512x512", "128x256x768", "128x256x256", "128x256x1024",
                "128x1024x256", "1024x256x768", "1024x256x256", "1024x256x1024", "1024x1024x256")


def parse_shape(text: str) -> tuple[int, int, int]:
    """(m, k, n) from "MxKxN"."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"a shape is MxKxN with positive sizes, got {text!r}")
    m, k, n = (int(p) for p in parts)
    return m, k, n


def _round(fn: Callable[[], None], reps: int) -> float:
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) / reps


def measure(sizes: list[int], threads: int, rounds: int) -> list[dict]:
    """Best-round GFLOP/s of braze and numpy for each n, with the max relative difference of their results."""
    import numpy as np

    import braze
    from braze.runtime.memory import aligned_zeros

    rng = np.random.default_rng(0)
    rows = []
    for n in sizes:
        a, b, c = (aligned_zeros((n, n), np.float32) for _ in range(3))
        a[...] = rng.standard_normal((n, n))
        b[...] = rng.standard_normal((n, n))
        compiled = braze.compile(lambda x, y: x @ y, a, b, threads=threads)
        ours = functools.partial(compiled, a, b, out=c)
        out = np.empty_like(c)
        theirs = functools.partial(np.matmul, a, b, out=out)
        ours()
        reps = max(1, int(0.1 / max(_round(ours, 1), 1e-7)))
        # braze's rounds first, after a pause: OpenBLAS's worker threads keep spinning for a while after a call
        # and would steal the cores.
        time.sleep(0.5)
        best_ours = min(_round(ours, reps) for _ in range(rounds))
        theirs()
        best_theirs = min(_round(theirs, reps) for _ in range(rounds))
        flops = 2.0 * n ** 3
        error = float(np.abs(c - out).max() / max(np.abs(out).max(), 1e-30))
        rows.append(dict(n=n, threads=threads, braze_gflops=flops / best_ours / 1e9,
                         numpy_gflops=flops / best_theirs / 1e9, ratio=best_theirs / best_ours,
                         max_rel_diff=error))
    return rows


def measure_linear(shapes: list[tuple[int, int, int]], threads: int, rounds: int) -> list[dict]:
    """Best-round GFLOP/s of a braze-compiled Linear(k, n, bias=False) on x (m x k) and of numpy's x @ W^T, for
    each (m, k, n), with the max relative difference of their results."""
    import numpy as np

    import braze
    from braze.runtime.memory import aligned_zeros

    rng = np.random.default_rng(0)
    rows = []
    for m, k, n in shapes:
        braze.manual_seed(0)
        layer = braze.nn.Linear(k, n, bias=False).eval()
        x = aligned_zeros((m, k), np.float32)
        x[...] = rng.standard_normal((m, k))
        compiled = braze.compile(layer, x, threads=threads)
        c = aligned_zeros((m, n), np.float32)
        wt = np.ascontiguousarray(np.asarray(layer.weight).T)
        out = np.empty_like(c)
        ours = functools.partial(compiled, x, out=c)
        theirs = functools.partial(np.matmul, x, wt, out=out)
        ours()
        reps = max(1, int(0.1 / max(_round(ours, 1), 1e-7)))
        time.sleep(0.5)  # as measure(): braze first, before OpenBLAS's threads have spun up
        best_ours = min(_round(ours, reps) for _ in range(rounds))
        theirs()
        best_theirs = min(_round(theirs, reps) for _ in range(rounds))
        flops = 2.0 * m * k * n
        error = float(np.abs(c - out).max() / max(np.abs(out).max(), 1e-30))
        rows.append(dict(m=m, k=k, n=n, threads=threads, braze_threads=compiled.threads,
                         braze_gflops=flops / best_ours / 1e9, numpy_gflops=flops / best_theirs / 1e9,
                         ratio=best_theirs / best_ours, max_rel_diff=error))
    return rows


def linear_table(rows: list[dict], peak: float) -> str:
    """The --models table: GFLOP/s and share of the FMA peak `peak` of both systems, braze's threads in brackets
    (it keeps a small layer on fewer threads than it may use)."""
    lines = ["| shape (MxKxN) | threads | braze GFLOP/s | % of peak | numpy GFLOP/s | % of peak | numpy time / braze |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['m']}x{r['k']}x{r['n']} | {r['threads']} (braze: {r['braze_threads']}) | "
                     f"{r['braze_gflops']:.1f} | {100 * r['braze_gflops'] / peak:.0f}% | {r['numpy_gflops']:.1f} | "
                     f"{100 * r['numpy_gflops'] / peak:.0f}% | {r['ratio']:.2f}x |")
    return "\n".join(lines)


def _peak(threads: int) -> float:
    try:
        from benchmarks import peak
    except ImportError:  # run as a script (or re-run by blas_threads): this folder is on sys.path
        import peak  # type: ignore[no-redef]
    return peak.measure(threads)


def table(rows: list[dict]) -> str:
    lines = [f"{'n':>6s} {'threads':>7s} {'braze GFLOP/s':>14s} {'numpy GFLOP/s':>14s} {'braze/numpy':>12s}"]
    for r in rows:
        lines.append(f"{r['n']:6d} {r['threads']:7d} {r['braze_gflops']:14.1f} {r['numpy_gflops']:14.1f} "
                     f"{r['ratio']:12.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,128,256,512,1024,2048")
    parser.add_argument("--models", action="store_true", help="the models' linear layers instead of n x n")
    parser.add_argument("--shapes", default=",".join(MODEL_SHAPES), help="with --models: MxKxN shapes")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default=None, help="also write the rows as JSON to this path")
    args = parser.parse_args(argv)
    from braze.codegen import host_target

    with blas_threads(args.threads, [os.path.abspath(__file__)]):
        if args.models:
            peak = _peak(args.threads)
            rows = measure_linear([parse_shape(s) for s in args.shapes.split(",")], args.threads, args.rounds)
        else:
            rows = measure([int(s) for s in args.sizes.split(",")], args.threads, args.rounds)
    print(f"target: {host_target()}; best of {args.rounds} rounds each")
    if args.models:
        print(f"FMA peak on {args.threads} thread(s): {peak:.1f} GFLOP/s")
        print(linear_table(rows, peak))
    else:
        print(table(rows))
    worst = max(r["max_rel_diff"] for r in rows)
    print(f"largest difference between the two results, relative to max |C|: {worst:.1e}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=2)


if __name__ == "__main__":
    main()
