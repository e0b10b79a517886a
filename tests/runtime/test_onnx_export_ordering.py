"""The ONNX forms of atan2, cumprod and sort (which ONNX has no operator for) in onnxruntime against braze's
reference, on the values where each form could go wrong: signed zeros, infinities and NaN for atan2; zeros,
negatives and infinities on odd lengths for cumprod; ties, NaN, both directions and integer keys for sort."""
from __future__ import annotations

import numpy as np
import pytest

from braze.ir import interpret
from tests.ir.samples import Sample
from tests.ir.test_printer_parser import sample_graph

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from braze.runtime.onnx_export import to_onnx  # noqa: E402  (needs onnx)

SPECIALS = [0.0, -0.0, 1.0, -1.0, 2.5, -0.5, 1e-30, -1e30, np.inf, -np.inf, np.nan]


def _run(op: str, arrays: list[np.ndarray], **attrs) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(onnxruntime's results, braze's reference results) of one op at opset 17."""
    graph = sample_graph(Sample(op, tuple(arrays), attrs), arrays)
    session = ort.InferenceSession(to_onnx(graph, 17).SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {i.name: a for i, a in zip(session.get_inputs(), arrays)})
    return got, interpret(graph, arrays)


def test_atan2_exports_every_quadrant_and_special_value() -> None:
    y, x = (a.astype(np.float32).ravel() for a in np.meshgrid(SPECIALS, SPECIALS, indexing="ij"))
    (got,), (want,) = _run("atan2", [y, x])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    assert np.array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("n", [1, 2, 5, 8, 13])
def test_cumprod_exports_exactly_for_zeros_signs_and_infinities(n: int) -> None:
    x = np.random.default_rng(n).choice(np.float32([0.5, -2.0, 0.0, 1.5, -1.0, np.inf]), (3, n))
    (got,), (want,) = _run("cumprod", [x], axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    ints = np.random.default_rng(n).integers(-3, 4, (n, 2)).astype(np.int64)
    (got,), (want,) = _run("cumprod", [ints], axis=0)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "int64", "int32", "uint8", "bool"])
def test_sort_exports_stable_with_nan_largest(dtype: str, descending: bool) -> None:
    rng = np.random.default_rng(4)
    x = rng.integers(0, 3, (4, 9)).astype(dtype)
    if dtype == "float32":
        x[rng.random(x.shape) < 0.2] = np.nan
        x[rng.random(x.shape) < 0.2] = -0.0
    got, want = _run("sort", [x], axis=1, descending=descending)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_sort_exports_an_inner_axis_and_single_elements() -> None:
    x = np.random.default_rng(5).standard_normal((3, 4, 2)).astype(np.float32)
    for arrays, axis in (([x], 1), ([x[:, :1]], 1), ([np.array(2.0, np.float32)], 0)):
        got, want = _run("sort", arrays, axis=axis, descending=True)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


def test_model_with_topk_argsort_cumprod_and_atan2_exports(tmp_path) -> None:
    import braze

    class Ranked(braze.nn.Module):
        def forward(self, x):
            top = x.topk(2, dim=1)
            return top.values, top.indices, x.argsort(dim=0, descending=True), x.cumprod(1) + braze.atan2(x, -x)

    x = np.random.default_rng(6).standard_normal((4, 5)).astype(np.float32)
    path = tmp_path / "ranked.onnx"
    braze.export_onnx(Ranked().eval(), path, x)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x})
    with braze.no_grad():
        want = [t.numpy() for t in Ranked()(braze.tensor(x))]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
