"""braze.train_step_graph and braze.compile_train_step against eager SGD with momentum and weight decay: 20 steps
of the benchmark MLP, in float64 through the reference interpreter (1e-10) and compiled in float32 (stated
tolerances); sync writes weights and momentum buffers back by ParamId; unsupported settings are refused."""
from __future__ import annotations

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F
from benchmarks import models
from braze.ir import BrazeError, interpret
from braze.ir.train_step import updated_leaves
from tests.models import SmallCNN

STEPS = 20
SGD = dict(lr=0.05, momentum=0.9, weight_decay=1e-3, nesterov=True)


def _batch(dtype: type) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((16, 784)).astype(dtype), rng.integers(0, 10, 16)


def _mlp(dtype: type) -> nn.Module:
    model = models.mlp(1).model.train()
    return model.double() if dtype is np.float64 else model


def _eager_steps(dtype: type, x: np.ndarray, y: np.ndarray) -> tuple[nn.Module, braze.optim.SGD, list[float]]:
    model = _mlp(dtype)
    opt = braze.optim.SGD(model.parameters(), **SGD)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(model(braze.tensor(x)), braze.tensor(y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, opt, losses


def _arrays(model: nn.Module) -> dict[str, np.ndarray]:
    return {path: p.detach().numpy() for path, p in model.named_parameters()}


def test_train_step_graph_equals_eager_sgd_in_float64() -> None:
    x, y = _batch(np.float64)
    model = _mlp(np.float64)
    graph = braze.train_step_graph(model, F.cross_entropy, braze.optim.SGD(model.parameters(), **SGD), x, y)
    weights, updates, losses = dict(graph.weights), updated_leaves(graph), []
    for _ in range(STEPS):
        outputs = interpret(graph, [x, y, np.float64(SGD["lr"])], params=weights)
        weights.update({path: outputs[k] for path, k in updates.items()})
        losses.append(float(outputs[0]))
    eager, _, eager_losses = _eager_steps(np.float64, x, y)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-10, atol=1e-12)
    for path, want in _arrays(eager).items():
        np.testing.assert_allclose(weights[path], want, rtol=1e-10, atol=1e-12, err_msg=path)


@pytest.fixture(scope="module")
def compiled_run() -> tuple[nn.Module, braze.optim.SGD, list[float]]:
    x, y = _batch(np.float32)
    model = _mlp(np.float32)
    opt = braze.optim.SGD(model.parameters(), **SGD)
    step = braze.compile_train_step(model, F.cross_entropy, opt, x, y)
    losses = [float(step(x, y)) for _ in range(STEPS)]
    step.sync(model)
    return model, opt, losses


@pytest.fixture(scope="module")
def eager_run() -> tuple[nn.Module, braze.optim.SGD, list[float]]:
    return _eager_steps(np.float32, *_batch(np.float32))


def test_compiled_train_step_losses_equal_eager_sgd_in_float32(compiled_run, eager_run) -> None:
    np.testing.assert_allclose(compiled_run[2], eager_run[2], rtol=1e-4, atol=1e-6)


def test_compiled_train_step_sync_writes_back_weights_and_momentum(compiled_run, eager_run) -> None:
    model, opt, _ = compiled_run
    eager, eager_opt, _ = eager_run
    for (path, p), q in zip(model.named_parameters(), eager.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-6, err_msg=path)
        np.testing.assert_allclose(opt.state[p]["momentum_buffer"], eager_opt.state[q]["momentum_buffer"],
                                   rtol=1e-4, atol=1e-6, err_msg=path)


def test_compile_train_step_refuses_other_optimizers() -> None:
    model = nn.Linear(3, 2)
    with pytest.raises(BrazeError, match="optimizer Adam is not supported yet \\(supported: braze.optim.SGD\\)"):
        braze.compile_train_step(model, F.mse_loss, braze.optim.Adam(model.parameters()),
                                 np.zeros((4, 3), np.float32), np.zeros((4, 2), np.float32))


def test_train_step_graph_refuses_dampening() -> None:
    model = nn.Linear(3, 2)
    opt = braze.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, dampening=0.5)
    with pytest.raises(BrazeError, match="dampening=0.5 is not supported in a compiled step \\(supported: 0.0\\)"):
        braze.train_step_graph(model, F.mse_loss, opt, np.zeros((4, 3), np.float32), np.zeros((4, 2), np.float32))


def test_compile_train_step_refuses_dropout_in_training_mode() -> None:
    model = nn.Sequential(nn.Linear(3, 2), nn.Dropout(0.5)).train()
    with pytest.raises(BrazeError, match="dropout \\(p=0.5\\) at module '1' is in training mode"):
        braze.compile_train_step(model, F.mse_loss, braze.optim.SGD(model.parameters(), lr=0.1),
                                 np.zeros((4, 3), np.float32), np.zeros((4, 2), np.float32))


def test_compiled_train_step_writes_batch_norm_statistics_back() -> None:
    """A small CNN in training mode: running statistics move every step inside the executable, and sync writes
    them, the weights and the momentum buffers into the model and optimizer, as 5 eager steps leave them."""
    x = np.random.default_rng(1).standard_normal((4, 3, 7, 7)).astype(np.float32)
    y = np.random.default_rng(2).integers(0, 10, 4)
    runs = []
    for compiled in (True, False):
        braze.manual_seed(0)
        model = SmallCNN().train()
        opt = braze.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        if compiled:
            step = braze.compile_train_step(model, F.cross_entropy, opt, x, y)
            for _ in range(5):
                step(x, y)
            step.sync(model)
        else:
            for _ in range(5):
                opt.zero_grad()
                F.cross_entropy(model(braze.tensor(x)), braze.tensor(y)).backward()
                opt.step()
        runs.append({path: np.asarray(p.detach().numpy()) for path, p in model.named_param_slots()})
    assert set(runs[0]) == set(runs[1])
    for path, want in runs[1].items():
        np.testing.assert_allclose(runs[0][path], want, rtol=1e-4, atol=1e-5, err_msg=path)


def test_compile_train_step_refuses_an_optimizer_missing_a_trainable_parameter() -> None:
    model = nn.Sequential(nn.Linear(3, 2))
    opt = braze.optim.SGD([model[0].weight], lr=0.1)
    with pytest.raises(BrazeError, match="does not hold the trainable parameters 0.bias"):
        braze.compile_train_step(model, F.mse_loss, opt, np.zeros((4, 3), np.float32), np.zeros((4, 2), np.float32))


def _lora_mlp() -> nn.Module:
    braze.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 4)).train().apply_lora(nn.Lora(2, 4))
    rng = np.random.default_rng(3)
    for path, p in model.named_parameters():
        if path.endswith("lora_b"):  # B starts at zero, which would leave A's first gradient zero
            p.assign((rng.standard_normal(p.shape) * 0.1).astype(np.float32))
        p.detach()  # materialize now: lazy parameters draw from the generator when first read
    return model


def test_compiled_train_step_with_lora_trains_only_the_adapters() -> None:
    """The optimizer holds every parameter, as a LoRA script passes model.parameters(); the frozen bases and
    biases keep their values and the adapters follow 10 eager steps."""
    x = np.random.default_rng(0).standard_normal((8, 12)).astype(np.float32)
    y = np.random.default_rng(1).integers(0, 4, 8)
    compiled, eager = _lora_mlp(), _lora_mlp()
    bases = {path: p.base().numpy().copy() for path, p in compiled.named_parameters() if not p.requires_grad}
    step = braze.compile_train_step(compiled, F.cross_entropy, braze.optim.SGD(compiled.parameters(), **SGD), x, y)
    for _ in range(10):
        step(x, y)
    step.sync(compiled)
    opt = braze.optim.SGD(eager.parameters(), **SGD)
    for _ in range(10):
        opt.zero_grad()
        F.cross_entropy(eager(braze.tensor(x)), braze.tensor(y)).backward()
        opt.step()
    for (path, p), q in zip(compiled.named_parameters(), eager.parameters()):
        if path in bases:
            np.testing.assert_array_equal(p.base().numpy(), bases[path], err_msg=path)
        else:
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-6, err_msg=path)
