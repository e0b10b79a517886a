"""Every tensor function and Tensor method gives numpy's result (values, shape and dtype)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import braze

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4))
Y = RNG.standard_normal((3, 4))
ROW = RNG.standard_normal((4,))
POS = RNG.uniform(0.5, 2.0, (3, 4))
M = RNG.standard_normal((4, 5))
B3 = RNG.standard_normal((2, 3, 4))
INTS = np.array([[3, -1, 4], [1, 5, -9]], dtype=np.int64)


def _erf(a: np.ndarray) -> np.ndarray:
    import math
    return np.vectorize(math.erf)(a)


def _softmax(a: np.ndarray, axis: int) -> np.ndarray:
    z = np.exp(a - a.max(axis=axis, keepdims=True))
    return z / z.sum(axis=axis, keepdims=True)


T = braze.tensor
# (id, braze expression, numpy expression)
CASES: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
    ("add", lambda: braze.add(T(X), T(Y)), lambda: X + Y),
    ("add_alpha", lambda: braze.add(T(X), T(Y), alpha=2), lambda: X + 2 * Y),
    ("add_broadcast", lambda: T(X) + T(ROW), lambda: X + ROW),
    ("radd", lambda: 1.5 + T(X), lambda: 1.5 + X),
    ("sub", lambda: braze.sub(T(X), T(Y)), lambda: X - Y),
    ("rsub", lambda: 2.0 - T(X), lambda: 2.0 - X),
    ("mul", lambda: braze.mul(T(X), T(Y)), lambda: X * Y),
    ("rmul", lambda: 3 * T(X), lambda: 3 * X),
    ("div", lambda: braze.div(T(X), T(POS)), lambda: X / POS),
    ("rdiv", lambda: 1.0 / T(POS), lambda: 1.0 / POS),
    ("pow", lambda: braze.pow(T(POS), T(Y)), lambda: POS ** Y),
    ("pow_scalar", lambda: T(X) ** 2, lambda: X ** 2),
    ("rpow", lambda: 2.0 ** T(X), lambda: 2.0 ** X),
    ("neg", lambda: -T(X), lambda: -X),
    ("abs", lambda: abs(T(X)), lambda: np.abs(X)),
    ("sign", lambda: braze.sign(T(X)), lambda: np.sign(X)),
    ("square", lambda: braze.square(T(X)), lambda: X * X),
    ("exp", lambda: braze.exp(T(X)), lambda: np.exp(X)),
    ("log", lambda: braze.log(T(POS)), lambda: np.log(POS)),
    ("sqrt", lambda: braze.sqrt(T(POS)), lambda: np.sqrt(POS)),
    ("rsqrt", lambda: braze.rsqrt(T(POS)), lambda: 1 / np.sqrt(POS)),
    ("tanh", lambda: braze.tanh(T(X)), lambda: np.tanh(X)),
    ("sigmoid", lambda: braze.sigmoid(T(X)), lambda: 1 / (1 + np.exp(-X))),
    ("erf", lambda: braze.erf(T(X)), lambda: _erf(X)),
    ("relu", lambda: braze.relu(T(X)), lambda: np.maximum(X, 0)),
    ("clamp", lambda: braze.clamp(T(X), -0.5, 0.5), lambda: np.clip(X, -0.5, 0.5)),
    ("clamp_min", lambda: T(X).clamp(min=0.1), lambda: np.maximum(X, 0.1)),
    ("clamp_tensor", lambda: braze.clamp(T(X), T(Y)), lambda: np.maximum(X, Y)),
    ("maximum", lambda: braze.maximum(T(X), T(Y)), lambda: np.maximum(X, Y)),
    ("minimum", lambda: braze.minimum(T(X), T(Y)), lambda: np.minimum(X, Y)),
    ("eq", lambda: T(INTS) == 1, lambda: INTS == 1),
    ("ne", lambda: T(INTS) != 1, lambda: INTS != 1),
    ("lt", lambda: T(X) < T(Y), lambda: X < Y),
    ("le", lambda: T(X) <= 0, lambda: X <= 0),
    ("gt", lambda: braze.gt(T(X), T(Y)), lambda: X > Y),
    ("ge", lambda: braze.ge(T(X), 0.0), lambda: X >= 0),
    ("logical_not", lambda: ~(T(X) > 0), lambda: ~(X > 0)),
    ("logical_and", lambda: (T(X) > 0) & (T(Y) > 0), lambda: (X > 0) & (Y > 0)),
    ("logical_or", lambda: (T(X) > 0) | (T(Y) > 0), lambda: (X > 0) | (Y > 0)),
    ("where", lambda: braze.where(T(X) > 0, T(X), T(Y)), lambda: np.where(X > 0, X, Y)),
    ("where_scalar", lambda: braze.where(T(X) > 0, T(X), 0.0), lambda: np.where(X > 0, X, 0.0)),
    ("method_where", lambda: T(X).where(T(X) > 0, T(Y)), lambda: np.where(X > 0, X, Y)),
    ("masked_fill", lambda: T(X).masked_fill(T(X) > 0, -1.0), lambda: np.where(X > 0, -1.0, X)),
    ("sum_all", lambda: braze.sum(T(X)), lambda: X.sum()),
    ("sum_dim", lambda: T(B3).sum(dim=(0, 2), keepdim=True), lambda: B3.sum(axis=(0, 2), keepdims=True)),
    ("sum_int", lambda: T(INTS).sum(1), lambda: INTS.sum(1)),
    ("mean", lambda: T(B3).mean(-1), lambda: B3.mean(-1)),
    ("max_all", lambda: T(X).max(), lambda: X.max()),
    ("max_dim_values", lambda: T(X).max(1).values, lambda: X.max(1)),
    ("max_dim_indices", lambda: T(X).max(dim=1, keepdim=True).indices, lambda: X.argmax(1)[:, None]),
    ("max_other", lambda: T(X).max(T(Y)), lambda: np.maximum(X, Y)),
    ("min_all", lambda: braze.min(T(X)), lambda: X.min()),
    ("min_dim", lambda: braze.min(T(X), 0)[0], lambda: X.min(0)),
    ("amax", lambda: braze.amax(T(B3), (0, 1)), lambda: B3.max((0, 1))),
    ("amin", lambda: T(B3).amin(), lambda: B3.min()),
    ("argmax", lambda: T(X).argmax(), lambda: X.argmax()),
    ("argmax_dim", lambda: braze.argmax(T(X), 1), lambda: X.argmax(1)),
    ("argmin", lambda: T(X).argmin(0, keepdim=True), lambda: X.argmin(0)[None]),
    ("var", lambda: T(X).var(1), lambda: X.var(1, ddof=1)),
    ("var_biased", lambda: braze.var(T(X), unbiased=False), lambda: X.var()),
    ("std", lambda: T(B3).std(dim=(1, 2), keepdim=True), lambda: B3.std((1, 2), ddof=1, keepdims=True)),
    ("logsumexp", lambda: braze.logsumexp(T(X), 1), lambda: np.log(np.exp(X).sum(1))),
    ("softmax", lambda: braze.softmax(T(X), 1), lambda: _softmax(X, 1)),
    ("log_softmax", lambda: T(X).log_softmax(0), lambda: np.log(_softmax(X, 0))),
    ("matmul", lambda: braze.matmul(T(X), T(M)), lambda: X @ M),
    ("matmul_op", lambda: T(B3) @ T(M), lambda: B3 @ M),
    ("matmul_vec", lambda: T(X) @ T(ROW), lambda: X @ ROW),
    ("reshape", lambda: braze.reshape(T(B3), (4, -1)), lambda: B3.reshape(4, 6)),
    ("view", lambda: T(B3).view(-1, 2), lambda: B3.reshape(-1, 2)),
    ("view_as", lambda: T(X).view_as(T(INTS.reshape(-1)[:4].repeat(3))), lambda: X.reshape(12)),
    ("permute", lambda: T(B3).permute(2, 0, 1), lambda: B3.transpose(2, 0, 1)),
    ("transpose", lambda: braze.transpose(T(B3), 0, -1), lambda: B3.swapaxes(0, 2)),
    ("T", lambda: T(X).T, lambda: X.T),
    ("mT", lambda: T(B3).mT, lambda: B3.swapaxes(-1, -2)),
    ("t", lambda: T(X).t(), lambda: X.T),
    ("flatten", lambda: T(B3).flatten(), lambda: B3.reshape(-1)),
    ("flatten_range", lambda: braze.flatten(T(B3), 1), lambda: B3.reshape(2, 12)),
    ("unsqueeze", lambda: T(X).unsqueeze(-1), lambda: X[:, :, None]),
    ("squeeze", lambda: T(X[None, :, None]).squeeze(), lambda: X),
    ("squeeze_dim", lambda: T(X[None]).squeeze(0), lambda: X),
    ("squeeze_wide_dim_is_noop", lambda: T(X).squeeze(0), lambda: X),
    ("expand", lambda: T(ROW).expand(3, -1), lambda: np.broadcast_to(ROW, (3, 4))),
    ("expand_as", lambda: T(ROW[None]).expand_as(T(X)), lambda: np.broadcast_to(ROW, (3, 4))),
    ("broadcast_to", lambda: braze.broadcast_to(T(ROW), (2, 3, 4)), lambda: np.broadcast_to(ROW, (2, 3, 4))),
    ("cat", lambda: braze.cat([T(X), T(Y)], dim=1), lambda: np.concatenate([X, Y], 1)),
    ("cat_promotes", lambda: braze.cat([T(INTS), T(X[:2, :3])]), lambda: np.concatenate([INTS, X[:2, :3]])),
    ("stack", lambda: braze.stack([T(X), T(Y)], dim=-1), lambda: np.stack([X, Y], -1)),
    ("hstack", lambda: braze.hstack([T(X), T(Y)]), lambda: np.hstack([X, Y])),
    ("hstack_vectors", lambda: braze.hstack([T(ROW), T(X[0])]), lambda: np.hstack([ROW, X[0]])),
    ("vstack", lambda: braze.vstack([T(ROW), T(X)]), lambda: np.vstack([ROW, X])),
    ("row_stack", lambda: braze.row_stack((T(X), T(Y))), lambda: np.vstack([X, Y])),
    ("dstack", lambda: braze.dstack([T(X), T(Y)]), lambda: np.dstack([X, Y])),
    ("narrow", lambda: T(X).narrow(1, 1, 2), lambda: X[:, 1:3]),
    ("diagonal", lambda: T(X).diagonal(1) + braze.diagonal(T(X), -1, 1, 0)[:1].sum(), lambda: np.diagonal(X, 1)
     + np.diagonal(X, -1, 1, 0)[:1].sum()),
    ("split", lambda: braze.split(T(X), 3, dim=1)[1], lambda: X[:, 3:]),
    ("split_sizes", lambda: T(X).split([1, 2])[1], lambda: X[1:]),
    ("chunk", lambda: T(X).chunk(2, dim=1)[0], lambda: X[:, :2]),
    ("unbind", lambda: T(X).unbind(1)[2], lambda: X[:, 2]),
    ("gather", lambda: braze.gather(T(X), 1, T(np.array([[0, 3], [1, 1], [2, 0]]))),
     lambda: np.take_along_axis(X, np.array([[0, 3], [1, 1], [2, 0]]), 1)),
    ("index_select", lambda: braze.index_select(T(X), 1, T([3, 0])), lambda: X[:, [3, 0]]),
    ("as_tensor", lambda: braze.as_tensor(X), lambda: X),
    ("true_divide", lambda: braze.true_divide(T(X), 2.0), lambda: X / 2.0),
    ("divide", lambda: braze.divide(T(INTS), T(INTS) + 10), lambda: (INTS / (INTS + 10)).astype(np.float32)),
    ("multiply", lambda: braze.multiply(T(X), T(Y)), lambda: X * Y),
    ("subtract", lambda: braze.subtract(T(X), 1), lambda: X - 1),
    ("negative", lambda: braze.negative(T(INTS)), lambda: -INTS),
    ("clip", lambda: braze.clip(T(X), max=0.0), lambda: np.minimum(X, 0.0)),
    ("concat", lambda: braze.concat([T(X), T(Y)], 0), lambda: np.concatenate([X, Y])),
    ("concatenate", lambda: braze.concatenate((T(X), T(Y)), dim=-1), lambda: np.concatenate([X, Y], -1)),
    ("swapaxes", lambda: braze.swapaxes(T(B3), 1, 2), lambda: B3.swapaxes(1, 2)),
    ("permute_function", lambda: braze.permute(T(B3), (1, 2, 0)), lambda: B3.transpose(1, 2, 0)),
    ("t_function", lambda: braze.t(T(ROW)), lambda: ROW),
    ("squeeze_function", lambda: braze.squeeze(T(X[:, None]), 1), lambda: X),
    ("unsqueeze_function", lambda: braze.unsqueeze(T(X), 0), lambda: X[None]),
    ("narrow_function", lambda: braze.narrow(T(X), 0, -2, 2), lambda: X[1:]),
    ("chunk_function", lambda: braze.chunk(T(ROW), 3)[1], lambda: ROW[2:4]),
    ("unbind_function", lambda: braze.unbind(T(X))[2], lambda: X[2]),
    ("div_floor", lambda: braze.div(T(INTS), 2, rounding_mode="floor"), lambda: INTS // 2),
    ("div_trunc", lambda: braze.div(T(X), 0.3, rounding_mode="trunc"), lambda: np.trunc(X / 0.3)),
    ("floor_divide", lambda: T(X) // 0.7 + braze.floor_divide(T(X), T(Y)), lambda: X // 0.7 + np.floor(X / Y)),
    ("sort", lambda: braze.sort(T(X), dim=0).values, lambda: np.sort(X, axis=0)),
    ("sort_descending_indices", lambda: T(X).sort(descending=True).indices, lambda: np.argsort(-X, axis=-1)),
    ("argsort", lambda: braze.argsort(T(INTS), dim=1), lambda: np.argsort(INTS, axis=1, kind="stable")),
    ("topk", lambda: braze.topk(T(X), 2).values, lambda: -np.sort(-X, axis=-1)[:, :2]),
    ("topk_smallest_indices", lambda: T(X).topk(1, dim=0, largest=False).indices, lambda: np.argmin(X, 0)[None]),
    ("cumsum", lambda: braze.cumsum(T(X), 1), lambda: np.cumsum(X, 1)),
    ("cumsum_bool", lambda: T(X > 0).cumsum(0), lambda: np.cumsum(X > 0, 0)),
    ("cumprod", lambda: braze.cumprod(T(X), 1), lambda: np.cumprod(X, 1)),
    ("cumprod_int", lambda: T(INTS).cumprod(dim=0), lambda: np.cumprod(INTS, 0)),
    ("cummax", lambda: braze.cummax(T(X), 1).values, lambda: np.maximum.accumulate(X, 1)),
    ("clone", lambda: braze.clone(T(X), memory_format=braze.contiguous_format), lambda: X),
    ("cummin", lambda: braze.cummin(T(X), 0).values, lambda: np.minimum.accumulate(X, 0)),
    ("flip", lambda: braze.flip(T(B3), (0, 2)), lambda: B3[::-1, :, ::-1]),
    ("flip_method", lambda: T(X).flip(1), lambda: X[:, ::-1]),
    ("roll", lambda: braze.roll(T(X), (1, -1), (0, 1)), lambda: np.roll(X, (1, -1), (0, 1))),
    ("roll_flat", lambda: T(X).roll(5), lambda: np.roll(X, 5)),
    ("repeat_method", lambda: T(ROW).repeat(2, 2), lambda: np.tile(ROW, (2, 2))),
    ("repeat_interleave", lambda: braze.repeat_interleave(T(X), 2, dim=1), lambda: np.repeat(X, 2, 1)),
    ("repeat_interleave_counts", lambda: T(X).repeat_interleave(T([0, 2, 1]), dim=0), lambda: X[[1, 1, 2]]),
    ("repeat_interleave_flat", lambda: T(INTS).repeat_interleave(2), lambda: np.repeat(INTS, 2)),
    ("movedim", lambda: braze.movedim(T(B3), 0, -1), lambda: np.moveaxis(B3, 0, -1)),
    ("moveaxis", lambda: braze.moveaxis(T(B3), (0, 1), (2, 0)), lambda: np.moveaxis(B3, (0, 1), (2, 0))),
    ("unflatten", lambda: braze.unflatten(T(B3), 2, (2, -1)), lambda: B3.reshape(2, 3, 2, 2)),
    ("tril", lambda: braze.tril(T(B3)), lambda: np.tril(B3)),
    ("tril_offset", lambda: T(X).tril(-1), lambda: np.tril(X, -1)),
    ("triu", lambda: braze.triu(T(X), 2), lambda: np.triu(X, 2)),
]


@pytest.mark.parametrize("name,got,want", CASES, ids=[c[0] for c in CASES])
def test_function_matches_numpy(name: str, got: Callable[[], Any], want: Callable[[], Any]) -> None:
    result, expected = got(), np.asarray(want())
    assert isinstance(result, braze.Tensor)
    assert result.shape == expected.shape
    assert result.numpy().dtype == expected.dtype
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_every_exported_function_has_a_case() -> None:
    from braze.frontend import functions
    ids = [c[0] for c in CASES]
    missing = [name for name in functions.__all__
               if name != "MinMax" and not any(i == name or i.startswith(name + "_") for i in ids)]
    assert not missing, f"no numpy comparison for {missing}"


def test_max_dim_returns_named_pair() -> None:
    values, indices = braze.max(T(X), dim=1)
    assert values.shape == (3,) and indices.dtype == braze.int64


def test_unary_float_functions_accept_int_tensors() -> None:
    assert braze.exp(T([0, 1])).dtype == braze.float32 and T([4]).sqrt().tolist() == [2.0]


def test_div_unknown_rounding_mode_names_the_supported_values() -> None:
    with pytest.raises(ValueError, match="div: rounding_mode='round' is not supported; supported values: None"):
        braze.div(T([3]), T([2]), rounding_mode="round")


def test_bitwise_operators_need_bool() -> None:
    with pytest.raises(TypeError, match="bool"):
        T([1, 2]) & T([1, 0])


def test_reshape_with_two_inferred_dims_fails() -> None:
    with pytest.raises(braze.ShapeError, match="-1"):
        T(X).reshape(-1, -1)


def test_cat_of_mismatched_shapes_raises_shape_error() -> None:
    with pytest.raises(braze.ShapeError, match="concat"):
        braze.cat([T(X), T(M)], dim=0)


@pytest.mark.parametrize("name", ["hstack", "vstack", "dstack"])
def test_stacking_nothing_raises_shape_error_naming_the_function(name: str) -> None:
    with pytest.raises(braze.ShapeError, match=f"{name}: expects a non-empty sequence of tensors"):
        getattr(braze, name)([])


def test_dim_out_of_range_raises_index_error() -> None:
    with pytest.raises(IndexError, match="out of range"):
        T(X).sum(dim=2)
