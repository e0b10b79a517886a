"""braze.nn.functional: torch.nn.functional's layer functions with its names, argument names and defaults.

Each function is a registered op (conv2d, layer_norm, cross_entropy, scaled_dot_product_attention as attention, ...)
or a short composition of them (linear), bound through apply so autodiff and tracing see every step.
"""
from __future__ import annotations

import math
import warnings
from typing import Any, Sequence

import numpy as np

from braze.ir.errors import ShapeError
from braze.ir.ops.attention import attention_probabilities
from braze.ir.types import bool_

from .. import functions as _f
from ..autodiff import TensorEmitter, no_grad
from ..creation import default_generator
from ..dispatch import apply
from ..promotion import as_operand, binary_operands, coerce
from ..tensor import Tensor
from .nll import class_last, picked_loss, reduce_weighted
from .nll import nll_loss as _nll_loss
from .param import Param

from .functional_activation import *  # noqa: F403  (re-exported: F.leaky_relu, F.elu, ...)
from .functional_activation import __all__ as _activation_all
from .functional_activation import SELU_ALPHA, SELU_SCALE, when_training
from .functional_distance import *  # noqa: F403  (re-exported: F.cosine_similarity, F.pairwise_distance)
from .functional_distance import __all__ as _distance_all
from .functional_embedding import *  # noqa: F403  (re-exported: F.embedding, F.one_hot, F.embedding_bag)
from .functional_embedding import EMBEDDING_BAG_MODES
from .functional_embedding import __all__ as _embedding_all
from .functional_loss import *  # noqa: F403  (re-exported: F.l1_loss, F.binary_cross_entropy, ...)
from .functional_loss import __all__ as _loss_all
from .functional_loss import legacy_reduction as _reduction
from .functional_norm import *  # noqa: F403  (re-exported: F.group_norm, F.rms_norm, ...)
from .functional_norm import __all__ as _norm_all
from .functional_norm import store_in_place
from .functional_sampling import *  # noqa: F403  (re-exported: F.grid_sample, F.affine_grid, ...)
from .functional_sampling import __all__ as _sampling_all
from .functional_spatial import *  # noqa: F403  (re-exported: F.conv1d, F.interpolate, ...)
from .functional_spatial import INTERPOLATE_MODES, PAD_MODES, pad_indexed, pair_of
from .functional_spatial import __all__ as _spatial_all

__all__ = ["linear", "bilinear", "conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "relu", "gelu", "silu",
           "sigmoid", "tanh", "softmax", "log_softmax", "layer_norm", "batch_norm", "dropout", "dropout1d",
           "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout", "pad", "cross_entropy", "nll_loss",
           "mse_loss", "scaled_dot_product_attention", *_activation_all, *_distance_all, *_embedding_all, *_loss_all,
           *_norm_all, *_spatial_all, *_sampling_all]


def __dir__() -> list[str]:
    """The API only: dir(F) and tab completion list the layer functions, not this module's imports."""
    return sorted(__all__)


def _pair(value: int | Sequence[int], name: str) -> tuple[int, int]:
    return pair_of(value, name, "nn.functional")


def _constant(value: float, like: Tensor, shape: tuple[int, ...]) -> Tensor:
    return Tensor._wrap(np.full(shape, value, dtype=like._data.dtype))


def _batched(input: Tensor, rank: int, fn: Any) -> Tensor:
    """Apply `fn` to a batch of one when `input` lacks the batch dim (torch accepts (C,H,W) for 2-d ops)."""
    if input.ndim == rank - 1:
        return _f.squeeze(fn(_f.unsqueeze(input, 0)), 0)
    return fn(input)


# --- linear and convolution -------------------------------------------------------------------------------


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """input @ weight.T + bias, with weight of shape (out_features, in_features).

    A weight Param whose LoRA adapter has dropout takes PEFT's path: input @ base.T + bias + scale *
    (dropout(input) @ a.T) @ b.T, the dropout following the adapter's own flag.
    """
    adapter = weight.adapter if isinstance(weight, Param) else None
    if adapter is not None and adapter.dropout > 0.0:
        return adapter.linear(input, weight.base(), bias)
    out = _f.matmul(input, _f.t(weight))
    return out if bias is None else _f.add(out, bias)


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """y = x1^T A x2 + b per leading position, weight (out_features, in1_features, in2_features).

    x1 @ A is one matmul with A laid out as (in1, out * in2); its product with x2 is then summed over in2.
    """
    if weight.ndim != 3:
        raise ShapeError(f"bilinear(): weight must be 3-dimensional (out, in1, in2), got {list(weight.shape)}")
    if input1.ndim != input2.ndim:
        raise ShapeError(f"bilinear(): input dimensions do not match: got {input1.ndim} and {input2.ndim}")
    for axis, (a, b) in enumerate(zip(input1.shape[:-1], input2.shape[:-1])):
        if a != b:
            raise ShapeError(f"bilinear(): input batch dimensions do not match at dim {axis}: got {a} and {b}")
    out_features, in1, in2 = weight.shape
    for name, given, want in (("input1", input1.shape[-1], in1), ("input2", input2.shape[-1], in2)):
        if given != want:
            raise ShapeError(f"bilinear(): {name} size does not match weight size: got {given} but expected {want}")
    if bias is not None and tuple(bias.shape) != (out_features,):
        raise ShapeError(f"bilinear(): bias size does not match weight size: got {list(bias.shape)} but expected "
                         f"[{out_features}]")
    a = _f.reshape(_f.permute(weight, (1, 0, 2)), (in1, out_features * in2))
    mixed = _f.reshape(_f.matmul(input1, a), tuple(input1.shape[:-1]) + (out_features, in2))
    out = _f.sum(_f.mul(mixed, _f.unsqueeze(input2, -2)), -1)
    return out if bias is None else _f.add(out, bias)


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
           padding: int | Sequence[int] | str = 0, dilation: int | Sequence[int] = 1, groups: int = 1) -> Tensor:
    """2-d cross-correlation of (N,C,H,W) or (C,H,W) input; padding may be an int, a pair, 'valid' or 'same'.

    A weight Param whose LoRA adapter has dropout takes PEFT's path: conv(input, base) + scale *
    conv(conv(dropout(input), a), b), the dropout following the adapter's own flag.
    """
    adapter = weight.adapter if isinstance(weight, Param) else None
    if adapter is not None and adapter.dropout > 0.0:
        return adapter.conv2d(input, weight.base(), bias, stride, padding, dilation, groups)
    stride2, dilation2 = _pair(stride, "stride"), _pair(dilation, "dilation")
    x = input
    if isinstance(padding, str):
        if padding == "valid":
            pads = (0, 0)
        elif padding == "same":
            if stride2 != (1, 1):
                raise ValueError("conv2d: padding='same' is not supported for strided convolutions (as torch)")
            total = [dilation2[a] * (weight.shape[2 + a] - 1) for a in range(2)]
            pads = (total[0] // 2, total[1] // 2)
            extra = (total[0] - 2 * pads[0], total[1] - 2 * pads[1])
            if any(extra):  # an even kernel extent: torch puts the odd row/column of padding after
                x = pad(x, (0, extra[1], 0, extra[0]))
        else:
            raise ValueError(f"conv2d: padding must be 'valid', 'same' or ints, got {padding!r}")
    else:
        pads = _pair(padding, "padding")
    operands = (weight,) if bias is None else (weight, bias)
    return _batched(x, 4, lambda v: apply("conv2d", v, *operands, stride=stride2, padding=pads,
                                          dilation=dilation2, groups=groups))


# --- pooling ----------------------------------------------------------------------------------------------


def max_pool2d(input: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor:
    """Max over sliding windows of the last two dims; stride defaults to kernel_size. With return_indices, also each
    maximum's flat index h * W + w in its plane (max_pool2d_with_indices), as max_unpool2d takes them."""
    if return_indices:
        return max_pool2d_with_indices(input, kernel_size, stride, padding, dilation, ceil_mode)
    kernel = _pair(kernel_size, "kernel_size")
    return apply("max_pool2d", input, kernel_size=kernel, stride=kernel if stride is None else _pair(stride, "stride"),
                 padding=_pair(padding, "padding"), dilation=_pair(dilation, "dilation"), ceil_mode=ceil_mode)


def avg_pool2d(input: Tensor, kernel_size: int | Sequence[int], stride: int | Sequence[int] | None = None,
               padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: int | None = None) -> Tensor:
    """Mean over sliding windows of the last two dims; stride defaults to kernel_size."""
    if divisor_override is not None:
        raise ValueError("avg_pool2d: divisor_override is not supported")
    kernel = _pair(kernel_size, "kernel_size")
    return apply("avg_pool2d", input, kernel_size=kernel, stride=kernel if stride is None else _pair(stride, "stride"),
                 padding=_pair(padding, "padding"), ceil_mode=ceil_mode, count_include_pad=count_include_pad)


def adaptive_avg_pool2d(input: Tensor, output_size: int | Sequence[int | None]) -> Tensor:
    """Average pooling to `output_size` (a None entry keeps that input dim)."""
    size = (output_size, output_size) if isinstance(output_size, (int, np.integer)) else tuple(output_size)
    size = tuple(input.shape[-2 + a] if s is None else int(s) for a, s in enumerate(size))
    return apply("adaptive_avg_pool2d", input, output_size=size)


# --- activations ------------------------------------------------------------------------------------------


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """max(input, 0) elementwise."""
    return apply("relu", input)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """Gaussian error linear unit: exact (erf) or the tanh approximation."""
    return apply("gelu", input, approximate=approximate)


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """input * sigmoid(input) elementwise."""
    return apply("silu", input)


def sigmoid(input: Tensor) -> Tensor:
    """1 / (1 + exp(-input)) elementwise."""
    return _f.sigmoid(input)


def tanh(input: Tensor) -> Tensor:
    """Hyperbolic tangent elementwise."""
    return _f.tanh(input)


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    """exp(input) normalized to sum 1 along `dim`."""
    return _f.softmax(input, dim, dtype=dtype)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype: Any = None) -> Tensor:
    """log(softmax(input)) along `dim`."""
    return _f.log_softmax(input, dim, dtype=dtype)


# --- normalization and regularization ---------------------------------------------------------------------


def layer_norm(input: Tensor, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalize over the trailing `normalized_shape` dims, then scale by weight and shift by bias."""
    shape = (int(normalized_shape),) if isinstance(normalized_shape, (int, np.integer)) else tuple(normalized_shape)
    if bias is not None and weight is None:
        weight = _constant(1.0, input, shape)  # the op takes a bias only after a weight
    operands = [o for o in (weight, bias) if o is not None]
    return apply("layer_norm", input, *operands, normalized_shape=shape, eps=eps)


def batch_norm(input: Tensor, running_mean: Any, running_var: Any, weight: Tensor | None = None,
               bias: Tensor | None = None, training: Any = False, momentum: Any = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch norm over channel dim 1, as torch; in training, batch statistics are used and the running ones
    updated (momentum, unbiased variance) outside autodiff.

    `training` is a bool or a Flag (or a bool[] tensor). With running statistics the op batch_norm_flag takes
    it as an operand and each statistic becomes where(training, (1 - momentum) * running + momentum * batch,
    running), so a traced graph keeps the flag and serves both modes. Statistics given as Params (a layer's
    buffers) are stored with Param.assign (a buffer-update output under tracing), plain tensors in place.
    `momentum` is a float or a tensor (the layer's cumulative average passes 1 / batch count).
    """
    channels = (input.shape[1],) if input.ndim >= 2 else (0,)
    weight = _constant(1.0, input, channels) if weight is None else weight
    bias = _constant(0.0, input, channels) if bias is None else bias
    literal = isinstance(training, (bool, np.bool_))
    if running_mean is None or running_var is None:
        if not training:
            raise ValueError("batch_norm: running_mean and running_var are required when training=False")
        y, mean, var = apply("batch_norm_train", input, weight, bias, eps=eps)
    else:
        flag = Tensor._wrap(np.asarray(bool(training))) if literal else training
        y, mean, var = apply("batch_norm_flag", input, running_mean, running_var, weight, bias, flag, eps=eps)
        if literal and not training:
            return y
    if running_mean is None and running_var is None:
        return y
    if momentum is None:
        raise ValueError("batch_norm: momentum=None (a cumulative average) needs the module's batch count; "
                         "pass a float")
    count = input.numel() // input.shape[1]
    with no_grad():
        keep = _f.sub(1.0, momentum) if isinstance(momentum, Tensor) else 1.0 - momentum
        # a batch of one value per channel cannot train (the op raises); in eval the blend is not selected
        unbiased = _f.mul(var.detach(), count / max(count - 1, 1))
        for running, batch in ((running_mean, mean.detach()), (running_var, unbiased)):
            if running is None:
                continue
            blend = _f.add(_f.mul(running, keep), _f.mul(batch, momentum))
            store_in_place(running, blend if literal else apply("where", training, *binary_operands(blend, running)))
    return y


def _checked_probability(p: float) -> None:
    """A ValueError unless 0 <= p <= 1."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def dropout(input: Tensor, p: float = 0.5, training: Any = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p) when training.

    The mask's seed is drawn from the global generator (braze.manual_seed makes it repeatable) and the
    training flag is an operand, so a traced graph keeps it as a flag. Under braze.trace the seed is drawn the
    same way and captured as an i64 constant of the graph: interpreting the graph repeats the mask of the eager
    call that followed the same manual_seed, and every run of the graph uses that one mask.
    """
    _checked_probability(p)
    if isinstance(training, (bool, np.bool_)):
        flag = Tensor._wrap(np.asarray(bool(training)))
        seed = default_generator.draw_seed() if training else 0
    else:
        flag = training
        seed = default_generator.draw_seed()
    return apply("dropout", input, flag, Tensor._wrap(np.asarray(seed, dtype=np.int64)), p=p)


def _channel_keep(input: Tensor, p: float, training: Any) -> Tensor:
    """A (N, C, 1, ...) mask of one draw per channel: 1/(1-p) for a kept channel, 0 for a dropped one (1 where
    `training` is off): dropout of ones, so the seed and the training flag are dropout's."""
    if input.ndim < 2:
        raise ValueError(f"feature dropout requires at least 2 dimensions in the input, got shape {input.shape}")
    return dropout(_constant(1.0, input, tuple(input.shape[:2]) + (1,) * (input.ndim - 2)), p, training)


def _feature_dropout(input: Tensor, p: float, training: Any) -> Tensor:
    """Zero whole channels (dim 1) with probability p and scale the rest by 1/(1-p) when training."""
    if p == 0.0 or (isinstance(training, (bool, np.bool_)) and not training):
        return input
    return _f.mul(input, _channel_keep(input, p, training))


def _deprecated_rank(name: str, input: Tensor, ranks: tuple[int, int], spatial: int) -> None:
    """torch's warning for a channel-wise dropout given an input of another rank."""
    if input.ndim not in ranks:
        warnings.warn(f"{name}: Received a {input.ndim}-D input to {name}, which is deprecated and will result in an "
                      f"error in a future release. To retain the behavior and silence this warning, please use "
                      f"dropout instead. Note that {name} exists to provide channel-wise dropout on inputs with "
                      f"{spatial} spatial dimensions, a channel dimension, and an optional batch dimension (i.e. "
                      f"{ranks[0]}D or {ranks[1]}D inputs).", UserWarning, stacklevel=3)


def dropout1d(input: Tensor, p: float = 0.5, training: Any = True, inplace: bool = False) -> Tensor:
    """Channel-wise dropout of (N, C, L) or (C, L) input: each channel zeroed with probability p and the rest scaled
    by 1/(1-p) when training (a bool, a Flag or a bool[] tensor, as dropout's)."""
    _checked_probability(p)
    if input.ndim not in (2, 3):
        raise ValueError(f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D input. Note that "
                         f"dropout1d exists to provide channel-wise dropout on inputs with 1 spatial dimension, a "
                         f"channel dimension, and an optional batch dimension (i.e. 2D or 3D inputs).")
    return _batched(input, 3, lambda x: _feature_dropout(x, p, training))


def dropout2d(input: Tensor, p: float = 0.5, training: Any = True, inplace: bool = False) -> Tensor:
    """Channel-wise dropout of (N, C, H, W) input, as dropout1d; a 3-d input is taken as (N, C, L), as torch does
    (with its warning)."""
    _checked_probability(p)
    _deprecated_rank("dropout2d", input, (3, 4), 2)
    if input.ndim == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout behavior "
                      "is desired - input is interpreted as shape (N, C, L), where C is the channel dim. This "
                      "behavior will change in a future release to interpret the input as one without a batch "
                      "dimension, i.e. shape (C, H, W). To maintain the 1D channel-wise dropout behavior, please "
                      "switch to using dropout1d instead.", UserWarning, stacklevel=2)
    return _feature_dropout(input, p, training)


def dropout3d(input: Tensor, p: float = 0.5, training: Any = True, inplace: bool = False) -> Tensor:
    """Channel-wise dropout of (N, C, D, H, W) or (C, D, H, W) input, as dropout1d."""
    _checked_probability(p)
    _deprecated_rank("dropout3d", input, (4, 5), 3)
    return _batched(input, 5, lambda x: _feature_dropout(x, p, training))


# how far below 0 SELU saturates: the value alpha dropout gives the dropped entries, negated
_SELU_SATURATION = SELU_SCALE * SELU_ALPHA


def _alpha_dropout(input: Tensor, p: float, training: Any, feature: bool) -> Tensor:
    """torch's alpha dropout: dropped entries (elements, or channels when `feature`) set to SELU's saturation value,
    then all scaled by a and shifted by b so that a SELU network's activations keep zero mean and unit variance."""
    _checked_probability(p)
    if p == 0.0 or (isinstance(training, (bool, np.bool_)) and not training):
        return input

    def dropped() -> Tensor:
        if p == 1.0:
            return _f.mul(input, 0.0)
        kept = _channel_keep(input, p, training) if feature else \
            dropout(_constant(1.0, input, tuple(input.shape)), p, training)
        keep = _f.to_dtype(_f.gt(kept, 0.0), input.dtype)
        a = 1.0 / math.sqrt((_SELU_SATURATION ** 2 * p + 1) * (1 - p))
        b = _f.add(_f.mul(_f.sub(keep, 1.0), _SELU_SATURATION * a), _SELU_SATURATION * a * p)
        return _f.add(_f.mul(input, _f.mul(keep, a)), b)

    return when_training(training, dropped, lambda: input)


def alpha_dropout(input: Tensor, p: float = 0.5, training: Any = False, inplace: bool = False) -> Tensor:
    """Alpha dropout (for SELU networks) of each element with probability p when training; identity otherwise."""
    return _alpha_dropout(input, p, training, feature=False)


def feature_alpha_dropout(input: Tensor, p: float = 0.5, training: Any = False, inplace: bool = False) -> Tensor:
    """Alpha dropout of whole channels (dim 1) with probability p when training; identity otherwise."""
    return _alpha_dropout(input, p, training, feature=True)


# --- padding ---------------------------------------------------------------------------------------------


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
    """Padding of the trailing dims; `pad` lists (before, after) pairs starting from the last dim, as torch.
    Constant padding may be negative (it crops); reflect, replicate and circular repeat the input's own values."""
    if mode not in PAD_MODES:
        raise ValueError(f"pad: mode={mode!r} is not supported; supported: {', '.join(map(repr, PAD_MODES))}")
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ValueError(f"pad: expected an even number of values for at most {input.ndim} dims, got {list(pad)}")
    natural = [0] * (2 * input.ndim)
    for k in range(len(pad) // 2):
        axis = input.ndim - 1 - k
        natural[2 * axis], natural[2 * axis + 1] = int(pad[2 * k]), int(pad[2 * k + 1])
    if mode != "constant":
        if value:
            raise ValueError(f"pad: value={value} applies to mode='constant' only, not mode={mode!r}")
        return pad_indexed(input, natural, mode)
    out = input
    if any(p > 0 for p in natural):
        out = apply("pad", input, pads=tuple(max(p, 0) for p in natural), value=0.0 if value is None else value)
    if any(p < 0 for p in natural):
        starts = tuple(-min(natural[2 * a], 0) for a in range(input.ndim))
        stops = tuple(d + min(natural[2 * a + 1], 0) for a, d in enumerate(out.shape))
        if any(lo > hi for lo, hi in zip(starts, stops)):
            raise ShapeError(f"pad: {list(pad)} crops more than the size of input shape {input.shape}")
        out = apply("slice", out, starts=starts, stops=stops, steps=(1,) * input.ndim)
    return out if out is not input else apply("reshape", input, shape=input.shape)



# --- losses -----------------------------------------------------------------------------------------------


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: bool | None = None,
                  ignore_index: int = -100, reduce: bool | None = None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Softmax cross entropy over the class dim (1, or 0 for unbatched input) with class-index or
    class-probability targets; per-class `weight` is composed from registered ops."""
    reduction = _reduction(size_average, reduce, reduction)
    target = _f.as_tensor(target)
    if weight is None:
        return apply("cross_entropy", input, target, reduction=reduction, ignore_index=ignore_index,
                     label_smoothing=label_smoothing)
    return _weighted_cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing)


def _weighted_cross_entropy(input: Tensor, target: Tensor, weight: Tensor, ignore_index: int, reduction: str,
                            label_smoothing: float) -> Tensor:
    """torch's weighted cross entropy: each class's log-probability scaled by its weight."""
    axis = 1 if input.ndim >= 2 else 0
    classes = input.shape[axis]
    logp = class_last(_f.log_softmax(input, axis), axis)  # (..., C)
    if target.dtype.is_float:
        mix = _f.add(_f.mul(class_last(target, axis), 1.0 - label_smoothing), label_smoothing / classes)
        loss = _f.neg(_f.sum(_f.mul(_f.mul(logp, weight), mix), -1))
        return loss if reduction == "none" else (_f.sum(loss) if reduction == "sum" else _f.mean(loss))
    loss, w_target = picked_loss(logp, target, weight, ignore_index)
    if label_smoothing:
        smooth = _f.neg(_f.sum(_f.mul(logp, weight), -1))
        loss = _f.add(_f.mul(loss, 1.0 - label_smoothing),
                      _f.where(_f.ne(target, ignore_index), _f.mul(smooth, label_smoothing / classes), 0.0))
    return reduce_weighted(loss, w_target, reduction)


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average: bool | None = None,
             ignore_index: int = -100, reduce: bool | None = None, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of class-index targets given log-probabilities over dim 1 (0 when unbatched)."""
    return _nll_loss(input, target, weight, ignore_index, _reduction(size_average, reduce, reduction))


def mse_loss(input: Tensor, target: Tensor, size_average: bool | None = None, reduce: bool | None = None,
             reduction: str = "mean") -> Tensor:
    """Mean (or summed, or per-element) squared difference; the operands broadcast."""
    x, y = binary_operands(input, target)
    return apply("mse_loss", x, y, reduction=_reduction(size_average, reduce, reduction))


# --- attention --------------------------------------------------------------------------------------------


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """softmax(q @ k^T * scale + mask) @ v over (..., L, E) queries and (..., S, E) keys, as torch: the registered
    attention op (one kernel when compiled), or its steps with dropout on the weights when dropout_p > 0.

    A bool mask keeps the positions where it is True; a float mask is added to the scores. A query row that every
    position is masked for gives 0, as torch. With enable_gqa, key and value heads (dim -3) are repeated to match
    the query heads.
    """
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: pass either attn_mask or is_causal, not both")
    q, k, v = coerce([query, key, value])
    if enable_gqa and k.shape[-3] != q.shape[-3]:
        repeat = q.shape[-3] // k.shape[-3]
        heads = Tensor._wrap(np.repeat(np.arange(k.shape[-3], dtype=np.int64), repeat))
        k, v = (apply("index_select", t, heads, axis=t.ndim - 3) for t in (k, v))
    batch = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    q, k, v = (t if t.shape[:-2] == batch else _f.broadcast_to(t, batch + tuple(t.shape[-2:])) for t in (q, k, v))
    masks = []
    if attn_mask is not None:
        mask = as_operand(attn_mask)
        masks.append(mask if mask.dtype == bool_ else _f.to_dtype(mask, q.dtype))
    attrs = dict(scale=1.0 / math.sqrt(q.shape[-1]) if scale is None else scale, causal=bool(is_causal),
                 zero_masked_rows=True)
    if dropout_p > 0.0:
        weights = attention_probabilities(TensorEmitter(apply), q, k, *masks, **attrs)
        return _f.matmul(dropout(weights, dropout_p, training=True), v)
    return apply("attention", q, k, v, *masks, **attrs)
