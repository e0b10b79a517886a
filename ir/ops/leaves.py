"""Leaf ops: parameters, training flags and constants, the non-input leaves of a graph."""
from __future__ import annotations

import numpy as np

from ..attrs import AttrSpec
from ..registry import defop


def _no_impl(name: str):
    def impl(**attrs: object) -> np.ndarray:
        raise NotImplementedError(f"{name} leaves are bound to values by the interpreter, not computed")
    return impl


param = defop(
    "param", (), infer=None, impl=_no_impl("param"), category="leaf",
    attrs=(AttrSpec("path", "str"), AttrSpec("id", "int"), AttrSpec("trainable", "bool", True),
           AttrSpec("buffer", "bool", False)),
    doc="A module parameter or buffer, identified by its dotted path and ParamId; its value lives in the "
        "graph's weights mapping, not in the graph.")

flag = defop(
    "flag", (), infer=None, impl=_no_impl("flag"), category="leaf",
    attrs=(AttrSpec("path", "str"), AttrSpec("id", "int"), AttrSpec("value", "bool")),
    doc="A module-owned control flag (training mode); a bool[] value the flag-taking ops read.")


def _constant_infer(*, value):
    return value.type


def _constant_impl(*, value):
    return value.array


constant = defop(
    "constant", (), infer=_constant_infer, impl=_constant_impl, category="leaf",
    attrs=(AttrSpec("value", "array"),),
    doc="A constant array captured in the graph text.")
