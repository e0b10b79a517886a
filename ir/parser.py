"""Read IR text (the printer's output) back into a Graph; every problem is a ParseError with line and column."""
from __future__ import annotations

import json
import re
from typing import Any, NamedTuple, NoReturn

import numpy as np

from .attrs import ArrayAttr
from .errors import BrazeError, ParseError, VerifyError
from .graph import Attributes, Graph, Loc, Node, Value, sorted_attrs
from .registry import get_op
from .types import DTYPES, DType, TensorType

_SPACE = r"(?:[ \t\r\n]|\#[^\n]*)*"  # blanks and comments, skipped before each token
_TOKEN = re.compile(_SPACE + r"""(?:
    (?P<punct>[()\[\]{}<>,:=])
  | (?P<value>%(?:"(?:[^"\\\n]|\\[^\n])*"|[A-Za-z0-9_][A-Za-z0-9_.$\-]*))
  | (?P<number>-?(?:inf|nan)\b|-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<arrow>->)
  | (?P<symbol>@(?:"(?:[^"\\\n]|\\[^\n])*"|[A-Za-z0-9_][A-Za-z0-9_.$\-]*))
  | (?P<string>"(?:[^"\\\n]|\\[^\n])*")
)""", re.VERBOSE)
_BLANKS = re.compile(_SPACE)


class Token(NamedTuple):
    kind: str
    text: str
    offset: int  # where it starts in the text (line and column are worked out for an error only)


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    append = tokens.append
    pos, match = 0, _TOKEN.match  # match, never search: text no token matches is an error right there
    while (m := match(text, pos)) is not None:
        kind = m.lastgroup
        append(Token(kind, m.group(kind), m.start(kind)))  # type: ignore[arg-type]
        pos = m.end()
    pos = _BLANKS.match(text, pos).end()  # type: ignore[union-attr]
    if pos < len(text):
        quoted = text[pos] == '"' or text[pos:pos + 2] in ('%"', '@"')
        problem = "unterminated string" if quoted else f"unexpected character {text[pos]!r}"
        raise ParseError(problem, *position(text, pos))
    append(Token("eof", "", pos))
    return tokens


def position(text: str, offset: int) -> tuple[int, int, str]:
    """The line and column (from 1) of `offset` in `text`, and that line's text."""
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    return text.count("\n", 0, offset) + 1, offset - start + 1, text[start:] if end < 0 else text[start:end]


# Nested attribute values deeper than this are rejected (instead of exhausting Python's stack).
_MAX_NESTING = 64
# Dimensions and attribute integers must fit a signed 64-bit integer.
_INT64_MAX = 2 ** 63 - 1
_INT64_DIGITS = len(str(_INT64_MAX))
_IR_DTYPES = {d.name: d for d in DTYPES}
_INTEGER = re.compile(r"-?\d+")
_WORD_KINDS = ("punct", "ident", "arrow")  # the kinds of the tokens `at` and `expect` name by their text


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.pos = 0
        self.values: dict[str, Value] = {}
        self.node_toks: list[Token] = []  # the first token of each node, to place verifier errors
        self.return_tok = self.tok
        self.depth = 0

    # --- token helpers ---------------------------------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def error(self, message: str, tok: Token | None = None) -> ParseError:
        tok = tok or self.tok
        return ParseError(message, *position(self.text, tok.offset))

    def fail(self, message: str, tok: Token | None = None) -> NoReturn:
        raise self.error(message, tok)

    def next(self) -> Token:
        tok = self.tokens[self.pos]
        self.pos += 1
        return tok

    def at(self, text: str) -> bool:
        tok = self.tokens[self.pos]
        return tok.text == text and tok.kind in _WORD_KINDS

    def expect(self, text: str) -> Token:
        tok = self.tokens[self.pos]
        if tok.text != text or tok.kind not in _WORD_KINDS:
            self.fail(f"expected '{text}', found '{tok.text or 'end of text'}'")
        self.pos += 1
        return tok

    def expect_kind(self, kind: str, what: str) -> Token:
        tok = self.tokens[self.pos]
        if tok.kind != kind:
            self.fail(f"expected {what}, found '{tok.text or 'end of text'}'")
        self.pos += 1
        return tok

    def string(self, tok: Token, quoted: str) -> str:
        """The text of a JSON-quoted string; a bad escape is a ParseError at `tok`."""
        try:
            return json.loads(quoted)
        except ValueError as exc:
            self.fail(f"bad string {quoted}: {exc}", tok)

    def unquote(self, tok: Token) -> str:
        """The name of a %value or @symbol token, quoted or bare."""
        name = tok.text[1:]
        return self.string(tok, name) if name.startswith('"') else name

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
        """The whole text: one graph and nothing after it."""
        graph = self.graph_text()
        if self.tok.kind != "eof":
            self.fail(f"unexpected '{self.tok.text}' after the end of the graph")
        return graph

    def graph_text(self) -> Graph:
        """`graph @name(inputs) -> (types) [attributes {...}] { nodes return ... }`."""
        self.expect("graph")
        name = self.unquote(self.expect_kind("symbol", "a graph name like @main"))
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
            if self.tok.kind == "eof" or self.at("}"):
                self.fail("missing 'return' before the end of the graph")
            self.node_toks.append(self.tok)
            nodes.append(self.node())
        return_tok = self.return_tok = self.expect("return")
        outputs = self.comma_list("}", self.use) if self.tok.kind == "value" else []
        self.expect("}")
        got = [v.type for v in outputs]
        if got != result_types:
            self.fail(f"return types ({', '.join(map(str, got))}) do not match the signature "
                      f"({', '.join(map(str, result_types))})", return_tok)
        return Graph(name, tuple(inputs), tuple(nodes), tuple(outputs), Attributes(meta))

    def define(self, tok: Token, type: TensorType) -> Value:
        name = self.unquote(tok)
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
        name = self.unquote(tok)
        if name not in self.values:
            self.fail(f"use of undefined value %{name}", tok)
        return self.values[name]

    def type(self) -> TensorType:
        tok = self.expect_kind("ident", "a type like f32[2,3]")
        dtype = _IR_DTYPES.get(tok.text)
        if dtype is None:
            self.fail(f"unknown element type '{tok.text}' (expected one of {', '.join(_IR_DTYPES)})", tok)
        self.expect("[")
        dims = self.comma_list("]", lambda: self.integer("a dimension"))
        self.expect("]")
        if any(d < 0 for d in dims):
            self.fail("dimensions must be non-negative 64-bit integers", tok)
        try:
            return TensorType(tuple(dims), dtype)
        except BrazeError as exc:
            self.fail(str(exc), tok)

    def integer(self, what: str) -> int:
        tok = self.expect_kind("number", what)
        if not _INTEGER.fullmatch(tok.text):
            self.fail(f"expected an integer for {what}, found '{tok.text}'", tok)
        return self.int64(tok)

    def int64(self, tok: Token) -> int:
        """The value of an integer token; one outside signed 64 bits is refused before Python converts it (a
        conversion of more than 4,300 digits would raise ValueError)."""
        digits = tok.text.lstrip("-").lstrip("0")
        value = (-1 if tok.text.startswith("-") else 1) * int(digits or "0") if len(digits) <= _INT64_DIGITS else None
        if value is None or not -_INT64_MAX - 1 <= value <= _INT64_MAX:
            shown = tok.text if len(tok.text) <= 24 else f"{tok.text[:20]}... ({len(digits)} digits)"
            self.fail(f"integer {shown} does not fit in 64 bits", tok)
        return value

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
        if len(types) != len(result_toks):
            self.fail(f"{len(result_toks)} result name(s) but {len(types)} type(s)", type_tok)
        try:
            checked = op.check_attrs(attrs)
            if op.declares_type:
                op.check_arity(len(operands))
            else:
                inferred = list(op.infer_types([v.type for v in operands], checked))
                if len(inferred) != len(types):
                    self.fail(f"{op.name} has {len(inferred)} result(s), {len(types)} given", first)
                if inferred != types:
                    self.fail(f"{op.name} result type(s) declared {', '.join(map(str, types))} but inferred "
                              f"{', '.join(map(str, inferred))}", type_tok)
        except ParseError:
            raise
        except BrazeError as exc:
            self.fail(str(exc), attr_tok if "attribute" in str(exc) else first)
        outs = tuple(self.define(t, ty) for t, ty in zip(result_toks, types))
        return Node(op.name, tuple(operands), outs, sorted_attrs(checked), loc)

    def loc(self) -> Loc:
        self.expect("loc")
        self.expect("(")
        module_tok = self.expect_kind("string", "a module path string")
        file_tok = self.expect_kind("string", "a file name string")
        module, file = self.string(module_tok, module_tok.text), self.string(file_tok, file_tok.text)
        self.expect(":")
        line = self.integer("a line number")
        self.expect(")")
        return Loc(module, file, line)

    def attr_dict(self) -> dict[str, Any]:
        self.expect("{")

        def entry() -> tuple[Token, str, Any]:
            tok = self.tok
            if tok.kind == "string":  # keys that are not identifiers are quoted
                self.next()
                key = self.string(tok, tok.text)
            else:
                key = self.expect_kind("ident", "an attribute name").text
            self.expect("=")
            return tok, key, self.literal()

        entries = self.comma_list("}", entry)
        self.expect("}")
        out: dict[str, Any] = {}
        for tok, key, value in entries:
            if key in out:
                self.fail(f"attribute '{key}' given twice", tok)
            out[key] = value
        return out

    def literal(self) -> Any:
        tok = self.tok
        if self.depth >= _MAX_NESTING:
            self.fail(f"attribute value nested deeper than {_MAX_NESTING} levels")
        self.depth += 1
        try:
            return self.literal_body(tok)
        finally:
            self.depth -= 1

    def literal_body(self, tok: Token) -> Any:
        if tok.kind == "number":
            self.next()
            if not _INTEGER.fullmatch(tok.text):
                return float(tok.text)
            return self.int64(tok)
        if tok.kind == "string":
            self.next()
            return self.string(tok, tok.text)
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
            if tok.text == "graph" and self.tokens[self.pos + 1].kind == "symbol":
                return self.nested_graph()
            self.next()
            return {"true": True, "false": False, "none": None}.get(tok.text, tok.text)
        self.fail(f"expected an attribute value, found '{tok.text or 'end of text'}'")

    def nested_graph(self) -> Graph:
        """A graph literal (a fusion region's body): its values live in their own namespace."""
        outer = self.values, self.node_toks, self.return_tok
        self.values, self.node_toks = {}, []
        try:
            return self.graph_text()
        finally:
            self.values, self.node_toks, self.return_tok = outer

    def array(self) -> ArrayAttr:
        self.expect("array")
        self.expect("<")
        type_tok = self.tok
        type = self.type()
        self.expect(">")
        self.expect("[")
        items = self.comma_list("]", lambda: self.array_item(type.dtype))
        self.expect("]")
        if len(items) != type.size:
            self.fail(f"array of type {type} needs {type.size} values, found {len(items)}", type_tok)
        try:
            data = np.array(items, dtype=type.dtype.numpy).reshape(type.shape)
        except (TypeError, ValueError, OverflowError) as exc:
            self.fail(f"bad array values for {type}: {exc}", type_tok)
        return ArrayAttr(data)

    def array_item(self, dtype: DType) -> Any:
        """One element of an array literal: true/false for bool, an integer for int types, a number for floats."""
        tok = self.tok
        value = self.literal()
        if dtype.kind == "bool":
            ok, want = isinstance(value, bool), "true or false"
        elif dtype.is_integer:
            ok, want = isinstance(value, int) and not isinstance(value, bool), "integers"
        else:
            ok, want = isinstance(value, (int, float)) and not isinstance(value, bool), "numbers"
        if not ok:
            self.fail(f"elements of a {dtype.name} array must be {want}, found '{tok.text}'", tok)
        return value


def parse(text: str, *, verify: bool = True) -> Graph:
    """Parse IR text into a verified Graph (without weights); a rule the verifier enforces is a ParseError too.
    verify=False skips the verifier (the parser's own checks of each line still run): only for text known to be
    printed from a verified graph by this version of braze.ir, such as an intact cache entry's."""
    parser = _Parser(text)
    graph = parser.graph()
    if not verify:
        return graph
    from .verify import verify
    try:
        verify(graph)
    except VerifyError as exc:
        index = getattr(exc, "node_index", None)
        tok = parser.return_tok if index is None else parser.node_toks[index]
        raise parser.error(getattr(exc, "reason", str(exc)), tok) from None
    return graph
