"""braze.optim: the per-tensor rules (hand-computed cases and torch.optim), OptimizerRecord, ModuleOptimizer and
the torch-style optimizers, and the agreement of the two front ends."""
from __future__ import annotations

import numpy as np
import pytest

import braze
import braze.nn.functional as F
from braze import BrazeError, RecordError, nn
from braze.optim import (SGD, Adadelta, AdadeltaConfig, Adagrad, AdagradConfig, Adam, Adamax, AdamaxConfig, AdamConfig,
                         AdamW, AdamWConfig, GradientsParams, ModuleOptimizer, NAdam, NAdamConfig, OptimizerRecord,
                         ParamState, RAdam, RAdamConfig, RMSprop, RmsPropConfig, SgdConfig)


def run(config, lr, param, grads):
    """Apply `config` for each gradient in turn, threading the state; returns the final param and state."""
    state = None
    for g in grads:
        param, state = config.step(lr, param, np.asarray(g, param.dtype), state)
    return param, state


# --- the rules on hand-computed cases ------------------------------------------------------------------------
def test_sgd_momentum_dampening_and_weight_decay_by_hand():
    # step 1: g' = g + 0.01 p = [0.51, 0.23]; buf = g'; p = p - 0.1 buf = [0.949, -2.023]
    # step 2: g' = [0.50949, 0.22977]; buf = 0.9 [0.51, 0.23] + 0.9 g' = [0.917541, 0.413793]
    #         p = [0.949 - 0.0917541, -2.023 - 0.0413793]
    config = SgdConfig(momentum=0.9, dampening=0.1, weight_decay=0.01)
    p, state = run(config, 0.1, np.array([1.0, -2.0]), [[0.5, 0.25]] * 2)
    np.testing.assert_allclose(p, [0.8572459, -2.0643793], rtol=1e-12)
    np.testing.assert_allclose(state["momentum_buffer"], [0.917541, 0.413793], rtol=1e-12)


def test_sgd_nesterov_by_hand():
    # step 1: buf = 0.5; g = 0.5 + 0.9 * 0.5 = 0.95; p = 0.905. step 2: buf = 0.95; g = 0.5 + 0.855; p = 0.7695
    p, _ = run(SgdConfig(momentum=0.9, nesterov=True), 0.1, np.array([1.0]), [[0.5]] * 2)
    np.testing.assert_allclose(p, [0.7695], rtol=1e-12)


def test_sgd_plain_and_maximize_by_hand():
    p, state = run(SgdConfig(), 0.1, np.array([1.0]), [[0.5]])
    np.testing.assert_allclose(p, [0.95], rtol=1e-12)
    assert state == {}
    p, _ = run(SgdConfig(maximize=True), 0.1, np.array([1.0]), [[0.5]])
    np.testing.assert_allclose(p, [1.05], rtol=1e-12)


def test_adam_two_steps_by_hand():
    # step 1: m = 0.05, v = 0.00025, step size 0.1 / 0.1, denom = sqrt(0.00025 / 0.001) + 1e-8 = 0.50000001
    #         p = 1 - 0.05 / 0.50000001 = 0.900000002
    # step 2: m = 0.095, v = 0.00049975, step size 0.1 / 0.19, denom = sqrt(0.00049975 / 0.001999) + 1e-8
    #         p = 0.900000002 - (0.1 / 0.19) * 0.095 / 0.50000001 = 0.800000004
    p, state = run(AdamConfig(), 0.1, np.array([1.0]), [[0.5]])
    np.testing.assert_allclose(p, [0.900000002], rtol=1e-12)
    p, state = AdamConfig().step(0.1, p, np.array([0.5]), state)
    np.testing.assert_allclose(p, [0.800000004], rtol=1e-12)
    assert state["step"] == 2
    np.testing.assert_allclose(state["exp_avg"], [0.095], rtol=1e-12)
    np.testing.assert_allclose(state["exp_avg_sq"], [0.00049975], rtol=1e-12)


def test_adam_l2_weight_decay_by_hand():
    # g' = 0.5 + 0.1 * 1 = 0.6; m = 0.06; denom = 0.6 + 1e-8; p = 1 - 0.06 / 0.60000001
    p, _ = run(AdamConfig(weight_decay=0.1), 0.1, np.array([1.0]), [[0.5]])
    np.testing.assert_allclose(p, [0.9000000016666666], rtol=1e-12)


def test_adamw_decoupled_weight_decay_by_hand():
    # p = 1 * (1 - 0.1 * 0.1) = 0.99, then the Adam step of 0.05 / 0.50000001 on the unchanged gradient
    p, _ = run(AdamWConfig(weight_decay=0.1), 0.1, np.array([1.0]), [[0.5]])
    np.testing.assert_allclose(p, [0.890000002], rtol=1e-12)
    assert AdamWConfig().weight_decay == 1e-2


def test_adam_amsgrad_keeps_the_largest_second_moment_by_hand():
    # eps = 0. step 1 (g = 1): m = 0.1, v = 0.001, p = 1 - 1.0 * 0.1 / 1 = 0.9
    # step 2 (g = 0): m = 0.09, v = 0.000999 < max 0.001; p = 0.9 - (0.1 / 0.19) * 0.09 / sqrt(0.001 / 0.001999)
    p, state = run(AdamConfig(eps=0.0, amsgrad=True), 0.1, np.array([1.0]), [[1.0], [0.0]])
    np.testing.assert_allclose(p, [0.8330276858789711], rtol=1e-12)
    np.testing.assert_allclose(state["max_exp_avg_sq"], [0.001], rtol=1e-12)
    plain, _ = run(AdamConfig(eps=0.0), 0.1, np.array([1.0]), [[1.0], [0.0]])
    np.testing.assert_allclose(plain, [0.8329941745863457], rtol=1e-12)


@pytest.mark.parametrize("make", [lambda: SgdConfig(momentum=-1.0), lambda: SgdConfig(nesterov=True),
                                  lambda: AdamConfig(betas=(1.0, 0.9)), lambda: AdamConfig(eps=-1.0),
                                  lambda: AdamWConfig(weight_decay=-0.1)])
def test_rules_reject_invalid_hyperparameters(make):
    with pytest.raises(BrazeError):
        make()


# --- against torch.optim ------------------------------------------------------------------------------------
TORCH_CASES = [
    ("SGD", dict(lr=0.1), SgdConfig()),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.2, weight_decay=0.01), SgdConfig(0.9, 0.2, 0.01)),
    ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True, maximize=True), SgdConfig(0.8, nesterov=True, maximize=True)),
    ("Adam", dict(lr=0.01), AdamConfig()),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1, amsgrad=True),
     AdamConfig((0.8, 0.99), 1e-6, 0.1, amsgrad=True)),
    ("Adam", dict(lr=0.02, maximize=True), AdamConfig(maximize=True)),
    ("AdamW", dict(lr=0.01), AdamWConfig()),
    ("AdamW", dict(lr=0.01, weight_decay=0.3, amsgrad=True), AdamWConfig(weight_decay=0.3, amsgrad=True)),
]


@pytest.mark.parametrize("name,kwargs,config", TORCH_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rules_match_torch_optim_over_several_steps(name, kwargs, config, dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    start = rng.standard_normal((3, 4)).astype(dtype)
    grads = [rng.standard_normal((3, 4)).astype(dtype) for _ in range(6)]
    tp = torch.nn.Parameter(torch.from_numpy(start.copy()))
    opt = getattr(torch.optim, name)([tp], foreach=False, **kwargs)
    for g in grads:
        tp.grad = torch.from_numpy(g.copy())
        opt.step()
    ours, _ = run(config, kwargs["lr"], start, grads)
    assert ours.dtype == dtype
    np.testing.assert_allclose(ours, tp.detach().numpy(), rtol=1e-6 if dtype == np.float32 else 1e-13, atol=1e-7)


# --- OptimizerRecord -----------------------------------------------------------------------------------------
def test_optimizer_record_round_trips_exactly(tmp_path):
    _, adam = run(AdamConfig(amsgrad=True), 0.1, np.ones((2, 3), np.float32), [np.full((2, 3), 0.3)] * 3)
    _, sgd = run(SgdConfig(momentum=0.9), 0.1, np.ones(4), [np.arange(4.0)] * 2)
    record = OptimizerRecord({7: ParamState("adam", braze.Device("cpu", 1), adam),
                              9: ParamState("sgd", braze.Device("cpu", 0), sgd)}, metadata={"epoch": "3"})
    path = tmp_path / "opt.safetensors"
    record.save(path)
    loaded = OptimizerRecord.load(path)
    assert sorted(loaded) == [7, 9] and loaded.metadata == {"epoch": "3"}
    for pid in (7, 9):
        a, b = record[pid], loaded[pid]
        assert (a.optimizer, a.device, sorted(a.state)) == (b.optimizer, b.device, sorted(b.state))
        for key, value in a.state.items():
            assert type(b.state[key]) is type(value)
            np.testing.assert_array_equal(b.state[key], value)
            if isinstance(value, np.ndarray):
                assert b.state[key].dtype == value.dtype


def test_optimizer_record_file_is_plain_safetensors(tmp_path):
    from safetensors import safe_open
    _, state = run(AdamConfig(), 0.1, np.ones(2, np.float32), [np.ones(2)])
    path = tmp_path / "opt.safetensors"
    OptimizerRecord({3: ParamState("adam", braze.Device(), state)}).save(path)
    with safe_open(str(path), framework="np") as f:
        assert sorted(f.keys()) == ["3/exp_avg", "3/exp_avg_sq"]
        assert f.metadata()["format"] == "braze.optimizer_record"


def test_optimizer_record_rejects_a_truncated_file(tmp_path):
    _, state = run(AdamConfig(), 0.1, np.ones(64, np.float32), [np.ones(64)])
    path = tmp_path / "opt.safetensors"
    OptimizerRecord({3: ParamState("adam", braze.Device(), state)}).save(path)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(RecordError, match="opt.safetensors: truncated"):
        OptimizerRecord.load(path)


# --- modules for the front ends -----------------------------------------------------------------------------
class MLP(nn.Module):
    """4 -> 8 -> 1 with tanh, weights from a seeded generator (identical for equal seeds)."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        rng = np.random.default_rng(seed)
        self.w1 = nn.Param(rng.standard_normal((8, 4)).astype(np.float32) * 0.5)
        self.b1 = nn.Param(np.zeros(8, np.float32))
        self.w2 = nn.Param(rng.standard_normal((1, 8)).astype(np.float32) * 0.5)
        self.b2 = nn.Param(np.zeros(1, np.float32))

    def forward(self, x):
        return F.linear(braze.tanh(F.linear(x, self.w1, self.b1)), self.w2, self.b2)


def data(n: int = 16):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    return braze.tensor(x), braze.tensor(np.sin(x.sum(axis=1, keepdims=True)))


def arrays(model):
    return {k: np.array(v, copy=True) for k, v in model.state_dict().items()}


@pytest.mark.parametrize("torch_cls,config,kwargs", [
    (SGD, SgdConfig(momentum=0.9, nesterov=True, weight_decay=1e-3), dict(momentum=0.9, nesterov=True,
                                                                         weight_decay=1e-3)),
    (Adam, AdamConfig(amsgrad=True), dict(amsgrad=True)),
    (AdamW, AdamWConfig(weight_decay=0.05), dict(weight_decay=0.05)),
    (RMSprop, RmsPropConfig(momentum=0.5, centered=True), dict(momentum=0.5, centered=True)),
    (Adagrad, AdagradConfig(lr_decay=0.01), dict(lr_decay=0.01)),
    (Adadelta, AdadeltaConfig(eps=1e-3, weight_decay=0.01), dict(lr=1.0, eps=1e-3, weight_decay=0.01)),
    (Adamax, AdamaxConfig(), dict()),
    (NAdam, NAdamConfig(decoupled_weight_decay=True, weight_decay=0.1), dict(decoupled_weight_decay=True,
                                                                           weight_decay=0.1)),
    (RAdam, RAdamConfig(), dict()),
])
def test_mlp_trains_to_the_same_weights_with_both_front_ends(torch_cls, config, kwargs):
    x, y = data()
    a, b = MLP(), MLP()
    lr = kwargs.get("lr", 0.05)
    opt = torch_cls(a.parameters(), **{"lr": lr, **kwargs})
    optim = ModuleOptimizer(config)
    losses = []
    for _ in range(25):
        opt.zero_grad()
        loss = F.mse_loss(a(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss))
        grads = F.mse_loss(b(x), y).backward()
        gp = GradientsParams.from_grads(grads, b)
        b = optim.step(lr, b, gp)
    assert losses[-1] < 0.5 * losses[0]
    after_a, after_b = arrays(a), arrays(b)
    for key in after_a:
        np.testing.assert_array_equal(after_a[key], after_b[key])


def test_module_optimizer_keeps_parameters_trainable_leaves():
    x, y = data()
    model = MLP()
    model.b2.set_require_grad(False)
    ids = [p.id for p in model.parameters()]
    tensors = [p.val() for p in model.parameters()]
    grads = F.mse_loss(model(x), y).backward()
    model = ModuleOptimizer(AdamConfig()).step(0.1, model, GradientsParams.from_grads(grads, model))
    assert [p.id for p in model.parameters()] == ids
    assert all(p.val() is t for p, t in zip(model.parameters(), tensors))
    for name, p in model.named_parameters():
        assert p.val().is_leaf and p.val().grad_fn is None and p.grad is None
        assert p.requires_grad == (name != "b2")


def test_module_optimizer_updates_only_parameters_with_gradients():
    x, y = data()
    model = MLP()
    before = arrays(model)
    grads = F.mse_loss(model(x), y).backward()
    gp = GradientsParams.from_grads(grads, model)
    gp.remove(model.w1.id)
    optim = ModuleOptimizer(SgdConfig())
    optim.step(0.1, model, gp)
    after = arrays(model)
    np.testing.assert_array_equal(after["w1"], before["w1"])
    assert not np.array_equal(after["w2"], before["w2"])
    assert optim.state(model.w1.id) is None and optim.state(model.w2.id) is not None


def test_module_optimizer_groups_choose_rule_and_learning_rate():
    x, y = data()
    model, reference = MLP(), MLP()
    grads = F.mse_loss(model(x), y).backward()
    gp = GradientsParams.from_grads(grads, model)
    expected = {name: np.array(gp[p.id]) for name, p in model.named_parameters()}
    optim = ModuleOptimizer(AdamConfig()).add_group(nn.ParamGroup.paths("w*"), SgdConfig(), lr_scale=0.5)
    optim.step(0.2, model, gp)
    for name, p in model.named_parameters():
        start = reference.state_dict()[name]
        if name.startswith("w"):
            np.testing.assert_allclose(np.asarray(p), start - 0.1 * expected[name], rtol=1e-6)
            assert optim.state(p.id).optimizer == "sgd"
        else:
            assert optim.state(p.id).optimizer == "adam"


def test_module_optimizer_without_default_leaves_unmatched_parameters():
    x, y = data()
    model = MLP()
    before = arrays(model)
    grads = F.mse_loss(model(x), y).backward()
    ModuleOptimizer(None).add_group(nn.ParamGroup.paths("b*"), SgdConfig()).step(
        0.1, model, GradientsParams.from_grads(grads, model))
    after = arrays(model)
    assert np.array_equal(after["w1"], before["w1"]) and not np.array_equal(after["b1"], before["b1"])


def test_module_optimizer_moves_state_to_the_parameter_device():
    x, y = data()
    model = MLP()
    optim = ModuleOptimizer(AdamConfig())
    optim.step(0.1, model, GradientsParams.from_grads(F.mse_loss(model(x), y).backward(), model))
    assert optim.state(model.w1.id).device == braze.Device("cpu", 0)
    model.fork(braze.Device("cpu", 1))
    x1, y1 = x.to(braze.Device("cpu", 1)), y.to(braze.Device("cpu", 1))
    optim.step(0.1, model, GradientsParams.from_grads(F.mse_loss(model(x1), y1).backward(), model))
    assert optim.state(model.w1.id).device == braze.Device("cpu", 1)
    assert optim.state(model.w1.id).state["step"] == 2
    assert model.w1.device == braze.Device("cpu", 1)


def test_module_optimizer_state_saves_and_resumes_identically(tmp_path):
    x, y = data()
    a, b = MLP(), MLP()
    oa, ob = ModuleOptimizer(AdamConfig()), ModuleOptimizer(AdamConfig())
    for model, optim in ((a, oa), (b, ob)):
        for _ in range(3):
            optim.step(0.05, model, GradientsParams.from_grads(F.mse_loss(model(x), y).backward(), model))
    oa.save_file(tmp_path / "opt.safetensors")
    resumed = ModuleOptimizer(AdamConfig()).load_file(tmp_path / "opt.safetensors")
    for model, optim in ((a, resumed), (b, ob)):
        optim.step(0.05, model, GradientsParams.from_grads(F.mse_loss(model(x), y).backward(), model))
    for key, value in arrays(a).items():
        np.testing.assert_array_equal(value, arrays(b)[key])


def test_module_optimizer_rejects_state_of_another_rule():
    model = MLP()
    _, state = run(SgdConfig(momentum=0.9), 0.1, np.ones((8, 4), np.float32), [np.ones((8, 4))])
    record = OptimizerRecord({model.w1.id: ParamState("sgd", braze.Device(), state)})
    with pytest.raises(RecordError, match="sgd"):
        ModuleOptimizer(AdamConfig()).load_record(record)


# --- the torch-style front end ------------------------------------------------------------------------------
def test_torch_style_param_groups_and_zero_grad():
    model = MLP()
    opt = SGD([{"params": [model.w1, model.w2]}, {"params": [model.b1, model.b2], "lr": 0.5}], lr=0.1,
              momentum=0.9)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    assert opt.param_groups[1]["momentum"] == 0.9
    x, y = data()
    F.mse_loss(model(x), y).backward()
    assert model.w1.grad is not None
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    with pytest.raises(BrazeError, match="more than one parameter group"):
        opt.add_param_group({"params": [model.w1]})


def test_torch_style_state_dict_round_trip_resumes_identically():
    x, y = data()
    a, b = MLP(), MLP()
    oa, ob = Adam(a.parameters(), lr=0.05), Adam(b.parameters(), lr=0.05)
    for model, opt in ((a, oa), (b, ob)):
        for _ in range(3):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
    saved = oa.state_dict()
    assert saved["param_groups"][0]["params"] == [0, 1, 2, 3] and saved["state"][0]["step"] == 3
    resumed = Adam(a.parameters(), lr=1.0)
    resumed.load_state_dict(saved)
    assert resumed.param_groups[0]["lr"] == 0.05
    for model, opt in ((a, resumed), (b, ob)):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    for key, value in arrays(a).items():
        np.testing.assert_array_equal(value, arrays(b)[key])


def test_torch_style_load_state_dict_rejects_bad_state_and_changes_nothing():
    model = MLP()
    opt = Adam(model.parameters(), lr=0.05)
    good = opt.state_dict()
    bad = {"state": {0: {"step": 1, "exp_avg": np.zeros((2, 2)), "exp_avg_sq": np.zeros((8, 4))}},
           "param_groups": [{**good["param_groups"][0], "lr": 9.0}]}
    with pytest.raises(RecordError, match=r"exp_avg.*shape \(2, 2\)"):
        opt.load_state_dict(bad)
    assert opt.param_groups[0]["lr"] == 0.05 and opt.state == {}
    with pytest.raises(RecordError, match="sizes"):
        opt.load_state_dict({"state": {}, "param_groups": [{**good["param_groups"][0], "params": [0]}]})


def test_torch_style_accepts_plain_tensors_and_rejects_non_leaves():
    t = braze.tensor([1.0, 2.0], requires_grad=True)
    opt = SGD([t], lr=0.5)
    (t * t).sum().backward()
    opt.step()
    np.testing.assert_allclose(t.detach().numpy(), [0.0, 0.0])
    assert t.requires_grad and t.is_leaf
    with pytest.raises(BrazeError, match="non-leaf"):
        SGD([t * 2], lr=0.1)
    with pytest.raises(BrazeError, match="empty"):
        Adam([], lr=0.1)


def test_torch_style_optimizer_state_dict_loads_torch_state():
    torch = pytest.importorskip("torch")
    model = MLP()
    tparams = [torch.nn.Parameter(torch.from_numpy(np.array(p, copy=True))) for p in model.parameters()]
    topt = torch.optim.Adam(tparams, lr=0.01, foreach=False)
    for tp in tparams:
        tp.grad = torch.ones_like(tp)
    topt.step()
    opt = Adam(model.parameters(), lr=0.01)
    opt.load_state_dict(topt.state_dict())
    for i, p in enumerate(model.parameters()):
        np.testing.assert_array_equal(opt.state[p]["exp_avg"], topt.state_dict()["state"][i]["exp_avg"].numpy())
        assert opt.state[p]["step"] == 1
