"""The harness's own arithmetic: the FMA peak kernel computes what it claims, and "% of peak" is FLOPs / time / peak."""
from __future__ import annotations

import numpy as np
import pytest

import braze
from benchmarks import peak, report, run


def test_benchmarks_fma_kernel_runs_every_chain_every_iteration() -> None:
    kernel, flops = peak.fma_kernel()
    out = np.ones(64, np.float32)
    kernel(10, out.ctypes.data)  # each chain: acc = acc * 1 + 1, from 1 + 0.001 k
    lanes = flops // (2 * peak.ACCUMULATORS)
    want = sum(11 + 0.001 * k for k in range(peak.ACCUMULATORS))
    np.testing.assert_allclose(out[:lanes], want, rtol=1e-6)


RESULTS = {
    "machine": {"date": "2026-01-01 00:00 UTC", "python": "3.11", "numpy": "2.4", "cpu": "znver3",
                "cpu_model": "AMD EPYC", "cpus": 2},
    "load": {"before": [0.5, 0.4, 0.3], "after": [1.0, 0.5, 0.3]}, "command": "python -m benchmarks.run",
    "runs": [{"threads": 1, "peak_gflops": 100.0,
              "models": {"mlp b64": {"seconds": {"braze compiled": 1e-3, "numpy eager": 2e-3, "torch.compile": 4e-3,
                                                 "torch.compile freezing": 3e-3},
                                     "notes": {"flops": 5e7, "braze threads": 1, "first_call_s": 1.1e-3}}},
              "sgemm": [{"n": 256, "braze_gflops": 80.0, "numpy_gflops": 40.0}]}],
}


def test_benchmarks_tables_show_percent_of_peak_and_the_better_torch_compile() -> None:
    table = report.markdown(RESULTS)
    assert "| mlp b64 | 1 (braze: 1) | 1.00 ms | 50% | 1.10 ms | 2.00 ms (2.00x) | 3.00 ms (3.00x) (freezing) |" in table
    assert "| 256 | 1 | 80.0 | 80% | 40.0 | 2.00 |" in table


def test_benchmarks_readme_table_names_date_cpu_versions_and_load() -> None:
    text = report.readme_table(RESULTS)
    assert text.startswith("Measured 2026-01-01 00:00 UTC with `python -m benchmarks.run` on AMD EPYC")
    assert "python 3.11, numpy 2.4" in text and "0.50 0.40 0.30 / 1.00 0.50 0.30" in text
    assert "| mlp b64 | 1 (braze: 1) | 1.00 ms | 50% | numpy eager 2.00 ms | 2.00x |" in text


def test_benchmarks_readme_table_says_which_code_it_timed(monkeypatch) -> None:
    assert "(LLVM target znver3, 2 CPUs)" in report.readme_table(RESULTS)
    forced = {**RESULTS, "machine": {**RESULTS["machine"], "cpu": "znver4", "target": "znver3", "target_lanes": 8,
                                     "target_forced": True}}
    assert "(LLVM target znver3, 8 float32 lanes, forced by BRAZE_CPU on a znver4 host, 2 CPUs)" in \
        report.readme_table(forced)
    monkeypatch.setenv("BRAZE_CPU", "haswell")
    info = report.machine()
    assert (info["target"], info["target_lanes"], info["target_forced"]) == ("haswell", 8, True)
    monkeypatch.delenv("BRAZE_CPU")
    assert report.machine()["target_forced"] is False


def test_benchmarks_tables_call_a_thread_count_void_when_its_peak_did_not_scale() -> None:
    def with_two_threads(peak_gflops: float) -> dict:
        two = {**RESULTS["runs"][0], "threads": 2, "peak_gflops": peak_gflops}
        return {**RESULTS, "runs": [RESULTS["runs"][0], two]}
    short, scaled = with_two_threads(150.0), with_two_threads(195.0)
    void = "Void at 2 threads: the FMA peak read 150.0 GFLOP/s, below 90% of 2 x 100.0 (the 1-thread peak)"
    assert void in report.markdown(short) and void in report.readme_table(short)
    assert "Void" not in report.markdown(scaled) + report.readme_table(scaled) + report.markdown(RESULTS)


def test_benchmarks_plots_one_png_per_model(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    (path,) = report.plots(RESULTS, tmp_path)
    assert path.name == "mlp_b64.png" and path.read_bytes()[:4] == b"\x89PNG"


def test_benchmarks_merge_puts_every_child_system_side_by_side() -> None:
    """Each system runs in a child of its own; one thread count's run joins their times, notes and SGEMM rows."""
    braze = {"threads": 2, "peak_gflops": 200.0, "sgemm": [{"n": 64, "braze_gflops": 9.0, "braze threads": 1}],
             "models": {"mlp b1": {"seconds": {"braze compiled": 1e-5}, "notes": {"flops": 8e5}}}}
    numpy = {"threads": 2, "sgemm": [{"n": 64, "numpy_gflops": 7.0}],
             "models": {"mlp b1": {"seconds": {"numpy eager": 2e-5}, "notes": {"max_abs_error[numpy eager]": 0.0}}}}
    onnx = {"threads": 2, "models": {"mlp b1": {"seconds": {}, "notes": {"onnxruntime": "not installed"}}}}
    assert run.merge([braze, numpy, onnx]) == {
        "threads": 2, "peak_gflops": 200.0,
        "models": {"mlp b1": {"seconds": {"braze compiled": 1e-5, "numpy eager": 2e-5},
                              "notes": {"flops": 8e5, "max_abs_error[numpy eager]": 0.0,
                                        "onnxruntime": "not installed"}}},
        "sgemm": [{"n": 64, "braze_gflops": 9.0, "braze threads": 1, "numpy_gflops": 7.0}]}


def test_benchmarks_training_table_gives_each_peer_as_a_ratio_and_the_compile_times_apart() -> None:
    from benchmarks import train_step
    memory = {"peak": 2e6, "arena": 1e6}
    results = [{"case": "gpt2 b8 LoRA (adamw)", "seconds": {"braze compiled": 0.01, "braze eager": 0.1,
                                                            "torch eager": 0.02, "torch.compile": 0.015},
                "notes": {"memory": memory, "threads": 2, "compile_s": 1.5, "torch.compile first call s": 30.0}},
               {"case": "transformer b8 QLoRA (packed)", "seconds": {"braze compiled": 0.02, "braze eager": 0.1},
                "notes": {"memory": memory, "threads": 2, "compile_s": 2.0}}]
    table = train_step.markdown(results, "sgd")
    assert "| gpt2 b8 LoRA (adamw) | 10.00 | 100.00 | 20.00 | 15.00 | 2.00x | 1.50x | 10.00x | 2.0 (1.0) |" in table
    assert "| transformer b8 QLoRA (packed) | 20.00 | 100.00 | n/a | n/a | n/a | n/a | 5.00x | 2.0 (1.0) |" in table
    assert "- gpt2 b8 LoRA (adamw): threads 2, compile_s 1.5, torch.compile first call s 30.0" in table


def test_benchmarks_threads_under_load_reports_both_conditions_as_ratios() -> None:
    from benchmarks.threads_under_load import table
    row = {"model": "mlp b64", "free": {1: 2e-3, 2: 1e-3}, "busy": {1: 3e-3, 2: 4e-3}}
    text = table([row])
    assert "| mlp b64 | 2.000 ms | 1.000 ms | 2.00x | 3.000 ms | 4.000 ms | 0.75x |" in text


def test_benchmarks_gemm_models_times_compiled_linear_layers_against_numpy() -> None:
    from benchmarks import gemm
    assert gemm.parse_shape("128x256x1024") == (128, 256, 1024)
    for bad in ("128x256", "0x4x4", "ax4x4"):
        with pytest.raises(ValueError, match="MxKxN"):
            gemm.parse_shape(bad)
    rows = gemm.measure_linear([(1, 8, 5), (13, 40, 17)], threads=1, rounds=1)
    assert [(r["m"], r["k"], r["n"]) for r in rows] == [(1, 8, 5), (13, 40, 17)]
    assert all(r["max_rel_diff"] < 1e-5 and r["braze_gflops"] > 0 and r["numpy_gflops"] > 0 for r in rows)
    text = gemm.linear_table(rows, peak=100.0)
    assert "| 13x40x17 | 1 (braze: 1) |" in text and "% of peak" in text


def test_benchmarks_attention_pairs_the_fused_kernel_with_the_chain() -> None:
    """benchmarks.attention times the attention kernel (alone or anchoring a fused region) against the unfused
    chain of the same model; both compute the same result."""
    from benchmarks import attention

    def sdpa(q, k, v):
        return braze.softmax((q @ k.transpose(-2, -1)) * 0.125, -1) @ v
    inputs = tuple(np.random.default_rng(i).standard_normal((1, 2, 24, 16)).astype(np.float32) for i in range(3))
    systems = attention._pair(sdpa, inputs, threads=1)
    assert set(systems) == {"fused", "chain"}
    np.testing.assert_allclose(systems["fused"](), systems["chain"](), rtol=1e-4, atol=1e-5)
    assert attention._runs_attention("fused:attention") and attention._runs_attention("attention")
    assert not attention._runs_attention("fused:gemm")


def test_benchmarks_ops_vs_torch_checks_results_before_timing_them() -> None:
    """Each case runs on braze and torch with the same inputs and must agree; a case that disagrees is reported, not
    timed."""
    pytest.importorskip("torch")
    from benchmarks import ops_vs_torch
    small = [ops_vs_torch.Case("cube", lambda t, x: x ** 3, ops_vs_torch._arrays(ops_vs_torch._normal(40))),
             ops_vs_torch.Case("top 2", lambda t, x: t.topk(x, 2)[1], ops_vs_torch._arrays(ops_vs_torch._normal(3, 9)))]
    rows = ops_vs_torch.measure(small, threads=1, rounds=1)
    assert [r["case"] for r in rows] == ["cube", "top 2"]
    assert all(r["braze"] > 0 and r["torch"] > 0 and r["ratio"] == r["torch"] / r["braze"] for r in rows)
    assert "| cube | 1 |" in ops_vs_torch.table(rows, 1)
    wrong = ops_vs_torch.Case("wrong", lambda t, x: x + 1 if t.__name__ == "braze" else x,
                              ops_vs_torch._arrays(ops_vs_torch._normal(4)))
    with pytest.raises(AssertionError, match="wrong: braze and torch disagree"):
        ops_vs_torch.measure([wrong], threads=1, rounds=1)
