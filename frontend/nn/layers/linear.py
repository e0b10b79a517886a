"""Linear, Bilinear and Identity, as torch.nn.Linear, torch.nn.Bilinear and torch.nn.Identity."""
from __future__ import annotations

from typing import Any

from .. import functional as F
from ..module import Module
from ._init import fan_in_bound, float_dtype, lazy, uniform


class Identity(Module):
    """Returns its input unchanged; constructor arguments are accepted and ignored, as torch."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, input: Any) -> Any:
        return input


class Linear(Module):
    """y = x @ weight.T + bias with weight (out_features, in_features), initialized as torch.

    weight ~ U(-1/sqrt(in_features), 1/sqrt(in_features)) (torch's kaiming_uniform with a=sqrt(5)); the bias
    has the same bound. Both are lazy: no memory is used until the first forward (or other access).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        d = float_dtype(dtype, "Linear")
        self.in_features, self.out_features = int(in_features), int(out_features)
        bound = fan_in_bound(self.in_features)
        self.weight = lazy((self.out_features, self.in_features), uniform(bound), d, device)
        self.register_parameter("bias", lazy((self.out_features,), uniform(bound), d, device) if bias else None)

    def forward(self, input: Any) -> Any:
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Bilinear(Module):
    """y = x1^T A x2 + b with weight A (out_features, in1_features, in2_features), initialized as torch:
    weight and bias ~ U(-1/sqrt(in1_features), 1/sqrt(in1_features))."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        d = float_dtype(dtype, "Bilinear")
        self.in1_features, self.in2_features = int(in1_features), int(in2_features)
        self.out_features = int(out_features)
        sample = uniform(fan_in_bound(self.in1_features))
        self.weight = lazy((self.out_features, self.in1_features, self.in2_features), sample, d, device)
        self.register_parameter("bias", lazy((self.out_features,), sample, d, device) if bias else None)

    def forward(self, input1: Any, input2: Any) -> Any:
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class NonDynamicallyQuantizableLinear(Linear):
    """A Linear under torch's name for MultiheadAttention's out_proj, so the model's repr reads as torch's."""


__all__ = ["Identity", "Linear", "Bilinear", "NonDynamicallyQuantizableLinear"]
