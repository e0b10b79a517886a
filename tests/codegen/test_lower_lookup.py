"""Gathers inside fused elementwise regions (codegen/lower/lookup.py): the region reads the table where the indices
point, bit for bit as the reference, on one thread or three, with AVX-512 and AVX2 code; a bad index is reported as
the reference raises it (the first in the gather's row-major order, through a broadcast); and no result is ever
written over a table the region still reads."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import braze
from braze.codegen.lower.checks import module_checks
from braze.ir.builder import GraphBuilder
from braze.ir.errors import IndexRangeError
from braze.ir.passes.plan_memory import read_through_views
from braze.ir.types import TensorType
from tests.codegen.lowering_harness import (compile_node, force_cpu, reference, run_node, run_node_reporting,
                                            special_array)

CPUS = [None, "haswell"]


def _gather_region(x: np.ndarray, indices: np.ndarray, axis: int, shape: tuple[int, ...], domain: tuple[int, ...]):
    """The fused node of where(y > 0, gather(x, broadcast_to(indices, shape)) * 2, y) over `domain` (the gather's
    result broadcast to it), and its operand values for a random y."""
    b = GraphBuilder("g")
    xv = b.input("x", TensorType(x.shape, x.dtype.name))
    iv = b.input("i", TensorType(indices.shape, indices.dtype.name))
    yv = b.input("y", TensorType(domain, "float32"))
    picked = b.gather(xv, b.broadcast_to(iv, shape=shape), axis=axis)
    value = b.cast(picked, dtype="float32") if x.dtype != np.float32 else picked
    out = b.where(b.gt(yv, 0.0), b.mul(value, 2.0), yv)
    graph = braze.optimize(b.finish([out]), pipeline=["fuse"])
    (node,) = [n for n in graph.nodes if n.op == "fused"]
    assert any(n.op == "gather" for n in node.attr["body"].nodes), str(graph)
    values = {"x": x, "i": indices, "y": special_array(np.random.default_rng(1), domain, "float32")}
    return node, [values[v.name] for v in node.inputs]


@st.composite
def _lookups(draw):
    """A table, indices broadcasting to the gather's index shape along some axes, the axis and the domain."""
    rank = draw(st.integers(1, 3))
    x_shape = tuple(draw(st.sampled_from([1, 2, 3, 5, 17, 33])) for _ in range(rank))
    axis = draw(st.integers(0, rank - 1))
    gather_shape = tuple(draw(st.sampled_from([1, 4, 16, 19])) if a == axis else draw(st.integers(1, d))
                         for a, d in enumerate(x_shape))
    index_shape = tuple(1 if a != axis and draw(st.booleans()) else d for a, d in enumerate(gather_shape))
    lead = tuple(draw(st.lists(st.sampled_from([1, 2, 3]), max_size=1)))
    return x_shape, index_shape, axis, gather_shape, lead + gather_shape


@pytest.mark.parametrize("cpu", CPUS)
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # the CPU is the same for every example
@given(case=_lookups(), dtype=st.sampled_from(["float32", "float64", "int32", "bool"]),
       index_dtype=st.sampled_from(["int32", "int64"]), seed=st.integers(0, 2 ** 32 - 1))
def test_gathers_in_regions_match_the_reference(case, dtype: str, index_dtype: str, seed: int, cpu,
                                                monkeypatch) -> None:
    force_cpu(cpu, monkeypatch)
    x_shape, index_shape, axis, gather_shape, domain = case
    rng = np.random.default_rng(seed)
    x = special_array(rng, x_shape, dtype)
    indices = rng.integers(0, x_shape[axis], index_shape).astype(index_dtype)
    node, operands = _gather_region(x, indices, axis, gather_shape, domain)
    want = reference(node, operands)[0]
    got = run_node(node, operands)[0]
    np.testing.assert_array_equal(got, want)
    assert run_node(node, operands, nthreads=3)[0].tobytes() == got.tobytes()


@pytest.mark.parametrize("cpu", CPUS)
@pytest.mark.parametrize("nthreads", [1, 3])
def test_a_bad_index_in_a_region_reports_the_first_in_order(cpu, nthreads: int, monkeypatch) -> None:
    """Indices (2, 1, 19) broadcast over 5 channels: the first bad one in the gather's order is the reference's,
    and every access stays inside the table meanwhile."""
    force_cpu(cpu, monkeypatch)
    x = np.arange(2 * 5 * 7, dtype=np.float32).reshape(2, 5, 7)
    indices = np.zeros((2, 1, 19), np.int64)
    indices[1, 0, 3], indices[0, 0, 17], indices[1, 0, 0] = 9, -4, 2 ** 40
    node, operands = _gather_region(x, indices, 2, (2, 5, 19), (2, 5, 19))
    with pytest.raises(IndexRangeError) as raised:
        reference(node, operands)
    assert "index -4 is out of range [0, 7)" in str(raised.value)
    number, value = run_node_reporting(node, operands, nthreads)[1]
    template = module_checks(compile_node(node).module)[number]
    assert template.replace("{}", str(value), 1).startswith(str(raised.value))


def test_a_gather_in_a_region_reads_a_table_its_result_does_not_overwrite() -> None:
    """A region reversing a temporary of its own shape: the memory plan must not put the result over the table
    (the plan's rule for operands read where their indices point), or the second half would read the first."""
    def reverse_scaled(a, i):
        t = braze.exp(a)
        return braze.gather(t, 1, i) * 3.0

    a = np.random.default_rng(2).standard_normal((8, 64)).astype(np.float32)
    i = np.ascontiguousarray(np.broadcast_to(np.arange(63, -1, -1), (8, 64)))
    compiled = braze.compile(reverse_scaled, a, i)
    region = next(n for n in compiled.graph.nodes if n.op == "fused" and
                  any(m.op == "gather" for m in n.attr["body"].nodes))
    assert region.inputs[0].name in read_through_views(region)
    np.testing.assert_allclose(np.asarray(compiled(a, i)), np.exp(a)[:, ::-1] * 3.0, rtol=1e-6)
