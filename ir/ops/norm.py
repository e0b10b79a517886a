"""Normalization ops: layer norm, batch norm at inference, batch norm in training (batch statistics), and batch
norm whose mode is a flag operand (one graph for both modes).

All use the biased variance and eps inside the square root, as torch. Their VJPs are composed from registered
ops (mean, sum, rsqrt, ...), recomputing the normalized input rather than keeping it as an extra result.
"""
from __future__ import annotations

import numpy as np

from ..attrs import AttrSpec
from ..errors import ShapeError
from ..registry import defop
from ..row_rules import first_rows
from ..types import TensorType
from ._common import require_bool, require_float, require_rank, same_dtype
from ._window import dims

_EPS = (AttrSpec("eps", "float", 1e-5),)


def _present(*types: TensorType | None) -> list[TensorType]:
    return [t for t in types if t is not None]


# --- layer norm -------------------------------------------------------------------------------------------


def _ln_axes(rank: int, normalized_shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(range(rank - len(normalized_shape), rank))


def _layer_norm_infer(x: TensorType, weight: TensorType | None = None, bias: TensorType | None = None, *,
                      normalized_shape, eps) -> TensorType:
    same_dtype("layer_norm", *_present(x, weight, bias))
    require_float("layer_norm", x)
    ns = tuple(normalized_shape)
    if not ns:
        raise ShapeError("layer_norm: normalized_shape must have at least one dimension, got ()")
    if x.rank < len(ns) or x.shape[x.rank - len(ns):] != ns:
        raise ShapeError(f"layer_norm: given normalized_shape {dims(ns)}, expected input with shape "
                         f"(*,{','.join(map(str, ns))}), got {dims(x.shape)}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.shape != ns:
            raise ShapeError(f"layer_norm: expected {name} of shape {dims(ns)} (normalized_shape), got {dims(t.shape)}")
    return x


def _layer_norm_impl(x, weight=None, bias=None, *, normalized_shape, eps):
    axes = _ln_axes(x.ndim, normalized_shape)
    centered = x - x.mean(axis=axes, keepdims=True)
    y = centered / np.sqrt((centered * centered).mean(axis=axes, keepdims=True) + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.astype(x.dtype, copy=False)


def _normalized(e, x, axes: tuple[int, ...], eps: float):
    """(x - mean) * rstd over `axes`, and rstd (kept dims)."""
    centered = e.sub(x, e.mean(x, axes=axes, keepdim=True))
    rstd = e.rsqrt(e.add(e.mean(e.mul(centered, centered), axes=axes, keepdim=True), eps))
    return e.mul(centered, rstd), rstd


def _layer_norm_vjp(e, g, out, x, weight=None, bias=None, *, normalized_shape, eps):
    axes = _ln_axes(len(x.shape), normalized_shape)
    lead = tuple(range(len(x.shape) - len(axes)))
    xhat, rstd = _normalized(e, x, axes, eps)
    gxhat = g if weight is None else e.mul(g, weight)
    inner = e.add(e.mean(gxhat, axes=axes, keepdim=True),
                  e.mul(xhat, e.mean(e.mul(gxhat, xhat), axes=axes, keepdim=True)))
    grads = [e.mul(rstd, e.sub(gxhat, inner))]

    def over_lead(t):
        return e.sum(t, axes=lead, keepdim=False) if lead else t
    if weight is not None:
        grads.append(over_lead(e.mul(g, xhat)))
    if bias is not None:
        grads.append(over_lead(g))
    return tuple(grads)


layer_norm = defop(
    "layer_norm", ("x", "weight?", "bias?"), infer=_layer_norm_infer, impl=_layer_norm_impl, vjp=_layer_norm_vjp,
    attrs=(AttrSpec("normalized_shape", "shape"),) + _EPS, category="normalization",
    reduces=lambda shape, attrs: _ln_axes(len(shape), attrs["normalized_shape"]),
    doc="Normalize over the trailing normalized_shape dims, then scale and shift, as "
        "torch.nn.functional.layer_norm (a bias needs a weight before it).")

# --- batch norm -------------------------------------------------------------------------------------------


def _channels(op: str, x: TensorType) -> int:
    if x.rank < 2:
        raise ShapeError(f"{op}: expected an input of rank 2 (N,C) or more (N,C,...), got {dims(x.shape)}")
    return x.shape[1]


def _check_params(op: str, x: TensorType, **params: TensorType) -> None:
    same_dtype(op, x, *params.values())
    require_float(op, x)
    c = _channels(op, x)
    for name, t in params.items():
        if t.shape != (c,):
            raise ShapeError(f"{op}: expected {name} of shape ({c},) for input {dims(x.shape)} with {c} channels, "
                             f"got {dims(t.shape)}")


def _stat_axes(rank: int) -> tuple[int, ...]:
    return (0,) + tuple(range(2, rank))


def _per_channel(v: np.ndarray, rank: int) -> np.ndarray:
    return v.reshape((1, -1) + (1,) * (rank - 2))


def _batch_norm_infer(x, running_mean, running_var, weight, bias, *, eps) -> TensorType:
    _check_params("batch_norm", x, running_mean=running_mean, running_var=running_var, weight=weight, bias=bias)
    return x


def _batch_norm_impl(x, running_mean, running_var, weight, bias, *, eps):
    scale = weight / np.sqrt(running_var + eps)
    y = (x - _per_channel(running_mean, x.ndim)) * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)
    return y.astype(x.dtype, copy=False)


def _batch_norm_vjp(e, g, out, x, running_mean, running_var, weight, bias, *, eps):
    rank = len(x.shape)
    shape = (1, x.shape[1]) + (1,) * (rank - 2)
    axes = _stat_axes(rank)
    rstd = e.rsqrt(e.add(running_var, eps))
    centered = e.sub(x, e.reshape(running_mean, shape=shape))
    g_bias = e.sum(g, axes=axes, keepdim=False)
    g_centered = e.sum(e.mul(g, centered), axes=axes, keepdim=False)  # sum of g * (x - mean) per channel
    scale = e.mul(weight, rstd)
    return (e.mul(g, e.reshape(scale, shape=shape)),
            e.neg(e.mul(g_bias, scale)),
            e.mul(e.mul(g_centered, e.mul(scale, e.mul(rstd, rstd))), -0.5),
            e.mul(g_centered, rstd),
            g_bias)


batch_norm = defop(
    "batch_norm", ("x", "running_mean", "running_var", "weight", "bias"), infer=_batch_norm_infer,
    impl=_batch_norm_impl, vjp=_batch_norm_vjp, attrs=_EPS, category="normalization", rows=first_rows,
    doc="Batch norm at inference: normalize channel axis 1 with the running statistics, then scale and shift.")


def _batch_norm_train_infer(x, weight, bias, *, eps) -> tuple[TensorType, TensorType, TensorType]:
    _check_params("batch_norm_train", x, weight=weight, bias=bias)
    if x.size // max(x.shape[1], 1) <= 1:
        raise ShapeError(f"batch_norm_train: expected more than 1 value per channel when training, "
                         f"got input {dims(x.shape)}")
    stat = TensorType((x.shape[1],), x.dtype)
    return x, stat, stat


def _batch_norm_train_impl(x, weight, bias, *, eps):
    axes = _stat_axes(x.ndim)
    mean = x.mean(axis=axes)
    centered = x - _per_channel(mean, x.ndim)
    var = (centered * centered).mean(axis=axes)
    scale = weight / np.sqrt(var + eps)
    y = centered * _per_channel(scale, x.ndim) + _per_channel(bias, x.ndim)
    return y.astype(x.dtype, copy=False), mean, var


def _batch_norm_train_vjp(e, g, out, x, weight, bias, *, eps):
    g_y, g_mean, g_var = g
    rank = len(x.shape)
    axes = _stat_axes(rank)
    shape = (1, x.shape[1]) + (1,) * (rank - 2)
    count = float(np.prod([x.shape[a] for a in axes]))
    dx = g_w = g_b = None
    if g_y is not None:  # from the batch statistics the forward returned: the backward does not recompute them
        rstd = e.rsqrt(e.add(e.reshape(out[2], shape=shape), eps))
        xhat = e.mul(e.sub(x, e.reshape(out[1], shape=shape)), rstd)
        gxhat = e.mul(g_y, e.reshape(weight, shape=shape))
        inner = e.add(e.mean(gxhat, axes=axes, keepdim=True),
                      e.mul(xhat, e.mean(e.mul(gxhat, xhat), axes=axes, keepdim=True)))
        dx = e.mul(rstd, e.sub(gxhat, inner))
        g_w = e.sum(e.mul(g_y, xhat), axes=axes, keepdim=False)
        g_b = e.sum(g_y, axes=axes, keepdim=False)
    if g_mean is not None:
        dx = _accumulate(e, dx, e.mul(e.reshape(g_mean, shape=shape), 1.0 / count), x.shape)
    if g_var is not None:
        centered = e.sub(x, e.reshape(out[1], shape=shape))
        dx = _accumulate(e, dx, e.mul(centered, e.mul(e.reshape(g_var, shape=shape), 2.0 / count)), x.shape)
    return dx, g_w, g_b


def _batch_norm_train_decomposition(e, x, weight, bias, *, eps):
    """The batch statistics, then the affine normalization, as registered ops (the reference's steps)."""
    rank = len(x.shape)
    axes, shape = _stat_axes(rank), (1, x.shape[1]) + (1,) * (rank - 2)
    mean = e.mean(x, axes=axes, keepdim=False)
    centered = e.sub(x, e.reshape(mean, shape=shape))
    var = e.mean(e.mul(centered, centered), axes=axes, keepdim=False)
    scale = e.div(weight, e.sqrt(e.add(var, eps)))
    y = e.add(e.mul(centered, e.reshape(scale, shape=shape)), e.reshape(bias, shape=shape))
    return y, mean, var


def _accumulate(e, total, term, shape: tuple[int, ...]):
    """total + term at the input's shape (term may be a per-channel broadcast); total None means zero."""
    if total is None:
        return e.broadcast_to(term, shape=tuple(shape)) if tuple(term.shape) != tuple(shape) else term
    return e.add(total, term)


batch_norm_train = defop(
    "batch_norm_train", ("x", "weight", "bias"), infer=_batch_norm_train_infer, impl=_batch_norm_train_impl,
    vjp=_batch_norm_train_vjp, attrs=_EPS, category="normalization", num_results=3,
    decomposition=_batch_norm_train_decomposition,
    doc="Batch norm in training: normalize with the batch statistics; returns (y, batch mean, biased batch "
        "variance) so the caller can update running statistics.")


# --- batch norm with its training flag as an operand -------------------------------------------------------


def _batch_norm_flag_infer(x, running_mean, running_var, weight, bias, training, *, eps):
    _check_params("batch_norm_flag", x, running_mean=running_mean, running_var=running_var, weight=weight,
                  bias=bias)
    require_bool("batch_norm_flag", training, "the training flag")
    require_rank("batch_norm_flag", training, 0, "the training flag")
    stat = TensorType((x.shape[1],), x.dtype)
    return x, stat, stat


def _batch_norm_flag_impl(x, running_mean, running_var, weight, bias, training, *, eps):
    if bool(training):
        if x.size // max(x.shape[1], 1) <= 1:  # the shape alone cannot tell: the flag decides the mode
            raise ShapeError(f"batch_norm_flag: expected more than 1 value per channel when training, "
                             f"got input {dims(x.shape)}")
        return _batch_norm_train_impl(x, weight, bias, eps=eps)
    y = _batch_norm_impl(x, running_mean, running_var, weight, bias, eps=eps)
    return y, running_mean.copy(), running_var.copy()


def _select(e, training, if_training, otherwise, like):
    """where(training, if_training, otherwise) with None meaning a zero gradient; None when both are."""
    if if_training is None and otherwise is None:
        return None
    zero = e.scalar(0.0, like)
    return e.where(training, zero if if_training is None else if_training, zero if otherwise is None else otherwise)


def _batch_norm_flag_vjp(e, g, out, x, running_mean, running_var, weight, bias, training, *, eps):
    """Both modes' gradients, selected by the flag: the batch-statistics rule when training, else the rule of
    batch_norm with the running statistics passed through as the mean and variance results."""
    g_y, g_mean, g_var = g
    dx_t, g_w_t, g_b_t = _batch_norm_train_vjp(e, g, out, x, weight, bias, eps=eps)
    dx_e = g_mean_e = g_var_e = g_w_e = g_b_e = None
    if g_y is not None:
        dx_e, g_mean_e, g_var_e, g_w_e, g_b_e = _batch_norm_vjp(e, g_y, out[0], x, running_mean, running_var,
                                                                 weight, bias, eps=eps)
    if g_mean is not None:
        g_mean_e = g_mean if g_mean_e is None else e.add(g_mean_e, g_mean)
    if g_var is not None:
        g_var_e = g_var if g_var_e is None else e.add(g_var_e, g_var)
    return (_select(e, training, dx_t, dx_e, x), _select(e, training, None, g_mean_e, x),
            _select(e, training, None, g_var_e, x), _select(e, training, g_w_t, g_w_e, x),
            _select(e, training, g_b_t, g_b_e, x), None)


batch_norm_flag = defop(
    "batch_norm_flag", ("x", "running_mean", "running_var", "weight", "bias", "training"),
    infer=_batch_norm_flag_infer, impl=_batch_norm_flag_impl, vjp=_batch_norm_flag_vjp, attrs=_EPS,
    category="normalization", num_results=3,
    doc="Batch norm whose mode is the bool[] flag operand `training`: when true, normalize with the batch "
        "statistics and return (y, batch mean, biased batch variance), as batch_norm_train; when false, normalize "
        "with the running statistics and return (y, running_mean, running_var), as batch_norm. The caller blends "
        "the running statistics with where(training, ...), so one graph serves both modes.")
