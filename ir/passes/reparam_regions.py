"""Where reparameterized weights sit in a graph: the regions fold_reparameterizations folds or splits.

Three forms of region:
- merged: lora_merge(base, a, b){scale} with a and b param leaves and a base that is a param leaf or
  dequantize(codes, scales) of param leaves (what Param.val() of a LoRA or QLoRA weight traces to);
- split: the low-rank path computed beside the base weight (LoRA with adapter dropout once the dropout is gone,
  or a graph whose quantized base was kept): add(y, mul(low, s)) with y = x @ W^T [+ bias] and
  low = (x @ a^T) @ b^T, or y = conv2d(x, W, bias) and low = conv2d(conv2d(x, a), b) (a with y's stride,
  padding and dilation, b a 1x1 kernel, groups 1); its intermediate values have no other reader;
- bare: dequantize(codes, scales) of param leaves outside the other two (a quantized weight without adapter).
A region's `uses` say how its weight is consumed, for the cost model and to know whether the low-rank path can be
computed separately: "linear" (matmul(x, transpose(w)), counting x's rows) and "conv2d" (groups 1, counting
output positions); any other kind names what keeps the dense weight necessary.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..errors import BrazeError
from ..graph import Graph, Node, Value
from ..registry import get_op

Producer = Callable[[Value], "Node | None"]
Scalar = Callable[[Value], "float | None"]
UNIT_GEOMETRY = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1}
SPLITTABLE = ("linear", "conv2d")


@dataclass(frozen=True)
class Base:
    """A weight's stored base: one dense param leaf, or codes and scales leaves and the dequantize reading them."""

    leaves: tuple[Node, ...]
    dequantize: Node | None
    value: Value

    @property
    def quantized(self) -> bool:
        return self.dequantize is not None

    @property
    def path(self) -> str:
        """The parameter's path: the dense leaf's, or the codes leaf's without its ".codes" suffix."""
        path = self.leaves[0].attr["path"]
        return path.removesuffix(".codes") if self.quantized else path

    @property
    def id(self) -> int:
        return self.leaves[0].attr["id"]

    @property
    def scheme(self) -> str:
        return self.dequantize.attr["scheme"] if self.dequantize is not None else "dense"


@dataclass(frozen=True)
class Use:
    """One consumer of a region's weight: its kind, and the rows (linear) or output positions (conv2d) it computes."""

    kind: str
    count: int
    node: Node | None  # None when the weight itself is a graph output


@dataclass(frozen=True)
class Region:
    """One reparameterized weight in one place of the graph."""

    form: str  # "merged", "split" or "bare"
    anchor: Node  # the node whose result the fold replaces: lora_merge, the split's add, or dequantize
    base: Base
    a: Node | None
    b: Node | None
    scale: float | None
    members: frozenset[str]  # result names of the region's nodes (leaves excluded)
    uses: tuple[Use, ...]

    @property
    def leaves(self) -> tuple[Node, ...]:
        return self.base.leaves + tuple(n for n in (self.a, self.b) if n is not None)

    @property
    def key(self) -> tuple[Any, ...]:
        """Regions with equal keys hold the same weight (a tied or reused parameter) and fold into one leaf."""
        deq = self.base.dequantize.attrs if self.base.dequantize is not None else ()
        return (tuple(n.attr["path"] for n in self.leaves), deq, self.scale, self.form == "bare")


@dataclass(frozen=True)
class Split:
    """The parts of a split low-rank path, as found from its final add."""

    kind: str  # "linear" or "conv2d"
    x: Value
    weight: Value
    bias: Value | None
    a: Value
    b: Value
    scale: float
    geometry: dict[str, Any]  # the base convolution's stride, padding, dilation, groups ({} for linear)
    inner: tuple[Node, ...]  # the nodes between x, the weights and the add (the add excluded)


def param_leaf(value: Value, producer: Producer) -> Node | None:
    node = producer(value)
    return node if node is not None and node.op == "param" else None


def base_of(value: Value, producer: Producer) -> Base | None:
    """The stored base behind a dense weight value, or None when it is computed some other way."""
    node = producer(value)
    if node is None:
        return None
    if node.op == "param":
        return Base((node,), None, value)
    if node.op == "dequantize":
        leaves = tuple(param_leaf(v, producer) for v in node.inputs)
        if all(leaf is not None for leaf in leaves):
            return Base(leaves, node, value)  # type: ignore[arg-type]
    return None


def linear_form(node: Node | None, producer: Producer) -> tuple[Value, Value, Node | None] | None:
    """(x, w, the transpose) when `node` is matmul(x, transpose(w)) with w a matrix, or (x, w, None) when it is
    linear(x, w) (simplify's form of the same layer): a linear layer."""
    if node is not None and node.op == "linear" and node.inputs[0] != node.inputs[1]:
        return node.inputs[0], node.inputs[1], None
    if node is None or node.op != "matmul":
        return None
    t = producer(node.inputs[1])
    if t is None or t.op != "transpose" or tuple(t.attr["perm"]) != (1, 0) or node.inputs[0] == node.inputs[1]:
        return None
    return node.inputs[0], t.inputs[0], t


def rows(x: Value) -> int:
    """How many vectors a linear layer applied to `x` transforms."""
    return x.type.size // max(x.shape[-1], 1) if x.shape else 1


def positions(y: Value) -> int:
    """How many output positions a convolution producing `y` (N, C, H, W) computes."""
    n, _, h, w = y.shape
    return n * h * w


def _fits_lora(base: Value, a: Value, b: Value) -> bool:
    try:
        get_op("lora_merge").infer_types([base.type, a.type, b.type], {"scale": 1.0})
    except BrazeError:
        return False
    return True


def _low_rank(value: Value, producer: Producer, scalar: Scalar) -> tuple[Node, Node, float] | None:
    """(low, mul, s) when `value` is mul(low, s) or mul(s, low) with s a one-element constant."""
    mul = producer(value)
    if mul is None or mul.op != "mul":
        return None
    for low, s in (mul.inputs, mul.inputs[::-1]):
        factor, node = scalar(s), producer(low)
        if factor is not None and node is not None and low.type == mul.out.type:
            return node, mul, factor
    return None


def _linear_split(y: Value, low: Node, mul: Node, scale: float, producer: Producer) -> Split | None:
    second = linear_form(low, producer)
    first = linear_form(producer(second[0]), producer) if second else None
    if second is None or first is None:
        return None
    y_node, bias, bias_add = producer(y), None, None
    if y_node is not None and y_node.op == "add":
        for mm, other in (y_node.inputs, y_node.inputs[::-1]):
            if linear_form(producer(mm), producer) and mm.type == y.type:
                bias, bias_add, y_node = other, y_node, producer(mm)
                break
    base = linear_form(y_node, producer)
    if base is None or base[0] != first[0]:
        return None
    inner = (base[2], y_node, bias_add, first[2], producer(second[0]), second[2], low, mul)
    return Split("linear", base[0], base[1], bias, first[1], second[1], scale, {},
                 tuple(n for n in inner if n is not None))


def _conv_split(y: Value, low: Node, mul: Node, scale: float, producer: Producer) -> Split | None:
    y_node = producer(y)
    h = producer(low.inputs[0])
    if y_node is None or y_node.op != "conv2d" or h is None or h.op != "conv2d" or len(low.inputs) != 2 \
            or len(h.inputs) != 2 or y_node.attr["groups"] != 1:
        return None
    geometry = {k: y_node.attr[k] for k in ("stride", "padding", "dilation", "groups")}
    if low.attr != UNIT_GEOMETRY or h.attr != geometry or h.inputs[0] != y_node.inputs[0]:
        return None
    bias = y_node.inputs[2] if len(y_node.inputs) == 3 else None
    return Split("conv2d", y_node.inputs[0], y_node.inputs[1], bias, h.inputs[1], low.inputs[1], scale, geometry,
                 (y_node, h, low, mul))


def split_at(add: Node, producer: Producer, scalar: Scalar) -> Split | None:
    """The split low-rank path ending in `add`, or None."""
    if add.op != "add":
        return None
    for y, other in (add.inputs, add.inputs[::-1]):
        found = _low_rank(other, producer, scalar)
        if found is None or y.type != add.out.type:
            continue
        low, mul, scale = found
        parts = _linear_split(y, low, mul, scale, producer) if low.op == "matmul" else \
            _conv_split(y, low, mul, scale, producer) if low.op == "conv2d" else None
        if parts is not None and _fits_lora(parts.weight, parts.a, parts.b):
            return parts
    return None


def merged_uses(value: Value, users: Mapping[str, list[Node]], outputs: set[str]) -> tuple[Use, ...]:
    """How the nodes reading the merged weight `value` consume it."""
    found: list[Use] = []
    for user in users.get(value.name, []):
        if user.op == "transpose" and tuple(user.attr["perm"]) == (1, 0):
            for mm in users.get(user.out.name, []):
                linear = mm.op == "matmul" and mm.inputs[1] == user.out and mm.inputs[0] != user.out
                found.append(Use("linear", rows(mm.inputs[0]), mm) if linear else Use(mm.op, 0, mm))
            if user.out.name in outputs:
                found.append(Use("graph output", 0, user))
        elif user.op == "conv2d" and user.inputs[1] == value and user.inputs[0] != value:
            groups = user.attr["groups"]
            found.append(Use("conv2d", positions(user.out), user) if groups == 1
                         else Use(f"conv2d with groups={groups}", 0, user))
        else:
            found.append(Use(user.op, 0, user))
    if value.name in outputs:
        found.append(Use("graph output", 0, None))
    return tuple(found)


def find_regions(graph: Graph) -> list[Region]:
    """Every region of the graph in order of its anchor (trainable or not; the caller decides)."""
    producers, users = graph.producers, graph.users
    outputs = {v.name for v in graph.outputs}
    counts = {name: len(nodes) + (name in outputs) for name, nodes in users.items()}
    producer: Producer = lambda v: producers.get(v.name)  # noqa: E731

    def scalar(v: Value) -> float | None:
        node = producer(v)
        array = node.attr["value"].array if node is not None and node.op == "constant" else None
        return float(array.reshape(-1)[0]) if array is not None and array.size == 1 and array.dtype.kind == "f" \
            else None

    regions: list[Region] = []
    claimed: set[str] = set()
    for node in graph.nodes:
        region = _merged(node, producer, users, outputs) if node.op == "lora_merge" else \
            _split(node, producer, scalar, counts) if node.op == "add" else None
        if region is not None:
            regions.append(region)
            claimed |= region.members
    for node in graph.nodes:
        if node.op == "dequantize" and node.out.name not in claimed:
            base = base_of(node.out, producer)
            if base is not None:
                regions.append(Region("bare", node, base, None, None, None, frozenset({node.out.name}),
                                      merged_uses(node.out, users, outputs)))
    order = {n.outputs[0].name: i for i, n in enumerate(graph.nodes) if n.outputs}  # multi-result nodes too
    return sorted(regions, key=lambda r: order[r.anchor.out.name])


def _merged(node: Node, producer: Producer, users: Mapping[str, list[Node]], outputs: set[str]) -> Region | None:
    base = base_of(node.inputs[0], producer)
    a, b = param_leaf(node.inputs[1], producer), param_leaf(node.inputs[2], producer)
    if base is None or a is None or b is None:
        return None
    members = {node.out.name} | ({base.dequantize.out.name} if base.dequantize is not None else set())
    return Region("merged", node, base, a, b, node.attr["scale"], frozenset(members),
                  merged_uses(node.out, users, outputs))


def _split(node: Node, producer: Producer, scalar: Scalar, counts: Mapping[str, int]) -> Region | None:
    parts = split_at(node, producer, scalar)
    if parts is None or any(counts.get(n.out.name, 0) != 1 for n in parts.inner):
        return None
    base = base_of(parts.weight, producer)
    a, b = param_leaf(parts.a, producer), param_leaf(parts.b, producer)
    if base is None or a is None or b is None:
        return None
    members = {n.out.name for n in parts.inner} | {node.out.name}
    if base.dequantize is not None:
        members.add(base.dequantize.out.name)
    count = rows(parts.x) if parts.kind == "linear" else positions(node.out)
    return Region("split", node, base, a, b, parts.scale, frozenset(members), (Use(parts.kind, count, node),))
