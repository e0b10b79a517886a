"""Elementwise exp (and log, tanh, sin, cos, log1p, expm1) over 1e6 float32 values: braze's vector math vs numpy, single thread.

Run: python benchmarks/vecmath_vs_numpy.py [--n 1000000] [--repeat 50]
Prints the best-of-repeat time of each and the ratio numpy / braze (above 1 means braze is faster).
"""
from __future__ import annotations

import argparse
import ctypes
import time
from typing import Callable

import numpy as np

from braze.codegen import I64, PTR, compile_ir, define_function, entry_builder, host_target, load, store, vec
from braze.codegen import vecmath, vector_loop

NUMPY: dict[str, Callable[[np.ndarray, np.ndarray], object]] = {
    "exp": lambda x, out: np.exp(x, out=out),
    "log": lambda x, out: np.log(x, out=out),
    "tanh": lambda x, out: np.tanh(x, out=out),
    "sin": lambda x, out: np.sin(x, out=out),
    "cos": lambda x, out: np.cos(x, out=out),
    "log1p": lambda x, out: np.log1p(x, out=out),
    "expm1": lambda x, out: np.expm1(x, out=out),
}


def braze_kernel(name: str) -> Callable[[np.ndarray, np.ndarray], None]:
    """A compiled out[i] = name(x[i]) loop over full vectors plus a scalar tail."""
    target = host_target()
    symbol = f"bench_vm_{name}_{target.vector_width}"
    module = target.new_module(symbol)
    fn = define_function(module, symbol, [("x", PTR), ("out", PTR), ("n", I64)], noalias=True)
    b = entry_builder(fn)
    x, out, n = fn.args
    vector_loop(b, 0, n, target.vector_width,
                lambda i, lanes: store(b, vecmath.call(b, name, load(b, x, i, vec(lanes))), out, i))
    b.ret_void()
    cfunc = compile_ir(module).cfunc(symbol, None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
    return lambda values, result: cfunc(values.ctypes.data, result.ctypes.data, values.size)


def best_time(fn: Callable[[], object], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"target: {host_target()}, n = {args.n}, best of {args.repeat}")
    print(f"{'function':10s} {'braze ms':>10s} {'numpy ms':>10s} {'numpy/braze':>12s}")
    for name, reference in NUMPY.items():
        x = rng.uniform(0.01 if name == "log" else -0.99 if name == "log1p" else -20, 20, args.n).astype(np.float32)
        ours, theirs = np.empty_like(x), np.empty_like(x)
        kernel = braze_kernel(name)
        t_braze = best_time(lambda: kernel(x, ours), args.repeat)
        t_numpy = best_time(lambda: reference(x, theirs), args.repeat)
        assert np.allclose(ours, theirs, rtol=1e-6, atol=1e-6 if name in ("sin", "cos") else 0), name
        print(f"{name:10s} {t_braze * 1e3:10.3f} {t_numpy * 1e3:10.3f} {t_numpy / t_braze:12.2f}")


if __name__ == "__main__":
    main()
