"""A forward pass that changes Python state of its modules, which a compiled graph cannot repeat, fails to trace.

Each refusal names the module's path and the attribute, and leaves the model as tracing found it. What forward may
do still traces: assign a buffer, build a constant cache on first use, read attributes.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import braze
import braze.nn as nn
from braze import TraceError

X = np.ones((3, 4), np.float32)


class Counts(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.calls = nn.Linear(4, 2), 0

    def forward(self, x: Any) -> Any:
        self.calls += 1
        return self.fc(x)


class Logs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.seen = nn.Linear(4, 2), []

    def forward(self, x: Any) -> Any:
        self.seen.append(tuple(x.shape))
        return self.fc(x)


class KeepsOutput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x: Any) -> Any:
        y = self.fc(x)
        self.last = y
        return y


class KeepsInList(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.outputs = nn.Linear(4, 2), None

    def forward(self, x: Any) -> Any:
        y = self.fc(x)
        self.outputs = [y]
        return y


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(4, 4), Counts())

    def forward(self, x: Any) -> Any:
        return self.inner(x)


class SwapsArrays(nn.Module):
    """Rebinds a numpy attribute (a lookup table made from constants) on every call: an object, not plain data."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.table = nn.Linear(4, 2), np.zeros(2, np.float32)

    def forward(self, x: Any) -> Any:
        self.table = np.full(2, 0.5, np.float32)
        return self.fc(x) + braze.tensor(self.table)


class CachesConstants(nn.Module):
    """A rotary-style table made from constants on first use: the same on every call, so it may be kept."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.table = nn.Linear(4, 2), None

    def forward(self, x: Any) -> Any:
        if self.table is None:
            self.table = braze.arange(2, dtype=braze.float32) * 0.5
        return self.fc(x) + self.table


@pytest.mark.parametrize("model, where, says", [
    (Counts, "the model (Counts)", r"changes attribute 'calls' \(0 -> 1\)"),
    (Logs, "the model (Logs)", r"changes attribute 'seen' \(\[\] -> \[\(3, 4\)\]\)"),
    (KeepsOutput, "the model (KeepsOutput)", "binds parameter 'last' to a traced tensor"),
    (KeepsInList, "the model (KeepsInList)", "keeps a traced tensor in attribute 'outputs'"),
    (Outer, "module 'inner.1' (Counts)", "changes attribute 'calls'"),
], ids=["counter", "list", "output", "output-in-list", "child"])
def test_forward_changing_python_state_fails_to_compile_and_leaves_the_model_unchanged(model, where, says) -> None:
    m = model().eval()
    state = {path: dict(vars(module)) for path, module in m.named_modules()}
    params = [name for name, _ in m.named_parameters()]
    with pytest.raises(TraceError, match=rf"forward of {__import__('re').escape(where)} {says}"):
        braze.compile(m, X)
    assert [name for name, _ in m.named_parameters()] == params
    for path, module in m.named_modules():
        plain = {k: v for k, v in vars(module).items() if not k.startswith("_")}
        assert plain == {k: v for k, v in state[path].items() if not k.startswith("_")}, path
    m(braze.tensor(X))  # eager forward still runs, and changes what eager forward changes


def test_a_compiled_train_step_refuses_a_counting_forward_before_any_step() -> None:
    m = Counts()
    opt = braze.optim.SGD(m.parameters(), lr=0.1)
    before = m.fc.weight.detach().numpy().copy()
    with pytest.raises(TraceError, match="changes attribute 'calls'"):
        braze.compile_train_step(m, lambda out, y: ((out - y) ** 2).mean(), opt, X, np.zeros((3, 2), np.float32))
    assert m.calls == 0
    np.testing.assert_array_equal(m.fc.weight.detach().numpy(), before)


def test_a_cache_of_constants_made_on_first_use_traces_and_gives_eager_results() -> None:
    m = CachesConstants().eval()
    compiled = braze.compile(m, X)
    np.testing.assert_allclose(compiled(X), m(braze.tensor(X)).detach().numpy(), rtol=1e-6, atol=1e-6)


def test_an_array_attribute_rebound_to_constants_traces() -> None:
    m = SwapsArrays().eval()
    np.testing.assert_allclose(braze.compile(m, X)(X), m(braze.tensor(X)).detach().numpy(), rtol=1e-6, atol=1e-6)


def test_reading_attributes_and_assigning_buffers_still_trace() -> None:
    m = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))  # training mode: batch norm assigns its buffers
    braze.trace(m, X)
    assert m[1].num_batches_tracked.numpy() == 0  # a traced buffer update is a graph output, not a write


class CountsInBuffer(nn.Module):
    """Running sums of the outputs in a buffer: updated in place, or assigned (what a graph can return)."""

    def __init__(self, in_place: bool) -> None:
        super().__init__()
        self.fc, self.in_place = nn.Linear(4, 2), in_place
        self.register_buffer("seen", braze.zeros(2))

    def forward(self, x: Any) -> Any:
        y = self.fc(x)
        if self.in_place:
            self.seen.add_(y.sum(0).detach())
        else:
            self.seen = self.seen + y.sum(0).detach()
        return y


def _mse(out: Any, y: Any) -> Any:
    return ((out - y) ** 2).mean()


def test_a_buffer_updated_in_place_is_refused_and_keeps_its_value() -> None:
    m = CountsInBuffer(in_place=True).eval()
    with pytest.raises(TraceError, match="updates buffer 'seen' in place.*assign the new value instead"):
        braze.compile(m, X)
    np.testing.assert_array_equal(m.seen.numpy(), [0, 0])
    m(braze.tensor(X))
    assert m.seen.numpy().any()  # eager forward still updates it


def test_a_buffer_assigned_in_forward_is_a_buffer_update_of_the_compiled_step_as_eager() -> None:
    target = np.zeros((3, 2), np.float32)
    eager, compiled = CountsInBuffer(in_place=False), CountsInBuffer(in_place=False)
    compiled.load_state_dict(eager.state_dict())
    optimizer = braze.optim.SGD(eager.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        _mse(eager(braze.tensor(X)), braze.tensor(target)).backward()
        optimizer.step()
    step = braze.compile_train_step(compiled, _mse, braze.optim.SGD(compiled.parameters(), lr=0.1), X, target)
    for _ in range(3):
        step(X, target)
    step.sync(compiled)
    np.testing.assert_allclose(compiled.seen.numpy(), eager.seen.numpy(), rtol=1e-6)
    np.testing.assert_allclose(compiled.fc.weight.detach().numpy(), eager.fc.weight.detach().numpy(), rtol=1e-6)
