"""Matrix multiplication with numpy's matmul semantics (1-D operands promoted, batch dimensions broadcast), and
linear: the matmul of x with a weight stored transposed, (out, in), as torch stores it."""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError, ShapeError
from ..registry import defop
from ..row_rules import linear_rows
from ..types import TensorType, bool_
from ._common import require_rank, same_dtype, shapes_text, unbroadcast


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


def _matmul_work(node) -> int:
    """Multiply-adds: every result element sums K products (K the last axis of x)."""
    return node.out.type.size * (node.inputs[0].shape[-1] if node.inputs[0].shape else 1)


def _matmul_rows(node, carried: tuple[bool, ...], rows: int):
    """Row by row when the rows come from x's first axis (rows of the product, or its batch) or from a batch axis
    of both or of y, each operand without rows read whole: a weight of two axes, or one broadcast along axis 0."""
    rank = len(node.out.shape)
    for v, has_rows, is_x in zip(node.inputs, carried, (True, False)):
        r = len(v.shape)
        if has_rows and not (r == rank and (is_x or rank >= 3)):
            return None
        if not has_rows and not (r < rank or (r >= 3 and v.shape[0] == 1) or (not is_x and r == 2 == rank)):
            return None
    return node.attr if rank >= 2 else None


matmul = defop("matmul", ("x", "y"), infer=_matmul_infer, impl=np.matmul, vjp=_matmul_vjp, category="matmul",
               anchor="gemm", work=_matmul_work, rows=_matmul_rows,
               doc="numpy.matmul: 1-D operands are promoted to matrices and the added axis removed; "
                   "leading batch dimensions broadcast.")


# --- linear: a matmul with the weight stored (out, in), as torch stores it ---------------------------------


def _linear_infer(x: TensorType, weight: TensorType) -> TensorType:
    require_rank("linear", weight, 2, "the weight (out_features, in_features)")
    return _matmul_infer(x, weight.with_shape(weight.shape[::-1]))


def _linear_impl(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    return np.matmul(x, weight.T)


def _linear_vjp(e, g, out, x, weight):
    """dx = g @ W; dW = g^T @ x over every leading axis flattened into rows."""
    out_features, in_features = weight.shape
    gx = e.matmul(g, weight)
    g_rows = g if len(g.shape) == 2 else e.reshape(g, shape=(_rows(g.shape), out_features))
    x_rows = x if len(x.shape) == 2 else e.reshape(x, shape=(_rows(x.shape), in_features))
    gw = e.matmul(e.transpose(g_rows, perm=(1, 0)), x_rows)
    return gx, gw


def _rows(shape) -> int:
    return int(np.prod(shape[:-1], dtype=np.int64))


linear = defop("linear", ("x", "weight"), infer=_linear_infer, impl=_linear_impl, vjp=_linear_vjp,
               category="matmul", anchor="gemm", work=_matmul_work, rows=linear_rows,
               doc="x @ weight.T with the weight stored (out_features, in_features), as torch.nn.functional.linear "
                   "without bias; simplify writes matmul(x, transpose(param)) this way so codegen reads the "
                   "stored weight directly.")
