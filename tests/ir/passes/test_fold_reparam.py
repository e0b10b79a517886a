"""fold_reparameterizations beyond its golden files: the folded arrays against independent numpy, the report's
choices, reasons and measured errors, the cost model, the options, and what is left alone."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from braze import ir
from braze.ir import BrazeError
from braze.ir.ops.reparam import NF4, unpack_nibbles
from braze.ir.passes import PassReport, optimize
from braze.ir.passes.fold_reparam import DEQUANTIZE_FLOPS, FLOPS_PER_BYTE

from .harness import EXPECT, assert_equivalent, random_weights

HERE = Path(__file__).parent


def golden_input(name: str, seed: int = 0) -> ir.Graph:
    """The input graph of a golden file with seeded random weights."""
    g = ir.parse((HERE / name).read_text().partition(EXPECT)[0])
    return g.replace(weights=random_weights(g, seed))


def run(g: ir.Graph, **options: Any) -> tuple[ir.Graph, PassReport]:
    reports: list[PassReport] = []
    out = optimize(g, ["fold_reparameterizations"], report=reports, **options)
    return out, reports[0]


def params_of(report: PassReport) -> dict[str, dict[str, Any]]:
    return report["fold_reparameterizations"].details["params"]


def nf4_dequantized(codes: np.ndarray, scales: np.ndarray, block: int, shape: tuple[int, ...]) -> np.ndarray:
    """An independent NF4 dequantization: each 4-bit index's float32 level times its block's absmax (float32, as
    the dequantize op defines the base), returned in float64."""
    n = int(np.prod(shape))
    levels = np.asarray(NF4, dtype=np.float32)[unpack_nibbles(codes, n)]
    return (levels * np.repeat(scales, block)[:n]).reshape(shape).astype(np.float64)


def test_fold_reparam_dense_merge_is_the_graph_lora_merge_bit_for_bit() -> None:
    g = golden_input("fold_reparam_lora_merge.ir")
    out, report = run(g)
    w = g.weights
    want = w["fc.weight"] + np.float32(2.0) * (w["fc.weight.lora_b"] @ w["fc.weight.lora_a"])
    assert np.array_equal(out.weights["fc.weight"], want)
    assert params_of(report)["fc.weight"]["max_abs_error"] is None
    assert report["fold_reparameterizations"].notes == (
        "fc.weight: merged (dense base + rank-2 adapter); a dense base always merges; exact",)


def test_fold_reparam_untouched_weights_are_shared_and_the_input_is_unchanged() -> None:
    g = golden_input("fold_reparam_lora_merge.ir")
    text, arrays = str(g), {k: v.copy() for k, v in g.weights.items()}
    out, _ = run(g)
    assert out.weights["fc.bias"] is g.weights["fc.bias"]
    assert set(out.weights) == {"fc.weight", "fc.bias"} and out.weights["fc.weight"] is not g.weights["fc.weight"]
    assert str(g) == text and all(np.array_equal(g.weights[k], arrays[k]) for k in arrays)


def test_fold_reparam_qlora_merge_reports_the_measured_weight_error() -> None:
    g = golden_input("fold_reparam_qlora_merge.ir")
    out, report = run(g, policy="merge")
    w = g.weights
    exact = nf4_dequantized(w["fc.weight.codes"], w["fc.weight.scales"], 8, (3, 4)) \
        + 2.0 * (w["fc.weight.lora_b"].astype(np.float64) @ w["fc.weight.lora_a"].astype(np.float64))
    err = np.abs(out.weights["fc.weight"].astype(np.float64) - exact).max()
    info = params_of(report)["fc.weight"]
    assert info["max_abs_error"] == pytest.approx(err, rel=1e-9, abs=1e-15)
    assert info["max_rel_error"] == pytest.approx(err / np.abs(exact).max(), rel=1e-9, abs=1e-15)
    assert info["max_abs_error"] < 1e-5 * np.abs(exact).max()
    (note,) = report["fold_reparameterizations"].notes
    assert note.startswith("fc.weight: merged (nf4 base + rank-2 adapter); policy merge; max abs error ")
    assert "max rel error" in note


def test_fold_reparam_merged_leaf_keeps_the_parameter_path_and_id() -> None:
    out, report = run(golden_input("fold_reparam_qlora_merge.ir"), policy="merge")
    (leaf,) = [p for p in out.params() if p.path == "fc.weight"]
    assert (leaf.id, leaf.trainable, leaf.buffer) == (0, False, False)
    assert params_of(report)["fc.weight"]["leaf"] == "fc.weight"


def test_fold_reparam_keep_reports_the_choice_and_keeps_the_codes() -> None:
    g = golden_input("fold_reparam_qlora_keep.ir")
    out, report = run(g, policy="keep")
    assert out.weights["fc.weight.codes"] is g.weights["fc.weight.codes"]
    assert params_of(report)["fc.weight"]["choice"] == "keep"
    assert report["fold_reparameterizations"].notes == (
        "fc.weight: kept quantized (nf4 base + rank-2 adapter, low-rank path computed separately); policy keep",)


def test_fold_reparam_keep_computes_the_trained_function_independently() -> None:
    g = golden_input("fold_reparam_qlora_keep.ir")
    out, _ = run(g, policy="keep")
    w, x = g.weights, np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
    base = nf4_dequantized(w["fc.weight.codes"], w["fc.weight.scales"], 8, (3, 4))
    a, b = w["fc.weight.lora_a"].astype(np.float64), w["fc.weight.lora_b"].astype(np.float64)
    want = x @ base.T + 2.0 * (x @ a.T) @ b.T + w["fc.bias"]
    np.testing.assert_allclose(ir.interpret(out, [x])[0], want, rtol=1e-5, atol=1e-6)


def test_fold_reparam_auto_chooses_by_the_cost_model_and_says_why() -> None:
    _, report = run(golden_input("fold_reparam_qlora_auto.ir"))
    info = params_of(report)
    # 16x32 nf4 weight, rank 2: codes 256 B, scales 32 B, a 256 B, b 128 B; dense 2048 B
    stored, merge = 256 + 32 + 256 + 128, FLOPS_PER_BYTE * 2048
    low_rank = 2 * (2 * (32 + 16) + 16)
    keep_p = FLOPS_PER_BYTE * stored + DEQUANTIZE_FLOPS * 512 + 2 * low_rank
    keep_q = FLOPS_PER_BYTE * stored + DEQUANTIZE_FLOPS * 512 + 64 * low_rank
    assert info["p.weight"]["cost"] == pytest.approx({"merge": merge, "keep": keep_p})
    assert info["q.weight"]["cost"] == pytest.approx({"merge": merge, "keep": keep_q})
    assert (info["p.weight"]["choice"], info["q.weight"]["choice"]) == ("keep", "merge")
    assert info["p.weight"]["reason"] == f"auto: keep {keep_p:.4g} < merge {merge:.4g} flop-equivalents per call"


def test_fold_reparam_flops_per_byte_moves_the_auto_choice() -> None:
    g = golden_input("fold_reparam_qlora_auto.ir")
    memory_bound = params_of(run(g, flops_per_byte=1000)[1])
    compute_bound = params_of(run(g, flops_per_byte=0.5)[1])
    assert {p: i["choice"] for p, i in memory_bound.items()} == {"p.weight": "keep", "q.weight": "keep"}
    assert {p: i["choice"] for p, i in compute_bound.items()} == {"p.weight": "merge", "q.weight": "merge"}


@pytest.mark.parametrize("options,message", [
    ({"policy": "fast"}, r"policy must be one of merge, keep, auto, got 'fast'"),
    ({"flops_per_byte": 0}, r"flops_per_byte must be a positive number, got 0"),
    ({"flops_per_byte": "8"}, r"flops_per_byte must be a positive number, got '8'"),
])
def test_fold_reparam_options_are_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(BrazeError, match=message):
        run(golden_input("fold_reparam_lora_merge.ir"), **options)


KEEP_BLOCKED = """graph @g(%x: f32[2,4]) -> (f32[2,3], f32[3]) {
  %w.codes = param {buffer=false, id=0, path="w.codes", trainable=false} : u8[6]
  %w.scales = param {buffer=false, id=0, path="w.scales", trainable=false} : f32[2]
  %0 = dequantize %w.codes, %w.scales {block_size=8, scheme="nf4", shape=[3, 4]} : f32[3,4]
  %w.lora_a = param {buffer=false, id=1, path="w.lora_a", trainable=false} : f32[2,4]
  %w.lora_b = param {buffer=false, id=2, path="w.lora_b", trainable=false} : f32[3,2]
  %1 = lora_merge %0, %w.lora_a, %w.lora_b {scale=1.0} : f32[3,4]
  %2 = transpose %1 {perm=[1, 0]} : f32[4,3]
  %3 = matmul %x, %2 : f32[2,3]
  %4 = sum %1 {axes=[1], keepdim=false} : f32[3]
  return %3, %4
}
"""


def test_fold_reparam_keep_merges_a_weight_another_op_reads_dense() -> None:
    g = ir.parse(KEEP_BLOCKED)
    g = g.replace(weights=random_weights(g))
    out, report = run(g, policy="keep")
    assert params_of(report)["w"]["reason"] == "policy keep, but the dense weight is read by sum"
    assert not [n for n in out.nodes if n.op in ("dequantize", "lora_merge")]
    assert_equivalent(g, out)


def test_fold_reparam_leaves_trainable_regions_and_says_so() -> None:
    g = golden_input("fold_reparam_trainable_negative.ir")
    out, report = run(g, policy="merge")
    assert str(out) == str(g)
    assert report["fold_reparameterizations"].notes == (
        "left unfolded (trainable leaves, a training graph): fc.weight",)


def test_fold_reparam_leaves_regions_without_arrays_and_says_so() -> None:
    g = ir.parse((HERE / "fold_reparam_lora_merge.ir").read_text().partition(EXPECT)[0])
    out, report = run(g)
    assert str(out) == str(g)
    assert report["fold_reparameterizations"].notes == (
        "left fc.weight unfolded: no array for fc.weight, fc.weight.lora_a, fc.weight.lora_b in the graph's weights",)


def test_fold_reparam_split_path_merge_reports_its_rounding_error() -> None:
    g = golden_input("fold_reparam_split_linear.ir")
    out, report = run(g, policy="keep")  # a dense base merges under every policy
    info = params_of(report)["fc.weight"]
    assert info["choice"] == "merge" and info["forms"] == ["split"]
    w = {k: v.astype(np.float64) for k, v in g.weights.items()}
    exact = w["fc.weight"] + 2.0 * w["fc.weight.lora_b"] @ w["fc.weight.lora_a"]
    assert info["max_abs_error"] == pytest.approx(np.abs(out.weights["fc.weight"] - exact).max(), abs=1e-12)


TIED = """graph @g(%x: f32[2,4], %y: f32[5,4]) -> (f32[2,3], f32[5,3]) {
  %w = param {buffer=false, id=0, path="w", trainable=false} : f32[3,4]
  %w.lora_a = param {buffer=false, id=1, path="w.lora_a", trainable=false} : f32[2,4]
  %w.lora_b = param {buffer=false, id=2, path="w.lora_b", trainable=false} : f32[3,2]
  %0 = lora_merge %w, %w.lora_a, %w.lora_b {scale=1.0} : f32[3,4]
  %1 = transpose %0 {perm=[1, 0]} : f32[4,3]
  %2 = matmul %x, %1 : f32[2,3]
  %3 = lora_merge %w, %w.lora_a, %w.lora_b {scale=1.0} : f32[3,4]
  %4 = transpose %3 {perm=[1, 0]} : f32[4,3]
  %5 = matmul %y, %4 : f32[5,3]
  return %2, %5
}
"""


def test_fold_reparam_a_weight_read_twice_folds_into_one_leaf() -> None:
    g = ir.parse(TIED)
    g = g.replace(weights=random_weights(g))
    out, report = run(g)
    assert [(p.path, p.id) for p in out.params()] == [("w", 0)]
    assert list(params_of(report)) == ["w"]
    assert_equivalent(g, out)


MULTI_RESULT_FIRST = """\
graph @g(%x: f32[5,3], %w: f32[3], %b: f32[3], %q: u8[2], %s: f32[1]) -> (f32[5,3], f32[3], f32[3], f32[4]) {
  %0, %1, %2 = batch_norm_train %x, %w, %b {eps=1e-05} : f32[5,3], f32[3], f32[3]
  %3 = dequantize %q, %s {block_size=64, scheme="int4", shape=[4]} : f32[4]
  return %0, %1, %2, %3
}
"""


def test_fold_reparameterizations_orders_regions_after_a_multi_result_node() -> None:
    """Regions are ordered by their anchor's position; a multi-result node before them once raised ValueError."""
    g = ir.parse(MULTI_RESULT_FIRST)
    out, _ = run(g)
    assert [n.op for n in out.nodes] == ["batch_norm_train", "dequantize"]
