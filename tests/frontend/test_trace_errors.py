"""Forward passes that cannot be traced raise braze.TraceError naming the user's file and line and saying why.

Each offending line ends with a `# <marker>` comment; `line_of(marker)` finds its number in this file.
"""
from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F

X = braze.randn(2, 3)


def line_of(marker: str) -> int:
    with open(__file__, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.rstrip().endswith(f"# {marker}"):
                return number
    raise AssertionError(f"no line is marked {marker}")


def at(marker: str) -> str:
    """The start of the message of an error at the marked line."""
    return re.escape(f"{__file__}:{line_of(marker)}: ")


class ValueBranch(nn.Module):
    def forward(self, x: Any) -> Any:
        if x.sum() > 0:  # value-branch
            return x
        return -x


def value_while(x: Any) -> Any:
    while x.sum() < 10:  # value-while
        x = x * 2
    return x


def _numpy(x: Any) -> Any:
    return x * x.numpy().mean()  # numpy


def _item(x: Any) -> Any:
    return x / x.max().item()  # item


def _tolist(x: Any) -> Any:
    return braze.tensor(x.tolist())  # tolist


def _float(x: Any) -> Any:
    return x * float(x.mean())  # float


def _int(x: Any) -> Any:
    return x * int(x.sum())  # int


def _index(x: Any) -> Any:
    return x * [1.0, 2.0, 3.0][x.argmax()]  # index


def _asarray(x: Any) -> Any:
    return x + np.asarray(x).mean()  # asarray


def _unregistered(x: Any) -> Any:
    return braze.apply("frobnicate", x)  # unregistered


def _one_hot(x: Any) -> Any:
    return F.one_hot(x.argmax(dim=1))  # one-hot


def _backward(x: Any) -> Any:
    x.sum().backward()  # backward
    return x


CASES: list[tuple[Callable[[Any], Any], str, str]] = [
    (ValueBranch(), "value-branch", "bool() of a traced tensor: the value of a traced tensor is not known while "
                                    "tracing; data-dependent Python control flow"),
    (value_while, "value-while", "bool() of a traced tensor"),
    (_numpy, "numpy", ".numpy() of a traced tensor: the value of a traced tensor is not known while tracing"),
    (_item, "item", ".item() of a traced tensor"),
    (_tolist, "tolist", ".tolist() of a traced tensor"),
    (_float, "float", "float() of a traced tensor"),
    (_int, "int", "int() of a traced tensor"),
    (_index, "index", "a traced tensor is used as a Python index"),
    (_asarray, "asarray", "a traced tensor is converted to a numpy array"),
    (_unregistered, "unregistered", "op 'frobnicate' is not in the op registry"),
    (_one_hot, "one-hot", "the data of a traced tensor is read (.max)"),
    (_backward, "backward", "backward() while tracing"),
]


@pytest.mark.parametrize("fn,marker,why", CASES, ids=[c[1] for c in CASES])
def test_trace_error_names_the_user_line_and_says_why(fn: Callable[[Any], Any], marker: str, why: str) -> None:
    with pytest.raises(braze.TraceError, match=at(marker) + re.escape(why)) as info:
        braze.trace(fn, X)
    assert (info.value.file, info.value.line) == (__file__, line_of(marker))


def test_trace_error_quotes_the_source_line() -> None:
    with pytest.raises(braze.TraceError) as info:
        braze.trace(ValueBranch(), X)
    assert "in forward: if x.sum() > 0:  # value-branch" in str(info.value)


def test_trace_error_message_suggests_where_for_branches() -> None:
    with pytest.raises(braze.TraceError, match=r"braze\.where\(condition, a, b\)"):
        braze.trace(value_while, X)


def test_trace_error_is_a_braze_error() -> None:
    assert issubclass(braze.TraceError, braze.BrazeError)


def test_trace_error_for_a_non_tensor_example_input_names_the_call() -> None:
    with pytest.raises(braze.TraceError, match=at("call") + "example input 1 is a float"):
        braze.trace(lambda x, s: x * s, X, 2.0)  # call


class Escapes(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.kept: list[Any] = []

    def forward(self, x: Any) -> Any:
        self.kept.append(x * 2)
        return x


def test_a_traced_tensor_kept_by_the_module_is_an_error_at_trace_time() -> None:
    m = Escapes()
    with pytest.raises(braze.TraceError, match="forward of the model .Escapes. keeps a traced tensor in attribute "
                                               "'kept'"):
        braze.trace(m, X)
    assert m.kept == []


def test_a_traced_tensor_used_after_its_trace_is_an_error() -> None:
    kept = []
    braze.trace(lambda x: kept.append(x * 2) or x, X)  # a plain function's closure is not a module's state
    with pytest.raises(braze.TraceError, match=at("escaped") + "a traced tensor is converted to a numpy array"):
        kept[0] + 1  # escaped


def test_trace_error_for_a_non_tensor_result() -> None:
    with pytest.raises(braze.TraceError, match="returned a str"):
        braze.trace(lambda x: "done", X)


def test_batch_norm_training_on_one_value_per_channel_is_a_shape_error() -> None:
    bn = nn.BatchNorm1d(3)
    with pytest.raises(braze.ShapeError, match="more than 1 value per channel when training"):
        bn(braze.randn(1, 3))
    bn.eval()
    assert bn(braze.randn(1, 3)).shape == (1, 3)


def _bad_shapes(x: Any) -> Any:
    return x @ x  # bad-shapes


def test_trace_shape_errors_keep_their_type_and_name_the_user_line() -> None:
    with pytest.raises(braze.ShapeError, match=at("bad-shapes") + "matmul"):
        braze.trace(_bad_shapes, X)
