"""The standard layers: torch's parameter names and shapes, lazy default initialization with torch's
distributions, training flags and running statistics, containers, and forward values against numpy."""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np
import pytest

import braze
import braze.nn as nn
from braze.ir.errors import DTypeError, ShapeError

RNG = np.random.default_rng(7)
T = braze.tensor


def _np(t: object) -> np.ndarray:
    return np.asarray(t)


def _weights(m: nn.Module) -> dict[str, np.ndarray]:
    return {k: np.array(v) for k, v in m.state_dict().items()}


# --- names, shapes and state-dict keys (torch's for the same structure) ---------------------------------------

@pytest.mark.parametrize("make,expected", [
    (lambda: nn.Linear(3, 4), {"weight": (4, 3), "bias": (4,)}),
    (lambda: nn.Linear(3, 4, bias=False), {"weight": (4, 3)}),
    (lambda: nn.Conv2d(4, 6, (3, 2), groups=2), {"weight": (6, 2, 3, 2), "bias": (6,)}),
    (lambda: nn.BatchNorm2d(5), {"weight": (5,), "bias": (5,), "running_mean": (5,), "running_var": (5,),
                                 "num_batches_tracked": ()}),
    (lambda: nn.BatchNorm1d(5, affine=False, track_running_stats=False), {}),
    (lambda: nn.LayerNorm((2, 3)), {"weight": (2, 3), "bias": (2, 3)}),
    (lambda: nn.LayerNorm(3, bias=False), {"weight": (3,)}),
    (lambda: nn.Embedding(10, 4), {"weight": (10, 4)}),
    (lambda: nn.MultiheadAttention(8, 2), {"in_proj_weight": (24, 8), "in_proj_bias": (24,),
                                           "out_proj.weight": (8, 8), "out_proj.bias": (8,)}),
    (lambda: nn.MultiheadAttention(8, 2, kdim=5, vdim=3, add_bias_kv=True, bias=False),
     {"q_proj_weight": (8, 8), "k_proj_weight": (8, 5), "v_proj_weight": (8, 3), "bias_k": (1, 1, 8),
      "bias_v": (1, 1, 8), "out_proj.weight": (8, 8)}),
    (lambda: nn.CrossEntropyLoss(weight=T([1.0, 2.0])), {"weight": (2,)}),
    (lambda: nn.CrossEntropyLoss(), {}),
])
def test_layer_state_dict_keys_and_shapes(make, expected) -> None:
    assert {k: v.shape for k, v in make().state_dict().items()} == expected


def test_transformer_layer_names_follow_torch() -> None:
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    assert [n for n, _ in layer.named_children()] == ["self_attn", "linear1", "dropout", "linear2", "norm1", "norm2",
                                                      "dropout1", "dropout2"]
    assert list(layer.state_dict())[:4] == ["self_attn.in_proj_weight", "self_attn.in_proj_bias",
                                            "self_attn.out_proj.weight", "self_attn.out_proj.bias"]
    assert isinstance(layer.self_attn.out_proj, nn.Linear)


def test_sequential_state_dict_keys_are_positional() -> None:
    model = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Sequential(nn.Linear(3, 1)))
    assert list(model.state_dict()) == ["0.weight", "0.bias", "2.0.weight", "2.0.bias"]


def test_training_flags_are_named_training() -> None:
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    assert [n for n, _ in layer.named_flags()] == ["self_attn.training", "dropout.training", "dropout1.training",
                                                   "dropout2.training"]
    assert [n for n, _ in nn.BatchNorm2d(3).named_flags()] == ["training"]


# --- lazy default initialization ------------------------------------------------------------------------

def test_weights_are_lazy_until_used() -> None:
    model = nn.Sequential(nn.Linear(1000, 1000), nn.Embedding(5000, 64))
    assert model.num_params() == 1000 * 1000 + 1000 + 5000 * 64
    assert not any(p.is_initialized for p in model.parameters())
    model[0](braze.randn(2, 1000))
    assert model[0].weight.is_initialized and not model[1].weight.is_initialized


def test_initialization_repeats_under_manual_seed() -> None:
    braze.manual_seed(3)
    a = _weights(nn.Linear(4, 5))
    braze.manual_seed(3)
    b = _weights(nn.Linear(4, 5))
    assert all(np.array_equal(v, b[k]) for k, v in a.items())


def _check_uniform(values: np.ndarray, bound: float) -> None:
    """Within [-bound, bound], filling it (max near the bound) with U(-b, b)'s mean and std."""
    assert np.abs(values).max() <= bound
    assert np.abs(values).max() > 0.97 * bound
    assert abs(values.mean()) < 0.05 * bound
    assert abs(values.std() - bound / math.sqrt(3)) < 0.03 * bound


def test_linear_init_is_torch_kaiming_uniform() -> None:
    braze.manual_seed(0)
    w = _weights(nn.Linear(400, 300))
    _check_uniform(w["weight"], 1 / math.sqrt(400))
    assert np.abs(w["bias"]).max() <= 1 / math.sqrt(400)


def test_conv_init_uses_fan_in_of_a_group() -> None:
    braze.manual_seed(0)
    w = _weights(nn.Conv2d(16, 64, 3, groups=4))
    _check_uniform(w["weight"], 1 / math.sqrt(4 * 9))
    assert np.abs(w["bias"]).max() <= 1 / math.sqrt(4 * 9)


def test_embedding_init_is_standard_normal_with_zero_padding_row() -> None:
    braze.manual_seed(0)
    w = _weights(nn.Embedding(500, 200, padding_idx=-2))["weight"]
    assert abs(w.mean()) < 0.02 and abs(w.std() - 1) < 0.02
    assert not w[498].any()


def test_norm_layers_init_to_ones_and_zeros() -> None:
    bn, ln = _weights(nn.BatchNorm1d(3)), _weights(nn.LayerNorm(3))
    for w in (bn, ln):
        assert (w["weight"] == 1).all() and (w["bias"] == 0).all()
    assert (bn["running_mean"] == 0).all() and (bn["running_var"] == 1).all()
    assert bn["num_batches_tracked"].dtype == np.int64 and bn["num_batches_tracked"] == 0


def test_attention_init_is_xavier_with_zero_biases() -> None:
    braze.manual_seed(0)
    w = _weights(nn.MultiheadAttention(64, 4, add_bias_kv=True))
    _check_uniform(w["in_proj_weight"], math.sqrt(6 / (64 + 3 * 64)))
    _check_uniform(w["out_proj.weight"], 1 / math.sqrt(64))
    assert not w["in_proj_bias"].any() and not w["out_proj.bias"].any()
    assert 0.6 < w["bias_k"].std() * math.sqrt(64) < 1.4  # xavier normal: std 1/sqrt(E)


def test_layers_take_a_dtype() -> None:
    layer = nn.Linear(2, 3, dtype=braze.float64)
    assert layer.weight.dtype == braze.float64 and layer(T(np.ones((1, 2)))).dtype == braze.float64
    with pytest.raises(DTypeError):
        nn.Linear(2, 3, dtype=braze.int32)


# --- forward values against numpy -------------------------------------------------------------------------

def test_linear_forward() -> None:
    layer, x = nn.Linear(3, 2), RNG.standard_normal((4, 3)).astype(np.float32)
    w = _weights(layer)
    np.testing.assert_allclose(_np(layer(T(x))), x @ w["weight"].T + w["bias"], rtol=1e-6, atol=1e-6)


def _conv(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    kh, kw = w.shape[2:]
    out = np.zeros((x.shape[0], w.shape[0], x.shape[2] - kh + 1, x.shape[3] - kw + 1))
    for i in range(out.shape[2]):
        for j in range(out.shape[3]):
            out[:, :, i, j] = np.einsum("nchw,ochw->no", x[:, :, i:i + kh, j:j + kw], w)
    return out + b[None, :, None, None]


@pytest.mark.parametrize("mode,numpy_mode", [("zeros", "constant"), ("reflect", "reflect"), ("replicate", "edge"),
                                             ("circular", "wrap")])
def test_conv_padding_modes(mode: str, numpy_mode: str) -> None:
    layer = nn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode=mode, dtype=braze.float64)
    x = RNG.standard_normal((2, 2, 5, 6))
    w = _weights(layer)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (2, 2)), mode=numpy_mode)
    np.testing.assert_allclose(_np(layer(T(x))), _conv(padded, w["weight"], w["bias"]), atol=1e-12)


def test_conv_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="strided"):
        nn.Conv2d(3, 4, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="padding_mode"):
        nn.Conv2d(3, 4, 3, padding_mode="mirror")


def _bn(x: np.ndarray, mean: np.ndarray, var: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)


def test_batchnorm_training_uses_batch_statistics_and_updates_running_ones() -> None:
    bn, x = nn.BatchNorm2d(3, momentum=0.2, dtype=braze.float64), RNG.standard_normal((4, 3, 2, 2))
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    np.testing.assert_allclose(_np(bn(T(x))), _bn(x, mean, var), atol=1e-12)
    state = _weights(bn)
    np.testing.assert_allclose(state["running_mean"], 0.2 * mean, atol=1e-12)
    np.testing.assert_allclose(state["running_var"], 0.8 + 0.2 * var * 16 / 15, atol=1e-12)
    assert state["num_batches_tracked"] == 1


def test_batchnorm_momentum_none_is_a_cumulative_average() -> None:
    bn, batches = nn.BatchNorm1d(2, momentum=None, dtype=braze.float64), RNG.standard_normal((3, 5, 2))
    for b in batches:
        bn(T(b))
    np.testing.assert_allclose(_weights(bn)["running_mean"], batches.mean(axis=1).mean(axis=0), atol=1e-12)
    assert _weights(bn)["num_batches_tracked"] == 3


def test_batchnorm_eval_uses_running_statistics_without_updating() -> None:
    bn, x = nn.BatchNorm1d(2, dtype=braze.float64), RNG.standard_normal((5, 2))
    bn.load_state_dict({**_weights(bn), "running_mean": np.array([0.5, -1.0]), "running_var": np.array([2.0, 0.5])})
    bn.eval()
    np.testing.assert_allclose(_np(bn(T(x))), _bn(x, np.array([0.5, -1.0]), np.array([2.0, 0.5])), atol=1e-12)
    assert _weights(bn)["num_batches_tracked"] == 0 and not bn.training


def test_batchnorm_without_running_stats_always_uses_the_batch() -> None:
    bn, x = nn.BatchNorm1d(2, track_running_stats=False, dtype=braze.float64), RNG.standard_normal((5, 2))
    bn.eval()
    np.testing.assert_allclose(_np(bn(T(x))), _bn(x, x.mean(0), x.var(0)), atol=1e-12)


def test_batchnorm_training_leaves_a_validation_snapshot_unchanged() -> None:
    bn = nn.BatchNorm1d(2)
    snapshot = bn.valid()
    bn(braze.randn(6, 2))
    assert (_weights(snapshot)["running_mean"] == 0).all() and _weights(snapshot)["num_batches_tracked"] == 0


def test_batchnorm_rejects_input_rank() -> None:
    with pytest.raises(ValueError, match="expected 4D input"):
        nn.BatchNorm2d(3)(braze.randn(2, 3))


def test_layernorm_forward() -> None:
    ln, x = nn.LayerNorm((2, 3), eps=1e-3, dtype=braze.float64), RNG.standard_normal((4, 2, 3))
    mean, var = x.mean(axis=(1, 2), keepdims=True), x.var(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(_np(ln(T(x))), (x - mean) / np.sqrt(var + 1e-3), atol=1e-12)


def test_dropout_follows_its_training_flag() -> None:
    drop, x = nn.Dropout(0.25), np.ones((200, 100), dtype=np.float32)
    out = _np(drop(T(x)))
    assert set(np.unique(out)) <= {0.0, np.float32(1 / 0.75)} and abs((out == 0).mean() - 0.25) < 0.02
    drop.eval()
    assert not bool(drop.flag("training")) and np.array_equal(_np(drop(T(x))), x)
    drop.train()
    assert drop.training


def test_dropout_rejects_probability_outside_unit_interval() -> None:
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)


def test_embedding_padding_row_gets_no_gradient() -> None:
    emb = nn.Embedding(4, 3, padding_idx=1)
    out = emb(T([[1, 2], [1, 3]]))
    np.testing.assert_array_equal(_np(out[0, 1]), _weights(emb)["weight"][2])
    out.sum().backward()
    np.testing.assert_array_equal(_np(emb.weight.grad), [[0] * 3, [0] * 3, [1] * 3, [1] * 3])


def test_embedding_from_pretrained_is_frozen() -> None:
    emb = nn.Embedding.from_pretrained(np.eye(3, dtype=np.float32))
    assert not emb.weight.requires_grad and np.array_equal(_np(emb(T([2]))), [[0, 0, 1]])


@pytest.mark.parametrize("layer,reference", [
    (nn.ReLU(), lambda x: np.maximum(x, 0)),
    (nn.GELU(), lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))),
    (nn.GELU("tanh"), lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
    (nn.SiLU(), lambda x: x / (1 + np.exp(-x))),
    (nn.Tanh(), np.tanh),
    (nn.Sigmoid(), lambda x: 1 / (1 + np.exp(-x))),
    (nn.Softmax(dim=1), lambda x: np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)),
    (nn.Flatten(), lambda x: x.reshape(2, -1)),
    (nn.Identity(), lambda x: x),
    (nn.MaxPool2d(2), lambda x: x.reshape(2, 3, 2, 2, 2, 2).max(axis=(3, 5))),
    (nn.AvgPool2d(2), lambda x: x.reshape(2, 3, 2, 2, 2, 2).mean(axis=(3, 5))),
    (nn.AdaptiveAvgPool2d(1), lambda x: x.mean(axis=(2, 3), keepdims=True)),
])
def test_parameterless_layer_forward(layer: nn.Module, reference) -> None:
    x = RNG.standard_normal((2, 3, 4, 4))
    np.testing.assert_allclose(_np(layer(T(x))), reference(x), atol=1e-12)


def test_losses_forward() -> None:
    logits, target = RNG.standard_normal((4, 3)), np.array([0, 2, 1, 2])
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    w = np.array([1.0, 2.0, 0.5])
    picked, weights = logp[np.arange(4), target], w[target]
    got = nn.CrossEntropyLoss(weight=T(w))(T(logits), T(target))
    np.testing.assert_allclose(float(got), -(picked * weights).sum() / weights.sum(), atol=1e-12)
    y = RNG.standard_normal((4, 3))
    np.testing.assert_allclose(float(nn.MSELoss(reduction="sum")(T(logits), T(y))), ((logits - y) ** 2).sum())
    with pytest.raises(ValueError, match="reduction"):
        nn.MSELoss(reduction="average")


# --- attention --------------------------------------------------------------------------------------------

def _mha_reference(w: dict[str, np.ndarray], q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int,
                   mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """torch's multi-head attention on (L, N, E) inputs; a bool mask is True where attention is not allowed."""
    e = q.shape[-1]
    wq, wk, wv = np.split(w["in_proj_weight"], 3)
    bq, bk, bv = np.split(w["in_proj_bias"], 3)
    def heads_first(x: np.ndarray) -> np.ndarray:  # (L, N, E) -> (N, H, L, D)
        return x.reshape(x.shape[0], x.shape[1], heads, e // heads).transpose(1, 2, 0, 3)
    qh, kh, vh = heads_first(q @ wq.T + bq), heads_first(k @ wk.T + bk), heads_first(v @ wv.T + bv)
    scores = qh @ kh.transpose(0, 1, 3, 2) / math.sqrt(e // heads)
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = (p @ vh).transpose(2, 0, 1, 3).reshape(q.shape)
    return out @ w["out_proj.weight"].T + w["out_proj.bias"], p.mean(axis=1)


def _perturbed_mha(**kw: object) -> nn.MultiheadAttention:
    m = nn.MultiheadAttention(8, 2, dtype=braze.float64, **kw)
    m.load_state_dict({k: v + RNG.uniform(-0.3, 0.3, v.shape) for k, v in _weights(m).items()})
    return m


def test_multihead_attention_forward() -> None:
    m = _perturbed_mha()
    q, k, v = RNG.standard_normal((4, 2, 8)), RNG.standard_normal((6, 2, 8)), RNG.standard_normal((6, 2, 8))
    out, weights = m(T(q), T(k), T(v))
    ref_out, ref_weights = _mha_reference(_weights(m), q, k, v, 2)
    np.testing.assert_allclose(_np(out), ref_out, atol=1e-12)
    np.testing.assert_allclose(_np(weights), ref_weights, atol=1e-12)


def test_multihead_attention_masks_exclude_keys() -> None:
    m = _perturbed_mha(batch_first=True)
    x = RNG.standard_normal((2, 5, 8))
    pad = np.zeros((2, 5), dtype=bool)
    pad[1, 3:] = True
    out, weights = m(T(x), T(x), T(x), key_padding_mask=T(pad), is_causal=False)
    assert not _np(weights)[1, :, 3:].any()
    causal = np.triu(np.ones((5, 5), dtype=bool), 1)
    ref_out, ref_weights = _mha_reference(_weights(m), x.transpose(1, 0, 2), x.transpose(1, 0, 2),
                                          x.transpose(1, 0, 2), 2, causal)
    out, weights = m(T(x), T(x), T(x), is_causal=True)  # no attn_mask: the causal mask is built
    np.testing.assert_allclose(_np(out), ref_out.transpose(1, 0, 2), atol=1e-12)
    np.testing.assert_allclose(_np(weights), ref_weights, atol=1e-12)


def test_multihead_attention_weight_options() -> None:
    m, x = nn.MultiheadAttention(8, 2), braze.randn(3, 8)  # unbatched (L, E)
    out, weights = m(x, x, x, need_weights=False)
    assert out.shape == (3, 8) and weights is None
    assert m(x, x, x, average_attn_weights=False)[1].shape == (2, 3, 3)


def test_multihead_attention_rejects_mismatched_inputs() -> None:
    m = nn.MultiheadAttention(8, 2)
    with pytest.raises(ShapeError, match="width"):
        m(braze.randn(3, 1, 8), braze.randn(4, 1, 6), braze.randn(4, 1, 6))
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(8, 3)


def test_transformer_layer_dropout_follows_mode() -> None:
    layer, x = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.5), braze.randn(4, 2, 8)
    assert not np.array_equal(_np(layer(x)), _np(layer(x)))
    layer.eval()
    assert np.array_equal(_np(layer(x)), _np(layer(x)))


def test_transformer_layer_post_norm_composes_its_submodules() -> None:
    layer, x = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, activation="gelu"), braze.randn(4, 2, 8)
    attended = layer.norm1(x + layer.self_attn(x, x, x)[0])
    expected = layer.norm2(attended + layer.linear2(nn.functional.gelu(layer.linear1(attended))))
    np.testing.assert_allclose(_np(layer(x)), _np(expected), atol=1e-6)
    with pytest.raises(ValueError, match="relu/gelu"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")


# --- containers -------------------------------------------------------------------------------------------

def test_sequential_indexing_and_slicing() -> None:
    a, b, c = nn.ReLU(), nn.Tanh(), nn.Sigmoid()
    seq = nn.Sequential(a, b, c)
    assert seq[0] is a and seq[-1] is c and len(seq) == 3 and list(seq) == [a, b, c]
    tail = seq[1:]
    assert isinstance(tail, nn.Sequential) and [n for n, _ in tail.named_children()] == ["1", "2"]
    np.testing.assert_allclose(_np(seq(T([-1.0, 2.0]))), 1 / (1 + np.exp(-np.tanh([0.0, 2.0]))), rtol=1e-6)


def test_sequential_mutation_renumbers() -> None:
    seq = nn.Sequential(OrderedDict([("first", nn.ReLU()), ("second", nn.Tanh())]))
    assert [n for n, _ in seq.named_children()] == ["first", "second"]
    gelu = nn.GELU()
    seq[0] = gelu
    assert [n for n, _ in seq.named_children()] == ["first", "second"] and seq.first is gelu
    seq.append(nn.Identity())
    del seq[0]
    assert [type(m).__name__ for m in seq] == ["Tanh", "Identity"]
    assert [n for n, _ in seq.named_children()] == ["0", "1"]
    seq.insert(0, nn.SiLU())
    assert [type(m).__name__ for m in seq] == ["SiLU", "Tanh", "Identity"]
    assert isinstance(seq.pop(1), nn.Tanh) and len(seq) == 2


def test_module_list() -> None:
    shared = nn.Linear(2, 2)
    layers = nn.ModuleList([shared, shared])
    layers.extend([nn.ReLU()])
    layers.insert(1, nn.Tanh())
    assert len(layers) == 4 and layers[0] is layers[2] is shared and isinstance(layers[1], nn.Tanh)
    assert isinstance(layers[1:], nn.ModuleList) and len(layers[1:]) == 3
    assert list(layers.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]  # every path, as torch
    assert len(list(layers.parameters())) == 2  # a shared parameter once


def test_module_dict() -> None:
    d = nn.ModuleDict({"enc": nn.Linear(2, 3), "act": nn.ReLU()})
    d["dec"] = nn.Linear(3, 2)
    assert list(d) == ["enc", "act", "dec"] and "act" in d and len(d) == 3
    assert list(d.state_dict()) == ["enc.weight", "enc.bias", "dec.weight", "dec.bias"]
    assert isinstance(d.pop("act"), nn.ReLU) and list(d.keys()) == ["enc", "dec"]


# --- repr -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layer,text", [
    (nn.Linear(3, 4, bias=False), "in_features=3, out_features=4, bias=False"),
    (nn.Conv2d(3, 8, 3, stride=2, padding=1, groups=1), "3, 8, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1)"),
    (nn.BatchNorm2d(4), "4, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True"),
    (nn.LayerNorm(6), "(6,), eps=1e-05, elementwise_affine=True, bias=True"),
    (nn.Dropout(0.1), "p=0.1, inplace=False"),
    (nn.Embedding(10, 3, padding_idx=0), "10, 3, padding_idx=0"),
    (nn.GELU(), "approximate='none'"),
    (nn.MaxPool2d(2), "kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False"),
])
def test_extra_repr_uses_torch_format(layer: nn.Module, text: str) -> None:
    assert layer.extra_repr() == text
    assert repr(layer).startswith(f"{type(layer).__name__}(") and text in repr(layer)


def test_layers_place_parameters_and_buffers_on_their_device() -> None:
    device = braze.Device("cpu", 1)
    model = nn.Sequential(nn.Linear(2, 3, device=device), nn.BatchNorm1d(3, device="cpu:1"))
    assert {p.lazy_device for p in model.parameters()} == {device}
    assert {b.device for b in model.buffers()} == {device}
    assert model(braze.randn(4, 2).to(device)).device == device


def test_hardtanh_refuses_an_empty_range() -> None:
    with pytest.raises(ValueError, match=r"Hardtanh: max_val \(1.0\) must be greater than min_val \(1.0\)"):
        braze.nn.Hardtanh(1.0, 1.0)
