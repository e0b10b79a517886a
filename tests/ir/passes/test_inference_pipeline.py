"""The "inference" pipeline on valid() snapshots of the test models (an MLP, a CNN with batch norm and dropout, a
transformer encoder layer) with LoRA, and with QLoRA under each policy: the optimized graph has no flag leaves,
adapter leaves, buffer updates, batch norm or dropout, interprets to the eager output within 1e-5 relative, holds
the weights model.valid().materialize() computes, reports its choices and errors, and is the same text every time."""
from __future__ import annotations

from typing import Any, Callable, Iterator

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F
from braze import ir
from braze.ir.passes import PassReport

from ...models import MLP

REMOVED_OPS = {"batch_norm", "batch_norm_flag", "batch_norm_train", "dropout"}


class CNN(nn.Module):
    """conv-bn-relu-pool twice (the second batch norm with a cumulative average), dropout, a linear classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8, momentum=None)
        self.pool, self.drop, self.fc = nn.MaxPool2d(2), nn.Dropout(0.3), nn.Linear(8 * 2 * 2, 10)

    def forward(self, x: Any) -> Any:
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = self.pool(F.relu(self.bn2(self.conv2(x))))
        return self.fc(self.drop(braze.flatten(x, 1)))


def encoder() -> nn.Module:
    return nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, activation="gelu", batch_first=True)


ARCHS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], list[str] | None]] = {
    "mlp": (MLP, (4, 8), None), "cnn": (CNN, (2, 3, 8, 8), ["conv1", "conv2", "fc"]),
    "encoder": (encoder, (2, 5, 16), None)}


def build(arch: str, variant: str) -> tuple[nn.Module, np.ndarray]:
    """A trained-looking model (adapters with nonzero b, batch norm statistics moved by a training step) with
    `variant` applied ("lora", "lora_dropout": LoRA with adapter dropout, "qlora"), and an input."""
    make, shape, targets = ARCHS[arch]
    braze.manual_seed(0)
    m = make()
    if variant == "qlora":
        m.apply_qlora(nn.QLora(4, 8, targets=targets))
    else:
        m.apply_lora(nn.Lora(4, 8, targets=targets, dropout=0.2 if variant == "lora_dropout" else 0.0))
    rng = np.random.default_rng(5)
    for _, p in m.named_param_slots():
        if p.adapter is not None:
            p.adapter.b.assign(rng.standard_normal(p.adapter.b.shape) * 0.1)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    m(braze.tensor(x))  # a training-mode call moves the batch norm statistics away from 0 and 1
    return m, x


def optimized(arch: str, variant: str, **options: Any) -> tuple[nn.Module, ir.Graph, ir.Graph, PassReport, np.ndarray]:
    """The valid() snapshot, its traced graph, the graph after the inference pipeline, its report, the input."""
    m, x = build(arch, variant)
    snapshot = m.valid()
    g = braze.trace(snapshot, braze.tensor(x))
    reports: list[PassReport] = []
    return snapshot, g, braze.optimize(g, "inference", report=reports, **options), reports[0], x


def all_nodes(graph: ir.Graph) -> Iterator[ir.Node]:
    """Every node, those inside fusion regions (graph attributes) included."""
    for n in graph.nodes:
        yield n
        for _, value in n.attrs:
            if isinstance(value, ir.Graph):
                yield from all_nodes(value)


def adapter_paths(m: nn.Module) -> set[str]:
    return {path for path, p in m.named_param_slots() if path.endswith((".lora_a", ".lora_b"))}


def assert_close_to_eager(snapshot: nn.Module, graph: ir.Graph, x: np.ndarray) -> None:
    """The graph's output is the eager output of the snapshot within 1e-5 relative (to its largest magnitude)."""
    want = snapshot(braze.tensor(x)).numpy()
    (got,) = ir.interpret(graph, [x])
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


LORA = [pytest.param(a, v, id=f"{a}-{v}") for a in ARCHS for v in ("lora", "lora_dropout")]


@pytest.mark.parametrize("arch,variant", LORA)
def test_inference_pipeline_valid_lora_graph_is_clean(arch: str, variant: str) -> None:
    snapshot, g, out, _, _ = optimized(arch, variant)
    assert g.flags() and adapter_paths(snapshot) <= {p.path for p in g.params()}  # what there was to remove
    assert not [p.path for p in g.params() if p.trainable]  # a valid() snapshot has no autodiff: all frozen
    assert not out.flags() and not [n for n in all_nodes(out) if n.op == "flag"]
    assert not adapter_paths(snapshot) & {p.path for p in out.params()}
    assert not REMOVED_OPS & {n.op for n in all_nodes(out)}
    assert not {"lora_merge", "dequantize"} & {n.op for n in all_nodes(out)}
    assert out.attributes["outputs"] == ("output",) and len(out.outputs) == 1


@pytest.mark.parametrize("arch,variant", LORA)
def test_inference_pipeline_valid_lora_graph_interprets_to_the_eager_output(arch: str, variant: str) -> None:
    snapshot, _, out, _, x = optimized(arch, variant)
    assert_close_to_eager(snapshot, out, x)


@pytest.mark.parametrize("arch", ARCHS)
def test_inference_pipeline_merged_weights_equal_materialize(arch: str) -> None:
    snapshot, g, _, _, _ = optimized(arch, "lora")
    merged = braze.optimize(g, ["specialize_flags", "fold_reparameterizations"])
    materialized = dict(snapshot.valid().materialize().named_param_slots())
    adapted = [path for path, p in snapshot.named_param_slots() if p.adapter is not None]
    assert adapted
    leaves = {p.path: p for p in merged.params()}
    for path in adapted:
        p = materialized[path]
        assert np.array_equal(merged.weights[path], p.val().numpy()), path
        assert (leaves[path].id, leaves[path].trainable) == (int(p.id), False)


@pytest.mark.parametrize("arch", ["mlp", "encoder"])
def test_inference_pipeline_keeps_the_merged_weights_to_the_end(arch: str) -> None:
    snapshot, _, out, _, _ = optimized(arch, "lora")
    materialized = dict(snapshot.valid().materialize().named_param_slots())
    for path, p in snapshot.named_param_slots():
        if p.adapter is not None:
            assert np.array_equal(out.weights[path], materialized[path].val().numpy()), path


@pytest.mark.parametrize("arch", ARCHS)
def test_inference_pipeline_keeps_the_trainable_adapters_of_a_training_module(arch: str) -> None:
    m, x = build(arch, "lora")
    g = braze.trace(m.eval(), braze.tensor(x))  # eval mode keeps autodiff: the adapters are still trainable
    reports: list[PassReport] = []
    out = braze.optimize(g, "inference", report=reports)
    assert adapter_paths(m) <= {p.path for p in out.params() if p.trainable}
    assert [n.op for n in all_nodes(out)].count("lora_merge") == len(adapter_paths(m)) // 2
    assert reports[0]["fold_reparameterizations"].notes[0].startswith("left unfolded (trainable leaves")
    np.testing.assert_allclose(ir.interpret(out, [x])[0], m(braze.tensor(x)).detach().numpy(), rtol=1e-5,
                               atol=1e-6)


def test_inference_pipeline_folds_the_cnn_batch_norms_into_the_convolutions() -> None:
    _, _, out, report, _ = optimized("cnn", "lora")
    assert report["fold_batchnorm"].notes == ("folded batch norm bn1 into conv1.weight and conv1.bias",
                                              "folded batch norm bn2 into conv2.weight and conv2.bias")
    assert not {p.path for p in out.params()} & {"bn1.running_mean", "bn2.num_batches_tracked", "bn2.weight"}


@pytest.mark.parametrize("arch", ARCHS)
def test_inference_pipeline_is_deterministic(arch: str) -> None:
    _, g, out, _, _ = optimized(arch, "lora")
    reread = ir.parse(str(g)).replace(weights=g.weights)
    assert str(braze.optimize(g, "inference")) == str(out) == str(braze.optimize(reread, "inference"))


QLORA = [pytest.param(a, policy, id=f"{a}-{policy}") for a in ARCHS for policy in ("keep", "merge", "auto")]


@pytest.mark.parametrize("arch,policy", QLORA)
def test_inference_pipeline_qlora_interprets_to_the_eager_output(arch: str, policy: str) -> None:
    snapshot, _, out, _, x = optimized(arch, "qlora", policy=policy)
    assert not out.flags() and not {"dropout", "batch_norm_flag"} & {n.op for n in all_nodes(out)}
    assert_close_to_eager(snapshot, out, x)


@pytest.mark.parametrize("arch", ARCHS)
def test_inference_pipeline_qlora_merge_reports_the_weight_error_per_parameter(arch: str) -> None:
    snapshot, g, _, report, _ = optimized(arch, "qlora", policy="merge")
    merged = braze.optimize(g, ["specialize_flags", "fold_reparameterizations"], policy="merge")
    info = report["fold_reparameterizations"].details["params"]
    notes = report["fold_reparameterizations"].notes
    quantized = [(path, p) for path, p in snapshot.named_param_slots() if p.adapter is not None]
    assert sorted(info) == sorted(path for path, _ in quantized)
    for path, p in quantized:
        base = p.base().numpy().astype(np.float64)
        a, b = (t.val().numpy().astype(np.float64) for t in (p.adapter.a, p.adapter.b))
        exact = base + p.adapter.scale * (b.reshape(b.shape[0], -1) @ a.reshape(a.shape[0], -1)).reshape(base.shape)
        err = np.abs(merged.weights[path] - exact).max()
        assert info[path]["choice"] == "merge"
        assert info[path]["max_abs_error"] == pytest.approx(err, rel=1e-9, abs=1e-15)
        assert info[path]["max_rel_error"] == pytest.approx(err / np.abs(exact).max(), rel=1e-9, abs=1e-15)
        assert any(n.startswith(f"{path}: merged (nf4 base + rank-4 adapter); policy merge; max abs error ")
                   for n in notes)


@pytest.mark.parametrize("arch", ARCHS)
def test_inference_pipeline_qlora_keep_leaves_every_base_quantized(arch: str) -> None:
    snapshot, _, out, report, _ = optimized(arch, "qlora", policy="keep")
    paths = {p.path for p in out.params()}
    info = report["fold_reparameterizations"].details["params"]
    for path, p in snapshot.named_param_slots():
        if p.adapter is not None:
            assert {f"{path}.codes", f"{path}.scales", f"{path}.lora_a", f"{path}.lora_b"} <= paths
            assert path not in paths and info[path]["choice"] == "keep" and info[path]["max_abs_error"] is None


@pytest.mark.parametrize("arch", ARCHS)
def test_inference_pipeline_qlora_auto_says_per_parameter_what_it_chose_and_why(arch: str) -> None:
    snapshot, _, out, report, _ = optimized(arch, "qlora")
    info = report["fold_reparameterizations"].details["params"]
    paths = {p.path for p in out.params()}
    for path, p in snapshot.named_param_slots():
        if p.adapter is None:
            continue
        choice, cost = info[path]["choice"], info[path]["cost"]
        assert choice == ("keep" if cost["keep"] < cost["merge"] else "merge")
        assert info[path]["reason"].startswith(f"auto: {choice} ")
        assert (path in paths) == (choice == "merge") and (f"{path}.codes" in paths) == (choice == "keep")
        assert (info[path]["max_abs_error"] is not None) == (choice == "merge")
