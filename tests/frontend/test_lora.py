"""LoRA: factor shapes and initialization, the PEFT formula (checked in numpy), selection rules, adapter dropout,
training only the adapters, traversals and records."""
from __future__ import annotations

import math
import runpy
from pathlib import Path

import numpy as np
import pytest

import braze
import braze.nn.functional as F
from braze import BrazeError, RecordError, nn
from braze.nn import Lora, ModuleMapper, ModuleVisitor, ParamGroup


class MLP(nn.Module):
    def __init__(self, dims=(6, 8, 3)) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dims[0], dims[1])
        self.drop = nn.Dropout(0.25)
        self.fc2 = nn.Linear(dims[1], dims[2])

    def forward(self, x):
        return self.fc2(self.drop(F.relu(self.fc1(x))))


def randomize_adapters(model: nn.Module, seed: int = 0) -> None:
    """B starts at zero; give both factors values so the adapted weight differs from the base (every lazy
    parameter is initialized, so later draws of the global generator are the forward pass's own)."""
    rng = np.random.default_rng(seed)
    for p in model.parameters():
        p.base()
        if p.adapter is not None:
            p.adapter.a.assign(rng.standard_normal(p.adapter.a.shape))
            p.adapter.b.assign(rng.standard_normal(p.adapter.b.shape))


def arr(t) -> np.ndarray:
    return np.array(np.asarray(t), dtype=np.float64)


def peft_weight(base, a, b, alpha, rank, rslora=False):
    """PEFT's merged weight, computed independently: W + (alpha / r or alpha / sqrt(r)) * (B @ A) in float64."""
    scale = alpha / math.sqrt(rank) if rslora else alpha / rank
    return arr(base) + scale * (arr(b).reshape(arr(b).shape[0], rank) @ arr(a).reshape(rank, -1)).reshape(
        arr(base).shape)


# --- configuration -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rank,alpha,rslora,want", [(4, 8, False, 2.0), (8, 8, True, 8 / math.sqrt(8)),
                                                    (2, 1, False, 0.5), (16, 32, True, 8.0)])
def test_lora_scale_is_alpha_over_rank_or_its_square_root(rank, alpha, rslora, want):
    assert Lora(rank, alpha, use_rslora=rslora).scale == pytest.approx(want)


@pytest.mark.parametrize("kwargs", [dict(rank=0, alpha=1), dict(rank=2.5, alpha=1), dict(rank=2, alpha="a"),
                                    dict(rank=2, alpha=1, dropout=1.0), dict(rank=2, alpha=1, init="normal"),
                                    dict(rank=2, alpha=1, targets=[])])
def test_lora_rejects_bad_configuration(kwargs):
    with pytest.raises(BrazeError):
        Lora(**kwargs)


# --- factors ----------------------------------------------------------------------------------------------------
def test_lora_factor_shapes_ids_and_trainability():
    m = MLP().apply_lora(Lora(3, 6))
    ad = m.fc1.weight.adapter
    assert ad.a.shape == (3, 6) and ad.b.shape == (8, 3) and ad.rank == 3 and ad.scale == 2.0
    assert len({int(m.fc1.weight.id), int(ad.a.id), int(ad.b.id)}) == 3
    assert ad.a.requires_grad and ad.b.requires_grad and not m.fc1.weight.requires_grad


def test_lora_b_starts_at_zero_so_the_adapted_model_equals_the_base():
    m = MLP().eval()
    x = braze.randn(4, 6)
    before = arr(m(x))
    m.apply_lora(Lora(4, 16))
    assert not np.any(arr(m.fc1.weight.adapter.b))
    np.testing.assert_array_equal(arr(m(x)), before)


def test_lora_kaiming_init_is_uniform_within_one_over_sqrt_fan_in():
    braze.manual_seed(0)
    m = nn.Linear(400, 8).apply_lora(Lora(64, 8))
    a = arr(m.weight.adapter.a)
    bound = 1 / math.sqrt(400)
    assert np.abs(a).max() <= bound and np.abs(a).max() > 0.99 * bound
    assert a.std() == pytest.approx(bound / math.sqrt(3), rel=0.02)


def test_lora_gaussian_init_has_std_one_over_rank():
    braze.manual_seed(0)
    m = nn.Linear(300, 8).apply_lora(Lora(50, 8, init="gaussian"))
    assert arr(m.weight.adapter.a).std() == pytest.approx(1 / 50, rel=0.02)


# --- the PEFT formula -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rank,alpha,rslora", [(1, 1.0, False), (2, 4.0, False), (4, 8.0, True), (8, 3.0, True),
                                               (5, 16.0, False)])
def test_lora_merged_weight_and_forward_match_the_numpy_peft_formula(rank, alpha, rslora):
    braze.manual_seed(rank)
    lin = nn.Linear(6, 5).apply_lora(Lora(rank, alpha, use_rslora=rslora))
    randomize_adapters(lin, rank)
    ad = lin.weight.adapter
    want_w = peft_weight(lin.weight.base(), ad.a, ad.b, alpha, rank, rslora)
    np.testing.assert_allclose(arr(lin.weight.val()), want_w, rtol=1e-5, atol=1e-5)
    x = np.random.default_rng(1).standard_normal((3, 6)).astype(np.float32)
    want_y = x.astype(np.float64) @ want_w.T + arr(lin.bias)
    np.testing.assert_allclose(arr(lin(braze.tensor(x))), want_y, rtol=1e-5, atol=1e-5)


def test_lora_adapter_gradients_match_numpy():
    lin = nn.Linear(4, 3).apply_lora(Lora(2, 4))
    randomize_adapters(lin)
    x = np.random.default_rng(2).standard_normal((5, 4)).astype(np.float32)
    g = np.random.default_rng(3).standard_normal((5, 3)).astype(np.float32)
    (lin(braze.tensor(x)) * braze.tensor(g)).sum().backward()
    ad = lin.weight.adapter
    d_weight = g.T.astype(np.float64) @ x  # dL/dW' of y = x W'^T
    np.testing.assert_allclose(arr(ad.a.grad), ad.scale * arr(ad.b).T @ d_weight, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(arr(ad.b.grad), ad.scale * d_weight @ arr(ad.a).T, rtol=1e-5, atol=1e-5)
    assert lin.weight.grad is None and lin.bias.grad is None


def test_lora_dropout_follows_peft_formula_with_the_same_mask():
    lin = nn.Linear(6, 4).apply_lora(Lora(2, 4, dropout=0.5))
    randomize_adapters(lin)
    x = braze.randn(8, 6)
    braze.manual_seed(11)
    y = arr(lin(x))
    braze.manual_seed(11)
    dropped = arr(F.dropout(x, 0.5, training=True))  # the adapter path draws its mask first, from the same seed
    ad, w = lin.weight.adapter, arr(lin.weight.base())
    want = arr(x) @ w.T + arr(lin.bias) + ad.scale * (dropped @ arr(ad.a).T) @ arr(ad.b).T
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    assert not np.allclose(y, arr(x) @ arr(lin.weight.val()).T + arr(lin.bias), atol=1e-3)


def test_lora_dropout_flag_is_off_in_eval_and_valid_and_then_equals_the_merged_weight():
    lin = nn.Linear(6, 4).apply_lora(Lora(2, 4, dropout=0.5))
    randomize_adapters(lin)
    x = braze.randn(3, 6)
    merged = arr(x) @ arr(lin.weight.val()).T + arr(lin.bias)
    np.testing.assert_allclose(arr(lin.valid()(x)), merged, rtol=1e-5, atol=1e-5)
    assert bool(lin.weight.adapter.flag)
    lin.eval()
    assert not bool(lin.weight.adapter.flag) and lin.weight.adapter.flag.configured
    np.testing.assert_allclose(arr(lin(x)), merged, rtol=1e-5, atol=1e-5)
    lin.train()
    assert bool(lin.weight.adapter.flag)


def test_lora_on_an_eval_module_gets_its_dropout_flag_off():
    lin = nn.Linear(3, 2).eval().apply_lora(Lora(1, 1, dropout=0.1))
    assert not bool(lin.weight.adapter.flag) and lin.weight.adapter.flag.configured


# --- selection rules --------------------------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(4, 2, batch_first=True)
        self.fc1 = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)

    def forward(self, x):
        return self.norm(self.fc1(self.attn(x, x, x)[0]))


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(7, 4)
        self.layers = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(4, 2)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def adapted(model):
    return sorted(path for path, p in model.named_parameters() if p.adapter is not None)


def test_lora_default_targets_every_linear_and_attention_projection():
    m = Stack().apply_lora(Lora(2, 2))
    want = [f"layers.{i}.{name}" for i in (0, 1) for name in ("attn.in_proj_weight", "attn.out_proj.weight",
                                                              "fc1.weight")] + ["head.weight"]
    assert adapted(m) == sorted(want)


def test_lora_targets_are_module_path_globs_matched_like_peft():
    assert adapted(Stack().apply_lora(Lora(2, 2, targets=["fc1"]))) == ["layers.0.fc1.weight", "layers.1.fc1.weight"]
    assert adapted(Stack().apply_lora(Lora(2, 2, targets=["layers.*.attn.out_proj"]))) == [
        "layers.0.attn.out_proj.weight", "layers.1.attn.out_proj.weight"]
    assert adapted(Stack().apply_lora(Lora(2, 2, targets="layers.1.attn"))) == ["layers.1.attn.in_proj_weight"]
    assert adapted(Stack().apply_lora(Lora(2, 2, targets=["embed", "head"]))) == ["embed.weight", "head.weight"]


def test_lora_target_selecting_nothing_adaptable_is_an_error_naming_it():
    with pytest.raises(BrazeError, match="'layers.0.norm'"):
        Stack().apply_lora(Lora(2, 2, targets=["layers.0.norm"]))
    with pytest.raises(BrazeError, match="'fc3'"):
        Stack().apply_lora(Lora(2, 2, targets=["fc1", "fc3"]))


def test_lora_freezes_every_base_parameter_and_leaves_flags_alone():
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Dropout(0.5)).apply_lora(Lora(2, 2))
    assert {path: p.requires_grad for path, p in m.named_parameters()} == {
        "0.weight": False, "0.weight.lora_a": True, "0.weight.lora_b": True, "0.bias": False,
        "1.weight": False, "1.bias": False}
    assert all(bool(f) for f in m.flags())


def test_lora_on_a_lazy_model_initializes_nothing():
    m = MLP().apply_lora(Lora(2, 2))
    assert not any(p.is_initialized for p in m.parameters())


def test_lora_attention_adapter_matches_a_merged_attention():
    braze.manual_seed(0)
    block = Block().eval()
    x = braze.randn(2, 3, 4)
    block.apply_lora(Lora(2, 4, targets=["attn"]))
    randomize_adapters(block)
    plain = Block().eval()
    for name in ("in_proj_weight", "in_proj_bias"):
        getattr(plain.attn, name).assign(getattr(block.attn, name).val())
    for name in ("weight", "bias"):
        getattr(plain.attn.out_proj, name).assign(getattr(block.attn.out_proj, name))
        getattr(plain.fc1, name).assign(getattr(block.fc1, name))
        getattr(plain.norm, name).assign(getattr(block.norm, name))
    np.testing.assert_allclose(arr(block(x)), arr(plain(x)), rtol=1e-5, atol=1e-5)


def test_lora_conv2d_rule_uses_peft_factor_shapes_and_formula():
    conv = nn.Conv2d(3, 4, 3, padding=1).apply_lora(Lora(2, 4, targets=[""]))
    ad = conv.weight.adapter
    assert ad.a.shape == (2, 3, 3, 3) and ad.b.shape == (4, 2, 1, 1) and ad.rule == "conv2d"
    randomize_adapters(conv)
    want = peft_weight(conv.weight.base(), ad.a, ad.b, 4, 2)
    np.testing.assert_allclose(arr(conv.weight.val()), want, rtol=1e-5, atol=1e-5)


def test_lora_conv2d_dropout_path_is_peft_formula():
    conv = nn.Conv2d(2, 3, 3, padding=1).apply_lora(Lora(2, 2, targets=[""], dropout=0.3))
    randomize_adapters(conv)
    x = braze.randn(2, 2, 5, 5)
    braze.manual_seed(5)
    y = arr(conv(x))
    braze.manual_seed(5)
    dropped = F.dropout(x, 0.3, training=True)
    ad = conv.weight.adapter
    low = F.conv2d(F.conv2d(dropped, ad.a.val(), None, 1, 1), ad.b.val())
    want = arr(F.conv2d(x, conv.weight.base(), conv.bias, 1, 1)) + ad.scale * arr(low)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(arr(conv.valid()(x)), arr(F.conv2d(x, conv.weight.val(), conv.bias, 1, 1)),
                               rtol=1e-5, atol=1e-5)


def test_lora_grouped_conv_dropout_is_refused():
    with pytest.raises(BrazeError, match="grouped convolution"):
        nn.Conv2d(4, 4, 3, groups=2).apply_lora(Lora(2, 2, targets=[""], dropout=0.1))


def test_lora_embedding_rule_is_peft_embedding_with_factors_transposed():
    braze.manual_seed(0)
    emb = nn.Embedding(10, 4).apply_lora(Lora(3, 6, targets=[""], dropout=0.2))
    ad = emb.weight.adapter
    assert ad.a.shape == (3, 4) and ad.b.shape == (10, 3) and ad.flag is None and ad.dropout == 0.0
    assert not np.any(arr(ad.b)) and arr(ad.a).std() == pytest.approx(1.0, rel=0.5)
    randomize_adapters(emb)
    peft_a, peft_b = arr(ad.b).T, arr(ad.a).T  # lora_embedding_A (r, num), lora_embedding_B (dim, r)
    tokens = braze.tensor(np.array([1, 5, 9, 1]))
    want = arr(emb.weight.base())[[1, 5, 9, 1]] + ad.scale * (peft_a.T[[1, 5, 9, 1]] @ peft_b.T)
    np.testing.assert_allclose(arr(emb(tokens)), want, rtol=1e-5, atol=1e-5)


def test_nested_reparameterization_is_refused():
    m = MLP().apply_lora(Lora(2, 2))
    with pytest.raises(BrazeError, match="nested reparameterizations are not supported"):
        m.apply_lora(Lora(2, 2))


def test_apply_lora_rejects_other_configurations():
    with pytest.raises(BrazeError, match="braze.nn.Lora"):
        MLP().apply_lora(nn.QLora(2, 2))


# --- training ---------------------------------------------------------------------------------------------------
def bases(model):
    return {path: arr(p.base()).tobytes() for path, p in model.named_parameters() if not path.endswith(("_a", "_b"))}


def adapters(model):
    return {path: arr(p) for path, p in model.named_parameters() if path.endswith((".lora_a", ".lora_b"))}


@pytest.mark.parametrize("front_end", ["torch_style", "module_optimizer"])
def test_training_step_changes_only_the_adapters(front_end):
    braze.manual_seed(0)
    m = MLP().apply_lora(Lora(2, 4))
    x, y = braze.randn(16, 6), braze.randn(16, 3)
    before_bases, before_adapters = bases(m), adapters(m)
    loss = F.mse_loss(m(x), y)
    if front_end == "torch_style":
        opt = braze.optim.SGD(m.parameters(), lr=0.1)
        loss.backward()
        opt.step()
    else:
        grads = loss.backward()
        m = braze.optim.ModuleOptimizer(braze.optim.SgdConfig()).step(
            0.1, m, braze.optim.GradientsParams.from_grads(grads, m))
    assert bases(m) == before_bases
    after = adapters(m)
    assert all(not np.array_equal(after[k], before_adapters[k]) for k in after if k.endswith("lora_b"))


def test_unfreeze_makes_the_lora_base_trainable_again():
    m = MLP().apply_lora(Lora(2, 4)).unfreeze()
    randomize_adapters(m)
    x, y = braze.randn(4, 6), braze.randn(4, 3)
    before = bases(m)
    opt = braze.optim.SGD(m.parameters(), lr=0.1)
    F.mse_loss(m(x), y).backward()
    opt.step()
    assert bases(m)["fc1.weight"] != before["fc1.weight"]


# --- traversals -------------------------------------------------------------------------------------------------
def test_adapter_values_appear_in_traversals_after_their_parameter():
    m = MLP().apply_lora(Lora(2, 2, dropout=0.1))
    assert [k for k, _ in m.named_parameters()] == [
        "fc1.weight", "fc1.weight.lora_a", "fc1.weight.lora_b", "fc1.bias",
        "fc2.weight", "fc2.weight.lora_a", "fc2.weight.lora_b", "fc2.bias"]
    assert [k for k, _ in m.named_flags()] == ["fc1.weight.lora_dropout", "drop.training", "fc2.weight.lora_dropout"]
    assert m.num_params() == 6 * 8 + 8 + 8 * 3 + 3 + 2 * 6 + 8 * 2 + 2 * 8 + 3 * 2
    assert [k for k, _ in m.named_param_slots()] == [k for k, _ in m.named_parameters()]


def test_visitor_sees_adapter_parameters_and_flags():
    seen = []

    class Paths(ModuleVisitor):
        def visit_float(self, path, param):
            seen.append(path)

        def visit_flag(self, path, flag):
            seen.append(path)
    MLP().apply_lora(Lora(2, 2, dropout=0.1, targets=["fc2"])).visit(Paths())
    assert seen == ["fc1.weight", "fc1.bias", "drop.training", "fc2.weight", "fc2.weight.lora_a", "fc2.weight.lora_b",
                    "fc2.bias", "fc2.weight.lora_dropout"]


def test_mapper_sees_the_structural_base_then_the_adapter_values():
    calls = []

    class Double(ModuleMapper):
        def map_float(self, path, param):
            calls.append((path, param.adapter is None))
            return param.map(lambda t: t * 2)
    m = nn.Linear(3, 2).apply_lora(Lora(1, 1))
    randomize_adapters(m)
    w, a = arr(m.weight.base()), arr(m.weight.adapter.a)
    m.map(Double())
    assert calls == [("weight", True), ("weight.lora_a", True), ("weight.lora_b", True), ("bias", True)]
    assert m.weight.adapter is not None
    np.testing.assert_array_equal(arr(m.weight.base()), 2 * w)
    np.testing.assert_array_equal(arr(m.weight.adapter.a), 2 * a)


def test_valid_snapshot_keeps_adapters_without_autodiff_and_flags_off():
    m = MLP().apply_lora(Lora(2, 2, dropout=0.2))
    v = m.valid()
    ad, original = v.fc1.weight.adapter, m.fc1.weight.adapter
    assert ad is not original and ad.a.id == original.a.id
    assert not ad.a.is_autodiff() and not bool(ad.flag) and ad.flag.configured
    assert original.a.is_autodiff() and bool(original.flag)
    t = v.train()
    assert t.fc1.weight.adapter.a.requires_grad and bool(t.fc1.weight.adapter.flag)


def test_state_dict_includes_adapters_and_loads_back():
    src = MLP().apply_lora(Lora(2, 2))
    randomize_adapters(src)
    dst = MLP().apply_lora(Lora(2, 2))
    dst.load_state_dict(src.state_dict())
    x = braze.randn(2, 6)
    assert "fc1.weight.lora_a" in src.state_dict()
    np.testing.assert_array_equal(arr(dst.eval()(x)), arr(src.eval()(x)))


# --- records ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reparam", [Lora(2, 4, dropout=0.1), nn.QLora(2, 4), nn.QLora(3, 2, use_rslora=True,
                                                                                       quantizer=nn.Quantizer("int8"))])
def test_record_of_an_adapted_model_reproduces_its_outputs_exactly(tmp_path, reparam):
    braze.manual_seed(1)
    src = MLP().apply_reparameterization(reparam)
    randomize_adapters(src)
    x = braze.randn(5, 6)
    src.save_file(tmp_path / "adapted.safetensors")
    dst = MLP().apply_reparameterization(reparam).load_file(tmp_path / "adapted.safetensors")
    np.testing.assert_array_equal(arr(dst.valid()(x)), arr(src.valid()(x)))
    assert [(k, p.id) for k, p in dst.named_param_slots()] == [(k, p.id) for k, p in src.named_param_slots()]


def test_record_paths_and_structure_notes_of_an_adapted_model():
    record = MLP().apply_lora(Lora(2, 4)).into_record()
    assert list(record) == ["fc1.weight", "fc1.weight.lora_a", "fc1.weight.lora_b", "fc1.bias", "fc2.weight",
                            "fc2.weight.lora_a", "fc2.weight.lora_b", "fc2.bias"]
    assert '"fc1.weight": {"adapter": {"kind": "lora", "rank": 2, "scale": 2.0}}' in record.metadata[
        "reparameterizations"]


@pytest.mark.parametrize("reparam", [Lora(2, 4), nn.QLora(2, 4)])
def test_record_of_an_adapted_model_into_a_plain_model_is_a_clear_error(reparam):
    record = MLP().apply_reparameterization(reparam).into_record()
    with pytest.raises(RecordError, match="fc1.weight: the record holds adapter state .*apply_lora"):
        MLP().load_record(record)


def test_record_of_a_lora_model_into_a_plain_model_with_allow_partial_loads_the_bases():
    src = MLP().apply_lora(Lora(2, 4))
    randomize_adapters(src)
    dst = MLP().load_record(src.into_record().with_options(allow_partial=True))
    np.testing.assert_array_equal(arr(dst.fc1.weight), arr(src.fc1.weight.base()))
    assert dst.fc1.weight.adapter is None


def test_record_with_another_scale_or_scheme_is_refused():
    record = MLP().apply_qlora(nn.QLora(2, 4)).into_record()
    with pytest.raises(RecordError, match="adapter is kind='lora', rank=2, scale=2.0, the module's .*scale=4.0"):
        MLP().apply_qlora(nn.QLora(2, 8)).load_record(record)
    with pytest.raises(RecordError, match="quantization is block_size=64, scheme='nf4'.*scheme='int4'"):
        MLP().apply_qlora(nn.QLora(2, 4, quantizer=nn.Quantizer("int4"))).load_record(record)


def test_adapter_only_record_loads_into_the_pretrained_model_with_the_same_lora():
    braze.manual_seed(3)
    pretrained = MLP()
    record = pretrained.into_record()
    tuned = MLP().load_record(record).apply_lora(Lora(2, 4))
    randomize_adapters(tuned)
    adapter_record = tuned.into_record_group(ParamGroup.paths("*.lora_a", "*.lora_b"))
    assert sorted(adapter_record) == ["fc1.weight.lora_a", "fc1.weight.lora_b", "fc2.weight.lora_a",
                                      "fc2.weight.lora_b"]
    again = MLP().load_record(record).apply_lora(Lora(2, 4)).load_record(adapter_record)
    x = braze.randn(3, 6)
    np.testing.assert_array_equal(arr(again.eval()(x)), arr(tuned.eval()(x)))


def test_plain_record_into_a_lora_model_needs_allow_partial():
    plain = MLP().into_record()
    with pytest.raises(RecordError, match="missing from the record: fc1.weight.lora_a"):
        MLP().apply_lora(Lora(2, 2)).load_record(plain)
    MLP().apply_lora(Lora(2, 2)).load_record(plain.with_options(allow_partial=True))


# --- the example ------------------------------------------------------------------------------------------------
def test_lora_finetune_example_keeps_bases_and_merges_exactly():
    example = runpy.run_path(str(Path(__file__).parents[2] / "examples" / "lora_finetune.py"))
    result = example["run"](steps=60)
    assert result["base_unchanged"] == 1.0 and result["reloaded_same"] == 1.0 and result["adapters_left"] == 0.0
    assert result["merge_difference"] <= 1e-5 and result["shifted_after"] > result["shifted_before"]
    assert result["artifact_same"] == 1.0
