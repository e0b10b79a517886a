"""Kernels over empty extents compile and run: empty results stay empty, results over an empty reduction equal the
reference (the IR fuzzer found conv2d with no output channels dividing by zero while its loops were emitted).

Every lowered op runs on its first registry sample with one axis emptied (that axis of the first operand, and of every
operand of the same shape), wherever the op accepts the emptied shapes; conv2d and matmul add the empty channel,
batch and inner extents the sweep cannot form."""
from __future__ import annotations

from typing import Iterator

import numpy as np
import pytest

from braze.codegen.lower import lowered_ops
from braze.ir.errors import BrazeError
from tests.codegen.lowering_harness import check_node, make_node, reference
from tests.ir.samples import Sample, all_samples

FIRST_SAMPLE: dict[str, Sample] = {}
for _sample in all_samples():
    if _sample.op in lowered_ops():
        FIRST_SAMPLE.setdefault(_sample.op, _sample)


def emptied(arrays: list[np.ndarray]) -> Iterator[list[np.ndarray]]:
    """The operands with one axis of the first operand emptied, in every operand of its shape."""
    first = arrays[0]
    for axis in range(first.ndim):
        if first.shape[axis]:
            cut = tuple(slice(0, 0) if a == axis else slice(None) for a in range(first.ndim))
            yield [a[cut] if a.shape == first.shape else a for a in arrays]


@pytest.mark.parametrize("op", sorted(FIRST_SAMPLE))
def test_lowering_runs_on_an_emptied_axis(op: str) -> None:
    sample = FIRST_SAMPLE[op]
    for arrays in emptied([np.asarray(a) for a in sample.args]):
        try:
            node = make_node(op, *arrays, **sample.attrs)
            reference(node, arrays)
        except (BrazeError, ValueError):  # the op refuses these shapes (a scalar result of no elements, ...)
            continue
        check_node(node, arrays)


CONV = [  # (x shape, w shape, with bias, groups)
    ((2, 3, 5, 5), (0, 3, 3, 3), True, 1),
    ((2, 3, 5, 5), (0, 3, 3, 3), False, 1),
    ((1, 4, 5, 5), (0, 2, 3, 3), False, 2),
    ((2, 0, 5, 5), (4, 0, 3, 3), True, 1),
    ((0, 3, 5, 5), (4, 3, 3, 3), True, 1),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("x_shape,w_shape,bias,groups", CONV)
def test_conv2d_with_an_empty_extent_matches_the_reference(x_shape, w_shape, bias: bool, groups: int,
                                                           dtype: str) -> None:
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)]
    if bias:
        arrays.append(rng.standard_normal(w_shape[0]).astype(dtype))
    padding = (1, 1) if w_shape[2] == 3 else (0, 0)
    check_node(make_node("conv2d", *arrays, groups=groups, padding=padding), arrays)


@pytest.mark.parametrize("a_shape,b_shape", [((4, 0), (0, 3)), ((0, 5), (5, 3)), ((4, 5), (5, 0)), ((2, 0, 3), (3, 4))])
def test_matmul_with_an_empty_extent_matches_the_reference(a_shape, b_shape) -> None:
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)]
    check_node(make_node("matmul", *arrays), arrays)
