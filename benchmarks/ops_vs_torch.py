"""Single ops and layers outside the benchmark models, braze compiled against torch eager on the same inputs, as
ratios from one run: where a kernel is far behind, this table shows it (a masked softmax, topk, x ** 3, reflect
padding and the leading-axis reductions and scans were 3-50x behind before they got kernels of their own).

Run: python -m benchmarks.ops_vs_torch [--threads 1] [--rounds 7] [--only softmax,topk]   (needs torch)

Each case is a function written once against a module of the torch API and called with `braze` and with `torch`;
both get the same numpy inputs and their results must agree (rtol and atol 1e-4) before anything is timed. Each
figure is the median over `rounds` rounds of the two systems interleaved (benchmarks.run), torch held to the same
thread count.
"""
from __future__ import annotations

import argparse
import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass(frozen=True)
class Case:
    """A function of (module, *tensors), the arrays it is called with, and how far braze's result and torch's may
    differ (relative and absolute)."""

    name: str
    fn: Callable[..., Any]
    make: Callable[[np.random.Generator], list[np.ndarray]]
    tolerance: float = 1e-4


def _normal(*shape: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.standard_normal(shape).astype(np.float32)


def _double(*shape: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.standard_normal(shape)


def _uniform(low: float, high: float, *shape: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.uniform(low, high, shape).astype(np.float32)


def _integers(high: int, *shape: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.integers(0, high, shape)


def _arrays(*makers: Callable[[np.random.Generator], np.ndarray]) -> Callable[[np.random.Generator], list]:
    return lambda rng: [make(rng) for make in makers]


def _causal(n: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: np.triu(np.ones((n, n), bool), 1)


CASES = [
    Case("masked softmax 12 x 128 x 128", lambda t, s, m: t.softmax(s.masked_fill(m, float("-inf")), -1),
         _arrays(_normal(12, 128, 128), _causal(128))),
    Case("sdpa causal 4 x 1024 x 64", lambda t, q, k, v: t.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True), _arrays(_normal(1, 4, 1024, 64), _normal(1, 4, 1024, 64), _normal(1, 4, 1024, 64))),
    Case("topk 5 of 64 x 1000", lambda t, x: t.topk(x, 5)[0], _arrays(_normal(64, 1000))),
    Case("topk 50 of 1 x 50257", lambda t, x: t.topk(x, 50)[1], _arrays(_normal(1, 50257))),
    Case("topk 2 of 4096 x 8 (a router)", lambda t, x: t.topk(x, 2)[1], _arrays(_normal(4096, 8))),
    Case("x @ w 1 x 4096 x 4096, w an input", lambda t, x, w: x @ w, _arrays(_normal(1, 4096), _normal(4096, 4096)),
         tolerance=1e-3),
    Case("x.scatter_add along 1000 of 256 rows, 100 each", lambda t, x, i, s: x.scatter_add(1, i, s),
         _arrays(_normal(256, 1000), _integers(1000, 256, 100), _normal(256, 100))),
    Case("x.index_add of 50000 messages to 10000 x 64 nodes", lambda t, x, i, s: x.index_add(0, i, s),
         _arrays(_normal(10000, 64), _integers(10000, 50000), _normal(50000, 64))),
    Case("x ** 3, 1e6", lambda t, x: x ** 3, _arrays(_normal(1 << 20))),
    Case("|x| ** 2.5, 1e6", lambda t, x: x.abs() ** 2.5, _arrays(_normal(1 << 20))),
    Case("x @ y.T 512 x 768 x 3072", lambda t, x, y: x @ y.t(), _arrays(_normal(512, 768), _normal(3072, 768))),
    Case("pad reflect 64 x 56 x 56", lambda t, x: t.nn.functional.pad(x, (1, 1, 1, 1), mode="reflect"),
         _arrays(_normal(1, 64, 56, 56))),
    Case("interpolate nearest x2", lambda t, x: t.nn.functional.interpolate(x, scale_factor=2, mode="nearest"),
         _arrays(_normal(1, 64, 56, 56))),
    Case("sum over axis 0, 4096 x 256", lambda t, x: x.sum(0), _arrays(_normal(4096, 256))),
    Case("mean over tokens 8 x 512 x 768", lambda t, x: x.mean(1), _arrays(_normal(8, 512, 768))),
    # braze adds in numpy's order, torch more accurately: 4096 float32 terms differ by up to about 5e-4
    Case("cumsum over axis 0, 4096 x 256", lambda t, x: t.cumsum(x, 0), _arrays(_normal(4096, 256)), 2e-3),
    Case("expm1 1e6", lambda t, x: t.expm1(x), _arrays(_normal(1 << 20))),
    Case("tanh 1e6", lambda t, x: t.tanh(x), _arrays(_normal(1 << 20))),
    Case("mish 1e6", lambda t, x: t.nn.functional.mish(x), _arrays(_normal(1 << 20))),
    Case("softplus 1e6", lambda t, x: t.nn.functional.softplus(x), _arrays(_normal(1 << 20))),
    Case("group_norm 32 of 4 x 64 x 56 x 56", lambda t, x: t.nn.functional.group_norm(x, 32),
         _arrays(_normal(4, 64, 56, 56))),
    Case("repeat 2 x 2 of 512 x 512", lambda t, x: x.repeat(2, 2), _arrays(_normal(512, 512))),
    Case("roll by 3, 64 x 4096", lambda t, x: t.roll(x, 3, -1), _arrays(_normal(64, 4096))),
    Case("conv_transpose2d 64 to 32, 3 x 3 stride 2 of 28 x 28", lambda t, x, w: t.nn.functional.conv_transpose2d(
        x, w, stride=2, padding=1, output_padding=1), _arrays(_normal(1, 64, 28, 28), _normal(64, 32, 3, 3))),
    Case("argsort 64 x 1000", lambda t, x: t.argsort(x, dim=1), _arrays(_normal(64, 1000))),
    Case("layer_norm 16 x 4096", lambda t, x: t.nn.functional.layer_norm(x, (4096,)), _arrays(_normal(16, 4096))),
    Case("max_pool2d 2 of 4 x 64 x 112 x 112", lambda t, x: t.nn.functional.max_pool2d(x, 2),
         _arrays(_normal(4, 64, 112, 112))),
    Case("atan 1e6", lambda t, x: t.atan(x), _arrays(_normal(1 << 20))),
    Case("asin 1e6", lambda t, x: t.asin(x), _arrays(_uniform(-1, 1, 1 << 20))),
    Case("atan2 1e6", lambda t, y, x: t.atan2(y, x), _arrays(_normal(1 << 20), _normal(1 << 20))),
    Case("norm over rows 4096 x 256", lambda t, x: x.norm(dim=-1), _arrays(_normal(4096, 256))),
    Case("cosine_similarity 4096 x 256", lambda t, x, y: t.nn.functional.cosine_similarity(x, y, dim=-1),
         _arrays(_normal(4096, 256), _normal(4096, 256))),
    Case("logsigmoid 1e6", lambda t, x: t.nn.functional.logsigmoid(x), _arrays(_normal(1 << 20))),
    Case("unfold 3 x 3 of 8 x 64 x 32 x 32", lambda t, x: t.nn.functional.unfold(x, 3, padding=1),
         _arrays(_normal(8, 64, 32, 32))),
    Case("erfc 1e6", lambda t, x: t.erfc(x), _arrays(_normal(1 << 20))),
    Case("lgamma 1e6", lambda t, x: t.lgamma(x), _arrays(_uniform(0.1, 20, 1 << 20))),
    Case("conv3d 16 to 32, 3 x 3 x 3 of 2 x 8 x 32 x 32", lambda t, x, w: t.nn.functional.conv3d(x, w, padding=1),
         _arrays(_normal(2, 16, 8, 32, 32), _normal(32, 16, 3, 3, 3)), 1e-3),
    Case("grid_sample bilinear 4 x 16 x 64 x 64", lambda t, x, g: t.nn.functional.grid_sample(
        x, g, align_corners=False), _arrays(_normal(4, 16, 64, 64), _uniform(-1, 1, 4, 64, 64, 2))),
    Case("x % 2.5, 1e6", lambda t, x: x % 2.5, _arrays(_normal(1 << 20))),
    Case("fmod 1e6", lambda t, x, y: t.fmod(x, y), _arrays(_normal(1 << 20), _uniform(0.5, 3, 1 << 20))),
    # float64 models (a model.double(), gradient checks): matmul and conv2d had scalar kernels, exp, log, tanh, erf,
    # pow and atan2 one libm call per element
    Case("float64 linear 64 x 784 -> 512", lambda t, x, w: t.nn.functional.linear(x, w),
         _arrays(_double(64, 784), _double(512, 784))),
    Case("float64 x @ y 512 x 512 x 512", lambda t, x, y: x @ y, _arrays(_double(512, 512), _double(512, 512))),
    Case("float64 conv2d 64 to 64, 3 x 3 of 56 x 56", lambda t, x, w: t.nn.functional.conv2d(x, w, padding=1),
         _arrays(_double(1, 64, 56, 56), _double(64, 64, 3, 3))),
    Case("float64 softmax 512 x 512", lambda t, x: t.softmax(x, -1), _arrays(_double(512, 512))),
    Case("float64 tanh 1e6", lambda t, x: t.tanh(x), _arrays(_double(1 << 20))),
    Case("float64 gelu 1e6", lambda t, x: t.nn.functional.gelu(x), _arrays(_double(1 << 20))),
    Case("float64 |x| ** 2.5, 1e6", lambda t, x: x.abs() ** 2.5, _arrays(_double(1 << 20))),
    Case("float64 atan2 1e6", lambda t, y, x: t.atan2(y, x), _arrays(_double(1 << 20), _double(1 << 20))),
]


def measure(cases: list[Case], threads: int, rounds: int) -> list[dict[str, Any]]:
    """Per case: braze's and torch's median seconds per call and torch's over braze's (above 1: braze is faster);
    torch runs on `threads` threads meanwhile."""
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        # each case's inputs from a seed of its own name, so adding a case changes no other case's data
        return [_measure(case, np.random.default_rng(zlib.crc32(case.name.encode())), threads, rounds)
                for case in cases]
    finally:
        torch.set_num_threads(before)


def _measure(case: Case, rng: np.random.Generator, threads: int, rounds: int) -> dict[str, Any]:
    import torch

    import braze
    from benchmarks.run import interleaved
    arrays = case.make(rng)
    compiled = braze.compile(lambda *a: case.fn(braze, *a), *arrays, threads=threads)
    tensors = [torch.from_numpy(a) for a in arrays]

    def theirs() -> Any:
        with torch.no_grad():
            return case.fn(torch, *tensors)
    got, want = np.asarray(compiled(*arrays)).astype(np.float64), theirs().numpy().astype(np.float64)
    if not np.allclose(got, want, rtol=case.tolerance, atol=case.tolerance):
        raise AssertionError(f"{case.name}: braze and torch disagree (largest difference "
                             f"{np.max(np.abs(got - want)):.3g})")
    times = interleaved({"braze": lambda: compiled(*arrays), "torch": theirs}, rounds, 0.05)
    return {"case": case.name, "braze": times["braze"], "torch": times["torch"],
            "ratio": times["torch"] / times["braze"]}


def table(rows: list[dict[str, Any]], threads: int) -> str:
    """The markdown table of measure's rows."""
    lines = ["| case | threads | braze | torch eager | torch / braze |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {threads} | {r['braze'] * 1e6:.1f} us | {r['torch'] * 1e6:.1f} us | "
                     f"{r['ratio']:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", help="comma-separated words a case's name must contain one of")
    args = parser.parse_args(argv)
    from benchmarks.report import machine, target_text

    words = [w.strip() for w in args.only.split(",")] if args.only else None
    cases = [c for c in CASES if words is None or any(w in c.name for w in words)]
    info = machine()
    print(f"CPU: {info['cpu_model']} ({target_text(info)}, {info['cpus']} cpus); {args.threads} thread(s), median "
          f"of {args.rounds} rounds")
    print(table(measure(cases, args.threads, args.rounds), args.threads))


if __name__ == "__main__":
    main()
