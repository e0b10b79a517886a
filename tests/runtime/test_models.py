"""Compiled models against eager execution: an MLP, a CNN with batch norm and a transformer encoder layer, each
plain, with LoRA and with QLoRA (every fold policy), at one and two threads.

Tolerance: max |compiled - eager| <= TOLERANCE[model] * max(1, max |eager|). Compiled code sums in another order
(blocked GEMM, folded batch norm, merged LoRA weights, vectorized reductions) and uses our own exp/erf (<= 1.5
ulp): float32 rounding of sums with K terms grows like sqrt(K) * 2^-24 per layer, so the bounds are a few hundred
ulp of the output scale, which a wrong index or a lost term exceeds by orders of magnitude.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F

from ..models import MLP

TOLERANCE = {"mlp": 2e-5, "cnn": 5e-5, "encoder": 2e-4}


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16)
        self.drop, self.fc = nn.Dropout(0.3), nn.Linear(16 * 3 * 3, 5)

    def forward(self, x: Any) -> Any:
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(self.drop(braze.flatten(x, 1)))


def encoder() -> nn.Module:
    return nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1, activation="gelu", batch_first=True)


MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], list[str] | None]] = {
    "mlp": (lambda: MLP(24, 48, 10), (4, 24), None), "cnn": (CNN, (2, 3, 12, 12), ["conv1", "conv2", "fc"]),
    "encoder": (encoder, (2, 10, 32), None)}
VARIANTS = ("plain", "lora", "qlora-merge", "qlora-keep", "qlora-auto")


def build(name: str, variant: str) -> tuple[nn.Module, np.ndarray, dict[str, Any]]:
    """The model in eval mode with non-trivial batch-norm statistics and adapters, an input, compile options."""
    make, shape, targets = MODELS[name]
    braze.manual_seed(0)
    model = make()
    rng = np.random.default_rng(3)
    for _, m in model.named_modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.assign(rng.standard_normal(m.num_features) * 0.2)
            m.running_var.assign(rng.uniform(0.5, 2.0, m.num_features))
            m.weight.assign(rng.uniform(0.5, 1.5, m.num_features))
    options: dict[str, Any] = {}
    if variant == "lora":
        model.apply_lora(nn.Lora(4, 8, targets=targets))
    elif variant.startswith("qlora"):
        model.apply_qlora(nn.QLora(4, 8, nn.Quantizer("nf4", block_size=16), targets=targets))
        options["policy"] = variant.split("-")[1]
    for _, p in model.named_param_slots():
        if p.adapter is not None:
            p.adapter.b.assign(rng.standard_normal(p.adapter.b.shape) * 0.1)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    return model.eval(), x, options


def check(compiled: Any, model: nn.Module, x: np.ndarray, name: str) -> None:
    with braze.no_grad():
        want = model.valid()(braze.tensor(x)).numpy()
    got = compiled(x)
    assert got.shape == want.shape and got.dtype == want.dtype
    scale = max(1.0, float(np.max(np.abs(want))))
    error = float(np.max(np.abs(got - want)))
    assert error <= TOLERANCE[name] * scale, f"max |compiled - eager| = {error:.3g} at output scale {scale:.3g}"


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", list(MODELS))
def test_models_compiled_match_eager(name: str, variant: str) -> None:
    model, x, options = build(name, variant)
    compiled = braze.compile(model, x, threads=1, **options)
    check(compiled, model, x, name)
    ops = {n.op for n in compiled.graph.nodes} | {n.op for f in compiled.graph.nodes if f.op == "fused"
                                                   for n in f.attr["body"].nodes}
    assert not ops & {"dropout", "flag", "batch_norm_flag"}
    if variant in ("plain", "lora", "qlora-merge"):  # "keep" leaves a convolution's low-rank path beside it
        assert not ops & {"lora_merge", "dequantize", "batch_norm"}


@pytest.mark.parametrize("name", list(MODELS))
def test_models_two_threads_match_eager(name: str) -> None:
    model, x, options = build(name, "lora")
    compiled = braze.compile(model, x, threads=2, **options)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(x.shape).astype(np.float32)
        check(compiled, model, x, name)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_any_thread_count_gives_the_bits_of_one(name: str) -> None:
    """The pool's threads claim each kernel's units from each other at run time, and every unit is computed the
    same way whoever takes it: 2, 3 and 4 threads give exactly the bytes of one, call after call."""
    model, x, options = build(name, "plain")
    x = np.concatenate([x] * 3)[:2 * len(x) + 1]  # an odd batch: odd unit counts in every kernel
    want = braze.compile(model, x, threads=1, **options)(x)
    for threads in (2, 3, 4):
        compiled = braze.compile(model, x, threads=threads, **options)
        for _ in range(3):
            assert compiled(x).tobytes() == want.tobytes(), f"{threads} threads"


def test_models_lazy_compile_per_batch_size() -> None:
    model, x, _ = build("mlp", "plain")
    compiled = braze.compile(model)
    for batch in (1, 4, 7):
        check(compiled, model, np.resize(x, (batch, x.shape[1])).astype(np.float32), "mlp")
    assert len(compiled.signatures()) == 3


def deep_mlp(layers: int) -> nn.Module:
    braze.manual_seed(0)
    return nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(16, 16), nn.ReLU())]).eval()


def test_models_call_costs_the_same_python_work_at_any_depth() -> None:
    """No Python per op: a 2-layer and a 12-layer MLP make exactly the same Python-level calls."""
    from .test_executable import profiled
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    shallow, deep = braze.compile(deep_mlp(2), x), braze.compile(deep_mlp(12), x)
    assert len(deep.kernels()) >= 6 * len(shallow.kernels()) // 2
    shallow(x), deep(x)
    few, many = profiled(lambda: shallow(x)), profiled(lambda: deep(x))
    assert [c[1:] for c in few] == [c[1:] for c in many]
    assert not [c for c in many if c[1].startswith(("braze.ir", "braze.frontend", "braze.codegen"))]


def test_models_call_with_numpy_math_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    model, x, options = build("encoder", "lora")
    compiled = braze.compile(model, x, **options)
    want = compiled(x)

    def forbidden(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("numpy math was called during a compiled call")

    for name in ("add", "multiply", "matmul", "dot", "einsum", "exp", "tanh", "maximum", "copyto", "where"):
        monkeypatch.setattr(np, name, forbidden)
    got = compiled(x)
    monkeypatch.undo()
    np.testing.assert_array_equal(got, want)


def test_models_concurrent_calls_from_python_threads() -> None:
    import threading
    model, x, options = build("cnn", "plain")
    compiled = braze.compile(model, x, threads=2, **options)
    inputs = [np.random.default_rng(s).standard_normal(x.shape).astype(np.float32) for s in range(4)]
    expected = [compiled(a) for a in inputs]
    wrong: list[int] = []

    def work(k: int) -> None:
        for _ in range(10):
            if not np.array_equal(compiled(inputs[k]), expected[k]):
                wrong.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not wrong and not any(t.is_alive() for t in threads)
