"""Indices computed inside a compiled graph are range-checked by the kernels: an out-of-range one raises the error
eager evaluation raises (IndexRangeError, same wording, plus the node), on one thread or several, and the next call
runs normally. Graph inputs used as indices are still refused before any native code runs."""
from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np
import pytest

import braze
import braze as torch
from braze.ir.errors import IndexRangeError

nn, F = torch.nn, torch.nn.functional


class _Shifted(nn.Module):
    """An embedding looked up at ids + 1: the index is computed inside the graph, out of the input check's reach."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)

    def forward(self, ids: Any) -> Any:
        return self.emb(ids + 1)


class _Function(nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


X = np.random.default_rng(0).standard_normal((10, 6)).astype(np.float32)

# (model, good inputs, bad inputs): each bad case is refused by eager evaluation with an IndexRangeError.
CASES = {
    "embedding": (_Shifted(), [np.array([0, 4, 8], np.int64)], [np.array([0, 9, 3], np.int64)]),
    "negative_after_shift": (_Shifted(), [np.array([[0, 1], [8, 2]], np.int64)],
                             [np.array([[0, 1], [-2, 2]], np.int64)]),
    "wrapped_negative_index": (_Function(lambda x, i: x[i * 1]), [X, np.array([-1, 0, 9, -10], np.int64)],
                               [X, np.array([3, -11, 0, 0], np.int64)]),
    "gather": (_Function(lambda x, i: torch.gather(x, 1, i + 2)), [X, np.zeros((10, 3), np.int64)],
               [X, np.tile(np.arange(0, 6, 2), (10, 1))]),
    "scatter_add": (_Function(lambda x, i: x.scatter_add(1, i + 2, x[:, :3])), [X, np.zeros((10, 3), np.int64)],
                    [X, np.tile(np.arange(0, 6, 2), (10, 1))]),
    "one_hot": (_Function(lambda i: F.one_hot(i * 2, 6)), [np.array([0, 1, 2], np.int64)],
                [np.array([0, 3, 1], np.int64)]),
}


def _eager(model: nn.Module, inputs: list[np.ndarray]) -> Any:
    with braze.no_grad():
        return model(*[braze.tensor(a) for a in inputs])


def _eager_error(model: nn.Module, inputs: list[np.ndarray]) -> str:
    with pytest.raises(IndexRangeError) as raised:
        _eager(model, inputs)
    return str(raised.value)


@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_index_out_of_range_raises_what_eager_raises(case: str) -> None:
    model, good, bad = CASES[case]
    model.eval()
    compiled = braze.compile(model, *good)
    with pytest.raises(IndexRangeError) as raised:
        compiled(*bad)
    assert str(raised.value).startswith(_eager_error(model, bad) + " (in %")
    np.testing.assert_array_equal(compiled(*good), _eager(model, good).numpy())  # the next call is unaffected


def test_compiled_index_error_is_an_index_error_naming_the_node() -> None:
    compiled = braze.compile(_Shifted().eval(), np.array([0], np.int64))
    with pytest.raises(IndexError, match=r"index 10 is out of range \[0, 10\) for axis 0 \(in %\d+ = index_select, "
                                         r"from emb @ .*test_index_checks.py:\d+\)"):
        compiled(np.array([9], np.int64))


def test_compiled_index_check_reports_from_every_thread() -> None:
    """Two threads split the lookup; the bad index lies in the second thread's half, and the first bad index in
    order is the one reported."""
    model = _Shifted().eval()
    ids = np.arange(256, dtype=np.int64) % 9
    compiled = braze.compile(model, ids, threads=2)
    np.testing.assert_array_equal(compiled(ids), _eager(model, [ids]).numpy())
    bad = ids.copy()
    bad[[200, 250]] = [-3, 9]
    with pytest.raises(IndexRangeError, match="index -2 is out of range"):
        compiled(bad)
    np.testing.assert_array_equal(compiled(ids), _eager(model, [ids]).numpy())


def test_compiled_index_checks_hold_under_concurrent_calls() -> None:
    """Calls from several Python threads, good and bad interleaved: every bad call raises, every good one is
    right."""
    model = _Shifted().eval()
    good, bad = np.array([0, 4, 8], np.int64), np.array([1, 9, 2], np.int64)
    want = _eager(model, [good]).numpy()
    compiled = braze.compile(model, good)
    outcomes: list[str] = []

    def work(k: int) -> None:
        for step in range(50):
            if (k + step) % 3:
                outcomes.append("ok" if np.array_equal(compiled(good), want) else "wrong")
            else:
                try:
                    compiled(bad)
                    outcomes.append("missed")
                except IndexRangeError:
                    outcomes.append("raised")
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(set(outcomes)) == ["ok", "raised"] and len(outcomes) == 200


def test_input_indices_are_still_refused_before_native_code() -> None:
    model = nn.Embedding(10, 4).eval()
    compiled = braze.compile(model, np.array([1, 2], np.int64))
    with pytest.raises(IndexRangeError, match=r"input 0 \('\w+'\): index 10 is out of range"):
        compiled(np.array([1, 10], np.int64))
