"""Elementwise lowerings against the numpy reference: every op and dtype it supports, broadcasting, empty and
size-1 axes, sizes off the vector width, special values (NaN, infinities, signed zeros, integer extremes), and the
float32 transcendentals over strided bit patterns of the whole float32 range."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from braze.ir.errors import BrazeError
from braze.ir.types import DTYPES, TensorType
from tests.codegen.lowering_harness import broadcast_operands, check_node, force_cpu, make_node, shapes, special_array

DTYPE_NAMES = [d.numpy_name for d in DTYPES]
FLOATS = ["float32", "float64"]
UNARY_FLOAT = ["exp", "log", "tanh", "erf", "sigmoid", "silu", "sqrt", "rsqrt", "relu", "abs", "neg", "sign"]
UNARY_ANY = ["relu", "abs", "neg", "sign"]
BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge"]
EXAMPLES = settings(max_examples=3, deadline=None, derandomize=True)


def supported(op: str, dtype: str, arity: int, **attrs) -> bool:
    try:
        make_node(op, *[TensorType((2,), dtype)] * arity, **attrs)
        return True
    except BrazeError:
        return False


def combinations(ops: list[str], dtypes: list[str], arity: int, accepted: bool = True) -> list[tuple[str, str]]:
    """The (op, dtype) pairs whose op accepts (or, with accepted=False, refuses) operands of that dtype."""
    return [(op, d) for op in ops for d in dtypes if supported(op, d, arity) == accepted]


INTEGERS = [d for d in DTYPE_NAMES if d not in FLOATS]


def _run(op: str, arrays, **attrs) -> None:
    node = make_node(op, *arrays, **attrs)
    check_node(node, arrays, inputs=arrays[0] if len(arrays) == 1 else 0.0)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", UNARY_FLOAT)
@EXAMPLES
@given(shape=shapes(), seed=st.integers(0, 2 ** 32 - 1))
def test_unary_float_ops_match_reference(op: str, dtype: str, shape, seed: int) -> None:
    _run(op, [special_array(np.random.default_rng(seed), shape, dtype, low=-10, high=10)])


@pytest.mark.parametrize("op,dtype", combinations(UNARY_ANY, INTEGERS, 1))
@EXAMPLES
@given(shape=shapes(), seed=st.integers(0, 2 ** 32 - 1))
def test_unary_integer_ops_match_reference(op: str, dtype: str, shape, seed: int) -> None:
    _run(op, [special_array(np.random.default_rng(seed), shape, dtype)])


@pytest.mark.parametrize("op,dtype,arity", [(*c, 1) for c in combinations(UNARY_ANY, INTEGERS, 1, accepted=False)]
                         + [(*c, 2) for c in combinations(BINARY, DTYPE_NAMES, 2, accepted=False)])
def test_ops_refuse_the_dtypes_they_do_not_lower(op: str, dtype: str, arity: int) -> None:
    """The pairs the tests above leave out are refused when the node is built, naming the op and the type."""
    with pytest.raises(BrazeError, match=rf"^{op}: .*operands?.*, got {re.escape(str(TensorType((2,), dtype)))}"):
        make_node(op, *[TensorType((2,), dtype)] * arity)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", FLOATS)
@EXAMPLES
@given(shape=shapes(), seed=st.integers(0, 2 ** 32 - 1))
def test_gelu_matches_reference(approximate: str, dtype: str, shape, seed: int) -> None:
    _run("gelu", [special_array(np.random.default_rng(seed), shape, dtype, low=-10, high=10)], approximate=approximate)


@pytest.mark.parametrize("dtype", DTYPE_NAMES)
@pytest.mark.parametrize("bounds", [(None, 1.5), (-0.5, None), (-1.25, 2.5), (None, None)])
@settings(max_examples=2, deadline=None, derandomize=True)
@given(shape=shapes(), seed=st.integers(0, 2 ** 32 - 1))
def test_clamp_matches_reference(dtype: str, bounds, shape, seed: int) -> None:
    low, high = bounds
    _run("clamp", [special_array(np.random.default_rng(seed), shape, dtype)], min=low, max=high)


@pytest.mark.parametrize("op,dtype", combinations(BINARY, DTYPE_NAMES, 2))
@EXAMPLES
@given(operands=broadcast_operands(2), seed=st.integers(0, 2 ** 32 - 1))
def test_binary_ops_broadcast_like_numpy(op: str, dtype: str, operands, seed: int) -> None:
    rng = np.random.default_rng(seed)
    _, (sx, sy) = operands
    low = 0.0 if op == "pow" else -3.0
    _run(op, [special_array(rng, sx, dtype, low=low), special_array(rng, sy, dtype, low=low)])


@pytest.mark.parametrize("dtype", DTYPE_NAMES)
@EXAMPLES
@given(operands=broadcast_operands(3), seed=st.integers(0, 2 ** 32 - 1))
def test_where_selects_like_numpy(dtype: str, operands, seed: int) -> None:
    rng = np.random.default_rng(seed)
    _, (sc, sx, sy) = operands
    arrays = [rng.random(sc) < 0.5, special_array(rng, sx, dtype), special_array(rng, sy, dtype)]
    check_node(make_node("where", *arrays), arrays)


def _castable(rng: np.random.Generator, shape, src: str, dst: str) -> np.ndarray:
    """Values whose conversion numpy defines: in the destination's range, no NaN into integers."""
    if np.dtype(src).kind == "f" and np.dtype(dst).kind in "iu":
        high = 100.0 if np.dtype(dst).itemsize == 1 else 1e6
        array = special_array(rng, shape, src, low=0.0 if np.dtype(dst).kind == "u" else -high, high=high,
                              fraction=0.0)
        return array
    return special_array(rng, shape, src)


@pytest.mark.parametrize("dst", DTYPE_NAMES)
@pytest.mark.parametrize("src", DTYPE_NAMES)
@settings(max_examples=1, deadline=None, derandomize=True)
@given(shape=shapes(nonempty=True), seed=st.integers(0, 2 ** 32 - 1))
def test_cast_converts_like_astype(src: str, dst: str, shape, seed: int) -> None:
    array = _castable(np.random.default_rng(seed), shape, src, dst)
    check_node(make_node("cast", array, dtype=dst), [array])


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_max_min_propagate_nan_like_numpy(op: str) -> None:
    values = np.asarray([np.nan, 1.0, -np.inf, np.inf, -0.0, 0.0, np.nan, 2.0], np.float32)
    x = np.repeat(values, 8)[:61]
    y = np.tile(values, 8)[:61]
    got = check_node(make_node(op, x, y), [x, y])[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(x) | np.isnan(y))


def test_relu_and_clamp_keep_nan() -> None:
    x = np.asarray([np.nan, -1.0, 2.0, -np.inf, np.inf] * 7, np.float32)
    for node in (make_node("relu", x), make_node("clamp", x, min=0.0, max=1.0)):
        got = check_node(node, [x])[0]
        assert np.isnan(got[::5]).all() and not np.isnan(got[1::5]).any()


_PATTERNS = np.arange(0, 2 ** 32, 4099, dtype=np.uint64).astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("op, attrs", [("exp", {}), ("log", {}), ("tanh", {}), ("erf", {}), ("sigmoid", {}),
                                       ("silu", {}), ("gelu", {"approximate": "none"}),
                                       ("gelu", {"approximate": "tanh"})])
def test_float32_transcendentals_hold_their_accuracy_over_the_whole_range(op: str, attrs) -> None:
    x = np.concatenate([_PATTERNS, np.asarray([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32)])
    check_node(make_node(op, x, **attrs), [x], inputs=x, threads=False)


# cpu forced with BRAZE_CPU (None: the host) -> rows per case (lowering_harness.force_cpu)
_TAIL_CPUS = {None: 3, "haswell": 2}


@pytest.mark.parametrize("cpu", list(_TAIL_CPUS), ids=lambda c: c or "host")
@pytest.mark.parametrize("op, dtype", [("add", "float32"), ("mul", "int32"), ("maximum", "float64"), ("lt", "float32"),
                                       ("pow", "float32"), ("where", "int8")])
def test_rows_of_every_length_end_in_their_tails(cpu, op: str, dtype: str, monkeypatch) -> None:
    """An operand broadcast along the rows makes the nest walk row by row: rows of every length from 1 to 2 W + 3
    end in a lone element or a partial vector, whose lanes past the row are neither read nor written."""
    width = force_cpu(cpu, monkeypatch)
    rng = np.random.default_rng(11)
    rows = _TAIL_CPUS[cpu]
    low = 0.0 if op == "pow" else -3.0
    for n in range(1, 2 * width + 4):
        x = special_array(rng, (rows, n), dtype, low=low)
        y = special_array(rng, (n,), dtype, low=low)
        if op == "where":
            _run(op, [special_array(rng, (rows, n), "bool"), x, special_array(rng, (rows, 1), dtype)])
        else:
            _run(op, [x, y])


SPECIAL_POWERS = [0.0, 1.0, 2.0, 3.0, 4.0, -1.0, -2.0, 0.5, -0.5]


@pytest.mark.parametrize("exponent", SPECIAL_POWERS)
def test_pow_by_a_constant_is_arithmetic_with_pows_special_values(exponent: float) -> None:
    """x ** c for these constants runs as multiplies, a division or a square root (no powf), within pow's 4 ulp of
    numpy's power in float32 and with its values at zeros, infinities, NaN, tiny and huge x."""
    import braze
    rng = np.random.default_rng(int(exponent * 4) + 9)
    x = np.concatenate([rng.standard_normal(4000) * 10.0 ** rng.integers(-30, 30, 4000),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3e38, -3e38, 1.0, -1.0]]).astype(np.float32)
    compiled = braze.compile(lambda t: t ** exponent, x)
    assert [k.op for k in compiled.kernels()] == ["fused:elementwise"]   # the constant is in the kernel's body
    got = compiled(x)
    with np.errstate(all="ignore"):
        exact = np.power(x.astype(np.float64), exponent)
        want = exact.astype(np.float32)   # overflows to inf, underflows through the subnormals to 0
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    numbers = ~np.isnan(want)
    special = numbers & (~np.isfinite(want) | (want == 0))
    np.testing.assert_array_equal(got[special], want[special])
    np.testing.assert_array_equal(np.signbit(got[special]), np.signbit(want[special]))
    finite = numbers & ~special
    ulp = np.ldexp(1.0, np.maximum(np.frexp(want[finite])[1] - 24, -149))
    worst = np.max(np.abs(got[finite].astype(np.float64) - exact[finite]) / ulp)
    assert worst <= 4, f"{worst} ulp"
