"""The activation, normalization, convolution, pooling, resizing and loss layers added for torch model files,
against PyTorch through the harness of test_layers_vs_torch (float32 to 1e-5, float64 to 1e-10), plus their
functional forms, repr and the errors for unsupported argument values."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import braze  # noqa: E402
from tests.frontend.test_layers_vs_torch import (CAUSAL, KPM, Case, Lib, check_against_torch, idx,  # noqa: E402
                                                 r)

RNG = np.random.default_rng(99)


def fn(name: str, *args: Any, **kw: Any) -> Callable[[Lib], Any]:
    """A parameterless module applying F.<name>(*inputs, *args, **kw) of the library under test."""
    def make(lib: Lib) -> Any:
        F = torch.nn.functional if lib.is_torch else braze.nn.functional
        base = torch.nn.Module if lib.is_torch else braze.nn.Module

        class Apply(base):  # type: ignore[misc, valid-type]
            def forward(self, *xs: Any) -> Any:
                return getattr(F, name)(*xs, *args, **kw)
        return Apply()
    return make


def probabilities(*shape: int) -> np.ndarray:
    return RNG.uniform(0.05, 0.95, shape)


def log_probabilities(*shape: int) -> np.ndarray:
    x = r(*shape)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def lstm_call(m: Any, xs: list[Any], lib: Lib) -> Any:
    out, (h, c) = m(*xs)
    return out, h, c


def with_state(*shape: int, lstm: bool = False) -> Callable[[Any, list[Any], Lib], Any]:
    """Call a recurrent layer with a given initial state (h0, or (h0, c0)) of `shape`."""
    h0, c0 = r(*shape), r(*shape)

    def call(m: Any, xs: list[Any], lib: Lib) -> Any:
        if lstm:
            return lstm_call(m, [xs[0], (lib.tensor(h0), lib.tensor(c0))], lib)
        return m(xs[0], lib.tensor(h0))
    return call


# torch's hardsigmoid/hardswish backward multiplies by the float32 constant 1/6 even in float64
ONE_SIXTH_IN_FLOAT32 = {"tol64": 1e-7}

CASES = [
    Case("leaky_relu", lambda lib: lib.nn.LeakyReLU(0.2), [r(3, 4)]),
    Case("elu", lambda lib: lib.nn.ELU(0.7), [r(3, 4) * 3]),
    Case("relu6", lambda lib: lib.nn.ReLU6(), [r(3, 4) * 5]),
    Case("hardswish", lambda lib: lib.nn.Hardswish(), [r(3, 4) * 4], extra=ONE_SIXTH_IN_FLOAT32),
    Case("hardsigmoid", lambda lib: lib.nn.Hardsigmoid(), [r(3, 4) * 4], extra=ONE_SIXTH_IN_FLOAT32),
    Case("mish", lambda lib: lib.nn.Mish(), [r(3, 4) * 3]),
    Case("softplus", lambda lib: lib.nn.Softplus(), [r(3, 4) * 3]),
    Case("softplus_beta_threshold", lambda lib: lib.nn.Softplus(beta=2.0, threshold=3.0), [r(3, 4) * 3]),
    Case("prelu_shared", lambda lib: lib.nn.PReLU(dtype=lib.dt), [r(2, 3, 4)]),
    Case("prelu_per_channel", lambda lib: lib.nn.PReLU(3, init=0.1, dtype=lib.dt), [r(2, 3, 4, 2)]),
    Case("glu", lambda lib: lib.nn.GLU(1), [r(2, 6, 3)]),
    Case("log_softmax", lambda lib: lib.nn.LogSoftmax(dim=1), [r(2, 5, 3)]),
    Case("unflatten", lambda lib: lib.nn.Unflatten(1, (2, 3)), [r(4, 6)]),
    Case("groupnorm", lambda lib: lib.nn.GroupNorm(2, 4, dtype=lib.dt), [r(2, 4, 3, 5)]),
    Case("groupnorm_1d_noaffine", lambda lib: lib.nn.GroupNorm(3, 6, eps=1e-3, affine=False, dtype=lib.dt),
         [r(2, 6, 5)]),
    Case("groupnorm_one_group", lambda lib: lib.nn.GroupNorm(1, 3, dtype=lib.dt), [r(2, 3, 4, 4)]),
    Case("instancenorm2d", lambda lib: lib.nn.InstanceNorm2d(3), [r(2, 3, 4, 5)]),
    Case("instancenorm1d_affine_unbatched", lambda lib: lib.nn.InstanceNorm1d(3, affine=True, dtype=lib.dt),
         [r(3, 7)]),
    Case("rmsnorm", lambda lib: lib.nn.RMSNorm(6, dtype=lib.dt), [r(2, 3, 6)]),
    Case("rmsnorm_2d_eps_noaffine", lambda lib: lib.nn.RMSNorm((3, 6), eps=1e-3, elementwise_affine=False),
         [r(2, 3, 6)]),
    Case("conv1d", lambda lib: lib.nn.Conv1d(3, 4, 3, dtype=lib.dt), [r(2, 3, 9)]),
    Case("conv1d_stride_padding_groups", lambda lib: lib.nn.Conv1d(4, 6, 3, stride=2, padding=2, dilation=2,
                                                                  groups=2, dtype=lib.dt), [r(2, 4, 11)]),
    Case("conv1d_same_reflect_unbatched", lambda lib: lib.nn.Conv1d(3, 2, 4, padding="same", padding_mode="reflect",
                                                                   dtype=lib.dt), [r(3, 8)]),
    Case("conv_transpose2d", lambda lib: lib.nn.ConvTranspose2d(3, 4, 3, dtype=lib.dt), [r(2, 3, 4, 5)]),
    Case("conv_transpose2d_stride_padding_output_padding",
         lambda lib: lib.nn.ConvTranspose2d(4, 6, (3, 2), stride=(2, 3), padding=(1, 0), output_padding=(1, 2),
                                            groups=2, dtype=lib.dt), [r(2, 4, 3, 4)]),
    Case("conv_transpose2d_dilation_nobias_unbatched",
         lambda lib: lib.nn.ConvTranspose2d(2, 3, 2, stride=2, dilation=2, bias=False, dtype=lib.dt), [r(2, 3, 3)]),
    # without dilation and with every kernel axis at least its stride, one conv2d per output phase
    Case("conv_transpose2d_upsample_x2", lambda lib: lib.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1,
                                                                          output_padding=1, dtype=lib.dt),
         [r(2, 4, 5, 6)]),
    Case("conv_transpose2d_stride_3_kernel_4_groups",
         lambda lib: lib.nn.ConvTranspose2d(4, 6, 4, stride=3, padding=2, output_padding=2, groups=2, dtype=lib.dt),
         [r(2, 4, 3, 4)]),
    Case("conv_transpose2d_kernel_is_stride", lambda lib: lib.nn.ConvTranspose2d(3, 5, 2, stride=2, dtype=lib.dt),
         [r(2, 3, 4, 4)]),
    Case("conv_transpose2d_stride_2_by_1_one_pixel",
         lambda lib: lib.nn.ConvTranspose2d(3, 4, (4, 3), stride=(2, 1), padding=(1, 1), dtype=lib.dt),
         [r(1, 3, 1, 1)]),
    Case("conv_transpose1d", lambda lib: lib.nn.ConvTranspose1d(3, 2, 4, stride=2, padding=1, dtype=lib.dt),
         [r(2, 3, 6)]),
    Case("maxpool1d", lambda lib: lib.nn.MaxPool1d(3, stride=2, padding=1), [r(2, 3, 8)]),
    Case("avgpool1d", lambda lib: lib.nn.AvgPool1d(2), [r(2, 3, 7)]),
    Case("adaptive_avgpool1d", lambda lib: lib.nn.AdaptiveAvgPool1d(3), [r(2, 3, 7)]),
    Case("adaptive_maxpool2d", lambda lib: lib.nn.AdaptiveMaxPool2d((3, 2)), [r(2, 3, 7, 5)]),
    Case("adaptive_maxpool2d_keep_dim", lambda lib: lib.nn.AdaptiveMaxPool2d((None, 3)), [r(1, 2, 4, 6)]),
    Case("zeropad2d", lambda lib: lib.nn.ZeroPad2d((1, 2, 0, 3)), [r(2, 3, 4, 4)]),
    Case("constantpad2d", lambda lib: lib.nn.ConstantPad2d(2, 1.5), [r(2, 3, 4)]),
    Case("reflectionpad2d", lambda lib: lib.nn.ReflectionPad2d((2, 1, 3, 0)), [r(2, 3, 4, 5)]),
    Case("replicationpad2d", lambda lib: lib.nn.ReplicationPad2d(2), [r(1, 2, 3, 3)]),
    Case("pad_circular", fn("pad", (1, 2, 2, 0), mode="circular"), [r(2, 3, 4, 5)]),
    Case("pad_reflect_1d", fn("pad", (3, 2), mode="reflect"), [r(2, 3, 5)]),
    Case("upsample_nearest", lambda lib: lib.nn.Upsample(scale_factor=2), [r(2, 3, 3, 4)]),
    Case("upsample_nearest_size", lambda lib: lib.nn.Upsample(size=(5, 7)), [r(1, 2, 3, 4)]),
    Case("upsample_bilinear", lambda lib: lib.nn.Upsample(scale_factor=2, mode="bilinear"), [r(2, 3, 3, 4)]),
    Case("upsample_bilinear_align_corners", lambda lib: lib.nn.Upsample(size=(5, 3), mode="bilinear",
                                                                       align_corners=True), [r(2, 2, 3, 4)]),
    Case("interpolate_linear_down", fn("interpolate", size=4, mode="linear"), [r(2, 3, 9)]),
    Case("interpolate_bilinear_fractional_scale", fn("interpolate", scale_factor=1.7, mode="bilinear"),
         [r(1, 2, 4, 5)]),
    Case("interpolate_nearest_recompute", fn("interpolate", scale_factor=1.5, recompute_scale_factor=True),
         [r(1, 2, 4, 5)]),
    Case("pixel_shuffle", lambda lib: lib.nn.PixelShuffle(2), [r(2, 8, 3, 4)]),
    Case("normalize", fn("normalize"), [r(3, 4, 2)]),
    Case("normalize_p1_dim", fn("normalize", p=1.0, dim=-1), [r(3, 4)]),
    Case("normalize_p3", fn("normalize", p=3.0, dim=0), [r(3, 4)]),
    Case("gelu_tanh_functional", fn("gelu", approximate="tanh"), [r(3, 4)]),
    Case("silu_functional", fn("silu"), [r(3, 4)]),
    Case("hardtanh_functional", fn("hardtanh", -0.5, 2.0), [r(3, 4) * 2]),
    Case("lstm", lambda lib: lib.nn.LSTM(3, 4, dtype=lib.dt), [r(5, 2, 3)], call=lstm_call),
    Case("lstm_2layer_bidirectional_batch_first", lambda lib: lib.nn.LSTM(3, 4, 2, batch_first=True,
                                                                          bidirectional=True, dtype=lib.dt),
         [r(2, 5, 3)], call=lstm_call),
    Case("lstm_initial_state_unbatched", lambda lib: lib.nn.LSTM(3, 4, bias=False, dtype=lib.dt), [r(4, 3)],
         call=with_state(1, 4, lstm=True)),
    Case("gru", lambda lib: lib.nn.GRU(3, 4, 2, dtype=lib.dt), [r(5, 2, 3)]),
    Case("gru_bidirectional_initial_state", lambda lib: lib.nn.GRU(3, 4, bidirectional=True, dtype=lib.dt),
         [r(4, 2, 3)], call=with_state(2, 2, 4)),
    Case("rnn_relu_batch_first", lambda lib: lib.nn.RNN(3, 4, nonlinearity="relu", batch_first=True,
                                                        dtype=lib.dt), [r(2, 5, 3)]),
    Case("rnn_tanh_2layer_eval_dropout", lambda lib: lib.nn.RNN(3, 4, 2, dropout=0.5, dtype=lib.dt), [r(5, 2, 3)],
         modes=(False,)),
    Case("decoder_layer_post_norm", lambda lib: lib.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, dtype=lib.dt),
         [r(5, 2, 8), r(6, 2, 8)], call=lambda m, xs, lib: m(xs[0], xs[1], tgt_mask=lib.tensor(CAUSAL),
                                                            tgt_is_causal=True)),
    Case("decoder_layer_pre_norm_gelu_masks", lambda lib: lib.nn.TransformerDecoderLayer(
        8, 2, 16, dropout=0.0, activation="gelu", batch_first=True, norm_first=True, dtype=lib.dt),
         [r(2, 5, 8), r(2, 6, 8)], call=lambda m, xs, lib: m(xs[0], xs[1], memory_key_padding_mask=lib.tensor(KPM))),
    Case("encoder_stack_with_norm", lambda lib: lib.nn.TransformerEncoder(
        lib.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, dtype=lib.dt), 2,
        norm=lib.nn.LayerNorm(8, dtype=lib.dt), enable_nested_tensor=False), [r(5, 2, 8)]),
    Case("decoder_stack", lambda lib: lib.nn.TransformerDecoder(
        lib.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, dtype=lib.dt), 2), [r(5, 2, 8), r(6, 2, 8)]),
    Case("transformer", lambda lib: lib.nn.Transformer(8, 2, 1, 2, 16, dropout=0.0, batch_first=True, dtype=lib.dt),
         [r(2, 6, 8), r(2, 5, 8)], call=lambda m, xs, lib: m(
             xs[0], xs[1], tgt_mask=(torch.nn.Transformer if lib.is_torch else braze.nn.Transformer)
             .generate_square_subsequent_mask(5, dtype=lib.dt))),
    Case("embedding_max_norm", lambda lib: lib.nn.Embedding(10, 4, max_norm=1.0, dtype=lib.dt),
         [np.array([[2, 1, 2, 9], [0, 2, 3, 3]])]),
    Case("embedding_max_norm_p1_padding", lambda lib: lib.nn.Embedding(10, 4, padding_idx=3, max_norm=1.5,
                                                                      norm_type=1.0, dtype=lib.dt),
         [np.array([[2, 1, 3, 9], [0, 2, 3, 3]])]),
    Case("embedding_bag_mean_2d", lambda lib: lib.nn.EmbeddingBag(10, 4, dtype=lib.dt), [idx(10, 3, 4)]),
    Case("embedding_bag_sum_offsets_weights", lambda lib: lib.nn.EmbeddingBag(10, 4, mode="sum", dtype=lib.dt),
         [idx(10, 7), np.array([0, 2, 2, 5]), r(7)]),
    Case("embedding_bag_max_last_offset", lambda lib: lib.nn.EmbeddingBag(10, 4, mode="max",
                                                                         include_last_offset=True, dtype=lib.dt),
         [np.array([1, 4, 4, 9, 0, 2]), np.array([0, 3, 3, 6])]),
    Case("embedding_bag_mean_padding", lambda lib: lib.nn.EmbeddingBag(10, 4, padding_idx=4, dtype=lib.dt),
         [np.array([[1, 4, 4], [4, 4, 4], [0, 2, 3]])]),
    Case("nll_loss", lambda lib: lib.nn.NLLLoss(), [log_probabilities(5, 4), idx(4, 5)]),
    Case("nll_loss_weight_ignore_sum", lambda lib: lib.nn.NLLLoss(weight=lib.tensor([0.2, 1.0, 2.0, 0.7]),
                                                                 ignore_index=2, reduction="sum"),
         [log_probabilities(6, 4), idx(4, 6)]),
    Case("l1", lambda lib: lib.nn.L1Loss(), [r(3, 4), r(3, 4)]),
    Case("l1_none", lambda lib: lib.nn.L1Loss(reduction="none"), [r(3, 4), r(3, 4)]),
    Case("smooth_l1", lambda lib: lib.nn.SmoothL1Loss(), [r(3, 4) * 2, r(3, 4)]),
    Case("smooth_l1_beta_sum", lambda lib: lib.nn.SmoothL1Loss(reduction="sum", beta=0.5), [r(3, 4), r(3, 4)]),
    Case("smooth_l1_beta0", lambda lib: lib.nn.SmoothL1Loss(beta=0.0), [r(3, 4), r(3, 4)]),
    Case("huber", lambda lib: lib.nn.HuberLoss(delta=0.7), [r(3, 4) * 2, r(3, 4)]),
    Case("bce", lambda lib: lib.nn.BCELoss(), [probabilities(3, 4), probabilities(3, 4)]),
    Case("bce_weight_none", lambda lib: lib.nn.BCELoss(weight=lib.tensor(probabilities(4)), reduction="none"),
         [probabilities(3, 4), probabilities(3, 4)]),
    Case("bce_logits", lambda lib: lib.nn.BCEWithLogitsLoss(), [r(3, 4) * 4, probabilities(3, 4)]),
    Case("bce_logits_pos_weight_sum", lambda lib: lib.nn.BCEWithLogitsLoss(
        pos_weight=lib.tensor(probabilities(4) * 3), weight=lib.tensor(probabilities(3, 1)), reduction="sum"),
         [r(3, 4) * 4, probabilities(3, 4)]),
    Case("kl_div_batchmean", lambda lib: lib.nn.KLDivLoss(reduction="batchmean"),
         [log_probabilities(3, 4), probabilities(3, 4)]),
    Case("kl_div_log_target_none", lambda lib: lib.nn.KLDivLoss(reduction="none", log_target=True),
         [log_probabilities(3, 4), log_probabilities(3, 4)]),
]

PARAMS = [pytest.param(c, bits, train, id=f"{c.id}-f{bits}-{'train' if train else 'eval'}")
          for c in CASES for bits in c.bits for train in c.modes[:1]]


@pytest.mark.parametrize("case,bits,train", PARAMS)
def test_layer_matches_torch(case: Case, bits: int, train: bool) -> None:
    check_against_torch(case, bits, train, case.extra.get("tol64") if bits == 64 else None)


def test_kl_div_of_zero_targets_is_zero_with_torch_gradient_in_the_input() -> None:
    x, t = log_probabilities(3, 4), np.where(RNG.random((3, 4)) < 0.4, 0.0, probabilities(3, 4))
    xt, xb = torch.tensor(x, requires_grad=True), braze.tensor(x, requires_grad=True)
    lt = torch.nn.functional.kl_div(xt, torch.tensor(t), reduction="sum")
    lb = braze.nn.functional.kl_div(xb, braze.tensor(t), reduction="sum")
    lt.backward()
    lb.backward()
    np.testing.assert_allclose(lb.detach().numpy(), lt.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(xb.grad.numpy(), xt.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("make", [
    lambda nn: nn.LeakyReLU(0.3), lambda nn: nn.ELU(), lambda nn: nn.ReLU6(inplace=True), lambda nn: nn.Softplus(),
    lambda nn: nn.PReLU(3), lambda nn: nn.GLU(), lambda nn: nn.LogSoftmax(1), lambda nn: nn.Unflatten(1, (2, 3)),
    lambda nn: nn.GroupNorm(2, 4), lambda nn: nn.RMSNorm(6), lambda nn: nn.InstanceNorm2d(3),
    lambda nn: nn.Conv1d(3, 4, 3, padding=1), lambda nn: nn.ConvTranspose2d(4, 2, 3, stride=2, output_padding=1),
    lambda nn: nn.ConvTranspose1d(4, 2, 3, groups=2, bias=False), lambda nn: nn.AdaptiveMaxPool2d(3),
    lambda nn: nn.AvgPool1d(3), lambda nn: nn.PixelShuffle(3),
    lambda nn: nn.LSTM(3, 4, 2, batch_first=True), lambda nn: nn.GRU(3, 4, bias=False, bidirectional=True),
    lambda nn: nn.RNN(3, 4, dropout=0.2, nonlinearity="relu"), lambda nn: nn.ZeroPad2d(2), lambda nn: nn.ConstantPad2d((1, 2, 3, 4), 0.5), lambda nn: nn.ReflectionPad2d(1),
])
def test_extra_repr_matches_torch(make: Callable[[Any], Any]) -> None:
    assert make(braze.nn).extra_repr() == make(torch.nn).extra_repr()
