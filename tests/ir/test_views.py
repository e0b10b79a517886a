"""Strided views (ir/views.py) and the movement ops' view traits, against numpy: wherever a chain of slices,
transposes and reshapes is a view, reading the base buffer through it gives the ops' result element for element."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from braze import ir
from braze.ir.registry import get_op
from braze.ir.views import View, contiguous, follow, follow_back, permuted, reshaped, sliced


def through(base: np.ndarray, view: View, shape: tuple[int, ...]) -> np.ndarray:
    """The elements of `base` (flat) that `view` addresses, as an array of `shape`."""
    index = np.full(shape, view.offset, np.int64)
    for axis, (size, stride) in enumerate(zip(shape, view.strides)):
        index += (np.arange(size) * stride).reshape((-1,) + (1,) * (len(shape) - axis - 1))
    return base.reshape(-1)[index]


@st.composite
def factorization(draw, size: int) -> tuple[int, ...]:
    """A shape of `size` elements, in any order, with a unit axis sometimes."""
    factors = []
    while size > 1:
        factor = draw(st.sampled_from([f for f in range(2, size + 1) if size % f == 0]))
        factors.append(factor)
        size //= factor
    factors += [1] * draw(st.integers(0, 1))
    return tuple(draw(st.permutations(factors))) or (1,)


@st.composite
def chains(draw) -> tuple[tuple[int, ...], list[tuple]]:
    shape = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 4, 6]), min_size=1, max_size=4)))
    steps, current = [], shape
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["transpose", "slice", "reshape"]))
        if kind == "transpose":
            perm = tuple(draw(st.permutations(range(len(current)))))
            steps.append(("transpose", perm))
            current = tuple(current[p] for p in perm)
        elif kind == "slice":
            starts = tuple(draw(st.integers(0, max(d - 1, 0))) for d in current)
            strides = tuple(draw(st.integers(1, 2)) for _ in current)
            steps.append(("slice", starts, strides))
            current = tuple(len(range(a, d, s)) for a, d, s in zip(starts, current, strides))
        else:
            new = draw(factorization(int(np.prod(current))))
            steps.append(("reshape", new))
            current = new
    return shape, steps


@settings(max_examples=400, deadline=None, derandomize=True)
@given(chains())
def test_views_address_what_the_ops_compute(case) -> None:
    shape, steps = case
    base = np.arange(int(np.prod(shape))).reshape(shape)
    x, view = base, contiguous(shape)
    for step in steps:
        if step[0] == "transpose":
            x, view = np.transpose(x, step[1]), permuted(view, step[1])
        elif step[0] == "slice":
            x = x[tuple(slice(a, None, s) for a, s in zip(step[1], step[2]))]
            view = sliced(view, step[1], step[2])
        else:
            folded = reshaped(view, x.shape, step[1])
            x = np.reshape(x, step[1])
            if folded is None:  # a copy: numpy could not make it a view either
                assert not np.shares_memory(x, base)
                return
            view = folded
    np.testing.assert_array_equal(through(base, view, x.shape), x)


def test_reshape_merging_axes_that_do_not_nest_is_no_view() -> None:
    transposed = permuted(contiguous((2, 3)), (1, 0))
    assert reshaped(transposed, (3, 2), (6,)) is None
    assert reshaped(transposed, (3, 2), (3, 1, 2)) == View(0, (1, 1, 3))


def qkv_heads() -> ir.Graph:
    return ir.parse("""graph @heads(%qkv: f32[2,5,24]) -> (f32[2,2,5,4]) {
  %0 = slice %qkv {starts=[0, 0, 8], steps=[1, 1, 1], stops=[2, 5, 16]} : f32[2,5,8]
  %1 = reshape %0 {shape=[2, 5, 2, 4]} : f32[2,5,2,4]
  %2 = transpose %1 {perm=[0, 2, 1, 3]} : f32[2,2,5,4]
  return %2
}""")


def test_follow_composes_the_view_traits_of_a_head_split() -> None:
    graph = qkv_heads()
    view = follow(contiguous((2, 5, 24)), graph.nodes, get_op)
    assert view == View(8, (120, 4, 24, 1))
    base = np.arange(240.0).reshape(2, 5, 24)
    want = base[:, :, 8:16].reshape(2, 5, 2, 4).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(through(base, view, (2, 2, 5, 4)), want)


def test_follow_back_writes_heads_merged_back_into_rows() -> None:
    graph = ir.parse("""graph @merge(%o: f32[2,2,5,4]) -> (f32[2,5,8]) {
  %0 = transpose %o {perm=[0, 2, 1, 3]} : f32[2,5,2,4]
  %1 = reshape %0 {shape=[2, 5, 8]} : f32[2,5,8]
  return %1
}""")
    view = follow_back(contiguous((2, 5, 8)), graph.nodes, get_op)
    heads = np.arange(80.0).reshape(2, 2, 5, 4)
    out = np.zeros(80)
    index = through(np.arange(80), view, heads.shape)
    out[index] = heads
    np.testing.assert_array_equal(out.reshape(2, 5, 8), heads.transpose(0, 2, 1, 3).reshape(2, 5, 8))


def test_only_bijective_view_ops_can_be_written_through() -> None:
    assert get_op("slice").view is not None and get_op("slice").unview is None
    for op in ("reshape", "squeeze", "unsqueeze", "transpose"):
        assert get_op(op).view is not None and get_op(op).unview is not None
    assert get_op("flip").view is None and get_op("broadcast_to").view is None
