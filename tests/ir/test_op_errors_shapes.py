"""Bad operands to reductions, movement, indexing and matmul raise errors naming the op, the shapes and why."""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from braze.ir import BrazeError, DTypeError, ShapeError
from braze.ir.evaluate import evaluate


def f64(*shape: int) -> np.ndarray:
    return np.zeros(shape)


def i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


# (label, op, operands, attrs, error, fragments the message must contain)
CASES: list[tuple[str, str, tuple[Any, ...], dict[str, Any], type[Exception], tuple[str, ...]]] = [
    ("matmul-inner", "matmul", (f64(2, 3), f64(4, 5)), {}, ShapeError, ("matmul", "f64[2,3]", "f64[4,5]")),
    ("matmul-batch", "matmul", (f64(2, 3, 4), f64(3, 4, 5)), {}, ShapeError, ("matmul", "f64[2,3,4]", "broadcast")),
    ("matmul-scalar", "matmul", (f64(), f64(3)), {}, ShapeError, ("matmul", "rank >= 1")),
    ("matmul-dtypes", "matmul", (f64(2, 3), np.zeros((3, 2), np.float32)), {}, DTypeError, ("matmul", "f32[3,2]")),
    ("quantized-matmul-inner", "quantized_matmul", (np.zeros((2, 4), np.float32), np.zeros((3, 4), np.int8),
                                                    np.zeros(3, np.float32)),
     {"scheme": "int8", "shape": (3, 4)}, ShapeError, ("quantized_matmul", "3 (out_features)", "f32[2,4]")),
    ("quantized-matmul-f64", "quantized_matmul", (f64(2, 3), np.zeros((3, 4), np.int8), np.zeros(3, np.float32)),
     {"scheme": "int8", "shape": (3, 4)}, DTypeError, ("quantized_matmul", "g must be float32", "f64[2,3]")),
    ("reshape-size", "reshape", (f64(2, 3),), {"shape": (4, 2)}, ShapeError, ("reshape", "f64[2,3]", "[4, 2]")),
    ("transpose-repeat", "transpose", (f64(2, 3, 4),), {"perm": (0, 0, 1)}, ShapeError,
     ("transpose", "[0, 0, 1]", "f64[2,3,4]")),
    ("transpose-short", "transpose", (f64(2, 3, 4),), {"perm": (1, 0)}, ShapeError, ("transpose", "permutation")),
    ("broadcast-mismatch", "broadcast_to", (f64(3, 2),), {"shape": (3, 3)}, ShapeError,
     ("broadcast_to", "f64[3,2]", "[3, 3]")),
    ("broadcast-rank", "broadcast_to", (f64(2, 3),), {"shape": (3,)}, ShapeError, ("broadcast_to", "f64[2,3]")),
    ("squeeze-wide", "squeeze", (f64(2, 1),), {"axes": (0,)}, ShapeError, ("squeeze", "f64[2,1]", "size 1")),
    ("unsqueeze-axis", "unsqueeze", (f64(2, 3),), {"axes": (3,)}, ShapeError, ("unsqueeze", "axis 3", "rank 3")),
    ("sum-axis", "sum", (f64(2, 3),), {"axes": (2,)}, ShapeError, ("sum", "axis 2", "rank 2")),
    ("sum-repeat", "sum", (f64(2, 3),), {"axes": (1, -1)}, ShapeError, ("sum", "repeated")),
    ("max-empty", "max", (f64(2, 0),), {"axes": (1,)}, ShapeError, ("max", "f64[2,0]", "empty")),
    ("mean-int", "mean", (i64(1, 2),), {}, DTypeError, ("mean", "i64[2]")),
    ("argmax-axis", "argmax", (f64(2, 3),), {"axis": -3}, ShapeError, ("argmax", "axis -3")),
    ("softmax-int", "softmax", (i64(1, 2),), {}, DTypeError, ("softmax", "i64[2]")),
    ("concat-shapes", "concat", (f64(2, 3), f64(3, 2)), {"axis": 0}, ShapeError,
     ("concat", "f64[2,3]", "f64[3,2]")),
    ("concat-dtypes", "concat", (f64(2), np.zeros(2, np.float32)), {"axis": 0}, DTypeError, ("concat", "cast")),
    ("stack-shapes", "stack", (f64(2, 3), f64(2, 4)), {"axis": 0}, ShapeError, ("stack", "f64[2,3]", "f64[2,4]")),
    ("slice-bounds", "slice", (f64(4, 5),), {"starts": (0, 3), "stops": (4, 6), "steps": (1, 1)}, ShapeError,
     ("slice", "axis 1", "stop 6")),
    ("slice-step", "slice", (f64(4),), {"starts": (0,), "stops": (4,), "steps": (0,)}, ShapeError,
     ("slice", "step >= 1")),
    ("slice-arity", "slice", (f64(4, 5),), {"starts": (0,), "stops": (4,), "steps": (1,)}, ShapeError,
     ("slice", "one entry per axis", "[4, 5]")),
    ("pad-count", "pad", (f64(2, 3),), {"pads": (1, 1)}, ShapeError, ("pad", "4 non-negative", "f64[2,3]")),
    ("pad-negative", "pad", (f64(2),), {"pads": (-1, 0)}, ShapeError, ("pad", "non-negative")),
    ("pad-reflect-past-one-mirror", "pad", (f64(2, 3),), {"pads": (0, 0, 3, 0), "mode": "reflect"}, ShapeError,
     ("pad", "mode='reflect'", "axis 1 of f64[2,3] by (3, 0)", "at most 2")),
    ("pad-wrap-past-one-wrap", "pad", (f64(2, 3),), {"pads": (0, 3, 0, 0), "mode": "wrap"}, ShapeError,
     ("pad", "mode='wrap'", "at most 2")),
    ("pad-edge-of-nothing", "pad", (f64(0, 3),), {"pads": (1, 0, 0, 0), "mode": "edge"}, ShapeError,
     ("pad", "mode='edge'", "axis 0")),
    ("gather-rank", "gather", (f64(3, 4), i64(0, 1)), {"axis": 0}, ShapeError, ("gather", "i64[2]", "rank")),
    ("gather-float-index", "gather", (f64(3, 4), f64(3, 4)), {"axis": 0}, DTypeError, ("gather", "indices")),
    ("scatter-source", "scatter_add", (f64(2, 2), np.zeros((2, 3), np.int64)), {"axis": 0, "shape": (3, 4)},
     ShapeError, ("scatter_add", "f64[2,2]", "i64[2,3]")),
    ("scatter-base", "scatter_add", (f64(2, 3), np.zeros((2, 3), np.int64), f64(3, 5)), {"axis": 0, "shape": (3, 4)},
     ShapeError, ("scatter_add", "base f64[3,5]", "[3, 4]")),
    ("index-select-scalar", "index_select", (f64(), i64(0)), {"axis": 0}, ShapeError, ("index_select", "scalar")),
    ("index-add-source", "index_add", (f64(2, 2), i64(0, 1, 1)), {"axis": 0, "shape": (4, 2)}, ShapeError,
     ("index_add", "f64[2,2]", "[3, 2]")),
    ("index-add-base", "index_add", (f64(3, 2), i64(0, 1, 1), np.zeros((4, 2), np.float32)),
     {"axis": 0, "shape": (4, 2)}, ShapeError, ("index_add", "base f32[4,2]", "dtype")),
    ("one-hot-classes", "one_hot", (i64(0, 1),), {"num_classes": 0}, ShapeError, ("one_hot", "num_classes")),
]


@pytest.mark.parametrize("op,operands,attrs,error,fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_operands_raise_a_named_error(op: str, operands: tuple[Any, ...], attrs: dict[str, Any],
                                          error: type[Exception], fragments: tuple[str, ...]) -> None:
    with pytest.raises(error) as info:
        evaluate(op, operands, attrs)
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} missing from: {info.value}"


# Index values are only known at evaluation time: (label, op, operands, attrs, fragments)
RANGE_CASES: list[tuple[str, str, tuple[Any, ...], dict[str, Any], tuple[str, ...]]] = [
    ("gather", "gather", (f64(3, 2), np.array([[0, 3]], np.int64)), {"axis": 0}, ("gather", "index 3", "[0, 3)")),
    ("index-select", "index_select", (f64(5, 2), np.array([[1, 5]], np.int32)), {"axis": 0},
     ("index_select", "index 5", "[0, 5)")),
    ("index-select-negative", "index_select", (f64(5, 2), i64(-1)), {"axis": 0}, ("index_select", "index -1")),
    ("one-hot", "one_hot", (i64(0, 4),), {"num_classes": 3}, ("one_hot", "index 4", "num_classes 3")),
    ("scatter-add", "scatter_add", (f64(1, 2), np.array([[0, 9]], np.int64)), {"axis": 1, "shape": (1, 3)},
     ("scatter_add", "index 9")),
    ("index-add", "index_add", (f64(2), i64(0, 2)), {"axis": 0, "shape": (2,)}, ("index_add", "index 2")),
]


@pytest.mark.parametrize("op,operands,attrs,fragments", [c[1:] for c in RANGE_CASES], ids=[c[0] for c in RANGE_CASES])
def test_out_of_range_index_raises_at_evaluation(op: str, operands: tuple[Any, ...], attrs: dict[str, Any],
                                                 fragments: tuple[str, ...]) -> None:
    with pytest.raises(BrazeError) as info:
        evaluate(op, operands, attrs)
    assert not isinstance(info.value, ShapeError)
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} missing from: {info.value}"
