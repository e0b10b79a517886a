"""Weight-only quantized GEMV: y = x @ W^T at batch 1 (or the batches given) with W (n x n) kept packed
(quantized_weights="packed", the kernel dequantizing inside its loop) against the dense float32 compiled kernel and
numpy, as ratios from one run.

Run: python -m benchmarks.quantized_gemv [--n 4096] [--batch 1,8] [--threads 1] [--rounds 7]

Batch 1 is memory-bound: the dense kernel reads 4 n^2 bytes per call, NF4 about 0.56 n^2 (codes and block-64
scales), int8 n^2. Each figure is the minimum over `rounds` rounds, the systems interleaved (benchmarks.run), with
numpy's BLAS held to the same thread count (benchmarks.gemm.blas_threads) and, on several threads, left to go idle
before each system; the error line is the packed
result's largest difference from the dense model's (the float32 weights before quantization) and from the
dequantized weights' exact product, relative to the largest output.
"""
from __future__ import annotations

import argparse

import numpy as np


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--batch", default="1", help="rows of x, comma-separated: a table for each")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    from benchmarks.gemm import blas_threads

    batches = [int(text) for text in args.batch.split(",") if text.strip()]
    if not batches or min(batches) < 1:
        parser.error(f"--batch takes positive row counts, got {args.batch!r}")
    with blas_threads(args.threads, ["-m", "benchmarks.quantized_gemv"]):
        for batch in batches:
            measure(args, batch)


def measure(args: argparse.Namespace, batch: int = 1) -> None:
    """Compile the dense and packed layers for `batch` rows of x, time them beside numpy and print the table and
    the errors."""
    import braze
    from braze.frontend.nn.quant import Quantizer
    from benchmarks.report import machine, target_text
    from benchmarks.run import interleaved

    info = machine()
    print(f"CPU: {info['cpu_model']} ({target_text(info)}, {info['cpus']} cpus); n = {args.n}, batch {batch}, "
          f"{args.threads} thread(s)")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, args.n)).astype(np.float32)
    layer = braze.nn.Linear(args.n, args.n, bias=False).eval()
    weight = layer.weight.detach().numpy().copy()
    dense = braze.compile(layer, x, threads=args.threads)
    y_dense = dense(x)
    systems = {"dense float32 (braze)": lambda: dense(x), "numpy x @ W.T": lambda: x @ weight.T}
    errors = {}
    for scheme in ("nf4", "int8"):
        quantized = braze.nn.Linear(args.n, args.n, bias=False).eval()
        quantized.load_state_dict(layer.state_dict())
        quantized.quantize_weights(Quantizer(scheme, 64))
        packed = braze.compile(quantized, x, threads=args.threads, quantized_weights="packed", policy="keep")
        assert any(k.op == "quantized_linear" for k in packed.kernels()), "the packed kernel was not used"
        systems[f"packed {scheme} (braze)"] = lambda packed=packed: packed(x)
        y = packed(x)
        exact = x.astype(np.float64) @ quantized.weight.detach().numpy().astype(np.float64).T
        peak = float(np.abs(y_dense).max())
        errors[scheme] = (float(np.abs(y - y_dense).max()) / peak, float(np.abs(y - exact).max()) / peak)
    # on several threads, a pause before each system lets numpy's BLAS threads, which spin for a while after a call,
    # go idle: the packed NF4 layer timed right after numpy read 0.83 ms on two threads, 0.50 ms timed alone
    settle = 0.15 if args.threads > 1 else 0.0
    times = interleaved(systems, args.rounds, 0.2, settle=settle, statistic=min)
    base = times["dense float32 (braze)"]
    for name, seconds in times.items():
        print(f"{name:<24} {seconds * 1e3:8.3f} ms   {base / seconds:5.2f}x the dense kernel")
    for scheme, (model, kernel) in errors.items():
        print(f"{scheme} error relative to max |y|: {model:.3g} against the dense model, {kernel:.3g} against the "
              f"exact product of the dequantized weights")


if __name__ == "__main__":
    main()
