"""fold_batchnorm beyond its golden files: the adjusted arrays against an independent numpy computation, the
report, the paths and ids of the new leaves, and the cases it leaves alone."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from braze import ir
from braze.ir.passes import PassReport, optimize

from .harness import EXPECT, assert_equivalent, random_weights

HERE = Path(__file__).parent


def golden_input(name: str) -> ir.Graph:
    g = ir.parse((HERE / name).read_text().partition(EXPECT)[0])
    return g.replace(weights=random_weights(g))


def run(g: ir.Graph) -> tuple[ir.Graph, PassReport]:
    reports: list[PassReport] = []
    out = optimize(g, ["fold_batchnorm"], report=reports)
    return out, reports[0]


def test_fold_batchnorm_conv_arrays_follow_the_batch_norm_formula() -> None:
    g = golden_input("fold_batchnorm_conv.ir")
    out, _ = run(g)
    w = {k: v.astype(np.float64) for k, v in g.weights.items()}
    k = w["bn.weight"] / np.sqrt(w["bn.running_var"] + 1e-5)
    np.testing.assert_allclose(out.weights["conv.weight"], w["conv.weight"] * k[:, None, None, None], rtol=1e-6)
    np.testing.assert_allclose(out.weights["conv.bias"], (w["conv.bias"] - w["bn.running_mean"]) * k + w["bn.bias"],
                               rtol=1e-6, atol=1e-7)


def test_fold_batchnorm_conv_weight_is_the_float64_product_rounded_once() -> None:
    g = golden_input("fold_batchnorm_conv.ir")
    out, _ = run(g)
    w = {k: v.astype(np.float64) for k, v in g.weights.items()}
    k = w["bn.weight"] / np.sqrt(w["bn.running_var"] + 1e-5)
    want = (w["conv.weight"] * k[:, None, None, None]).astype(np.float32)
    assert out.weights["conv.weight"].dtype == np.float32
    np.testing.assert_array_equal(out.weights["conv.weight"], want)


def test_fold_batchnorm_linear_computes_the_batch_norm_of_the_layer() -> None:
    g = golden_input("fold_batchnorm_linear.ir")
    out, _ = run(g)
    w = {k: v.astype(np.float64) for k, v in g.weights.items()}
    x = np.random.default_rng(2).standard_normal((4, 5)).astype(np.float32)
    y = x @ w["fc.weight"].T + w["fc.bias"]
    want = (y - w["bn.running_mean"]) / np.sqrt(w["bn.running_var"] + 1e-5) * w["bn.weight"] + w["bn.bias"]
    np.testing.assert_allclose(ir.interpret(out, [x])[0], want, rtol=1e-5, atol=1e-6)


def test_fold_batchnorm_new_leaves_keep_the_layer_paths_and_ids() -> None:
    out, _ = run(golden_input("fold_batchnorm_conv.ir"))
    assert [(p.path, p.id, p.trainable, p.buffer) for p in out.params()] == [
        ("conv.weight", 0, False, False), ("conv.bias", 1, False, False)]
    assert set(out.weights) == {"conv.weight", "conv.bias"}


def test_fold_batchnorm_without_a_bias_adds_a_documented_bias_leaf() -> None:
    g = golden_input("fold_batchnorm_conv_no_bias.ir")
    out, report = run(g)
    (bias,) = [p for p in out.params() if p.path == "conv.weight.folded_bias"]
    assert bias.id == 1  # one above the graph's largest ParamId
    k = np.array([1.5, -0.5]) / np.sqrt(np.array([2.0, 0.25]) + 1e-3)
    np.testing.assert_allclose(out.weights["conv.weight.folded_bias"], -np.array([0.5, -1.0]) * k + [0.0, 3.0],
                               rtol=1e-6)
    assert report["fold_batchnorm"].notes == (
        "folded batch norm %5 into conv.weight and conv.weight.folded_bias",)


def test_fold_batchnorm_report_names_the_module_and_the_new_leaves() -> None:
    _, report = run(golden_input("fold_batchnorm_conv.ir"))
    assert report["fold_batchnorm"].notes == ("folded batch norm bn into conv.weight and conv.bias",)


def test_fold_batchnorm_says_why_a_batch_norm_after_a_layer_stays() -> None:
    _, shared = run(golden_input("fold_batchnorm_two_users_negative.ir"))
    _, trainable = run(golden_input("fold_batchnorm_trainable_negative.ir"))
    assert shared["fold_batchnorm"].notes == ("left batch norm bn: %0 (conv2d) has other readers",)
    assert trainable["fold_batchnorm"].notes == ("left batch norm bn: 'bn.weight' is trainable",)


SHARED_WEIGHT = """graph @g(%x: f32[1,2,3,3]) -> (f32[1,2,3,3], f32[1,2,3,3]) {
  %conv.weight = param {buffer=false, id=0, path="conv.weight", trainable=false} : f32[2,2,1,1]
  %0 = conv2d %x, %conv.weight {dilation=[1, 1], groups=1, padding=[0, 0], stride=[1, 1]} : f32[1,2,3,3]
  %bn.running_mean = param {buffer=true, id=1, path="bn.running_mean", trainable=false} : f32[2]
  %bn.running_var = param {buffer=true, id=2, path="bn.running_var", trainable=false} : f32[2]
  %1 = constant {value=array<f32[2]>[1.0, 2.0]} : f32[2]
  %2 = constant {value=array<f32[2]>[0.0, 0.5]} : f32[2]
  %3 = batch_norm %0, %bn.running_mean, %bn.running_var, %1, %2 {eps=1e-05} : f32[1,2,3,3]
  %4 = conv2d %3, %conv.weight {dilation=[1, 1], groups=1, padding=[0, 0], stride=[1, 1]} : f32[1,2,3,3]
  return %3, %4
}
"""


def test_fold_batchnorm_weight_read_elsewhere_gets_a_new_path_and_id() -> None:
    g = ir.parse(SHARED_WEIGHT)
    g = g.replace(weights=random_weights(g))
    out, _ = run(g)
    leaves = {p.path: p.id for p in out.params()}
    assert leaves == {"conv.weight": 0, "conv.weight.folded": 3, "conv.weight.folded_bias": 4}
    assert out.weights["conv.weight"] is g.weights["conv.weight"]
    assert_equivalent(g, out)


def test_fold_batchnorm_leaves_batch_norm_over_a_rank_3_linear_alone() -> None:
    g = ir.parse("""graph @g(%x: f32[2,3,4]) -> (f32[2,3,3]) {
  %w = param {buffer=false, id=0, path="w", trainable=false} : f32[3,4]
  %0 = transpose %w {perm=[1, 0]} : f32[4,3]
  %1 = matmul %x, %0 : f32[2,3,3]
  %2 = constant {value=array<f32[3]>[0.0, 0.0, 0.0]} : f32[3]
  %3 = constant {value=array<f32[3]>[1.0, 1.0, 1.0]} : f32[3]
  %4 = batch_norm %1, %2, %3, %3, %2 {eps=1e-05} : f32[2,3,3]
  return %4
}
""")
    g = g.replace(weights=random_weights(g))
    out, report = run(g)
    assert str(out) == str(g) and report["fold_batchnorm"].notes == ()
