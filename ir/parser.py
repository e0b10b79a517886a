"""Read IR text (the printer's output) back into a Graph; every problem is a ParseError with line and column."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from .attrs import ArrayAttr
from .errors import BrazeError, ParseError
from .graph import Graph, Loc, Node, Value, sorted_attrs
from .registry import get_op
from .types import TensorType, as_dtype

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r]+|\#[^\n]*)
  | (?P<nl>\n)
  | (?P<arrow>->)
  | (?P<number>-?(?:inf|nan)\b|-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<value>%(?:"(?:[^"\\]|\\.)*"|[A-Za-z0-9_][A-Za-z0-9_.$\-]*))
  | (?P<symbol>@(?:"(?:[^"\\]|\\.)*"|[A-Za-z0-9_][A-Za-z0-9_.$\-]*))
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>[()\[\]{}<>,:=])
""", re.VERBOSE)


@dataclass(frozen=True, slots=True)
class Token:
    kind: str
    text: str
    line: int
    column: int


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    line, line_start, pos = 1, 0, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ParseError(f"unexpected character {text[pos]!r}", line, pos - line_start + 1,
                             _line_text(text, line_start))
        kind = m.lastgroup or ""
        if kind == "nl":
            line, line_start = line + 1, m.end()
        elif kind != "ws":
            tokens.append(Token(kind, m.group(), line, pos - line_start + 1))
        pos = m.end()
    tokens.append(Token("eof", "", line, pos - line_start + 1))
    return tokens


def _line_text(text: str, start: int) -> str:
    end = text.find("\n", start)
    return text[start:] if end < 0 else text[start:end]


def _unquote(name: str) -> str:
    return json.loads(name) if name.startswith('"') else name


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.split("\n")
        self.tokens = tokenize(text)
        self.pos = 0
        self.values: dict[str, Value] = {}

    # --- token helpers ---------------------------------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def fail(self, message: str, tok: Token | None = None) -> NoReturn:
        tok = tok or self.tok
        source = self.lines[tok.line - 1] if 0 < tok.line <= len(self.lines) else ""
        raise ParseError(message, tok.line, tok.column, source)

    def next(self) -> Token:
        tok = self.tok
        self.pos += 1
        return tok

    def at(self, text: str) -> bool:
        return self.tok.text == text and self.tok.kind in ("punct", "ident", "arrow")

    def expect(self, text: str) -> Token:
        if not self.at(text):
            found = self.tok.text or "end of text"
            self.fail(f"expected '{text}', found '{found}'")
        return self.next()

    def expect_kind(self, kind: str, what: str) -> Token:
        if self.tok.kind != kind:
            self.fail(f"expected {what}, found '{self.tok.text or 'end of text'}'")
        return self.next()

    def comma_list(self, close: str, item: Any) -> list[Any]:
        items: list[Any] = []
        if self.at(close):
            return items
        items.append(item())
        while self.at(","):
            self.next()
            items.append(item())
        return items

    # --- grammar ---------------------------------------------------------------------------------------------
    def graph(self) -> Graph:
        self.expect("graph")
        name = _unquote(self.expect_kind("symbol", "a graph name like @main").text[1:])
        self.expect("(")
        inputs = self.comma_list(")", self.input)
        self.expect(")")
        self.expect("->")
        self.expect("(")
        result_types = self.comma_list(")", self.type)
        self.expect(")")
        meta: dict[str, Any] = {}
        if self.at("attributes"):
            self.next()
            meta = self.attr_dict()
        self.expect("{")
        nodes: list[Node] = []
        while not self.at("return"):
            if self.tok.kind == "eof":
                self.fail("missing 'return' before the end of the graph")
            nodes.append(self.node())
        return_tok = self.expect("return")
        outputs = self.comma_list("}", self.use) if self.tok.kind == "value" else []
        self.expect("}")
        if self.tok.kind != "eof":
            self.fail(f"unexpected '{self.tok.text}' after the end of the graph")
        got = [v.type for v in outputs]
        if got != result_types:
            self.fail(f"return types ({', '.join(map(str, got))}) do not match the signature "
                      f"({', '.join(map(str, result_types))})", return_tok)
        return Graph(name, tuple(inputs), tuple(nodes), tuple(outputs), sorted_attrs(meta))

    def define(self, tok: Token, type: TensorType) -> Value:
        name = _unquote(tok.text[1:])
        if name in self.values:
            self.fail(f"value %{name} is defined twice", tok)
        value = Value(name, type)
        self.values[name] = value
        return value

    def input(self) -> Value:
        tok = self.expect_kind("value", "an input like %x")
        self.expect(":")
        return self.define(tok, self.type())

    def use(self) -> Value:
        tok = self.expect_kind("value", "a value like %0")
        name = _unquote(tok.text[1:])
        if name not in self.values:
            self.fail(f"use of undefined value %{name}", tok)
        return self.values[name]

    def type(self) -> TensorType:
        tok = self.expect_kind("ident", "a type like f32[2,3]")
        try:
            dtype = as_dtype(tok.text)
        except BrazeError:
            self.fail(f"unknown element type '{tok.text}'", tok)
        self.expect("[")
        dims = self.comma_list("]", lambda: self.integer("a dimension"))
        self.expect("]")
        if any(d < 0 for d in dims):
            self.fail("dimensions must be non-negative", tok)
        return TensorType(tuple(dims), dtype)

    def integer(self, what: str) -> int:
        tok = self.expect_kind("number", what)
        if not re.fullmatch(r"-?\d+", tok.text):
            self.fail(f"expected an integer for {what}, found '{tok.text}'", tok)
        return int(tok.text)

    def node(self) -> Node:
        first = self.tok
        result_toks = [self.expect_kind("value", "a result like %0 or 'return'")]
        while self.at(","):
            self.next()
            result_toks.append(self.expect_kind("value", "a result name"))
        self.expect("=")
        op_tok = self.expect_kind("ident", "an op name")
        try:
            op = get_op(op_tok.text)
        except BrazeError as exc:
            self.fail(str(exc), op_tok)
        operands = self.comma_list("", self.use) if self.tok.kind == "value" else []
        attr_tok = self.tok
        attrs = self.attr_dict() if self.at("{") else {}
        self.expect(":")
        type_tok = self.tok
        types = [self.type()]
        while self.at(","):
            self.next()
            types.append(self.type())
        loc = self.loc() if self.at("loc") else None
        try:
            checked = op.check_attrs(attrs)
            if op.declares_type:
                op.check_arity(len(operands))
            else:
                inferred = list(op.infer_types([v.type for v in operands], checked))
                if inferred != types:
                    self.fail(f"{op.name} result type(s) declared {', '.join(map(str, types))} but inferred "
                              f"{', '.join(map(str, inferred))}", type_tok)
        except ParseError:
            raise
        except BrazeError as exc:
            self.fail(str(exc), attr_tok if "attribute" in str(exc) else first)
        if len(types) != len(result_toks):
            self.fail(f"{len(result_toks)} result name(s) but {len(types)} type(s)", type_tok)
        outs = tuple(self.define(t, ty) for t, ty in zip(result_toks, types))
        return Node(op.name, tuple(operands), outs, sorted_attrs(checked), loc)

    def loc(self) -> Loc:
        self.expect("loc")
        self.expect("(")
        module = json.loads(self.expect_kind("string", "a module path string").text)
        file = json.loads(self.expect_kind("string", "a file name string").text)
        self.expect(":")
        line = self.integer("a line number")
        self.expect(")")
        return Loc(module, file, line)

    def attr_dict(self) -> dict[str, Any]:
        self.expect("{")

        def entry() -> tuple[str, Any]:
            key = self.expect_kind("ident", "an attribute name")
            self.expect("=")
            return key.text, self.literal()

        entries = self.comma_list("}", entry)
        self.expect("}")
        out: dict[str, Any] = {}
        for key, value in entries:
            if key in out:
                self.fail(f"attribute '{key}' given twice")
            out[key] = value
        return out

    def literal(self) -> Any:
        tok = self.tok
        if tok.kind == "number":
            self.next()
            return int(tok.text) if re.fullmatch(r"-?\d+", tok.text) else float(tok.text)
        if tok.kind == "string":
            self.next()
            return json.loads(tok.text)
        if self.at("["):
            self.next()
            items = self.comma_list("]", self.literal)
            self.expect("]")
            return tuple(items)
        if self.at("{"):
            return self.attr_dict()
        if tok.kind == "ident":
            if tok.text == "array":
                return self.array()
            self.next()
            return {"true": True, "false": False, "none": None}.get(tok.text, tok.text)
        self.fail(f"expected an attribute value, found '{tok.text or 'end of text'}'")

    def array(self) -> ArrayAttr:
        self.expect("array")
        self.expect("<")
        type_tok = self.tok
        type = self.type()
        self.expect(">")
        self.expect("[")
        items = self.comma_list("]", self.literal)
        self.expect("]")
        if len(items) != type.size:
            self.fail(f"array of type {type} needs {type.size} values, found {len(items)}", type_tok)
        try:
            data = np.array(items, dtype=type.dtype.numpy).reshape(type.shape)
        except (TypeError, ValueError) as exc:
            self.fail(f"bad array values for {type}: {exc}", type_tok)
        return ArrayAttr(data)


def parse(text: str) -> Graph:
    """Parse IR text into a verified Graph (without weights)."""
    graph = _Parser(text).graph()
    from .verify import verify
    verify(graph)
    return graph
