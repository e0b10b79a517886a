"""Activation layers (ReLU, GELU, SiLU, Hardtanh, LeakyReLU, ELU, SELU, CELU, the shrinks, RReLU, ..., PReLU with its
learned slope), Softmax, Softmax2d, Softmin, LogSoftmax, Flatten and Unflatten, as torch.nn's."""
from __future__ import annotations

import warnings
from typing import Any

from ... import functions as _f
from .. import functional as F
from ..flag import Flag
from ..module import Module
from ._init import constant, float_dtype, lazy


class _Inplace(Module):
    """An elementwise activation F.<_function>(input) with torch's (ignored, out-of-place) `inplace` flag."""

    _function = ""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = bool(inplace)

    def forward(self, input: Any) -> Any:
        return getattr(F, self._function)(input)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class ReLU(_Inplace):
    """max(x, 0) elementwise."""

    _function = "relu"


class GELU(Module):
    """Gaussian error linear unit, exact (approximate='none') or with the tanh approximation."""

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, input: Any) -> Any:
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(_Inplace):
    """x * sigmoid(x) elementwise (swish)."""

    _function = "silu"


class Tanh(Module):
    """tanh elementwise."""

    def forward(self, input: Any) -> Any:
        return F.tanh(input)


class Sigmoid(Module):
    """1 / (1 + exp(-x)) elementwise."""

    def forward(self, input: Any) -> Any:
        return F.sigmoid(input)


class Softmax(Module):
    """Softmax along `dim` (torch's implicit choice, with its warning, when dim is None)."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Any) -> Any:
        return F.softmax(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softmax2d(Module):
    """Softmax over the channels (dim -3) at each spatial position of (N, C, H, W) or (C, H, W) input."""

    def forward(self, input: Any) -> Any:
        if input.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {input.ndim}D instead")
        return F.softmax(input, -3)


class Flatten(Module):
    """Merge dims start_dim..end_dim into one (by default all but the batch dim)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = int(start_dim), int(end_dim)

    def forward(self, input: Any) -> Any:
        return _f.flatten(input, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Hardtanh(Module):
    """input clamped to [min_val, max_val] (min_value/max_value: torch's deprecated spellings)."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False,
                 min_value: float | None = None, max_value: float | None = None) -> None:
        super().__init__()
        for old, new in (("min_value", "min_val"), ("max_value", "max_val")):
            if locals()[old] is not None:
                warnings.warn(f"keyword argument `{old}` is deprecated and rename to `{new}`", FutureWarning,
                              stacklevel=2)
        min_val = min_val if min_value is None else min_value
        max_val = max_val if max_value is None else max_value
        if not max_val > min_val:
            raise ValueError(f"Hardtanh: max_val ({max_val}) must be greater than min_val ({min_val})")
        self.min_val, self.max_val, self.inplace = min_val, max_val, bool(inplace)

    def forward(self, input: Any) -> Any:
        return F.hardtanh(input, self.min_val, self.max_val)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}" + (", inplace=True" if self.inplace else "")


class ReLU6(_Inplace):
    """min(max(x, 0), 6) elementwise."""

    _function = "relu6"


class Hardsigmoid(_Inplace):
    """relu6(x + 3) / 6 elementwise."""

    _function = "hardsigmoid"


class Hardswish(_Inplace):
    """x * relu6(x + 3) / 6 elementwise."""

    _function = "hardswish"


class Mish(_Inplace):
    """x * tanh(softplus(x)) elementwise."""

    _function = "mish"


class LeakyReLU(Module):
    """x where positive, else negative_slope * x."""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope, self.inplace = float(negative_slope), bool(inplace)

    def forward(self, input: Any) -> Any:
        return F.leaky_relu(input, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(Module):
    """x where positive, else alpha * (exp(x) - 1)."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha, self.inplace = float(alpha), bool(inplace)

    def forward(self, input: Any) -> Any:
        return F.elu(input, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class Softplus(Module):
    """log(1 + exp(beta * x)) / beta, linear above threshold."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta, self.threshold = float(beta), float(threshold)

    def forward(self, input: Any) -> Any:
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class PReLU(Module):
    """leaky_relu with a learned slope `weight` of num_parameters entries (1, or one per channel), init `init`."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.num_parameters = int(num_parameters)
        self.weight = lazy((self.num_parameters,), constant(float(init)), float_dtype(dtype, "PReLU"), device)

    def forward(self, input: Any) -> Any:
        return F.prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


class GLU(Module):
    """a * sigmoid(b) for the halves a, b of the input along dim."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = int(dim)

    def forward(self, input: Any) -> Any:
        return F.glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Module):
    """log(softmax(x)) along dim."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Any) -> Any:
        return F.log_softmax(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Unflatten(Module):
    """Split dim into unflattened_size (one entry may be -1)."""

    def __init__(self, dim: int, unflattened_size: Any) -> None:
        super().__init__()
        self.dim, self.unflattened_size = int(dim), tuple(int(s) for s in unflattened_size)

    def forward(self, input: Any) -> Any:
        axis = self.dim % input.ndim
        shape = tuple(input.shape[:axis]) + self.unflattened_size + tuple(input.shape[axis + 1:])
        return _f.reshape(input, shape)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


class SELU(_Inplace):
    """Self-normalizing elu: scale * elu(x, alpha) with torch's constants."""

    _function = "selu"


class CELU(Module):
    """x where positive, else alpha * (exp(x / alpha) - 1)."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha, self.inplace = float(alpha), bool(inplace)

    def forward(self, input: Any) -> Any:
        return F.celu(input, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class Softsign(Module):
    """x / (1 + |x|) elementwise."""

    def forward(self, input: Any) -> Any:
        return F.softsign(input)


class LogSigmoid(Module):
    """log(sigmoid(x)) elementwise, accurate in both tails."""

    def forward(self, input: Any) -> Any:
        return F.logsigmoid(input)


class Softmin(Module):
    """softmax(-x) along `dim` (torch's implicit choice, with its warning, when dim is None)."""

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Any) -> Any:
        return F.softmin(input, self.dim, _stacklevel=5)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Tanhshrink(Module):
    """x - tanh(x) elementwise."""

    def forward(self, input: Any) -> Any:
        return F.tanhshrink(input)


class Softshrink(Module):
    """x shrunk towards 0 by lambd (0 within [-lambd, lambd])."""

    def __init__(self, lambd: float = 0.5) -> None:
        super().__init__()
        self.lambd = float(lambd)

    def forward(self, input: Any) -> Any:
        return F.softshrink(input, self.lambd)

    def extra_repr(self) -> str:
        return str(self.lambd)


class Hardshrink(Module):
    """x where |x| > lambd, else 0."""

    def __init__(self, lambd: float = 0.5) -> None:
        super().__init__()
        self.lambd = float(lambd)

    def forward(self, input: Any) -> Any:
        return F.hardshrink(input, self.lambd)

    def extra_repr(self) -> str:
        return f"{self.lambd}"


class Threshold(Module):
    """x where x > threshold, else value."""

    def __init__(self, threshold: float, value: float, inplace: bool = False) -> None:
        super().__init__()
        self.threshold, self.value, self.inplace = float(threshold), float(value), bool(inplace)

    def forward(self, input: Any) -> Any:
        return F.threshold(input, self.threshold, self.value)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}" + (", inplace=True" if self.inplace else "")


class RReLU(Module):
    """Randomized leaky relu: a random slope in [lower, upper) per non-positive element while the `training` flag is
    on, (lower + upper) / 2 otherwise; the flag goes to F.rrelu as an operand, as Dropout's."""

    def __init__(self, lower: float = 1.0 / 8, upper: float = 1.0 / 3, inplace: bool = False) -> None:
        super().__init__()
        self.lower, self.upper, self.inplace = float(lower), float(upper), bool(inplace)
        self.training = Flag(True)

    def forward(self, input: Any) -> Any:
        return F.rrelu(input, self.lower, self.upper, self.flag("training"))

    def extra_repr(self) -> str:
        return f"lower={self.lower}, upper={self.upper}" + (", inplace=True" if self.inplace else "")


__all__ = ["ReLU", "GELU", "SiLU", "Tanh", "Sigmoid", "Softmax", "Softmax2d", "Flatten", "Hardtanh", "ReLU6",
           "Hardsigmoid", "Hardswish", "Mish", "LeakyReLU", "ELU", "Softplus", "PReLU", "GLU", "LogSoftmax",
           "Unflatten", "SELU", "CELU", "Softsign", "LogSigmoid", "Softmin", "Tanhshrink", "Softshrink", "Hardshrink",
           "Threshold", "RReLU"]
