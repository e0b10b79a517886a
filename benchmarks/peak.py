"""The host's float32 FMA peak, measured by a generated kernel: what "% of peak" in the harness divides by.

The kernel is a loop of independent fused multiply-adds on the widest vector type the target has (braze's own
target: AVX-512, AVX2, ... as codegen/target.py chooses it, so BRAZE_CPU applies too): ACCUMULATORS chains per
iteration, enough to cover the FMA latency on every core's FMA pipes, with nothing else in the loop but the counter.
Each FMA is 2 * lanes FLOPs. On N threads, N Python threads, each pinned to a CPU of its own, call it at once
(ctypes releases the GIL) and the peak is their total work over the wall time of the slowest.

Run: python -m benchmarks.peak [--threads 1,2]
"""
from __future__ import annotations

import argparse
import ctypes
import os
import threading
import time
from typing import Callable

ACCUMULATORS = 12  # independent chains: at least FMA latency (4-5 cycles) x FMA pipes (2), within 16 registers
ITERATIONS = 2_000_000


def fma_kernel() -> tuple[Callable[[int, int], None], int]:
    """`kernel(iterations, out_address)` and the FLOPs of one iteration, for the host target."""
    import llvmlite.ir as ir

    from braze.codegen.jit import compile_ir
    from braze.codegen.loops import F32, I64, PTR, define_function, vec
    from braze.codegen.target import host_target

    target = host_target()
    lanes = target.vector_width
    typ = vec(lanes, F32)
    module = target.new_module(f"braze_fma_peak_{lanes}")
    fn = define_function(module, "fma_peak", [("iterations", I64), ("out", PTR)])
    fma = ir.Function(module, ir.FunctionType(typ, [typ, typ, typ]), f"llvm.fma.v{lanes}f32")
    b = ir.IRBuilder(fn.entry_basic_block)
    iterations, out = fn.args
    # start values read from memory, so that LLVM cannot fold the chains away
    scale = b.load(out, typ=typ, align=4)
    start = [b.fadd(scale, ir.Constant(typ, [ir.Constant(F32, 0.001 * k)] * lanes)) for k in range(ACCUMULATORS)]
    entry, loop, done = b.block, fn.append_basic_block("loop"), fn.append_basic_block("done")
    b.branch(loop)
    b.position_at_end(loop)
    count = b.phi(I64, name="it")
    acc = [b.phi(typ, name=f"acc{k}") for k in range(ACCUMULATORS)]
    following = [b.call(fma, [a, scale, scale]) for a in acc]
    step = b.add(count, ir.Constant(I64, 1))
    count.add_incoming(ir.Constant(I64, 0), entry)
    count.add_incoming(step, loop)
    for phi, first, then in zip(acc, start, following):
        phi.add_incoming(first, entry)
        phi.add_incoming(then, loop)
    b.cbranch(b.icmp_signed("<", step, iterations), loop, done)
    b.position_at_end(done)
    total = following[0]
    for value in following[1:]:
        total = b.fadd(total, value)
    b.store(total, out, align=4)
    b.ret_void()
    library = compile_ir(module, target=target)
    kernel = library.cfunc("fma_peak", None, ctypes.c_int64, ctypes.c_void_p)
    return kernel, 2 * lanes * ACCUMULATORS


def measure(threads: int, rounds: int = 5) -> float:
    """The best FMA throughput in GFLOP/s over `rounds` runs of the kernel on `threads` threads at once."""
    import numpy as np

    kernel, per_iteration = fma_kernel()
    buffers = [np.full(64, 1.0, np.float32) for _ in range(threads)]  # one output (and start value) per thread
    # each thread on a CPU of its own: left to the scheduler, two threads woken together were seen to share one CPU
    # for the whole run on a 2-CPU virtual machine (a 2-thread "peak" equal to the 1-thread one)
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    best = 0.0
    for _ in range(rounds):
        barrier = threading.Barrier(threads + 1)

        def run(k: int) -> None:
            if cpus:
                os.sched_setaffinity(0, {cpus[k % len(cpus)]})  # this thread only
            barrier.wait()
            kernel(ITERATIONS, buffers[k].ctypes.data)
        workers = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
        for worker in workers:
            worker.start()
        barrier.wait()
        start = time.perf_counter()
        for worker in workers:
            worker.join()
        best = max(best, threads * ITERATIONS * per_iteration / (time.perf_counter() - start) / 1e9)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    args = parser.parse_args(argv)
    from braze.codegen.target import host_target
    print(f"target: {host_target()}")
    for count in (int(t) for t in args.threads.split(",")):
        print(f"{count} thread(s): {measure(count):.1f} GFLOP/s")


if __name__ == "__main__":
    main()
