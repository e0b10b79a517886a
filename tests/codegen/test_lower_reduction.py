"""Reductions, argmax/argmin and the softmax family against the numpy reference: random shapes and axes (both
layouts of the row engine: reduced innermost axis and kept innermost axis), keepdim, every supported dtype, empty
reductions, and NaN/infinity propagation like numpy."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from braze.ir.errors import BrazeError
from braze.ir.evaluate import evaluate
from braze.ir.types import DTYPES, TensorType
from tests.codegen.lowering_harness import check_node, force_cpu, make_node, random_array, shapes, special_array

DTYPE_NAMES = [d.numpy_name for d in DTYPES]
NONFINITE = (np.nan, np.inf, -np.inf, 0.0, -0.0)
EXAMPLES = settings(max_examples=3, deadline=None, derandomize=True)


@st.composite
def axes_of(draw, rank: int):
    if draw(st.booleans()) and draw(st.booleans()):
        return None
    chosen = [a for a in range(rank) if draw(st.booleans())]
    return tuple(a - rank if draw(st.booleans()) else a for a in chosen)


def node_or_skip(op: str, x: np.ndarray, **attrs):
    try:
        return make_node(op, x, **attrs)
    except BrazeError:
        assume(False)


def _reduced(x: np.ndarray, axes) -> tuple[np.ndarray, int]:
    """sum |x| over the axes (float64) and the number of terms each result sums."""
    norm = tuple(range(x.ndim)) if axes is None else tuple(a % max(x.ndim, 1) for a in axes)
    terms = int(np.prod([x.shape[a] for a in norm])) if x.ndim else 1
    return np.sum(np.abs(x.astype(np.float64)), axis=norm), terms


def _supported(op: str, dtype: str) -> bool:
    try:
        make_node(op, TensorType((2,), dtype))
        return True
    except BrazeError:
        return False


@pytest.mark.parametrize("op, dtype", [(op, d) for op in ("sum", "mean", "max", "min") for d in DTYPE_NAMES
                                       if _supported(op, d)])
@EXAMPLES
@given(data=st.data(), shape=shapes(), keepdim=st.booleans(), seed=st.integers(0, 2 ** 32 - 1))
def test_reductions_match_reference(op: str, dtype: str, data, shape, keepdim: bool, seed: int) -> None:
    axes = data.draw(axes_of(len(shape)))
    x = special_array(np.random.default_rng(seed), shape, dtype, specials=NONFINITE)
    node = node_or_skip(op, x, axes=axes, keepdim=keepdim)
    total, terms = _reduced(x, axes)
    scale = total / max(terms, 1) if op == "mean" else total
    check_node(node, [x], terms=terms, scale=np.reshape(scale, node.out.shape))


@pytest.mark.parametrize("dtype", [d for d in DTYPE_NAMES if d != "bool"])
@pytest.mark.parametrize("op", ["argmax", "argmin"])
@EXAMPLES
@given(data=st.data(), shape=shapes(), keepdim=st.booleans(), seed=st.integers(0, 2 ** 32 - 1))
def test_arg_reductions_pick_the_first_extreme(op: str, dtype: str, data, shape, keepdim: bool, seed: int) -> None:
    axis = data.draw(st.none() | st.integers(-max(len(shape), 1), max(len(shape), 1) - 1))
    rng = np.random.default_rng(seed)
    x = special_array(rng, shape, dtype, specials=NONFINITE)
    if x.dtype.kind == "f" and x.size:
        x = np.round(x)  # ties are common, so "first" matters
    check_node(node_or_skip(op, x, axis=axis, keepdim=keepdim), [x])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@EXAMPLES
@given(data=st.data(), shape=shapes(), seed=st.integers(0, 2 ** 32 - 1))
def test_softmax_family_matches_reference(op: str, dtype: str, data, shape, seed: int) -> None:
    axis = data.draw(st.integers(-max(len(shape), 1), max(len(shape), 1) - 1))
    x = special_array(np.random.default_rng(seed), shape, dtype, low=-20, high=20, fraction=0.05,
                      specials=NONFINITE)
    node = node_or_skip(op, x, axis=axis)
    terms = x.shape[axis] if x.ndim else 1
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if op == "softmax":
            scale = np.abs(evaluate(op, [x64], {"axis": axis})[0])
        else:
            m = np.max(x64, axis=axis, keepdims=True) if x.size and x.ndim else x64
            log_sum = np.log(np.sum(np.exp(x64 - m), axis=axis, keepdims=True)) if x.ndim else 0.0
            scale = np.abs(x64 - m) + np.abs(log_sum) + 1.0
    check_node(node, [x], terms=terms, scale=np.nan_to_num(scale, nan=0.0, posinf=0.0))


def test_empty_reductions_give_identities() -> None:
    x = np.zeros((3, 0, 5), np.float32)
    np.testing.assert_array_equal(check_node(make_node("sum", x, axes=(1,)), [x])[0], np.zeros((3, 5)))
    assert np.isnan(check_node(make_node("mean", x, axes=(1,)), [x])[0]).all()


def test_max_and_argmax_see_nan_first() -> None:
    x = np.asarray([[1.0, np.nan, 5.0, np.nan], [2.0, 7.0, 7.0, -np.inf]] * 9, np.float32)
    assert np.isnan(check_node(make_node("max", x, axes=(1,)), [x])[0][::2]).all()
    np.testing.assert_array_equal(check_node(make_node("argmax", x, axis=1), [x])[0][:2], [1, 1])
    np.testing.assert_array_equal(check_node(make_node("argmin", x, axis=1), [x])[0][:2], [1, 3])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("n", [1, 7, 35, 67, 2100])
def test_softmax_rows_with_nan_or_inf(op: str, dtype: str, n: int) -> None:
    """A NaN anywhere in a row (in the paired vectors, the single vector or the scalar tail of the row's loop) or a
    +inf makes the whole row NaN; a row of -inf too; other rows are untouched. The row maxima may drop NaN terms
    (reducers.quiet_maximum), so this holds through the sums alone."""
    rng = np.random.default_rng(n)
    x = rng.uniform(-5, 5, (8, n)).astype(dtype)
    x[0, 0] = np.nan
    x[1, n // 2] = np.nan
    x[2, n - 1] = np.nan
    x[3, n - 1] = np.inf
    x[4, :] = -np.inf
    x[5, :] = np.nan
    x[6, 0], x[6, n - 1] = -np.inf, np.nan
    got = check_node(make_node(op, x, axis=-1), [x], terms=n, scale=1.0)[0]
    assert np.isnan(got[:7]).all()
    assert np.isfinite(got[7]).all()
    rows_side_by_side = np.ascontiguousarray(x.T)  # the inner axis kept: W rows at a time, one per lane
    got_t = check_node(make_node(op, rows_side_by_side, axis=0), [rows_side_by_side], terms=n, scale=1.0)[0]
    np.testing.assert_array_equal(np.isnan(got_t.T), np.isnan(got))


# cpu forced with BRAZE_CPU (None: the host) -> rows per case (lowering_harness.force_cpu)
_TAIL_CPUS = {None: 3, "haswell": 2}


@pytest.mark.parametrize("cpu", list(_TAIL_CPUS), ids=lambda c: c or "host")
@pytest.mark.parametrize("op, dtype", [("sum", "float32"), ("sum", "int32"), ("sum", "bool"), ("max", "float64"),
                                       ("argmax", "float32"), ("softmax", "float32"), ("log_softmax", "float64"),
                                       ("layer_norm", "float32")])
def test_rows_of_every_length_reduce_their_tails(cpu, op: str, dtype: str, monkeypatch) -> None:
    """Rows of every length n from 1 to 2 W + 3, in both layouts: reduced along the contiguous axis, a row's last
    n % W elements; reduced along the leading axis (rows side by side, one lane each), the last n % W rows. Either
    goes one alone or as a partial vector whose masked lanes neither add to a reduction nor are written (AVX-512
    stores it through a mask, AVX2 in power-of-two pieces)."""
    width = force_cpu(cpu, monkeypatch)
    rng = np.random.default_rng(7)
    rows = _TAIL_CPUS[cpu]
    for n in range(1, 2 * width + 4):
        x = random_array(rng, (rows, n), dtype)
        x64 = x.astype(np.float64)
        if op == "layer_norm":
            node = make_node(op, x, normalized_shape=(n,), eps=1e-5)
            scale = (np.abs(x64 - x64.mean(-1, keepdims=True)) + np.abs(x64).mean(-1, keepdims=True)) / \
                np.sqrt(x64.var(-1, keepdims=True) + 1e-5) + 1.0
            check_node(node, [x], terms=n, scale=scale)
            continue
        for axis in (1, 0):
            if op in ("softmax", "log_softmax"):
                check_node(make_node(op, x, axis=axis), [x], terms=x.shape[axis], scale=np.abs(x64) + 10.0)
                continue
            node = make_node(op, x, axis=axis) if op == "argmax" else make_node(op, x, axes=(axis,))
            got = check_node(node, [x], terms=x.shape[axis], scale=np.abs(x64).sum(axis))
            if op == "argmax":
                np.testing.assert_array_equal(got[0], np.argmax(x, axis=axis))


@pytest.mark.parametrize("cpu", list(_TAIL_CPUS), ids=lambda c: c or "host")
@pytest.mark.parametrize("op, dtype", [("sum", "float32"), ("sum", "int32"), ("mean", "float32"), ("max", "float64"),
                                       ("min", "float32"), ("argmax", "float32"), ("argmin", "int8")])
def test_leading_axis_reductions_take_wide_groups_of_rows(cpu, op: str, dtype: str, monkeypatch) -> None:
    """A one-pass reduction over leading axes takes WIDE_GROUP vectors of rows side by side, then the rows left in
    groups of W and the last n % W masked: every boundary of those, the reduced axes inner or outer of a kept one."""
    from braze.codegen.lower.reduction import WIDE_GROUP
    width = force_cpu(cpu, monkeypatch)
    wide = WIDE_GROUP * width
    rng = np.random.default_rng(12)
    for n in (wide - 1, wide, wide + 1, wide + width, 2 * wide + width + 3):
        for shape, axis in (((9, n), 0), ((3, 5, n), 1), ((4, 3, n), (0, 1))):
            x = random_array(rng, shape, dtype)
            x64 = x.astype(np.float64)
            axes = axis if isinstance(axis, tuple) else (axis,)
            terms = int(np.prod([shape[a] for a in axes]))
            if op in ("argmax", "argmin"):
                if len(axes) > 1:
                    continue
                got = check_node(make_node(op, x, axis=axis), [x], terms=terms, scale=np.abs(x64).sum(axes))
                want = (np.argmax if op == "argmax" else np.argmin)(x, axis=axis)
                np.testing.assert_array_equal(got[0], want)
                continue
            scale = np.abs(x64).sum(axes) / (terms if op == "mean" else 1)
            check_node(make_node(op, x, axes=axes), [x], terms=terms, scale=scale)
