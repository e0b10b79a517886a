"""BatchNorm1d/2d/3d, LayerNorm, GroupNorm, RMSNorm, InstanceNorm1d/2d/3d and LocalResponseNorm, as torch.nn's:
parameter and buffer names, defaults and updates."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from braze.ir.types import int64

from ... import functions as _f
from ...autodiff import no_grad
from ...dispatch import apply
from .. import functional as F
from ..flag import Flag
from ..module import Module
from ._init import constant, fill, float_dtype, lazy


class _BatchNorm(Module):
    """Batch normalization over channel dim 1 with torch's buffers and update rule.

    Parameters weight (ones) and bias (zeros, unless bias=False) when affine; buffers running_mean (zeros),
    running_var (ones) and num_batches_tracked (int64 scalar) when track_running_stats. The Flag `training`
    selects batch statistics (and a running-statistics update with `momentum`, or a cumulative average when
    momentum is None) or the running statistics; it is an operand of the batch_norm_flag op, not a Python branch.
    """

    _ranks: tuple[int, ...] = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device: Any = None, dtype: Any = None, *,
                 bias: bool = True) -> None:
        super().__init__()
        d = float_dtype(dtype, type(self).__name__)
        self.num_features, self.eps, self.momentum = int(num_features), float(eps), momentum
        self.affine, self.track_running_stats = bool(affine), bool(track_running_stats)
        shape = (self.num_features,)
        self.register_parameter("weight", lazy(shape, constant(1.0), d, device) if affine else None)
        self.register_parameter("bias", lazy(shape, constant(0.0), d, device) if affine and bias else None)
        track = self.track_running_stats
        self.register_buffer("running_mean", fill(shape, 0.0, d, device) if track else None)
        self.register_buffer("running_var", fill(shape, 1.0, d, device) if track else None)
        self.register_buffer("num_batches_tracked", fill((), 0, int64, device) if track else None)
        self.training = Flag(True)

    def reset_running_stats(self) -> None:
        """Running mean back to zeros, variance to ones and the batch count to zero, in place."""
        if self.track_running_stats:
            self.running_mean.assign(np.zeros(self.num_features))
            self.running_var.assign(np.ones(self.num_features))
            self.num_batches_tracked.assign(0)

    def _check_input_dim(self, input: Any) -> None:
        if input.ndim not in self._ranks:
            wanted = " or ".join(f"{r}D" for r in self._ranks)
            raise ValueError(f"expected {wanted} input (got {input.ndim}D input)")

    def forward(self, input: Any) -> Any:
        self._check_input_dim(input)
        if not self.track_running_stats:
            return F.batch_norm(input, None, None, self.weight, self.bias, True, 0.0, self.eps)
        # the flag is an operand, never a Python branch: the batch count grows by cast(training), and
        # F.batch_norm selects the statistics and their update with it, so a traced graph serves both modes
        training = self.flag("training")
        with no_grad():
            count = _f.add(self.num_batches_tracked, apply("cast", training, dtype=int64))
            self.num_batches_tracked.assign(count)
            momentum = self.momentum
            if momentum is None:  # a cumulative moving average over every batch seen
                momentum = _f.div(1.0, _f.to_dtype(count, self.running_mean.dtype))
        return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias, training, momentum,
                            self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch norm over (N, C) or (N, C, L) input, as torch.nn.BatchNorm1d."""

    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch norm over (N, C, H, W) input, as torch.nn.BatchNorm2d."""

    _ranks = (4,)


class BatchNorm3d(_BatchNorm):
    """Batch norm over (N, C, D, H, W) input, as torch.nn.BatchNorm3d."""

    _ranks = (5,)


class LayerNorm(Module):
    """Normalize over the trailing `normalized_shape` dims, then scale (ones) and shift (zeros), as torch."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        d = float_dtype(dtype, "LayerNorm")
        shape = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else normalized_shape
        self.normalized_shape = tuple(int(s) for s in shape)
        self.eps, self.elementwise_affine = float(eps), bool(elementwise_affine)
        affine = self.elementwise_affine
        shape = self.normalized_shape
        self.register_parameter("weight", lazy(shape, constant(1.0), d, device) if affine else None)
        self.register_parameter("bias", lazy(shape, constant(0.0), d, device) if affine and bias else None)

    def forward(self, input: Any) -> Any:
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class GroupNorm(Module):
    """Normalize each sample's channels in num_groups groups, then scale (ones) and shift (zeros) per channel."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 device: Any = None, dtype: Any = None, *, bias: bool = True) -> None:
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        d = float_dtype(dtype, "GroupNorm")
        self.num_groups, self.num_channels = int(num_groups), int(num_channels)
        self.eps, self.affine = float(eps), bool(affine)
        shape = (self.num_channels,)
        self.register_parameter("weight", lazy(shape, constant(1.0), d, device) if affine else None)
        self.register_parameter("bias", lazy(shape, constant(0.0), d, device) if affine and bias else None)

    def forward(self, input: Any) -> Any:
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class RMSNorm(Module):
    """x / sqrt(mean(x**2) + eps) over the trailing normalized_shape dims, times weight (ones); eps=None is the
    input dtype's machine epsilon."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float | None = None,
                 elementwise_affine: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        d = float_dtype(dtype, "RMSNorm")
        shape = (normalized_shape,) if isinstance(normalized_shape, (int, np.integer)) else normalized_shape
        self.normalized_shape = tuple(int(s) for s in shape)
        self.eps, self.elementwise_affine = (None if eps is None else float(eps)), bool(elementwise_affine)
        weight = lazy(self.normalized_shape, constant(1.0), d, device) if elementwise_affine else None
        self.register_parameter("weight", weight)

    def forward(self, input: Any) -> Any:
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class _InstanceNorm(Module):
    """Normalize each sample's channels separately over their positions; affine weight (ones) and bias (zeros)
    when affine. Running statistics (track_running_stats=True) are not supported."""

    _ranks: tuple[int, ...] = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device: Any = None, dtype: Any = None, *,
                 bias: bool = True) -> None:
        super().__init__()
        name = type(self).__name__
        if track_running_stats:
            raise ValueError(f"{name}: track_running_stats=True is not supported; supported: False")
        d = float_dtype(dtype, name)
        self.num_features, self.eps, self.momentum = int(num_features), float(eps), momentum
        self.affine, self.track_running_stats = bool(affine), False
        shape = (self.num_features,)
        self.register_parameter("weight", lazy(shape, constant(1.0), d, device) if affine else None)
        self.register_parameter("bias", lazy(shape, constant(0.0), d, device) if affine and bias else None)

    def forward(self, input: Any) -> Any:
        if input.ndim not in self._ranks:
            raise ValueError(f"{type(self).__name__}: expected {self._ranks[0]}D or {self._ranks[1]}D input "
                             f"(got {input.ndim}D input)")
        batched = input.ndim == self._ranks[1]
        x = input if batched else _f.unsqueeze(input, 0)
        y = F.instance_norm(x, weight=self.weight, bias=self.bias, eps=self.eps)
        return y if batched else _f.squeeze(y, 0)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class InstanceNorm1d(_InstanceNorm):
    """Instance norm over (N, C, L) or (C, L) input."""

    _ranks = (2, 3)


class InstanceNorm2d(_InstanceNorm):
    """Instance norm over (N, C, H, W) or (C, H, W) input."""

    _ranks = (3, 4)


class InstanceNorm3d(_InstanceNorm):
    """Instance norm over (N, C, D, H, W) or (C, D, H, W) input."""

    _ranks = (4, 5)


class LocalResponseNorm(Module):
    """Each channel divided by (k + alpha * mean of squares over `size` neighbouring channels) ** beta; it has no
    parameters."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> None:
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input: Any) -> Any:
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm", "RMSNorm", "InstanceNorm1d",
           "InstanceNorm2d", "InstanceNorm3d", "LocalResponseNorm"]
