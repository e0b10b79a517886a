"""The reference interpreter: checked inputs, params and flags bound by path, clear errors."""
from __future__ import annotations

import numpy as np
import pytest

from braze.ir import (BrazeError, DTypeError, Graph, GraphBuilder, ShapeError, TensorType, bool_, float32, float64,
                      int64, interpret)

F23 = TensorType((2, 3), float32)


def _model() -> Graph:
    """y = where(training, x * w + b, x * w) with weights captured beside the graph."""
    b = GraphBuilder("model")
    x = b.input("x", F23)
    w = b.param("layer.w", TensorType((3,), float32), id=1)
    bias = b.param("layer.b", TensorType((3,), float32), id=2, trainable=False, buffer=True)
    training = b.flag("layer.training", id=3, value=True)
    scaled = b.mul(x, w)
    out = b.where(training, b.add(scaled, bias), scaled)
    weights = {"layer.w": np.array([1.0, 2.0, 3.0], np.float32), "layer.b": np.full(3, 10.0, np.float32)}
    return b.finish([out, scaled], weights=weights)


X = np.arange(6, dtype=np.float32).reshape(2, 3)


def test_interpret_uses_the_graphs_weights_and_flag_values() -> None:
    out, scaled = interpret(_model(), [X])
    np.testing.assert_array_equal(scaled, X * [1, 2, 3])
    np.testing.assert_array_equal(out, X * [1, 2, 3] + 10)


def test_interpret_results_have_the_declared_types() -> None:
    g = _model()
    assert [(r.shape, r.dtype) for r in interpret(g, [X])] == [(v.shape, v.dtype.numpy) for v in g.outputs]


def test_params_override_the_weights() -> None:
    out, _ = interpret(_model(), [X], params={"layer.b": np.full(3, -1.0, np.float32)})
    np.testing.assert_array_equal(out, X * [1, 2, 3] - 1)


def test_params_override_leaves_the_graphs_weights_alone() -> None:
    g = _model()
    interpret(g, [X], params={"layer.w": np.zeros(3, np.float32)})
    np.testing.assert_array_equal(g.weights["layer.w"], [1.0, 2.0, 3.0])


def test_flags_override_the_recorded_value() -> None:
    out, scaled = interpret(_model(), [X], flags={"layer.training": False})
    np.testing.assert_array_equal(out, scaled)


def test_flags_not_mentioned_keep_their_recorded_value() -> None:
    out, _ = interpret(_model(), [X], flags={"other.training": False})
    np.testing.assert_array_equal(out, X * [1, 2, 3] + 10)


def test_missing_weight_is_a_clear_error() -> None:
    g = _model().replace(weights={"layer.w": np.ones(3, np.float32)})
    with pytest.raises(BrazeError, match=r"no value for param 'layer.b': pass it in params="):
        interpret(g, [X])


def test_param_of_the_wrong_shape_is_a_shape_error() -> None:
    with pytest.raises(ShapeError, match=r"param 'layer.w': expected shape \[3\], got \[4\]"):
        interpret(_model(), [X], params={"layer.w": np.ones(4, np.float32)})


def test_param_of_the_wrong_dtype_is_a_dtype_error() -> None:
    with pytest.raises(DTypeError, match=r"param 'layer.w': expected dtype float32, got float64"):
        interpret(_model(), [X], params={"layer.w": np.ones(3)})


def test_param_of_an_unsupported_dtype_names_the_param() -> None:
    with pytest.raises(DTypeError, match=r"param 'layer.w': expected dtype float32, got float16"):
        interpret(_model(), [X], params={"layer.w": np.ones(3, np.float16)})


def test_wrong_input_count_lists_the_signature() -> None:
    with pytest.raises(BrazeError, match=r"graph @model takes 1 input\(s\) \(%x: f32\[2,3\]\), got 2"):
        interpret(_model(), [X, X])


def test_wrong_input_shape_names_the_input() -> None:
    with pytest.raises(ShapeError, match=r"input %x: expected shape \[2, 3\] \(f32\[2,3\]\), got \[3, 2\]"):
        interpret(_model(), [X.T])


def test_wrong_input_dtype_names_the_input() -> None:
    with pytest.raises(DTypeError, match=r"input %x: expected dtype float32 \(f32\[2,3\]\), got float64"):
        interpret(_model(), [X.astype(np.float64)])


def test_inputs_may_be_nested_lists_of_the_right_dtype() -> None:
    b = GraphBuilder("lists")
    x = b.input("x", TensorType((2,), float64))
    (y,) = interpret(b.finish([b.neg(x)]), [[1.5, -2.0]])
    np.testing.assert_array_equal(y, [-1.5, 2.0])


def test_multi_result_and_passthrough_outputs() -> None:
    b = GraphBuilder("multi")
    x = b.input("x", TensorType((2, 3), float64))
    idx = b.argmax(x, axis=1)
    g = b.finish([x, idx, b.max(x, axes=(1,))])
    data = np.array([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]])
    out_x, out_idx, out_max = interpret(g, [data])
    assert out_x is not None and np.array_equal(out_x, data)
    np.testing.assert_array_equal(out_idx, np.array([1, 0], np.int64))
    np.testing.assert_array_equal(out_max, [5.0, 7.0])


def test_flag_values_are_bool_scalars() -> None:
    b = GraphBuilder("flag")
    t = b.flag("training", id=1, value=True)
    (value,) = interpret(b.finish([t]), [], flags={"training": 0})
    assert value.dtype == bool_.numpy and value.shape == () and not value


def test_integer_graphs_stay_integer() -> None:
    b = GraphBuilder("ints")
    x = b.input("x", TensorType((3,), int64))
    (y,) = interpret(b.finish([b.sum(b.mul(x, x))]), [np.array([1, 2, 3])])
    assert y.dtype == np.int64 and y == 14
