"""The torch-style optimizers' options and groups: torch's defaults, param_groups, add_param_group, named parameters,
zero_grad, state dicts, and clear errors for unknown or invalid options and misplaced parameters."""
from __future__ import annotations

import numpy as np
import pytest

import braze
from braze import RecordError, optim
from braze.optim import OptionError

OPTIMIZERS = ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam"]
DEFAULT_LR = {"SGD": 1e-3, "Adam": 1e-3, "AdamW": 1e-3, "RMSprop": 1e-2, "Adagrad": 1e-2, "Adadelta": 1.0,
              "Adamax": 2e-3, "NAdam": 2e-3, "RAdam": 1e-3}


def params(n: int = 3):
    return [braze.nn.Param(np.full(2, float(i + 1))) for i in range(n)]


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_default_learning_rates_are_torchs(name):
    assert getattr(optim, name)(params()).defaults["lr"] == DEFAULT_LR[name]


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_unknown_option_lists_the_valid_ones(name):
    with pytest.raises(OptionError, match=rf"{name}: unknown option momentun; valid options: params, lr"):
        getattr(optim, name)(params(), momentun=0.9)


def test_unknown_group_key_lists_the_valid_ones():
    a, b = params(2)
    with pytest.raises(OptionError, match="SGD: unknown parameter-group option weight_deacy; valid options: lr, "
                                          "momentum"):
        optim.SGD([{"params": [a]}, {"params": [b], "weight_deacy": 0.1}], lr=0.1)


def test_scheduler_group_keys_are_accepted():
    opt = optim.SGD([{"params": params(1), "initial_lr": 0.5}], lr=0.1)
    assert opt.param_groups[0]["initial_lr"] == 0.5


@pytest.mark.parametrize("make,message", [
    (lambda p: optim.SGD(p, lr=-0.1), r"SGD: invalid learning rate -0.1"),
    (lambda p: optim.Adam(p, lr="fast"), r"Adam: invalid learning rate 'fast'"),
    (lambda p: optim.Adam(p, betas=(0.9, 1.0)), r"Adam: invalid beta parameter at index 1: 1.0"),
    (lambda p: optim.AdamW(p, betas=(-0.5, 0.9)), r"AdamW: invalid beta parameter at index 0"),
    (lambda p: optim.SGD(p, lr=0.1, nesterov=True), "Nesterov momentum requires a momentum and zero dampening"),
    (lambda p: optim.RMSprop(p, eps=-1.0), "RMSprop: invalid eps"),
    (lambda p: optim.Adadelta(p, rho=2.0), "Adadelta: invalid rho"),
    (lambda p: optim.Adam(p, capturable=True), r"Adam: capturable=True is not supported; supported values: False"),
    (lambda p: optim.SGD(p, differentiable=True), r"SGD: differentiable=True is not supported"),
    (lambda p: optim.SGD([{"params": p, "lr": -1.0}], lr=0.1), r"SGD: invalid learning rate -1.0"),
])
def test_invalid_values_are_refused(make, message):
    with pytest.raises(OptionError, match=message):
        make(params())


def test_foreach_and_fused_are_accepted():
    opt = optim.Adam(params(), foreach=True, fused=False)
    assert opt.param_groups[0]["foreach"] is True and opt.param_groups[0]["fused"] is False


def test_a_parameter_in_two_groups_is_refused():
    a, b = params(2)
    with pytest.raises(OptionError, match="some parameters appear in more than one parameter group"):
        optim.Adam([{"params": [a, b]}, {"params": [b]}])
    with pytest.raises(OptionError, match="holds the same parameter more than once"):
        optim.Adam([a, a])


@pytest.mark.parametrize("bad,message", [
    (lambda p: set(p), "ordered iterable"), (lambda p: p[0], "ordered iterable"), (lambda p: [], "empty"),
    (lambda p: [np.zeros(2)], "can only optimize Params and Tensors, got ndarray"),
    (lambda p: [braze.tensor([1, 2])], "floating-point"),
    (lambda p: [("w", p[0]), p[1]], "with a name, or none"),
])
def test_bad_parameter_lists_are_refused(bad, message):
    with pytest.raises(OptionError, match=message):
        optim.SGD(bad(params()), lr=0.1)


def test_add_param_group_fills_defaults_and_takes_effect():
    a, b = params(2)
    opt = optim.RMSprop([a], lr=0.1, momentum=0.5)
    opt.add_param_group({"params": b, "lr": 0.01})
    assert opt.param_groups[1]["lr"] == 0.01 and opt.param_groups[1]["momentum"] == 0.5
    b.grad = braze.tensor([1.0, 1.0], dtype=braze.float64)
    opt.step()
    assert not np.array_equal(np.asarray(b), [2.0, 2.0]) and a.grad is None and not opt.state.get(a)


def test_named_parameters_record_param_names():
    a, b = params(2)
    opt = optim.SGD([("fc.weight", a), ("fc.bias", b)], lr=0.1)
    assert opt.param_groups[0]["params"] == [a, b]
    assert opt.state_dict()["param_groups"][0]["param_names"] == ["fc.weight", "fc.bias"]


def test_zero_grad_can_keep_zeros():
    (a,) = params(1)
    a.grad = braze.tensor([1.0, 2.0], dtype=braze.float64)
    opt = optim.SGD([a], lr=0.1)
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(np.asarray(a.grad), [0.0, 0.0])
    opt.zero_grad()
    assert a.grad is None


def test_editing_a_group_hyperparameter_takes_effect_on_the_next_step():
    (a,) = params(1)
    opt = optim.SGD([a], lr=0.1)
    opt.param_groups[0]["lr"] = 0.5
    a.grad = braze.tensor([1.0, 1.0], dtype=braze.float64)
    opt.step()
    np.testing.assert_allclose(np.asarray(a), [0.5, 0.5], rtol=1e-15)
    opt.param_groups[0]["momentum"] = -1.0
    with pytest.raises(OptionError, match="invalid momentum -1.0"):
        opt.step()


def test_repr_lists_groups_in_torchs_format():
    text = repr(optim.Adadelta(params(1)))
    assert text.startswith("Adadelta (\nParameter Group 0\n    capturable: False\n") and text.endswith("\n)")


def test_nadam_state_dict_round_trip_keeps_the_momentum_product_a_float():
    a, b = params(2)
    opt = optim.NAdam([a, b], lr=0.1)
    for p in (a, b):
        p.grad = braze.tensor([0.5, -0.5], dtype=braze.float64)
    opt.step()
    saved = opt.state_dict()
    fresh = optim.NAdam(params(2), lr=0.1)
    fresh.load_state_dict({"state": {i: {k: np.asarray(v) for k, v in s.items()} for i, s in saved["state"].items()},
                           "param_groups": saved["param_groups"]})
    state = fresh.state_dict()["state"][0]
    assert isinstance(state["mu_product"], float) and state["mu_product"] == saved["state"][0]["mu_product"]
    assert type(state["step"]) is int


@pytest.mark.parametrize("state_dict,message", [
    ("not a dict", "expected a dict"),
    ({"state": {}, "param_groups": [{"params": [0]}]}, "sizes"),
    ({"state": {0: {"step": 1.5, "square_avg": np.zeros(2)}}, "param_groups": [{"params": [0, 1]}]},
     "not a whole number"),
    ({"state": {0: {"step": 1, "square_avg": np.zeros(3)}}, "param_groups": [{"params": [0, 1]}]},
     r"square_avg.*shape \(3,\)"),
    ({"state": {0: {"step": 1, "bogus": np.zeros(2), "square_avg": np.zeros(2)}},
      "param_groups": [{"params": [0, 1]}]}, "entries"),
])
def test_load_state_dict_rejects_bad_input_and_changes_nothing(state_dict, message):
    opt = optim.RMSprop(params(2), lr=0.05)
    with pytest.raises(RecordError, match=message):
        opt.load_state_dict(state_dict)
    assert opt.param_groups[0]["lr"] == 0.05 and opt.state == {}


def test_load_state_dict_refuses_unknown_group_keys():
    opt = optim.SGD(params(1), lr=0.1)
    with pytest.raises(OptionError, match="unknown parameter-group option bogus"):
        opt.load_state_dict({"state": {}, "param_groups": [{"params": [0], "bogus": 1}]})


def test_adamw_loading_adam_groups_keeps_decoupled_decay():
    a = params(1)
    saved = optim.Adam(a, lr=0.1).state_dict()
    opt = optim.AdamW(params(1))
    opt.load_state_dict(saved)
    assert opt.param_groups[0]["decoupled_weight_decay"] is True and opt.param_groups[0]["lr"] == 0.1
