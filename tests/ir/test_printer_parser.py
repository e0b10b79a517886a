"""Printer and parser: every registered op, leaves, constants, attributes and provenance round-trip through text."""
from __future__ import annotations

import math

import numpy as np
import pytest

from braze import ir
from braze.ir import DTYPES, GraphBuilder, Loc, TensorType, float32, float64, interpret, parse
from braze.ir.evaluate import evaluate

from .samples import Sample, all_samples

LEAVES = ir.registry.leaf_ops()


def operand_names(op: ir.OpDef, count: int) -> list[str]:
    """Input names after the op's operand names (x, y; xs0, xs1 for a variadic operand)."""
    names = []
    for i in range(count):
        if i < len(op.operands) and not op.operands[i].startswith("*"):
            names.append(op.operands[i].rstrip("?"))
        else:
            names.append(f"{op.operands[-1].lstrip('*')}{i - len(op.operands) + 1}")
    return names


def sample_graph(sample: Sample, arrays: list[np.ndarray]) -> ir.Graph:
    """A graph whose inputs are the sample's operands and whose one node applies the op with the sample's attrs."""
    op = ir.get_op(sample.op)
    b = GraphBuilder(sample.op)
    inputs = [b.input(n, ir.type_of(a)) for n, a in zip(operand_names(op, len(arrays)), arrays)]
    return b.finish(list(b.add_node(sample.op, inputs, sample.attrs)))


def _float32(arrays: list[np.ndarray]) -> list[np.ndarray]:
    return [a.astype(np.float32) if a.dtype == np.float64 else a for a in arrays]


def sample_cases() -> list[tuple[str, Sample, list[np.ndarray]]]:
    """Each sample as given (float64) and, when it has float64 operands, cast to float32."""
    cases: list[tuple[str, Sample, list[np.ndarray]]] = []
    seen: dict[str, int] = {}
    for sample in all_samples():
        arrays = [np.asarray(a) for a in sample.args]
        variants = [("", arrays)]
        if any(a.dtype == np.float64 for a in arrays):
            variants.append(("-f32", _float32(arrays)))
        for suffix, variant in variants:
            case_id = sample.id + suffix
            count = seen.get(case_id, 0)
            seen[case_id] = count + 1
            cases.append((case_id if count == 0 else f"{case_id}#{count}", sample, variant))
    return cases


CASES = sample_cases()
CASE_IDS = [c[0] for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_sample_graph_text_round_trips(case: tuple[str, Sample, list[np.ndarray]]) -> None:
    g = sample_graph(case[1], case[2])
    assert str(parse(str(g))) == str(g)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_sample_graph_parses_to_an_equal_graph(case: tuple[str, Sample, list[np.ndarray]]) -> None:
    g = sample_graph(case[1], case[2])
    assert parse(str(g)) == g


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_parsed_sample_graph_interprets_like_the_reference(case: tuple[str, Sample, list[np.ndarray]]) -> None:
    _, sample, arrays = case
    got = interpret(parse(str(sample_graph(sample, arrays))), arrays)
    want = evaluate(sample.op, arrays, sample.attrs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_round_trip_cases_cover_every_registered_op() -> None:
    covered = {sample.op for _, sample, _ in CASES}
    assert sorted(set(ir.op_names()) - covered - LEAVES) == []


# --- the text itself ----------------------------------------------------------------------------------------------

MLP_TEXT = """\
graph @mlp(%x: f32[4,8]) -> (f32[4,16]) {
  %fc.weight = param {buffer=false, id=3, path="fc.weight", trainable=true} : f32[16,8]
  %0 = transpose %fc.weight {perm=[1, 0]} : f32[8,16]
  %1 = matmul %x, %0 : f32[4,16]
  %2 = relu %1 : f32[4,16]
  return %2
}
"""


def test_printer_text_is_stable() -> None:
    b = GraphBuilder("mlp")
    x = b.input("x", TensorType((4, 8), float32))
    w = b.param("fc.weight", TensorType((16, 8), float32), id=3)
    assert str(b.finish([b.relu(b.matmul(x, b.transpose(w, perm=(1, 0))))])) == MLP_TEXT


def test_parser_ignores_comments_and_blank_lines() -> None:
    text = "# an MLP\n\n" + MLP_TEXT.replace("{\n", "{  # body\n\n", 1).replace("  return", "  # done\n  return")
    assert parse(text) == parse(MLP_TEXT)


# --- leaves -------------------------------------------------------------------------------------------------------

ODD_PATHS = ["encoder.0.fc1.weight", "layer name with spaces", 'quo"te', "back\\slash", "ünï.cödé", "0", "-lead",
             "tab\there", ""]


def _param_graph() -> ir.Graph:
    b = GraphBuilder("params")
    x = b.input("x", TensorType((2,), float32))
    acc = x
    for i, path in enumerate(ODD_PATHS):
        w = b.param(path, TensorType((2,), float32), id=100 + i, trainable=i % 2 == 0, buffer=i % 3 == 0)
        acc = b.add(acc, w)
    return b.finish([acc])


def test_param_leaves_round_trip() -> None:
    g = _param_graph()
    assert parse(str(g)) == g and str(parse(str(g))) == str(g)


def test_param_leaves_keep_path_id_and_flags() -> None:
    g = _param_graph()
    assert [(p.path, p.id, p.trainable, p.buffer) for p in parse(str(g)).params()] == \
        [(p.path, p.id, p.trainable, p.buffer) for p in g.params()]


def test_parsed_param_graph_interprets_with_given_params() -> None:
    weights = {p: np.full(2, i, np.float32) for i, p in enumerate(ODD_PATHS)}
    (got,) = interpret(parse(str(_param_graph())), [np.ones(2, np.float32)], params=weights)
    np.testing.assert_array_equal(got, np.full(2, 1 + sum(range(len(ODD_PATHS))), np.float32))


def _flag_graph() -> ir.Graph:
    b = GraphBuilder("flags")
    x = b.input("x", TensorType((3,), float64))
    on = b.flag("encoder.training", id=7, value=True)
    off = b.flag("decoder.drop.training", id=8, value=False)
    return b.finish([b.where(on, x, b.neg(x)), b.where(off, x, b.neg(x))])


def test_flag_leaves_round_trip() -> None:
    g = _flag_graph()
    assert parse(str(g)) == g and str(parse(str(g))) == str(g)


def test_parsed_flag_leaves_keep_their_values() -> None:
    assert [(f.path, f.id, f.value) for f in parse(str(_flag_graph())).flags()] == \
        [("encoder.training", 7, True), ("decoder.drop.training", 8, False)]


# --- constants ----------------------------------------------------------------------------------------------------

def _special_values(dtype: ir.DType) -> np.ndarray:
    np_type = dtype.numpy
    if dtype.is_float:
        info = np.finfo(np_type)
        return np.array([0.0, -0.0, 1.5, -2.25, 0.1, 1 / 3, np.inf, -np.inf, np.nan, -np.nan, info.max, info.min,
                         info.tiny, info.smallest_subnormal, info.eps, 1e10], dtype=np_type)
    if dtype.kind == "bool":
        return np.array([True, False, False, True])
    info = np.iinfo(np_type)
    return np.array([0, 1, info.max, info.min, info.max - 1, 7], dtype=np_type)


@pytest.mark.parametrize("dtype", DTYPES, ids=[d.name for d in DTYPES])
def test_constants_of_every_dtype_round_trip(dtype: ir.DType) -> None:
    values = _special_values(dtype)
    b = GraphBuilder("consts")
    outs = [b.constant(values), b.constant(values[:2].reshape(2, 1)), b.constant(values[3]),
            b.constant(values[:0]), b.constant(np.zeros((2, 0), dtype.numpy))]
    g = b.finish(outs)
    assert parse(str(g)) == g and str(parse(str(g))) == str(g)


@pytest.mark.parametrize("dtype", [float32, float64], ids=["f32", "f64"])
def test_constant_values_survive_bit_for_bit(dtype: ir.DType) -> None:
    values = _special_values(dtype)
    b = GraphBuilder("consts")
    (got,) = interpret(parse(str(b.finish([b.constant(values)]))), [])
    assert got.tobytes() == values.tobytes()


def test_float_attributes_with_special_values_round_trip() -> None:
    b = GraphBuilder("clamps")
    x = b.input("x", TensorType((3,), float32))
    outs = [b.clamp(x, min=lo, max=hi) for lo, hi in [(-math.inf, math.inf), (math.nan, None), (-0.0, 1e-300)]]
    g = b.finish(outs)
    assert parse(str(g)) == g and str(parse(str(g))) == str(g)


# --- multi-result nodes -------------------------------------------------------------------------------------------

MULTI = [c for c in CASES if ir.get_op(c[1].op).num_results > 1]


def _multi_result_graph(sample: Sample, arrays: list[np.ndarray]) -> ir.Graph:
    """Uses results out of order and feeds one of them to another node."""
    op = ir.get_op(sample.op)
    b = GraphBuilder("multi")
    inputs = [b.input(n, ir.type_of(a)) for n, a in zip(operand_names(op, len(arrays)), arrays)]
    outs = b.add_node(sample.op, inputs, sample.attrs, names=[f"r{i}" for i in range(op.num_results)])
    return b.finish([outs[-1], b.neg(outs[0]), outs[0]])


@pytest.mark.skipif(not MULTI, reason="no multi-result op is registered")
def test_multi_result_nodes_round_trip() -> None:
    for _, sample, arrays in MULTI:
        g = _multi_result_graph(sample, arrays)
        assert parse(str(g)) == g and str(parse(str(g))) == str(g)


@pytest.mark.skipif(not MULTI, reason="no multi-result op is registered")
def test_multi_result_nodes_interpret_after_parsing() -> None:
    _, sample, arrays = MULTI[0]
    want = evaluate(sample.op, arrays, sample.attrs)
    got = interpret(parse(str(_multi_result_graph(sample, arrays))), arrays)
    np.testing.assert_array_equal(got[0], want[-1])
    np.testing.assert_array_equal(got[1], -want[0])


# --- graph attributes, provenance, signatures ---------------------------------------------------------------------

META = {"source": "models/mlp.py", "passes": ["cse", "dce"], "opt_level": 2, "scale": 0.5, "limit": -math.inf,
        "strict": True, "note": None, "nested": {"a": 1, "b": [1.5, "x", False]}, "braze.version": "0.1",
        "odd key": "v", "nan": "a key that reads like a number", "empty": []}


def _meta_graph() -> ir.Graph:
    b = GraphBuilder("with_meta")
    x = b.input("x", TensorType((2,), float32))
    return b.finish([b.exp(x)], attributes=META)


def test_graph_attributes_round_trip() -> None:
    g = _meta_graph()
    assert parse(str(g)) == g and str(parse(str(g))) == str(g)


def test_graph_attributes_parse_to_their_values() -> None:
    attrs = parse(str(_meta_graph())).attributes
    assert attrs["passes"] == ("cse", "dce") and attrs["nested"] == {"a": 1, "b": (1.5, "x", False)}
    assert attrs["limit"] == -math.inf and attrs["note"] is None and attrs["odd key"] == "v"


LOCS = [Loc("encoder.0.attn", "models/attention.py", 41), None, Loc('odd "module"', "ünï.py", 7), Loc()]


def _loc_graph() -> ir.Graph:
    b = GraphBuilder("located")
    value = b.input("x", TensorType((2, 3), float32))
    for loc in LOCS:
        b.loc = loc
        value = b.tanh(value)
    b.loc = Loc("head", "models/head.py", 99)
    w = b.param("head.weight", TensorType((3,), float32), id=1)
    return b.finish([b.mul(value, w)])


def test_provenance_dump_round_trips_and_keeps_locs() -> None:
    g = _loc_graph()
    parsed = parse(g.dump(provenance=True))
    assert [n.loc for n in parsed.nodes] == [n.loc for n in g.nodes]
    assert parsed.dump(provenance=True) == g.dump(provenance=True) and parsed == g


def test_plain_text_omits_provenance() -> None:
    g = _loc_graph()
    assert "loc(" not in str(g) and all(n.loc is None for n in parse(str(g)).nodes)


def test_zero_input_graph_round_trips() -> None:
    b = GraphBuilder("consts_only")
    c = b.constant(np.arange(6, dtype=np.int32).reshape(2, 3))
    g = b.finish([b.sum(c, axes=(1,))])
    assert parse(str(g)) == g and str(parse(str(g))) == str(g)
    np.testing.assert_array_equal(interpret(parse(str(g)), [])[0], np.array([3, 12], np.int32))


def test_zero_output_graph_round_trips() -> None:
    b = GraphBuilder("nothing")
    b.input("x", TensorType((1,), float32))
    g = b.finish([])
    assert parse(str(g)) == g and str(parse(str(g))) == str(g)


def test_quoted_graph_and_value_names_round_trip() -> None:
    b = GraphBuilder('graph "name" with spaces')
    x = b.input("input x", TensorType((2,), float32))
    y = b.add_node("neg", [x], names=["1st-result.a$b"])[0]
    z = b.add_node("exp", [y], names=["%pct"])[0]
    g = b.finish([z, x])
    assert parse(str(g)) == g and str(parse(str(g))) == str(g)


def test_output_may_repeat_a_value_and_return_inputs() -> None:
    b = GraphBuilder("passthrough")
    x = b.input("x", TensorType((2,), float32))
    y = b.neg(x)
    g = b.finish([x, y, y])
    assert parse(str(g)) == g and str(parse(str(g))) == str(g)
