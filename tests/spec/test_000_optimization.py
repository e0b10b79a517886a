"""Document 000, "Optimization" (and the sentences of the overview about parameter identity and optimizers).

Each test's docstring quotes the sentence it checks.
"""
from __future__ import annotations

import numpy as np

import braze
import braze.nn.functional as F
from braze import nn
from braze.optim import (Adam, AdamConfig, GradientsParams, ModuleOptimizer, OptimizerRecord, ParamState,
                         SgdConfig)


class Head(nn.Module):
    def __init__(self, rng: np.random.Generator) -> None:
        super().__init__()
        self.weight = nn.Param(rng.standard_normal((1, 6)).astype(np.float32) * 0.5)
        self.bias = nn.Param(np.zeros(1, np.float32))
        self.dropout = nn.Flag(True)


class Net(nn.Module):
    """3 -> 6 -> 1 with a nested head, so traversal has something to walk."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        rng = np.random.default_rng(seed)
        self.weight = nn.Param(rng.standard_normal((6, 3)).astype(np.float32) * 0.5)
        self.bias = nn.Param(np.zeros(6, np.float32))
        self.head = Head(rng)

    def forward(self, x):
        hidden = braze.tanh(F.linear(x, self.weight, self.bias))
        return F.linear(hidden, self.head.weight, self.head.bias)


def batch(device=None):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((12, 3)).astype(np.float32)
    x, y = braze.tensor(x), braze.tensor(np.cos(x[:, :1]))
    return (x, y) if device is None else (x.to(device), y.to(device))


def sequence_step(optim, lr, model, x, y):
    """The three steps of the update sequence."""
    grads = F.mse_loss(model(x), y).backward()
    gp = GradientsParams.from_grads(grads, model)
    return optim.step(lr, model, gp)


def snapshot(model):
    return {k: np.array(v, copy=True) for k, v in model.state_dict().items()}


def test_optimizer_updates_one_tensor_at_a_time():
    """ "Optimizer updates one tensor at a time from its gradient and optional state." """
    param, grad = np.array([1.0, -1.0]), np.array([0.5, 0.5])
    first, state = AdamConfig().step(0.1, param, grad, None)
    second, state2 = AdamConfig().step(0.1, first, grad, state)
    assert state["step"] == 1 and state2["step"] == 2
    np.testing.assert_allclose(first, [0.900000002, -1.099999998], rtol=1e-12)
    plain, no_state = SgdConfig().step(0.1, param, grad, None)
    np.testing.assert_allclose(plain, [0.95, -1.05], rtol=1e-12)
    assert no_state == {}


def test_state_serializes_tensors_and_scalars(tmp_path):
    """ "State<D> implements Clone and RecordState, allowing tensors and scalars to be serialized independently
    of backend types." """
    _, state = AdamConfig().step(0.1, np.ones(3, np.float32), np.ones(3, np.float32), None)
    record = OptimizerRecord({11: ParamState("adam", braze.Device("cpu", 0), state)})
    path = tmp_path / "optimizer.safetensors"
    record.save(path)
    loaded = OptimizerRecord.load(path)[11]
    assert loaded.state["step"] == 1 and isinstance(loaded.state["step"], int)
    np.testing.assert_array_equal(loaded.state["exp_avg"], state["exp_avg"])
    assert loaded.state["exp_avg"].dtype == np.float32


def test_module_optimizer_manages_traversal_gradient_lookup_and_state():
    """ "ModuleOptimizer wraps these optimizers and manages module traversal, parameter groups, gradient
    lookup, device migration, and per-parameter state." (traversal, gradient lookup, per-parameter state) """
    model = Net()
    before = snapshot(model)
    optim = ModuleOptimizer(AdamConfig())
    x, y = batch()
    sequence_step(optim, 0.01, model, x, y)
    after = snapshot(model)
    assert all(not np.array_equal(after[k], before[k]) for k in before)  # the nested head is reached too
    assert {int(optim.state(p.id).state["step"]) for p in model.parameters()} == {1}


def test_module_optimizer_migrates_state_to_the_parameter_device():
    """ "ModuleOptimizer wraps these optimizers and manages module traversal, parameter groups, gradient
    lookup, device migration, and per-parameter state." (device migration) """
    model = Net()
    optim = ModuleOptimizer(AdamConfig())
    sequence_step(optim, 0.01, model, *batch())
    model.fork(braze.Device("cpu", 2))
    sequence_step(optim, 0.01, model, *batch(braze.Device("cpu", 2)))
    assert {optim.state(p.id).device for p in model.parameters()} == {braze.Device("cpu", 2)}


def test_parameter_groups_can_use_different_optimizers():
    """ "Parameter groups can use different optimizers." """
    model = Net()
    optim = ModuleOptimizer(AdamConfig()).add_group(nn.ParamGroup.ids_from_module(model.head), SgdConfig())
    sequence_step(optim, 0.01, model, *batch())
    kinds = {name: optim.state(p.id).optimizer for name, p in model.named_parameters()}
    assert kinds == {"weight": "adam", "bias": "adam", "head.weight": "sgd", "head.bias": "sgd"}


def test_the_update_sequence():
    """ "An update proceeds as follows: 1. Run the model and call loss.backward(). 2. Convert the tensor
    gradients with GradientsParams::from_grads(grads, &model). 3. Call optimizer.step(learning_rate, model,
    grads) to obtain the updated module." """
    model = Net()
    x, y = batch()
    optim = ModuleOptimizer(AdamConfig())
    losses = []
    for _ in range(30):
        loss = F.mse_loss(model(x), y)
        losses.append(float(loss))
        grads = loss.backward()
        gp = GradientsParams.from_grads(grads, model)
        assert set(gp) == {p.id for p in model.parameters()}
        model = optim.step(0.05, model, gp)
    assert isinstance(model, Net) and losses[-1] < 0.5 * losses[0]


def test_tensor_parameters_use_their_identity_for_optimizer_state_and_gradients(tmp_path):
    """ "Tensor parameters use that identity to associate optimizer state and gradients." (Optimizer state
    follows ParamIds: a model and optimizer restored from files continue exactly as the uninterrupted run.) """
    x, y = batch()
    original, optim = Net(0), ModuleOptimizer(AdamConfig())
    for _ in range(3):
        sequence_step(optim, 0.05, original, x, y)
    original.save_file(tmp_path / "model.safetensors")
    optim.save_file(tmp_path / "optim.safetensors")
    restored = Net(7).load_file(tmp_path / "model.safetensors")
    resumed = ModuleOptimizer(AdamConfig()).load_file(tmp_path / "optim.safetensors")
    sequence_step(optim, 0.05, original, x, y)
    sequence_step(resumed, 0.05, restored, x, y)
    for key, value in snapshot(original).items():
        np.testing.assert_array_equal(snapshot(restored)[key], value)


def test_updates_happen_outside_the_graph_and_restore_trainability():
    """ "The optimizer performs updates outside the autodiff graph and restores parameter trainability and
    checkpointing strategy afterward." """
    model = Net()
    model.head.bias.set_require_grad(False)
    sequence_step(ModuleOptimizer(SgdConfig(momentum=0.9)), 0.1, model, *batch())
    for name, p in model.named_parameters():
        assert p.val().is_leaf and p.val().grad_fn is None
        assert p.requires_grad == (name != "head.bias") and p.val().is_autodiff()
    loss = F.mse_loss(model(batch()[0]), batch()[1])
    assert loss.requires_grad  # the updated parameters still take part in the next backward pass


def test_a_transferred_parameter_is_an_intermediate_and_fork_gives_leaves():
    """ "A transferred tracked parameter is an intermediate, so use model.fork(&device) when the destination
    module should have independently optimizable leaves." """
    device = braze.Device("cpu", 1)
    moved, forked = Net().to_device(device), Net().fork(device)
    assert not moved.weight.val().is_leaf and forked.weight.val().is_leaf
    optim = ModuleOptimizer(SgdConfig())
    x, y = batch(device)
    before_moved, before_forked = snapshot(moved), snapshot(forked)
    gp_moved = GradientsParams.from_grads(F.mse_loss(moved(x), y).backward(), moved)
    assert len(gp_moved) == 0  # gradients flow back to the source leaves, not to the intermediates
    optim.step(0.1, moved, gp_moved)
    sequence_step(optim, 0.1, forked, x, y)
    assert all(np.array_equal(snapshot(moved)[k], v) for k, v in before_moved.items())
    assert not np.array_equal(snapshot(forked)["weight"], before_forked["weight"])


def test_transfers_preserve_autodiff_context_and_train_enables_it():
    """ "Both to_device and fork preserve source autodiff context; use train() to enable it explicitly." """
    device = braze.Device("cpu", 1)
    for transfer in ("to_device", "fork"):
        snapshot_module = Net().valid()
        moved = getattr(snapshot_module, transfer)(device)
        assert not moved.weight.requires_grad and not moved.weight.val().is_autodiff()
        moved.train()
        assert moved.weight.requires_grad and moved.weight.val().is_autodiff()
        trained = getattr(Net(), transfer)(device)
        assert trained.weight.val().is_autodiff()


def test_torch_style_and_sequence_share_the_update_rules():
    """ "Optimizer updates one tensor at a time from its gradient and optional state." (both front ends
    apply the same rules: the torch-style loop and the update sequence reach the same weights) """
    x, y = batch()
    a, b = Net(), Net()
    opt, optim = Adam(a.parameters(), lr=0.02), ModuleOptimizer(AdamConfig())
    for _ in range(10):
        opt.zero_grad()
        F.mse_loss(a(x), y).backward()
        opt.step()
        sequence_step(optim, 0.02, b, x, y)
    for key, value in snapshot(a).items():
        np.testing.assert_array_equal(snapshot(b)[key], value)
