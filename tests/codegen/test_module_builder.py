"""The whole-graph module: entry layout, buffer placement, output copies, constants, barriers and names.

These tests use the small checking lowering of tests/codegen/checking_lowering.py so that they exercise the module builder
and the runtime alone; the model tests in tests/runtime run the real lowerings.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from braze import ir
from braze.codegen import PTR, define_function
from braze.codegen.lower.base import KernelContext, KernelSpec
from braze.codegen import compile_ir, host_target
from braze.codegen.graph_cache import compile_built
from braze.codegen.module_builder import INLINE_CONSTANT_BYTES, SPLIT_WORK, build_module
from braze.ir.errors import BrazeError, CodegenError
from braze.ir.passes import optimize
from braze.ir.passes.plan_memory import read_through_views
from braze.runtime.executable import Executable
from braze.runtime.memory import aligned_empty

from ..ir.passes.random_dags import STEPS, random_dags
from .checking_lowering import asserting_lowering, checking_lower

F32 = ir.float32


def planned(graph: ir.Graph) -> ir.Graph:
    return optimize(graph, ["plan_memory"])


def chain_graph(shape: tuple[int, ...] = (5, 7), length: int = 4) -> ir.Graph:
    """x, y -> neg(mul(relu(add(x, w)), y)) and friends; returns the last value, an intermediate, x and w."""
    b = ir.GraphBuilder("chain")
    x = b.input("x", ir.TensorType(shape, F32))
    y = b.input("y", ir.TensorType(shape, F32))
    w = b.param("w", ir.TensorType(shape, F32), id=1)
    h = b.relu(b.add(x, w))
    mid = h
    for k in range(length):
        h = b.mul(h, y) if k % 2 else b.neg(h)
    weights = {"w": (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) - 17) / 7}
    return planned(b.finish([h, mid, x, w, h], weights=weights))


def random_inputs(graph: ir.Graph, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(v.shape).astype(np.float32) for v in graph.inputs]


def check(exe: Executable, graph: ir.Graph, inputs: list[np.ndarray]) -> None:
    got = exe.run(inputs)
    want = ir.interpret(graph, inputs)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_module_builder_chain_matches_the_interpreter(threads: int) -> None:
    g = chain_graph()
    check(Executable.build(g, threads=threads, lower=checking_lower), g, random_inputs(g))


def test_module_builder_outputs_that_no_kernel_writes_are_copied() -> None:
    g = chain_graph()
    exe = Executable.build(g, threads=1, lower=checking_lower)
    x, y = random_inputs(g)
    out = exe(x, y)
    np.testing.assert_array_equal(out[2], x)               # a graph input returned
    np.testing.assert_array_equal(out[3], g.weights["w"])  # a param returned
    np.testing.assert_array_equal(out[4], out[0])          # the same value returned twice
    assert out[2] is not x and not np.shares_memory(out[0], out[4])


def test_module_builder_barrier_orders_kernels_across_threads() -> None:
    g = chain_graph(shape=(SPLIT_WORK + 4099,), length=60)  # every kernel large enough to be split
    exe = Executable.build(g, threads=2, lower=checking_lower)
    for seed in range(20):
        check(exe, g, random_inputs(g, seed))


def _entry_text(graph: ir.Graph, **kwargs) -> str:
    built = build_module(planned(graph), **kwargs)
    text = str(built.module)
    entry = text[text.index(f"define void @\"{built.entry}\""):]
    return entry[:entry.index("\n}\n")]


def test_module_builder_small_kernels_run_on_thread_0_without_barriers() -> None:
    """Kernels below SPLIT_WORK run on thread 0 alone, one after another with no barrier between them; a large one
    is split over every thread, with a barrier on each side."""
    small = _entry_text(chain_graph(shape=(5, 7)), lower=checking_lower)
    assert "braze.barrier" not in small.split("{", 1)[1]
    graph = chain_graph(shape=(SPLIT_WORK + 1,), length=2)  # add, relu, neg, mul; then outputs copied
    large = _entry_text(graph, lower=checking_lower)
    assert large.count('call void @"braze.barrier"') == 4  # between the four kernels and before the copies


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_module_builder_small_and_split_kernels_mixed_match_the_interpreter(threads: int) -> None:
    """Large elementwise kernels (split) around a reduction and small ops on its result (thread 0 alone)."""
    n = SPLIT_WORK + 1001
    b = ir.GraphBuilder("mixed")
    x = b.input("x", ir.TensorType((n,), F32))
    h = b.relu(b.neg(x))
    total = b.sum(h, axes=(0,), keepdim=True)
    scale = b.mul(b.exp(b.neg(total)), total)
    g = planned(b.finish([b.add(h, scale), scale]))
    check(Executable.build(g, threads=threads), g, random_inputs(g))


@pytest.mark.skipif(not host_target().is_x86, reason="the spin is timed by the x86 time-stamp counter")
def test_module_builder_barrier_spins_for_a_time_not_a_count() -> None:
    """How long a `pause` takes differs 50-fold between x86 cores; the barrier's spin budget is in TSC ticks."""
    text = str(build_module(planned(chain_graph()), lower=checking_lower).module)
    barrier = text[text.index("define internal void @\"braze.barrier\""):]
    barrier = barrier[:barrier.index("\n}\n")]
    assert "llvm.x86.rdtsc" in barrier and "llvm.x86.sse2.pause" in barrier


def test_module_builder_scratch_is_64_byte_aligned_and_the_callers_arrays_are_used_in_place() -> None:
    """The promise: scratch 64-byte aligned, results and operands aligned to their elements, also when the caller's
    input and out= array lie off a 64-byte boundary (used in place: tests/runtime/test_call_path.py)."""
    g = chain_graph(shape=(3, 11))
    exe = Executable.build(g, threads=2, lower=asserting_lowering)
    x, y = random_inputs(g)
    block = np.zeros(2 * x.size + 2, np.float32)
    unaligned = block[1:x.size + 1].reshape(x.shape)  # 4 bytes past a numpy allocation: never 64-byte aligned
    unaligned[...] = x
    given = block[x.size + 2:].reshape(x.shape)
    assert unaligned.ctypes.data % 64 and given.ctypes.data % 64
    out = exe(unaligned, y, out=(given, *(np.empty_like(o) for o in exe(unaligned, y)[1:])))
    assert out[0] is given and not np.isnan(given).any()
    check(exe, g, [unaligned, y])


def test_module_builder_small_constants_are_llvm_globals_and_large_ones_weights() -> None:
    n_small, n_large = 6, INLINE_CONSTANT_BYTES // 4 + 1
    b = ir.GraphBuilder("consts")
    x = b.input("x", ir.TensorType((n_small,), F32))
    z = b.input("z", ir.TensorType((n_large,), F32))
    small = b.constant(np.linspace(-1, 1, n_small, dtype=np.float32))
    large = b.constant(np.linspace(-3, 3, n_large, dtype=np.float32))
    g = planned(b.finish([b.add(x, small), b.mul(z, large), small]))
    built = build_module(g, lower=checking_lower)
    text = str(built.module)
    assert "braze.const." in text and "private unnamed_addr constant" in text
    assert [s.kind for s in built.weights] == ["constant"]
    check(Executable.build(g, lower=checking_lower), g, random_inputs(g))


def test_module_builder_names_are_deterministic_and_only_the_entry_is_exported() -> None:
    g = chain_graph()
    first, second = build_module(g, lower=checking_lower), build_module(g, lower=checking_lower)
    assert str(first.module) == str(second.module)
    assert first.entry.startswith("braze_entry_") and first.name.startswith("braze_")
    separate = build_module(g, lower=checking_lower, reuse=False)
    assert len({k.name for k in separate.kernels}) == len(separate.kernels)
    assert [k.name for k in first.kernels] == [k.name for k in second.kernels]
    assert re.fullmatch(r"k_[0-9a-f]{16}_add", first.kernels[0].name)
    assert [k.op for k in first.kernels] == ["add", "relu", "neg", "mul", "neg", "mul"]
    exported = Executable.build(g, lower=checking_lower).library.symbols
    assert exported == (*(p.name for p in first.parts), first.entry)
    for part in first.parts:  # a part exports its kernel alone; its helpers stay internal
        assert re.findall(r'^define (?!internal|private)[^@]*@"?([^"(]+)', str(part.module), re.M) == [part.name]


def test_module_builder_kernels_are_named_by_content_across_graphs() -> None:
    small, other = chain_graph(), chain_graph(shape=(2, 2))
    again = chain_graph()
    assert [k.name for k in build_module(small, lower=checking_lower).kernels] == \
        [k.name for k in build_module(again, lower=checking_lower).kernels]
    assert not {k.name for k in build_module(small, lower=checking_lower).kernels} & \
        {k.name for k in build_module(other, lower=checking_lower).kernels}


def test_module_builder_identical_nodes_share_one_kernel() -> None:
    g = chain_graph()
    built = build_module(g, lower=checking_lower)
    names = [k.name for k in built.kernels]
    assert names[2] == names[4] and names[3] == names[5] and built.distinct_kernels == 4
    assert len(built.parts) == 4 and len(re.findall(r'declare void @"?k_', str(built.module))) == 4


def test_module_builder_kernel_reuse_keeps_outputs_bit_identical() -> None:
    g = chain_graph()
    inputs = random_inputs(g)
    shared = Executable.build(g, lower=checking_lower, use_cache=False).run(inputs)
    separate = Executable(built := build_module(g, lower=checking_lower, reuse=False),
                          compile_built(built, use_cache=False)).run(inputs)
    for a, b in zip(shared, separate):
        assert a.tobytes() == b.tobytes()


def test_module_builder_two_lowerings_of_one_graph_get_distinct_entries() -> None:
    g = chain_graph(shape=(2, 2))
    plain, checked = build_module(g, lower=checking_lower), build_module(g, lower=asserting_lowering)
    assert plain.entry != checked.entry
    Executable.build(g, lower=checking_lower), Executable.build(g, lower=asserting_lowering)


def test_module_builder_requires_a_memory_plan() -> None:
    b = ir.GraphBuilder("unplanned")
    x = b.input("x", ir.TensorType((3,), F32))
    g = b.finish([b.relu(x)])
    with pytest.raises(CodegenError, match="has no memory plan"):
        build_module(g, lower=checking_lower)


def test_module_builder_refuses_flag_leaves() -> None:
    b = ir.GraphBuilder("flagged")
    x = b.input("x", ir.TensorType((3,), F32))
    b.flag("drop.training", id=3, value=False)
    g = planned(b.finish([b.relu(x)]))
    with pytest.raises(CodegenError, match=r"flag leaves \(drop.training\)"):
        build_module(g, lower=checking_lower)


def test_module_builder_checks_the_kernel_signature() -> None:
    def wrong(node: ir.Node, ctx: KernelContext) -> KernelSpec:
        fn = define_function(ctx.module, ctx.name, [("out", PTR)], internal=True)  # no operands, no scratch
        return KernelSpec(ctx.name, fn, 0, node.op)

    g = chain_graph()
    with pytest.raises(CodegenError, match=r"kernel 'k_[0-9a-f]{16}_add' for add \(node 1\) has signature"):
        build_module(g, lower=wrong)


def test_module_builder_lowering_errors_name_the_op() -> None:
    b = ir.GraphBuilder("unsupported")
    x = b.input("x", ir.TensorType((3,), F32))
    g = planned(b.finish([b.exp(x)]))
    with pytest.raises(CodegenError, match="no rule for exp"):
        build_module(g, lower=checking_lower)


def test_module_builder_missing_weight_is_an_error_before_any_call() -> None:
    g = chain_graph()
    g = g.replace(weights={})
    with pytest.raises(CodegenError, match="no weight for param 'w'"):
        Executable.build(g, lower=checking_lower)


def test_module_builder_weight_of_the_wrong_shape_is_an_error() -> None:
    g = chain_graph()
    g = g.replace(weights={"w": np.zeros((7, 5), np.float32)})
    with pytest.raises(BrazeError, match=r"weight 'w' is float32\[7, 5\], the graph declares f32\[5,7\]"):
        Executable.build(g, lower=checking_lower)


def test_module_builder_empty_buffers() -> None:
    g = chain_graph(shape=(0, 4))
    exe = Executable.build(g, threads=2, lower=checking_lower)
    out = exe(*random_inputs(g))
    assert all(o.shape == (0, 4) for o in out)


def test_module_builder_weights_are_private_aligned_copies() -> None:
    g = chain_graph()
    exe = Executable.build(g, lower=checking_lower)
    inputs = random_inputs(g)
    before = exe.run(inputs)[0].copy()
    g.weights["w"][...] = 0  # the caller's array changes; the compiled executable keeps its own copy
    np.testing.assert_array_equal(exe.run(inputs)[0], before)


def test_module_builder_aligned_empty_is_aligned() -> None:
    for n in range(0, 40, 3):
        assert aligned_empty((n,), np.float32).ctypes.data % 64 == 0


def _kernel_ops(exe: Executable) -> list[str]:
    return [k.op for k in exe.built.kernels]


@pytest.mark.parametrize("threads", [1, 2])
def test_module_builder_reshapes_between_kernels_run_no_kernel(threads: int) -> None:
    """A reshape that is not an output names its operand's bytes (plan_memory.storage_aliases): no kernel, no copy;
    a returned reshape has its operand computed into the output, unless the operand is an input."""
    n = SPLIT_WORK + 3  # large enough to split over the threads
    b = ir.GraphBuilder("aliases")
    x = b.input("x", ir.TensorType((n, 2), F32))
    e = b.exp(x)
    flat = b.reshape(e, shape=(2 * n,))
    late = b.neg(b.reshape(b.transpose(x, perm=(1, 0)), shape=(2 * n,)))  # placed while e lives on through flat
    both = b.add(flat, late)
    g = planned(b.finish([b.reshape(both, shape=(n, 2)), b.unsqueeze(b.tanh(x), axes=(0,)), b.squeeze(b.unsqueeze(
        x, axes=(1,)), axes=(1,))]))
    exe = Executable.build(g, threads=threads)
    assert _kernel_ops(exe) == ["exp", "transpose", "neg", "add", "tanh", "squeeze"]
    for got, want in zip(exe.run(random_inputs(g)), ir.interpret(g, random_inputs(g))):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)  # exp's few ulps


def test_module_builder_a_reshape_of_a_param_reads_the_weight() -> None:
    b = ir.GraphBuilder("param_view")
    x = b.input("x", ir.TensorType((3, 12), F32))
    w = b.param("w", ir.TensorType((4, 3, 4), F32), id=1)
    weights = {"w": np.random.default_rng(1).standard_normal((4, 3, 4)).astype(np.float32)}
    g = planned(b.finish([b.tanh(b.matmul(x, b.reshape(w, shape=(12, 4))))], weights=weights))
    exe = Executable.build(g, threads=1)
    assert "reshape" not in _kernel_ops(exe)
    got, = exe.run(random_inputs(g))
    np.testing.assert_allclose(got, ir.interpret(g, random_inputs(g))[0], rtol=1e-5, atol=1e-6)


RANDOM = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@RANDOM
@given(random_dags(max_steps=16, steps=STEPS + ["reshape", "slice", "transpose", "concat"] * 3),
       st.sampled_from([1, 2]))
def test_module_builder_random_graphs_with_views_match_the_interpreter(g: ir.Graph, threads: int) -> None:
    """Random DAGs (reshapes, slices, transposes and concats among their steps) fused, planned and compiled,
    against the reference interpreter."""
    g = optimize(g, ["fuse", "plan_memory"])
    inputs = [np.random.default_rng(3).standard_normal(v.shape) for v in g.inputs]
    got, want = Executable.build(g, threads=threads).run(inputs), ir.interpret(g, inputs)
    for a, w in zip(got, want):
        np.testing.assert_allclose(a, w, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("threads", [1, 2])
def test_module_builder_elementwise_regions_read_slices_through_views(threads: int) -> None:
    """View ops only an elementwise region reads join it, and its kernel reads through them (no copies); one that
    leaves the innermost axis strided (a transposed slice) stays a copy of its own (one movement region)."""
    n = 192  # n * n above SPLIT_WORK: split over the threads
    b = ir.GraphBuilder("views")
    x = b.input("x", ir.TensorType((n, 2 * n), F32))
    e = b.exp(x)
    left = b.slice(e, starts=(0, 0), stops=(n, n), steps=(1, 1))
    right = b.slice(e, starts=(0, n), stops=(n, 2 * n), steps=(1, 1))
    gated = b.mul(b.sigmoid(left), right)
    crossed = b.add(gated, b.transpose(b.slice(e, starts=(0, 1), stops=(n, n + 1), steps=(1, 1)), perm=(1, 0)))
    g = optimize(b.finish([b.tanh(b.reshape(crossed, shape=(n * n,)))]), ["fuse", "plan_memory"])
    assert [[m.op for m in node.attr["body"].nodes] for node in g.nodes if node.op == "fused"] == [
        ["slice", "transpose"], ["slice", "slice", "sigmoid", "mul", "add"], ["reshape", "tanh"]]
    exe = Executable.build(g, threads=threads)
    assert _kernel_ops(exe) == ["exp", "fused:movement", "fused:elementwise", "fused:elementwise"]
    for got, want in zip(exe.run(random_inputs(g)), ir.interpret(g, random_inputs(g))):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_module_builder_a_transposed_operand_is_not_overwritten_in_place() -> None:
    """A transpose of the outer axes keeps rows contiguous, so the region reads through it; the result has the
    operand's size, but writing it over the operand would overwrite rows still to be read."""
    b = ir.GraphBuilder("transposed")
    x = b.input("x", ir.TensorType((16, 24, 32), F32))
    e = b.exp(x)  # an arena buffer dying at the region that reads it transposed
    g = optimize(b.finish([b.transpose(b.add(b.transpose(e, perm=(1, 0, 2)), b.scalar(1.0, e)), perm=(2, 1, 0))]),
                 ["fuse", "plan_memory"])
    region = next(node for node in g.nodes if node.op == "fused")
    assert [m.op for m in region.attr["body"].nodes] == ["transpose", "constant", "add"]
    assert read_through_views(region) == {region.inputs[0].name}
    offsets = g.attributes["memory_plan"]["offsets"]
    assert offsets[region.inputs[0].name] != offsets[region.out.name]
    got, = Executable.build(g, threads=1).run(random_inputs(g))
    np.testing.assert_allclose(got, ir.interpret(g, random_inputs(g))[0], rtol=1e-6)


@pytest.mark.parametrize("threads", [1, 2])
def test_module_builder_movement_regions_copy_each_operand_once(threads: int) -> None:
    """torch.roll (two slices and a concat), a stack of strided slices and a transposed slice are one kernel each,
    reading straight from the graph's input."""
    b = ir.GraphBuilder("moves")
    x = b.input("x", ir.TensorType((96, 4099), F32))
    rolled = b.concat(b.slice(x, starts=(0, 4096), stops=(96, 4099), steps=(1, 1)),
                      b.slice(x, starts=(0, 0), stops=(96, 4096), steps=(1, 1)), axis=1)
    pairs = b.stack(b.slice(x, starts=(0, 0), stops=(96, 4098), steps=(2, 2)),
                    b.slice(x, starts=(1, 1), stops=(96, 4099), steps=(2, 2)), axis=1)
    corner = b.transpose(b.slice(x, starts=(3, 5), stops=(83, 4005), steps=(1, 1)), perm=(1, 0))
    g = optimize(b.finish([rolled, pairs, corner]), ["fuse", "plan_memory"])
    assert [n.attr["kind"] for n in g.nodes if n.op == "fused"] == ["movement"] * 3
    exe = Executable.build(g, threads=threads)
    assert _kernel_ops(exe) == ["fused:movement"] * 3
    check(exe, g, random_inputs(g))


def test_module_builder_a_movement_body_of_other_ops_is_refused() -> None:
    text = """graph @bad(%x: f32[4,8]) -> (f32[4,8]) {
  %0 = fused %x {axes=[], body=graph @movement(%in0: f32[4,8]) -> (f32[4,8]) {
    %0 = exp %in0 : f32[4,8]
    %1 = slice %0 {starts=[0, 0], steps=[1, 1], stops=[4, 8]} : f32[4,8]
    return %1
  }, kind="movement", shape=[4, 8]} : f32[4,8]
  return %0
}"""
    with pytest.raises(BrazeError, match="a movement region's body holds view ops .* but @movement holds exp, slice"):
        ir.parse(text)
