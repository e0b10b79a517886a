"""Compiled training steps of the benchmark model kinds (tests/test_train_step.py covers the optimizer options):
an MLP, a CNN with batch norm and dropout and a transformer encoder layer with dropout, at sizes the reference
interpreter runs quickly, plain and with LoRA, with SGD-momentum and AdamW. 20 steps equal eager braze's in float64
to 1e-10 (losses, weights, running statistics, optimizer state; dropout masks from the same generator), compiled
float32 runs within stated tolerances, and torch's training loop agrees where torch is installed (dropout off).
An op without a VJP rule or without a lowering of its backward fails at compile time naming the op and module."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F
from braze.ir import BrazeError
from braze.train_step import step_running
from tests.test_train_step import Interpreted

STEPS = 20
F64 = dict(rtol=1e-10, atol=1e-12)
OPTIMIZERS: dict[str, Callable[[Any], Any]] = {
    "sgd": lambda params: braze.optim.SGD(params, lr=0.05, momentum=0.9),
    "adamw": lambda params: braze.optim.AdamW(params, lr=1e-3),
}


class CNN(nn.Module):
    """The benchmark CNN's layers (conv + batch norm + ReLU twice, one strided, average pool, linear) small."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.c2, self.b2 = nn.Conv2d(4, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8)
        self.drop, self.fc = nn.Dropout(p), nn.Linear(8, 10)

    def forward(self, x: Any) -> Any:
        x = F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(x))))))
        return self.fc(self.drop(x.mean(dim=(2, 3))))


@dataclasses.dataclass
class Kind:
    """A model kind: how to build it (with dropout p), its example batch and its loss."""

    build: Callable[[float], nn.Module]
    batch: Callable[[np.random.Generator], tuple[np.ndarray, np.ndarray]]
    loss: Callable[[Any, Any], Any]


KINDS = {
    "mlp": Kind(lambda p: nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 10)),
                lambda rng: (rng.standard_normal((8, 20)), rng.integers(0, 10, 8)), F.cross_entropy),
    "cnn": Kind(CNN, lambda rng: (rng.standard_normal((4, 3, 8, 8)), rng.integers(0, 10, 4)), F.cross_entropy),
    "transformer": Kind(lambda p: nn.TransformerEncoderLayer(16, 2, 32, dropout=p, activation="gelu",
                                                             batch_first=True),
                        lambda rng: (rng.standard_normal((2, 6, 16)), rng.standard_normal((2, 6, 16))), F.mse_loss),
}


# The adapters a model trains with: none, LoRA, or QLoRA (NF4 base weights, dequantized in the step's graph).
ADAPTERS: dict[str, Callable[[], Any]] = {"plain": lambda: None, "lora": lambda: nn.Lora(2, 4),
                                          "qlora": lambda: nn.QLora(2, 4)}


def _model(kind: str, dtype: type, lora: bool | str, p: float) -> nn.Module:
    """A kind's model in training mode in `dtype`, its parameters drawn now (lazy ones would draw later); `lora`
    names an ADAPTERS entry (True: "lora")."""
    adapter = ("lora" if lora else "plain") if isinstance(lora, bool) else lora
    return _prepared(lambda: KINDS[kind].build(p), dtype, ADAPTERS[adapter]())


def _prepared(build: Callable[[], nn.Module], dtype: type, lora: nn.Lora | nn.QLora | None) -> nn.Module:
    """build() from manual_seed(0) in training mode in `dtype`, with `lora`'s adapters, its parameters drawn."""
    braze.manual_seed(0)
    model = build().train()
    model = model.double() if dtype is np.float64 else model
    if isinstance(lora, nn.QLora):
        model.apply_qlora(lora)
    elif lora is not None:
        model.apply_lora(lora)
    rng = np.random.default_rng(3)
    for path, param in model.named_parameters():
        if path.endswith("lora_b"):  # B starts at zero, which would leave A's first gradient zero
            param.assign((rng.standard_normal(param.shape) * 0.1).astype(dtype))
        param.detach()
    return model


def _batch(kind: str, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    x, y = KINDS[kind].batch(np.random.default_rng(1))
    return x.astype(dtype), (y.astype(dtype) if y.dtype.kind == "f" else y)


def _eager(loss_fn: Callable[[Any, Any], Any], model: nn.Module, opt: Any, x: np.ndarray, y: np.ndarray,
           steps: int = STEPS) -> list[float]:
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(braze.tensor(x)), braze.tensor(y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _trained(kind: str, dtype: type, lora: bool | str, optimizer: str, p: float,
             compiled: bool) -> tuple[nn.Module, Any, list[float]]:
    """STEPS steps of a compiled (or, in float64, interpreted) step from manual_seed(1), synced back."""
    model = _model(kind, dtype, lora, p)
    opt = OPTIMIZERS[optimizer](model.parameters())
    x, y = _batch(kind, dtype)
    if compiled:
        step = braze.compile_train_step(model, KINDS[kind].loss, opt, x, y)
    else:
        graph = braze.train_step_graph(model, KINDS[kind].loss, opt, x, y)
        step = step_running(graph, Interpreted(graph), opt, model)
    braze.manual_seed(1)
    losses = [float(step(x, y)) for _ in range(STEPS)]
    step.sync(model)
    return model, opt, losses


def _eager_trained(kind: str, dtype: type, lora: bool | str, optimizer: str, p: float) -> tuple[nn.Module, Any, list[float]]:
    model = _model(kind, dtype, lora, p)
    opt = OPTIMIZERS[optimizer](model.parameters())
    braze.manual_seed(1)
    return model, opt, _eager(KINDS[kind].loss, model, opt, *_batch(kind, dtype))


def _assert_runs_equal(mine: tuple[nn.Module, Any, list[float]], want: tuple[nn.Module, Any, list[float]],
                       **tolerance: float) -> None:
    """Losses, every param slot (weights and running statistics) and the optimizer state agree."""
    (model, opt, losses), (eager, eager_opt, eager_losses) = mine, want
    np.testing.assert_allclose(losses, eager_losses, **tolerance)
    slots = dict(eager.named_param_slots())
    for path, p in model.named_param_slots():
        np.testing.assert_allclose(p.detach().numpy(), slots[path].detach().numpy(), **tolerance, err_msg=path)
    wanted = dict(zip((id(p) for p in model.parameters()), eager.parameters()))
    for p, state in opt.state.items():
        want_state = eager_opt.state[wanted[id(p)]]
        assert set(state) == set(want_state)
        for key, value in want_state.items():
            np.testing.assert_allclose(state[key], value, **tolerance, err_msg=key)


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("lora", sorted(ADAPTERS))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_train_step_equals_eager_training_in_float64(kind: str, lora: str, optimizer: str) -> None:
    """Dropout on (p=0.2): both draw their masks' seeds from braze's generator after manual_seed(1). With QLoRA
    only the adapters train; the NF4 codes and scales stay as they are."""
    p = 0.0 if kind == "mlp" else 0.2
    _assert_runs_equal(_trained(kind, np.float64, lora, optimizer, p, compiled=False),
                       _eager_trained(kind, np.float64, lora, optimizer, p), **F64)


@pytest.mark.parametrize("kind, lora, optimizer", [("cnn", True, "adamw"), ("transformer", True, "adamw")])
def test_compiled_train_step_equals_eager_training_in_float32(kind: str, lora: bool, optimizer: str) -> None:
    """float32 with dropout: the compiled kernels sum in another order, so 20 steps agree to 1e-4 relative. Not
    AdamW on parameters whose exact gradient is zero (the attention's key bias, a conv bias before batch norm):
    Adam scales their rounding noise up to lr-sized steps of either sign."""
    _assert_runs_equal(_trained(kind, np.float32, lora, optimizer, 0.2, compiled=True),
                       _eager_trained(kind, np.float32, lora, optimizer, 0.2), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_compiled_qlora_step_trains_only_the_adapters_as_eager_training_in_float64(optimizer: str) -> None:
    """The native step of a float64 QLoRA model: the NF4 base is dequantized inside the graph every step (the
    packed kernels, tests/test_train_packed.py, are float32), only the adapter factors (and biases) train, and 20
    steps equal eager braze's to 1e-10."""
    mine = _trained("mlp", np.float64, "qlora", optimizer, 0.0, compiled=True)
    _assert_runs_equal(mine, _eager_trained("mlp", np.float64, "qlora", optimizer, 0.0), **F64)
    trained = {path for path, p in mine[0].named_parameters() if p.requires_grad}
    assert trained and all("lora_" in path or path.endswith("bias") for path in trained)


@pytest.mark.parametrize("lora", [False, True], ids=["plain", "lora"])
def test_compiled_train_step_trains_an_embedding_as_eager_training_in_float64(lora: bool) -> None:
    """An embedding's backward is index_add, each repeated token adding its gradient to the same row (of the
    table, or of the adapter factor the tokens index): 5 compiled SGD-momentum steps equal eager braze's to 1e-10."""
    tokens = np.array([[1, 4, 4, 0, 11], [4, 1, 7, 7, 7], [0, 0, 11, 4, 2]])
    target = np.random.default_rng(1).standard_normal((3, 5, 3))
    runs = []
    for compiled in (True, False):
        model = _prepared(lambda: nn.Sequential(nn.Embedding(12, 6), nn.Linear(6, 3)), np.float64,
                          nn.Lora(2, 4, targets=("0", "1")) if lora else None)
        opt = OPTIMIZERS["sgd"](model.parameters())
        if compiled:
            step = braze.compile_train_step(model, F.mse_loss, opt, tokens, target)
            losses = [float(step(tokens, target)) for _ in range(5)]
            step.sync(model)
        else:
            losses = _eager(F.mse_loss, model, opt, tokens, target, steps=5)
        runs.append((model, opt, losses))
    assert runs[0][2][-1] < runs[0][2][0]
    _assert_runs_equal(*runs, **F64)


def _torch_losses(kind: str, model: nn.Module, optimizer: str, x: np.ndarray, y: np.ndarray) -> tuple[Any, list]:
    """STEPS steps of torch's own training loop from `model`'s weights (dropout off), in float64."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)  # these tiny models only lose to thread start-up on a shared machine
    twin = {"mlp": lambda: torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                                               torch.nn.ReLU(), torch.nn.Linear(32, 10)),
            "cnn": lambda: _torch_cnn(torch),
            "transformer": lambda: torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, activation="gelu",
                                                                    batch_first=True)}[kind]().double().train()
    twin.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in model.state_dict().items()})
    opt = {"sgd": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
           "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-3)}[optimizer](twin.parameters())
    loss_fn = {"mlp": torch.nn.functional.cross_entropy, "cnn": torch.nn.functional.cross_entropy,
               "transformer": torch.nn.functional.mse_loss}[kind]
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = loss_fn(twin(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return twin, losses


def _torch_cnn(torch: Any) -> Any:
    tnn = torch.nn

    class TorchCNN(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.b1 = tnn.Conv2d(3, 4, 3, padding=1), tnn.BatchNorm2d(4)
            self.c2, self.b2 = tnn.Conv2d(4, 8, 3, stride=2, padding=1), tnn.BatchNorm2d(8)
            self.fc = tnn.Linear(8, 10)

        def forward(self, x: Any) -> Any:
            x = torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))))
            return self.fc(x.mean(dim=(2, 3)))
    return TorchCNN()


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_train_step_equals_torch_training_in_float64(kind: str, optimizer: str) -> None:
    """torch's kernels sum in their own order: 20 float64 steps agree to 1e-9 relative."""
    pytest.importorskip("torch")
    x, y = _batch(kind, np.float64)
    twin, want = _torch_losses(kind, _model(kind, np.float64, False, 0.0), optimizer, x, y)
    model, _, losses = _trained(kind, np.float64, False, optimizer, 0.0, compiled=False)
    np.testing.assert_allclose(losses, want, rtol=1e-9)
    state = {k: v.detach().numpy() for k, v in twin.state_dict().items()}
    for path, value in model.state_dict().items():
        if path not in state:  # torch also counts batches (num_batches_tracked)
            continue
        got, expected = np.asarray(value), state[path]
        if path.endswith("in_proj_bias"):
            # The key bias shifts every score of a row alike, which softmax cancels: its gradient is zero in exact
            # arithmetic, so both sides hold only rounding noise (~1e-12, by summation order and vector width).
            third = got.shape[0] // 3
            np.testing.assert_allclose(got[third:2 * third], expected[third:2 * third], rtol=0, atol=1e-10,
                                       err_msg=path)
            got, expected = np.delete(got, np.s_[third:2 * third]), np.delete(expected, np.s_[third:2 * third])
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12, err_msg=path)


def test_compile_train_step_names_an_op_without_a_vjp_rule_and_its_module(monkeypatch: pytest.MonkeyPatch) -> None:
    from braze.ir import registry
    monkeypatch.setitem(registry._REGISTRY, "gelu", dataclasses.replace(registry.get_op("gelu"), vjp=None))
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
    with pytest.raises(BrazeError, match="op 'gelu' \\(module '1'\\).* has no vjp rule"):
        braze.compile_train_step(model, F.mse_loss, braze.optim.SGD(model.parameters(), lr=0.1),
                                 np.zeros((4, 4), np.float32), np.zeros((4, 2), np.float32))


def test_compile_train_step_names_a_backward_op_without_a_lowering_and_its_module(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An embedding's backward adds rows with index_add, which its forward never uses: without index_add's
    lowering the step fails to compile, naming index_add and the embedding's module."""
    from braze.codegen import lower
    monkeypatch.setenv("BRAZE_CACHE", "0")  # a cached object of this graph would skip codegen
    monkeypatch.setenv("BRAZE_COMPILE_WORKERS", "0")  # a worker process would still have the lowering
    monkeypatch.delitem(lower.LOWERINGS, "index_add")
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 2))
    message = "cannot compile index_add\\(.*\\) \\(from 0( @ [^)]*)?\\): no lowering is registered"
    with pytest.raises(BrazeError, match=message):
        braze.compile_train_step(model, F.mse_loss, braze.optim.SGD(model.parameters(), lr=0.1),
                                 np.array([[1, 2, 3]]), np.zeros((1, 3, 2), np.float32))


def _sliced_cnn_run(dtype: type, threads: int | None, steps: int = 3) -> tuple[nn.Module, Any, list[float], Any]:
    """A few compiled SGD-momentum steps of the CNN on 16 images of 16x16: its first convolution's weight gradient
    sums 16 * 256 positions, enough to be cut into image slices."""
    model = _prepared(lambda: CNN(0.0), dtype, None)
    opt = OPTIMIZERS["sgd"](model.parameters())
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((16, 3, 16, 16)).astype(dtype), rng.integers(0, 10, 16)
    step = braze.compile_train_step(model, F.cross_entropy, opt, x, y, threads=threads)
    losses = [float(step(x, y)) for _ in range(steps)]
    step.sync(model)
    return model, opt, losses, step


def test_compiled_cnn_step_sums_sliced_weight_gradients_as_eager_training_in_float64() -> None:
    model, opt, losses, step = _sliced_cnn_run(np.float64, threads=None)
    sliced = [n for n in step.executable.graph.ops() if n.op == "conv2d_grad_weight_slices"]
    assert [n.attr["slices"] for n in sliced] == [4]
    eager = _prepared(lambda: CNN(0.0), np.float64, None)
    eager_opt = OPTIMIZERS["sgd"](eager.parameters())
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((16, 3, 16, 16)), rng.integers(0, 10, 16)
    _assert_runs_equal((model, opt, losses), (eager, eager_opt, _eager(F.cross_entropy, eager, eager_opt, x, y, 3)),
                       **F64)


def test_compiled_cnn_step_gives_the_same_weights_on_one_and_two_threads_in_float32() -> None:
    one, two = _sliced_cnn_run(np.float32, threads=1)[0], _sliced_cnn_run(np.float32, threads=2)[0]
    slots = dict(two.named_param_slots())
    for path, p in one.named_param_slots():
        np.testing.assert_array_equal(p.detach().numpy(), slots[path].detach().numpy(), err_msg=path)
