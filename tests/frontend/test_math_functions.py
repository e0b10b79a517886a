"""Trigonometric, rounding and remainder functions, float checks, any/all, scatter-style writes and the
data-dependent functions agree with numpy; integer inputs keep torch's dtypes; traced nonzero/unique fail clearly;
compiled graphs with the new ops match eager."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import braze

T = braze.tensor
X = np.random.default_rng(2).standard_normal((3, 4)) * 3
SPECIAL = np.array([[1.0, np.nan, np.inf], [-np.inf, 0.0, -2.5]])
INTS = np.array([7, -7, 5])

CASES: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
    ("sin", lambda: braze.sin(T(X)), lambda: np.sin(X)),
    ("cos", lambda: T(X).cos(), lambda: np.cos(X)),
    ("atan2", lambda: braze.atan2(T(X), T(X[::-1].copy())), lambda: np.arctan2(X, X[::-1])),
    ("log1p", lambda: braze.log1p(T(np.abs(X))), lambda: np.log1p(np.abs(X))),
    ("expm1", lambda: T(X).expm1(), lambda: np.expm1(X)),
    ("floor", lambda: braze.floor(T(X)), lambda: np.floor(X)),
    ("ceil_int", lambda: braze.ceil(T(INTS)), lambda: INTS),
    ("round_decimals", lambda: T(X).round(decimals=1), lambda: np.round(X * 10) / 10),
    ("fmod", lambda: braze.fmod(T(X), 0.7), lambda: np.fmod(X, 0.7)),
    ("fmod_int", lambda: braze.fmod(T(INTS), 3), lambda: np.fmod(INTS, 3)),
    ("remainder", lambda: T(X) % -0.7, lambda: np.remainder(X, -0.7)),
    ("remainder_int", lambda: braze.remainder(T(INTS), 3), lambda: np.remainder(INTS, 3)),
    ("isnan", lambda: T(SPECIAL).isnan(), lambda: np.isnan(SPECIAL)),
    ("isinf", lambda: braze.isinf(T(SPECIAL)), lambda: np.isinf(SPECIAL)),
    ("isfinite", lambda: braze.isfinite(T(SPECIAL)), lambda: np.isfinite(SPECIAL)),
    ("nan_to_num", lambda: braze.nan_to_num(T(SPECIAL), neginf=-5.0), lambda: np.nan_to_num(SPECIAL, neginf=-5.0)),
    ("isclose", lambda: braze.isclose(T(SPECIAL), T(SPECIAL) + 1e-9), lambda: np.isclose(SPECIAL, SPECIAL + 1e-9)),
    ("isclose_nan", lambda: T(SPECIAL).isclose(T(SPECIAL), equal_nan=True),
     lambda: np.isclose(SPECIAL, SPECIAL, equal_nan=True)),
    ("any", lambda: braze.any(T(X) > 4, dim=1), lambda: (X > 4).any(1)),
    ("all_keepdim", lambda: T(INTS).all(0, keepdim=True), lambda: INTS.all(0, keepdims=True)),
    ("all_empty", lambda: braze.all(T(np.zeros((0, 2)))), lambda: np.bool_(True)),
    ("scatter", lambda: braze.scatter(T(X), 0, T([[2, 0, 1, 0]]), T(X[:1] * 0 + 9.0)),
     lambda: np.where([[0, 1, 0, 1], [0, 0, 1, 0], [1, 0, 0, 0]], 9.0, X)),
    ("scatter_add", lambda: T(X).scatter_add(1, T([[0, 0], [1, 1], [3, 3]]), T(np.ones((3, 2)))),
     lambda: X + np.array([[2, 0, 0, 0], [0, 2, 0, 0], [0, 0, 0, 2]])),
    ("index_add", lambda: braze.index_add(T(X), 0, T([2, 2]), T(np.ones((2, 4))), alpha=0.5),
     lambda: X + np.array([[0], [0], [1.0]])),
    ("nonzero", lambda: braze.nonzero(T(X) > 1), lambda: np.argwhere(X > 1)),
    ("unique", lambda: braze.unique(T([3, 1, 3, 2])), lambda: np.array([1, 2, 3])),
]


@pytest.mark.parametrize("name,got,want", CASES, ids=[c[0] for c in CASES])
def test_function_matches_numpy(name: str, got: Callable[[], Any], want: Callable[[], Any]) -> None:
    result, expected = got(), np.asarray(want())
    assert result.shape == expected.shape and result.numpy().dtype == expected.dtype
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_allclose_is_a_python_bool() -> None:
    assert braze.allclose(T(X), T(X) + 1e-9) is True and braze.allclose(T(X), T(X) + 1) is False


def test_scatter_reduce_names_the_supported_values() -> None:
    with pytest.raises(braze.BrazeError, match="scatter: reduce='multiply' is not supported; supported values"):
        braze.scatter(T(X), 0, T([[0]]), 1.0, reduce="multiply")


def test_in_place_scatter_returns_self() -> None:
    x = braze.zeros(3)
    assert x.scatter_(0, T([1]), 5.0) is x and x.tolist() == [0.0, 5.0, 0.0]


@pytest.mark.parametrize("fn", [braze.nonzero, braze.unique])
def test_data_dependent_functions_refuse_traced_tensors(fn: Callable[..., Any]) -> None:
    with pytest.raises(braze.TraceError, match=r"test_math_functions.py:\d+: .*shape depends on the values"):
        braze.trace(lambda x: fn(x), T(X))


def test_new_elementwise_ops_compile_in_float32() -> None:
    x = T(np.linspace(-20, 20, 257, dtype=np.float32))

    def f(t):
        return braze.sin(t) + t.cos() * braze.floor(t) + braze.remainder(t, 0.75) + t.round() + braze.expm1(t / 8)
    np.testing.assert_allclose(braze.compile(f, x)(x).numpy(), f(x).numpy(), rtol=2e-6, atol=2e-5)


def test_compiled_topk_cumsum_and_flip_match_eager() -> None:
    x = T(np.random.default_rng(4).standard_normal((3, 40)).astype(np.float32))

    def f(t):
        values, indices = braze.topk(t, 5)
        return values.cumsum(-1).flip(0), indices
    for got, want in zip(braze.compile(f, x)(x), f(x)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
