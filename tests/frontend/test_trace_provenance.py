"""Every traced node records its provenance: the path of the module whose forward created it and the user's
file and line; `dump(provenance=True)` shows it, the parser keeps it, plain text leaves it out."""
from __future__ import annotations

from typing import Any

import braze
import braze.nn as nn
import braze.nn.functional as F
from braze import ir

X = braze.randn(2, 4)


def line_of(marker: str) -> int:
    with open(__file__, encoding="utf-8") as f:
        return next(n for n, line in enumerate(f, 1) if line.rstrip().endswith(f"# {marker}"))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)

    def forward(self, x: Any) -> Any:
        h = F.gelu(self.fc(x))  # block-fc
        return self.norm(h) * 0.5  # block-norm


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Sequential(nn.Linear(4, 2))

    def forward(self, x: Any) -> Any:
        for block in self.blocks:
            x = block(x)
        return braze.tanh(self.head(x))  # net-head


def traced() -> ir.Graph:
    m = Net()
    m.state_dict()
    return braze.trace(m, X)


def _producer(g: ir.Graph, name: str) -> ir.Node:
    node = g.producer(next(v for n in g.nodes for v in n.outputs if v.name == name))
    assert node is not None
    return node


def test_trace_nodes_of_a_layer_have_its_module_path_and_the_calling_user_line() -> None:
    g = traced()
    linear = [n for n in g.nodes if n.op in ("transpose", "matmul", "add")]
    assert [n.loc for n in linear[:3]] == [ir.Loc("blocks.0.fc", __file__, line_of("block-fc"))] * 3
    assert [n.loc.module for n in linear[3:6]] == ["blocks.1.fc"] * 3


def test_trace_nodes_created_in_user_forward_code_have_that_module_and_line() -> None:
    g = traced()
    gelu = [n for n in g.nodes if n.op == "gelu"]
    assert [n.loc for n in gelu] == [ir.Loc(f"blocks.{k}", __file__, line_of("block-fc")) for k in range(2)]
    scale = [n for n in g.nodes if n.op == "mul"]
    assert [n.loc for n in scale] == [ir.Loc(f"blocks.{k}", __file__, line_of("block-norm")) for k in range(2)]
    norms = [n for n in g.nodes if n.op == "layer_norm"]
    assert [n.loc.module for n in norms] == ["blocks.0.norm", "blocks.1.norm"]


def test_trace_root_module_nodes_have_the_empty_path() -> None:
    g = traced()
    tanh = next(n for n in g.nodes if n.op == "tanh")
    assert tanh.loc == ir.Loc("", __file__, line_of("net-head"))
    head = [n for n in g.nodes if n.loc is not None and n.loc.module == "head.0"]
    assert {n.loc.line for n in head} == {line_of("net-head")}


def test_trace_leaves_record_where_they_are_first_read() -> None:
    g = traced()
    weight = _producer(g, "blocks.1.fc.weight")
    assert weight.loc == ir.Loc("blocks.1.fc", __file__, line_of("block-fc"))


def test_trace_of_library_layers_blames_the_trace_call() -> None:
    m = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    m.state_dict()
    g = braze.trace(m, X)  # library-layers
    assert {(n.loc.module, n.loc.line) for n in g.ops()} == {("0", line_of("library-layers")),
                                                              ("1", line_of("library-layers"))}


def test_dump_shows_provenance_only_on_request() -> None:
    g = traced()
    assert "loc(" not in str(g) and "loc(" not in g.dump()
    text = g.dump(provenance=True)
    assert f'loc("blocks.0.fc" "{__file__}":{line_of("block-fc")})' in text
    assert len([line for line in text.splitlines() if "loc(" in line]) == len(g.nodes)


def test_parser_keeps_provenance() -> None:
    g = traced()
    parsed = ir.parse(g.dump(provenance=True))
    assert parsed == g
    assert [n.loc for n in parsed.nodes] == [n.loc for n in g.nodes]
    assert parsed.dump(provenance=True) == g.dump(provenance=True)
