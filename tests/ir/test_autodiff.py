"""Graph-level autodiff (ir/autodiff.py): golden backward text, finite differences, frozen leaves get no
gradient nodes, and errors naming the op and module path."""
from __future__ import annotations

import numpy as np
import pytest

from braze import ir
from braze.ir import BrazeError
from braze.ir.autodiff import backward_graph, gradient_paths

TINY = """graph @tiny(%x: f32[2,3]) -> (f32[]) {
  %w = param {buffer=false, id=0, path="fc.w", trainable=true} : f32[3]
  %s = param {buffer=false, id=1, path="fc.s", trainable=false} : f32[3]
  %0 = mul %x, %w : f32[2,3]  loc("fc" "m.py":4)
  %1 = mul %0, %s : f32[2,3]  loc("fc" "m.py":5)
  %2 = tanh %1 : f32[2,3]  loc("act" "m.py":6)
  %3 = mean %2 {axes=none, keepdim=false} : f32[]  loc("" "m.py":7)
  return %3
}
"""

TINY_BACKWARD = """graph @tiny(%x: f32[2,3]) -> (f32[], f32[3]) attributes {outputs=["output", "gradient:fc.w"]} {
  %w = param {buffer=false, id=0, path="fc.w", trainable=true} : f32[3]
  %s = param {buffer=false, id=1, path="fc.s", trainable=false} : f32[3]
  %0 = mul %x, %w : f32[2,3]  loc("fc" "m.py":4)
  %1 = mul %0, %s : f32[2,3]  loc("fc" "m.py":5)
  %2 = tanh %1 : f32[2,3]  loc("act" "m.py":6)
  %3 = mean %2 {axes=none, keepdim=false} : f32[]  loc("" "m.py":7)
  %4 = constant {value=array<f32[]>[1.0]} : f32[]  loc("" "m.py":7)
  %5 = constant {value=array<f32[]>[6.0]} : f32[]  loc("" "m.py":7)
  %6 = div %4, %5 : f32[]  loc("" "m.py":7)
  %7 = reshape %6 {shape=[1, 1]} : f32[1,1]  loc("" "m.py":7)
  %8 = broadcast_to %7 {shape=[2, 3]} : f32[2,3]  loc("" "m.py":7)
  %9 = mul %2, %2 : f32[2,3]  loc("act" "m.py":6)
  %10 = constant {value=array<f32[]>[1.0]} : f32[]  loc("act" "m.py":6)
  %11 = sub %10, %9 : f32[2,3]  loc("act" "m.py":6)
  %12 = mul %8, %11 : f32[2,3]  loc("act" "m.py":6)
  %13 = mul %12, %s : f32[2,3]  loc("fc" "m.py":5)
  %14 = mul %13, %x : f32[2,3]  loc("fc" "m.py":4)
  %15 = sum %14 {axes=[0], keepdim=true} : f32[1,3]  loc("fc" "m.py":4)
  %16 = reshape %15 {shape=[3]} : f32[3]  loc("fc" "m.py":4)
  return %3, %16
}
"""


def test_backward_graph_of_a_tiny_model_matches_golden_text() -> None:
    g = backward_graph(ir.parse(TINY))
    assert g.dump(provenance=True) == TINY_BACKWARD


def test_backward_graph_text_round_trips() -> None:
    g = backward_graph(ir.parse(TINY))
    assert ir.parse(g.dump(provenance=True)) == g


def test_backward_graph_gradient_paths_name_the_outputs() -> None:
    assert gradient_paths(backward_graph(ir.parse(TINY))) == {"fc.w": 1}


SMALL = """graph @small(%x: f64[4,3], %t: i64[4]) -> (f64[]) {
  %w = param {buffer=false, id=0, path="w", trainable=true} : f64[5,3]
  %b = param {buffer=false, id=1, path="b", trainable=true} : f64[5]
  %g = param {buffer=false, id=2, path="g", trainable=true} : f64[5]
  %0 = linear %x, %w : f64[4,5]
  %1 = add %0, %b : f64[4,5]
  %2 = layer_norm %1, %g {eps=1e-05, normalized_shape=[5]} : f64[4,5]
  %3 = gelu %2 {approximate="none"} : f64[4,5]
  %4 = exp %3 : f64[4,5]
  %5 = mul %4, %1 : f64[4,5]
  %6 = cross_entropy %5, %t {ignore_index=-100, label_smoothing=0.0, reduction="mean"} : f64[]
  return %6
}
"""


def _loss(graph: ir.Graph, inputs: list[np.ndarray], weights: dict[str, np.ndarray]) -> float:
    return float(ir.interpret(graph, inputs, params=weights)[0])


def test_backward_graph_gradients_match_central_differences() -> None:
    forward = ir.parse(SMALL)
    rng = np.random.default_rng(0)
    weights = {"w": rng.standard_normal((5, 3)), "b": rng.standard_normal(5), "g": rng.uniform(0.5, 1.5, 5)}
    inputs = [rng.standard_normal((4, 3)), np.array([0, 4, 2, 1])]
    backward = backward_graph(forward)
    outputs = ir.interpret(backward, inputs, params=weights)
    h = 1e-6
    for path, k in gradient_paths(backward).items():
        numeric = np.zeros_like(weights[path])
        for index in np.ndindex(numeric.shape):
            up, down = ({**weights, path: weights[path].copy()} for _ in range(2))
            up[path][index] += h
            down[path][index] -= h
            numeric[index] = (_loss(forward, inputs, up) - _loss(forward, inputs, down)) / (2 * h)
        np.testing.assert_allclose(outputs[k], numeric, rtol=1e-6, atol=1e-8, err_msg=path)


FROZEN = """graph @frozen(%x: f32[4]) -> (f32[], f32[4]) attributes {outputs=["output", "buffer_update:stat"]} {
  %w = param {buffer=false, id=0, path="w", trainable=false} : f32[4]
  %u = param {buffer=false, id=1, path="u", trainable=true} : f32[4]
  %stat = param {buffer=true, id=2, path="stat", trainable=false} : f32[4]
  %0 = exp %w : f32[4]
  %1 = mul %x, %0 : f32[4]
  %2 = mul %1, %stat : f32[4]
  %3 = sum %2 {axes=none, keepdim=false} : f32[]
  %4 = sum %u {axes=none, keepdim=false} : f32[]
  %5 = add %3, %4 : f32[]
  %6 = add %stat, %x : f32[4]
  return %5, %6
}
"""


def test_backward_graph_computes_nothing_for_frozen_params_and_buffers() -> None:
    g = backward_graph(ir.parse(FROZEN))
    forward_ops = [n.op for n in ir.parse(FROZEN).ops()]
    backward_ops = [n.op for n in g.ops()][len(forward_ops):]
    assert backward_ops == ["reshape", "broadcast_to"]  # d(sum u)/du: the seed broadcast; nothing reaches w or stat


def test_backward_graph_keeps_buffer_updates_after_the_gradients() -> None:
    g = backward_graph(ir.parse(FROZEN))
    assert list(g.attributes["outputs"]) == ["output", "gradient:u", "buffer_update:stat"]


def test_backward_graph_refuses_a_loss_that_is_not_a_float_scalar() -> None:
    with pytest.raises(BrazeError, match="must be a float scalar, got f32\\[4\\]"):
        backward_graph(ir.parse(FROZEN), loss=1)


NO_VJP = """graph @q(%x: f32[2,4]) -> (f32[]) {
  %codes = param {buffer=false, id=0, path="fc.weight.codes", trainable=false} : i8[4,4]
  %scales = param {buffer=false, id=1, path="fc.weight.scales", trainable=true} : f32[4]
  %0 = dequantize %codes, %scales {block_size=64, scheme="int8", shape=[4, 4]} : f32[4,4]  loc("enc.fc" "m.py":9)
  %1 = matmul %x, %0 : f32[2,4]
  %2 = sum %1 {axes=none, keepdim=false} : f32[]
  return %2
}
"""


def test_backward_graph_names_the_op_and_module_without_a_vjp_rule() -> None:
    with pytest.raises(BrazeError, match="op 'dequantize' \\(module 'enc.fc'\\) at enc.fc @ m.py:9 has no vjp rule"):
        backward_graph(ir.parse(NO_VJP))
