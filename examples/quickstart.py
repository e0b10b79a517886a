"""Quickstart: a torch-style model traced to IR, optimized, compiled to native code and compared with eager.

1. Write the model as with torch.nn (braze.nn has the same names and arguments).
2. `braze.trace` captures its forward pass as an IR graph; `braze.dump` prints it, before and after the
   inference pipeline (flags specialized, constants folded, elementwise tails fused into the GEMMs, memory
   planned).
3. `braze.compile` generates native code for this CPU; it is called like the model, on numpy arrays.
4. The compiled outputs match eager execution, and the compiled call is timed against it.

Run: python examples/quickstart.py   (a few seconds on two cores)
"""
from __future__ import annotations

import timeit

import numpy as np

import braze
import braze.nn as nn


class Classifier(nn.Module):
    """LayerNorm, a GELU hidden layer with dropout, and a linear head."""

    def __init__(self, d_in: int = 16, hidden: int = 64, classes: int = 4) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_in)
        self.hidden = nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Dropout(0.1))
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: braze.Tensor) -> braze.Tensor:
        return self.head(self.hidden(self.norm(x)))


def per_call(fn, calls: int = 200) -> float:
    """Median seconds per call over five batches of calls."""
    fn()
    return float(np.median(timeit.repeat(fn, number=calls, repeat=5))) / calls


def run(seed: int = 0, show: bool = True, calls: int = 200) -> dict[str, float]:
    """The whole walk-through (timing batches of `calls` calls); returns the numbers it prints."""
    braze.manual_seed(seed)
    model = Classifier().eval()
    x = np.random.default_rng(seed).standard_normal((8, 16)).astype(np.float32)

    graph = braze.trace(model, x)
    optimized = braze.dump(model, x, passes="inference")
    if show:
        print("# traced\n" + braze.dump(model, x))
        print("# after the inference pipeline\n" + optimized)
    print(f"traced: {len(list(graph.ops()))} op nodes; optimized: {optimized.count(' = fused ')} fused kernel(s)")

    compiled = braze.compile(model, x)
    with braze.no_grad():
        eager = model(braze.tensor(x)).numpy()
    difference = float(np.max(np.abs(compiled(x) - eager)))
    print(f"compiled vs eager: max |difference| = {difference:.2e}")

    tensor = braze.tensor(x)

    def eager_call() -> None:
        with braze.no_grad():
            model(tensor)
    eager_s, compiled_s = per_call(eager_call, calls), per_call(lambda: compiled(x), calls)
    print(f"eager {eager_s * 1e6:.0f} us per call, compiled {compiled_s * 1e6:.1f} us per call "
          f"({eager_s / compiled_s:.0f}x faster)")
    return {"difference": difference, "eager_s": eager_s, "compiled_s": compiled_s,
            "fused": float(optimized.count(" = fused "))}


if __name__ == "__main__":
    run()
