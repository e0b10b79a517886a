"""plan_memory: every intermediate buffer gets an aligned offset in one arena; an independent checker confirms that
buffers live at the same time never share bytes (except an elementwise result written over its dying operand)."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from braze.ir import Graph, GraphBuilder, TensorType, bool_, float32, parse
from braze.ir.passes import PassContext, optimize
from braze.ir.passes.plan_check import check_memory_plan
from braze.ir.passes.plan_memory import names_storage, plan_memory, storage_aliases

from .harness import assert_equivalent, random_weights
from .random_dags import random_dags


def planned(graph: Graph) -> Graph:
    return plan_memory(graph, PassContext("plan_memory"))


def offsets(graph: Graph) -> dict[str, int]:
    return graph.attributes["memory_plan"]["offsets"]


def transformer_layer(tokens: int = 8, dim: int = 16, heads: int = 2, hidden: int = 32) -> Graph:
    """Pre-norm self-attention and feed-forward with residuals, as a traced transformer layer looks."""
    b = GraphBuilder("transformer_layer")
    x = b.input("x", TensorType((tokens, dim), float32))
    ids = iter(range(100))

    def param(path: str, *shape: int):
        return b.param(path, TensorType(shape, float32), id=next(ids), trainable=False)

    def linear(h, name: str, n_in: int, n_out: int):
        return b.add(b.matmul(h, param(f"{name}.weight", n_in, n_out)), param(f"{name}.bias", n_out))

    def norm(h, name: str):
        return b.layer_norm(h, param(f"{name}.weight", dim), param(f"{name}.bias", dim), normalized_shape=(dim,))

    def split_heads(h, perm):
        return b.transpose(b.reshape(h, shape=(tokens, heads, dim // heads)), perm=perm)

    h = norm(x, "ln1")
    q = split_heads(linear(h, "attn.q", dim, dim), (1, 0, 2))
    k = split_heads(linear(h, "attn.k", dim, dim), (1, 2, 0))
    v = split_heads(linear(h, "attn.v", dim, dim), (1, 0, 2))
    scores = b.mul(b.matmul(q, k), b.scalar((dim // heads) ** -0.5, q))
    context = b.matmul(b.softmax(scores, axis=-1), v)
    merged = b.reshape(b.transpose(context, perm=(1, 0, 2)), shape=(tokens, dim))
    h = b.add(x, linear(merged, "attn.out", dim, dim))
    f = linear(b.gelu(linear(norm(h, "ln2"), "ff.0", dim, hidden), approximate="tanh"), "ff.2", hidden, dim)
    g = b.finish([b.add(h, f)])
    return g.replace(weights=random_weights(g))


def test_plan_memory_transformer_arena_is_smaller_than_the_naive_sum() -> None:
    plan = planned(transformer_layer()).attributes["memory_plan"]
    assert plan["arena_bytes"] < plan["naive_bytes"]


def test_plan_memory_transformer_plan_has_no_overlap() -> None:
    check_memory_plan(planned(transformer_layer()))


def test_plan_memory_fused_transformer_arena_is_smaller_than_the_naive_sum() -> None:
    g = optimize(transformer_layer(), ["fuse", "plan_memory"])
    plan = g.attributes["memory_plan"]
    assert any(n.op == "fused" for n in g.nodes) and plan["arena_bytes"] < plan["naive_bytes"]
    check_memory_plan(g)


def test_plan_memory_keeps_the_function() -> None:
    g = transformer_layer()
    assert_equivalent(g, optimize(g, ["fuse", "plan_memory"]), rtol=0)


def test_plan_memory_is_deterministic() -> None:
    g = transformer_layer()
    assert str(optimize(g, ["fuse", "plan_memory"])) == str(optimize(g, ["fuse", "plan_memory"]))


def test_plan_memory_text_round_trips() -> None:
    g = planned(transformer_layer())
    assert parse(str(g)) == g


def test_plan_memory_names_are_final_after_the_manager_renumbers() -> None:
    g = optimize(transformer_layer(), ["fuse", "plan_memory"])
    values = {v.name for n in g.nodes for v in n.outputs}
    assert set(offsets(g)) <= values and str(g.renumbered()) == str(g)


def _chain() -> Graph:
    b = GraphBuilder("chain")
    x = b.input("x", TensorType((4, 8), float32))
    a = b.exp(x)
    c = b.neg(a)
    return b.finish([b.transpose(b.tanh(c), perm=(1, 0))])


def test_plan_memory_writes_elementwise_results_in_place() -> None:
    got = offsets(planned(_chain()))
    assert got["0"] == got["1"] == got["2"]


def test_plan_memory_no_in_place_while_the_operand_is_still_read() -> None:
    b = GraphBuilder("keep")
    x = b.input("x", TensorType((4, 8), float32))
    a = b.exp(x)
    c = b.neg(a)
    g = b.finish([b.transpose(b.add(a, c), perm=(1, 0))])
    got = offsets(planned(g))
    assert got["0"] != got["1"]
    check_memory_plan(planned(g))


def test_plan_memory_no_in_place_over_a_broadcast_operand_of_equal_bytes() -> None:
    b = GraphBuilder("broadcast")
    x, y = b.input("x", TensorType((8,), float32)), b.input("y", TensorType((4, 8), float32))
    row = b.exp(x)  # f32[8]: 32 bytes, the same as the bool[4,8] result it broadcasts into
    mask = b.lt(row, y)
    assert mask.type == TensorType((4, 8), bool_) and mask.type.nbytes == row.type.nbytes
    g = planned(b.finish([b.where(mask, y, y)]))
    assert offsets(g)["0"] != offsets(g)["1"]
    check_memory_plan(g)


def test_plan_memory_reuses_dead_buffers() -> None:
    b = GraphBuilder("movement")
    h = b.input("x", TensorType((8, 8), float32))
    for _ in range(6):
        h = b.transpose(h, perm=(1, 0))
    g = planned(b.finish([h]))
    plan = g.attributes["memory_plan"]
    assert (plan["arena_bytes"], plan["naive_bytes"]) == (512, 5 * 256)
    check_memory_plan(g)


def test_plan_memory_report_states_arena_and_naive_bytes() -> None:
    report: list = []
    optimize(_chain(), ["plan_memory"], report=report)
    assert report[0]["plan_memory"].notes == ("arena 128 bytes for 3 buffer(s), naive sum 384 bytes (33.3% of it); "
                                              "2 in place",)


def test_plan_memory_graph_without_intermediates() -> None:
    b = GraphBuilder("none")
    x = b.input("x", TensorType((4,), float32))
    plan = planned(b.finish([b.exp(x)])).attributes["memory_plan"]
    assert plan == {"alignment": 64, "arena_bytes": 0, "naive_bytes": 0, "offsets": {}}


PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(random_dags(max_steps=32))
def test_plan_memory_random_dags_have_no_overlap(g: Graph) -> None:
    check_memory_plan(planned(g))


@PROPERTY
@given(random_dags(max_steps=32))
def test_plan_memory_random_fused_dags_have_no_overlap(g: Graph) -> None:
    check_memory_plan(optimize(g, ["fuse", "plan_memory"]))


def _reshaped_exp() -> Graph:
    """%0 = exp x; %1 = reshape %0; %2 = transpose x (allocated while %1 is to be read); %3 = reshape %2;
    %4 = add %3, %1: %0's bytes must outlive its reshape, which is read last of all."""
    b = GraphBuilder("reshaped")
    x = b.input("x", TensorType((4, 8), float32))
    flat = b.reshape(b.exp(x), shape=(32,))
    other = b.reshape(b.transpose(x, perm=(1, 0)), shape=(32,))
    return b.finish([b.exp(b.add(other, flat))])


def test_plan_memory_a_reshape_names_its_operands_storage() -> None:
    g = planned(_reshaped_exp())
    assert [n.op for n in g.nodes] == ["exp", "reshape", "transpose", "reshape", "add", "exp"]
    assert storage_aliases(g) == {"1": "0", "3": "2"}
    got = offsets(g)
    assert set(got) == {"0", "2", "4"}  # no buffer for either reshape
    assert got["0"] != got["2"]  # %0 is live (through %1) when %2 is placed
    assert got["4"] in (got["0"], got["2"])  # the add writes over a dying operand, read through its alias
    check_memory_plan(g)


def test_plan_memory_an_output_reshape_takes_its_operand_into_the_output() -> None:
    """The operand of a returned reshape is computed straight into the output buffer; a second returned reshape of
    it, or a reshape of an input, copies."""
    b = GraphBuilder("returned")
    x = b.input("x", TensorType((4, 8), float32))
    e = b.exp(x)
    inner = b.reshape(e, shape=(8, 4))
    g = planned(b.finish([b.reshape(inner, shape=(32,)), b.reshape(e, shape=(2, 16)), b.reshape(x, shape=(32,))]))
    assert [n.op for n in g.nodes] == ["exp", "reshape", "reshape", "reshape", "reshape"]
    assert storage_aliases(g) == {"0": "2", "1": "2"}
    assert [names_storage(n, storage_aliases(g)) for n in g.nodes] == [False, True, True, False, False]
    assert offsets(g) == {}
    check_memory_plan(g)


def test_plan_memory_in_place_over_storage_waits_for_every_name_of_it() -> None:
    b = GraphBuilder("names")
    x = b.input("x", TensorType((4, 8), float32))
    e = b.exp(x)
    flat = b.reshape(e, shape=(32,))
    first = b.neg(flat)  # elementwise, but %0 is read again, through another alias, by the add
    later = b.reshape(e, shape=(32,))
    g = planned(b.finish([b.transpose(b.reshape(b.add(first, later), shape=(4, 8)), perm=(1, 0))]))
    got = offsets(g)
    assert got["2"] != got["0"] and got["4"] in (got["0"], got["2"])
    check_memory_plan(g)
