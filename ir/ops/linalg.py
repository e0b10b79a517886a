"""Matrix multiplication with numpy's matmul semantics: 1-D operands promoted, batch dimensions broadcast."""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError, ShapeError
from ..registry import defop
from ..types import TensorType, bool_
from ._common import same_dtype, shapes_text, unbroadcast


def _matmul_infer(x: TensorType, y: TensorType) -> TensorType:
    dtype = same_dtype("matmul", x, y)
    if dtype == bool_:
        raise DTypeError(f"matmul: expects numeric operands, got {shapes_text(x, y)}")
    if x.rank == 0 or y.rank == 0:
        raise ShapeError(f"matmul: operands must have rank >= 1, got {shapes_text(x, y)}")
    xs = (1,) + x.shape if x.rank == 1 else x.shape
    ys = y.shape + (1,) if y.rank == 1 else y.shape
    if xs[-1] != ys[-2]:
        raise ShapeError(f"matmul: inner dimensions differ for {shapes_text(x, y)} "
                         f"({xs[-1]} columns against {ys[-2]} rows)")
    try:
        batch = tuple(np.broadcast_shapes(xs[:-2], ys[:-2]))
    except ValueError:
        raise ShapeError(f"matmul: batch dimensions of {shapes_text(x, y)} do not broadcast") from None
    rows = () if x.rank == 1 else (xs[-2],)
    cols = () if y.rank == 1 else (ys[-1],)
    return TensorType(batch + rows + cols, dtype)


def _swap_last(e, v, rank: int):
    return e.transpose(v, perm=tuple(range(rank - 2)) + (rank - 1, rank - 2))


def _matmul_vjp(e, g, out, x, y):
    """Work on the promoted operands (1-D made 2-D), then sum broadcast batch dims and drop the added dims."""
    xs = (1,) + tuple(x.shape) if len(x.shape) == 1 else tuple(x.shape)
    ys = tuple(y.shape) + (1,) if len(y.shape) == 1 else tuple(y.shape)
    xp = e.reshape(x, shape=xs) if xs != tuple(x.shape) else x
    yp = e.reshape(y, shape=ys) if ys != tuple(y.shape) else y
    full = tuple(np.broadcast_shapes(xs[:-2], ys[:-2])) + (xs[-2], ys[-1])
    gp = e.reshape(g, shape=full) if full != tuple(g.shape) else g
    gx = e.matmul(gp, _swap_last(e, yp, len(ys)))
    gy = e.matmul(_swap_last(e, xp, len(xs)), gp)
    return _restore(e, unbroadcast(e, gx, xs), x), _restore(e, unbroadcast(e, gy, ys), y)


def _restore(e, grad, operand):
    """Drop the axis a 1-D operand gained by promotion."""
    return grad if tuple(grad.shape) == tuple(operand.shape) else e.reshape(grad, shape=tuple(operand.shape))


matmul = defop("matmul", ("x", "y"), infer=_matmul_infer, impl=np.matmul, vjp=_matmul_vjp, category="matmul",
               doc="numpy.matmul: 1-D operands are promoted to matrices and the added axis removed; "
                   "leading batch dimensions broadcast.")
