"""braze.train_step_graph and braze.compile_train_step against eager braze training: 20 steps of the benchmark
MLP with SGD (momentum, Nesterov, dampening, weight decay), Adam and AdamW and several parameter groups, in float64
through the reference interpreter (1e-10) and compiled in float32 (stated tolerances); sync writes weights and
optimizer state back by ParamId so eager steps continue identically; a failing step changes nothing."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F
from benchmarks import models
from braze.ir import BrazeError, interpret
from braze.train_step import step_running
from tests.models import SmallCNN

STEPS = 20
SGD = dict(lr=0.05, momentum=0.9, weight_decay=1e-3, nesterov=True)
F64 = dict(rtol=1e-10, atol=1e-12)
SMALL = 20  # the small MLP's input features


class Interpreted:
    """The reference interpreter behind the executable interface a TrainStep uses: float64 runs, no codegen."""

    def __init__(self, graph: braze.ir.Graph) -> None:
        self.graph, self.weights = graph, dict(graph.weights)

    def run(self, inputs: list[Any]) -> tuple[np.ndarray, ...]:
        return tuple(interpret(self.graph, list(inputs), params=self.weights))

    def write_weights(self, values: dict[str, np.ndarray]) -> None:
        self.weights.update(values)

    def weight(self, path: str) -> np.ndarray:
        return self.weights[path].copy()


def _batch(dtype: type, n: int = 16, features: int = 784) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, features)).astype(dtype), rng.integers(0, 10, n)


def _mlp(dtype: type) -> nn.Module:
    """The benchmark MLP (784-512-512-10)."""
    braze.manual_seed(0)
    model = models.mlp(1).model.train()
    return model.double() if dtype is np.float64 else model


def _small_mlp(dtype: type) -> nn.Module:
    """The benchmark MLP's layers at a size the interpreter runs quickly, for the optimizer variants."""
    braze.manual_seed(0)
    model = nn.Sequential(nn.Linear(SMALL, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 10)).train()
    for p in model.parameters():
        p.detach()  # materialize now: lazy parameters draw from the generator when first read
    return model.double() if dtype is np.float64 else model


def _eager_steps(model: nn.Module, opt: Any, x: np.ndarray, y: np.ndarray, steps: int = STEPS,
                 before_step: Callable[[int], None] = lambda k: None) -> list[float]:
    losses = []
    for k in range(steps):
        before_step(k)
        opt.zero_grad()
        loss = F.cross_entropy(model(braze.tensor(x)), braze.tensor(y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _interpreted_step(model: nn.Module, opt: Any, x: np.ndarray, y: np.ndarray) -> braze.TrainStep:
    graph = braze.train_step_graph(model, F.cross_entropy, opt, x, y)
    return step_running(graph, Interpreted(graph), opt, model)


def _assert_same_training(make_optimizer: Callable[[nn.Module], Any], before_step: Callable[..., None] = None,
                          steps: int = STEPS, make_model: Callable[[type], nn.Module] = _small_mlp) -> None:
    """`steps` interpreted float64 steps, synced, equal `steps` eager steps: losses, weights, optimizer state."""
    before_step = before_step or (lambda opt, k: None)
    model = make_model(np.float64)
    x, y = _batch(np.float64, features=784 if make_model is _mlp else SMALL)
    opt = make_optimizer(model)
    step = _interpreted_step(model, opt, x, y)
    losses = []
    for k in range(steps):
        before_step(opt, k)
        losses.append(float(step(x, y)))
    step.sync(model)
    eager = make_model(np.float64)
    eager_opt = make_optimizer(eager)
    eager_losses = _eager_steps(eager, eager_opt, x, y, steps, lambda k: before_step(eager_opt, k))
    np.testing.assert_allclose(losses, eager_losses, **F64)
    for (path, p), q in zip(model.named_parameters(), eager.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), **F64, err_msg=path)
        mine, want = opt.state[p], eager_opt.state[q]
        assert set(mine) == set(want), path
        for key, value in want.items():
            np.testing.assert_allclose(mine[key], value, **F64, err_msg=f"{path}.{key}")


def test_train_step_of_the_benchmark_mlp_equals_eager_sgd_with_nesterov_momentum_in_float64() -> None:
    _assert_same_training(lambda m: braze.optim.SGD(m.parameters(), **SGD), make_model=_mlp)


def test_train_step_equals_eager_sgd_with_dampening_in_float64() -> None:
    """torch's first step skips the dampening; the later ones apply it."""
    _assert_same_training(lambda m: braze.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, dampening=0.3))


def test_train_step_equals_eager_adamw_in_float64() -> None:
    _assert_same_training(lambda m: braze.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.05))


def test_train_step_equals_eager_adam_with_l2_amsgrad_and_maximize_in_float64() -> None:
    _assert_same_training(lambda m: braze.optim.Adam(m.parameters(), lr=1e-3, betas=(0.8, 0.99), weight_decay=0.01,
                                                     amsgrad=True, maximize=True))


def test_train_step_follows_parameter_groups_and_a_changing_learning_rate_in_float64() -> None:
    """Each group its own lr and betas; the first group's lr and beta1 change between steps (no recompile)."""
    def groups(m: nn.Module) -> Any:
        params = list(m.parameters())
        return braze.optim.Adam([{"params": params[:2]}, {"params": params[2:], "lr": 3e-3, "betas": (0.5, 0.9)}],
                                lr=1e-3)

    def schedule(opt: Any, k: int) -> None:
        opt.param_groups[0]["lr"] = 1e-3 * 0.9 ** k
        opt.param_groups[0]["betas"] = (0.9 - 0.01 * k, 0.999)
    _assert_same_training(groups, schedule)


def test_train_step_continues_eager_state_and_eager_continues_after_sync_in_float64() -> None:
    """2 eager steps, 3 compiled, 2 eager again equal 7 eager steps: the step count and moments carry over."""
    x, y = _batch(np.float64, features=SMALL)
    model, eager = _small_mlp(np.float64), _small_mlp(np.float64)
    opt, eager_opt = (braze.optim.AdamW(m.parameters(), lr=1e-3) for m in (model, eager))
    _eager_steps(model, opt, x, y, 2)
    step = _interpreted_step(model, opt, x, y)
    for _ in range(3):
        step(x, y)
    step.sync(model)
    losses = _eager_steps(model, opt, x, y, 2)
    want = _eager_steps(eager, eager_opt, x, y, 7)[-2:]
    np.testing.assert_allclose(losses, want, **F64)
    assert [s["step"] for s in opt.state.values()] == [7] * len(list(model.parameters()))


def test_train_step_refuses_a_changed_structural_hyper_parameter() -> None:
    x, y = _batch(np.float64, 4, features=SMALL)
    model = _small_mlp(np.float64)
    opt = braze.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = _interpreted_step(model, opt, x, y)
    opt.param_groups[0]["nesterov"] = True
    with pytest.raises(BrazeError, match="hyper-parameters of group 0 changed in a way the compiled step cannot"):
        step(x, y)


@pytest.fixture(scope="module")
def compiled_adamw() -> tuple[nn.Module, Any, list[float]]:
    x, y = _batch(np.float32)
    model = _mlp(np.float32)
    opt = braze.optim.AdamW(model.parameters(), lr=1e-3)
    step = braze.compile_train_step(model, F.cross_entropy, opt, x, y)
    losses = [float(step(x, y)) for _ in range(STEPS)]
    step.sync(model)
    return model, opt, losses


def _assert_close_but_for_a_few(actual: np.ndarray, desired: np.ndarray, close: float, far: float,
                                what: str) -> None:
    """All elements within `far`, and all but 0.1% within `close` (absolute)."""
    np.testing.assert_allclose(actual, desired, rtol=0, atol=far, err_msg=what)
    assert np.mean(np.abs(actual - desired) > close) < 1e-3, what


def test_compiled_adamw_step_equals_eager_in_float32(compiled_adamw) -> None:
    """float32: the compiled kernels sum in another order. Adam moves a weight by about lr wherever |grad| >> eps,
    so a near-zero gradient whose sign rounding flips moves it up to 2 lr apart in one step: weights agree to
    1e-5 but for a few elements, and all to 2e-4 (10% of 20 steps' travel); losses agree to 1e-4 relative."""
    model, opt, losses = compiled_adamw
    x, y = _batch(np.float32)
    eager = _mlp(np.float32)
    eager_opt = braze.optim.AdamW(eager.parameters(), lr=1e-3)
    np.testing.assert_allclose(losses, _eager_steps(eager, eager_opt, x, y), rtol=1e-4, atol=1e-6)
    for (path, p), q in zip(model.named_parameters(), eager.parameters()):
        _assert_close_but_for_a_few(p.detach().numpy(), q.detach().numpy(), 1e-5, 2e-4, path)
        for key in ("exp_avg", "exp_avg_sq"):
            want = eager_opt.state[q][key]
            scale = float(np.max(np.abs(want)))
            _assert_close_but_for_a_few(opt.state[p][key], want, 1e-3 * scale, 1e-2 * scale, f"{path}.{key}")
        assert opt.state[p]["step"] == STEPS


def test_compiled_sgd_step_equals_eager_in_float32() -> None:
    x, y = _batch(np.float32)
    model, eager = _mlp(np.float32), _mlp(np.float32)
    opt = braze.optim.SGD(model.parameters(), **SGD)
    step = braze.compile_train_step(model, F.cross_entropy, opt, x, y)
    losses = [float(step(x, y)) for _ in range(STEPS)]
    step.sync(model)
    eager_opt = braze.optim.SGD(eager.parameters(), **SGD)
    np.testing.assert_allclose(losses, _eager_steps(eager, eager_opt, x, y), rtol=1e-4, atol=1e-6)
    for (path, p), q in zip(model.named_parameters(), eager.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-6, err_msg=path)
        np.testing.assert_allclose(opt.state[p]["momentum_buffer"], eager_opt.state[q]["momentum_buffer"],
                                   rtol=1e-4, atol=1e-6, err_msg=path)


def test_a_failing_compiled_step_leaves_weights_and_state_unchanged(compiled_adamw) -> None:
    model, opt, _ = compiled_adamw
    x, y = _batch(np.float32)
    step = braze.compile_train_step(model, F.cross_entropy, opt, x, y)
    before = {path: step.executable.weight(path) for path in step.graph.weights}
    with pytest.raises(BrazeError):
        step(x[:, :100], y)
    for path, value in before.items():
        np.testing.assert_array_equal(step.executable.weight(path), value, err_msg=path)
    assert step.steps == [STEPS]


def test_compile_train_step_refuses_other_optimizers() -> None:
    model = nn.Linear(3, 2)
    with pytest.raises(BrazeError, match="optimizer RMSprop is not supported \\(supported: braze.optim.SGD, "):
        braze.compile_train_step(model, F.mse_loss, braze.optim.RMSprop(model.parameters()),
                                 np.zeros((4, 3), np.float32), np.zeros((4, 2), np.float32))


def test_compiled_train_step_with_dropout_equals_eager_with_the_same_seed() -> None:
    """Each step draws its dropout seeds from braze's generator as eager dropout does: after the same
    manual_seed, compiled and eager steps drop the same elements, and the masks change from step to step."""
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((8, 12)).astype(np.float32), rng.integers(0, 4, 8)
    runs = []
    for compiled in (True, False):
        braze.manual_seed(0)
        model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 4)).train()
        opt = braze.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        model(braze.tensor(x))  # materialize the weights before either path draws its first seed
        if compiled:
            step = braze.compile_train_step(model, F.cross_entropy, opt, x, y)
            braze.manual_seed(1)
            losses = [float(step(x, y)) for _ in range(6)]
            step.sync(model)
        else:
            braze.manual_seed(1)
            losses = _eager_steps(model, opt, x, y, 6)
        runs.append((losses, [p.detach().numpy() for p in model.parameters()]))
    np.testing.assert_allclose(runs[0][0], runs[1][0], rtol=1e-5, atol=1e-6)
    for mine, want in zip(runs[0][1], runs[1][1]):
        np.testing.assert_allclose(mine, want, rtol=1e-4, atol=1e-6)


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
            _eager_steps(model, opt, x, y, 5)
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
    step = braze.compile_train_step(compiled, F.cross_entropy, braze.optim.AdamW(compiled.parameters()), x, y)
    for _ in range(10):
        step(x, y)
    step.sync(compiled)
    _eager_steps(eager, braze.optim.AdamW(eager.parameters()), x, y, 10)
    for (path, p), q in zip(compiled.named_parameters(), eager.parameters()):
        if path in bases:
            np.testing.assert_array_equal(p.base().numpy(), bases[path], err_msg=path)
        else:
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-6, err_msg=path)


def test_train_step_clips_gradients_by_total_norm_as_clip_grad_norm_in_float64() -> None:
    """max_norm: torch's clip_grad_norm_ (norm of the per-gradient norms, scale by max_norm / (norm + 1e-6))."""
    x, y = _batch(np.float64, features=SMALL)
    model, eager = _small_mlp(np.float64), _small_mlp(np.float64)
    opt, eager_opt = (braze.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, eager))
    graph = braze.train_step_graph(model, F.cross_entropy, opt, x, y, max_norm=0.2)
    step = step_running(graph, Interpreted(graph), opt, model)
    losses = [float(step(x, y)) for _ in range(STEPS)]
    step.sync(model)
    want, norms = [], []
    for _ in range(STEPS):
        eager_opt.zero_grad()
        loss = F.cross_entropy(eager(braze.tensor(x)), braze.tensor(y))
        loss.backward()
        norms.append(float(nn.utils.clip_grad_norm_(eager.parameters(), 0.2)))
        eager_opt.step()
        want.append(loss.item())
    assert sum(n > 0.2 for n in norms) >= STEPS // 2  # the clipping is in effect on most steps
    np.testing.assert_allclose(losses, want, **F64)
    for p, q in zip(model.parameters(), eager.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), **F64)


def _eager_accumulated(model: nn.Module, opt: Any, micro: list[tuple[np.ndarray, np.ndarray]], k: int) -> list[float]:
    """torch's accumulation loop: (loss / k).backward() per micro-batch, one step per k of them."""
    losses = []
    opt.zero_grad()
    for i, (x, y) in enumerate(micro):
        loss = F.cross_entropy(model(braze.tensor(x)), braze.tensor(y))
        (loss / k).backward()
        losses.append(loss.item())
        if (i + 1) % k == 0:
            opt.step()
            opt.zero_grad()
    return losses


def _micro_batches(dtype: type, count: int, features: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(5)
    return [(rng.standard_normal((4, features)).astype(dtype), rng.integers(0, 10, 4)) for _ in range(count)]


def test_train_step_accumulates_gradients_over_micro_batches_in_float64() -> None:
    """accumulate=3: three calls per update; weights and Adam's state move only on every third call."""
    micro = _micro_batches(np.float64, 12, SMALL)
    model, eager = _small_mlp(np.float64), _small_mlp(np.float64)
    opt, eager_opt = (braze.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, eager))
    graph = braze.train_step_graph(model, F.cross_entropy, opt, *micro[0], accumulate=3, max_norm=1.0)
    step = step_running(graph, Interpreted(graph), opt, model)
    first = step.executable.weight("0.weight")
    losses = [float(step(*micro[0])), float(step(*micro[1]))]
    np.testing.assert_array_equal(step.executable.weight("0.weight"), first)
    losses += [float(step(x, y)) for x, y in micro[2:]]
    step.sync(model)

    def clipped_step() -> None:
        nn.utils.clip_grad_norm_(eager.parameters(), 1.0)
        AdamW_step()
    AdamW_step = eager_opt.step
    eager_opt.step = clipped_step
    want = _eager_accumulated(eager, eager_opt, micro, 3)
    np.testing.assert_allclose(losses, want, **F64)
    for (path, p), q in zip(model.named_parameters(), eager.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), **F64, err_msg=path)
        assert opt.state[p]["step"] == 4
        np.testing.assert_allclose(opt.state[p]["exp_avg_sq"], eager_opt.state[q]["exp_avg_sq"], **F64)


def test_compiled_train_step_accumulates_gradients_in_float32() -> None:
    micro = _micro_batches(np.float32, 6, SMALL)
    model, eager = _small_mlp(np.float32), _small_mlp(np.float32)
    opt, eager_opt = (braze.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, eager))
    step = braze.compile_train_step(model, F.cross_entropy, opt, *micro[0], accumulate=2)
    losses = [float(step(x, y)) for x, y in micro]
    step.sync(model)
    np.testing.assert_allclose(losses, _eager_accumulated(eager, eager_opt, micro, 2), rtol=1e-5, atol=1e-6)
    for p, q in zip(model.parameters(), eager.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-6)


def test_compiled_train_step_eval_runs_the_model_with_flags_off_on_the_trained_weights() -> None:
    """step.eval(x) after 4 steps equals the synced model in eval mode: batch norm on the running statistics the
    steps moved, dropout off; and a later step's new weights are seen by the next eval."""
    braze.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                          nn.Dropout(0.5), nn.Linear(64, 10)).train()
    x = np.random.default_rng(1).standard_normal((4, 3, 7, 7)).astype(np.float32)
    y = np.random.default_rng(2).integers(0, 10, 4)
    step = braze.compile_train_step(model, F.cross_entropy, braze.optim.SGD(model.parameters(), lr=0.1), x, y)
    outputs = []
    for _ in range(2):
        for _ in range(4):
            step(x, y)
        got = step.eval(x)
        step.sync(model)
        want = model.eval()(braze.tensor(x)).detach().numpy()
        model.train()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        outputs.append(got)
    assert not np.allclose(outputs[0], outputs[1])
    np.testing.assert_array_equal(step.eval(x), outputs[1])  # evaluation changes nothing


def test_compiled_step_memory_reports_weights_state_and_the_planned_arena() -> None:
    x, y = _batch(np.float32, 4, features=SMALL)
    model = _small_mlp(np.float32)
    step = braze.compile_train_step(model, F.cross_entropy, braze.optim.AdamW(model.parameters()), x, y)
    memory = step.memory()
    weights = sum(p.detach().numpy().nbytes for p in model.parameters())
    assert (memory["weights"], memory["optimizer_state"], memory["buffers"]) == (weights, 2 * weights, 0)
    assert 0 < memory["arena"] <= memory["unplanned"]  # liveness lets intermediates share bytes
    assert memory["peak"] == weights * 3 + memory["arena"] + memory["inputs_and_outputs"]
