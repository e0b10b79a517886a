"""Distance layers (PairwiseDistance, CosineSimilarity), as torch.nn's: same arguments, attributes and repr."""
from __future__ import annotations

from typing import Any

from .. import functional as F
from ..module import Module


class PairwiseDistance(Module):
    """||x1 - x2 + eps||_p along the last dim; the order p is kept as `norm`, as torch."""

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        super().__init__()
        self.norm, self.eps, self.keepdim = float(p), float(eps), bool(keepdim)

    def forward(self, x1: Any, x2: Any) -> Any:
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


class CosineSimilarity(Module):
    """Cosine of the angle between x1 and x2 along dim, each norm clamped to at least eps."""

    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim, self.eps = int(dim), float(eps)

    def forward(self, x1: Any, x2: Any) -> Any:
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


__all__ = ["PairwiseDistance", "CosineSimilarity"]
