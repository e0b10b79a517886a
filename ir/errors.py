"""The braze error hierarchy; every layer raises these so users can catch one base class."""
from __future__ import annotations


class BrazeError(Exception):
    """Base class of every error braze raises on purpose."""


class ShapeError(BrazeError, ValueError):
    """Operand shapes that an op cannot accept; the message names the op and the shapes."""


class TensorSizeError(ShapeError):
    """A tensor type over the size limit (BRAZE_MAX_TENSOR_BYTES, at most the address space) or of more than
    numpy's 64 dimensions."""


class IndexRangeError(BrazeError, IndexError):
    """An index operand's value outside the dimension it indexes; the message names the op, the value and the range.
    Eager evaluation and compiled code raise it with the same wording."""


class DTypeError(BrazeError, TypeError):
    """Operand or attribute dtypes that an op cannot accept."""


class AttributeSchemaError(BrazeError, TypeError):
    """An op was given an unknown attribute, a missing one, or one of the wrong kind."""


class UnknownOpError(BrazeError, KeyError):
    """An op name that is not in the registry."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class ParseError(BrazeError, ValueError):
    """Malformed IR text; carries the line and column of the problem."""

    def __init__(self, message: str, line: int, column: int, source_line: str = "") -> None:
        self.line, self.column, self.source_line = line, column, source_line
        pointer = f"\n  {source_line}\n  {' ' * max(column - 1, 0)}^" if source_line else ""
        super().__init__(f"line {line}, column {column}: {message}{pointer}")


class VerifyError(BrazeError, ValueError):
    """A graph that breaks an IR rule; the message names the bad node."""


class TraceError(BrazeError, RuntimeError):
    """A forward pass that cannot be traced; the message names the user's source line."""


class RecordError(BrazeError, ValueError):
    """A record or weight file that cannot be saved or applied to a module."""


class CodegenError(BrazeError, RuntimeError):
    """LLVM code that cannot be built, verified, loaded or looked up; never a crash in native code."""


class ExportError(BrazeError, ValueError):
    """A graph or model that cannot be written in an interchange format (an op with no ONNX form, an adapter
    PEFT cannot express); the message names the op or parameter and where it came from."""
