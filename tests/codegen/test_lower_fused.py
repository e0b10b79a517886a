"""Fusion regions from the fuse pass, lowered as one kernel each, against the reference interpreter: elementwise
regions (bit-exact for arithmetic), reduction regions (softmax and layer norm written longhand, residual + layer
norm, reductions over leading axes), gemm/conv regions with epilogues, and regions that fall back to op by op."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import braze
from braze.codegen.lower.rows import RowPlan
from braze.ir.builder import GraphBuilder
from braze.ir.types import TensorType
from tests.codegen.lowering_harness import (aligned_copy, aligned_empty, assert_close, broadcast_operands,
                                            compile_node, force_cpu, fused_nodes, random_array, reference, run_node,
                                            special_array)

F32_EPS = float(np.finfo(np.float32).eps)


def regions(build, shapes, dtype: str = "float32", seed: int = 0, kind: str | None = None):
    """The fused nodes of the graph `build` makes from inputs of `shapes`, with their operand values."""
    b = GraphBuilder("g")
    inputs = [b.input(f"x{i}", TensorType(s, dtype)) for i, s in enumerate(shapes)]
    outs = build(b, *inputs)
    graph = braze.optimize(b.finish(list(outs) if isinstance(outs, (list, tuple)) else [outs]), pipeline=["fuse"])
    rng = np.random.default_rng(seed)
    found = fused_nodes(graph, [random_array(rng, s, dtype) for s in shapes])
    assert found, f"the fuse pass formed no region:\n{graph}"
    if kind is not None:
        assert all(n.attr["kind"] == kind for n, _ in found), [n.attr["kind"] for n, _ in found]
    return found


def op_by_op(node) -> bool:
    """Whether the node's kernel is the op-by-op fallback (it then calls one kernel per body node)."""
    compiled = compile_node(node)
    return any(name.startswith(compiled.spec.name + ".op") for name in compiled.spec.function.module.globals)


def check(node, operands, rtol: float = 0.0, atol: float = 0.0) -> list[np.ndarray]:
    """Compare every result with the reference (|got - want| <= rtol |want| + atol), then demand the same bytes
    from 3 threads."""
    got, want = run_node(node, operands), reference(node, operands)
    for k, (g, w) in enumerate(zip(got, want)):
        allowed = rtol * np.abs(np.nan_to_num(w.astype(np.float64), posinf=0, neginf=0)) + atol if rtol or atol else 0.0
        assert_close(g, w, allowed, f"{node.attr['kind']} region result {k}")
    for g, s in zip(got, run_node(node, operands, nthreads=3)):
        assert g.tobytes() == s.tobytes()
    return got


# --- elementwise --------------------------------------------------------------------------------------------

_EXACT = ["add", "sub", "mul", "maximum", "minimum", "div"]


@settings(max_examples=10, deadline=None, derandomize=True)
@given(operands=broadcast_operands(3), ops=st.lists(st.sampled_from(_EXACT + ["relu", "neg", "abs", "where"]),
                                                    min_size=2, max_size=6), seed=st.integers(0, 2 ** 32 - 1))
def test_elementwise_regions_round_like_the_reference(operands, ops, seed: int) -> None:
    _, shapes = operands

    def build(b, *xs):
        values = list(xs)
        for k, op in enumerate(ops):
            a, c = values[k % len(values)], values[-1]
            if op in _EXACT:
                values.append(getattr(b, op)(a, c))
            elif op == "where":
                values.append(b.where(b.gt(a, c), a, b.mul(c, 0.5)))
            else:
                values.append(getattr(b, op)(c))
        return [values[-1], b.gt(values[-1], 0.0), values[-2]]
    rng = np.random.default_rng(seed)
    for node, operands_ in regions(build, shapes, seed=seed):
        operands_ = [special_array(rng, o.shape, o.dtype) for o in operands_]
        check(node, operands_)
        assert not op_by_op(node)


def test_elementwise_region_with_transcendentals() -> None:
    (node, operands), = regions(lambda b, x, y: b.add(b.tanh(b.mul(x, y)), b.sigmoid(b.exp(y))), [(7, 33), (33,)],
                                kind="elementwise")
    check(node, operands, rtol=8 * F32_EPS, atol=8 * F32_EPS)


def test_elementwise_region_may_write_over_its_operand() -> None:
    """The memory plan lets an elementwise region's result take its operand's bytes: same pointer in and out."""
    (node, operands), = regions(lambda b, x, y: b.relu(b.add(b.mul(x, y), 1.0)), [(9, 35), (35,)], kind="elementwise")
    compiled = compile_node(node)
    want = reference(node, operands)[0]
    storage, shared = aligned_copy(operands[0])
    _, other = aligned_copy(operands[1])
    scratch = aligned_empty(compiled.spec.scratch_bytes)
    pointers = ctypes.c_void_p * 2
    outs, ins, scratches = pointers(shared.ctypes.data), pointers(shared.ctypes.data, other.ctypes.data), \
        pointers(scratch.ctypes.data)
    status = np.zeros(2, np.int64)
    compiled.call(ctypes.addressof(outs), ctypes.addressof(ins), ctypes.addressof(scratches), 0, 1, status.ctypes.data)
    np.testing.assert_array_equal(shared, want)


# --- reductions ---------------------------------------------------------------------------------------------


def _softmax(b, x, axis=-1):
    m = b.max(x, axes=(axis,), keepdim=True)
    e = b.exp(b.sub(x, m))
    return b.div(e, b.sum(e, axes=(axis,), keepdim=True))


def _layer_norm(b, x, w, bias):
    mu = b.mean(x, axes=(-1,), keepdim=True)
    c = b.sub(x, mu)
    var = b.mean(b.mul(c, c), axes=(-1,), keepdim=True)
    return b.add(b.mul(b.mul(c, b.rsqrt(b.add(var, 1e-5))), w), bias)


@pytest.mark.parametrize("build, shapes, rtol, atol", [
    (_softmax, [(6, 37)], 64 * F32_EPS, 0.0),
    (lambda b, x: _softmax(b, x, axis=0), [(37, 6)], 64 * F32_EPS, 0.0),
    (_layer_norm, [(5, 48), (48,), (48,)], 64 * F32_EPS, 64 * F32_EPS),
    (lambda b, x, r, w: b.layer_norm(b.add(x, r), w, normalized_shape=(33,)), [(3, 5, 33), (3, 5, 33), (33,)],
     64 * F32_EPS, 64 * F32_EPS),
    (lambda b, x: b.mean(b.relu(x), axes=(2, 3)), [(2, 5, 7, 9)], 16 * F32_EPS, 0.0),
    (lambda b, x: [b.sum(b.mul(x, x), axes=(0,)), b.argmax(b.abs(x), axis=1, keepdim=True)], [(17, 19)],
     32 * F32_EPS, 32 * F32_EPS),
    (lambda b, x, y: b.log(b.sum(b.exp(b.add(x, y)), axes=(1,), keepdim=False)), [(4, 21), (4, 1)],
     16 * F32_EPS, 16 * F32_EPS),
])
def test_reduction_regions_run_as_one_nest(build, shapes, rtol: float, atol: float) -> None:
    for node, operands in regions(build, shapes, kind="reduction"):
        check(node, operands, rtol, atol)
        assert not op_by_op(node)


def test_reduction_region_reading_rows_across_axes_falls_back_op_by_op() -> None:
    """sum(x, axis 1) without kept axes broadcast against x pairs row i's sum with column i: not one row pass."""
    (node, operands), = regions(lambda b, x: b.add(b.sum(x, axes=(1,)), x), [(5, 5)], kind="reduction")
    check(node, operands, 16 * F32_EPS, 16 * F32_EPS)
    assert op_by_op(node)


def _channel_statistics(b, x, g, v):
    """Batch-norm-backward-like sums over (N, H, W) beside a running statistic v of the channels' shape."""
    s = b.sum(b.mul(x, g), axes=(0, 2, 3))
    m = b.mean(g, axes=(0, 2, 3), keepdim=True)
    return [b.sub(g, b.mul(x, m)), b.add(b.mul(v, 0.9), s)]


# (cpu forced with BRAZE_CPU or None for the host, vector width) -> shapes (N, C, H, C): the last axis as long as
# the channels, so a channel vector also broadcasts along it; distinct per cpu, since kernels are cached by node
_CHANNEL_SHAPES = {None: [(3, 1, 2, 1), (3, 7, 2, 7), (2, 13, 3, 13), (0, 5, 2, 5)],
                   "haswell": [(2, 8, 2, 8), (2, 9, 3, 9), (1, 17, 2, 17)],
                   "nehalem": [(2, 3, 2, 3), (3, 4, 2, 4), (2, 5, 1, 5)]}


@pytest.mark.parametrize("cpu", list(_CHANNEL_SHAPES), ids=lambda c: c or "host")
def test_reduction_region_reads_a_channel_vector_per_row(cpu, monkeypatch) -> None:
    """A vector of the rows' shape that meets only per-row sums is read once per row, even when numpy would also
    broadcast it along a last axis of the same length: one nest, not op by op."""
    force_cpu(cpu, monkeypatch)
    for n, c, h, w in _CHANNEL_SHAPES[cpu]:
        for node, operands in regions(_channel_statistics, [(n, c, h, w), (n, c, h, w), (c,)], kind="reduction"):
            check(node, operands, 64 * F32_EPS, 64 * F32_EPS)
            assert not op_by_op(node)


def _normalized_and_its_sum(axes):
    """A gradient-like value needing a first pass's mean, stored and also summed (batch norm's backward)."""
    def build(b, x, g):
        d = b.sub(g, b.mul(x, b.mean(g, axes=axes, keepdim=True)))
        return [d, b.sum(d, axes=axes)]
    return build


# cpu -> (axes, shape): the inner axis reduced (NCHW over N, H, W) and kept (over the leading axis)
_STORING_SHAPES = {None: [((0, 2, 3), (2, 3, 1, 1)), ((0, 2, 3), (3, 2, 5, 7)), ((0, 2, 3), (0, 3, 2, 2)),
                          ((0,), (13, 1)), ((0,), (5, 31))],
                   "haswell": [((0, 2, 3), (2, 3, 2, 7)), ((0, 2, 3), (2, 2, 3, 9)), ((0,), (3, 7)), ((0,), (4, 9))],
                   "nehalem": [((0, 2, 3), (2, 2, 1, 3)), ((0, 2, 3), (1, 3, 5, 5)), ((0,), (3, 3)), ((0,), (2, 5))]}


@pytest.mark.parametrize("cpu", list(_STORING_SHAPES), ids=lambda c: c or "host")
def test_reduction_region_stores_in_its_last_pass(cpu, monkeypatch) -> None:
    """Results that need no sum of the last pass are stored by it, not by a pass of their own."""
    force_cpu(cpu, monkeypatch)
    for axes, shape in _STORING_SHAPES[cpu]:
        (node, operands), = regions(_normalized_and_its_sum(axes), [shape, shape], kind="reduction")
        plan = RowPlan(tuple(node.attr["shape"]), tuple(node.attr["axes"]), node.attr["body"])
        assert (plan.stages, plan.stores_in_last_pass) == (2, True)
        check(node, operands, 64 * F32_EPS, 64 * F32_EPS)
        assert not op_by_op(node)


def _softmax_read_after_its_sum(axis):
    """A softmax that is a result and is read again after its sum pass: scaled into a second result, and summed
    against x in a pass of its own (its exponentials are stored by the sum pass and scaled in place)."""
    def build(b, x, y):
        s = b.softmax(b.add(b.mul(x, 2.0), y), axis=axis)
        return [s, b.mul(s, 3.0), b.sum(b.mul(s, x), axes=(axis,))]
    return build


# cpu -> (axis, shape): the inner axis reduced and kept, rows short and long (2 vectors and a tail, blocked sums)
_SOFTMAX_SHAPES = {None: [(-1, (5, 37)), (-1, (3, 2100)), (0, (19, 21)), (1, (2, 7, 5)), (-1, (0, 4))],
                   "haswell": [(-1, (4, 29)), (0, (11, 17)), (1, (3, 5, 9))]}


@pytest.mark.parametrize("cpu", list(_SOFTMAX_SHAPES), ids=lambda c: c or "host")
def test_softmax_result_read_after_its_sum_pass(cpu, monkeypatch) -> None:
    force_cpu(cpu, monkeypatch)
    for axis, shape in _SOFTMAX_SHAPES[cpu]:
        (node, operands), = regions(_softmax_read_after_its_sum(axis), [shape, shape], kind="reduction")
        assert "softmax" in [n.op for n in node.attr["body"].nodes]
        got = check(node, operands, 64 * F32_EPS, 64 * F32_EPS)
        assert not op_by_op(node)
        if got[0].size:
            np.testing.assert_allclose(got[0].sum(axis=axis), 1.0, rtol=1e-5)


# --- gemm and conv ------------------------------------------------------------------------------------------


def _two_results(b, pre):
    """A region result that leaves (the pre-activation) besides the final one."""
    return [pre, b.tanh(pre)]


@pytest.mark.parametrize("build, shapes", [
    (lambda b, x, w, c: b.relu(b.add(b.matmul(x, w), c)), [(9, 20), (20, 35), (35,)]),
    (lambda b, x, w, c, r: b.add(b.gelu(b.add(b.matmul(x, w), c)), r), [(2, 9, 20), (20, 35), (35,), (2, 9, 35)]),
    (lambda b, x, w, c: _two_results(b, b.add(b.matmul(x, w), c)), [(13, 8), (8, 3), (13, 1)]),
    (lambda b, x, w: b.gt(b.matmul(x, w), 0.0), [(6, 30), (30, 17)]),
    (lambda b, x, w, c: b.mul(b.matmul(x, w), c), [(30,), (30, 17), ()]),
])
def test_gemm_regions_fuse_their_epilogue(build, shapes) -> None:
    found = regions(build, shapes, kind="gemm")
    assert len(found) == 1
    for node, operands in found:
        check(node, operands, 64 * F32_EPS, 64 * F32_EPS * np.sqrt(shapes[0][-1]))
        assert not op_by_op(node)


CONV_REGIONS = [
    (lambda b, x, w, c: b.relu(b.add(b.conv2d(x, w, padding=(1, 1)), c)), [(2, 3, 8, 9), (5, 3, 3, 3), (5, 1, 1)],
     True),
    (lambda b, x, w, c, r: b.add(b.conv2d(x, w, c, stride=(2, 2)), r), [(1, 4, 9, 9), (4, 4, 3, 3), (4,), (1, 4, 4, 4)],
     True),
    (lambda b, x, w, r: b.add(b.conv2d(x, w), r), [(1, 2, 6, 7), (3, 2, 3, 3), (1, 1, 4, 1)], False),
]


@pytest.mark.parametrize("build, shapes, fused", CONV_REGIONS)
def test_conv_regions_fuse_linear_epilogues(build, shapes, fused: bool) -> None:
    for node, operands in regions(build, shapes, kind="conv"):
        check(node, operands, 64 * F32_EPS, 64 * F32_EPS * 6)
        assert op_by_op(node) != fused


@pytest.mark.parametrize("cpu", [None, "haswell"])
@pytest.mark.parametrize("build, shapes, fused", CONV_REGIONS)
def test_float64_conv_regions_fuse_linear_epilogues(build, shapes, fused: bool, cpu, monkeypatch) -> None:
    """conv_tiled starts from the bias and stores through the epilogue."""
    force_cpu(cpu, monkeypatch)
    for node, operands in regions(build, shapes, dtype="float64", kind="conv"):
        check(node, operands, 1e-13, 1e-13 * 6)
        assert op_by_op(node) != fused


@pytest.mark.parametrize("build, shapes", [
    (lambda b, x, w, c: b.relu(b.add(b.matmul(x, w), c)), [(9, 20), (20, 35), (35,)]),
    (lambda b, x, w, c, r: b.add(b.gelu(b.add(b.matmul(x, w), c)), r), [(2, 9, 300), (300, 35), (35,), (2, 9, 35)]),
    (lambda b, x, w, c: _two_results(b, b.add(b.matmul(x, w), c)), [(13, 8), (8, 3), (13, 1)]),
    (lambda b, x, w, c: b.mul(b.matmul(x, w), c), [(30,), (30, 17), ()]),
    (lambda b, x, w, c: b.tanh(b.add(b.linear(x, w), c)), [(3, 40), (7, 40), (7,)]),
    (lambda b, x, w, c: b.sigmoid(b.add(b.linear(x, w), c)), [(20, 300), (7, 300), (20, 1)]),
])
@pytest.mark.parametrize("cpu", [None, "haswell"])
def test_float64_gemm_regions_fuse_their_epilogue(build, shapes, cpu, monkeypatch) -> None:
    """The packed tile (its epilogue on the last of several K blocks where K = 300) and the dot tile (a linear of 3
    rows) store C through the epilogue, side results too."""
    force_cpu(cpu, monkeypatch)
    found = regions(build, shapes, dtype="float64", kind="gemm")
    assert len(found) == 1
    for node, operands in found:
        check(node, operands, 1e-13, 1e-13 * np.sqrt(shapes[0][-1]))
        assert not op_by_op(node)


def test_float64_gemm_region_without_a_float64_result_falls_back_op_by_op() -> None:
    (node, operands), = regions(lambda b, x, w: b.gt(b.matmul(x, w), 0.0), [(6, 30), (30, 17)], dtype="float64",
                                kind="gemm")
    check(node, operands)
    assert op_by_op(node)


# Region bodies fuse never forms, as IR text from outside may hold them: each kernel gives up before it is declared
# and the region runs op by op, or the text is refused, never a crash.
HOSTILE_BODIES = {
    "elementwise slice of a computed value": ("(%x: f32[4,8]) -> (f32[4,4])", "(%in0: f32[4,8]) -> (f32[4,4])", """
    %0 = exp %in0 : f32[4,8]
    %1 = slice %0 {starts=[0, 0], steps=[1, 1], stops=[4, 4]} : f32[4,4]
    return %1""", "elementwise", "[4, 4]", "f32[4,4]"),
    "elementwise transpose of the inner axis": ("(%x: f32[8,8]) -> (f32[8,8])", "(%in0: f32[8,8]) -> (f32[8,8])", """
    %0 = transpose %in0 {perm=[1, 0]} : f32[8,8]
    %1 = exp %0 : f32[8,8]
    return %1""", "elementwise", "[8, 8]", "f32[8,8]"),
    "movement join of a constant": ("(%x: f32[4,8]) -> (f32[4,9])", "(%in0: f32[4,8]) -> (f32[4,9])", """
    %0 = constant {value=array<f32[4,1]>[1.0, 2.0, 3.0, 4.0]} : f32[4,1]
    %1 = concat %in0, %0 {axis=1} : f32[4,9]
    return %1""", "movement", "[4, 9]", "f32[4,9]"),
    "movement reshape that needs a copy": ("(%x: f32[4,8]) -> (f32[32])", "(%in0: f32[4,8]) -> (f32[32])", """
    %0 = transpose %in0 {perm=[1, 0]} : f32[8,4]
    %1 = reshape %0 {shape=[32]} : f32[32]
    return %1""", "movement", "[32]", "f32[32]"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_BODIES))
def test_regions_fuse_never_forms_run_op_by_op(name: str) -> None:
    signature, body_signature, body, kind, shape, result = HOSTILE_BODIES[name]
    text = (f"graph @g{signature} {{\n  %0 = fused %x {{axes=[], body=graph @{kind}{body_signature} {{{body}\n  }}, "
            f"kind=\"{kind}\", shape={shape}}} : {result}\n  return %0\n}}")
    graph = braze.ir.parse(text)
    x = np.random.default_rng(0).standard_normal(graph.inputs[0].shape).astype(np.float32)
    got = braze.compile(graph, pipeline=["plan_memory"])(x)
    np.testing.assert_allclose(got, braze.ir.interpret(graph, [x])[0], rtol=1e-6)
