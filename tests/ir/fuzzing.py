"""Structured mutation of IR text and the property every mutant must keep, shared by the fuzz tests in the
default suite and the longer run for maintainers (tests/ir/fuzz_ir.py).

A mutation is a list of edits of a printed graph: the parser tests' edits of characters, tokens and lines
(tests/ir/test_parser_errors.py), and typed edits that put another number or name in place of one; inserted
pieces come from the graphs' own tokens and from snippets that probe the lexer, the checks and the size
arithmetic (every op name, extreme and wrapping numbers).
The property (`check_mutant`): the text parses to a verified graph or raises ParseError; a parsed graph prints
and parses back to itself, interprets to the same result as its reparse (the original's result when the mutant
equals the original) or raises a braze error, and, when compiled, runs to the interpreter's result or is refused
with a braze error. No other exception type, no crash, no allocation past the size limit.
"""
from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

import braze
from braze import ir
from braze.ir import BrazeError, Graph, ParseError, interpret, parse
from braze.ir.types import MAX_TENSOR_BYTES_ENV

from .test_parser_errors import EDITS, FUZZ_BASES, SNIPPETS as PARSER_SNIPPETS, VOCABULARY as PARSER_VOCABULARY
from .test_parser_errors import _TOKEN as TOKEN
from .test_parser_errors import _mutate as mutate_text
from .test_printer_parser import CASES, sample_graph

# Numbers that wrap int64 products, exceed the size limit, or defeat Python's int() (more than 4,300 digits).
HOSTILE_NUMBERS = ["4611686018427387905", "4294967296", "2147483648", "1099511627776", "1000000",
                   "9223372036854775807", "-9223372036854775808", "9" * 4400, "0" * 4400 + "1", "nan", "-0.0"]
SNIPPETS = PARSER_SNIPPETS + HOSTILE_NUMBERS
VOCABULARY = sorted(set(PARSER_VOCABULARY) | set(HOSTILE_NUMBERS))
# Typed edits replace one number (or one name) of the text by another, so the mutant stays well-formed text more
# often and reaches the checks behind the parser: kind -> (the tokens it replaces, the pieces it puts instead).
# "every-number" replaces each occurrence of the chosen number, so a dimension changes consistently in all types.
_NUMBER = re.compile(r"-?\d+(?:\.\d*)?(?:e[+-]?\d+)?")
_NUMBERS = HOSTILE_NUMBERS + ["0", "1", "2", "3", "4", "-1", "-2", "64", "0.5", "-2.5", "inf", "1e999"]
TYPED_EDITS = {
    "number": (_NUMBER, _NUMBERS),
    "every-number": (_NUMBER, _NUMBERS),
    "name": (re.compile(r"[A-Za-z_]\w*"), [*ir.op_names(), *(d.name for d in ir.DTYPES), "true", "false", "none"]),
}
# Mutants are fuzzed under a low size limit, so no accepted graph allocates or loops over much memory.
FUZZ_MAX_TENSOR_BYTES = 2 ** 20
# (text, graph, input arrays): the parser tests' hand-written graphs and one graph per registry sample.
BASES = [(text, parse(text), []) for text in FUZZ_BASES] + [
    (str(g), g, arrays) for g, arrays in ((sample_graph(sample, arrays), arrays) for _, sample, arrays in CASES)]

Edit = tuple[str, float, str]


def mutate(text: str, edits: Sequence[Edit]) -> str:
    """Apply (kind, where in [0, 1), piece) edits: typed edits here, the others as the parser tests apply them."""
    for kind, where, piece in edits:
        if kind in TYPED_EDITS:
            text = _replace_typed(text, TYPED_EDITS[kind][0], where, piece, every=kind.startswith("every"))
        else:
            text = mutate_text(text, [(kind, where, piece)])
    return text


def _replace_typed(text: str, pattern: re.Pattern[str], where: float, piece: str, every: bool) -> str:
    tokens = TOKEN.findall(text)
    matching = [i for i, t in enumerate(tokens) if pattern.fullmatch(t)]
    if matching:
        chosen = tokens[matching[int(where * len(matching))]]
        for i in matching if every else [matching[int(where * len(matching))]]:
            tokens[i] = piece if tokens[i] == chosen else tokens[i]
    return "".join(tokens)


@contextlib.contextmanager
def fuzz_size_limit() -> Iterator[None]:
    """Lower BRAZE_MAX_TENSOR_BYTES to FUZZ_MAX_TENSOR_BYTES for the block."""
    before = os.environ.get(MAX_TENSOR_BYTES_ENV)
    os.environ[MAX_TENSOR_BYTES_ENV] = str(FUZZ_MAX_TENSOR_BYTES)
    try:
        yield
    finally:
        if before is None:
            del os.environ[MAX_TENSOR_BYTES_ENV]
        else:
            os.environ[MAX_TENSOR_BYTES_ENV] = before


def inputs_for(graph: Graph, given: Sequence[np.ndarray], seed: int) -> list[np.ndarray]:
    """The given arrays where their types still match the graph's inputs, else random ones (small non-negative
    integers, so index operands are mostly in range)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for k, v in enumerate(graph.inputs):
        if k < len(given) and ir.type_of(given[k]) == v.type:
            arrays.append(given[k])
        elif v.dtype.is_float:
            arrays.append(rng.standard_normal(v.shape).astype(v.dtype.numpy))
        elif v.dtype.kind == "bool":
            arrays.append(rng.random(v.shape) < 0.5)
        else:
            arrays.append(rng.integers(0, 3, v.shape).astype(v.dtype.numpy))
    return arrays


def assert_same_results(got: Sequence[np.ndarray], want: Sequence[np.ndarray], rtol: float = 0.0,
                        atol: float = 0.0) -> None:
    """Equal dtypes, shapes and values (NaN equal to NaN), within the tolerances."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if rtol or atol:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)


def check_mutant(text: str, original: Graph, arrays: Sequence[np.ndarray], *, seed: int = 0,
                 compile: bool = False) -> str:
    """Check the property of the module doc for one mutant; returns its outcome: "parse-error", "run-error",
    "compile-error", "ran" or "compiled". Assertion failures and non-braze exceptions propagate."""
    try:
        graph = parse(text)
    except ParseError as error:
        lines = text.split("\n")
        assert 1 <= error.line <= len(lines) and 1 <= error.column <= len(lines[error.line - 1]) + 1
        return "parse-error"
    ir.verify(graph)
    assert parse(str(graph)) == graph and str(parse(str(graph))) == str(graph)
    inputs = inputs_for(graph, arrays, seed)
    try:
        expected = interpret(graph, inputs)
    except BrazeError:
        return "run-error"
    assert_same_results(interpret(parse(str(graph)), inputs), expected)
    if graph == original:
        assert_same_results(expected, interpret(original, arrays))
    if not compile:
        return "ran"
    return _check_compiled(graph, inputs, expected)


def _check_compiled(graph: Graph, inputs: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> str:
    try:
        compiled = braze.compile(graph)
        got: Any = compiled(*inputs)
    except BrazeError:
        return "compile-error"
    got = got if isinstance(got, tuple) else (got,)
    assert_same_results(got, expected, rtol=1e-3, atol=1e-4)
    return "compiled"
