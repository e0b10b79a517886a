"""Paths and ids of the param leaves that folding passes create.

A folding pass first emits each new leaf under a provisional path that clashes with nothing (fresh_path), then,
once the rewritten graph shows which old leaves are gone, lets it adopt the path and ParamId of the parameter it
replaces (adopt_paths): the folded graph names its weights as the model does, and a leaf that could not take its
parameter's place (another node still reads the old one) keeps the provisional path and gets a new id, one above
the input graph's largest, in creation order.
"""
from __future__ import annotations

from typing import Mapping, NamedTuple, Sequence

from ..graph import Graph, sorted_attrs
from .rewrite import finalize


class Adoption(NamedTuple):
    """The path and id a provisional leaf takes, provided no leaf with one of the `blockers` paths remains."""

    path: str
    id: int
    blockers: frozenset[str]


def fresh_path(base: str, taken: set[str]) -> str:
    """`base`, or `base_2`, `base_3`, ... whichever is not in `taken` (which then holds it)."""
    path, k = base, 2
    while path in taken:
        path, k = f"{base}_{k}", k + 1
    taken.add(path)
    return path


def next_id(graph: Graph) -> int:
    """One above the largest ParamId of the graph's param leaves."""
    return max((p.id for p in graph.params()), default=-1) + 1


def adopt_paths(graph: Graph, created: Sequence[str], wanted: Mapping[str, Adoption],
                first_id: int) -> tuple[Graph, dict[str, str]]:
    """Settle the leaves a pass created under the provisional paths `created` (in creation order): each takes its
    adoption (`wanted`) where that is free, the others get ids first_id, first_id + 1, ... in order. Returns the
    graph and each provisional path's final path. Renamed leaves keep their arrays and take the path as value name."""
    remaining = {p.path for p in graph.params()}
    settled: dict[str, tuple[str, int]] = {}
    new_id = first_id
    for provisional in created:
        if provisional not in remaining:
            continue
        adoption = wanted.get(provisional)
        if adoption is not None and adoption.path not in remaining and not adoption.blockers & remaining:
            settled[provisional] = (adoption.path, adoption.id)
            remaining.add(adoption.path)
        else:
            settled[provisional], new_id = (provisional, new_id), new_id + 1
    final = {p: settled[p][0] if p in settled else p for p in created}
    nodes = tuple(n.replace(attrs=sorted_attrs({**n.attr, "path": settled[n.attr["path"]][0],
                                                "id": settled[n.attr["path"]][1]}))
                  if n.op == "param" and n.attr["path"] in settled else n for n in graph.nodes)
    weights = {settled[k][0] if k in settled else k: v for k, v in graph.weights.items()}
    renamed = graph.replace(nodes=nodes, weights=weights)
    return finalize(renamed, renamed), final
