"""A compiled training step through the backward ops of pooling and strided slicing (max_pool2d_grad,
avg_pool2d_grad, slice_scatter) equals eager braze training in float64 to 1e-10."""
from __future__ import annotations

from typing import Any

import numpy as np

import braze
import braze.nn as nn
import braze.nn.functional as F

STEPS = 3
F64 = dict(rtol=1e-10, atol=1e-12)


class PoolingCNN(nn.Module):
    """Conv, ReLU, padded max pooling, every other channel, conv, average pooling without the padding, linear."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(4, 6, 3, padding=1)
        self.max, self.avg = nn.MaxPool2d(3, stride=2, padding=1), nn.AvgPool2d(3, 2, 1, count_include_pad=False)
        self.fc = nn.Linear(24, 10)

    def forward(self, x: Any) -> Any:
        h = self.max(F.relu(self.c1(x)))[:, ::2]
        return self.fc(self.avg(self.c2(h)).flatten(1))


def _model() -> nn.Module:
    braze.manual_seed(0)
    model = PoolingCNN().double().train()
    for param in model.parameters():
        param.detach()
    return model


def _batch() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.standard_normal((4, 3, 8, 8)), rng.integers(0, 10, 4)


def _sgd(model: nn.Module) -> Any:
    return braze.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def test_compiled_train_step_through_pooling_and_slicing_equals_eager_sgd_in_float64() -> None:
    x, y = _batch()
    model, eager = _model(), _model()
    opt, eager_opt = _sgd(model), _sgd(eager)
    backward = {n.op for n in braze.train_step_graph(model, F.cross_entropy, opt, x, y).ops()}
    assert {"max_pool2d_grad", "avg_pool2d_grad", "slice_scatter"} <= backward
    step = braze.compile_train_step(model, F.cross_entropy, opt, x, y)
    losses = [float(step(x, y)) for _ in range(STEPS)]
    step.sync(model)
    want = []
    for _ in range(STEPS):
        eager_opt.zero_grad()
        loss = F.cross_entropy(eager(braze.tensor(x)), braze.tensor(y))
        loss.backward()
        eager_opt.step()
        want.append(loss.item())
    np.testing.assert_allclose(losses, want, **F64)
    assert losses[-1] < losses[0]
    trained = dict(eager.named_parameters())
    for path, param in model.named_parameters():
        np.testing.assert_allclose(param.detach().numpy(), trained[path].detach().numpy(), **F64, err_msg=path)
