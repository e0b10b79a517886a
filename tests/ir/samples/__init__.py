"""Sample operands for every registered op, used by the rule checks in tests/ir/test_op_rules.py.

Each module in this package defines SAMPLES, a list of Sample. A sample's float operands are float64 so the
VJP can be checked against central finite differences; inputs avoid points where the op is not differentiable.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


@dataclass
class Sample:
    op: str
    args: tuple[Any, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    # An independent numpy expression of the expected result(s), when the reference is not plain numpy.
    expected: Callable[..., Any] | None = None
    # Indices of operands whose gradients are checked; None means every floating-point operand.
    grad_args: tuple[int, ...] | None = None
    # A torch expression computing the same result(s) from torch tensors, for the differential tests.
    torch: Callable[..., Any] | None = None
    label: str = ""

    @property
    def id(self) -> str:
        shapes = ",".join("x".join(map(str, np.shape(a))) or "s" for a in self.args)
        return f"{self.op}[{self.label or shapes}]"


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def away_from_zero(shape: tuple[int, ...], seed: int = 0, low: float = 0.2, high: float = 2.0) -> np.ndarray:
    """Values with |x| in [low, high] and random signs: safe for ops with a kink at 0."""
    r = rng(seed)
    return r.uniform(low, high, shape) * r.choice([-1.0, 1.0], shape)


def positive(shape: tuple[int, ...], seed: int = 0, low: float = 0.5, high: float = 2.0) -> np.ndarray:
    return rng(seed).uniform(low, high, shape)


def normal(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return rng(seed).standard_normal(shape)


def all_samples() -> list[Sample]:
    import importlib
    import pkgutil
    out: list[Sample] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        out.extend(importlib.import_module(f"{__name__}.{info.name}").SAMPLES)
    return out
