"""The benchmark CNN's conv layers alone on each conv2d kernel, side by side: time, GFLOP/s and % of the FMA peak.

Each layer is compiled as the model compiles it (weight pre-packed, folded batch norm's bias and the ReLU in the
epilogue) once per kernel ("im2col": the GEMM on the implicit im2col matrix; "direct": conv_direct.py, pixels
across the lanes; "channels": conv_channels.py, channels across the lanes), the last column naming the one the
compiler picks, and the kernels are timed interleaved in one process, the minimum over rounds: on one thread by
the calling thread's CPU time (time.thread_time, so another process on the core does not count), on N threads by
wall time with N Python threads calling the kernel at once (ctypes releases the GIL) and claiming its work from
each other.

Run: python -m benchmarks.conv_layers [--batch 1,64] [--threads 1,2] [--rounds 20]
"""
from __future__ import annotations

import argparse
import threading
import time
from typing import Callable

LAYERS = [  # (c_in, c_out, stride, input size): benchmarks/models.py's CNN, 3x3 kernels with padding 1
    (3, 32, 1, 32), (32, 64, 2, 32), (64, 128, 2, 16)]


def seconds(call: Callable[[int], None], threads: int, reps: int) -> float:
    """Seconds per call: thread CPU time on one thread, wall time of `threads` Python threads calling at once."""
    if threads == 1:
        start = time.thread_time()
        for _ in range(reps):
            call(0)
        return (time.thread_time() - start) / reps
    barrier = threading.Barrier(threads)

    def run(tid: int) -> None:
        for _ in range(reps):
            barrier.wait()
            call(tid)
    workers = [threading.Thread(target=run, args=(tid,)) for tid in range(1, threads)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    run(0)
    for worker in workers:
        worker.join()
    return (time.perf_counter() - start) / reps


def measure(batches: list[int], threads: list[int], rounds: int) -> list[dict]:
    import numpy as np

    from braze.codegen import host_target
    from braze.codegen.conv import ConvSpec, conv_kernel
    from braze.codegen.conv_search import compile_layer
    from braze.codegen.conv_tuning import KERNEL_NAMES
    from braze.codegen.gemm import tiling_for

    rows = []
    for batch in batches:
        for c_in, c_out, stride, size in LAYERS:
            spec = ConvSpec(batch, c_in, size, size, c_out, 3, 3, stride=(stride, stride), padding=(1, 1),
                            prepacked_weight=True)
            kernels = {kernel: compile_layer(spec, kernel) for kernel in KERNEL_NAMES}
            for n in threads:
                calls = {kernel: on(n) for kernel, on in kernels.items()}
                reps = max(1, int(2e8 // max(spec.flops, 1)))
                best = dict.fromkeys(calls, float("inf"))
                for _ in range(rounds):
                    for kernel, call in calls.items():
                        best[kernel] = min(best[kernel], seconds(call, n, reps))
                picked = conv_kernel(spec, tiling=tiling_for(host_target().vector_width))
                rows.append(dict(batch=batch, layer=f"{c_in}->{c_out}/{stride}", threads=n, flops=spec.flops,
                                 picked=picked, **{kernel: best[kernel] for kernel in calls}))
    return rows


def table(rows: list[dict], peak: dict[int, float]) -> str:
    from braze.codegen.conv_tuning import KERNEL_NAMES
    lines = ["| batch | layer | threads | " + " | ".join(f"{k} us (GFLOP/s, % peak)" for k in KERNEL_NAMES) +
             " | picked |", "|" + " --- |" * (4 + len(KERNEL_NAMES))]
    for row in rows:
        cells = []
        for kernel in KERNEL_NAMES:
            gflops = row["flops"] / row[kernel] / 1e9
            cells.append(f"{row[kernel] * 1e6:.1f} ({gflops:.0f}, {100 * gflops / peak[row['threads']]:.0f}%)")
        lines.append(f"| {row['batch']} | {row['layer']} | {row['threads']} | " + " | ".join(cells) +
                     f" | {row['picked']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    from benchmarks import peak as peak_module

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", default="1,64")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    peak = {n: peak_module.measure(n) for n in threads}
    rows = measure([int(b) for b in args.batch.split(",")], threads, args.rounds)
    print(", ".join(f"FMA peak {n} thread(s): {peak[n]:.0f} GFLOP/s" for n in threads))
    print(table(rows, peak))


if __name__ == "__main__":
    main()
