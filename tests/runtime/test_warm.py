"""A fixed signature's compile ends with two calls on zero inputs when a call is short (Executable.warm), so the first
call finds code, weights and workers warm; the warm-up leaves no trace in what calls return, and is skipped where a
call is long or zeros are not a valid input."""
from __future__ import annotations

from typing import Any

import numpy as np

import braze
import braze as torch
from braze.runtime import executable as executable_module

nn = torch.nn


class _ShiftedDown(nn.Module):
    """An embedding looked up at ids - 1: zero ids make the kernel's run-time index check fire."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)

    def forward(self, ids: Any) -> Any:
        return self.emb(ids - 1)


def _eager(model: nn.Module, *inputs: np.ndarray) -> np.ndarray:
    with braze.no_grad():
        return model(*[braze.tensor(x) for x in inputs]).numpy()


def test_small_graph_is_warmed_and_calls_stay_exact() -> None:
    braze.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).eval()
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    compiled = braze.compile(model, x)
    assert "warm" in compiled.timings.stages
    assert compiled.executable.warm()
    np.testing.assert_allclose(compiled(x), _eager(model, x), rtol=1e-5, atol=1e-6)


def test_warm_up_calls_go_through_the_compiled_module(monkeypatch: Any) -> None:
    """The warm-up calls are made as users call (CompiledModule.__call__), so that its Python runs warm at the first
    call too, with zeros of the example's shape."""
    seen = []
    original = braze.compiled.CompiledModule.__call__

    def counted(self: Any, *inputs: Any, out: Any = None) -> Any:
        seen.append([np.asarray(x).copy() for x in inputs])
        return original(self, *inputs, out=out)
    monkeypatch.setattr(braze.compiled.CompiledModule, "__call__", counted)
    x = np.ones((4, 16), np.float32)
    braze.compile(nn.Sequential(nn.Linear(16, 8)).eval(), x)
    assert len(seen) == executable_module.WARM_CALLS
    assert all(len(args) == 1 and args[0].shape == x.shape and not args[0].any() for args in seen)


def test_long_call_is_not_warmed(monkeypatch: Any) -> None:
    monkeypatch.setattr(executable_module, "WARM_SECONDS", 0.0)
    model = nn.Sequential(nn.Linear(16, 8)).eval()
    x = np.ones((2, 16), np.float32)
    compiled = braze.compile(model, x)
    assert not compiled.executable.warm()
    np.testing.assert_allclose(compiled(x), _eager(model, x), rtol=1e-5, atol=1e-6)


def test_large_inputs_are_not_warmed(monkeypatch: Any) -> None:
    monkeypatch.setattr(executable_module, "WARM_INPUT_BYTES", 2 * 16 * 4 - 1)
    compiled = braze.compile(nn.Sequential(nn.ReLU()).eval(), np.ones((2, 16), np.float32))
    assert not compiled.executable.warm()


def test_zero_inputs_that_fail_a_check_skip_the_warm_up() -> None:
    """Zero ids index row -1: the warm-up is skipped quietly, and real calls check and run as before."""
    braze.manual_seed(0)
    model = _ShiftedDown().eval()
    ids = np.array([1, 5, 10], np.int64)
    compiled = braze.compile(model, ids)
    assert not compiled.executable.warm()
    np.testing.assert_array_equal(compiled(ids), _eager(model, ids))
    try:
        compiled(np.array([0, 2, 3], np.int64))
    except braze.BrazeError as exc:
        assert "out of range" in str(exc)
    else:
        raise AssertionError("an id of 0 looked up row -1 without an error")
    np.testing.assert_array_equal(compiled(ids), _eager(model, ids))


def test_loaded_artifact_is_warmed(tmp_path: Any) -> None:
    braze.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval()
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    path = tmp_path / "tiny.braze"
    braze.export(model, path, x)
    loaded = braze.load(path)
    assert "warm" in loaded.timings.stages
    np.testing.assert_allclose(loaded(x), _eager(model, x), rtol=1e-5, atol=1e-6)
