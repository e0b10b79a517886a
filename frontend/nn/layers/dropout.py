"""Dropout and its channel-wise (Dropout1d/2d/3d) and alpha (AlphaDropout, FeatureAlphaDropout) forms, as torch.nn's,
with the training state as a Flag operand of the dropout op."""
from __future__ import annotations

from typing import Any

from .. import functional as F
from ..flag import Flag
from ..module import Module


class _DropoutNd(Module):
    """A dropout layer: F.<_function>(input, p, training) with the `training` flag as an operand, so a traced graph
    keeps one dropout node whose behaviour the flag decides (train and eval from one graph). `inplace` is kept for
    torch compatibility; the input is never overwritten."""

    _function = ""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = float(p), bool(inplace)
        self.training = Flag(True)

    def forward(self, input: Any) -> Any:
        return getattr(F, self._function)(input, self.p, training=self.flag("training"))

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout(_DropoutNd):
    """Zero each element with probability p and scale the rest by 1/(1-p) while the `training` flag is on."""

    _function = "dropout"


class Dropout1d(_DropoutNd):
    """Zero whole channels of (N, C, L) or (C, L) input with probability p, scaling the rest by 1/(1-p), in
    training."""

    _function = "dropout1d"


class Dropout2d(_DropoutNd):
    """Zero whole channels of (N, C, H, W) input with probability p, scaling the rest by 1/(1-p), in training."""

    _function = "dropout2d"


class Dropout3d(_DropoutNd):
    """Zero whole channels of (N, C, D, H, W) or (C, D, H, W) input with probability p, scaling the rest by 1/(1-p),
    in training."""

    _function = "dropout3d"


class AlphaDropout(_DropoutNd):
    """Alpha dropout for SELU networks: dropped elements take SELU's saturation value, then all are scaled and
    shifted to keep zero mean and unit variance, in training."""

    _function = "alpha_dropout"


class FeatureAlphaDropout(_DropoutNd):
    """Alpha dropout of whole channels (dim 1), in training."""

    _function = "feature_alpha_dropout"


__all__ = ["Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"]
