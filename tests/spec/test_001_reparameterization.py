"""Document 001, the Module interface's reparameterizations: apply_reparameterization, apply_lora, apply_qlora,
quantize_weights, materialize, and what valid(), set_require_grad and unfreeze do to them (plus the sentence of
document 000 about their nested parameters in traversals).

Each test's docstring quotes the sentence it checks. In braze a LoRA adapter's factors are `param.adapter.a`
(PEFT's lora_A, (rank, in)) and `param.adapter.b` (lora_B, (out, rank)), so the document's "a @ b" product of the
factors is b @ a in these shapes.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

import braze
import braze.nn.functional as F
from braze import BrazeError, nn
from braze.nn import Lora, ModuleVisitor, Param, ParamGroup, QLora, Quantizer, Reparameterization, Reparameterizer


class Net(nn.Module):
    """Linear layers around batch norm and dropout: weights, biases, buffers and flags."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 6)
        self.norm = nn.BatchNorm1d(6)
        self.drop = nn.Dropout(0.5)
        self.head = nn.Linear(6, 2)

    def forward(self, x):
        return self.head(self.drop(self.norm(self.fc(x))))


def perturb(model, seed=0):
    """Give every adapter factor values (b starts at zero)."""
    rng = np.random.default_rng(seed)
    for p in model.parameters():
        if p.adapter is not None:
            p.adapter.a.assign(rng.standard_normal(p.adapter.a.shape) * 0.5)
            p.adapter.b.assign(rng.standard_normal(p.adapter.b.shape) * 0.5)
    return model


def arr(t):
    return np.asarray(t).astype(np.float64)


def x():
    return braze.randn(8, 4)


class Scale(Reparameterization):
    """A custom reparameterization: the stored base times a trainable scalar."""

    def compose(self, base):
        return base * self.params["gain"].val()


class ScaleWeights(Reparameterizer):
    """Attaches Scale to every 2-D parameter and records what it was offered."""

    def __init__(self) -> None:
        self.offered = []

    def reparameterize(self, path, param, owner):
        self.offered.append((path, type(owner).__name__))
        if len(param.shape) != 2:
            return None
        return Scale({"gain": Param(braze.full((1, 1), 2.0))})


# --- valid ------------------------------------------------------------------------------------------------------
def test_valid_preserves_reparameterizations_and_quantized_bases():
    """ "Parameter reparameterizations and their stored bases are preserved, including quantized bases." """
    m = perturb(Net().apply_qlora(QLora(2, 4)))
    v = m.valid()
    assert v.fc.weight.adapter is not None and v.fc.weight.stored_tensors()[0][0] == ".codes"
    np.testing.assert_array_equal(arr(v.fc.weight.val()), arr(m.fc.weight.val()))


def test_valid_puts_nested_modules_into_validation_mode():
    """ "Their nested modules are also put into validation mode." (the adapter's factors lose autodiff and its
    dropout flag turns off, configured value kept) """
    m = Net().apply_lora(Lora(2, 2, dropout=0.1))
    ad = m.valid().fc.weight.adapter
    assert not ad.a.is_autodiff() and not ad.b.requires_grad and not bool(ad.flag) and ad.flag.configured
    assert m.fc.weight.adapter.a.requires_grad and bool(m.fc.weight.adapter.flag)


def test_valid_does_not_fold_use_materialize():
    """ "Use materialize explicitly to fold reparameterizations into weights." """
    m = Net().apply_lora(Lora(2, 2))
    assert m.valid().fc.weight.adapter is not None
    assert m.valid().materialize().fc.weight.adapter is None


# --- materialize ------------------------------------------------------------------------------------------------
def test_materialize_folds_and_removes_reparameterizations():
    """ "Fold parameter reparameterizations into their effective values and remove them." """
    m = perturb(Net().apply_lora(Lora(2, 4)))
    effective = arr(m.fc.weight.val())
    m.materialize()
    assert m.fc.weight.adapter is None and "fc.weight.lora_a" not in dict(m.named_parameters())
    np.testing.assert_array_equal(arr(m.fc.weight), effective)


def test_materialize_replaces_each_parameter_by_its_composed_value():
    """ "Each reparameterized parameter is replaced by the value computed from its stored base and
    reparameterization state." """
    m = perturb(Net().apply_lora(Lora(2, 4)))
    ad, base = m.head.weight.adapter, arr(m.head.weight.base())
    want = base + ad.scale * arr(ad.b) @ arr(ad.a)
    m.materialize()
    np.testing.assert_allclose(arr(m.head.weight), want, rtol=1e-6, atol=1e-6)


def test_materialize_leaves_other_parameters_and_flags():
    """ "Other parameters and module training flags are unchanged." """
    m = Net().apply_lora(Lora(2, 4)).eval()
    bias, flags = arr(m.fc.bias), [(bool(f), f.configured) for f in m.flags()]
    bias_param = m.fc.bias
    m.materialize()
    assert m.fc.bias is bias_param and np.array_equal(arr(m.fc.bias), bias)
    assert [(bool(f), f.configured) for f in m.flags()] == flags


def test_materialized_parameters_keep_ids_mappers_trainability_and_are_detached():
    """ "The resulting parameters retain their base parameter IDs, layout mappings and configured trainability,
    but are detached from the computation that produced them." """
    m = perturb(Net().apply_lora(Lora(2, 4)))
    m.fc.weight.load_mapper(lambda t: t)
    kept = (m.fc.weight.id, m.fc.weight.mapper, m.fc.weight.is_require_grad())
    m.materialize()
    assert (m.fc.weight.id, m.fc.weight.mapper, m.fc.weight.is_require_grad()) == kept
    assert m.fc.weight.val().is_leaf and m.fc.weight.val()._node is None


def test_materialize_does_not_initialize_plain_parameters():
    """ "Parameters without reparameterizations remain lazy; this does not initialize them." """
    m = Net().apply_lora(Lora(2, 4, targets=["head"])).materialize()
    assert not m.fc.weight.is_initialized and not m.fc.bias.is_initialized


def test_materialize_cannot_be_undone():
    """ "This consumes the module and cannot be undone on the returned value." """
    m = Net().apply_lora(Lora(2, 4))
    assert m.materialize() is m and all(p.adapter is None for p in m.parameters())
    m.train().valid()
    assert all(p.adapter is None for p in m.parameters())


def test_clone_first_to_keep_the_reparameterizations():
    """ "Clone the module first to retain its reparameterizations." """
    m = perturb(Net().apply_lora(Lora(2, 4)))
    m(x())
    kept = copy.deepcopy(m)
    m.materialize()
    assert kept.fc.weight.adapter is not None
    np.testing.assert_allclose(arr(kept.fc.weight.val()), arr(m.fc.weight), rtol=1e-6, atol=1e-6)


def test_valid_then_materialize_gives_merged_inference_weights():
    """ "To prepare merged inference weights, use model.valid().materialize(); materialization alone does not
    switch to validation mode." """
    m = perturb(Net().apply_lora(Lora(2, 4)))
    inputs = x()
    merged = m.valid().materialize()
    assert not merged.fc.weight.is_autodiff() and not merged.training
    np.testing.assert_allclose(arr(merged(inputs)), arr(m.valid()(inputs)), rtol=1e-5, atol=1e-5)
    alone = copy.deepcopy(m).materialize()
    assert alone.training and alone.fc.weight.is_autodiff() and bool(alone.drop.flag("training"))


def test_lora_adapters_merge_into_dense_weights():
    """ "LoRA adapters are merged into dense weights." """
    m = perturb(Net().apply_lora(Lora(2, 4))).materialize()
    assert m.fc.weight.stored_tensors()[0][0] == "" and m.fc.weight.dtype == braze.float32


def test_qlora_materializes_a_dense_effective_weight():
    """ "For QLoRA this also replaces the packed base with a dense effective weight, which can substantially
    increase memory use." """
    m = perturb(Net().apply_qlora(QLora(2, 4)))
    packed = sum(t.numel() * t.dtype.bits // 8 for _, t in m.fc.weight.stored_tensors())
    effective = arr(m.fc.weight.val())
    m.materialize()
    (suffix, dense), = m.fc.weight.stored_tensors()
    assert suffix == "" and dense.numel() * 4 > packed
    np.testing.assert_array_equal(arr(dense), effective)


def test_requantization_is_separate_and_may_change_outputs():
    """ "Requantization must be requested separately and may change the model's outputs." """
    m = perturb(Net().apply_qlora(QLora(2, 4))).valid().materialize()
    assert all(suffix == "" for p in m.parameters() for suffix, _ in p.stored_tensors())
    inputs = x()
    before = arr(m(inputs))
    m.quantize_weights(Quantizer("int4", block_size=8))
    assert not np.allclose(arr(m(inputs)), before, atol=1e-6)


# --- gradient configuration -------------------------------------------------------------------------------------
def test_set_require_grad_true_overrides_the_frozen_lora_bases():
    """ "Setting this to true overrides selective gradient configurations such as the frozen dense base weights
    established by apply_lora." """
    m = Net().apply_lora(Lora(2, 2)).set_require_grad(True)
    assert all(p.requires_grad for p in m.parameters())


def test_unfreeze_overwrites_the_frozen_lora_bases():
    """ "This overwrites selective gradient configurations, including frozen dense base weights established by
    apply_lora." """
    m = Net().apply_lora(Lora(2, 2)).freeze().unfreeze()
    assert all(p.requires_grad for p in m.parameters()) and all(bool(f) for f in m.flags())


# --- quantization -----------------------------------------------------------------------------------------------
def test_quantize_weights_quantizes_the_module_weights():
    """ "Quantize the weights of the module." """
    m = Net().quantize_weights(Quantizer("int8"))
    assert [k for k, p in m.named_parameters() if p.stored_tensors()[0][0] == ".codes"] == ["fc.weight",
                                                                                           "head.weight"]


def test_quantize_weights_group_quantizes_only_the_group():
    """ "Quantize the weights of the given parameter group." """
    m = Net().quantize_weights_group(Quantizer("nf4"), ParamGroup.paths("head.*"))
    assert [k for k, p in m.named_parameters() if p.stored_tensors()[0][0] == ".codes"] == ["head.weight"]


# --- apply_reparameterization -----------------------------------------------------------------------------------
def test_apply_reparameterization_attaches_what_the_reparameterizer_returns():
    """ "Attach reparameterizations using the given Reparameterizer." """
    m = Net().apply_reparameterization(ScaleWeights())
    assert isinstance(m.fc.weight.adapter, Scale) and m.fc.bias.adapter is None
    np.testing.assert_array_equal(arr(m.fc.weight.val()), 2 * arr(m.fc.weight.base()))


def test_every_float_parameter_is_offered_with_its_module_path():
    """ "Every floating-point parameter is passed to the reparameterizer along with its module path." """
    r = ScaleWeights()
    Net().apply_reparameterization(r)
    assert r.offered == [("fc.weight", "Linear"), ("fc.bias", "Linear"), ("norm.weight", "BatchNorm1d"),
                         ("norm.bias", "BatchNorm1d"), ("head.weight", "Linear"), ("head.bias", "Linear")]


def test_reparameterizer_prepares_the_base_and_creates_the_state():
    """ "The reparameterizer prepares its structural base and optionally creates the state used by Param::val."
    (QLoRA quantizes the base and returns the adapter val() composes) """
    m = Net().apply_qlora(QLora(2, 2))
    p = m.fc.weight
    assert p.stored_tensors()[0][0] == ".codes" and p.adapter is not None and m.fc.bias.adapter is None
    np.testing.assert_array_equal(arr(p.val()), arr(p.base()))  # b starts at zero


def test_nested_reparameterizations_are_not_supported():
    """ "Nested reparameterizations are not supported." """
    with pytest.raises(BrazeError, match="nested reparameterizations are not supported"):
        Net().apply_lora(Lora(2, 2)).apply_reparameterization(ScaleWeights())


def test_only_modules_without_reparameterized_parameters():
    """ "This method should only be called on modules that don't already contain reparameterized parameters."
    (the refusal changes nothing) """
    m = Net().apply_lora(Lora(2, 2, targets=["head"]))
    with pytest.raises(BrazeError, match="head.weight already has a LoraAdapter"):
        m.apply_lora(Lora(2, 2, targets=["fc"]))
    assert m.fc.weight.adapter is None


# --- apply_lora -------------------------------------------------------------------------------------------------
def test_apply_lora_attaches_adapters_to_2d_weights_and_freezes_all_bases():
    """ "Attach LoRA adapters to the module's 2-D weights, freezing all base tensor parameters." """
    m = Net().apply_lora(Lora(2, 2))
    assert [k for k, p in m.named_parameters() if p.adapter is not None] == ["fc.weight", "head.weight"]
    assert [k for k, p in m.named_parameters() if p.requires_grad] == [
        "fc.weight.lora_a", "fc.weight.lora_b", "head.weight.lora_a", "head.weight.lora_b"]


def test_adapted_module_works_unchanged_and_trains_only_adapters():
    """ "The same module keeps working without any code changes; adapted weights now produce base + scale *
    (a @ b), and only the adapter factors are trainable." """
    m = perturb(Net().apply_lora(Lora(2, 4)))
    ad = m.fc.weight.adapter
    want = arr(m.fc.weight.base()) + 2.0 * arr(ad.b) @ arr(ad.a)
    np.testing.assert_allclose(arr(m.fc.weight.val()), want, rtol=1e-6, atol=1e-6)
    F.mse_loss(m(x()), braze.zeros(8, 2)).backward()
    assert {k for k, p in m.named_parameters() if p.grad is not None} == {
        "fc.weight.lora_a", "fc.weight.lora_b", "head.weight.lora_a", "head.weight.lora_b"}


def test_apply_lora_preserves_flags():
    """ "Module-owned control flags are preserved, so dropout and batch normalization keep their current training
    behavior." """
    m = Net()
    m.drop.flag("training").set(False)
    m.apply_lora(Lora(2, 2))
    assert bool(m.norm.flag("training")) and not bool(m.drop.flag("training"))
    steps = int(m.norm.num_batches_tracked.item())
    m(x())
    assert int(m.norm.num_batches_tracked.item()) == steps + 1


def test_freeze_before_lora_to_freeze_control_behaviour():
    """ "Call freeze before this method if the base module's control behavior and running statistics should
    also be frozen." """
    m = Net().freeze().apply_lora(Lora(2, 2))
    mean = arr(m.norm.running_mean)
    m(x())
    assert not any(bool(f) for f in m.flags()) and np.array_equal(arr(m.norm.running_mean), mean)
    assert m.fc.weight.adapter.a.requires_grad


# --- apply_qlora ------------------------------------------------------------------------------------------------
def test_apply_qlora_quantizes_the_bases_and_attaches_trainable_adapters():
    """ "Apply QLoRA to the module: quantize the (frozen) base tensor parameters and attach trainable LoRA
    adapters to 2-D weights." """
    m = Net().apply_qlora(QLora(2, 4))
    for name in ("fc", "head"):
        p = getattr(m, name).weight
        assert p.stored_tensors()[0][0] == ".codes" and not p.requires_grad
        assert p.adapter.a.requires_grad and p.adapter.b.requires_grad
    assert not m.fc.bias.requires_grad


def test_qlora_training_materializes_dense_weights():
    """ "Dense effective weights can still materialize during training, even with fusion enabled." (each forward
    dequantizes to a dense value) """
    m = Net().apply_qlora(QLora(2, 4))
    dense = m.fc.weight.val()
    assert dense.shape == (6, 4) and dense.dtype == braze.float32 and dense.requires_grad


def test_apply_qlora_preserves_flags():
    """ "Module-owned control flags are preserved." """
    m = Net().eval().apply_qlora(QLora(2, 4, dropout=0.1))
    assert not any(bool(f) for f in m.flags()) and all(f.configured for f in m.flags())


# --- document 000 -----------------------------------------------------------------------------------------------
def test_nested_parameters_participate_in_traversals():
    """ "Reparameterizations such as LoRA have nested parameters that participate in these traversals." """
    paths = []

    class Paths(ModuleVisitor):
        def visit_float(self, path, param):
            paths.append(path)
    m = Net().apply_lora(Lora(2, 2, targets=["head"]))
    m.visit(Paths())
    assert [p for p in paths if p.startswith("head")] == ["head.weight", "head.weight.lora_a",
                                                          "head.weight.lora_b", "head.bias"]
