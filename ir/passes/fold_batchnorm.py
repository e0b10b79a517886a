"""fold_batchnorm: a convolution or linear layer followed by inference batch norm becomes one layer with adjusted
weight and bias.

Pattern: batch_norm(y, mean, var, gamma, beta){eps} where y = conv2d(x, W[, bias]) (any geometry and groups) or
y = matmul(x, transpose(W)) or linear(x, W) [+ bias] of rank 2 (batch norm's channel axis 1 is then the layer's
output axis); W and the layer's bias are param leaves, mean, var, gamma and beta are param leaves (buffers) or
constants, every such param leaf is frozen (trainable=false: a training graph keeps its structure) and has its
array in the graph's weights, and y (and the matmul under a bias add) is read by the batch norm only. With
k = gamma / sqrt(var + eps), computed by the registered batch_norm op in float64 and rounded once to the layer's
dtype:
    W' = W * k (per output channel)        b' = (bias - mean) * k + beta    (bias 0 when the layer has none)
and the batch norm's result is conv2d(x, W', b'), or matmul(x, transpose(W')) + b' (linear(x, W') + b').
New leaves (trainable=false, buffer=false): the weight keeps W's path and ParamId; the bias keeps the layer's
bias path and id when it had a bias leaf, and is "<W path>.folded_bias" with a new id otherwise. When another node
still reads the old W (or bias), the new leaf is "<path>.folded" with a new id, so both arrays stay.
specialize_flags turns an evaluation graph's batch_norm_flag into batch_norm first. A batch norm whose input is a
conv or linear layer but does not qualify stays, and the report says why.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import BrazeError
from ..evaluate import evaluate
from ..graph import Graph, Node, Value
from .folded_leaves import Adoption, adopt_paths, fresh_path, next_id
from .manager import PassContext, register_pass
from .reparam_regions import linear_form
from .rewrite import Match, Rule, apply_rules, use_counts

Producer = Callable[[Value], "Node | None"]
_GEOMETRY = ("stride", "padding", "dilation", "groups")


@dataclass(frozen=True)
class Layer:
    """The conv2d or linear layer under a batch norm, as found from the batch norm's input."""

    kind: str  # "conv2d" or "linear"
    x: Value
    weight: Value
    bias: Value | None
    geometry: dict[str, Any]
    inner: tuple[Node, ...]  # the layer's nodes, from the one reading x to the one the batch norm reads


@dataclass
class Fold:
    """One batch norm to fold: the adjusted arrays and the provisional and wanted paths of their leaves."""

    weight: np.ndarray
    bias: np.ndarray
    paths: tuple[str, str]
    adoptions: dict[str, Adoption]
    leaves: tuple[Value, Value] | None = None


def layer_of(value: Value, producer: Producer) -> Layer | None:
    """The conv2d or linear layer computing `value`, or None."""
    node = producer(value)
    if node is None:
        return None
    if node.op == "conv2d":
        bias = node.inputs[2] if len(node.inputs) == 3 else None
        return Layer("conv2d", node.inputs[0], node.inputs[1], bias, {k: node.attr[k] for k in _GEOMETRY}, (node,))
    if value.type.rank != 2:
        return None
    found = linear_form(node, producer)
    if found is not None:
        return Layer("linear", found[0], found[1], None, {}, (node,))
    if node.op == "add":
        for mm, bias in (node.inputs, node.inputs[::-1]):
            found = linear_form(producer(mm), producer)
            if found is not None and bias.shape == (value.shape[1],) and mm.type == value.type:
                return Layer("linear", found[0], found[1], bias, {}, (producer(mm), node))  # type: ignore[arg-type]
    return None


def _array(value: Value, producer: Producer, weights: Mapping[str, Any]) -> tuple[np.ndarray | None, str]:
    """The array of a constant or frozen param leaf with weights, or None and why not."""
    node = producer(value)
    if node is not None and node.op == "constant":
        return node.attr["value"].array, ""
    if node is None or node.op != "param":
        return None, f"%{value.name} is neither a param leaf nor a constant"
    if node.attr["trainable"]:
        return None, f"'{node.attr['path']}' is trainable"
    if node.attr["path"] not in weights:
        return None, f"'{node.attr['path']}' has no array in the graph's weights"
    return np.asarray(weights[node.attr["path"]]), ""


def folded_arrays(weight: np.ndarray, bias: np.ndarray | None, stats: list[np.ndarray], eps: float,
                  dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(W * k, (bias - mean) * k + beta) with k = gamma / sqrt(var + eps): k and the bias from the registered
    batch_norm in float64 (k is batch norm of ones with mean and beta zero), W * k formed in float64 and rounded
    once to `dtype`, one output channel block at a time (no float64 copy of W, which may be megabytes)."""
    mean, var, gamma, beta = (np.asarray(s, dtype=np.float64) for s in stats)
    zero = np.zeros_like(mean)
    k = evaluate("batch_norm", [np.ones((1, mean.size)), zero, var, gamma, zero], {"eps": eps})[0][0]
    weight = np.asarray(weight)
    scaled = np.empty(weight.shape, dtype)
    np.multiply(weight, k.reshape((-1,) + (1,) * (weight.ndim - 1)), out=scaled, dtype=np.float64,
                casting="same_kind")
    shift = zero if bias is None else np.asarray(bias, dtype=np.float64)
    folded_bias = evaluate("batch_norm", [shift[None], mean, var, gamma, beta], {"eps": eps})[0][0]
    return scaled, folded_bias.astype(dtype)


def _plan_one(bn: Node, graph: Graph, counts: Mapping[str, int], paths: set[str]) -> tuple[Fold | None, str]:
    """The fold of batch norm `bn`, or None and why not ("" when its input is no conv or linear layer)."""
    producer: Producer = lambda v: graph.producers.get(v.name)  # noqa: E731
    layer = layer_of(bn.inputs[0], producer)
    if layer is None:
        return None, ""
    shared = [n for n in layer.inner if counts.get(n.out.name, 0) != 1]
    if shared:
        return None, f"%{shared[0].out.name} ({shared[0].op}) has other readers"
    w_node, b_node = producer(layer.weight), producer(layer.bias) if layer.bias is not None else None
    if w_node is None or w_node.op != "param":
        return None, f"the layer's weight %{layer.weight.name} is not a param leaf"
    operands = (layer.weight, *bn.inputs[1:]) + ((layer.bias,) if layer.bias is not None else ())
    found = [_array(v, producer, graph.weights) for v in operands]
    why = next((reason for _, reason in found if reason), "")
    if why:
        return None, why
    arrays: list[np.ndarray] = [array for array, _ in found if array is not None]
    bias_array = arrays[5] if layer.bias is not None else None
    weight, bias = folded_arrays(arrays[0], bias_array, arrays[1:5], bn.attr["eps"], bn.out.dtype.numpy)
    w_path = w_node.attr["path"]
    has_bias_leaf = b_node is not None and b_node.op == "param"
    b_path = b_node.attr["path"] if has_bias_leaf else f"{w_path}.folded_bias"
    provisional = (fresh_path(f"{w_path}.folded", paths),
                   fresh_path(f"{b_path}.folded" if has_bias_leaf else b_path, paths))
    adoptions = {provisional[0]: Adoption(w_path, w_node.attr["id"], frozenset({w_path}))}
    if has_bias_leaf:
        adoptions[provisional[1]] = Adoption(b_path, b_node.attr["id"], frozenset({b_path}))  # type: ignore[union-attr]
    return Fold(weight, bias, provisional, adoptions), ""


def _fold(m: Match, fold: Fold) -> Value:
    """The batch norm's replacement: its layer applied with the adjusted weight and bias."""
    layer = layer_of(m.node.inputs[0], m.producer)
    if layer is None:
        raise BrazeError(f"fold_batchnorm: the layer under batch norm %{m.node.out.name} changed while rewriting")
    e = m.e
    if fold.leaves is None:
        fold.leaves = (e.param(fold.paths[0], fold.weight, id=-1),  # provisional ids: adopt_paths settles them
                       e.param(fold.paths[1], fold.bias, id=-1))
    w, b = fold.leaves
    if layer.kind == "conv2d":
        return e.conv2d(layer.x, w, b, **layer.geometry)
    if layer.inner[0].op == "linear":  # the layer as simplify writes it, kept in that form
        return e.add(e.linear(layer.x, w), b)
    return e.add(e.matmul(layer.x, e.transpose(w, perm=(1, 0))), b)


def _label(bn: Node, graph: Graph) -> str:
    """The batch norm's module path (from its loc or its weight leaf), else its result name."""
    if bn.loc is not None and bn.loc.module:
        return bn.loc.module
    gamma = graph.producers.get(bn.inputs[3].name)
    return gamma.attr["path"].rpartition(".")[0] if gamma is not None and gamma.op == "param" else f"%{bn.out.name}"


@register_pass("fold_batchnorm")
def fold_batchnorm(graph: Graph, ctx: PassContext) -> Graph:
    """Fold inference batch norm into the conv2d or linear layer before it."""
    counts = use_counts(graph)
    paths = {p.path for p in graph.params()}
    folds: dict[str, Fold] = {}
    labels: dict[str, str] = {}
    for bn in (n for n in graph.nodes if n.op == "batch_norm"):
        fold, why = _plan_one(bn, graph, counts, paths)
        if fold is not None:
            folds[bn.out.name], labels[bn.out.name] = fold, _label(bn, graph)
        elif why:
            ctx.note(f"left batch norm {_label(bn, graph)}: {why}")
    if not folds:
        return graph

    def fold_rule(m: Match) -> Value | None:
        fold = folds.get(m.node.out.name)
        return None if fold is None else _fold(m, fold)

    result = apply_rules(graph, [Rule("batch_norm", fold_rule, "fold_batchnorm")])
    created = [p for f in folds.values() for p in f.paths]
    wanted = {p: a for f in folds.values() for p, a in f.adoptions.items()}
    result, final = adopt_paths(result, created, wanted, next_id(graph))
    for name, f in folds.items():
        ctx.note(f"folded batch norm {labels[name]} into {final.get(f.paths[0], f.paths[0])} and "
                 f"{final.get(f.paths[1], f.paths[1])}")
    return result
