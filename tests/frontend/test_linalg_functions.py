"""The composed products (mm, mv, dot, vdot, inner, kron, cross, addmv, addr, addbmm, chain_matmul) and braze.linalg's
cross, vecdot, matmul, diagonal and multi_dot agree with numpy, refuse what torch refuses with clear errors, match
torch's values and gradients, differentiate like finite differences and compile."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import braze
from tests.frontend.test_gradients import check_gradients

T = braze.tensor
R = np.random.default_rng(5)
A = R.standard_normal((3, 4))
B = R.standard_normal((4, 2))
V = R.standard_normal(4)
W = R.standard_normal(4)
B3 = R.standard_normal((2, 3, 4))
P = R.standard_normal((5, 3))
Q = R.standard_normal((5, 3))
INTS = np.array([[1, 2], [3, -4]])
BATCH1, BATCH2 = R.standard_normal((2, 3, 5)), R.standard_normal((2, 5, 4))
WEIGHTS = R.standard_normal((5, 3))  # a fixed projection to a scalar


def _cross(a: np.ndarray, b: np.ndarray, axis: int) -> np.ndarray:
    return np.cross(a, b, axis=axis)


# (id, braze expression, numpy expression): values, shape and dtype must agree (float64 to 1e-12)
CASES: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
    ("mm", lambda: braze.mm(T(A), T(B)), lambda: A @ B),
    ("mm_method_int", lambda: T(INTS).mm(T(INTS)), lambda: INTS @ INTS),
    ("mm_empty_inner", lambda: braze.mm(T(np.zeros((2, 0))), T(np.zeros((0, 3)))), lambda: np.zeros((2, 3))),
    ("mv", lambda: braze.mv(T(A), T(V)), lambda: A @ V),
    ("mv_method", lambda: T(A).mv(T(W)), lambda: A @ W),
    ("dot", lambda: braze.dot(T(V), T(W)), lambda: V @ W),
    ("dot_int", lambda: T(INTS[0]).dot(T(INTS[1])), lambda: INTS[0] @ INTS[1]),
    ("dot_empty", lambda: braze.dot(T(np.zeros(0)), T(np.zeros(0))), lambda: np.float64(0)),
    ("vdot", lambda: braze.vdot(T(V), T(W)), lambda: np.vdot(V, W)),
    ("vdot_method", lambda: T(W).vdot(T(V)), lambda: np.vdot(W, V)),
    ("inner_vectors", lambda: braze.inner(T(V), T(W)), lambda: np.inner(V, W)),
    ("inner_batches", lambda: braze.inner(T(A), T(B3)), lambda: np.inner(A, B3)),
    ("inner_scalar", lambda: braze.inner(T(np.float64(2.5)), T(A)), lambda: 2.5 * A),
    ("inner_empty", lambda: braze.inner(T(np.zeros((2, 0))), T(np.zeros((3, 0)))), lambda: np.zeros((2, 3))),
    ("kron", lambda: braze.kron(T(A), T(B)), lambda: np.kron(A, B)),
    ("kron_ranks", lambda: T(V).kron(T(B3)), lambda: np.kron(V, B3)),
    ("kron_promotes", lambda: braze.kron(T(INTS), T(A)), lambda: np.kron(INTS, A)),
    ("kron_int", lambda: braze.kron(T(INTS), T(INTS)), lambda: np.kron(INTS, INTS)),
    ("kron_scalar", lambda: braze.kron(T(np.float64(2.0)), T(V)), lambda: 2.0 * V),
    ("cross", lambda: braze.cross(T(P), T(Q), dim=1), lambda: _cross(P, Q, 1)),
    ("cross_negative_dim_method", lambda: T(P.T.copy()).cross(T(Q.T.copy()), -2), lambda: _cross(P.T, Q.T, 0)),
    ("cross_broadcast", lambda: braze.cross(T(P), T(Q[:1]), 1), lambda: _cross(P, Q[:1], 1)),
    ("cross_int", lambda: braze.cross(T(np.array([[1, 2, 3]])), T(np.array([[4, 5, 6]])), 1),
     lambda: np.array([[-3, 6, -3]])),
    ("linalg_cross", lambda: braze.linalg.cross(T(P), T(Q)), lambda: _cross(P, Q, -1)),
    ("linalg_cross_dim", lambda: braze.linalg.cross(T(P.T.copy()), T(Q.T.copy()), dim=0), lambda: _cross(P.T, Q.T, 0)),
    ("addmv", lambda: braze.addmv(T(A[:, 0]), T(A), T(V), beta=0.5, alpha=2), lambda: 0.5 * A[:, 0] + 2 * (A @ V)),
    ("addmv_broadcast_method", lambda: T(A[:1, 0]).addmv(T(A), T(V)), lambda: A[:1, 0] + A @ V),
    ("addmv_beta0_ignores_nan", lambda: braze.addmv(T(np.full(3, np.nan)), T(A), T(V), beta=0), lambda: A @ V),
    ("addr", lambda: braze.addr(T(A), T(A[:, 1]), T(V), alpha=3), lambda: A + 3 * np.outer(A[:, 1], V)),
    ("addr_promotes", lambda: braze.addr(T(INTS), T(np.ones(2)), T(np.arange(2.0))),
     lambda: INTS + np.outer(np.ones(2), np.arange(2.0))),
    ("addr_method_broadcast", lambda: T(V).addr(T(A[:, 1]), T(W), beta=2), lambda: 2 * V + np.outer(A[:, 1], W)),
    ("addbmm", lambda: braze.addbmm(T(A), T(BATCH1), T(BATCH2), beta=2), lambda: 2 * A + BATCH1[0] @ BATCH2[0]
     + BATCH1[1] @ BATCH2[1]),
    ("addbmm_method", lambda: T(A[:1]).addbmm(T(np.ones((2, 3, 3))), T(B3), alpha=0.5),
     lambda: A[:1] + 0.5 * (np.ones((2, 3, 3)) @ B3).sum(0)),
    ("addbmm_empty_batch", lambda: braze.addbmm(T(A), T(np.zeros((0, 3, 2))), T(np.zeros((0, 2, 4)))), lambda: A),
    ("chain_matmul", lambda: braze.chain_matmul(T(A), T(B), T(B.T.copy())), lambda: A @ B @ B.T),
    ("chain_matmul_single", lambda: braze.chain_matmul(T(A)), lambda: A),
    ("multi_dot", lambda: braze.linalg.multi_dot([T(A), T(B), T(B.T.copy()), T(A.T.copy())]),
     lambda: np.linalg.multi_dot([A, B, B.T, A.T])),
    ("multi_dot_vectors", lambda: braze.linalg.multi_dot((T(A[:, 0]), T(A), T(V))), lambda: A[:, 0] @ A @ V),
    ("multi_dot_row", lambda: braze.linalg.multi_dot([T(A[:, 0]), T(A), T(B)]), lambda: A[:, 0] @ A @ B),
    ("multi_dot_two_vectors", lambda: braze.linalg.multi_dot([T(V), T(W)]), lambda: np.float64(V @ W)),
    ("vecdot", lambda: braze.linalg.vecdot(T(A), T(A[::-1].copy())), lambda: (A * A[::-1]).sum(-1)),
    ("vecdot_dim_broadcast", lambda: braze.linalg.vecdot(T(B3), T(A), dim=-2), lambda: (B3 * A).sum(-2)),
    ("linalg_matmul", lambda: braze.linalg.matmul(T(B3), T(B)), lambda: B3 @ B),
    ("linalg_diagonal", lambda: braze.linalg.diagonal(T(B3)), lambda: np.diagonal(B3, 0, -2, -1)),
    ("linalg_diagonal_offset", lambda: braze.linalg.diagonal(T(B3), offset=-1, dim1=0, dim2=2),
     lambda: np.diagonal(B3, -1, 0, 2)),
]


@pytest.mark.parametrize("name,got,want", CASES, ids=[c[0] for c in CASES])
def test_product_matches_numpy(name: str, got: Callable[[], Any], want: Callable[[], Any]) -> None:
    result, expected = got(), np.asarray(want())
    assert tuple(result.shape) == expected.shape and result.numpy().dtype == expected.dtype
    np.testing.assert_allclose(result.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_cross_without_dim_takes_the_first_dim_of_size_3_with_torchs_warning() -> None:
    with pytest.warns(UserWarning, match="without dim is deprecated"):
        out = braze.cross(T(P.T.copy()), T(Q.T.copy()))
    np.testing.assert_allclose(out.numpy(), _cross(P.T, Q.T, 0), rtol=1e-12)


def test_multi_dot_multiplies_in_the_cheapest_order() -> None:
    """A (10, 2) @ (2, 10) @ (10, 1) chain: A(BC) is cheaper; a different order rounds differently in float32."""
    a, b, c = (R.standard_normal(s).astype(np.float32) for s in ((10, 2), (2, 10), (10, 1)))
    got = braze.linalg.multi_dot([T(a), T(b), T(c)]).numpy()
    np.testing.assert_array_equal(got, (braze.tensor(a) @ (braze.tensor(b) @ braze.tensor(c))).numpy())


@pytest.mark.parametrize("call,error,match", [
    (lambda: braze.mm(T(A), T(A)), braze.ShapeError, r"mm: shapes \(3, 4\) and \(3, 4\) cannot be multiplied"),
    (lambda: braze.mm(T(V), T(B)), braze.ShapeError, "mm: expects two matrices"),
    (lambda: braze.mm(T(A), T(B.astype(np.float32))), braze.DTypeError, "mm: expects operands of one dtype"),
    (lambda: braze.mv(T(A), T(A[:, 0])), braze.ShapeError, "cannot be multiplied"),
    (lambda: braze.mv(T(A), T(A)), braze.ShapeError, "mv: expects a matrix and a vector"),
    (lambda: braze.dot(T(V), T(W[:3])), braze.ShapeError, "vectors of one length"),
    (lambda: braze.dot(T(np.float64(1)), T(np.float64(2))), braze.ShapeError, "dot: expects two vectors"),
    (lambda: braze.dot(T(V), T(W.astype(np.float32))), braze.DTypeError, "one dtype"),
    (lambda: braze.vdot(T(A), T(A)), braze.ShapeError, "vdot: expects two vectors"),
    (lambda: braze.inner(T(A), T(B)), braze.ShapeError, "inner: the last dims must match"),
    (lambda: braze.inner(T(V), T(V.astype(np.float32))), braze.DTypeError, "one dtype"),
    (lambda: braze.cross(T(P), T(Q[0]), 1), braze.ShapeError, "tensors of one rank"),
    (lambda: braze.cross(T(A), T(A), 1), braze.ShapeError, "must have size 3"),
    (lambda: braze.cross(T(P), T(Q[:2]), 1), braze.ShapeError, "do not broadcast"),
    (lambda: braze.cross(T(P), T(Q.astype(np.float32)), 1), braze.DTypeError, "one dtype"),
    (lambda: braze.linalg.cross(T(A), T(A)), braze.ShapeError, "must have size 3"),
    (lambda: braze.addmv(T(A), T(A), T(V)), braze.ShapeError, r"input of shape \(3, 4\) does not broadcast"),
    (lambda: braze.addmm(T(B3), T(A), T(B)), braze.ShapeError, "addmm: input of shape"),
    (lambda: braze.addmv(T(A[:, 0].astype(np.float32)), T(A), T(V)), braze.DTypeError, "addmv"),
    (lambda: braze.addr(T(A), T(A), T(V)), braze.ShapeError, "outer: expects two vectors"),
    (lambda: braze.addbmm(T(A), T(B3), T(B3)), braze.ShapeError, "cannot be multiplied"),
    (lambda: braze.addbmm(T(A), T(A), T(B)), braze.ShapeError, "expects two rank-3 tensors"),
    (lambda: braze.linalg.multi_dot([T(A)]), braze.ShapeError, "at least 2 tensors"),
    (lambda: braze.linalg.multi_dot([T(A), T(B3), T(B)]), braze.ShapeError, "tensor 1 has shape"),
    (lambda: braze.linalg.multi_dot([T(A), T(A)]), braze.ShapeError, "tensors 0 and 1"),
    (lambda: braze.chain_matmul(T(V), T(A)), braze.ShapeError, "expects matrices"),
    (lambda: braze.linalg.vecdot(T(INTS), T(INTS)), braze.DTypeError, "floating-point"),
    (lambda: braze.linalg.vecdot(T(A), T(A.astype(np.float32))), braze.DTypeError, "one dtype"),
])
def test_refusals_name_the_problem(call: Callable[[], Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        call()


def test_keyword_only_arguments_follow_torch_linalg() -> None:
    with pytest.raises(TypeError):
        braze.linalg.cross(T(P), T(Q), 0)  # type: ignore[misc]
    with pytest.raises(TypeError):
        braze.linalg.vecdot(T(A), T(A), 0)  # type: ignore[misc]
    assert set(braze.linalg.__all__) >= {"vector_norm", "matrix_norm", "norm", "cross", "vecdot", "matmul",
                                         "diagonal", "multi_dot"}


@pytest.mark.parametrize("fn,arrays", [
    (lambda a, b: (braze.cross(a, b, dim=1) * T(WEIGHTS)).sum(), (P, Q)),
    (lambda a, b, v: (braze.mm(a, b) * T(A @ B)).sum() + braze.mv(a, v).sum() + braze.dot(v, v * 2), (A, B, V)),
    (lambda a, b: (braze.kron(a, b) * T(np.kron(A, B))).sum(), (A, B)),
    (lambda a, b: (braze.inner(a, b) * T(np.inner(A, B3))).sum(), (A, B3)),
    (lambda c, b1, b2: (braze.addbmm(c, b1, b2, beta=0.5, alpha=2) * T(A)).sum(), (A, B3[:, :, :3], B3)),
    (lambda a, v, w: (braze.addr(a, a[:, 0], v, alpha=3) * T(A)).sum() + braze.addmv(a[:, 1], a, w).sum(), (A, V, W)),
    (lambda a, b: braze.linalg.multi_dot([a[:, 0], a, b, b.T]).sum() + braze.linalg.vecdot(a, a).sum(), (A, B)),
])
def test_gradients_match_finite_differences(fn: Callable[..., braze.Tensor], arrays: tuple[np.ndarray, ...]) -> None:
    check_gradients(fn, *arrays)


TORCH_CASES: list[tuple[str, Callable[..., Any], tuple[np.ndarray, ...]]] = [
    ("mm_mv_dot", lambda m, a, b, v, w: (m.mm(a, b), a.mm(b), m.mv(a, v), a.mv(w), m.dot(v, w), v.dot(w),
                                        m.vdot(v, w), w.vdot(v)), (A, B, V, W)),
    ("inner", lambda m, a, b, s: (m.inner(a, b), m.inner(a[0], b[0, 0]), m.inner(s, a)), (A, B3, np.array(1.5))),
    ("kron", lambda m, a, b, c: (m.kron(a, b), a.kron(c), m.kron(c, a[0])), (A, B, B3)),
    ("cross", lambda m, p, q: (m.cross(p, q, dim=1), p.cross(q[:1], 1), m.linalg.cross(p.T.unsqueeze(0),
                                                                                       q.T.unsqueeze(0), dim=1),
                               m.linalg.cross(p, q)), (P, Q)),
    ("scaled_sums", lambda m, c, a, v, u, w, b1, b2: (m.addmv(u, a, v, beta=0.5, alpha=2), u.addmv(a, v, beta=0),
                                                      m.addr(c, u, w, alpha=3), c.addr(u, w),
                                                      m.addbmm(c[:, :4], b1, b2, beta=2),
                                                      c[:1, :4].addbmm(b1, b2, alpha=0.5)),
     (R.standard_normal((3, 5)), R.standard_normal((3, 5)), R.standard_normal(5), R.standard_normal(3),
      R.standard_normal(5), R.standard_normal((4, 3, 2)), R.standard_normal((4, 2, 4)))),
    ("multi_dot", lambda m, a, b, c, d, v: (m.linalg.multi_dot([a, b, c, d]), m.linalg.multi_dot([v, b, c]),
                                            m.linalg.multi_dot([a, b, c]), m.linalg.multi_dot([v, v])),
     (R.standard_normal((2, 3)), R.standard_normal((3, 7)), R.standard_normal((7, 4)), R.standard_normal((4, 5)),
      R.standard_normal(3))),
    ("chain_matmul", lambda m, a, b, c: m.chain_matmul(a, b, c), (A, B, R.standard_normal((2, 6)))),
    ("vecdot_diagonal_matmul", lambda m, a, b, c: (m.linalg.vecdot(a, b), m.linalg.vecdot(c, b, dim=-1),
                                                   m.linalg.diagonal(c), m.linalg.diagonal(c, offset=1, dim1=0, dim2=2),
                                                   m.linalg.matmul(a, b.mT)), (A, A[::-1].copy(), B3)),
    ("keyword_arguments", lambda m, a, b, v, p, q: (
        m.mm(input=a, mat2=b), m.mv(input=a, vec=v), m.dot(input=v, tensor=v), m.vdot(input=v, other=v),
        m.inner(input=a, other=a), m.kron(input=a, other=b), m.cross(input=p, other=q, dim=1),
        m.addmv(input=a[:, 0], mat=a, vec=v, beta=2, alpha=0.5), m.addr(input=a, vec1=a[:, 1], vec2=v, beta=0.5),
        m.addbmm(input=a, batch1=p.reshape(1, 5, 3)[:, :3], batch2=b.reshape(1, 4, 2)[:, :3, :1].expand(1, 3, 4),
                 beta=0.5, alpha=2),
        m.linalg.cross(input=p, other=q, dim=1), m.linalg.vecdot(x=p, y=q, dim=0),
        m.linalg.diagonal(A=a, offset=1, dim1=1, dim2=0), m.linalg.matmul(input=a, other=b),
        m.linalg.multi_dot(tensors=[a, b, b.T])), (A, B, V, P, Q)),
]


@pytest.mark.parametrize("name,fn,arrays", TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
@pytest.mark.filterwarnings("ignore:torch.chain_matmul is deprecated")
def test_matches_torch(name: str, fn: Callable[..., Any], arrays: tuple[np.ndarray, ...]) -> None:
    pytest.importorskip("torch")
    from tests.frontend import test_torch_differential as reference
    reference.test_matches_torch(name, lambda m, F, *leaves: fn(m, *leaves), arrays)


def test_products_compile_in_float32() -> None:
    x = T(R.standard_normal((4, 6)).astype(np.float32))

    def f(t):
        v = t[0]
        return (braze.mm(t, t.T), braze.mv(t, v), braze.dot(v, t[1]), braze.inner(t, t[:2]), braze.kron(t[:2, :2], t),
                braze.cross(t[:, :3], t[:, 3:], dim=1), braze.linalg.cross(t[:, 3:], t[:, :3]),
                braze.addmv(t[:, 0], t, v, beta=0.5), braze.addr(t, t[:, 1], v, alpha=2),
                braze.addbmm(t[:2, :3], t[:, :4].reshape(2, 2, 4), t.reshape(2, 4, 3)),
                braze.linalg.multi_dot([v, t.T, t, t.T]), braze.linalg.vecdot(t, t), braze.linalg.diagonal(t))
    for k, (got, want) in enumerate(zip(braze.compile(f, x)(x), f(x))):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5, err_msg=f"output {k}")
