"""Indexing ops: strided slices, constant padding, gather, index_select (embedding lookup) and one_hot,
with the scatter-style ops their gradients need (slice_scatter, scatter_add, index_add) and scatter, the
functional form of an indexed assignment.

Slice bounds are normalized (0 <= start <= stop <= dim, step >= 1): the frontend resolves Python slices,
negative indices and clamping. Index operands are i32 or i64 and must lie in [0, dim); a value outside
raises IndexRangeError when the op is evaluated (and when compiled code meets it), since shapes alone cannot tell.
"""
from __future__ import annotations

import builtins

import numpy as np

from ..attrs import AttrSpec
from ..errors import IndexRangeError, ShapeError
from ..registry import defop
from ..types import TensorType, float32
from ..views import sliced
from ._common import normalize_axis, require_dtype_kind

_SLICE_ATTRS = (AttrSpec("starts", "ints"), AttrSpec("stops", "ints"), AttrSpec("steps", "ints"))


# --- slice / slice_scatter --------------------------------------------------------------------------------


def _slice_shape(op: str, shape: tuple[int, ...], starts: tuple[int, ...], stops: tuple[int, ...],
                 steps: tuple[int, ...]) -> tuple[int, ...]:
    """The sliced shape; one (start, stop, step) per axis, each already normalized."""
    if not len(starts) == len(stops) == len(steps) == len(shape):
        raise ShapeError(f"{op}: starts {list(starts)}, stops {list(stops)}, steps {list(steps)} need one entry "
                         f"per axis of shape {list(shape)}")
    for axis, (lo, hi, st, d) in enumerate(zip(starts, stops, steps, shape)):
        if not 0 <= lo <= hi <= d or st < 1:
            raise ShapeError(f"{op}: axis {axis} of shape {list(shape)}: need 0 <= start <= stop <= {d} and "
                             f"step >= 1, got start {lo}, stop {hi}, step {st}")
    return tuple(-(-(hi - lo) // st) for lo, hi, st in zip(starts, stops, steps))


def _index(starts: tuple[int, ...], stops: tuple[int, ...], steps: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(builtins.slice(lo, hi, st) for lo, hi, st in zip(starts, stops, steps))


def _slice_infer(x: TensorType, *, starts, stops, steps) -> TensorType:
    return x.with_shape(_slice_shape("slice", x.shape, starts, stops, steps))


def _slice_vjp(e, g, out, x, *, starts, stops, steps):
    if all(st == 1 for st in steps):
        pads = tuple(p for lo, hi, d in zip(starts, stops, x.shape) for p in (lo, d - hi))
        return (e.pad(g, pads=pads, value=0.0),)
    return (e.slice_scatter(g, shape=tuple(x.shape), starts=starts, stops=stops, steps=steps),)


def _slice_rows(node, carried: tuple[bool, ...], rows: int):
    """Row by row when axis 0 is kept whole: its rows become the chunk's."""
    starts, stops, steps = (node.attr[k] for k in ("starts", "stops", "steps"))
    if not starts or starts[0] != 0 or steps[0] != 1 or stops[0] != node.inputs[0].shape[0]:
        return None
    return {**node.attr, "stops": (rows, *stops[1:])}


slice = defop("slice", ("x",), vjp_reads=(), infer=_slice_infer,
              impl=lambda x, *, starts, stops, steps: np.array(x[_index(starts, stops, steps)]),
              vjp=_slice_vjp, attrs=_SLICE_ATTRS, category="movement",
              view=lambda node, view: sliced(view, node.attr["starts"], node.attr["steps"]), rows=_slice_rows,
              doc="x[start:stop:step] on every axis, with normalized bounds.")


def _slice_scatter_infer(g: TensorType, *, shape, starts, stops, steps) -> TensorType:
    want = _slice_shape("slice_scatter", shape, starts, stops, steps)
    if g.shape != want:
        raise ShapeError(f"slice_scatter: source {g} does not fit the slice of shape {list(shape)}, "
                         f"which has shape {list(want)}")
    return g.with_shape(shape)


def _slice_scatter_impl(g: np.ndarray, *, shape, starts, stops, steps) -> np.ndarray:
    out = np.zeros(shape, g.dtype)
    out[_index(starts, stops, steps)] = g
    return out


def _spread(e, g, axis: int, step: int, length: int):
    """g with step - 1 zeros after each element along `axis`, cut to `length`: a strided slice's extent."""
    shape = tuple(g.shape)
    widened = e.reshape(g, shape=shape[:axis + 1] + (1,) + shape[axis + 1:])
    pads = [0] * (2 * len(shape) + 2)
    pads[2 * axis + 3] = step - 1
    spread = e.reshape(e.pad(widened, pads=tuple(pads), value=0.0),
                       shape=shape[:axis] + (shape[axis] * step,) + shape[axis + 1:])
    stops = shape[:axis] + (length,) + shape[axis + 1:]
    return e.slice(spread, starts=(0,) * len(shape), stops=stops, steps=(1,) * len(shape))


def _slice_scatter_decomposition(e, g, *, shape, starts, stops, steps):
    """Each strided axis spread out with zeros, then zero padding around the slice: exact, with kernels."""
    for axis, (lo, hi, step) in enumerate(zip(starts, stops, steps)):
        if step > 1:
            g = _spread(e, g, axis, step, hi - lo)
    pads = tuple(p for lo, hi, d in zip(starts, stops, shape) for p in (lo, d - hi))
    return e.pad(g, pads=pads, value=0.0)


slice_scatter = defop(
    "slice_scatter", ("g",), infer=_slice_scatter_infer, impl=_slice_scatter_impl,
    decomposition=_slice_scatter_decomposition,
    vjp=lambda e, gg, out, g, *, shape, starts, stops, steps: (
        e.slice(gg, starts=starts, stops=stops, steps=steps),),
    attrs=(AttrSpec("shape", "shape"),) + _SLICE_ATTRS, category="movement",
    doc="Zeros of `shape` with g written into the strided slice: the transpose of slice.")


# --- pad --------------------------------------------------------------------------------------------------


# numpy.pad's names for torch's constant, reflect, replicate and circular padding
PAD_MODES = ("constant", "reflect", "edge", "wrap")


def _pad_infer(x: TensorType, *, pads: tuple[int, ...], value: float, mode: str) -> TensorType:
    if len(pads) != 2 * x.rank or any(p < 0 for p in pads):
        raise ShapeError(f"pad: pads {list(pads)} must be {2 * x.rank} non-negative values "
                         f"(before, after per axis) for {x}")
    for axis, n in enumerate(x.shape if mode != "constant" else ()):
        before, after = pads[2 * axis], pads[2 * axis + 1]
        limit = n - 1 if mode == "reflect" else n  # one mirror image or one wrap, as torch's; edge repeats any width
        if (before or after) and (n == 0 or (mode != "edge" and max(before, after) > limit)):
            why = f"it takes at most {max(limit, 0)} on each side there" if n else "the axis is empty"
            raise ShapeError(f"pad: mode={mode!r} pads axis {axis} of {x} by ({before}, {after}); {why}")
    return x.with_shape(tuple(d + pads[2 * i] + pads[2 * i + 1] for i, d in enumerate(x.shape)))


def _pad_impl(x: np.ndarray, *, pads: tuple[int, ...], value: float, mode: str) -> np.ndarray:
    if x.ndim == 0:  # nothing to pad; np.pad rejects an empty width list
        return x.copy()
    widths = [(pads[2 * i], pads[2 * i + 1]) for i in range(x.ndim)]
    if mode != "constant":
        return np.pad(x, widths, mode=mode)
    return np.pad(x, widths, mode="constant", constant_values=np.asarray(value).astype(x.dtype))


def pad_sources(mode: str, n: int, before: int, after: int) -> np.ndarray:
    """The position along an axis of n elements that each padded position reads (mode other than constant)."""
    i = np.arange(-before, n + after)
    if mode == "edge":
        return np.clip(i, 0, n - 1)
    if mode == "wrap":
        return i % n
    return np.where(i < 0, -i, np.where(i >= n, 2 * (n - 1) - i, i))  # reflect: mirrored without the edge


def _pad_vjp(e, g, out, x, *, pads, value, mode):
    if mode == "constant":
        starts = tuple(pads[0::2])
        stops = tuple(lo + d for lo, d in zip(starts, x.shape))
        return (e.slice(g, starts=starts, stops=stops, steps=(1,) * len(x.shape)),)
    shape = list(g.shape)
    for axis, n in enumerate(x.shape):  # the padded result is an index_select per axis: sum back through each
        before, after = pads[2 * axis], pads[2 * axis + 1]
        if before or after:
            shape[axis] = n
            sources = e.constant(pad_sources(mode, n, before, after).astype(np.int64))
            g = e.index_add(g, sources, axis=axis, shape=tuple(shape))
    return (g,)


pad = defop("pad", ("x",), vjp_reads=(), infer=_pad_infer, impl=_pad_impl, vjp=_pad_vjp,
            attrs=(AttrSpec("pads", "ints"), AttrSpec("value", "float", 0.0),
                   AttrSpec("mode", "str", "constant", choices=PAD_MODES)), category="movement",
            rows=lambda node, carried, rows: node.attr if tuple(node.attr["pads"][:2]) == (0, 0) else None,
            doc="Padding: pads holds (before, after) for each axis in order; mode constant fills with value, "
                "reflect mirrors the elements beside the edge, edge repeats the edge, wrap continues from the "
                "other end (numpy.pad's modes).")


# --- index checks -----------------------------------------------------------------------------------------


def _operand_axis(node) -> int:
    """The size of the indexed axis of the first operand: the bound of a gather or index_select's indices."""
    return node.inputs[0].shape[node.attr["axis"]]


def _target_axis(node) -> int:
    """The size of the indexed axis of the target shape: the bound of a scatter_add or index_add's indices."""
    return node.attr["shape"][node.attr["axis"]]


def _require_index(op: str, t: TensorType) -> None:
    require_dtype_kind(op, t, ("int",), "indices")


def index_range_message(op: str, value: object, size: int, where: str) -> str:
    """The one wording of an index outside [0, size): eager evaluation raises it, compiled code reports it."""
    return f"{op}: index {value} is out of range [0, {size}) for {where}"


def axis_subject(axis: int) -> str:
    """What the indices of a gather, index_select, scatter_add or index_add index, for messages."""
    return f"axis {axis}"


def classes_subject(num_classes: int) -> str:
    """What the indices of one_hot index, for messages."""
    return f"num_classes {num_classes}"


def _check_range(op: str, indices: np.ndarray, size: int, where: str) -> None:
    """Raise IndexRangeError if an index value falls outside [0, size), naming the first one in row-major order."""
    if indices.size and (indices.min() < 0 or indices.max() >= size):
        bad = indices[(indices < 0) | (indices >= size)].reshape(-1)[0]
        raise IndexRangeError(index_range_message(op, int(bad), size, where))


# --- gather / scatter_add ---------------------------------------------------------------------------------


def _gather_check(op: str, shape: tuple[int, ...], indices: TensorType, axis: int) -> int:
    """torch.gather's shape rule: equal ranks, and indices no larger than `shape` outside `axis`."""
    _require_index(op, indices)
    if not shape:
        raise ShapeError(f"{op}: cannot index along an axis of a scalar (indices {indices})")
    if indices.rank != len(shape):
        raise ShapeError(f"{op}: indices {indices} must have the rank of shape {list(shape)}")
    ax = normalize_axis(op, axis, len(shape))
    if any(i != ax and n > d for i, (n, d) in enumerate(zip(indices.shape, shape))):
        raise ShapeError(f"{op}: indices {indices} exceed shape {list(shape)} outside axis {axis}")
    return ax


def _gather_infer(x: TensorType, indices: TensorType, *, axis: int) -> TensorType:
    _gather_check("gather", x.shape, indices, axis)
    return x.with_shape(indices.shape)


def _along_axis(indices: np.ndarray, axis: int) -> tuple[np.ndarray, ...]:
    """Full coordinates for each entry of `indices`: its own position, with `indices` along `axis`."""
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = indices.astype(np.int64)
    return tuple(grid)


def _gather_impl(x: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    ax = axis % x.ndim
    _check_range("gather", indices, x.shape[ax], axis_subject(axis))
    return x[_along_axis(indices, ax)]


gather = defop("gather", ("x", "indices"), vjp_reads=(1,), infer=_gather_infer, impl=_gather_impl,
               vjp=lambda e, g, out, x, indices, *, axis: (
                   e.scatter_add(g, indices, axis=axis, shape=tuple(x.shape)), None),
               attrs=(AttrSpec("axis", "int"),), category="index", index_operands=((1, _operand_axis),), table=0,
               doc="out[..., i, ...] = x[..., indices[..., i, ...], ...] along `axis` (torch.gather).")


def _scatter_add_infer(g: TensorType, indices: TensorType, base: TensorType | None = None, *, axis: int,
                       shape: tuple[int, ...]) -> TensorType:
    _gather_check("scatter_add", shape, indices, axis)
    if g.shape != indices.shape:
        raise ShapeError(f"scatter_add: source {g} and indices {indices} must have the same shape")
    if base is not None and (base.shape != tuple(shape) or base.dtype != g.dtype):
        raise ShapeError(f"scatter_add: base {base} must have the target shape {list(shape)} and the dtype of the "
                         f"source {g}")
    return g.with_shape(shape)


def _scatter_add_impl(g: np.ndarray, indices: np.ndarray, base: np.ndarray | None = None, *, axis: int,
                      shape: tuple[int, ...]) -> np.ndarray:
    ax = axis % len(shape)
    _check_range("scatter_add", indices, shape[ax], axis_subject(axis))
    out = np.zeros(shape, g.dtype) if base is None else np.array(base, copy=True)
    np.add.at(out, _along_axis(indices, ax), g)
    return out


def _scatter_add_vjp(e, gg, out, g, indices, base=None, *, axis, shape):
    grads = (e.gather(gg, indices, axis=axis), None)
    return grads if base is None else grads + (gg,)


scatter_add = defop("scatter_add", ("g", "indices", "base?"), infer=_scatter_add_infer, impl=_scatter_add_impl,
                    vjp=_scatter_add_vjp, vjp_reads=(1,),
                    attrs=(AttrSpec("axis", "int"), AttrSpec("shape", "shape")), category="index",
                    index_operands=((1, _target_axis),),
                    doc="base (zeros without one) of `shape` with g added at the gather positions, one element "
                        "after another in index order (torch's x.scatter_add(axis, indices, g)): the transpose of "
                        "gather.")


def _scatter_infer(x: TensorType, indices: TensorType, src: TensorType, *, axis: int) -> TensorType:
    _gather_check("scatter", x.shape, indices, axis)
    if src.shape != indices.shape or src.dtype != x.dtype:
        raise ShapeError(f"scatter: source {src} must have the shape of indices {indices} and the dtype of x {x}")
    return x


def _scatter_impl(x: np.ndarray, indices: np.ndarray, src: np.ndarray, *, axis: int) -> np.ndarray:
    ax = axis % x.ndim
    _check_range("scatter", indices, x.shape[ax], f"axis {axis}")
    out = x.copy()
    out[_along_axis(indices, ax)] = src
    return out


def _scatter_vjp(e, g, out, x, indices, src, *, axis):
    zeros = e.broadcast_to(e.scalar(0.0, g), shape=tuple(indices.shape))
    return e.scatter(g, indices, zeros, axis=axis), None, e.gather(g, indices, axis=axis)


scatter = defop("scatter", ("x", "indices", "src"), infer=_scatter_infer, impl=_scatter_impl, vjp=_scatter_vjp,
                attrs=(AttrSpec("axis", "int"),), category="index", index_operands=((1, _operand_axis),),
                doc="x with src written at the gather positions (torch.scatter); of repeated positions the last "
                    "write wins (the gradient of src is exact for distinct positions).")


# --- index_select / index_add -----------------------------------------------------------------------------


def _index_select_infer(x: TensorType, indices: TensorType, *, axis: int) -> TensorType:
    _require_index("index_select", indices)
    if x.rank == 0:
        raise ShapeError(f"index_select: cannot index a scalar {x}")
    ax = normalize_axis("index_select", axis, x.rank)
    return x.with_shape(x.shape[:ax] + indices.shape + x.shape[ax + 1:])


def _index_select_impl(x: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
    ax = axis % x.ndim
    _check_range("index_select", indices, x.shape[ax], axis_subject(axis))
    return np.take(x, indices, axis=ax)


def _index_select_rows(node, carried: tuple[bool, ...], rows: int):
    """Row by row when x's rows are picked from along another axis, or when the indices' rows pick along axis 0 of
    an x read whole (an embedding)."""
    x, indices = node.inputs
    along_rows = bool(x.shape) and node.attr["axis"] % len(x.shape) == 0
    if carried == (True, False) and not along_rows:
        return node.attr
    return node.attr if carried == (False, True) and along_rows and indices.shape else None


index_select = defop("index_select", ("x", "indices"), vjp_reads=(1,),
                      infer=_index_select_infer, impl=_index_select_impl,
                     vjp=lambda e, g, out, x, indices, *, axis: (
                         e.index_add(g, indices, axis=axis, shape=tuple(x.shape)), None),
                     attrs=(AttrSpec("axis", "int"),), category="index", index_operands=((1, _operand_axis),),
                     rows=_index_select_rows,
                     doc="Pick whole slices of x along `axis` by an index tensor of any shape (numpy.take); "
                         "the embedding lookup.")


def _index_add_infer(g: TensorType, indices: TensorType, base: TensorType | None = None, *, axis: int,
                     shape: tuple[int, ...]) -> TensorType:
    _require_index("index_add", indices)
    if not shape:
        raise ShapeError("index_add: the target shape must have at least one axis")
    ax = normalize_axis("index_add", axis, len(shape))
    want = shape[:ax] + indices.shape + shape[ax + 1:]
    if g.shape != want:
        raise ShapeError(f"index_add: source {g} does not match indices {indices} selecting along axis {axis} "
                         f"of shape {list(shape)} (expected shape {list(want)})")
    if base is not None and (base.shape != tuple(shape) or base.dtype != g.dtype):
        raise ShapeError(f"index_add: base {base} must have the target shape {list(shape)} and the dtype of the "
                         f"source {g}")
    return g.with_shape(shape)


def _index_add_impl(g: np.ndarray, indices: np.ndarray, base: np.ndarray | None = None, *, axis: int,
                    shape: tuple[int, ...]) -> np.ndarray:
    ax = axis % len(shape)
    _check_range("index_add", indices, shape[ax], axis_subject(axis))
    out = np.zeros(shape, g.dtype) if base is None else np.array(base, copy=True)
    rows = g.reshape(shape[:ax] + (indices.size,) + shape[ax + 1:])
    np.add.at(np.moveaxis(out, ax, 0), indices.reshape(-1), np.moveaxis(rows, ax, 0))
    return out


def _index_add_vjp(e, gg, out, g, indices, base=None, *, axis, shape):
    grads = (e.index_select(gg, indices, axis=axis), None)
    return grads if base is None else grads + (gg,)


index_add = defop("index_add", ("g", "indices", "base?"), infer=_index_add_infer, impl=_index_add_impl,
                  vjp=_index_add_vjp, vjp_reads=(1,),
                  attrs=(AttrSpec("axis", "int"), AttrSpec("shape", "shape")), category="index",
                  index_operands=((1, _target_axis),),
                  doc="base (zeros without one) of `shape` with the slices of g added into the positions `indices` "
                      "select, one after another in index order (torch's x.index_add(axis, indices, g)): the "
                      "transpose of index_select.")


# --- one_hot ----------------------------------------------------------------------------------------------


def _one_hot_infer(indices: TensorType, *, num_classes: int, dtype) -> TensorType:
    _require_index("one_hot", indices)
    if num_classes < 1:
        raise ShapeError(f"one_hot: num_classes must be positive, got {num_classes} for indices {indices}")
    return TensorType(indices.shape + (num_classes,), dtype)


def _one_hot_impl(indices: np.ndarray, *, num_classes: int, dtype) -> np.ndarray:
    _check_range("one_hot", indices, num_classes, classes_subject(num_classes))
    return (indices[..., None] == np.arange(num_classes)).astype(dtype.numpy)


one_hot = defop("one_hot", ("indices",), infer=_one_hot_infer, impl=_one_hot_impl,
                attrs=(AttrSpec("num_classes", "int"), AttrSpec("dtype", "dtype", float32)), category="index",
                index_operands=((0, lambda node: node.attr["num_classes"]),),
                doc="A trailing axis of num_classes entries, 1 at each index and 0 elsewhere.")
