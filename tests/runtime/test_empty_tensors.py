"""Graphs over empty tensors compile and run like the interpreter (the IR fuzzer's seed 21, case 9740: a conv2d with
no output channels raised ZeroDivisionError in codegen)."""
from __future__ import annotations

import numpy as np

from braze import ir
from braze.ir.interpret import interpret
from braze.runtime.compile_path import compile_graph

NO_OUTPUT_CHANNELS = """graph @conv2d(%x: f64[2,3,5,5], %w: f64[0,3,3,3], %b: f64[0]) -> (f64[2,0,5,5]) {
  %0 = conv2d %x, %w, %b {dilation=[1, 1], groups=1, padding=[1, 1], stride=[1, 1]} : f64[2,0,5,5]
  return %0
}
"""

NO_INPUT_CHANNELS = """graph @g(%x: f32[2,0,5,5], %w: f32[4,0,3,3], %b: f32[4]) -> (f32[2,4,5,5], f32[2,0]) {
  %0 = conv2d %x, %w, %b {dilation=[1, 1], groups=1, padding=[1, 1], stride=[1, 1]} : f32[2,4,5,5]
  %1 = relu %0 : f32[2,4,5,5]
  %2 = sum %x {axes=[2, 3], keepdim=false} : f32[2,0]
  return %1, %2
}
"""


def _run_both(text: str) -> None:
    graph = ir.parse(text)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(v.type.shape).astype(v.type.dtype.numpy) for v in graph.inputs]
    got = compile_graph(graph, untrusted=True).run(inputs)
    for g, w in zip(got, interpret(graph, inputs)):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_conv2d_without_output_channels_compiles_to_an_empty_result() -> None:
    _run_both(NO_OUTPUT_CHANNELS)


def test_conv2d_without_input_channels_compiles_to_its_bias() -> None:
    _run_both(NO_INPUT_CHANNELS)
