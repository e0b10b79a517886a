"""braze.grad_graph against eager autodiff: the benchmark MLP, CNN (batch norm in training mode) and transformer
layer (dropout off), plain and with LoRA, in float64; gradients and loss equal loss.backward()'s to 1e-10."""
from __future__ import annotations

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F
from benchmarks import models
from braze.ir import interpret
from braze.ir.autodiff import gradient_paths
from tests.models import SmallCNN

TOL = 1e-10


def _mlp() -> tuple[nn.Module, np.ndarray, np.ndarray]:
    model = models.mlp(1).model
    x = np.random.default_rng(1).standard_normal((8, 784))
    return model, x, np.random.default_rng(2).integers(0, 10, 8)


def _cnn() -> tuple[nn.Module, np.ndarray, np.ndarray]:
    model = models.cnn(1).model
    x = np.random.default_rng(1).standard_normal((4, 3, 8, 8))
    return model, x, np.random.default_rng(2).integers(0, 10, 4)


def _transformer() -> tuple[nn.Module, np.ndarray, np.ndarray]:
    model = models.transformer(1).model
    for _, m in model.named_modules():
        if isinstance(m, nn.Dropout):
            m.p = 0.0
    model.self_attn.dropout = 0.0
    x = np.random.default_rng(1).standard_normal((2, 5, 256))
    return model, x, np.random.default_rng(2).standard_normal((2, 5, 256))


def _loss(name: str):
    return F.mse_loss if name == "transformer" else F.cross_entropy


CASES = {"mlp": _mlp, "cnn": _cnn, "transformer": _transformer}


def _with_lora(model: nn.Module) -> nn.Module:
    model.apply_lora(nn.Lora(2, 4))
    rng = np.random.default_rng(3)
    for path, p in model.named_parameters():
        if path.endswith("lora_b"):  # B starts at zero, which would leave A's gradient zero
            p.assign(rng.standard_normal(p.shape) * 0.1)
    return model


def _eager(model: nn.Module, loss_fn, x: np.ndarray, y: np.ndarray) -> tuple[float, dict[int, np.ndarray]]:
    loss = loss_fn(model(braze.tensor(x)), braze.tensor(y))
    loss.backward()
    grads = {int(p.id): p.grad.numpy() for _, p in model.named_parameters() if p.grad is not None}
    return float(loss.item()), grads


def _compare(model: nn.Module, loss_fn, x: np.ndarray, y: np.ndarray) -> set[str]:
    graph = braze.grad_graph(model, loss_fn, x, y)  # traced before the eager step moves the running statistics
    outputs = interpret(graph, [x, y])
    loss, eager = _eager(model, loss_fn, x, y)
    ids = {p.path: p.id for p in graph.params()}
    paths = gradient_paths(graph)
    assert sorted(ids[path] for path in paths) == sorted(eager)
    assert abs(float(outputs[0]) - loss) <= TOL * max(1.0, abs(loss))
    for path, k in paths.items():
        np.testing.assert_allclose(outputs[k], eager[ids[path]], rtol=TOL, atol=TOL, err_msg=path)
    return set(paths)


@pytest.mark.parametrize("name", list(CASES))
def test_grad_graph_equals_eager_backward(name: str) -> None:
    model, x, y = CASES[name]()
    model = model.double().train()
    paths = _compare(model, _loss(name), x, y)
    assert paths == {path for path, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("name", list(CASES))
def test_grad_graph_with_lora_has_only_adapter_gradients(name: str) -> None:
    model, x, y = CASES[name]()
    model = _with_lora(model.double().train())
    paths = _compare(model, _loss(name), x, y)
    assert paths == {path for path, p in model.named_parameters() if p.requires_grad}
    assert paths and all(".lora_" in path for path in paths)


def test_compiled_grad_graph_of_a_cnn_equals_eager_in_float32() -> None:
    """Convolution gradients and batch norm on batch statistics (both decomposed), running statistics as outputs
    (the benchmark models compile the same way; the MLP's compiled step is tested in test_train_step.py)."""
    from braze.runtime.compile_path import compile_graph
    braze.manual_seed(0)
    model = SmallCNN().train()
    x = np.random.default_rng(1).standard_normal((4, 3, 7, 7)).astype(np.float32)
    y = np.random.default_rng(2).integers(0, 10, 4)
    graph = braze.grad_graph(model, F.cross_entropy, x, y)
    outputs = compile_graph(graph, pipeline="training").run([x, y])
    loss, eager = _eager(model, F.cross_entropy, x, y)  # also moves the model's running statistics
    ids = {p.path: p.id for p in graph.params()}
    np.testing.assert_allclose(outputs[0], loss, rtol=1e-5)
    for path, k in gradient_paths(graph).items():
        want = eager[ids[path]]
        # a conv bias before batch norm has a zero gradient: only rounding noise is left to compare there
        np.testing.assert_allclose(outputs[k], want, rtol=1e-4, atol=1e-6, err_msg=path)
    buffers = dict(model.named_buffers())
    updated = [(role.split(":", 1)[1], out) for role, out in zip(graph.attributes["outputs"], outputs)
               if role.startswith("buffer_update:")]
    assert {path for path, _ in updated} == set(buffers)
    for path, out in updated:
        np.testing.assert_allclose(out, buffers[path].numpy(), rtol=1e-5, atol=1e-6, err_msg=path)
