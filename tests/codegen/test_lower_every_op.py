"""Every lowered op against its numpy reference on all of the op's registry samples (tests/ir/samples): one test
per op, so an op is covered the moment it has samples and a lowering.

Each sample runs on 1 thread within the accuracy table's bound (bit-exact for exact ops), then on 3 threads with
identical bytes (check_node). The bound's sum length K is the largest operand's size and its magnitude the op
applied to the operands' absolute values, or the result's, whichever is larger (at least 1): a loose but
dtype-scaled bound, far below any wrong result.
"""
from __future__ import annotations

import numpy as np
import pytest

from braze.codegen.lower import lowered_ops
from tests.codegen.lowering_harness import accuracy_of, check_node, make_node, reference
from tests.ir.samples import Sample, all_samples

SAMPLES: dict[str, list[Sample]] = {}
for _sample in all_samples():
    if _sample.op in lowered_ops():
        SAMPLES.setdefault(_sample.op, []).append(_sample)


def test_every_lowered_op_has_samples() -> None:
    assert sorted(lowered_ops() - set(SAMPLES)) == []


def _magnitude(node, arrays: list[np.ndarray], want: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
    """Per result: max(|op(|operands|)|, |result|, 1), elementwise."""
    absolute = [np.abs(a) if a.dtype.kind == "f" else a for a in arrays]
    try:
        on_abs = reference(node, absolute)
    except (ArithmeticError, ValueError, TypeError):  # an op undefined on |x| (none today): the result alone
        on_abs = tuple(np.zeros_like(w) for w in want)
    with np.errstate(invalid="ignore", over="ignore"):
        return tuple(np.maximum(np.maximum(np.abs(a.astype(np.float64)), np.abs(w.astype(np.float64))), 1.0)
                     for a, w in zip(on_abs, want))


@pytest.mark.parametrize("op", sorted(SAMPLES))
def test_lowering_matches_reference_on_every_sample(op: str) -> None:
    for sample in SAMPLES[op]:
        arrays = [np.asarray(a) for a in sample.args]
        node = make_node(op, *arrays, **sample.attrs)
        if not accuracy_of(node).exact:
            want = reference(node, arrays)
            terms = max((a.size for a in arrays), default=0)
            x = arrays[0] if arrays[0].shape == want[0].shape else 0.0  # the |x| term of gelu and silu
            check_node(node, arrays, terms=terms, scale=_magnitude(node, arrays, want), inputs=x)
        else:
            check_node(node, arrays)
