"""The composed arrangement functions (tile, meshgrid, cartesian_prod, diag, diag_embed, block_diag, trace, diff, take,
take_along_dim, ravel, atleast_nd, rot90, vander, tril_indices, triu_indices) and masked_select agree with numpy,
refuse what torch refuses, match torch's values and gradients, differentiate like finite differences and compile
(masked_select, whose size depends on the mask's values, refuses a traced mask)."""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import pytest

import braze
from tests.frontend.test_gradients import check_gradients

T = braze.tensor
R = np.random.default_rng(9)
X = R.standard_normal((3, 4))
B3 = R.standard_normal((2, 3, 4))
V = R.standard_normal(3)
INTS = np.array([[1, 4, 9, 16], [2, 3, 5, 7]])
INF = float("inf")


def _diag_embed(a: np.ndarray, offset: int) -> np.ndarray:
    """Batched np.diag of the last dim."""
    size = a.shape[-1] + abs(offset)
    out = np.zeros(a.shape[:-1] + (size, size), a.dtype)
    for index in np.ndindex(a.shape[:-1]):
        out[index] = np.diag(a[index], offset)
    return out


def _meshgrid(*a: np.ndarray, indexing: str) -> np.ndarray:
    return np.stack(np.meshgrid(*a, indexing=indexing))


# (id, braze expression, numpy expression): values, shape and dtype must agree exactly
CASES: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
    ("tile", lambda: braze.tile(T(X), (2,)), lambda: np.tile(X, 2)),
    ("tile_more_dims", lambda: braze.tile(T(X), dims=(2, 1, 3)), lambda: np.tile(X, (2, 1, 3))),
    ("tile_method_varargs", lambda: T(V).tile(2, 3), lambda: np.tile(V, (2, 3))),
    ("tile_scalar", lambda: braze.tile(T(np.float64(2.0)), ()), lambda: np.float64(2.0)),
    ("meshgrid_ij", lambda: braze.stack(braze.meshgrid(T(V), T(X[0]), indexing="ij")),
     lambda: _meshgrid(V, X[0], indexing="ij")),
    ("meshgrid_xy_list", lambda: braze.stack(braze.meshgrid([T(V), T(X[0]), T(X[1, :2])], indexing="xy")),
     lambda: _meshgrid(V, X[0], X[1, :2], indexing="xy")),
    ("meshgrid_scalar", lambda: braze.stack(braze.meshgrid(T(np.float64(2.0)), T(V), indexing="ij")),
     lambda: _meshgrid(np.array([2.0]), V, indexing="ij")),
    ("meshgrid_single_xy", lambda: braze.meshgrid(T(V), indexing="xy")[0], lambda: V),
    ("cartesian_prod", lambda: braze.cartesian_prod(T(V), T(X[0, :2]), T(INTS[0, :2].astype(np.float64))),
     lambda: np.array([[a, b, c] for a in V for b in X[0, :2] for c in INTS[0, :2]])),
    ("cartesian_prod_single", lambda: braze.cartesian_prod(T(V)), lambda: V),
    ("diag", lambda: braze.diag(T(V)), lambda: np.diag(V)),
    ("diag_above", lambda: T(V).diag(2), lambda: np.diag(V, 2)),
    ("diag_below", lambda: braze.diag(T(V), -1), lambda: np.diag(V, -1)),
    ("diag_int", lambda: braze.diag(T(INTS[0]), 1), lambda: np.diag(INTS[0], 1)),
    ("diag_bool", lambda: braze.diag(T(V > 0)), lambda: np.diag(V > 0)),
    ("diag_empty_vector", lambda: braze.diag(T(np.zeros(0)), 2), lambda: np.zeros((2, 2))),
    ("diag_keeps_inf_and_nan", lambda: braze.diag(T(np.array([INF, np.nan, -INF])), -2),
     lambda: np.diag([INF, np.nan, -INF], -2)),
    ("diag_of_matrix", lambda: braze.diag(T(X)), lambda: np.diag(X)),
    ("diag_of_matrix_offsets", lambda: braze.cat([T(X).diag(1), braze.diag(T(X), -1)]),
     lambda: np.concatenate([np.diag(X, 1), np.diag(X, -1)])),
    ("diag_of_matrix_outside", lambda: braze.diag(T(X), 5), lambda: np.diag(X, 5)),
    ("diag_embed", lambda: braze.diag_embed(T(B3)), lambda: _diag_embed(B3, 0)),
    ("diag_embed_offsets", lambda: T(X).diag_embed(-2), lambda: _diag_embed(X, -2)),
    ("diag_embed_dims", lambda: braze.diag_embed(T(X), 1, 0, 2),
     lambda: np.moveaxis(_diag_embed(X, 1), (1, 2), (0, 2))),
    ("diag_embed_swapped_dims", lambda: braze.diag_embed(T(X), 1, 2, 0),
     lambda: np.moveaxis(_diag_embed(X, 1), (1, 2), (2, 0))),
    ("block_diag", lambda: braze.block_diag(T(X), T(V), T(np.float64(5.0)), T(X[:2, :1])),
     lambda: _block_diag_reference()),
    ("block_diag_promotes", lambda: braze.block_diag(T(INTS[:, :2]), T(np.array([[INF]]))),
     lambda: np.array([[1, 4, 0], [2, 3, 0], [0, 0, INF]])),
    ("block_diag_empty_blocks", lambda: braze.block_diag(T(np.zeros((0, 2))), T(np.ones((2, 0)))),
     lambda: np.zeros((2, 2))),
    ("block_diag_none", lambda: braze.block_diag(), lambda: np.zeros((1, 0), np.float32)),
    ("trace", lambda: T(X).trace(), lambda: np.trace(X)),
    ("trace_int32", lambda: T(INTS.astype(np.int32)).trace(), lambda: np.int64(np.trace(INTS))),
    ("trace_empty", lambda: T(np.zeros((0, 3))).trace(), lambda: np.float64(0)),
    ("diff", lambda: braze.diff(T(X)), lambda: np.diff(X)),
    ("diff_order_dim", lambda: T(B3).diff(2, 1), lambda: np.diff(B3, 2, 1)),
    ("diff_prepend_append", lambda: braze.diff(T(X), dim=0, prepend=T(X[:1]), append=T(X)),
     lambda: np.diff(X, axis=0, prepend=X[:1], append=X)),
    ("diff_promotes_prepend", lambda: braze.diff(T(INTS[0]), prepend=T(np.array([0.5]))),
     lambda: np.diff(INTS[0], prepend=0.5)),
    ("diff_int", lambda: braze.diff(T(INTS), n=3), lambda: np.diff(INTS, 3)),
    ("diff_uint8_wraps", lambda: braze.diff(T(np.array([5, 2, 9], np.uint8))),
     lambda: np.array([253, 7], np.uint8)),
    ("diff_bool", lambda: braze.diff(T(np.array([True, False, False, True]))), lambda: np.array([True, False, True])),
    ("diff_past_length", lambda: braze.diff(T(V), n=7), lambda: np.zeros(0)),
    ("diff_order_zero", lambda: braze.diff(T(V), n=0), lambda: V),
    ("take", lambda: braze.take(T(X), T(np.array([[0, 5], [-1, 11]]))), lambda: X.reshape(-1)[[[0, 5], [-1, 11]]]),
    ("take_list_index", lambda: T(INTS).take([7, -8]), lambda: INTS.reshape(-1)[[7, 0]]),
    ("take_scalar_index", lambda: braze.take(T(X), T(np.int64(6))), lambda: X.reshape(-1)[6]),
    ("take_from_scalar", lambda: braze.take(T(np.float64(2.0)), T(np.array([0, 0]))), lambda: np.array([2.0, 2.0])),
    ("take_along_dim", lambda: braze.take_along_dim(T(X), T(np.argsort(X, 1)), 1),
     lambda: np.sort(X, 1)),
    ("take_along_dim_broadcast", lambda: T(X).take_along_dim(T(np.array([[2], [-1]]).T), dim=1),
     lambda: np.take_along_axis(X, np.array([[2, 3]]).repeat(3, 0), 1)),
    ("take_along_dim_broadcast_input", lambda: braze.take_along_dim(T(X[:1]), T(np.array([[0], [1], [3]])), 1),
     lambda: X[0][[[0], [1], [3]]]),
    ("take_along_dim_flat", lambda: braze.take_along_dim(T(X), T(np.array([11, 0, -2]))),
     lambda: X.reshape(-1)[[11, 0, 10]]),
    ("ravel", lambda: T(X).T.ravel(), lambda: X.T.ravel()),
    ("ravel_scalar", lambda: braze.ravel(T(np.float64(1.0))), lambda: np.array([1.0])),
    ("rot90", lambda: braze.rot90(T(X)), lambda: np.rot90(X)),
    ("rot90_turns", lambda: braze.stack([T(X).rot90(2), braze.rot90(T(X), 6), braze.rot90(T(X), -2)]),
     lambda: np.stack([np.rot90(X, 2)] * 3)),
    ("rot90_three", lambda: braze.rot90(T(X), 3), lambda: np.rot90(X, 3)),
    ("rot90_back", lambda: T(X).rot90(-1, (1, 0)), lambda: np.rot90(X, -1, (1, 0))),
    ("rot90_none", lambda: braze.rot90(T(X), 4), lambda: X),
    ("rot90_dims", lambda: braze.rot90(T(B3), 1, [0, -1]), lambda: np.rot90(B3, 1, (0, 2))),
    ("vander", lambda: braze.vander(T(V)), lambda: np.vander(V)),
    ("vander_columns_increasing", lambda: braze.vander(T(V), 5, True), lambda: np.vander(V, 5, True)),
    ("vander_int", lambda: braze.vander(T(INTS[0].astype(np.int32)), N=3), lambda: np.vander(INTS[0], 3)),
    ("vander_bool", lambda: braze.vander(T(V > 0)), lambda: np.vander((V > 0).astype(np.int64))),
    ("vander_one_column", lambda: braze.vander(T(V), 1), lambda: np.ones((3, 1))),
    ("vander_no_columns", lambda: braze.vander(T(V), N=0), lambda: np.zeros((3, 0))),
    ("tril_indices", lambda: braze.tril_indices(4, 3), lambda: np.stack(np.tril_indices(4, 0, 3))),
    ("tril_indices_offset", lambda: braze.tril_indices(3, 4, 1), lambda: np.stack(np.tril_indices(3, 1, 4))),
    ("triu_indices", lambda: braze.triu_indices(3, 4, -1), lambda: np.stack(np.triu_indices(3, -1, 4))),
    ("triu_indices_int32", lambda: braze.triu_indices(3, 3, dtype=braze.int32),
     lambda: np.stack(np.triu_indices(3)).astype(np.int32)),
    ("tril_indices_empty", lambda: braze.tril_indices(0, 4), lambda: np.zeros((2, 0), np.int64)),
    ("masked_select", lambda: braze.masked_select(T(X), T(X > 0)), lambda: X[X > 0]),
    ("masked_select_broadcast", lambda: T(X).masked_select(T(np.array([True, False, False, True]))),
     lambda: X[:, [0, 3]].reshape(-1)),
    ("masked_select_broadcast_both", lambda: braze.masked_select(T(X[0]), T(np.array([[True], [False], [True]]))),
     lambda: np.concatenate([X[0], X[0]])),
    ("masked_select_scalar", lambda: braze.masked_select(T(np.float64(3.0)), T(np.bool_(True))),
     lambda: np.array([3.0])),
]


def _block_diag_reference() -> np.ndarray:
    out = np.zeros((3 + 1 + 1 + 2, 4 + 3 + 1 + 1))
    out[:3, :4], out[3, 4:7], out[4, 7], out[5:, 8:] = X, V, 5.0, X[:2, :1]
    return out


@pytest.mark.parametrize("name,got,want", CASES, ids=[c[0] for c in CASES])
def test_arrangement_matches_numpy(name: str, got: Callable[[], Any], want: Callable[[], Any]) -> None:
    result, expected = got(), np.asarray(want())
    assert tuple(result.shape) == expected.shape and result.numpy().dtype == expected.dtype
    np.testing.assert_array_equal(result.numpy(), expected)


def test_atleast_nd_shapes_and_forms() -> None:
    scalar, row, matrix, cube = (T(np.zeros(s)) for s in ((), (3,), (2, 3), (2, 3, 4)))
    assert braze.atleast_1d(scalar).shape == (1,) and braze.atleast_1d(row) is not row
    assert [t.shape for t in braze.atleast_2d(scalar, row, matrix)] == [(1, 1), (1, 3), (2, 3)]
    assert [t.shape for t in braze.atleast_3d([scalar, row, matrix, cube])] == [(1, 1, 1), (1, 3, 1), (2, 3, 1),
                                                                                 (2, 3, 4)]
    assert braze.atleast_3d((row,))[0].shape == (1, 3, 1) and braze.atleast_1d() == ()
    assert braze.atleast_2d(T(INTS[0])).dtype == braze.int64


def test_meshgrid_warns_like_torch_without_indexing() -> None:
    with pytest.warns(UserWarning, match="indexing"):
        grid = braze.meshgrid(T(V), T(X[0]))
    np.testing.assert_array_equal(braze.stack(grid).numpy(), _meshgrid(V, X[0], indexing="ij"))


@pytest.mark.parametrize("call,error,match", [
    (lambda: braze.meshgrid(T(X), indexing="ij"), braze.ShapeError, "0-D or 1-D"),
    (lambda: braze.meshgrid(T(V), T(INTS[0]), indexing="ij"), braze.DTypeError, "one dtype"),
    (lambda: braze.meshgrid(T(V), indexing="yx"), ValueError, "'ij' or 'xy'"),
    (lambda: braze.meshgrid(indexing="ij"), ValueError, "at least one"),
    (lambda: braze.cartesian_prod(T(np.float64(1.0)), T(V)), braze.ShapeError, "1-D tensors"),
    (lambda: braze.diag(T(np.float64(1.0))), braze.ShapeError, "1-D or 2-D"),
    (lambda: braze.diag(T(B3)), braze.ShapeError, "1-D or 2-D"),
    (lambda: braze.diag_embed(T(X), 0, 1, -2), braze.ShapeError, "must differ"),
    (lambda: braze.diag_embed(T(np.float64(1.0))), IndexError, "out of range"),
    (lambda: braze.block_diag(T(B3)), braze.ShapeError, "at most 2 dims"),
    (lambda: T(B3).trace(), braze.ShapeError, "expects a matrix"),
    (lambda: T(X > 0).trace(), braze.DTypeError, "bool"),
    (lambda: braze.diff(T(np.float64(1.0))), braze.ShapeError, "at least one dimension"),
    (lambda: braze.diff(T(V), n=-1), ValueError, "non-negative"),
    (lambda: braze.diff(T(X), prepend=T(X[0])), braze.ShapeError, "the input's 2 dims"),
    (lambda: braze.take(T(X), T(np.array([12]))), braze.IndexRangeError, "out of range"),
    (lambda: braze.take(T(X), T(np.array([1.0]))), IndexError, "integer"),
    (lambda: braze.take_along_dim(T(X), T(np.array([1, 0])), 1), braze.ShapeError, "same number of dims"),
    (lambda: braze.take_along_dim(T(X), T(np.array([[1.0]])), 1), braze.DTypeError, "integer tensor"),
    (lambda: braze.take_along_dim(T(X), T(np.zeros((2, 1), np.int64)), 1), braze.ShapeError, "do not broadcast"),
    (lambda: braze.rot90(T(V)), braze.ShapeError, "at least 2 dims"),
    (lambda: braze.rot90(T(X), 1, (0,)), braze.ShapeError, "name two dims"),
    (lambda: braze.rot90(T(X), 1, (1, -1)), braze.ShapeError, "must differ"),
    (lambda: braze.vander(T(X)), braze.ShapeError, "1-D tensor"),
    (lambda: braze.vander(T(V), -1), ValueError, "non-negative"),
    (lambda: braze.tril_indices(3, 3, dtype=braze.float32), braze.DTypeError, "integer dtype"),
    (lambda: braze.masked_select(T(X), T(np.ones((3, 4), np.int64))), braze.DTypeError, "bool tensor"),
    (lambda: braze.masked_select(T(X), T(np.ones(3, bool))), braze.ShapeError, "do not broadcast"),
])
def test_refusals_name_the_problem(call: Callable[[], Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        call()


def test_masked_select_refuses_a_traced_mask() -> None:
    with pytest.raises(braze.TraceError, match=r"test_arrangement.py:\d+: masked_select.*shape depends on the values"):
        braze.trace(lambda x: braze.masked_select(x, x > 0), T(X))


WEIGHTS = R.standard_normal(128)  # a fixed projection to a scalar, cut to each result's size


def _projected(out: braze.Tensor) -> braze.Tensor:
    return (out.reshape(-1) * T(WEIGHTS[:out.numel()])).sum()


@pytest.mark.parametrize("fn,arrays", [
    (lambda x: _projected(braze.tile(x, (2, 1, 2))), (X,)),
    (lambda v, x: _projected(braze.diag(v, 1)) + _projected(braze.diag(x, -1)) + x.trace(), (V, X)),
    (lambda x: _projected(braze.diag_embed(x, -1, 0, 2)), (X,)),
    (lambda x, v: _projected(braze.block_diag(x, v, v[0])), (X, V)),
    (lambda x, p: _projected(braze.diff(x, 2, dim=1, prepend=p)), (X, X[:, :1])),
    (lambda x: _projected(braze.take(x, T([[0, 5], [-1, 5]]))) + _projected(braze.take_along_dim(x, T([[2, 0]]), 1)),
     (X,)),
    (lambda x: _projected(braze.rot90(x)) + _projected(x.rot90(-1)) + _projected(braze.cartesian_prod(x[0], x[1, :2])),
     (X,)),
    (lambda v: _projected(braze.vander(v, 4)), (V,)),
    (lambda x: _projected(braze.masked_select(x, T(X > 0))), (X,)),
])
def test_gradients_match_finite_differences(fn: Callable[..., braze.Tensor], arrays: tuple[np.ndarray, ...]) -> None:
    check_gradients(fn, *arrays)


TORCH_CASES: list[tuple[str, Callable[..., Any], tuple[np.ndarray, ...]]] = [
    ("tile", lambda m, x: (m.tile(x, (2,)), x.tile(2, 1, 3), m.tile(x, dims=(1, 2, 1, 1))), (X,)),
    ("diag", lambda m, v, x: (m.diag(v), m.diag(v, 2), v.diag(-1), m.diag(x), x.diag(1), m.diag(x, -1),
                              m.diag_embed(x), x.diag_embed(1, 0, 2), m.diag_embed(x, -2, 2, 0)), (V, X)),
    ("trace_diff", lambda m, x, p: (x.trace(), m.diff(x), x.diff(2, 0), m.diff(x, dim=1, prepend=p, append=x[:, :2]),
                                    m.diff(x, n=5)), (X, X[:, :1])),
    ("grids", lambda m, a, b, c: (*m.meshgrid(a, b, indexing="ij"), *m.meshgrid([a, b, c], indexing="xy"),
                                  m.cartesian_prod(a, b, c), m.block_diag(a, b.reshape(1, 2), c[0], c.reshape(2, 1))),
     (V, X[0, :2], X[1, :2])),
    ("take", lambda m, x: (m.take(x, m.tensor([[0, 5], [-1, 3]])), x.take(m.tensor(2)),
                           m.take_along_dim(x, m.tensor([[0], [2], [1]]), 1),
                           x.take_along_dim(m.tensor([[1, -1, 0, 2]]), dim=0), m.take_along_dim(x, m.tensor([5, 0])),
                           x.ravel(), m.ravel(x.T)), (X,)),
    ("rot90", lambda m, x: (m.rot90(x), x.rot90(2), x.rot90(-1, (1, 0)), m.rot90(x, 3, [0, -1]), m.rot90(x, 4)),
     (X,)),
    ("vander_values", lambda m, v: (m.vander(v).detach(), m.vander(v, 2, True).detach(), m.vander(v, N=5).detach(),
                                    m.vander(m.tensor([1, 2, 3]))), (V,)),
    ("atleast", lambda m, x, s: (m.atleast_1d(s), *m.atleast_2d(x[0], s), *m.atleast_3d([x, x[0], s])),
     (X, np.array(1.5))),
    ("triangle_indices", lambda m: (m.tril_indices(4, 3, 1), m.triu_indices(3, 5, -1)), ()),
    ("masked_select", lambda m, x: (m.masked_select(x, x > 0), x.masked_select(m.tensor([True, False, True, True])),
                                    m.masked_select(x[0], m.tensor([[True], [False]]))), (X,)),
    ("keyword_arguments", lambda m, x, p: (
        m.tile(input=x, dims=(2, 1)), m.diag(input=x[0], diagonal=1), m.diag_embed(input=x, offset=-1, dim1=0, dim2=2),
        m.diff(input=x, n=2, dim=0, prepend=p, append=p), m.take(input=x, index=m.tensor([1, -2])),
        m.take_along_dim(input=x, indices=m.tensor([[1], [0], [3]]), dim=1), m.ravel(input=x),
        m.rot90(input=x, k=3, dims=(1, 0)), m.vander(x=x[0], N=3, increasing=True).detach(),
        m.tril_indices(row=3, col=4, offset=1, dtype=m.int32), m.triu_indices(row=3, col=4, offset=-1),
        m.masked_select(input=x, mask=x > 0), *m.meshgrid(x[0], x[1], indexing="xy")), (X, X[:1])),
]


@pytest.mark.parametrize("name,fn,arrays", TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
def test_matches_torch(name: str, fn: Callable[..., Any], arrays: tuple[np.ndarray, ...]) -> None:
    pytest.importorskip("torch")
    from tests.frontend import test_torch_differential as reference
    reference.test_matches_torch(name, lambda m, F, *leaves: fn(m, *leaves), arrays)


def test_arrangements_compile_in_float32() -> None:
    x = T(R.standard_normal((4, 6)).astype(np.float32))

    def f(t):
        v = t[0, :3]
        return (braze.tile(t, (2,)), braze.diag(v, -1), braze.diag(t, 1), t.diag_embed(), t.trace(),
                braze.diff(t, 2, 0), braze.cartesian_prod(v, v), braze.block_diag(t, v),
                braze.take(t, T([[0, 5], [-1, 3]])), braze.take_along_dim(t, T([[0], [2], [1], [5]]), 1),
                braze.rot90(t), braze.vander(v), braze.meshgrid(v, t[1], indexing="xy")[1], t.ravel(),
                braze.masked_select(t, T(np.eye(4, 6, dtype=bool))))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled = braze.compile(f, x)
    for k, (got, want) in enumerate(zip(compiled(x), f(x))):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6, err_msg=f"output {k}")
