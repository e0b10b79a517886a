"""Data movement against the numpy reference, bit for bit: transpose, reshape/squeeze/unsqueeze/copy, strided
slices, concat, stack, pad and broadcast_to, on random shapes (empty and size-1 axes included) and every dtype."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from braze.ir.types import DTYPES
from tests.codegen.lowering_harness import check_node, make_node, shapes, special_array

DTYPE_NAMES = [d.numpy_name for d in DTYPES]
EXAMPLES = settings(max_examples=12, deadline=None, derandomize=True)
dtypes = st.sampled_from(DTYPE_NAMES)
seeds = st.integers(0, 2 ** 32 - 1)


def _array(seed: int, shape, dtype: str) -> np.ndarray:
    return special_array(np.random.default_rng(seed), shape, dtype)


@EXAMPLES
@given(data=st.data(), shape=shapes(min_rank=1), dtype=dtypes, seed=seeds)
def test_transpose_moves_axes_like_numpy(data, shape, dtype: str, seed: int) -> None:
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    x = _array(seed, shape, dtype)
    check_node(make_node("transpose", x, perm=perm), [x])


@pytest.mark.parametrize("dtype", ["f32", "f64", "i64", "bool"])
@pytest.mark.parametrize("shape,perm", [((8, 8), (1, 0)), ((17, 40), (1, 0)), ((3, 16, 9), (0, 2, 1)),
                                        ((2, 24, 5, 16), (0, 3, 2, 1))])
def test_transpose_full_register_tiles_and_their_edges_match_numpy(shape, perm, dtype: str) -> None:
    """Shapes past the vector width: full tiles go through a transpose in registers, the edges element by element."""
    x = _array(len(shape), shape, dtype)
    check_node(make_node("transpose", x, perm=perm), [x])


@settings(max_examples=6, deadline=None, derandomize=True)
@given(data=st.data(), shape=shapes(), dtype=dtypes, seed=seeds)
def test_order_keeping_ops_copy_the_elements(data, shape, dtype: str, seed: int) -> None:
    x = _array(seed, shape, dtype)
    check_node(make_node("reshape", x, shape=(x.size,)), [x])
    check_node(make_node("copy", x), [x])
    check_node(make_node("unsqueeze", x, axes=(0, -1)), [x])
    ones = tuple(a for a, d in enumerate(shape) if d == 1)
    check_node(make_node("squeeze", x, axes=ones), [x])


@EXAMPLES
@given(data=st.data(), shape=shapes(min_rank=1), dtype=dtypes, seed=seeds)
def test_slice_with_steps_matches_numpy(data, shape, dtype: str, seed: int) -> None:
    starts, stops, steps = [], [], []
    for d in shape:
        lo = data.draw(st.integers(0, d))
        starts.append(lo)
        stops.append(data.draw(st.integers(lo, d)))
        steps.append(data.draw(st.integers(1, 3)))
    x = _array(seed, shape, dtype)
    check_node(make_node("slice", x, starts=tuple(starts), stops=tuple(stops), steps=tuple(steps)), [x])


@EXAMPLES
@given(data=st.data(), shape=shapes(min_rank=1), dtype=dtypes, seed=seeds, count=st.integers(1, 3))
def test_concat_and_stack_join_like_numpy(data, shape, dtype: str, seed: int, count: int) -> None:
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    parts = []
    for k in range(count):
        own = list(shape)
        own[axis] = data.draw(st.sampled_from([0, 1, 2, 5]))
        parts.append(_array(seed + k, own, dtype))
    check_node(make_node("concat", *parts, axis=axis), parts)
    same = [_array(seed + k, shape, dtype) for k in range(count)]
    check_node(make_node("stack", *same, axis=data.draw(st.integers(-len(shape) - 1, len(shape)))), same)


@EXAMPLES
@given(data=st.data(), shape=shapes(min_rank=1), dtype=dtypes, seed=seeds, value=st.sampled_from([0.0, 1.5, -2.0]))
def test_pad_fills_around_the_operand(data, shape, dtype: str, seed: int, value: float) -> None:
    pads = tuple(data.draw(st.integers(0, 3)) for _ in range(2 * len(shape)))
    x = _array(seed, shape, dtype)
    check_node(make_node("pad", x, pads=pads, value=value), [x])


@EXAMPLES
@given(data=st.data(), shape=shapes(min_rank=1), dtype=dtypes, seed=seeds,
       mode=st.sampled_from(["reflect", "edge", "wrap"]))
def test_pad_modes_read_the_operand_like_numpy(data, shape, dtype: str, seed: int, mode: str) -> None:
    """reflect (mirrored without the edge), edge and wrap padding, one pass over the result's rows."""
    limit = [d - 1 if mode == "reflect" else d for d in shape]
    pads = tuple(data.draw(st.integers(0, max(0, min(3, limit[a // 2])))) for a in range(2 * len(shape)))
    x = _array(seed, shape, dtype)
    check_node(make_node("pad", x, pads=pads, mode=mode), [x])


@EXAMPLES
@given(data=st.data(), shape=shapes(), dtype=dtypes, seed=seeds)
def test_broadcast_to_repeats_like_numpy(data, shape, dtype: str, seed: int) -> None:
    lead = data.draw(st.integers(0, len(shape)))
    source = tuple(1 if data.draw(st.booleans()) else d for d in shape[lead:])
    x = _array(seed, source, dtype)
    check_node(make_node("broadcast_to", x, shape=shape), [x])
