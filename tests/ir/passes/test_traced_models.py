"""The passes on traced modules (an MLP with dropout, a CNN with batch norm and dropout, a transformer encoder
layer), plain and with LoRA, in eval mode, as valid() snapshots and in train mode specialized to eval: the result
has no flags, dropout or flag-driven batch norm, computes what the traced graph computes, shares untouched
weights, and is the same text every time."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F
from braze import ir
from braze.ir.passes import optimize

from ...models import MLP
from .harness import assert_equivalent

PIPELINE = ["drop_buffer_updates", "specialize_flags", "constant_fold", "simplify", "cse", "dce"]


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn, self.drop = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Dropout(0.3)
        self.fc = nn.Linear(4 * 4 * 4, 5)

    def forward(self, x: Any) -> Any:
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(self.drop(braze.flatten(x, 1)))


def encoder() -> nn.Module:
    return nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, activation="gelu", batch_first=True)


MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], list[str] | None]] = {
    "mlp": (MLP, (4, 8), None), "cnn": (CNN, (2, 3, 8, 8), ["conv", "fc"]), "encoder": (encoder, (2, 5, 16), None)}
CASES = [pytest.param(m, v, mode, id=f"{m}-{v}-{mode}") for m in MODELS for v in ("plain", "lora")
         for mode in ("eval", "valid", "train")]


def traced(name: str, variant: str, mode: str) -> tuple[ir.Graph, np.ndarray]:
    make, shape, targets = MODELS[name]
    braze.manual_seed(0)
    m = make()
    if variant == "lora":
        m.apply_lora(nn.Lora(4, 8, targets=targets))
        rng = np.random.default_rng(5)
        for _, p in m.named_param_slots():
            if p.adapter is not None:
                p.adapter.b.assign(rng.standard_normal(p.adapter.b.shape) * 0.1)
    m.state_dict()
    m = m.valid() if mode == "valid" else m.eval() if mode == "eval" else m
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    return braze.trace(m, braze.tensor(x)), x


@pytest.mark.parametrize("name,variant,mode", CASES)
def test_traced_model_passes_remove_flags_and_keep_the_function(name: str, variant: str, mode: str) -> None:
    g, x = traced(name, variant, mode)
    out = optimize(g, PIPELINE, flags=False)
    assert not out.flags()
    assert not {"dropout", "batch_norm_flag", "where"} & {n.op for n in out.nodes}
    assert out.attributes["outputs"] == ("output",)  # evaluation updates no buffer
    want = ir.interpret(g, [x], flags={f.path: False for f in g.flags()})
    np.testing.assert_allclose(ir.interpret(out, [x])[0], want[0], rtol=1e-5, atol=1e-6)
    assert_equivalent(g, out, flags=False)


@pytest.mark.parametrize("name", MODELS)
def test_traced_model_untouched_weights_are_shared(name: str) -> None:
    g, _ = traced(name, "plain", "eval")
    out = optimize(g, PIPELINE)
    assert out.weights and all(out.weights[path] is g.weights[path] for path in out.weights)


@pytest.mark.parametrize("name", MODELS)
def test_traced_model_pipeline_is_deterministic(name: str) -> None:
    g, _ = traced(name, "lora", "eval")
    reread = ir.parse(str(g)).replace(weights=g.weights)
    assert str(optimize(g, PIPELINE)) == str(optimize(g, PIPELINE)) == str(optimize(reread, PIPELINE))


def test_traced_model_batch_norm_becomes_the_inference_op_with_running_statistics() -> None:
    g, _ = traced("cnn", "plain", "eval")
    out = optimize(g, PIPELINE)
    (bn,) = [n for n in out.nodes if n.op == "batch_norm"]
    producers = out.producers
    assert [producers[v.name].attr.get("path") for v in bn.inputs[1:]] == [
        "bn.running_mean", "bn.running_var", "bn.weight", "bn.bias"]
    assert len(out.outputs) == 1 and "bn.num_batches_tracked" not in {p.path for p in out.params()}


def test_traced_model_train_graph_keeps_dropout_when_flags_stay_true() -> None:
    g, x = traced("mlp", "plain", "train")
    out = optimize(g, PIPELINE)
    assert [n.op for n in out.ops()].count("dropout") == 1 and not out.flags()
    np.testing.assert_array_equal(ir.interpret(out, [x])[0], ir.interpret(g, [x])[0])
