"""Dropout, as torch.nn.Dropout, with its training state as a Flag operand of the dropout op."""
from __future__ import annotations

from typing import Any

from .. import functional as F
from ..flag import Flag
from ..module import Module


class Dropout(Module):
    """Zero each element with probability p and scale the rest by 1/(1-p) while the `training` flag is on.

    The flag goes to F.dropout as an operand, so a traced graph keeps one dropout node whose behaviour the
    flag decides (train and eval from one graph). `inplace` is kept for torch compatibility; the input is never
    overwritten.
    """

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = float(p), bool(inplace)
        self.training = Flag(True)

    def forward(self, input: Any) -> Any:
        return F.dropout(input, self.p, training=self.flag("training"))

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


__all__ = ["Dropout"]
