"""Accumulating writes compile: x.scatter_add and index_put(accumulate=True) with repeated indices in an inference
graph equal eager braze, on one thread and several (the sums are deterministic: bit-identical across calls)."""
from __future__ import annotations

from typing import Any

import numpy as np

import braze
import braze.nn as nn


class Accumulate(nn.Module):
    def forward(self, x: Any, index: Any) -> Any:
        y = x.scatter_add(1, index, x * 2)
        return y.index_put((index[:, 0],), x * 3, accumulate=True)


X = np.random.default_rng(2).standard_normal((5, 7)).astype(np.float32)
INDEX = np.array([[1, 1, 0, 6], [2, 2, 2, 2], [0, 6, 0, 6], [4, 4, 4, 3], [2, 0, 1, 5]], np.int64)


def test_compiled_scatter_add_and_accumulating_index_put_equal_eager() -> None:
    model = Accumulate().eval()
    with braze.no_grad():
        want = model(braze.tensor(X), braze.tensor(INDEX)).numpy()
    ops = {n.op for n in braze.compile(model, X, INDEX).graph.ops()}
    assert "scatter_add" in ops
    for threads in (1, 3):
        compiled = braze.compile(model, X, INDEX, threads=threads)
        got = np.asarray(compiled(X, INDEX))
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(np.asarray(compiled(X, INDEX)), got)
