"""Malformed IR text: a ParseError at the right line and column, naming the problem; fuzzed text never crashes."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from braze import ir
from braze.ir import GraphBuilder, ParseError, TensorType, float32, parse
from braze.ir.printer import format_attrs

from .test_printer_parser import CASES, MLP_TEXT, sample_graph

BASE = """\
graph @g(%x: f32[2,3], %i: i64[2]) -> (f32[2,3]) {
  %w = param {buffer=false, id=1, path="w", trainable=true} : f32[3]
  %0 = add %x, %w : f32[2,3]
  %1 = clamp %0 {max=none, min=0.0} : f32[2,3]
  return %1
}
"""
LINES = BASE.split("\n")
PARAM, ADD, CLAMP, RETURN = LINES[1], LINES[2], LINES[3], LINES[4]


def _swap(line: str, old: str, new: str) -> str:
    assert line.count(old) == 1, (line, old)
    return line.replace(old, new)


def _with_line(index: int, text: str) -> str:
    """BASE with line `index` (1-based) replaced by `text`."""
    lines = list(LINES)
    lines[index - 1] = text
    return "\n".join(lines)


def _insert_line(index: int, text: str) -> str:
    lines = list(LINES)
    lines.insert(index - 1, text)
    return "\n".join(lines)


# (id, text, message pattern, line, marker): the error is expected at the first occurrence of `marker` in that line.
ERRORS = [
    ("unknown-op", _with_line(3, _swap(ADD, "add", "addd")), r"unknown op 'addd'; did you mean add", 3, "addd"),
    ("undefined-value", _with_line(3, _swap(ADD, "%w", "%v")), r"use of undefined value %v", 3, "%v"),
    ("defined-twice", _with_line(3, _swap(ADD, "%0", "%x")), r"value %x is defined twice", 3, "%x"),
    ("defined-twice-input", BASE.replace("%i: i64", "%x: i64"), r"value %x is defined twice", 1, "%x: i64"),
    ("unknown-element-type", _with_line(2, _swap(PARAM, "f32[3]", "f33[3]")), r"unknown element type 'f33'", 2, "f33"),
    ("dtype-alias", _with_line(2, _swap(PARAM, "f32[3]", "float32[3]")), r"unknown element type 'float32'", 2,
     "float32"),
    ("bad-dimension", _with_line(2, _swap(PARAM, "f32[3]", "f32[3.5]")), r"expected an integer for a dimension, "
     r"found '3.5'", 2, "3.5"),
    ("negative-dimension", _with_line(2, _swap(PARAM, "f32[3]", "f32[-3]")), r"dimensions must be non-negative", 2,
     "f32[-3]"),
    ("unclosed-type", _with_line(2, _swap(PARAM, "f32[3]", "f32[3")), r"expected '\]', found '%0'", 3, "%0"),
    ("type-disagrees", _with_line(3, _swap(ADD, ": f32[2,3]", ": f32[3,2]")),
     r"add result type\(s\) declared f32\[3,2\] but inferred f32\[2,3\]", 3, "f32[3,2]"),
    ("operand-count", _with_line(3, _swap(ADD, "%x, %w", "%x")), r"add: expects 2 operand\(s\) \(x, y\), got 1", 3,
     "%0"),
    ("operand-shapes", _with_line(3, _swap(ADD, "%x, %w", "%x, %i")), r"add: .*", 3, "%0"),
    ("unknown-attribute", _with_line(4, _swap(CLAMP, "min=0.0}", "min=0.0, mode=1}")),
     r"clamp: unknown attribute\(s\) \['mode'\]", 4, "{"),
    ("wrong-attribute-kind", _with_line(4, _swap(CLAMP, "min=0.0", 'min="zero"')),
     r"clamp: attribute 'min' expects float, got 'zero'", 4, "{"),
    ("attribute-twice", _with_line(4, _swap(CLAMP, "min=0.0}", "min=0.0, min=1.0}")), r"attribute 'min' given twice",
     4, "min=1.0"),
    ("missing-attribute-value", _with_line(4, _swap(CLAMP, "min=0.0", "min=")), r"expected an attribute value, "
     r"found '}'", 4, "}"),
    ("attribute-nesting", _with_line(4, _swap(CLAMP, "min=0.0", "min=" + "[" * 100 + "]" * 100)),
     r"nested deeper than 64 levels", 4, "[" * 36 + "]"),
    ("integer-too-large", _with_line(2, _swap(PARAM, "id=1", "id=99999999999999999999")),
     r"integer 99999999999999999999 does not fit in 64 bits", 2, "999"),
    ("missing-return", "\n".join(LINES[:4] + LINES[5:]), r"missing 'return'", 5, "}"),
    ("missing-return-at-end", "\n".join(LINES[:4]), r"missing 'return'", 4, ""),
    ("trailing-garbage", BASE + "extra\n", r"unexpected 'extra' after the end of the graph", 7, "extra"),
    ("second-graph", BASE + BASE, r"unexpected 'graph' after the end of the graph", 7, "graph"),
    ("unterminated-string", _with_line(2, _swap(PARAM, 'path="w"', 'path="w')), r"unterminated string", 2, '"w'),
    ("unterminated-name", _with_line(3, _swap(ADD, "%0 =", '%"0 =')), r"unterminated string", 3, '%"'),
    ("bad-escape", _with_line(2, _swap(PARAM, 'path="w"', r'path="w\q"')), r"bad string", 2, '"w'),
    ("bad-character", _with_line(3, _swap(ADD, "%x, %w", "%x; %w")), r"unexpected character ';'", 3, ";"),
    ("bad-character-before-quote", _with_line(3, _swap(ADD, "%x, %w", '%x, ;"w"')), r"unexpected character ';'", 3,
     ";"),
    ("missing-colon", _with_line(3, _swap(ADD, " : f32", " f32")), r"expected ':', found 'f32'", 3, "f32"),
    ("too-many-result-names", _with_line(3, _swap(ADD, "%0 =", "%0, %9 =")), r"2 result name\(s\) but 1 type\(s\)",
     3, "f32"),
    ("too-many-result-types", _with_line(3, ADD + ", f32[2,3]"), r"1 result name\(s\) but 2 type\(s\)", 3, "f32"),
    ("result-count-disagrees-with-op", _with_line(3, "  %0, %5 = add %x, %w : f32[2,3], f32[2,3]"),
     r"add has 1 result\(s\), 2 given", 3, "%0"),
    ("array-too-long", _with_line(3, "  %0 = constant {value=array<f32[2]>[1.0, 2.0, 3.0]} : f32[2]"),
     r"array of type f32\[2\] needs 2 values, found 3", 3, "f32[2]>"),
    ("array-too-short", _with_line(3, "  %0 = constant {value=array<i8[2,2]>[1, 2, 3]} : i8[2,2]"),
     r"array of type i8\[2,2\] needs 4 values, found 3", 3, "i8[2,2]>"),
    ("array-element-kind", _with_line(3, "  %0 = constant {value=array<i32[2]>[1, 2.5]} : i32[2]"),
     r"elements of a i32 array must be integers, found '2.5'", 3, "2.5"),
    ("array-bool-element", _with_line(3, "  %0 = constant {value=array<bool[2]>[true, 1]} : bool[2]"),
     r"elements of a bool array must be true or false, found '1'", 3, "1]"),
    ("array-out-of-range", _with_line(3, "  %0 = constant {value=array<u8[1]>[256]} : u8[1]"),
     r"bad array values for u8\[1\]", 3, "u8[1]>"),
    ("return-types", BASE.replace("-> (f32[2,3])", "-> (f32[2,3], f32[3])"),
     r"return types \(f32\[2,3\]\) do not match the signature \(f32\[2,3\], f32\[3\]\)", 5, "return"),
    ("return-undefined", BASE.replace("return %1", "return %7"), r"use of undefined value %7", 5, "%7"),
    ("flag-not-bool", _insert_line(3, '  %t = flag {id=2, path="t", value=true} : f32[]'),
     r"a flag has type bool\[\], not f32\[\]", 3, "%t"),
    ("duplicate-param-path", _insert_line(3, '  %v = param {id=2, path="w"} : f32[3]'), r"param path 'w' appears twice",
     3, "%v"),
    ("leaf-with-operands", _insert_line(3, '  %v = param %x {id=2, path="v"} : f32[3]'), r"param: expects 0 operand", 3,
     "%v"),
    ("empty-text", "", r"expected 'graph', found 'end of text'", 1, ""),
    ("not-a-graph", "func @g() -> () {\n  return\n}\n", r"expected 'graph', found 'func'", 1, "func"),
    ("graph-name", BASE.replace("@g", "g", 1), r"expected a graph name like @main, found 'g'", 1, "g("),
]


def _expected_column(text: str, line: int, marker: str) -> int:
    source = text.split("\n")[line - 1] if line <= len(text.split("\n")) else ""
    return len(source) + 1 if marker == "" else source.index(marker) + 1


@pytest.mark.parametrize("case", ERRORS, ids=[c[0] for c in ERRORS])
def test_parse_error_names_the_problem(case: tuple[str, str, str, int, str]) -> None:
    _, text, pattern, _, _ = case
    with pytest.raises(ParseError, match=pattern):
        parse(text)


@pytest.mark.parametrize("case", ERRORS, ids=[c[0] for c in ERRORS])
def test_parse_error_points_at_line_and_column(case: tuple[str, str, str, int, str]) -> None:
    _, text, _, line, marker = case
    with pytest.raises(ParseError) as info:
        parse(text)
    assert (info.value.line, info.value.column) == (line, _expected_column(text, line, marker))


@pytest.mark.parametrize("case", ERRORS, ids=[c[0] for c in ERRORS])
def test_parse_error_message_shows_the_line_and_a_caret(case: tuple[str, str, str, int, str]) -> None:
    _, text, _, line, _ = case
    with pytest.raises(ParseError) as info:
        parse(text)
    error = info.value
    assert str(error).startswith(f"line {error.line}, column {error.column}: ")
    if error.source_line:
        assert str(error).endswith(f"\n  {error.source_line}\n  {' ' * (error.column - 1)}^")


def test_the_unmutated_base_text_parses() -> None:
    assert str(parse(BASE)) == BASE


# --- fuzzing ------------------------------------------------------------------------------------------------------

def _fuzz_bases() -> list[str]:
    b = GraphBuilder("leaves")
    x = b.input("x", TensorType((2,), float32))
    w = b.param("enc.0.w", TensorType((2,), float32), id=4, buffer=True)
    t = b.flag("enc.training", id=5, value=False)
    c = b.constant(np.array([np.inf, -np.nan], np.float32))
    b.loc = ir.Loc("enc.0", "models/enc.py", 12)
    leaves = b.finish([b.where(t, b.add(x, w), c)], attributes={"passes": ["dce"], "note": "x"})
    return [BASE, MLP_TEXT, leaves.dump(provenance=True)]


FUZZ_BASES = _fuzz_bases()
SAMPLE_TEXTS = [str(sample_graph(sample, arrays)) for _, sample, arrays in CASES]
_TOKEN = re.compile(r'[%@]?"[^"\n]*"|%[\w.$-]+|[A-Za-z_]\w*|-?\d+(?:\.\d*)?(?:e[+-]?\d+)?|[ \t]+|\n|.')
# Pieces that probe the lexer and the checks: odd characters, escapes, extreme numbers, every op name, types.
SNIPPETS = [*'%@"{}[]()<>,:=-.#\\\n\t 0123456789aefilnrtx_', '\\q', '\\"', '"', "[" * 70, "99999999999999999999",
            "-1", "1e999", "-nan", "inf", "f32[]", "bool[]", "i64[2]", "f64[2,3]", "%0", "%x", "%w", "%1", "%\"q\"",
            "true", "none", "array<f32[1]>[1.0]", "{p=1}", "loc(\"m\" \"f\":1)", "param", "flag", "return",
            *ir.op_names()]
VOCABULARY = sorted({t for text in FUZZ_BASES + SAMPLE_TEXTS[:40] for t in _TOKEN.findall(text)} | set(SNIPPETS))
EDITS = ["delete", "insert", "replace", "token", "splice", "drop-token", "dup-token", "dup-line", "drop-line"]
mutation = st.tuples(st.sampled_from(EDITS),
                     st.floats(0, 1, exclude_max=True),
                     st.sampled_from(SNIPPETS) | st.sampled_from(VOCABULARY) | st.characters())


def _mutate(text: str, edits: list[tuple[str, float, str]]) -> str:
    """Character edits (delete, insert, replace), token edits (replace, drop, duplicate) and line edits."""
    for kind, where, piece in edits:
        if kind in ("delete", "insert", "replace"):
            pos = int(where * (len(text) + 1))
            keep = pos + (kind != "insert")
            text = text[:pos] + ("" if kind == "delete" else piece) + text[keep:]
            continue
        parts = text.split("\n") if kind.endswith("line") else _TOKEN.findall(text)
        parts = parts or [""]
        k = int(where * len(parts))
        half = len(parts[k]) // 2
        parts[k] = {"token": piece, "splice": parts[k][:half] + piece + parts[k][half:], "drop-token": "",
                    "dup-token": parts[k] * 2, "drop-line": None, "dup-line": parts[k] + "\n" + parts[k]}[kind]
        text = ("\n" if kind.endswith("line") else "").join(p for p in parts if p is not None)
    return text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(FUZZ_BASES) | st.sampled_from(SAMPLE_TEXTS),
       edits=st.lists(mutation, min_size=1, max_size=3))
def test_mutated_text_parses_to_a_verified_graph_or_raises_parse_error(base: str,
                                                                        edits: list[tuple[str, float, str]]) -> None:
    text = _mutate(base, edits)
    try:
        graph = parse(text)
    except ParseError as error:
        assert_located(error, text)
    else:
        ir.verify(graph)
        assert parse(str(graph)) == graph and str(parse(str(graph))) == str(graph)


def assert_located(error: ParseError, text: str, line: int = 1, column: int = 1) -> None:
    """The error points at a place in `text`, no earlier than (line, column): where it first differs from valid IR."""
    lines = text.split("\n")
    assert 1 <= error.line <= len(lines) and 1 <= error.column <= len(lines[error.line - 1]) + 1, error
    assert (error.line, error.column) >= (line, column), error


STRING_SLOTS = {
    "graph-name": 'graph @"{s}"() -> () {{\n  return\n}}\n',
    "input-name": 'graph @g(%"{s}": f32[1]) -> (f32[1]) {{\n  return %"{s}"\n}}\n',
    "param-path": 'graph @g() -> (f32[1]) {{\n  %w = param {{id=1, path="{s}"}} : f32[1]\n  return %w\n}}\n',
    "loc": 'graph @g(%x: f32[1]) -> (f32[1]) {{\n  %0 = neg %x : f32[1]  loc("{s}" "f.py":3)\n  return %0\n}}\n',
    "meta-value": 'graph @g() -> () attributes {{note="{s}"}} {{\n  return\n}}\n',
    "meta-key": 'graph @g() -> () attributes {{"{s}"=1}} {{\n  return\n}}\n',
}
string_content = st.text(st.characters() | st.sampled_from(list('\\"/ubfnrtx0\n')), max_size=8)


@settings(max_examples=300, deadline=None)
@given(slot=st.sampled_from(sorted(STRING_SLOTS)), content=string_content)
def test_any_string_literal_parses_or_raises_parse_error(slot: str, content: str) -> None:
    text = STRING_SLOTS[slot].format(s=content)
    try:
        graph = parse(text)
    except ParseError as error:  # the rest of the text is valid, so the error points at the literal's token or later
        before = STRING_SLOTS[slot].format(s="\0").split("\0")[0].split("\n")
        assert_located(error, text, len(before), len(before[-1]) - 1)  # the token starts at @"/%" or at the quote
    else:
        assert parse(graph.dump(provenance=True)) == graph and str(parse(str(graph))) == str(graph)


_ints = st.integers(-3, 5) | st.integers(-2 ** 63, 2 ** 63 - 1)
_scalars = (_ints | st.floats() | st.booleans() | st.none() | st.text(max_size=4)
            | st.sampled_from([d.name for d in ir.DTYPES] + ["tanh", "none", "sum", "mean"]))
attribute_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4).map(tuple), max_leaves=6)
WITH_ATTRS = [(sample, arrays) for _, sample, arrays in CASES if ir.get_op(sample.op).attrs]


@settings(max_examples=300, deadline=None)
@given(case=st.sampled_from(WITH_ATTRS), data=st.data())
def test_any_attribute_value_parses_or_raises_parse_error(case: tuple, data: st.DataObject) -> None:
    """Every op with attributes: a random value for one of them is accepted or rejected with a ParseError."""
    graph = sample_graph(*case)
    node = graph.nodes[-1]
    attrs = dict(node.attrs)
    attrs[data.draw(st.sampled_from(sorted(attrs)), label="name")] = data.draw(attribute_values, label="value")
    marker = f" {format_attrs(node.attrs)} :"
    text = str(graph).replace(marker, f" {format_attrs(tuple(sorted(attrs.items())))} :")
    try:
        parsed = parse(text)
    except ParseError as error:  # only the node's line changed, so the error points there or later
        assert_located(error, text, next(k for k, line in enumerate(str(graph).split("\n"), 1) if marker in line))
    else:
        assert parse(str(parsed)) == parsed


def test_parse_without_verify_skips_only_the_verifier() -> None:
    text = _insert_line(3, '  %v = param {id=2, path="w"} : f32[3]')
    graph = parse(text, verify=False)  # the duplicate path is the verifier's rule
    assert [n.attr.get("path") for n in graph.nodes if n.op == "param"].count("w") == 2
    with pytest.raises(ParseError, match=r"use of undefined value %7"):
        parse(BASE.replace("return %1", "return %7"), verify=False)
