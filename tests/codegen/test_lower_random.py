"""dropout: the compiled mask is bit-identical to the reference's counter-based hash for any seed, p, shape and
thread split; with the training flag false (or p = 0) the result is the input."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.codegen.lowering_harness import check_node, make_node, random_array, shapes


@settings(max_examples=12, deadline=None, derandomize=True)
@given(shape=shapes(), p=st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]), training=st.booleans(),
       seed=st.integers(-2 ** 63, 2 ** 63 - 1), dtype=st.sampled_from(["float32", "float64"]),
       data_seed=st.integers(0, 2 ** 32 - 1))
def test_dropout_mask_is_bit_identical_to_reference(shape, p: float, training: bool, seed: int, dtype: str,
                                                    data_seed: int) -> None:
    x = random_array(np.random.default_rng(data_seed), shape, dtype)
    if x.size:
        x.reshape(-1)[0] = np.nan  # a multiply, not a select: NaN stays NaN even where dropped
    arrays = [x, np.asarray(training), np.asarray(seed, np.int64)]
    check_node(make_node("dropout", *arrays, p=p), arrays)


def test_dropout_keeps_about_one_minus_p() -> None:
    x = np.ones(20000, np.float32)
    arrays = [x, np.asarray(True), np.asarray(7, np.int64)]
    kept = np.count_nonzero(check_node(make_node("dropout", *arrays, p=0.25), arrays)[0])
    assert abs(kept / x.size - 0.75) < 0.02
