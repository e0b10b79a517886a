"""materialize(): reparameterizations and quantized bases folded into dense parameters equal to their effective
values, with ids, mappers, trainability, laziness and flags as document 001 specifies."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import braze
import braze.nn.functional as F
from braze import nn
from braze.nn import Lora, QLora, Quantizer


class Net(nn.Module):
    """Every rule: an embedding, attention, a convolution-free MLP head with dropout and layer norm."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, 8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.fc = nn.Linear(8, 16)
        self.drop = nn.Dropout(0.2)
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 3)

    def forward(self, tokens):
        x = self.embed(tokens)
        x = x + self.attn(x, x, x)[0]
        return self.head(self.norm(self.drop(F.gelu(self.fc(x)))))


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.grouped = nn.Conv2d(4, 4, 3, groups=2)
        self.head = nn.Linear(4 * 3 * 3, 2)

    def forward(self, x):
        return self.head(F.relu(self.grouped(F.relu(self.conv(x)))).flatten(1))


def randomize_adapters(model, seed=0, size=0.3):
    rng = np.random.default_rng(seed)
    for p in model.parameters():
        if p.adapter is not None:
            p.adapter.a.assign(rng.standard_normal(p.adapter.a.shape) * size)
            p.adapter.b.assign(rng.standard_normal(p.adapter.b.shape) * size)


def tokens():
    return braze.tensor(np.random.default_rng(0).integers(0, 11, (2, 5)))


CASES = {
    "lora-r1": (Net, lambda: Lora(1, 2, targets=["embed", "attn", "fc", "head"]), tokens),
    "lora-r4-dropout": (Net, lambda: Lora(4, 8, targets=["embed", "attn", "fc", "head"], dropout=0.1), tokens),
    "lora-rslora": (Net, lambda: Lora(8, 4, use_rslora=True), tokens),
    "qlora-nf4": (Net, lambda: QLora(4, 8), tokens),
    "qlora-int8": (Net, lambda: QLora(2, 4, quantizer=Quantizer("int8"), dropout=0.2), tokens),
    "conv": (ConvNet, lambda: Lora(2, 4, targets=["conv", "grouped", "head"]), lambda: braze.randn(2, 3, 5, 5)),
    "conv-dropout": (ConvNet, lambda: Lora(3, 3, targets=["conv", "head"], dropout=0.3),
                     lambda: braze.randn(2, 3, 5, 5)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_materialized_outputs_equal_the_adapted_outputs(case):
    build, reparam, make_input = CASES[case]
    braze.manual_seed(0)
    model = build().apply_reparameterization(reparam())
    randomize_adapters(model)
    x = make_input()
    adapted = np.asarray(model.valid()(x))
    merged = model.valid().materialize()
    assert not any(p.adapter is not None for p in merged.parameters())
    np.testing.assert_allclose(np.asarray(merged(x)), adapted, rtol=1e-5, atol=1e-5)


def test_materialize_keeps_ids_mappers_and_configured_trainability():
    model = Net().apply_lora(Lora(2, 2))
    model.fc.weight.save_mapper(lambda t: t * 1)
    model.head.weight.set_require_grad(True)
    before = {path: (p.id, p.mapper, p.is_require_grad()) for path, p in model.named_parameters()
              if not path.endswith(("lora_a", "lora_b"))}
    model.materialize()
    assert {path: (p.id, p.mapper, p.is_require_grad()) for path, p in model.named_parameters()} == before


def test_materialized_parameters_are_detached_leaves_in_the_module_autodiff_context():
    model = Net().apply_lora(Lora(2, 2)).materialize()
    w = model.fc.weight
    assert w.val().is_leaf and w.is_autodiff() and not w.requires_grad
    assert w.val() is w.val()  # a plain stored value again
    merged = Net().apply_lora(Lora(2, 2)).valid().materialize()
    assert not merged.fc.weight.is_autodiff()


def test_materialize_leaves_parameters_without_reparameterizations_lazy():
    model = Net().apply_lora(Lora(2, 2, targets=["head"])).materialize()
    assert model.head.weight.is_initialized
    assert not model.fc.weight.is_initialized and not model.embed.weight.is_initialized


def test_materialize_leaves_flags_and_training_mode_alone():
    model = Net().apply_lora(Lora(2, 2, dropout=0.1))
    model.materialize()
    assert [k for k, _ in model.named_flags()] == ["attn.training", "drop.training"]
    assert all(bool(f) for f in model.flags()) and model.training


def test_valid_then_materialize_leaves_the_training_model_adapted():
    model = Net().apply_qlora(QLora(2, 4))
    randomize_adapters(model)
    merged = model.valid().materialize()
    assert model.fc.weight.adapter is not None and model.fc.weight.stored_tensors()[0][0] == ".codes"
    assert merged.fc.weight.stored_tensors()[0][0] == "" and merged.fc.weight.id == model.fc.weight.id
    np.testing.assert_allclose(np.asarray(merged.fc.weight), np.asarray(model.fc.weight.val()), rtol=1e-6, atol=1e-6)


def test_a_deep_copy_keeps_its_reparameterizations_when_the_original_materializes():
    model = Net().apply_lora(Lora(2, 2))
    randomize_adapters(model)
    model(tokens())  # a deep copy of a lazy parameter initializes on its own; share the values first
    kept = copy.deepcopy(model)
    model.materialize()
    assert kept.fc.weight.adapter is not None and model.fc.weight.adapter is None
    np.testing.assert_allclose(np.asarray(kept.fc.weight.val()), np.asarray(model.fc.weight), rtol=1e-6)


def test_materialize_dequantizes_a_plain_quantized_model():
    model = Net().quantize_weights(Quantizer("int8"))
    expected = np.asarray(model.fc.weight.val())
    model.materialize()
    np.testing.assert_array_equal(np.asarray(model.fc.weight), expected)
    assert model.fc.weight.requires_grad


def test_materialize_returns_the_module():
    model = Net()
    assert model.materialize() is model
