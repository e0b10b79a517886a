"""lora_merge and dequantize against the numpy reference: merges within the accuracy table's bound for their
rank-r sums, dequantization bit for bit for every scheme (odd block sizes and element counts included)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from braze.ir.ops.reparam import SCHEMES, packed_types
from tests.codegen.lowering_harness import check_node, make_node, random_array

EXAMPLES = settings(max_examples=6, deadline=None, derandomize=True)


@EXAMPLES
@given(rows=st.integers(1, 40), rest=st.sampled_from([(1,), (17,), (3, 3, 3), (2, 1, 1)]), rank=st.integers(1, 8),
       dtype=st.sampled_from(["float32", "float64"]), seed=st.integers(0, 2 ** 32 - 1))
def test_lora_merge_matches_reference(rows: int, rest, rank: int, dtype: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    base = random_array(rng, (rows,) + rest, dtype)
    a = random_array(rng, (rank,) + rest, dtype)
    b = random_array(rng, (rows, rank) + (1,) * len(rest[1:]) if len(rest) > 1 else (rows, rank), dtype)
    node = make_node("lora_merge", base, a, b, scale=0.75)
    delta = (np.abs(b.reshape(rows, rank)).astype(np.float64) @ np.abs(a.reshape(rank, -1))).reshape(base.shape)
    check_node(node, [base, a, b], terms=rank, scale=np.abs(base) + 0.75 * delta)


@pytest.mark.parametrize("scheme", SCHEMES)
@EXAMPLES
@given(shape=st.sampled_from([(1,), (7,), (5, 3), (4, 1, 3, 3), (33, 17)]), block=st.sampled_from([1, 3, 16, 64]),
       seed=st.integers(0, 2 ** 32 - 1))
def test_dequantize_matches_reference_exactly(scheme: str, shape, block: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    codes_type, scales_type = packed_types(scheme, block, shape)
    if codes_type.dtype.name == "u8":
        codes = rng.integers(0, 256, codes_type.shape).astype(np.uint8)
    else:
        codes = rng.integers(-127, 128, codes_type.shape).astype(np.int8)
    scales = np.abs(random_array(rng, scales_type.shape, "float32"))
    node = make_node("dequantize", codes, scales, scheme=scheme, block_size=block, shape=shape)
    check_node(node, [codes, scales])
