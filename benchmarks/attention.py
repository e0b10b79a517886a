"""Fused attention against the decomposed chain: the benchmark transformer layer compiled with and without the
fuse_attention pass, and attention alone (softmax(q @ k^T / sqrt(E)) @ v, written out as GPT-2 writes it) at
L = S = 64, 256, 1024, as ratios from one run.

Run: BRAZE_NUM_THREADS=1 python -m benchmarks.attention [--threads 1] [--rounds 7] [--heads 4] [--width 64]

Each figure is the best of `rounds` rounds, every round running the systems one after another (interleaved, as
benchmarks.run) for about 0.2 s each.
"""
from __future__ import annotations

import argparse
import math
from typing import Any, Callable

import numpy as np

def _best(systems: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    from benchmarks.run import interleaved
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, seconds in interleaved(systems, 1, 0.2).items():
            best[name] = min(best.get(name, math.inf), seconds)
    return best


def _runs_attention(op: str) -> bool:
    """Whether a kernel's op is the attention kernel, alone or anchoring a fused region ("fused:attention")."""
    return op.rpartition(":")[2] == "attention"


def _pair(model: Any, inputs: tuple[np.ndarray, ...], threads: int) -> dict[str, Callable[[], Any]]:
    """The model compiled with the inference pipeline (attention fused) and without fuse_attention."""
    import braze
    unfused = [p for p in braze.ir.passes.PIPELINES["inference"] if p != "fuse_attention"]
    fused = braze.compile(model, *inputs, threads=threads)
    chain = braze.compile(model, *inputs, threads=threads, pipeline=unfused)
    assert any(_runs_attention(k.op) for k in fused.kernels()), "the attention kernel was not used"
    assert not any(_runs_attention(k.op) for k in chain.kernels())
    np.testing.assert_allclose(fused(*inputs), chain(*inputs), rtol=1e-4, atol=1e-5)
    return {"fused": lambda: fused(*inputs), "chain": lambda: chain(*inputs)}


def _report(label: str, times: dict[str, float]) -> None:
    print(f"{label:<28} fused {times['fused'] * 1e3:8.3f} ms   chain {times['chain'] * 1e3:8.3f} ms   "
          f"{times['chain'] / times['fused']:5.2f}x")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--width", type=int, default=64, help="E, the width of one head")
    args = parser.parse_args(argv)

    import braze
    from benchmarks import models
    from benchmarks.report import machine, target_text

    info = machine()
    print(f"CPU: {info['cpu_model']} ({target_text(info)}, {info['cpus']} cpus); {args.threads} thread(s), best of "
          f"{args.rounds} rounds")
    for batch in (1, 8):
        case = models.transformer(batch)
        _report(f"transformer b{batch}", _best(_pair(case.model, (case.x,), args.threads), args.rounds))

    def attention(q: Any, k: Any, v: Any) -> Any:
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        return braze.softmax(scores, -1) @ v
    rng = np.random.default_rng(0)
    for length in (64, 256, 1024):
        shape = (1, args.heads, length, args.width)
        inputs = tuple(rng.standard_normal(shape).astype(np.float32) for _ in range(3))
        _report(f"attention L=S={length}", _best(_pair(attention, inputs, args.threads), args.rounds))


if __name__ == "__main__":
    main()
