"""The op registry: every operation is defined once here and looked up by every consumer.

An OpDef holds what eager execution, tracing, the verifier, constant folding, autodiff and the
reference interpreter need: the operand and attribute schema, type inference, a numpy reference
implementation and a vector-Jacobian product written with other registered ops. Codegen keeps its
own table of lowerings keyed by the same names; nothing here knows about it.

An OpDef also states the facts passes, codegen and the runtime ask about an op, as data with defaults, so no
consumer keeps a list of op names: whether it is a leaf (category "leaf"), the axes it reduces
(`reduced_axes(node)`), whether fusion treats it as elementwise, whether it preserves values (reshape/cast-like),
which operands are indices and their bound, the fusion kernel family it anchors, a work estimate, and whether it
computes its result row by row along axis 0 (`rows_attrs`, for running a batch in chunks: ir/rows.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from .attrs import AttrSpec, check_attrs
from .errors import BrazeError, ShapeError, UnknownOpError
from .row_rules import RowsRule, broadcast_rows, first_rows
from .types import TensorType

if TYPE_CHECKING:
    from .graph import Node

# (operand shape, checked attributes) -> the operand axes an op reduces over.
AxesRule = Callable[[tuple[int, ...], dict[str, Any]], tuple[int, ...]]
# node -> the exclusive upper bound of an index operand's values.
BoundRule = Callable[["Node"], int]

CATEGORIES = ("leaf", "elementwise", "reduction", "movement", "index", "matmul", "conv", "pool",
              "normalization", "random", "loss", "other")


@dataclass(frozen=True)
class OpDef:
    """The single definition of an op.

    operands: names; a trailing "*name" is variadic (one or more), a "name?" is an optional trailing operand.
    infer: (*operand types, **attrs) -> TensorType or tuple of them (one per result); raises ShapeError/DTypeError.
    impl: (*numpy arrays, **attrs) -> ndarray or tuple of ndarrays; the op's semantics.
    vjp: (emitter, g, out, *operands, **attrs) -> one gradient (or None) per operand. For multi-result ops
         g and out are tuples and an unused result's gradient is None. None marks a non-differentiable op.

    Traits (each with a default, so a new op states only what differs):
    reduces: (first operand's shape, attrs) -> the axes of it the op reduces over (a row reduction: sums, the
         softmax family, layer norm); None for ops that reduce nothing.
    elementwise_like: fusion may treat it as elementwise (one result element from the operands' elements at the
         broadcast position); None means "category is elementwise".
    preserves_values: every result element is an operand element, moved or converted (reshape, cast, ...).
    index_operands: (operand position, rule giving the exclusive bound of its values) for integer operands that
         select positions; the runtime checks graph inputs feeding them before a call, and compiled kernels check
         the values computed inside the graph.
    anchor: the fusion kernel family ("gemm", "conv") a region starting with this op compiles to.
    work: node -> a rough cost (multiply-adds plus elements written) for the thread heuristic; None means the
         elements the node writes (nothing for leaves).
    vjp_reads: the positions of the operands whose values (not only shapes) the VJP reads; None means all of them.
         Eager autodiff refuses a backward through the op when one of these was changed in place after it was
         recorded (torch's saved-tensor version check), and lets the others change (x[0] = x[1] reads x by a slice).
    decomposition: (emitter, *operands, **attrs) -> the same result(s) written with other registered ops, for an
         op compiled as the ops that compose it (the decompose pass) rather than by a kernel of its own; it may
         return None for operands it does not cover, and the node stays.
    view: (node, the operand's View) -> the result's View (ir/views.py) for an op whose result elements sit at
         affine positions of its operand (slice, transpose, the reshapes), or None where the node needs a copy.
    unview: (node, the result's View) -> the operand's View, for such an op that is a bijection (a kernel writing
         the op's result through it writes the operand: transpose, the reshapes).
    joins: its result is its operands side by side along an axis (concat, stack), each copied into its box, so a
         kernel may read every operand through a strided view (the fuse pass's movement regions).
    aliases: the result is its one operand's bytes as they stand (the same dtype and row-major order under another
         shape: the reshapes), so a compiled graph may give it the operand's storage instead of a copy
         (plan_memory).
    table: the position of an operand the op reads where the values of another operand point (gather's x), its
         result otherwise one element per element of that other operand: fusion may run the op inside an
         elementwise region, which then reads the table from memory (never computes it in the region) and never
         writes a result over it.
    rows: (node, which operands carry rows, a chunk's row count) -> the node's attributes for a chunk of that many
         rows, or None where result row i is not computed from row i of the row-carrying operands alone
         (ir/row_rules.py); None as the trait means the category's rule: elementwise ops broadcast rows, a
         reduction keeps them unless it reduces axis 0, every other op mixes them.
    """

    name: str
    operands: tuple[str, ...]
    attrs: tuple[AttrSpec, ...]
    infer: Callable[..., Any] | None
    impl: Callable[..., Any]
    vjp: Callable[..., tuple[Any, ...]] | None = None
    category: str = "other"
    num_results: int = 1
    pure: bool = True
    doc: str = ""
    reduces: AxesRule | None = None
    elementwise_like: bool | None = None
    preserves_values: bool = False
    index_operands: tuple[tuple[int, BoundRule], ...] = ()
    anchor: str | None = None
    work: Callable[["Node"], int] | None = None
    decomposition: Callable[..., Any] | None = None
    vjp_reads: tuple[int, ...] | None = None
    view: Callable[["Node", Any], Any] | None = None
    unview: Callable[["Node", Any], Any] | None = None
    joins: bool = False
    aliases: bool = False
    rows: RowsRule | None = None
    table: int | None = None
    attr_names: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"{self.name}: unknown category {self.category!r}")
        object.__setattr__(self, "attr_names", frozenset(s.name for s in self.attrs))
        if self.elementwise_like is None:
            object.__setattr__(self, "elementwise_like", self.category == "elementwise")

    @property
    def is_leaf(self) -> bool:
        """Params, flags and constants: nodes without operands whose values are bound, not computed."""
        return self.category == "leaf"

    @property
    def is_reduction(self) -> bool:
        return self.reduces is not None

    def reduced_axes(self, node: Node) -> tuple[int, ...] | None:
        """The axes of the node's first operand the op reduces over (none of a scalar); None if it reduces nothing."""
        if self.reduces is None:
            return None
        shape = node.inputs[0].shape
        return tuple(self.reduces(shape, node.attr)) if shape else ()

    def work_estimate(self, node: Node) -> int:
        """A rough cost of computing the node: its `work` rule, else the elements it writes (nothing for leaves)."""
        if self.work is not None:
            return int(self.work(node))
        return 0 if self.is_leaf else sum(v.type.size for v in node.outputs)

    def rows_attrs(self, node: Node, carried: tuple[bool, ...], rows: int) -> dict[str, Any] | None:
        """The node's attributes for a chunk of `rows` rows when it computes its result row by row from the
        operands flagged in `carried` (its `rows` rule, else its category's), or None."""
        if self.rows is not None:
            found = self.rows(node, carried, rows)
        elif self.category == "elementwise":
            found = broadcast_rows(node, carried, rows)
        elif self.reduces is not None and first_rows(node, carried, rows) is not None:
            rank = len(node.inputs[0].shape)
            found = node.attr if rank and all(a % rank for a in self.reduced_axes(node) or ()) else None
        else:
            found = None
        return None if found is None else dict(found)

    @property
    def declares_type(self) -> bool:
        """Leaf ops such as param and flag declare their result type instead of inferring it."""
        return self.infer is None

    @property
    def differentiable(self) -> bool:
        return self.vjp is not None

    @property
    def variadic(self) -> bool:
        return bool(self.operands) and self.operands[-1].startswith("*")

    def arity_range(self) -> tuple[int, int | None]:
        """(min, max) operand counts; max is None for variadic ops."""
        if self.variadic:
            return len(self.operands) - 1 + 1, None
        optional = sum(1 for n in self.operands if n.endswith("?"))
        return len(self.operands) - optional, len(self.operands)

    def check_arity(self, count: int) -> None:
        low, high = self.arity_range()
        if count < low or (high is not None and count > high):
            want = f"at least {low}" if high is None else (f"{low}" if low == high else f"{low} to {high}")
            raise ShapeError(f"{self.name}: expects {want} operand(s) ({', '.join(self.operands)}), got {count}")

    def check_attrs(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """Validate and complete an attribute dict (unknown names, missing required ones, wrong kinds)."""
        return check_attrs(self.name, self.attrs, attrs)

    def infer_types(self, types: Sequence[TensorType], attrs: dict[str, Any]) -> tuple[TensorType, ...]:
        """Result types for operands of `types` and checked `attrs`, always as a tuple."""
        if self.infer is None:
            raise BrazeError(f"{self.name}: leaf ops declare their type; nothing to infer")
        self.check_arity(len(types))
        result = self.infer(*types, **attrs)
        return result if isinstance(result, tuple) else (result,)

    def run(self, arrays: Sequence[np.ndarray], attrs: dict[str, Any]) -> tuple[np.ndarray, ...]:
        """Evaluate the numpy reference; always returns a tuple of arrays."""
        with np.errstate(all="ignore"):  # inf/nan follow IEEE semantics silently, as in torch
            result = self.impl(*arrays, **attrs)
        return tuple(result) if isinstance(result, (tuple, list)) else (result,)


_REGISTRY: dict[str, OpDef] = {}


def defop(name: str, operands: Sequence[str], *, infer: Callable[..., Any] | None, impl: Callable[..., Any],
          vjp: Callable[..., tuple[Any, ...]] | None = None, attrs: Sequence[AttrSpec] = (),
          category: str = "other", num_results: int = 1, pure: bool = True, doc: str = "",
          **traits: Any) -> OpDef:
    """Define and register an op; a name can be registered once. `traits` are the OpDef trait fields."""
    if name in _REGISTRY:
        raise BrazeError(f"op {name!r} is already registered")
    op = OpDef(name, tuple(operands), tuple(attrs), infer, impl, vjp, category, num_results, pure, doc, **traits)
    _REGISTRY[name] = op
    return op


def get_op(name: str) -> OpDef:
    """The definition of a registered op; raises UnknownOpError naming close matches."""
    try:
        return _REGISTRY[name]
    except KeyError:
        import difflib
        close = difflib.get_close_matches(name, _REGISTRY, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UnknownOpError(f"unknown op {name!r}{hint}") from None


def op_names() -> list[str]:
    """The names of every registered op, sorted."""
    return sorted(_REGISTRY)


def is_op(name: str) -> bool:
    return name in _REGISTRY


def is_leaf(node: Node) -> bool:
    """Whether the node is a param, flag or constant leaf."""
    return get_op(node.op).is_leaf


def leaf_ops() -> frozenset[str]:
    """The names of the leaf ops."""
    return frozenset(name for name, op in _REGISTRY.items() if op.is_leaf)


def reduction_domain(node: Node) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(shape read, axes reduced) of a reducing node: its first operand's shape and its reduced axes; else None."""
    axes = get_op(node.op).reduced_axes(node)
    return None if axes is None else (node.inputs[0].shape, axes)


class Emitter:
    """Applies ops by name to values of one kind (eager tensors, graph values).

    VJP rules are written against an Emitter, so the same rule computes gradients eagerly and records
    them into a graph. `e.mul(g, out)` binds the registered op `mul`; Python numbers among the operands
    become scalar constants of the first tensor operand's dtype.
    """

    def bind(self, name: str, operands: Sequence[Any], attrs: dict[str, Any]) -> Any:
        raise NotImplementedError

    def constant(self, array: np.ndarray) -> Any:
        return self.bind("constant", (), {"value": np.asarray(array)})

    def scalar(self, value: float, like: Any) -> Any:
        """A rank-0 constant with the dtype of `like`."""
        return self.constant(np.asarray(value, dtype=like.dtype.numpy))

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_") or not is_op(name):
            raise AttributeError(name)

        def call(*operands: Any, **attrs: Any) -> Any:
            like = next((o for o in operands if hasattr(o, "dtype") and hasattr(o, "shape")), None)
            lifted = [self.scalar(o, like) if isinstance(o, (int, float)) and like is not None else o
                      for o in operands]
            return self.bind(name, lifted, attrs)

        call.__name__ = name
        return call
