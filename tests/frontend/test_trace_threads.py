"""The trace context is per thread: a trace running in one thread records none of another thread's eager work."""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

import braze
import braze.nn as nn
from braze.frontend.trace_context import TRACE

X = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)


class Paused(nn.Module):
    """fc(-x), then a pause in the middle of the forward pass while another thread works, then relu."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.inside, self.resume = threading.Event(), threading.Event()

    def forward(self, x: Any) -> Any:
        h = self.fc(-x)
        self.inside.set()
        assert self.resume.wait(10), "the eager thread did not finish"
        return braze.relu(h)


def test_trace_in_one_thread_never_captures_another_threads_eager_ops() -> None:
    model = Paused().eval()
    traced: dict[str, Any] = {}
    tracer = threading.Thread(target=lambda: traced.update(graph=braze.trace(model, X)))
    tracer.start()
    try:
        assert model.inside.wait(10), "the trace did not start"
        # while the other thread is inside its trace: a call of the traced module's own layer and a mode read
        assert TRACE.interceptor is None and TRACE.watcher is None
        with braze.no_grad():
            out = model.fc(braze.tensor(X))
        eager_training = model.fc.training
    finally:
        model.resume.set()
        tracer.join(10)
    assert type(out) is braze.Tensor and not eager_training
    weight, bias = model.fc.weight.detach().numpy(), model.fc.bias.detach().numpy()
    np.testing.assert_allclose(out.numpy(), X @ weight.T + bias, rtol=1e-5, atol=1e-6)
    alone = braze.trace(model, X)  # the events are set now: the same trace with nothing running beside it
    assert str(traced["graph"]) == str(alone) and not traced["graph"].attributes.get("guards")
