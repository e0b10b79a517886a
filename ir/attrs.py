"""Op attributes: the schema an op declares and the checked, hashable values nodes store."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import AttributeSchemaError
from .graph import NAN, Graph
from .types import DType, TensorType, as_dtype, type_of

REQUIRED = object()

# kind -> (python check, description)
ATTR_KINDS = ("int", "float", "bool", "str", "ints", "floats", "dtype", "array", "shape", "graph")


class ArrayAttr:
    """A read-only array held as an attribute (constant values); equal and hashable by content."""

    __slots__ = ("array", "_key")

    def __init__(self, array: Any) -> None:
        data = np.array(array, copy=True)
        data.setflags(write=False)
        self.array = data
        self._key = (data.dtype.str, data.shape, data.tobytes())

    @property
    def type(self) -> TensorType:
        return type_of(self.array)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ArrayAttr) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"ArrayAttr({self.array!r})"


@dataclass(frozen=True, slots=True)
class AttrSpec:
    """One declared attribute: its name, kind, default (REQUIRED if none) and allowed values."""

    name: str
    kind: str
    default: Any = REQUIRED
    optional: bool = False  # None is an allowed value
    choices: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in ATTR_KINDS:
            raise ValueError(f"unknown attribute kind {self.kind!r}")

    def check(self, op: str, value: Any) -> Any:
        """Return the normalized value, or raise AttributeSchemaError naming the op and attribute."""
        if value is None and self.optional:
            return None
        try:
            normalized = _NORMALIZE[self.kind](value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise AttributeSchemaError(
                f"{op}: attribute '{self.name}' expects {self.kind}, got {value!r} ({exc})") from None
        if self.choices is not None and normalized not in self.choices:
            raise AttributeSchemaError(
                f"{op}: attribute '{self.name}' must be one of {list(self.choices)}, got {value!r}")
        return normalized


def _int(v: Any) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{type(v).__name__} is not an int")
    return int(v)


def _float(v: Any) -> float:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError(f"{type(v).__name__} is not a number")
    value = float(v)
    return NAN if value != value else value


def _bool(v: Any) -> bool:
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{type(v).__name__} is not a bool")
    return bool(v)


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"{type(v).__name__} is not a str")
    return v


def _ints(v: Any) -> tuple[int, ...]:
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (int(v),)
    return tuple(_int(x) for x in v)


def _floats(v: Any) -> tuple[float, ...]:
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
        return (float(v),)
    return tuple(_float(x) for x in v)


def _shape(v: Any) -> tuple[int, ...]:
    dims = _ints(v)
    if any(d < 0 for d in dims):
        raise ValueError("dimensions must be non-negative")
    return dims


def _dtype(v: Any) -> DType:
    return as_dtype(v)


def _array(v: Any) -> ArrayAttr:
    if isinstance(v, ArrayAttr):
        return v
    array = np.asarray(v)
    as_dtype(array.dtype)
    return ArrayAttr(array)


def _graph(v: Any) -> Graph:
    """A nested graph (a fusion region's body): compared and hashed by structure, so it carries no weights."""
    if not isinstance(v, Graph):
        raise TypeError(f"{type(v).__name__} is not a Graph")
    hash(v)  # raises TypeError when the nested graph's attributes hold unhashable values (dicts)
    return v.replace(weights={}) if v.weights else v


_NORMALIZE = {"int": _int, "float": _float, "bool": _bool, "str": _str, "ints": _ints, "floats": _floats,
              "dtype": _dtype, "array": _array, "shape": _shape, "graph": _graph}


def check_attrs(op: str, specs: tuple[AttrSpec, ...], given: dict[str, Any]) -> dict[str, Any]:
    """Validate `given` against `specs`: reject unknown names, fill defaults, normalize kinds."""
    known = {s.name for s in specs}
    unknown = sorted(set(given) - known)
    if unknown:
        expected = ", ".join(sorted(known)) or "none"
        raise AttributeSchemaError(f"{op}: unknown attribute(s) {unknown}; expected: {expected}")
    out: dict[str, Any] = {}
    for spec in specs:
        if spec.name in given:
            out[spec.name] = spec.check(op, given[spec.name])
        elif spec.default is REQUIRED:
            raise AttributeSchemaError(f"{op}: missing required attribute '{spec.name}' ({spec.kind})")
        else:
            out[spec.name] = spec.default
    return out
