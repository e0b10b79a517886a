"""Compiled QLoRA training steps read their NF4 bases packed (quantized_weights="packed", the default): the forward
is quantized_linear plus the low-rank path, the input gradient quantized_matmul, and no dense dequantized weight is
computed anywhere in the step. They equal the dense path (each base dequantized every step, the adapters merged into
it as eager braze does) to float32 rounding: 5 steps of the MLP and the transformer layer of
tests/test_train_models.py, losses within 1e-5 relative and adapter weights within 1e-6 absolute (measured: 1.3e-7
relative and 3e-8). A float64 model keeps the dense path, which test_train_models checks against eager to 1e-10."""
from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

import braze
from braze.ir import BrazeError
from braze.train_step import TrainStep
from tests.test_train_models import KINDS, OPTIMIZERS, _batch, _model

STEPS = 5


def _training(kind: str, dtype: type, optimizer: str = "sgd") -> tuple[Any, Any, Any]:
    """A QLoRA model of `kind` (dropout off), its loss and an optimizer over its parameters."""
    model = _model(kind, dtype, "qlora", 0.0)
    return model, KINDS[kind].loss, OPTIMIZERS[optimizer](model.parameters())


def _step(kind: str, dtype: type, optimizer: str, **options: Any) -> tuple[TrainStep, Any, tuple]:
    model, loss, opt = _training(kind, dtype, optimizer)
    batch = _batch(kind, dtype)
    return braze.compile_train_step(model, loss, opt, *batch, **options), model, batch


def _ops(graph: braze.ir.Graph) -> Counter[str]:
    """The nodes of each op in a compiled graph, those inside fused regions included."""
    return Counter([n.op for n in graph.nodes] + [n.op for f in graph.nodes if f.op == "fused"
                                                  for n in f.attr["body"].nodes])


def _trained(kind: str, optimizer: str, quantized_weights: str) -> tuple[list[float], dict[str, np.ndarray]]:
    step, model, batch = _step(kind, np.float32, optimizer, quantized_weights=quantized_weights)
    losses = [float(step(*batch)) for _ in range(STEPS)]
    step.sync(model)
    return losses, {path: p.detach().numpy() for path, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("kind, optimizer", [("mlp", "sgd"), ("transformer", "adamw")])
def test_packed_qlora_step_equals_the_dense_step_in_float32(kind: str, optimizer: str) -> None:
    (losses, adapters), (dense_losses, dense_adapters) = (_trained(kind, optimizer, mode) for mode in
                                                          ("packed", "dense"))
    np.testing.assert_allclose(losses, dense_losses, rtol=1e-5)
    assert losses[-1] < losses[0]
    assert adapters.keys() == dense_adapters.keys() and all("lora_" in path for path in adapters)
    for path, value in adapters.items():
        np.testing.assert_allclose(value, dense_adapters[path], rtol=1e-5, atol=1e-6, err_msg=path)


def test_packed_qlora_step_computes_no_dense_weight() -> None:
    """The compiled step of the transformer layer: every base read packed forward (4 layers) and backward (the 3
    whose input needs a gradient); neither a dequantize nor a lora_merge is left. The dense step's arena holds the
    dequantized weights, so the packed one's is smaller."""
    step, _, _ = _step("transformer", np.float32, "adamw")
    dense, _, _ = _step("transformer", np.float32, "adamw", quantized_weights="dense")
    ops = _ops(step.executable.graph)
    assert (ops["quantized_linear"], ops["quantized_matmul"], ops["dequantize"], ops["lora_merge"]) == (4, 3, 0, 0)
    assert _ops(dense.executable.graph)["dequantize"] == 4
    assert step.memory()["arena"] < dense.memory()["arena"]


def test_float64_qlora_step_keeps_the_dense_path() -> None:
    """The packed kernels compute in float32: a float64 model's bases are dequantized (and cast) in the graph."""
    graph = braze.train_step_graph(*_training("mlp", np.float64), *_batch("mlp", np.float64))
    assert "dequantize" in {n.op for n in graph.nodes} and "quantized_linear" not in {n.op for n in graph.nodes}


def test_compile_train_step_refuses_an_unknown_quantized_weights_mode() -> None:
    with pytest.raises(BrazeError, match="compile_train_step: quantized_weights must be one of packed, dense, got "
                                         "'nf4'"):
        braze.train_step_graph(*_training("mlp", np.float32), *_batch("mlp", np.float32),
                               quantized_weights="nf4")
