"""fold_reparameterizations: fold frozen LoRA, QLoRA and quantized weights into plain param leaves (the inference
case), or keep a quantized base quantized with the low-rank path computed beside it.

Regions (ir/passes/reparam_regions.py): lora_merge(base, a, b) of param leaves, the base dense or
dequantize(codes, scales); the low-rank path computed beside its base (x @ W^T + s * (x @ a^T) @ b^T, or the
convolution form); a bare dequantize. A region with a trainable leaf is never touched (a training graph keeps its
structure), nor one whose leaves have no array in the graph's weights, with one exception: under
quantized_weights="packed", a quantized base whose adapters train and which only linear layers read is kept
(below), since that folds nothing trainable, so a training step differentiating the result reads the base packed
forward and backward (braze.compile_train_step does this before autodiff). All regions of one weight (a tied
weight read twice) are decided together and fold into one leaf.

- A dense base is merged under every policy: the leaf holds base + scale * b @ a. For a lora_merge that is the
  very array the graph computed on every call; merging a separately computed path changes float rounding only,
  and the report gives the measured error.
- A quantized base follows option `policy`:
  "merge": dequantize and merge into one dense leaf;
  "keep": the base stays quantized and each consumer computes the low-rank path separately, the function that
  was trained: matmul(x, transpose(lora_merge(dequantize(c, s), a, b))) becomes
  matmul(x, transpose(dequantize(c, s))) + scale * matmul(matmul(x, transpose(a)), transpose(b)), and conv2d
  likewise (a conv by a with the layer's geometry, then a 1x1 conv by b). A weight some consumer needs dense
  (another op, a grouped convolution, a graph output) is merged instead, and the report says so;
  "auto" (the default): the cheaper of the two by the cost model below.
The folded leaf keeps the parameter's path (the base path, without ".codes") and ParamId, with trainable=false
and buffer=false; its array goes into the new graph's weights, while the other arrays are shared, not copied.
When another node still reads the base leaves, so both must stay, the folded leaf is "<path>.merged" with a
new id.

Cost model, per call and per weight (the base GEMM or convolution is the same either way and left out):
  merge = FLOPS_PER_BYTE * dense bytes
  keep  = FLOPS_PER_BYTE * (codes + scales + a + b bytes) + DEQUANTIZE_FLOPS * elements
          + the sum over consumers of 2 * count * (rank * (fan_in + out) + out)
Bytes are the weight bytes each call reads; count is a consumer's rows (linear) or output positions (conv2d),
and the last term is its two thin products, the scaling and the add. FLOPS_PER_BYTE (option flops_per_byte) is
the machine balance: how many flops take as long as moving one byte from memory. Small batches are memory
bound, so a 4-bit base is kept; large ones are compute bound, and the low-rank flops tip the choice to merge.

Option quantized_weights="packed" then rewrites every linear layer reading a kept dequantize into
quantized_linear, which reads the codes and scales packed (ir/passes/quantized_linear.py); "dense", the default,
leaves the dequantize nodes writing dense weights.

The report notes, per parameter, the choice and why; whenever merging changed numerics (a quantized base
dequantized and merged, or a separately computed path merged) it gives the maximum absolute error and the
relative one (max |merged - exact| / max |exact|) of the merged weight against the exact sum, in float64, of the
dequantized base (the float32 values dequantize defines, the base training saw) and scale * b @ a. The pass
details hold the same under "params": path -> choice, reason, scheme, rank, cost, forms, max_abs_error,
max_rel_error and the folded leaf's path.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ..errors import BrazeError
from ..evaluate import evaluate
from ..graph import Graph, Value
from .folded_leaves import Adoption, adopt_paths, fresh_path, next_id
from .manager import PassContext, register_pass
from .quantized_linear import pack_linear_weights
from .reparam_regions import SPLITTABLE, UNIT_GEOMETRY, Region, find_regions, split_at
from .rewrite import Match, Rule, apply_rules

POLICIES = ("merge", "keep", "auto")
FLOPS_PER_BYTE = 8.0
DEQUANTIZE_FLOPS = 2


@dataclass
class Decision:
    """What happens to one weight: its regions, the choice and why, and the folded leaf when merged."""

    regions: list[Region]
    choice: str = "merge"
    reason: str = ""
    cost: dict[str, float] | None = None
    array: np.ndarray | None = None
    error: tuple[float, float] | None = None
    path: str = ""
    leaf: Value | None = None
    final_path: str = ""

    @property
    def first(self) -> Region:
        return self.regions[0]

    @property
    def rank(self) -> int | None:
        return self.first.a.out.shape[0] if self.first.a is not None else None


@dataclass
class Plan:
    """The rewrites of one run: anchors to replace by a merged leaf, consumers at which to split the low rank."""

    merges: dict[str, Decision] = field(default_factory=dict)
    keeps: dict[str, Region] = field(default_factory=dict)


def keep_cost(d: Decision, flops_per_byte: float) -> float:
    """The per-call cost of computing the weight from its quantized base (and its low-rank path separately)."""
    r = d.first
    stored = sum(leaf.out.type.nbytes for leaf in r.leaves)
    flops = DEQUANTIZE_FLOPS * r.base.value.type.size if r.base.quantized else 0
    if r.a is not None and r.b is not None:
        rank, fan_in, out = r.a.out.shape[0], math.prod(r.a.out.shape[1:]), r.b.out.shape[0]
        flops += sum(2 * u.count * (rank * (fan_in + out) + out) for reg in d.regions for u in reg.uses)
    return flops_per_byte * stored + flops


def merge_cost(d: Decision, flops_per_byte: float) -> float:
    """The per-call cost of reading the merged dense weight."""
    return flops_per_byte * d.first.base.value.type.nbytes


def decide(d: Decision, policy: str, flops_per_byte: float) -> None:
    """Set the choice, the reason and (for a quantized base) both costs."""
    r = d.first
    if not r.base.quantized:
        d.choice, d.reason = "merge", "a dense base always merges"
        return
    d.cost = {"merge": merge_cost(d, flops_per_byte), "keep": keep_cost(d, flops_per_byte)}
    blockers = sorted({u.kind for reg in d.regions for u in reg.uses if u.kind not in SPLITTABLE}) \
        if r.a is not None else []
    if _trained(r):
        d.choice, d.reason = "keep", "the adapters train, so the base is read packed beside them"
    elif policy == "merge":
        d.choice, d.reason = "merge", "policy merge"
    elif blockers:
        d.choice, d.reason = "merge", f"policy {policy}, but the dense weight is read by {', '.join(blockers)}"
    elif policy == "keep":
        d.choice, d.reason = "keep", "policy keep"
    else:
        keep, merge = d.cost["keep"], d.cost["merge"]
        d.choice = "keep" if keep < merge else "merge"
        d.reason = (f"auto: keep {keep:.4g} < merge {merge:.4g}" if keep < merge
                    else f"auto: merge {merge:.4g} <= keep {keep:.4g}") + " flop-equivalents per call"


def merged_array(d: Decision, weights: Mapping[str, Any]) -> tuple[np.ndarray, tuple[float, float] | None]:
    """The folded weight, with its (max abs, max rel) error against float64 when merging changes numerics."""
    r = d.first
    stored = [np.asarray(weights[leaf.attr["path"]]) for leaf in r.base.leaves]
    dense = evaluate("dequantize", stored, r.base.dequantize.attr)[0] if r.base.dequantize is not None else stored[0]
    if r.a is None or r.b is None:
        return dense, None  # a bare dequantize: exactly the values the graph computed
    a, b = np.asarray(weights[r.a.attr["path"]]), np.asarray(weights[r.b.attr["path"]])
    merged = evaluate("lora_merge", [dense, a, b], {"scale": r.scale})[0]
    if not r.base.quantized and all(reg.form == "merged" for reg in d.regions):
        return merged, None  # the graph's own lora_merge, bit for bit
    wide = [np.asarray(v, dtype=np.float64) for v in (dense, a, b)]
    exact = evaluate("lora_merge", wide, {"scale": r.scale})[0]
    diff = float(np.max(np.abs(merged.astype(np.float64) - exact), initial=0.0))
    peak = float(np.max(np.abs(exact), initial=0.0))
    return merged, (diff, diff / peak if peak > 0 else (0.0 if diff == 0 else math.inf))


def _leaf(m: Match, d: Decision) -> Value:
    if d.leaf is None:
        d.leaf = m.e.param(d.path, d.array, id=-1)  # provisional; settle_paths gives the final id
    return d.leaf


def _merge_at(m: Match, d: Decision) -> Value:
    """The anchor's replacement: the folded leaf, or for a split path the layer applied to the folded leaf."""
    if m.node.op in ("lora_merge", "dequantize"):
        return _leaf(m, d)
    parts = split_at(m.node, m.producer, m.scalar)
    if parts is None:
        raise BrazeError(f"fold_reparameterizations: the low-rank path ending at %{m.node.out.name} changed shape "
                         f"while rewriting")
    e, leaf = m.e, _leaf(m, d)
    if parts.kind == "linear":
        out = e.matmul(parts.x, e.transpose(leaf, perm=(1, 0)))
        return out if parts.bias is None else e.add(out, parts.bias)
    bias = [parts.bias] if parts.bias is not None else []
    return e.conv2d(parts.x, leaf, *bias, **parts.geometry)


def _split_use(m: Match, r: Region) -> Value:
    """A consumer of a kept weight: the layer on the dequantized base plus scale times the low-rank path."""
    e, node = m.e, m.node
    dense, a, b = r.base.value, r.a.out, r.b.out  # type: ignore[union-attr]
    x = node.inputs[0]
    if node.op == "matmul":
        base = e.matmul(x, e.transpose(dense, perm=(1, 0)))
        low = e.matmul(e.matmul(x, e.transpose(a, perm=(1, 0))), e.transpose(b, perm=(1, 0)))
    else:
        geometry = {k: node.attr[k] for k in ("stride", "padding", "dilation", "groups")}
        base = e.conv2d(x, dense, *node.inputs[2:], **geometry)
        low = e.conv2d(e.conv2d(x, a, **geometry), b, **UNIT_GEOMETRY)
    return e.add(base, e.mul(low, r.scale))


def _rules(plan: Plan) -> list[Rule]:
    def fold_region(m: Match) -> Value | None:
        name = m.node.outputs[0].name if m.node.outputs else ""
        if name in plan.merges:
            return _merge_at(m, plan.merges[name])
        if name in plan.keeps:
            return _split_use(m, plan.keeps[name])
        return None
    return [Rule(None, fold_region, "fold_reparameterization")]


def _trained(r: Region) -> bool:
    return any(leaf.attr["trainable"] for leaf in r.leaves)


def _packable_while_training(r: Region) -> bool:
    """Whether a region with trainable leaves can still be kept: a frozen quantized base, lora_merged with its
    adapters, that only linear layers read (splitting them then leaves every trainable leaf as it was)."""
    return r.form == "merged" and r.base.quantized and not any(leaf.attr["trainable"] for leaf in r.base.leaves) \
        and all(u.kind == "linear" for u in r.uses)


def _usable(regions: list[Region], graph: Graph, ctx: PassContext) -> list[Region]:
    """The regions whose leaves are all frozen (or, reading packed, that _packable_while_training) and have
    arrays; notes why the others stay."""
    packed = ctx.option("quantized_weights", "dense") == "packed"
    trainable = [r.base.path for r in regions if _trained(r) and not (packed and _packable_while_training(r))]
    if trainable:
        ctx.note(f"left unfolded (trainable leaves, a training graph): {', '.join(dict.fromkeys(trainable))}")
    usable = []
    for r in regions:
        missing = [leaf.attr["path"] for leaf in r.leaves if leaf.attr["path"] not in graph.weights]
        if missing:
            ctx.note(f"left {r.base.path} unfolded: no array for {', '.join(missing)} in the graph's weights")
        elif r.base.path not in trainable:
            usable.append(r)
    return usable


def _plan(graph: Graph, regions: list[Region], policy: str, flops_per_byte: float) -> tuple[Plan, list[Decision]]:
    groups: dict[tuple[Any, ...], Decision] = {}
    for r in regions:
        groups.setdefault(r.key, Decision([])).regions.append(r)
    paths = {p.path for p in graph.params()}
    plan = Plan()
    for d in groups.values():
        decide(d, policy, flops_per_byte)
        if d.choice == "keep":
            plan.keeps.update((u.node.out.name, r) for r in d.regions if r.form == "merged" for u in r.uses
                              if u.node is not None)
            continue
        d.array, d.error = merged_array(d, graph.weights)
        d.path = fresh_path(f"{d.first.base.path}.merged", paths)
        plan.merges.update((r.anchor.out.name, d) for r in d.regions)
    return plan, list(groups.values())


def settle_paths(graph: Graph, decisions: list[Decision], original: Graph) -> Graph:
    """Give each folded leaf its parameter's path and ParamId where the base leaves are gone (so nothing clashes)."""
    wanted = {d.path: Adoption(d.first.base.path, d.first.base.id,
                               frozenset(leaf.attr["path"] for leaf in d.first.base.leaves))
              for d in decisions if d.leaf is not None}
    created = [d.path for d in decisions if d.leaf is not None]
    graph, final = adopt_paths(graph, created, wanted, next_id(original))
    for d in decisions:
        d.final_path = final.get(d.path, d.path)
    return graph


def _report(d: Decision, ctx: PassContext) -> None:
    r = d.first
    what = f"{r.base.scheme} base" + (f" + rank-{d.rank} adapter" if d.rank is not None else "")
    if d.choice == "keep":
        low = ", low-rank path computed separately" if r.a is not None else ""
        ctx.note(f"{r.base.path}: kept quantized ({what}{low}); {d.reason}")
    else:
        exact = "exact" if d.error is None else f"max abs error {d.error[0]:.3g}, max rel error {d.error[1]:.3g}"
        leaf = f"; leaf {d.final_path}" if d.final_path != r.base.path else ""
        ctx.note(f"{r.base.path}: merged ({what}); {d.reason}; {exact}{leaf}")
    ctx.details.setdefault("params", {})[r.base.path] = {
        "choice": d.choice, "reason": d.reason, "scheme": r.base.scheme, "rank": d.rank, "cost": d.cost,
        "forms": sorted({reg.form for reg in d.regions}),
        "max_abs_error": d.error[0] if d.error else None, "max_rel_error": d.error[1] if d.error else None,
        "leaf": d.final_path if d.choice == "merge" else None}


def _options(ctx: PassContext) -> tuple[str, float]:
    policy = ctx.option("policy", "auto")
    if policy not in POLICIES:
        raise BrazeError(f"fold_reparameterizations: policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    balance = ctx.option("flops_per_byte", FLOPS_PER_BYTE)
    if isinstance(balance, bool) or not isinstance(balance, (int, float)) or not balance > 0:
        raise BrazeError(f"fold_reparameterizations: flops_per_byte must be a positive number, got {balance!r}")
    return policy, float(balance)


@register_pass("fold_reparameterizations", options=("policy", "flops_per_byte", "quantized_weights"))
def fold_reparameterizations(graph: Graph, ctx: PassContext) -> Graph:
    """Merge frozen reparameterized weights into single param leaves, or keep quantized bases (option policy),
    then let linear layers read the kept ones packed (option quantized_weights, ir/passes/quantized_linear.py)."""
    policy, balance = _options(ctx)
    regions = _usable(find_regions(graph), graph, ctx)
    if not regions:
        return pack_linear_weights(graph, ctx)
    plan, decisions = _plan(graph, regions, policy, balance)
    result = settle_paths(apply_rules(graph, _rules(plan)), decisions, graph)
    for d in decisions:
        _report(d, ctx)
    return pack_linear_weights(result, ctx)
