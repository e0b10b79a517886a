"""layer_norm and batch_norm (inference) against the numpy reference: layer norm within the accuracy table's
bound for its two row sums, batch norm bit for bit (it rounds step by step like the reference)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.codegen.lowering_harness import check_node, make_node, random_array, shapes

EXAMPLES = settings(max_examples=8, deadline=None, derandomize=True)
floats = st.sampled_from(["float32", "float64"])


@EXAMPLES
@given(data=st.data(), shape=shapes(min_rank=1, nonempty=True), affine=st.sampled_from([0, 1, 2]), dtype=floats,
       seed=st.integers(0, 2 ** 32 - 1))
def test_layer_norm_matches_reference(data, shape, affine: int, dtype: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    trailing = data.draw(st.integers(1, len(shape)))
    normalized = shape[len(shape) - trailing:]
    x = random_array(rng, shape, dtype) + random_array(rng, shape[:len(shape) - trailing] + (1,) * trailing, dtype)
    extra = [random_array(rng, normalized, dtype) for _ in range(affine)]
    node = make_node("layer_norm", x, *extra, normalized_shape=normalized, eps=1e-5)
    axes = tuple(range(len(shape) - trailing, len(shape)))
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes, keepdims=True)
    std = np.sqrt(((x64 - mean) ** 2).mean(axis=axes, keepdims=True) + 1e-5)
    scale = np.abs(x64 - mean) / std + np.abs(x64).mean(axis=axes, keepdims=True) / std + 1.0
    if affine:
        scale = scale * np.abs(extra[0])
    if affine == 2:
        scale = scale + np.abs(extra[1])
    check_node(node, [x] + extra, terms=int(np.prod(normalized)), scale=scale)


@EXAMPLES
@given(shape=shapes(min_rank=2), dtype=floats, seed=st.integers(0, 2 ** 32 - 1))
def test_batch_norm_matches_reference_exactly(shape, dtype: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    channels = (shape[1],)
    arrays = [random_array(rng, shape, dtype), random_array(rng, channels, dtype),
              np.abs(random_array(rng, channels, dtype)), random_array(rng, channels, dtype),
              random_array(rng, channels, dtype)]
    check_node(make_node("batch_norm", *arrays, eps=1e-3), arrays)
