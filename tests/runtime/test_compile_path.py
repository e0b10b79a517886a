"""The one compile path (runtime/compile_path.py): which passes run, buffer updates dropped whatever the
pipeline, memory planned afresh for graphs from outside, and unknown keyword options refused."""
from __future__ import annotations

import numpy as np
import pytest

import braze
from braze import ir
from braze.ir.errors import BrazeError
from braze.runtime.compile_path import compile_graph, compile_passes

UPDATING = """graph @g(%x: f32[4,8]) -> (f32[4,8], f32[4,8]) attributes {outputs=["output", "buffer_update:acc"]} {
  %acc = param {buffer=true, id=0, path="acc", trainable=false} : f32[4,8]
  %0 = exp %x : f32[4,8]
  %1 = add %acc, %x : f32[4,8]
  return %0, %1
}
"""


def updating() -> ir.Graph:
    return ir.parse(UPDATING).replace(weights={"acc": np.ones((4, 8), np.float32)})


def two_gemms() -> ir.Graph:
    """softmax(x @ y) @ y: two GEMMs around a softmax, so the arena holds intermediates."""
    b = ir.GraphBuilder("g")
    x = b.input("x", ir.TensorType((4, 16), ir.float32))
    y = b.input("y", ir.TensorType((16, 16), ir.float32))
    return b.finish([b.matmul(b.softmax(b.matmul(x, y), axis=1), y)])


def data(*shape: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("pipeline,untrusted,passes", [
    ("inference", False, braze.ir.passes.PIPELINES["inference"]),
    ("fuse", False, ("drop_buffer_updates", "fuse", "plan_memory")),
    (["drop_buffer_updates", "dce", "plan_memory"], False, ("drop_buffer_updates", "dce", "plan_memory")),
    (None, False, ()),
    (None, True, ("plan_memory",)),
])
def test_compile_path_passes_drop_updates_first_and_plan_memory_last(pipeline, untrusted, passes) -> None:
    assert compile_passes(pipeline, untrusted=untrusted) == passes


@pytest.mark.parametrize("pipeline", ["inference", "fuse", "dce"])
def test_compile_path_drops_buffer_updates_with_any_pipeline(pipeline: str) -> None:
    exe = compile_graph(updating(), pipeline=pipeline)
    x = data(4, 8)
    assert len(exe.output_types) == 1
    np.testing.assert_allclose(exe(x), np.exp(x), rtol=1e-6)


def bogus_plan(graph: ir.Graph) -> ir.Graph:
    """The optimized graph with a memory plan that puts every buffer at offset 0 of an empty arena."""
    optimized = braze.optimize(graph)
    plan = optimized.attributes["memory_plan"]
    assert plan["offsets"] and plan["arena_bytes"] > 0  # the graph has intermediates, so the plan matters
    wrong = {**plan, "arena_bytes": 0, "offsets": dict.fromkeys(plan["offsets"], 0)}
    return optimized.replace(attributes={**optimized.attributes, "memory_plan": wrong})


@pytest.mark.parametrize("how", [dict(pipeline=None, untrusted=True), dict(pipeline="inference")])
def test_compile_path_plans_memory_afresh_for_a_graph_from_outside(how: dict) -> None:
    graph = bogus_plan(two_gemms())
    exe = compile_graph(graph, **how)
    assert exe.built.arena_bytes > 0
    x, y = data(4, 16), data(16, 16)
    np.testing.assert_allclose(exe(x, y), ir.interpret(two_gemms(), [x, y])[0], rtol=1e-5, atol=1e-6)


def test_compile_path_compiles_a_trusted_optimized_graph_as_it_is() -> None:
    optimized = braze.optimize(two_gemms())
    exe = compile_graph(optimized, pipeline=None)
    assert exe.graph is optimized


def test_compile_a_graph_with_a_stale_plan_replans_it() -> None:
    compiled = braze.compile(bogus_plan(two_gemms()))
    x, y = data(4, 16), data(16, 16)
    np.testing.assert_allclose(compiled(x, y), ir.interpret(two_gemms(), [x, y])[0], rtol=1e-5, atol=1e-6)


def test_compile_without_a_pipeline_takes_only_an_optimized_graph() -> None:
    optimized = braze.optimize(two_gemms())
    assert braze.compile(optimized, pipeline=None).graph is optimized
    with pytest.raises(BrazeError, match="pipeline=None compiles a graph braze.optimize returned"):
        braze.compile(lambda a: braze.exp(a), data(2, 2), pipeline=None)


def test_compile_refuses_an_unknown_keyword_and_lists_the_valid_ones() -> None:
    with pytest.raises(BrazeError, match=r"braze.compile: unknown keyword argument\(s\) 'thread'; valid keywords "
                                         r"\(with the options of the passes drop_buffer_updates, .*\): pipeline, "
                                         r"threads, mode, eval, flags, flops_per_byte, fold_params, policy, "
                                         r"quantized_weights$"):
        braze.compile(lambda a: braze.exp(a), data(2, 2), thread=2)


def test_optimize_refuses_an_unknown_keyword_and_lists_the_valid_ones() -> None:
    with pytest.raises(BrazeError, match=r"braze.optimize: unknown keyword argument\(s\) 'polcy'.*: pipeline, dump, "
                                         r"verify, report, flags, flops_per_byte, fold_params, policy, "
                                         r"quantized_weights$"):
        braze.optimize(two_gemms(), polcy="keep")


def test_compile_path_checks_the_fresh_plan_of_an_untrusted_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    import braze.runtime.compile_path as path
    planner = path.optimize
    monkeypatch.setattr(path, "optimize", lambda graph, passes, **options: bogus_plan(planner(graph, passes)))
    monkeypatch.setenv("BRAZE_CACHE", "0")  # keep the bogus planner's graphs out of the optimized-graph cache
    with pytest.raises(ir.VerifyError, match="memory_plan .* inside the 0-byte arena"):
        path.planned_graph(two_gemms(), pipeline="inference", untrusted=True)
    assert path.planned_graph(two_gemms(), pipeline="inference").attributes["memory_plan"]["arena_bytes"] == 0


def test_compile_path_refuses_an_untrusted_graph_larger_than_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    import braze.runtime.compile_path as path
    needed = 4 * (4 * 16 + 16 * 16 + 4 * 16)  # the inputs and the output, before any arena
    monkeypatch.setattr(path, "physical_memory", lambda: needed)
    with pytest.raises(braze.TensorSizeError, match=f"@g: running it needs [0-9]+ bytes .*this machine's {needed} "):
        path.planned_graph(two_gemms(), pipeline="inference", untrusted=True)
    assert path.planned_graph(two_gemms(), pipeline="inference").attributes["memory_plan"]["arena_bytes"] > 0


def test_compile_path_replans_a_verified_untrusted_graph_without_verifying_it_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import braze.ir.passes.manager as manager
    import braze.runtime.compile_path as path
    calls: list[str] = []
    verify = manager.verify_graph
    monkeypatch.setattr(manager, "verify_graph", lambda g, *passed: (calls.append(g.name), verify(g, *passed))[1])
    optimized = braze.optimize(two_gemms())
    calls.clear()
    planned = path.planned_graph(optimized, pipeline=None, untrusted=True, verified=True)
    assert calls == [] and planned.attributes["memory_plan"] == optimized.attributes["memory_plan"]
    path.planned_graph(optimized, pipeline=None, untrusted=True)
    assert calls == ["g", "g"]  # the input and the plan_memory result


def test_compile_path_hears_of_a_pass_cache_miss_before_the_passes_run(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path) -> None:
    """planned_graph's on_miss runs when the passes must run (so compile workers can start beside them), never on a
    pass-cache hit; compile_graph starts the workers there for a graph worth spreading."""
    from braze.codegen import graph_cache
    from braze.runtime.compile_path import planned_graph
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("BRAZE_CACHE", raising=False)
    misses: list[int] = []
    planned_graph(two_gemms(), on_miss=lambda: misses.append(1))
    planned_graph(two_gemms(), on_miss=lambda: misses.append(2))
    assert misses == [1]
    expected: list[str] = []
    monkeypatch.setattr(graph_cache, "expect_compile", lambda graph: expected.append(graph.name))
    monkeypatch.setenv("BRAZE_CACHE", "0")
    compile_graph(two_gemms())
    assert expected == ["g"]


def test_compile_pauses_the_collector_and_switches_it_back_on(monkeypatch):
    import gc

    from braze.runtime import compile_path
    seen = []
    real = compile_path._planned
    monkeypatch.setattr(compile_path, "_planned", lambda *a, **k: (seen.append(gc.isenabled()), real(*a, **k))[1])
    assert gc.isenabled()
    model = braze.nn.Linear(8, 3).eval()
    x = data(2, 8)
    compiled = braze.compile(model, x)
    assert seen == [False] and gc.isenabled()
    with braze.no_grad():
        np.testing.assert_allclose(compiled(x), model(braze.from_numpy(x)).numpy(), rtol=1e-5, atol=1e-6)


def test_compile_leaves_a_collector_switched_off_by_the_user_off():
    import gc
    gc.disable()
    try:
        compile_graph(updating(), pipeline="inference")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_compile_switches_the_collector_back_on_after_an_error():
    import gc
    with pytest.raises(BrazeError):
        braze.compile(braze.nn.Linear(8, 3).eval(), data(2, 5))  # the input does not fit the layer
    assert gc.isenabled()
