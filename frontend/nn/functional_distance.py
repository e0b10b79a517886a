"""torch.nn.functional's cosine_similarity and pairwise_distance, composed from registered ops (the norms are
braze.linalg.vector_norm's, whose gradient at a zero vector is 0, as torch's)."""
from __future__ import annotations

import numpy as np

from .. import functions as _f
from ..pointwise import _float_operands
from ..reductions import vector_norm
from ..tensor import Tensor

__all__ = ["cosine_similarity", "pairwise_distance"]


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps)) along dim of the broadcast operands, as torch 2: each
    vector is scaled by its own norm first, which keeps the result in [-1, 1]."""
    a, b = _float_operands(x1, x2)
    shape = tuple(np.broadcast_shapes(tuple(a.shape), tuple(b.shape)))
    a, b = (t if tuple(t.shape) == shape else _f.broadcast_to(t, shape) for t in (a, b))
    unit_a, unit_b = (_f.div(t, _f.clamp(vector_norm(t, 2.0, dim, keepdim=True), min=eps)) for t in (a, b))
    return _f.sum(_f.mul(unit_a, unit_b), dim)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """||x1 - x2 + eps||_p along the last dim of the broadcast operands (eps keeps equal rows off the norm's kink)."""
    a, b = _float_operands(x1, x2)
    difference = _f.add(_f.sub(a, b), eps)
    if difference.ndim == 0:
        return vector_norm(_f.reshape(difference, (1,)), p, 0, keepdim=False)
    return vector_norm(difference, p, difference.ndim - 1, keepdim)
