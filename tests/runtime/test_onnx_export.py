"""ONNX export: every exported model passes onnx.checker, runs in onnxruntime and agrees with braze; ops without an
ONNX form, bad options and missing packages are refused with clear errors; files are written atomically. Every
op with a rule runs its registry samples at opset 17 and at opset 21 (where Gelu and the reductions' axes
operands differ).

Tolerances: float32 results agree with braze to rtol 1e-5 / atol 1e-6 per op and rtol 1e-4 / atol 1e-5 for whole
models (onnxruntime orders its float sums differently); integer and boolean results are equal.
"""
from __future__ import annotations

import copy
import sys
from typing import Any

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F
from braze.ir import interpret, op_names
from benchmarks import models
from tests.ir.samples import all_samples
from tests.ir.test_printer_parser import _float32, sample_graph
from tests.models import MLP

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from braze.runtime.onnx_export import supported_ops, to_onnx  # noqa: E402  (needs onnx)

# Ops without an export rule: training flags (folded before export), training-only and backward ops, losses,
# dropout's counter-based random mask (off at inference, and not ONNX's Dropout), and the scatter-adds and
# slice_scatter, which ONNX's ScatterElements/ScatterND could express but no rule writes yet.
NOT_EXPORTED = frozenset({
    "flag", "dropout", "cross_entropy", "mse_loss", "batch_norm_train", "batch_norm_flag",
    "avg_pool2d_grad", "max_pool2d_grad", "max_pool2d_select", "conv2d_grad_input", "conv2d_grad_weight",
    "conv2d_grad_weight_slices", "quantized_matmul", "scatter_add", "index_add", "slice_scatter",
})
SAMPLES = [s for s in all_samples() if s.op in supported_ops()]


def run_onnx(model: Any, *arrays: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {i.name: a for i, a in zip(session.get_inputs(), arrays)})


def eager(model: nn.Module, x: np.ndarray) -> np.ndarray:
    with braze.no_grad():
        return model(braze.tensor(x)).numpy()


def test_rules_cover_every_inference_op() -> None:
    assert supported_ops() == frozenset(op_names()) - NOT_EXPORTED


@pytest.mark.parametrize("opset", [17, 21])
@pytest.mark.parametrize("sample", SAMPLES, ids=[s.id for s in SAMPLES])
def test_op_runs_in_onnxruntime_like_the_reference(sample: Any, opset: int) -> None:
    arrays = _float32([np.asarray(a) for a in sample.args])
    graph = sample_graph(sample, arrays)
    got = run_onnx(to_onnx(graph, opset), *arrays)
    for result, want in zip(got, interpret(graph, arrays), strict=True):
        assert result.dtype == want.dtype and result.shape == want.shape
        np.testing.assert_allclose(result, want, rtol=1e-5, atol=1e-6)


# --- the benchmark models and their LoRA and QLoRA variants ---------------------------------------------------------

def _adapted(case: models.Case, variant: str) -> nn.Module:
    """The case's model, with adapters (LoRA or QLoRA over nf4) whose b factors are non-zero."""
    model = copy.deepcopy(case.model)
    if variant == "plain":
        return model
    targets = ["c1", "c2", "c3", "fc"] if case.name.startswith("cnn") else None
    config = nn.Lora(4, 8, targets=targets) if variant == "lora" else nn.QLora(4, 8, targets=targets)
    (model.apply_lora if variant == "lora" else model.apply_qlora)(config)
    rng = np.random.default_rng(3)
    for path, p in model.named_parameters():
        if path.endswith("lora_b"):
            p.assign(rng.standard_normal(p.lazy_shape).astype(np.float32) * 0.05)
    return model.eval()


CASES = {"mlp": lambda: models.mlp(2), "cnn": lambda: models.cnn(2), "transformer": lambda: models.transformer(1)}


@pytest.mark.parametrize("variant", ["plain", "lora", "qlora"])
@pytest.mark.parametrize("name", list(CASES))
def test_benchmark_model_exports_merged_and_agrees_with_braze(name: str, variant: str, tmp_path: Any) -> None:
    case = CASES[name]()
    model = _adapted(case, variant)
    proto = braze.export_onnx(model, tmp_path / "model.onnx", case.x)
    (got,) = run_onnx(onnx.load(tmp_path / "model.onnx"), case.x)
    np.testing.assert_allclose(got, eager(model, case.x), rtol=1e-4, atol=1e-5)
    assert {n.op_type for n in proto.graph.node}.isdisjoint({"BatchNormalization", "Gather", "Mod"})
    if name != "cnn":  # the CNN's convolution weights have its batch norms folded in
        _assert_weights_are_merged(proto, model)


def _assert_weights_are_merged(proto: Any, model: nn.Module) -> None:
    """Every weight of model.valid().materialize() is the initializer named by its path; no adapter is left."""
    merged = {k: np.asarray(v) for k, v in model.valid().materialize().state_dict().items()}
    initializers = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    weights = {k: v for k, v in initializers.items() if k in merged}
    assert weights.keys() == merged.keys() and not any("lora" in k for k in initializers)
    for key, array in weights.items():
        np.testing.assert_allclose(array, merged[key], rtol=1e-6, atol=1e-6)


def test_qlora_base_stays_quantized_with_policy_keep() -> None:
    case = models.mlp(2)
    model = _adapted(case, "qlora")
    proto = to_onnx(braze.onnx_export.inference_graph(model, [case.x], {"policy": "keep"}))
    assert any(t.name.endswith(".codes") for t in proto.graph.initializer)
    (got,) = run_onnx(proto, case.x)
    np.testing.assert_allclose(got, eager(model, case.x), rtol=1e-4, atol=1e-5)


def test_compiled_graph_exports_with_its_fusion_regions_inlined(tmp_path: Any) -> None:
    model = MLP().eval()
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    compiled = braze.compile(model, x)
    assert any(n.op == "fused" for n in compiled.graph.nodes)
    proto = braze.export_onnx(compiled.graph, tmp_path / "mlp.onnx")
    (got,) = run_onnx(proto, x)
    np.testing.assert_allclose(got, compiled(x), rtol=1e-5, atol=1e-6)


class _Attention(nn.Module):
    """Causal self-attention through F.scaled_dot_product_attention, plus one with a padding mask that masks every
    key for the last query row (0 there, as torch)."""

    def forward(self, q: Any, k: Any, v: Any, keep: Any) -> Any:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True) + F.scaled_dot_product_attention(
            q, k, v, attn_mask=keep, scale=0.3)


def test_attention_exports_as_the_ops_it_stands_for(tmp_path: Any) -> None:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 3, 5, 4)).astype(np.float32) for _ in range(3))
    keep = rng.random((5, 5)) < 0.6
    keep[-1] = False
    compiled = braze.compile(_Attention().eval(), q, k, v, keep)
    assert [n.op for n in compiled.graph.nodes].count("attention") == 2
    proto = braze.export_onnx(compiled.graph, tmp_path / "attention.onnx")
    (got,) = run_onnx(proto, q, k, v, keep)
    np.testing.assert_allclose(got, compiled(q, k, v, keep), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[:, :, -1], eager_causal_last_row(q, k, v), rtol=1e-5, atol=1e-6)


def eager_causal_last_row(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The causal attention's last query row (which sees every key) alone: the masked term adds exactly 0."""
    with braze.no_grad():
        out = F.scaled_dot_product_attention(braze.tensor(q), braze.tensor(k), braze.tensor(v), is_causal=True)
    return out.numpy()[:, :, -1]


def test_model_in_training_mode_exports_its_evaluation_snapshot(tmp_path: Any) -> None:
    model = MLP(p=0.5).train()
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    proto = braze.export_onnx(model, tmp_path / "mlp.onnx", x)
    assert model.training
    (got,) = run_onnx(proto, x)
    np.testing.assert_allclose(got, eager(model.valid(), x), rtol=1e-5, atol=1e-6)


# --- names, opsets, errors ----------------------------------------------------------------------------------------

def test_names_come_from_the_graph_unless_given(tmp_path: Any) -> None:
    model, x = MLP().eval(), np.zeros((2, 8), np.float32)
    proto = braze.export_onnx(model, tmp_path / "a.onnx", x)
    assert [i.name for i in proto.graph.input] == ["x"] and [o.name for o in proto.graph.output] == ["output"]
    proto = braze.export_onnx(model, tmp_path / "b.onnx", x, input_names=["features"], output_names=["logits"])
    assert [i.name for i in proto.graph.input] == ["features"] and [o.name for o in proto.graph.output] == ["logits"]


def test_output_that_is_an_input_is_copied_under_its_own_name(tmp_path: Any) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    proto = braze.export_onnx(lambda a: (a, a * 2.0), tmp_path / "pair.onnx", x)
    assert [o.name for o in proto.graph.output] == ["output_0", "output_1"]
    first, second = run_onnx(proto, x)
    np.testing.assert_array_equal(first, x)
    np.testing.assert_array_equal(second, x * 2)


def test_opset_20_uses_onnx_gelu(tmp_path: Any) -> None:
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    proto = braze.export_onnx(lambda a: F.gelu(a), tmp_path / "gelu.onnx", x, opset=20)
    assert [n.op_type for n in proto.graph.node] == ["Gelu"]
    (got,) = run_onnx(proto, x)
    np.testing.assert_allclose(got, F.gelu(braze.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [16, "17", 10_000])
def test_unsupported_opset_is_refused(opset: Any, tmp_path: Any) -> None:
    with pytest.raises(braze.ExportError, match=r"export_onnx: opset must be an int from 17"):
        braze.export_onnx(MLP().eval(), tmp_path / "m.onnx", np.zeros((1, 8), np.float32), opset=opset)
    assert not list(tmp_path.iterdir())


class _Tallies(nn.Module):
    """A layer whose forward uses index_add, which braze exports to no ONNX form (ONNX's ScatterElements with
    reduction="add" could express it; braze's export has no rule for it)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x: Any) -> Any:
        y = self.fc(x)
        return y.index_add(0, braze.tensor([0, 2, 0]), y)


class _Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tallies = _Tallies()

    def forward(self, x: Any) -> Any:
        return self.tallies(x)


def test_op_without_onnx_form_is_named_with_its_module_path(tmp_path: Any) -> None:
    with pytest.raises(braze.ExportError, match=r"index_add \(from tallies @ .*test_onnx_export\.py:\d+\) has "
                                                 r"no ONNX form"):
        braze.export_onnx(_Model().eval(), tmp_path / "tallies.onnx", np.zeros((3, 4), np.float32))
    assert not list(tmp_path.iterdir())


def test_failed_export_leaves_an_existing_file_alone(tmp_path: Any) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(b"previous")
    with pytest.raises(braze.ExportError):
        braze.export_onnx(_Model().eval(), path, np.zeros((3, 4), np.float32))
    assert path.read_bytes() == b"previous" and [p.name for p in tmp_path.iterdir()] == ["model.onnx"]


def test_export_into_a_missing_directory_names_the_file(tmp_path: Any) -> None:
    target = tmp_path / "missing" / "m.onnx"
    with pytest.raises(braze.RecordError, match=r"missing/m\.onnx: cannot write"):
        braze.export_onnx(MLP().eval(), target, np.zeros((1, 8), np.float32))


@pytest.mark.parametrize("names, message", [(["a", "b"], "input_names must be 1 distinct"),
                                            ([""], "input_names must be 1 distinct")])
def test_bad_names_are_refused(names: list[str], message: str, tmp_path: Any) -> None:
    with pytest.raises(braze.ExportError, match=message):
        braze.export_onnx(MLP().eval(), tmp_path / "m.onnx", np.zeros((1, 8), np.float32), input_names=names)


def test_graph_with_example_inputs_is_refused(tmp_path: Any) -> None:
    graph = braze.trace(MLP().eval(), np.zeros((1, 8), np.float32))
    with pytest.raises(braze.ExportError, match="a Graph has its input types in it"):
        braze.export_onnx(graph, tmp_path / "m.onnx", np.zeros((1, 8), np.float32))


def test_missing_onnx_package_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for name in [m for m in sys.modules if m == "onnx" or m.startswith(("onnx.", "braze.runtime.onnx_export"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delattr(sys.modules["braze.runtime"], "onnx_export")
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(braze.ExportError, match=r"export_onnx needs the onnx package: pip install 'braze\[onnx\]'"):
        braze.export_onnx(MLP().eval(), tmp_path / "m.onnx", np.zeros((1, 8), np.float32))
