"""Document 002, Param with adapters: val() composing base and adapter, base(), adapter(), consume(), mappers
observing the structural base, and the reparameterization methods of a lone parameter's Module implementation.

Each test's docstring quotes the sentence it checks. `param.adapter.a` is PEFT's lora_A (rank, in) and
`param.adapter.b` its lora_B (out, rank): the document's "a @ b" product of the factors is b @ a in these shapes.
"""
from __future__ import annotations

import numpy as np

import braze
from braze import nn
from braze.nn import Lora, ModuleMapper, Param, ParamGroup, QLora, Quantizer


def arr(t):
    return np.asarray(t).astype(np.float64)


def adapted(seed=0) -> nn.Linear:
    """A Linear with a LoRA adapter whose factors both hold values."""
    rng = np.random.default_rng(seed)
    lin = nn.Linear(4, 3).apply_lora(Lora(2, 6))
    lin.weight.adapter.a.assign(rng.standard_normal((2, 4)))
    lin.weight.adapter.b.assign(rng.standard_normal((3, 2)))
    return lin


def test_val_returns_the_composed_value():
    """ "When a LoRA adapter is attached, this returns the composed value base + scale * (a @ b) rather than the
    raw stored base." """
    p = adapted().weight
    ad = p.adapter
    np.testing.assert_allclose(arr(p.val()), arr(p.base()) + 3.0 * arr(ad.b) @ arr(ad.a), rtol=1e-6, atol=1e-6)
    assert not np.allclose(arr(p.val()), arr(p.base()))


def test_base_reads_the_raw_value():
    """ "Use base to access the raw stored value without composition." """
    lin = nn.Linear(4, 3)
    stored = lin.weight.val()
    lin.apply_lora(Lora(2, 6))
    assert lin.weight.base() is stored


def test_base_is_the_frozen_base_with_an_adapter():
    """ "Gets the raw stored parameter value (the frozen base when a LoRA adapter is attached), without applying
    any adapter composition." """
    p = adapted().weight
    assert p.base().is_leaf and not p.base().requires_grad and p.val().requires_grad


def test_adapter_is_the_attached_lora_adapter():
    """ "The LoRA adapter attached to this parameter, if any." """
    lin = adapted()
    assert isinstance(lin.weight.adapter, nn.LoraAdapter) and lin.bias.adapter is None


def test_consume_returns_the_base_and_drops_the_adapter():
    """ "Returns the raw stored value (the frozen base when a LoRA adapter is attached); any adapter is
    dropped." """
    p = adapted().weight
    pid, value, mapper = p.consume()
    assert pid == p.id and value is p.base() and mapper is p.mapper
    assert Param.initialized(pid, value).adapter is None


def test_mappers_observe_the_structural_base():
    """ "Module traversals strip the adapter before calling into map_float, so mappers always observe the
    structural base." """
    seen = {}

    class Observe(ModuleMapper):
        def map_float(self, path, param):
            seen[path] = (param.adapter, np.array(param.val(), copy=True))
            return param
    lin = adapted()
    base = arr(lin.weight.base())
    lin.map(Observe())
    assert seen["weight"][0] is None and np.array_equal(seen["weight"][1], base)
    assert lin.weight.adapter is not None and "weight.lora_a" in seen


def test_lone_param_quantize_weights_group():
    """ "Quantize the weights of the given parameter group." (a lone parameter is the group's module) """
    p = Param(np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32))
    assert p.quantize_weights_group(Quantizer("int8"), ParamGroup.paths("other")).stored_tensors()[0][0] == ""
    assert p.quantize_weights_group(Quantizer("int8"), ParamGroup.all()).stored_tensors()[0][0] == ".codes"


def test_lone_param_quantize_weights():
    """ "Quantize the weights of the module." """
    p = Param(np.ones((2, 64), np.float32)).quantize_weights(Quantizer("nf4"))
    assert [s for s, _ in p.stored_tensors()] == [".codes", ".scales"]
    np.testing.assert_array_equal(arr(p.val()), np.ones((2, 64)))


def test_lone_param_apply_lora():
    """ "Attach LoRA adapters to the module's 2-D weights, freezing the base weights." """
    p = Param(braze.ones(3, 5)).apply_lora(Lora(2, 2))
    assert p.adapter.a.shape == (2, 5) and p.adapter.b.shape == (3, 2)
    assert not p.requires_grad and p.adapter.a.requires_grad
    assert [k for k, _ in p.named_param_slots()] == ["", "lora_a", "lora_b"]


def test_lone_param_apply_qlora():
    """ "Apply QLoRA to the module: quantize the (frozen) base weights and attach trainable LoRA adapters to 2-D
    weights." """
    p = Param(braze.ones(3, 5)).apply_qlora(QLora(2, 2))
    assert p.stored_tensors()[0][0] == ".codes" and not p.requires_grad and p.adapter.b.requires_grad
    record = p.into_record()
    assert list(record) == ["codes", "scales", "lora_a", "lora_b"]
    again = Param(braze.zeros(3, 5)).apply_qlora(QLora(2, 2)).load_record(record)
    np.testing.assert_array_equal(arr(again.val()), arr(p.val()))
