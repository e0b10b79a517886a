"""Differential tests against PyTorch: the same expression, written once against the shared API, gives the
same forward values and the same gradients in braze and torch on equal float64 inputs."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import braze
import braze.nn.functional as bF

torch = pytest.importorskip("torch")
tF = torch.nn.functional
pytestmark = pytest.mark.filterwarnings("ignore:Using padding=.same. with even kernel")

R = np.random.default_rng(0)


def n(*shape: int) -> np.ndarray:
    return R.standard_normal(shape)


def pos(*shape: int) -> np.ndarray:
    return R.uniform(0.5, 2.0, shape)


def ints(high: int, *shape: int) -> np.ndarray:
    return R.integers(0, high, shape)


def outside(*shape: int) -> np.ndarray:
    """|x| in [3.5, 5]: where hardsigmoid and hardswish are flat or linear (torch's backward between -3 and 3
    multiplies by a float32 1/6 even in float64; the layer tests check there with a float32 tolerance)."""
    return R.uniform(3.5, 5.0, shape) * R.choice([-1.0, 1.0], shape)


# (id, expression over (module, functional, *leaves), operand arrays); float arrays become leaves requiring grad
Case = tuple[str, Callable[..., Any], tuple[np.ndarray, ...]]
COMPOSED: list[Case] = [
    ("leaky_relu", lambda m, F, x: F.leaky_relu(x, 0.2), (n(3, 4),)),
    ("elu", lambda m, F, x: F.elu(x, alpha=0.5), (n(3, 4),)),
    ("hardtanh", lambda m, F, x: F.hardtanh(x, -0.5, 0.7), (n(3, 4),)),
    ("relu6", lambda m, F, x: F.relu6(x * 5), (n(3, 4),)),
    ("hardswish", lambda m, F, x: F.hardswish(x), (outside(3, 4),)),
    ("hardsigmoid", lambda m, F, x: F.hardsigmoid(x), (outside(3, 4),)),
    # exact ends (relu6 after zero padding sees 0.0): torch's gradient is zero there, unlike clamp's
    ("relu6_at_its_ends", lambda m, F, x: F.relu6(x), (np.array([-1.0, 0.0, 3.0, 6.0, 7.0]),)),
    ("hardtanh_at_its_ends", lambda m, F, x: F.hardtanh(x, -0.5, 2.0), (np.array([-0.5, 0.0, 2.0, 3.0]),)),
    ("hardswish_at_its_ends", lambda m, F, x: F.hardswish(x), (np.array([-4.0, -3.0, 3.0, 4.0]),)),
    ("hardsigmoid_at_its_ends", lambda m, F, x: F.hardsigmoid(x), (np.array([-4.0, -3.0, 3.0, 4.0]),)),
    ("softplus", lambda m, F, x: F.softplus(x * 4, beta=0.5, threshold=3.0), (n(3, 4),)),
    ("mish", lambda m, F, x: F.mish(x), (n(3, 4),)),
    ("prelu", lambda m, F, x, w: F.prelu(x, w), (n(2, 3, 2), pos(3))),
    ("glu", lambda m, F, x: F.glu(x, 1), (n(2, 4, 3),)),
    ("embedding_bag", lambda m, F, i, w, o: F.embedding_bag(i, w, o, mode="mean"),
     (ints(6, 5), n(6, 3), np.array([0, 1, 1]))),
    ("l1_loss", lambda m, F, x, y: F.l1_loss(x, y), (n(3, 4), n(3, 4))),
    ("smooth_l1_loss", lambda m, F, x, y: F.smooth_l1_loss(x, y, beta=0.4), (n(3, 4), n(3, 4))),
    ("huber_loss", lambda m, F, x, y: F.huber_loss(x, y, reduction="sum", delta=0.6), (n(3, 4), n(3, 4))),
    ("binary_cross_entropy", lambda m, F, p, t: F.binary_cross_entropy(p, t), (pos(3, 4) / 2.5, pos(3, 4) / 2.5)),
    ("binary_cross_entropy_with_logits", lambda m, F, x, t: F.binary_cross_entropy_with_logits(
        x, t, pos_weight=m.tensor([0.5, 1.0, 2.0, 3.0], dtype=m.float64)), (n(3, 4) * 3, pos(3, 4) / 2.5)),
    ("kl_div", lambda m, F, x, t: F.kl_div(x, t, reduction="batchmean"), (n(3, 4), pos(3, 4))),
    ("group_norm", lambda m, F, x, w, b: F.group_norm(x, 2, w, b), (n(2, 4, 3), n(4), n(4))),
    ("instance_norm", lambda m, F, x: F.instance_norm(x), (n(2, 3, 5),)),
    ("rms_norm", lambda m, F, x, w: F.rms_norm(x, [4], w, eps=1e-4), (n(2, 3, 4), n(4))),
    ("normalize", lambda m, F, x: F.normalize(x, dim=-1), (n(3, 4),)),
    ("conv1d", lambda m, F, x, w, b: F.conv1d(x, w, b, stride=2, padding=1, groups=2),
     (n(2, 4, 7), n(6, 2, 3), n(6))),
    ("conv_transpose1d", lambda m, F, x, w: F.conv_transpose1d(x, w, stride=3, padding=1, output_padding=1),
     (n(2, 3, 4), n(3, 2, 3))),
    ("conv_transpose2d", lambda m, F, x, w, b: F.conv_transpose2d(x, w, b, stride=2, dilation=(1, 2)),
     (n(1, 2, 3, 3), n(2, 3, 2, 2), n(3))),
    ("max_pool1d", lambda m, F, x: F.max_pool1d(x, 2), (n(2, 3, 6),)),
    ("avg_pool1d", lambda m, F, x: F.avg_pool1d(x, 3, stride=2, padding=1), (n(2, 3, 7),)),
    ("adaptive_avg_pool1d", lambda m, F, x: F.adaptive_avg_pool1d(x, 4), (n(2, 3, 7),)),
    ("adaptive_max_pool2d", lambda m, F, x: F.adaptive_max_pool2d(x, (2, 3)), (n(1, 2, 5, 7),)),
    ("interpolate_bilinear", lambda m, F, x: F.interpolate(x, size=(4, 7), mode="bilinear", align_corners=True),
     (n(1, 2, 3, 4),)),
    ("interpolate_nearest", lambda m, F, x: F.interpolate(x, scale_factor=(2, 1.5)), (n(1, 2, 3, 4),)),
    ("pixel_shuffle", lambda m, F, x: F.pixel_shuffle(x, 2), (n(1, 8, 2, 3),)),
    ("conv3d", lambda m, F, x, w, b: F.conv3d(x, w, b, stride=(2, 1, 1), padding=1, dilation=(1, 2, 1)),
     (n(2, 3, 5, 6, 5), n(4, 3, 3, 2, 3), n(4))),
    ("conv3d_groups_same", lambda m, F, x, w: F.conv3d(x, w, padding="same", groups=2),
     (n(1, 4, 4, 5, 5), n(6, 2, 2, 3, 4))),
    ("conv_transpose3d", lambda m, F, x, w, b: F.conv_transpose3d(x, w, b, stride=2, padding=(1, 0, 1),
                                                                 output_padding=(1, 0, 0), groups=2),
     (n(1, 4, 3, 3, 4), n(4, 2, 3, 2, 3), n(4))),
    ("max_pool3d", lambda m, F, x: F.max_pool3d(x, 3, stride=2, padding=1, ceil_mode=True), (n(1, 2, 5, 6, 7),)),
    ("avg_pool3d", lambda m, F, x: F.avg_pool3d(x, (2, 3, 3), stride=2, padding=(1, 1, 0), count_include_pad=False),
     (n(2, 2, 5, 6, 7),)),
    ("avg_pool3d_divisor", lambda m, F, x: F.avg_pool3d(x, 3, stride=2, padding=1, ceil_mode=True, divisor_override=4),
     (n(1, 2, 5, 6, 7),)),
    ("adaptive_avg_pool3d", lambda m, F, x: F.adaptive_avg_pool3d(x, (2, None, 3)), (n(2, 3, 5, 4, 7),)),
    ("adaptive_max_pool3d", lambda m, F, x: F.adaptive_max_pool3d(x, (2, 3, 3)), (n(1, 2, 5, 4, 7),)),
    ("interpolate_trilinear", lambda m, F, x: F.interpolate(x, size=(3, 5, 4), mode="trilinear"),
     (n(1, 2, 2, 3, 5),)),
    ("affine_grid", lambda m, F, t: F.affine_grid(t, (2, 3, 4, 5), align_corners=False), (n(2, 2, 3),)),
    ("affine_grid_3d_aligned", lambda m, F, t: F.affine_grid(t, (1, 2, 2, 3, 4), align_corners=True), (n(1, 3, 4),)),
    ("grid_sample", lambda m, F, x, g: F.grid_sample(x, g, align_corners=False), (n(1, 2, 4, 5), n(1, 3, 3, 2) * 0.9)),
    ("grid_sample_bicubic_reflection", lambda m, F, x, g: F.grid_sample(x, g, "bicubic", "reflection", True),
     (n(1, 2, 4, 5), n(1, 3, 3, 2) * 1.5)),
    ("grid_sample_nearest_border", lambda m, F, x, g: F.grid_sample(x, g, "nearest", "border", False),
     (n(2, 2, 3, 4), n(2, 2, 3, 2) * 1.5)),
    ("grid_sample_3d", lambda m, F, x, g: F.grid_sample(x, g, padding_mode="reflection", align_corners=False),
     (n(1, 2, 3, 4, 3), n(1, 2, 2, 3, 3) * 1.2)),
    ("max_pool2d_with_indices", lambda m, F, x: F.max_pool2d_with_indices(x, 3, 2, 1, ceil_mode=True),
     (n(2, 2, 6, 7),)),
    ("max_pool2d_return_indices", lambda m, F, x: F.max_pool2d(x, 2, return_indices=True), (n(1, 2, 5, 4),)),
    ("max_pool1d_with_indices", lambda m, F, x: F.max_pool1d_with_indices(x, 3, stride=2), (n(2, 3, 8),)),
    ("max_unpool2d", lambda m, F, x: F.max_unpool2d(*F.max_pool2d_with_indices(x, 2), 2, output_size=(5, 7)),
     (n(2, 3, 5, 7),)),
    ("max_unpool1d", lambda m, F, x: F.max_unpool1d(*F.max_pool1d_with_indices(x, 3, 2, 1), 3, 2, 1), (n(2, 3, 7),)),
    # the hard sample of logits 1e3 apart is one-hot whatever the noise: values, dtype and the gradient's presence
    ("gumbel_softmax_hard_dominant_logits", lambda m, F, x: F.gumbel_softmax(
        x + m.tensor([0.0, 1e3, -1e3, 0.0], dtype=m.float64), hard=True), (n(3, 4),)),
    ("triplet_margin_with_distance_loss", lambda m, F, a, p, q: F.triplet_margin_with_distance_loss(
        a, p, q, distance_function=lambda u, v: 1.0 - F.cosine_similarity(u, v), margin=0.8, swap=True),
     (n(4, 5), n(4, 5), n(4, 5))),
]
FUNCTIONAL: list[Case] = [
    ("linear", lambda m, F, x, w, b: F.linear(x, w, b), (n(2, 3, 4), n(5, 4), n(5))),
    ("linear_nobias", lambda m, F, x, w: F.linear(x, w), (n(3, 4), n(2, 4))),
    ("conv2d", lambda m, F, x, w, b: F.conv2d(x, w, b, stride=2, padding=1), (n(2, 3, 6, 6), n(4, 3, 3, 3), n(4))),
    ("conv2d_same_even", lambda m, F, x, w: F.conv2d(x, w, padding="same", dilation=(1, 2)),
     (n(1, 2, 5, 6), n(3, 2, 2, 2))),
    ("conv2d_groups", lambda m, F, x, w: F.conv2d(x, w, groups=2, padding=(1, 0), dilation=2),
     (n(1, 4, 6, 6), n(6, 2, 2, 3))),
    ("conv2d_valid", lambda m, F, x, w: F.conv2d(x, w, padding="valid"), (n(1, 2, 4, 4), n(2, 2, 3, 3))),
    ("max_pool2d", lambda m, F, x: F.max_pool2d(x, 2), (n(2, 3, 6, 6),)),
    ("max_pool2d_ceil", lambda m, F, x: F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True), (n(1, 2, 6, 7),)),
    ("max_pool2d_dilated", lambda m, F, x: F.max_pool2d(x, (2, 2), stride=1, dilation=2), (n(1, 2, 5, 5),)),
    ("avg_pool2d", lambda m, F, x: F.avg_pool2d(x, 2), (n(2, 3, 6, 6),)),
    ("avg_pool2d_pad", lambda m, F, x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
     (n(1, 2, 6, 7),)),
    ("adaptive_avg_pool2d", lambda m, F, x: F.adaptive_avg_pool2d(x, (2, 3)), (n(2, 2, 5, 7),)),
    ("relu", lambda m, F, x: F.relu(x), (n(3, 4),)),
    ("gelu", lambda m, F, x: F.gelu(x), (n(3, 4),)),
    ("gelu_tanh", lambda m, F, x: F.gelu(x, approximate="tanh"), (n(3, 4),)),
    ("silu", lambda m, F, x: F.silu(x), (n(3, 4),)),
    ("sigmoid", lambda m, F, x: F.sigmoid(x), (n(3, 4),)),
    ("tanh", lambda m, F, x: F.tanh(x), (n(3, 4),)),
    ("softmax", lambda m, F, x: F.softmax(x, dim=1), (n(3, 4),)),
    ("log_softmax", lambda m, F, x: F.log_softmax(x, -1), (n(2, 3, 4),)),
    ("layer_norm", lambda m, F, x, w, b: F.layer_norm(x, (3, 4), w, b, eps=1e-3), (n(2, 3, 4), n(3, 4), n(3, 4))),
    ("layer_norm_plain", lambda m, F, x: F.layer_norm(x, [4]), (n(2, 4),)),
    ("batch_norm_eval", lambda m, F, x, rm, rv, w, b: F.batch_norm(x, rm.detach(), rv.detach(), w, b),
     (n(4, 3, 2, 2), n(3), pos(3), n(3), n(3))),
    ("batch_norm_train", lambda m, F, x, w, b: F.batch_norm(x, None, None, w, b, training=True),
     (n(4, 3, 5), n(3), n(3))),
    ("dropout_eval", lambda m, F, x: F.dropout(x, 0.5, training=False), (n(3, 4),)),
    ("dropout_zero", lambda m, F, x: F.dropout(x, 0.0), (n(3, 4),)),
    ("embedding", lambda m, F, w, i: F.embedding(i, w), (n(5, 3), ints(5, 2, 4))),
    ("embedding_padding", lambda m, F, w: F.embedding(m.tensor([[0, 2], [2, 1]]), w, padding_idx=2), (n(4, 3),)),
    ("one_hot", lambda m, F, i: F.one_hot(i, 5), (ints(5, 2, 3),)),
    ("one_hot_inferred", lambda m, F: F.one_hot(m.tensor([1, 3])), ()),
    ("pad", lambda m, F, x: F.pad(x, (1, 2, 0, 1)), (n(2, 3, 4),)),
    ("pad_value_crop", lambda m, F, x: F.pad(x, (-1, 1, 2, -1), value=0.5), (n(3, 4),)),
    ("cross_entropy", lambda m, F, x, t: F.cross_entropy(x, t), (n(5, 4), ints(4, 5))),
    ("cross_entropy_ignore_smooth", lambda m, F, x: F.cross_entropy(
        x, m.tensor([1, -100, 3, 0]), ignore_index=-100, label_smoothing=0.2), (n(4, 4),)),
    ("cross_entropy_none_spatial", lambda m, F, x, t: F.cross_entropy(x, t, reduction="none"),
     (n(2, 3, 2, 2), ints(3, 2, 2, 2))),
    ("cross_entropy_sum_unbatched", lambda m, F, x: F.cross_entropy(x, m.tensor(2), reduction="sum"), (n(3),)),
    ("cross_entropy_probs", lambda m, F, x, p: F.cross_entropy(x, F.softmax(p, 1), label_smoothing=0.1),
     (n(3, 4), n(3, 4))),
    ("cross_entropy_weight", lambda m, F, x, w: F.cross_entropy(x, m.tensor([0, 2, 1, 2]), weight=w.detach()),
     (n(4, 3), pos(3))),
    ("cross_entropy_weight_smooth", lambda m, F, x, w: F.cross_entropy(
        x, m.tensor([0, 2, -100, 1]), weight=w.detach(), label_smoothing=0.3), (n(4, 3), pos(3))),
    ("cross_entropy_weight_probs", lambda m, F, x, p, w: F.cross_entropy(
        x, F.softmax(p, 1), weight=w.detach(), label_smoothing=0.2), (n(3, 4), n(3, 4), pos(4))),
    ("nll_loss", lambda m, F, x, t: F.nll_loss(F.log_softmax(x, 1), t), (n(5, 4), ints(4, 5))),
    ("nll_loss_weight_ignore", lambda m, F, x, w: F.nll_loss(
        F.log_softmax(x, 1), m.tensor([0, 2, -100, 1]), weight=w.detach(), reduction="sum"), (n(4, 3), pos(3))),
    ("mse_loss", lambda m, F, x, y: F.mse_loss(x, y), (n(3, 4), n(3, 4))),
    ("mse_loss_sum", lambda m, F, x, y: F.mse_loss(x, y, reduction="sum"), (n(3, 4), n(3, 4))),
    ("mse_loss_none", lambda m, F, x, y: F.mse_loss(x, y, reduction="none"), (n(3, 4), n(3, 4))),
    ("scaled_dot_product_attention", lambda m, F, q, k, v: F.scaled_dot_product_attention(q, k, v),
     (n(2, 3, 4), n(2, 5, 4), n(2, 5, 4))),
    ("scaled_dot_product_attention_causal", lambda m, F, q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=True, scale=0.3),
     (n(2, 2, 4, 3), n(2, 2, 4, 3), n(2, 2, 4, 5))),
    ("scaled_dot_product_attention_bool_mask", lambda m, F, q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=m.tensor([[True, False, True], [True, True, False]])), (n(2, 3), n(3, 3), n(3, 4))),
    ("scaled_dot_product_attention_masked_row", lambda m, F, q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=m.tensor([[True, False, True], [False, False, False]])), (n(2, 3), n(3, 3), n(3, 4))),
    ("scaled_dot_product_attention_float_mask", lambda m, F, q, k, v, a: F.scaled_dot_product_attention(
        q, k, v, attn_mask=a),
     (n(1, 2, 3), n(1, 4, 3), n(1, 4, 2), n(2, 4))),
    ("scaled_dot_product_attention_gqa", lambda m, F, q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
     (n(1, 4, 3, 2), n(1, 2, 3, 2), n(1, 2, 3, 2))),
    ("bilinear", lambda m, F, a, b, w, c: F.bilinear(a, b, w, c), (n(2, 3, 4), n(2, 3, 5), n(6, 4, 5), n(6))),
    ("unfold", lambda m, F, x: F.unfold(x, (2, 3), dilation=(2, 1), padding=1, stride=(1, 2)), (n(2, 3, 6, 7),)),
    ("fold", lambda m, F, x: F.fold(x, (5, 6), 2, padding=1, stride=2), (n(2, 12, 12),)),
    ("pixel_unshuffle", lambda m, F, x: F.pixel_unshuffle(x, 2), (n(1, 2, 4, 6),)),
    ("channel_shuffle", lambda m, F, x: F.channel_shuffle(x, 2), (n(2, 6, 3),)),
    ("selu", lambda m, F, x: F.selu(x), (n(3, 4),)),
    ("celu", lambda m, F, x: F.celu(x, alpha=0.5), (n(3, 4),)),  # torch's backward rounds 1/alpha to float32
    ("softsign", lambda m, F, x: F.softsign(x), (n(3, 4),)),
    ("logsigmoid", lambda m, F, x: F.logsigmoid(x * 4), (n(3, 4),)),
    ("softmin", lambda m, F, x: F.softmin(x, dim=1), (n(3, 4),)),
    ("tanhshrink", lambda m, F, x: F.tanhshrink(x), (n(3, 4),)),
    ("softshrink", lambda m, F, x: F.softshrink(x, 0.3), (n(3, 4),)),
    ("hardshrink", lambda m, F, x: F.hardshrink(x, 0.3), (n(3, 4),)),
    ("threshold", lambda m, F, x: F.threshold(x, 0.2, -1.0), (n(3, 4),)),
    ("rrelu_eval", lambda m, F, x: F.rrelu(x, 0.1, 0.3), (n(3, 4),)),
    ("cosine_similarity", lambda m, F, x, y: F.cosine_similarity(x, y, dim=-1), (n(3, 1, 4), n(2, 4))),
    ("pairwise_distance", lambda m, F, x, y: F.pairwise_distance(x, y, p=3.0, keepdim=True), (n(3, 4), n(3, 4))),
    ("dropout1d_eval", lambda m, F, x: F.dropout1d(x, 0.5, training=False), (n(2, 3, 4),)),
    ("dropout2d_eval", lambda m, F, x: F.dropout2d(x, 0.5, training=False), (n(2, 3, 2, 2),)),
    ("dropout3d_eval", lambda m, F, x: F.dropout3d(x, 0.5, training=False), (n(2, 3, 2, 1, 2),)),
    ("alpha_dropout_eval", lambda m, F, x: F.alpha_dropout(x, 0.5), (n(3, 4),)),
    ("feature_alpha_dropout_eval", lambda m, F, x: F.feature_alpha_dropout(x, 0.5), (n(2, 3, 4),)),
    ("margin_ranking_loss", lambda m, F, x, y: F.margin_ranking_loss(x, y, m.tensor([1.0, -1.0, 1.0, -1.0],
                                                                                     dtype=m.float64), margin=0.2),
     (n(4), n(4))),
    ("hinge_embedding_loss", lambda m, F, x: F.hinge_embedding_loss(
        x, m.tensor([[1.0, -1.0, -1.0], [-1.0, 1.0, -1.0]], dtype=m.float64), reduction="sum"), (n(2, 3),)),
    ("soft_margin_loss", lambda m, F, x: F.soft_margin_loss(
        x * 3, m.tensor([[1.0, -1.0, -1.0], [-1.0, 1.0, -1.0]], dtype=m.float64)), (n(2, 3),)),
    ("cosine_embedding_loss", lambda m, F, x, y: F.cosine_embedding_loss(
        x, y, m.tensor([1.0, -1.0, -1.0], dtype=m.float64), margin=0.1, reduction="none"), (n(3, 4), n(3, 4))),
    ("triplet_margin_loss", lambda m, F, a, p, q: F.triplet_margin_loss(a, p, q, margin=1.5, swap=True),
     (n(3, 4), n(3, 4), n(3, 4))),
    ("poisson_nll_loss", lambda m, F, x, t: F.poisson_nll_loss(x, t.detach() * 3, full=True), (n(3, 4), pos(3, 4))),
    ("poisson_nll_loss_rates", lambda m, F, x, t: F.poisson_nll_loss(x, t.detach(), log_input=False),
     (pos(3, 4), pos(3, 4))),
    ("gaussian_nll_loss", lambda m, F, x, t, v: F.gaussian_nll_loss(x, t, v, full=True), (n(3, 4), n(3, 4), pos(3))),
    ("multilabel_soft_margin_loss", lambda m, F, x, t, w: F.multilabel_soft_margin_loss(
        x, t.detach(), weight=w.detach()), (n(3, 4), pos(3, 4) / 2, pos(4))),
    ("multi_margin_loss", lambda m, F, x, w: F.multi_margin_loss(x, m.tensor([0, 3, 1]), p=2, margin=0.7,
                                                                 weight=w.detach()), (n(3, 4), pos(4))),
    ("adaptive_max_pool1d", lambda m, F, x: F.adaptive_max_pool1d(x, 3), (n(2, 3, 8),)),
    ("adaptive_max_pool1d_unbatched", lambda m, F, x: F.adaptive_max_pool1d(x, 5), (n(3, 7),)),
    ("lp_pool1d", lambda m, F, x: F.lp_pool1d(x, 2, 3, stride=2), (n(2, 3, 8),)),
    ("lp_pool1d_fractional_ceil", lambda m, F, x: F.lp_pool1d(x, 1.5, 3, stride=2, ceil_mode=True), (pos(2, 3, 8),)),
    ("lp_pool2d", lambda m, F, x: F.lp_pool2d(x, 3, (2, 3)), (pos(2, 2, 4, 6),)),
    ("lp_pool2d_inf", lambda m, F, x: F.lp_pool2d(x, float("inf"), 2, stride=1), (n(1, 2, 4, 4),)),
    ("local_response_norm", lambda m, F, x: F.local_response_norm(x, 3, alpha=0.1, beta=0.6, k=1.5), (n(2, 5, 4),)),
    ("local_response_norm_4d_even", lambda m, F, x: F.local_response_norm(x, 2), (n(2, 4, 3, 3),)),
    *COMPOSED,
]

METHODS: list[Case] = [
    ("arith", lambda m, F, x, y: (x + y) * x - y / (x * x + 1) + 2.0 - 3 * x + 1 / (y * y + 1), (n(3, 4), n(4))),
    ("pow", lambda m, F, x, y: x.abs() ** y + x ** 2 + 2.0 ** y + x.pow(3), (n(3, 4), n(3, 4))),
    ("unary", lambda m, F, x: (-x).exp() + x.abs().log() + x.abs().sqrt() + x.tanh() + x.sigmoid() + x.relu()
     + x.abs().rsqrt(), (n(3, 4),)),
    ("clamp", lambda m, F, x: x.clamp(-0.5, 0.7) + x.clamp(min=0.1) + m.clamp(x, max=0.2), (n(4, 5),)),
    ("max_min_elementwise", lambda m, F, x, y: m.maximum(x, y) * m.minimum(x, y), (n(3, 4), n(3, 4))),
    ("compare_where", lambda m, F, x, y: m.where(x > y, x, y * 2) + x.masked_fill(x < 0, 0.5), (n(3, 4), n(3, 4))),
    ("sum", lambda m, F, x: x.sum() + x.sum(dim=1).sum() + x.sum((0, 2), keepdim=True).sum(), (n(2, 3, 4),)),
    ("mean", lambda m, F, x: x.mean(-1, keepdim=True) * x.mean(), (n(2, 3, 4),)),
    ("max_dim", lambda m, F, x: x.max(1), (n(3, 5),)),
    ("min_dim", lambda m, F, x: m.min(x, dim=0, keepdim=True), (n(3, 5),)),
    ("max_all", lambda m, F, x: x.max() + x.min(), (n(3, 5),)),
    ("amax", lambda m, F, x: x.amax(dim=(0, 2)) + m.amin(x, 1).sum(-1).sum(), (n(2, 3, 4),)),
    ("argmax", lambda m, F, x: (x.argmax(), x.argmax(dim=1), x.argmin(0, keepdim=True)), (n(3, 5),)),
    ("var_std", lambda m, F, x: x.var(1) + x.std(dim=1, keepdim=False) + x.var(1, unbiased=False), (n(3, 5),)),
    ("logsumexp", lambda m, F, x: m.logsumexp(x, dim=1), (n(3, 5),)),
    ("softmax_method", lambda m, F, x: x.softmax(0) + x.log_softmax(dim=1), (n(3, 5),)),
    ("matmul", lambda m, F, a, b, v: (a @ b) @ v + m.matmul(a, b).sum(), (n(2, 3, 4), n(4, 5), n(5))),
    ("reshape_view", lambda m, F, x: x.reshape(4, -1) + x.view(-1, 6).reshape(4, 6) + x.reshape((4, 6)),
     (n(2, 3, 4),)),
    ("permute_transpose", lambda m, F, x: x.permute(2, 0, 1).transpose(0, 1) + x.transpose(0, 2).mT.transpose(0, 1),
     (n(2, 3, 4),)),
    ("T", lambda m, F, x: x.T @ x, (n(3, 4),)),
    ("flatten", lambda m, F, x: x.flatten() + x.flatten(1).flatten() + m.flatten(x, 0, 1).reshape(-1), (n(2, 3, 4),)),
    ("squeeze_unsqueeze", lambda m, F, x: x.unsqueeze(1).squeeze() + x.unsqueeze(-1).squeeze(-1) + x.squeeze(0),
     (n(3, 4),)),
    ("expand", lambda m, F, x: x.expand(2, 3, -1) * x.unsqueeze(0).expand_as(m.zeros(2, 3, 4, dtype=m.float64)),
     (n(3, 1),)),
    ("index_basic", lambda m, F, x: x[1, 1:, ::2] + x[0, None, :2, -1:] * x[..., 1:3, 2].unsqueeze(-1), (n(2, 3, 4),)),
    ("index_array", lambda m, F, x: x[:, [2, 0, 2]] + x[1, :, m.tensor([1, 1, 0])].T.sum(), (n(2, 4, 3),)),
    ("cat_stack", lambda m, F, x, y: m.cat([x, y], dim=1).sum(0)[1:4] + m.stack([x, y], -1).sum((0, 2)),
     (n(2, 3), n(2, 3))),
    ("split_chunk", lambda m, F, x: x.split(2, dim=1)[1] * x.chunk(3, 1)[0] + m.split(x, [1, 2, 3], 1)[2].sum(),
     (n(3, 6),)),
    ("gather_index_select", lambda m, F, x: x.gather(1, m.tensor([[0, 2], [1, 1]]))
     + x.index_select(1, m.tensor([2, 0])),
     (n(2, 3),)),
    ("promotion", lambda m, F, x: x * m.tensor([1, 2, 3]) + m.tensor([1, 2, 3]) / 2 + m.tensor([2, 3, 4]) * 0.5,
     (n(3),)),
]


def _run(lib: str, fn: Callable[..., Any], arrays: tuple[np.ndarray, ...]) -> tuple[list, list]:
    """Forward values and gradients (w.r.t. every float operand) of a fixed projection of fn's float outputs."""
    m, F = (braze, bF) if lib == "braze" else (torch, tF)
    leaves = [m.tensor(a, requires_grad=True) if a.dtype.kind == "f" else m.tensor(a) for a in arrays]
    out = fn(m, F, *leaves)
    outs = tuple(out) if isinstance(out, tuple) else (out,)
    total = None
    for k, o in enumerate(outs):
        if o.requires_grad:
            term = (o * m.tensor(np.random.default_rng(k).standard_normal(tuple(o.shape)))).sum()
            total = term if total is None else total + term
    if total is not None:
        total.backward()
    values = [np.asarray(o.detach().numpy()) for o in outs]
    grads = [None if leaf.grad is None else np.asarray(leaf.grad.numpy()) for leaf in leaves]
    return values, grads


@pytest.mark.parametrize("name,fn,arrays", FUNCTIONAL + METHODS, ids=[c[0] for c in FUNCTIONAL + METHODS])
def test_matches_torch(name: str, fn: Callable[..., Any], arrays: tuple[np.ndarray, ...]) -> None:
    got_values, got_grads = _run("braze", fn, arrays)
    want_values, want_grads = _run("torch", fn, arrays)
    assert len(got_values) == len(want_values)
    for got, want in zip(got_values, want_values):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    for k, (got, want) in enumerate(zip(got_grads, want_grads)):
        assert (got is None) == (want is None), f"operand {k}: gradient presence differs"
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=f"gradient of operand {k}")


def test_every_functional_name_is_covered() -> None:
    ids = [c[0] for c in FUNCTIONAL]
    missing = [name for name in bF.__all__ if not any(i == name or i.startswith(name + "_") for i in ids)]
    assert not missing, f"no differential case for {missing}"


def test_batch_norm_running_stats_match_torch() -> None:
    x = n(4, 3, 2, 2)
    b_mean, b_var = braze.tensor(np.zeros(3)), braze.tensor(np.ones(3))
    t_mean, t_var = torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    bF.batch_norm(braze.tensor(x), b_mean, b_var, training=True, momentum=0.3)
    tF.batch_norm(torch.tensor(x), t_mean, t_var, training=True, momentum=0.3)
    np.testing.assert_allclose(b_mean.numpy(), t_mean.numpy(), rtol=1e-12)
    np.testing.assert_allclose(b_var.numpy(), t_var.numpy(), rtol=1e-12)


def test_dropout_statistics_match_torch() -> None:
    braze.manual_seed(0)
    kept = (bF.dropout(braze.ones(20000, dtype=braze.float64), 0.3).numpy() != 0).mean()
    assert abs(kept - 0.7) < 0.02
