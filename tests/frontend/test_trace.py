"""braze.trace on real architectures (an MLP, a CNN with batch norm and dropout, a transformer encoder layer),
each plain, with LoRA and with a QLoRA base, in train mode, eval mode and as a valid() snapshot: the graph
reads back from its text, interpreting it repeats the eager forward pass bit for bit (dropout masks and
running-statistic updates included), its leaves carry the module's paths and ids, and the module is unchanged.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F
from braze import ir

from ..models import MLP

class CNN(nn.Module):
    """conv-bn-relu-pool twice, dropout, then a linear classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8, momentum=None)
        self.pool = nn.MaxPool2d(2)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(8 * 2 * 2, 10)

    def forward(self, x: Any) -> Any:
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = self.pool(F.relu(self.bn2(self.conv2(x))))
        return self.fc(self.drop(braze.flatten(x, 1)))


def make_encoder() -> nn.Module:
    return nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, activation="gelu", batch_first=True)


ARCHS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], list[str] | None]] = {
    "mlp": (MLP, (4, 8), None),
    "cnn": (CNN, (2, 3, 8, 8), ["conv1", "conv2", "fc"]),
    "encoder": (make_encoder, (2, 5, 16), None),
}
VARIANTS = ("plain", "lora", "lora_dropout", "qlora")
MODES = ("train", "eval", "valid")


def _perturb_adapters(m: nn.Module) -> None:
    """B starts at zero; give the adapters values so the composed weight differs from the base."""
    rng = np.random.default_rng(5)
    for _, p in m.named_param_slots():
        if p.adapter is not None:
            p.adapter.b.assign(rng.standard_normal(p.adapter.b.shape) * 0.1)


def build(arch: str, variant: str, mode: str) -> tuple[nn.Module, braze.Tensor]:
    """The model with every lazy parameter initialized, its reparameterization and mode applied, and an input."""
    make, shape, targets = ARCHS[arch]
    braze.manual_seed(0)
    m = make()
    if variant == "lora":
        m.apply_lora(nn.Lora(4, 8, targets=targets))
    elif variant == "lora_dropout":  # PEFT's adapter dropout: a path beside the base weight, with its own flag
        m.apply_lora(nn.Lora(4, 8, targets=targets, dropout=0.2))
    elif variant == "qlora":
        m.apply_qlora(nn.QLora(4, 8, targets=targets))
    if variant != "plain":
        _perturb_adapters(m)
    m.state_dict()  # initializes lazy parameters now, not inside the trace
    x = braze.tensor(np.random.default_rng(1).standard_normal(shape).astype(np.float32))
    if mode == "eval":
        m.eval()
    elif mode == "valid":
        m = m.valid()
    return m, x


def state(m: nn.Module) -> dict[str, Any]:
    """Everything tracing must leave alone: the state dict's arrays, the flags' values and the ids."""
    out: dict[str, Any] = {k: np.array(v, copy=True) for k, v in m.state_dict().items()}
    out.update({f"flag {path}": (f.value, f.configured) for path, f in m.named_flags()})
    out.update({f"id {path}": int(p.id) for path, p in m.named_param_slots()})
    return out


def assert_same_state(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), k


def trace_and_run(m: nn.Module, x: braze.Tensor) -> tuple[ir.Graph, list[np.ndarray], list[np.ndarray]]:
    """The traced graph, its interpreted outputs, and the eager outputs with the updated buffers (same seed)."""
    braze.manual_seed(11)
    g = braze.trace(m, x)
    interpreted = list(ir.interpret(g, [x.numpy()]))
    braze.manual_seed(11)
    eager = [np.array(m(x).detach().numpy())]
    after = m.state_dict()
    eager += [np.asarray(after[role.split(":", 1)[1]]) for role in g.attributes["outputs"][1:]]
    return g, interpreted, eager


CASES = [pytest.param(a, v, mode, id=f"{a}-{v}-{mode}") for a in ARCHS for v in VARIANTS for mode in MODES]


@pytest.mark.parametrize("arch,variant,mode", CASES)
def test_trace_text_round_trips(arch: str, variant: str, mode: str) -> None:
    g = braze.trace(*build(arch, variant, mode))
    text = str(g)
    assert ir.parse(text) == g
    assert str(ir.parse(text)) == text


@pytest.mark.parametrize("arch,variant,mode", CASES)
def test_trace_interpret_equals_eager_bit_for_bit(arch: str, variant: str, mode: str) -> None:
    g, interpreted, eager = trace_and_run(*build(arch, variant, mode))
    assert len(interpreted) == len(eager)
    for got, want in zip(interpreted, eager):
        assert got.dtype == want.dtype and np.array_equal(got, want)


@pytest.mark.parametrize("arch,variant,mode", CASES)
def test_trace_parsed_graph_interprets_with_the_traced_weights(arch: str, variant: str, mode: str) -> None:
    m, x = build(arch, variant, mode)
    g = braze.trace(m, x)
    for got, want in zip(ir.interpret(ir.parse(str(g)), [x.numpy()], params=g.weights), ir.interpret(g, [x.numpy()])):
        assert np.array_equal(got, want)


@pytest.mark.parametrize("arch,variant,mode", CASES)
def test_trace_leaves_the_module_unchanged(arch: str, variant: str, mode: str) -> None:
    m, x = build(arch, variant, mode)
    before = state(m)
    braze.trace(m, x)
    assert_same_state(state(m), before)


@pytest.mark.parametrize("arch", ARCHS)
def test_trace_param_leaves_carry_the_module_paths_ids_and_trainability(arch: str) -> None:
    m, x = build(arch, "plain", "train")
    slots = dict(m.named_param_slots())
    leaves = braze.trace(m, x).params()
    assert {leaf.path for leaf in leaves} == set(slots)
    for leaf in leaves:
        p = slots[leaf.path]
        assert (leaf.id, leaf.trainable, leaf.buffer) == (int(p.id), p.is_require_grad(), p.is_buffer)
        assert leaf.type == ir.type_of(p.val().detach().numpy())


@pytest.mark.parametrize("arch", ARCHS)
def test_trace_weights_share_the_module_arrays(arch: str) -> None:
    m, x = build(arch, "plain", "eval")
    g = braze.trace(m, x)
    slots = dict(m.named_param_slots())
    assert set(g.weights) == set(slots)
    for path, array in g.weights.items():
        assert array is slots[path].val()._data


@pytest.mark.parametrize("arch", ARCHS)
def test_trace_lora_graph_has_base_and_adapter_leaves_with_the_module_ids(arch: str) -> None:
    m, x = build(arch, "lora", "train")
    g = braze.trace(m, x)
    leaves = {leaf.path: leaf for leaf in g.params()}
    adapted = [(path, p) for path, p in m.named_param_slots() if p.adapter is not None]
    assert adapted
    merges = [n for n in g.nodes if n.op == "lora_merge"]
    for path, p in adapted:
        base, a, b = leaves[path], leaves[f"{path}.lora_a"], leaves[f"{path}.lora_b"]
        assert (base.id, base.trainable) == (int(p.id), False)
        assert (a.id, a.trainable) == (int(p.adapter.a.id), True)
        assert (b.id, b.trainable) == (int(p.adapter.b.id), True)
        merge = next(n for n in merges if n.inputs[0] == base.out)
        assert merge.inputs == (base.out, a.out, b.out) and merge.attr["scale"] == pytest.approx(p.adapter.scale)


@pytest.mark.parametrize("arch", ARCHS)
def test_trace_qlora_base_is_codes_and_scales_leaves_and_a_dequantize(arch: str) -> None:
    m, x = build(arch, "qlora", "eval")
    g = braze.trace(m, x)
    leaves = {leaf.path: leaf for leaf in g.params()}
    quantized = [(path, p) for path, p in m.named_param_slots() if p.adapter is not None]
    assert quantized
    for path, p in quantized:
        codes, scales = leaves[f"{path}.codes"], leaves[f"{path}.scales"]
        assert codes.id == scales.id == int(p.id) and not codes.trainable
        assert codes.type.dtype == ir.uint8 and scales.type.dtype == ir.float32
        dequantize = next(n for n in g.nodes if n.op == "dequantize" and n.inputs == (codes.out, scales.out))
        merge = next(n for n in g.nodes if n.op == "lora_merge" and n.inputs[0] == dequantize.out)
        assert merge.inputs[1:] == (leaves[f"{path}.lora_a"].out, leaves[f"{path}.lora_b"].out)


def test_trace_train_mode_cnn_has_flag_leaves_with_the_flags_paths() -> None:
    m, x = build("cnn", "plain", "train")
    flags = {f.path: f for f in braze.trace(m, x).flags()}
    module_flags = dict(m.named_flags())
    assert set(flags) == {"bn1.training", "bn2.training", "drop.training"} == set(module_flags)
    for path, leaf in flags.items():
        assert leaf.value is True and leaf.id == int(module_flags[path].id)


def test_trace_flags_feed_dropout_and_batch_norm_as_operands() -> None:
    m, x = build("cnn", "plain", "train")
    g = braze.trace(m, x)
    by_path = {f.path: f.out for f in g.flags()}
    assert next(n for n in g.nodes if n.op == "dropout").inputs[1] == by_path["drop.training"]
    norms = [n for n in g.nodes if n.op == "batch_norm_flag"]
    assert [n.inputs[5] for n in norms] == [by_path["bn1.training"], by_path["bn2.training"]]


def test_trace_eval_mode_records_false_flags() -> None:
    m, x = build("cnn", "plain", "eval")
    assert [f.value for f in braze.trace(m, x).flags()] == [False, False, False]


def test_trace_train_mode_batch_norm_updates_are_buffer_outputs() -> None:
    m, x = build("cnn", "plain", "train")
    g = braze.trace(m, x)
    stats = [f"{bn}.{name}" for bn in ("bn1", "bn2") for name in ("num_batches_tracked", "running_mean", "running_var")]
    assert g.attributes["outputs"] == ("output", *(f"buffer_update:{s}" for s in stats))
    assert len(g.outputs) == 1 + len(stats)
    buffers = {leaf.path for leaf in g.params() if leaf.buffer}
    assert buffers == set(stats)
    assert all(not leaf.trainable for leaf in g.params() if leaf.buffer)


def test_trace_one_batch_norm_graph_serves_both_modes() -> None:
    m, x = build("cnn", "plain", "train")
    g = braze.trace(m, x)
    off = {f.path: False for f in g.flags()}
    interpreted = ir.interpret(g, [x.numpy()], flags=off)
    m.eval()
    assert np.array_equal(interpreted[0], m(x).detach().numpy())
    for role, value in zip(g.attributes["outputs"][1:], interpreted[1:]):
        assert np.array_equal(value, m.state_dict()[role.split(":", 1)[1]])  # eval: statistics unchanged


def test_trace_encoder_has_a_flag_per_dropout_and_the_attention() -> None:
    m, x = build("encoder", "plain", "train")
    paths = [f.path for f in braze.trace(m, x).flags()]
    assert sorted(paths) == sorted(path for path, _ in m.named_flags())
    assert "self_attn.training" in paths


def test_trace_valid_snapshot_has_no_trainable_autodiff_but_keeps_ids() -> None:
    m, x = build("mlp", "plain", "train")
    g = braze.trace(m.valid(), x)
    assert {leaf.path: leaf.id for leaf in g.params()} == {path: int(p.id) for path, p in m.named_param_slots()}
    assert [f.value for f in g.flags()] == [False]


@pytest.mark.parametrize("arch", ARCHS)
def test_trace_lora_adapter_dropout_has_its_own_flag_leaf(arch: str) -> None:
    m, x = build(arch, "lora_dropout", "train")
    g = braze.trace(m, x)
    with_dropout = [path for path, p in m.named_param_slots() if p.adapter is not None and p.adapter.flag is not None]
    assert with_dropout
    flags = {f.path: f for f in g.flags()}
    module_flags = dict(m.named_flags())
    for path in with_dropout:
        leaf = flags[f"{path}.lora_dropout"]
        assert leaf.value is True and leaf.id == int(module_flags[f"{path}.lora_dropout"].id)
        assert any(n.op == "dropout" and n.inputs[1] == leaf.out for n in g.nodes)
