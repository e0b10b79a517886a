"""The torch-style optimizers against torch.optim (skipped without torch): every optimizer and option combination
over 20 steps of a small MLP with three parameter groups in float64, and torch state dicts loading into braze."""
from __future__ import annotations

import numpy as np
import pytest

import braze
import braze.nn.functional as F
from braze import optim

torch = pytest.importorskip("torch")

SHAPES = [(5, 3), (5,), (2, 5), (2,)]
STEPS = 20
# (optimizer, constructor options); groups 1 and 2 override lr and weight_decay on top of these
CASES = [
    ("SGD", dict(lr=0.1)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.2, weight_decay=0.01)),
    ("SGD", dict(lr=0.01, momentum=0.8, nesterov=True, maximize=True)),
    ("SGD", dict(lr=0.01, momentum=0.5, dampening=0.5, weight_decay=0.1, maximize=True)),
    ("Adam", dict(lr=0.01)),
    ("Adam", dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1, amsgrad=True)),
    ("Adam", dict(lr=0.02, maximize=True, decoupled_weight_decay=True, weight_decay=0.2)),
    ("AdamW", dict(lr=0.01)),
    ("AdamW", dict(lr=0.01, weight_decay=0.3, amsgrad=True, maximize=True)),
    ("RMSprop", dict(lr=0.01)),
    ("RMSprop", dict(lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.1, momentum=0.5, centered=True)),
    ("RMSprop", dict(lr=0.005, momentum=0.9, maximize=True)),
    ("RMSprop", dict(lr=0.01, centered=True)),
    ("Adagrad", dict(lr=0.1)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01, weight_decay=0.05, initial_accumulator_value=0.1, eps=1e-8)),
    ("Adagrad", dict(lr=0.05, maximize=True)),
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.8, eps=1e-5, weight_decay=0.1, maximize=True)),
    ("Adamax", dict()),
    ("Adamax", dict(lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1, maximize=True)),
    ("NAdam", dict()),
    ("NAdam", dict(lr=0.01, betas=(0.85, 0.99), weight_decay=0.1, momentum_decay=0.01)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    ("RAdam", dict()),
    ("RAdam", dict(lr=0.01, betas=(0.8, 0.95), weight_decay=0.1)),
    ("RAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
]


@pytest.fixture(autouse=True)
def torch_float64():
    """torch keeps step counts and NAdam's momentum product in its default dtype; braze keeps Python floats."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    weights = [rng.standard_normal(s) * 0.5 for s in SHAPES]
    return weights, rng.standard_normal((8, 3)), rng.standard_normal((8, 2))


def groups(params, kwargs):
    lr = kwargs.get("lr", 1.0)
    return [{"params": params[:2]}, {"params": [params[2]], "lr": lr * 0.5},
            {"params": [params[3]], "lr": lr * 2.0, "weight_decay": 0.05}]


def parameters(lib, weights):
    if lib == "braze":
        return [braze.nn.Param(w.copy()) for w in weights]
    return [torch.nn.Parameter(torch.from_numpy(w.copy())) for w in weights]


def optimizer(lib, name, kwargs, params):
    if lib == "braze":
        return getattr(optim, name)(groups(params, kwargs), **kwargs)
    return getattr(torch.optim, name)(groups(params, kwargs), foreach=False, **kwargs)


def train(lib, params, opt, x, y, steps=STEPS):
    """`steps` steps of the MLP's mean squared error with `lib` ("braze" or "torch")."""
    if lib == "braze":
        xs, ys, fn, tanh = braze.tensor(x), braze.tensor(y), F, braze.tanh
    else:
        xs, ys, fn, tanh = torch.from_numpy(x), torch.from_numpy(y), torch.nn.functional, torch.tanh
    for _ in range(steps):
        opt.zero_grad()
        fn.mse_loss(fn.linear(tanh(fn.linear(xs, params[0], params[1])), params[2], params[3]), ys).backward()
        opt.step()


def values(params):
    return [np.asarray(p) if isinstance(p, braze.nn.Param) else p.detach().numpy() for p in params]


@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_optimizer_matches_torch_over_20_steps_with_three_groups(name, kwargs):
    weights, x, y = problem()
    results = []
    for lib in ("braze", "torch"):
        params = parameters(lib, weights)
        train(lib, params, optimizer(lib, name, kwargs, params), x, y)
        results.append(values(params))
    for a, b, w in zip(*results, weights):
        assert not np.array_equal(a, w)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


# per optimizer, the case with the most options set
RESUMED = [max((c for c in CASES if c[0] == name), key=lambda c: len(c[1])) for name in dict.fromkeys(n for n, _ in CASES)]


@pytest.mark.parametrize("name,kwargs", RESUMED, ids=[n for n, _ in RESUMED])
def test_torch_state_dict_loads_and_the_next_steps_match(name, kwargs):
    weights, x, y = problem(1)
    theirs = parameters("torch", weights)
    topt = optimizer("torch", name, kwargs, theirs)
    train("torch", theirs, topt, x, y, steps=5)
    ours = parameters("braze", values(theirs))
    opt = getattr(optim, name)(groups(ours, kwargs), lr=123.0)
    opt.load_state_dict(topt.state_dict())
    assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in topt.param_groups]
    train("braze", ours, opt, x, y, steps=3)
    train("torch", theirs, topt, x, y, steps=3)
    for a, b in zip(values(ours), values(theirs)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name,kwargs", RESUMED, ids=[n for n, _ in RESUMED])
def test_state_dict_has_torchs_layout(name, kwargs):
    weights, x, y = problem(2)
    dicts = []
    for lib in ("braze", "torch"):
        params = parameters(lib, weights)
        opt = optimizer(lib, name, kwargs, params)
        train(lib, params, opt, x, y, steps=2)
        dicts.append(opt.state_dict())
    ours, theirs = dicts
    assert [sorted(g) for g in ours["param_groups"]] == [sorted(g) for g in theirs["param_groups"]]
    assert [g["params"] for g in ours["param_groups"]] == [g["params"] for g in theirs["param_groups"]]
    assert sorted(ours["state"]) == sorted(theirs["state"])
    for index, state in ours["state"].items():
        assert sorted(state) == sorted(k for k, v in theirs["state"][index].items() if v is not None)
        for key, value in state.items():
            np.testing.assert_allclose(np.asarray(value), theirs["state"][index][key].numpy(), rtol=0, atol=1e-12)


def test_fresh_adagrad_state_dict_matches_torchs():
    weights, _, _ = problem()
    ours = optimizer("braze", "Adagrad", dict(initial_accumulator_value=0.3), parameters("braze", weights))
    theirs = optimizer("torch", "Adagrad", dict(initial_accumulator_value=0.3), parameters("torch", weights))
    assert ours.state_dict()["state"].keys() == theirs.state_dict()["state"].keys()
    np.testing.assert_array_equal(ours.state_dict()["state"][2]["sum"], theirs.state_dict()["state"][2]["sum"])
    assert ours.state_dict()["state"][2]["step"] == 0


@pytest.mark.parametrize("name,kwargs", RESUMED[:4], ids=[n for n, _ in RESUMED[:4]])
def test_torch_loads_a_braze_state_dict_and_the_next_steps_match(name, kwargs):
    weights, x, y = problem(3)
    ours = parameters("braze", weights)
    opt = optimizer("braze", name, kwargs, ours)
    train("braze", ours, opt, x, y, steps=5)
    saved = opt.state_dict()
    theirs = parameters("torch", values(ours))
    topt = optimizer("torch", name, kwargs, theirs)
    topt.load_state_dict({"state": {i: {k: torch.tensor(v, dtype=torch.float64) for k, v in s.items()}
                                    for i, s in saved["state"].items()}, "param_groups": saved["param_groups"]})
    train("braze", ours, opt, x, y, steps=3)
    train("torch", theirs, topt, x, y, steps=3)
    for a, b in zip(values(ours), values(theirs)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
