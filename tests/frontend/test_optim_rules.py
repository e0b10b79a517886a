"""The per-tensor rules of RMSprop, Adagrad, Adadelta, Adamax, NAdam and RAdam on hand-computed cases (no torch
needed), their purity, state layouts and hyper-parameter checks."""
from __future__ import annotations

import numpy as np
import pytest

from braze import RecordError
from braze.optim import (AdadeltaConfig, AdagradConfig, AdamaxConfig, AdamConfig, AdamWConfig, NAdamConfig,
                         OptionError, RAdamConfig, RmsPropConfig, SgdConfig)

from .test_optim import run

ALL_RULES = [SgdConfig(momentum=0.9), AdamConfig(amsgrad=True), AdamWConfig(), RmsPropConfig(centered=True, momentum=0.5),
             AdagradConfig(lr_decay=0.1), AdadeltaConfig(), AdamaxConfig(), NAdamConfig(), RAdamConfig()]


def test_rmsprop_two_steps_by_hand():
    # alpha 0.75, eps 0, g = 0.5. step 1: v = 0.25 * 0.25 = 0.0625, p = 1 - 0.1 * 0.5 / 0.25 = 0.8
    # step 2: v = 0.75 * 0.0625 + 0.0625 = 0.109375, p = 0.8 - 0.05 / sqrt(0.109375)
    p, state = run(RmsPropConfig(alpha=0.75, eps=0.0), 0.1, np.array([1.0]), [[0.5]] * 2)
    np.testing.assert_allclose(p, [0.6488142107963092], rtol=1e-12)
    assert state["step"] == 2 and set(state) == {"step", "square_avg"}
    np.testing.assert_allclose(state["square_avg"], [0.109375], rtol=1e-12)


def test_rmsprop_centered_with_momentum_by_hand():
    # step 1: v = 0.0625, mean g = 0.125, avg = sqrt(0.0625 - 0.125^2), buf = 0.5 / avg, p = 1 - 0.1 buf
    # step 2: v = 0.109375, mean g = 0.21875, avg = sqrt(v - 0.21875^2), buf = 0.5 buf + 0.5 / avg
    p, state = run(RmsPropConfig(alpha=0.75, eps=0.0, momentum=0.5, centered=True), 0.1, np.array([1.0]),
                   [[0.5]] * 2)
    np.testing.assert_allclose(p, [0.4520087862146366], rtol=1e-12)
    np.testing.assert_allclose(state["momentum_buffer"], [3.17051106109513], rtol=1e-12)
    np.testing.assert_allclose(state["grad_avg"], [0.21875], rtol=1e-12)


def test_adagrad_lr_decay_and_initial_accumulator_by_hand():
    # sum starts at 0.75. step 1: sum = 1, lr 0.1, p = 1 - 0.1 * 0.5 / 1 = 0.95
    # step 2: sum = 1.25, lr = 0.1 / (1 + 0.5), p = 0.95 - (0.1 / 1.5) * 0.5 / sqrt(1.25)
    config = AdagradConfig(lr_decay=0.5, initial_accumulator_value=0.75, eps=0.0)
    assert config.initial_state(np.zeros(1))["step"] == 0
    p, state = run(config, 0.1, np.array([1.0]), [[0.5]] * 2)
    np.testing.assert_allclose(p, [0.9201857603000028], rtol=1e-12)
    np.testing.assert_allclose(state["sum"], [1.25], rtol=1e-12)


def test_adadelta_two_steps_by_hand():
    # rho 0.5, eps 0.01, lr 1. step 1: v = 0.125, delta = sqrt(0.01) / sqrt(0.135) * 0.5, u = 0.5 delta^2
    # step 2: v = 0.1875, delta = sqrt(u + 0.01) / sqrt(0.1975) * 0.5, u = 0.5 u + 0.5 delta^2
    p, state = run(AdadeltaConfig(rho=0.5, eps=0.01), 1.0, np.array([1.0]), [[0.5]] * 2)
    np.testing.assert_allclose(p, [0.7077800878608174], rtol=1e-12)
    np.testing.assert_allclose(state["acc_delta"], [0.016819034224097515], rtol=1e-12)
    np.testing.assert_allclose(state["square_avg"], [0.1875], rtol=1e-12)


def test_adamax_two_steps_by_hand():
    # betas (0.5, 0.5), eps 0. step 1 (g = 0.5): m = 0.25, u = 0.5, p = 1 - (0.1 / 0.5) * 0.25 / 0.5 = 0.9
    # step 2 (g = 0.25): m = 0.25, u = max(0.25, 0.25), p = 0.9 - (0.1 / 0.75) * 0.25 / 0.25
    p, state = run(AdamaxConfig(betas=(0.5, 0.5), eps=0.0), 0.1, np.array([1.0]), [[0.5], [0.25]])
    np.testing.assert_allclose(p, [0.9 - 0.1 / 0.75], rtol=1e-12)
    np.testing.assert_allclose(state["exp_inf"], [0.25], rtol=1e-12)


def test_nadam_two_steps_by_hand():
    # betas (0.5, 0.5), eps 0, momentum_decay 0: mu = 0.5 * (1 - 0.5) = 0.25 every step.
    # step 1: m = 0.25, v = 0.125, denom = sqrt(0.125 / 0.5) = 0.5,
    #         p = 1 - 0.1 * 0.75 / 0.75 * 0.5 / 0.5 - 0.1 * 0.25 / (1 - 0.0625) * 0.25 / 0.5
    # step 2: m = 0.375, v = 0.1875, denom = sqrt(0.1875 / 0.75) = 0.5, mu product 0.0625
    config = NAdamConfig(betas=(0.5, 0.5), eps=0.0, momentum_decay=0.0)
    p, state = run(config, 0.1, np.array([1.0]), [[0.5]])
    np.testing.assert_allclose(p, [0.8866666666666667], rtol=1e-12)
    p, state = config.step(0.1, p, np.array([0.5]), state)
    np.testing.assert_allclose(p, [0.7876190476190476], rtol=1e-12)
    assert state["mu_product"] == 0.0625 and isinstance(state["mu_product"], float)


def test_radam_switches_to_the_rectified_step_by_hand():
    # betas (0.9, 0.99): rho_inf = 199; rho_t <= 5 for steps 1-5, where p -= 0.1 * m / (1 - 0.9^t) = 0.05 each;
    # step 6 has rho_t = 5.94 and the rectified, adaptive step
    p, state = run(RAdamConfig(betas=(0.9, 0.99), eps=0.0), 0.1, np.array([1.0]), [[0.5]] * 5)
    np.testing.assert_allclose(p, [0.75], rtol=1e-12)
    p, _ = RAdamConfig(betas=(0.9, 0.99), eps=0.0).step(0.1, p, np.array([0.5]), state)
    np.testing.assert_allclose(p, [0.7418320804217994], rtol=1e-12)


def test_decoupled_weight_decay_shrinks_before_the_step():
    # AdamW's decay in Adam, NAdam and RAdam: p * (1 - lr * wd) first, the gradient unchanged
    for config, plain in ((AdamConfig(weight_decay=0.1, decoupled_weight_decay=True), AdamConfig()),
                          (NAdamConfig(weight_decay=0.1, decoupled_weight_decay=True), NAdamConfig()),
                          (RAdamConfig(weight_decay=0.1, decoupled_weight_decay=True), RAdamConfig())):
        decayed, _ = run(config, 0.1, np.array([1.0]), [[0.5]])
        undecayed, _ = run(plain, 0.1, np.array([0.99]), [[0.5]])
        np.testing.assert_allclose(decayed, undecayed, rtol=1e-12)


@pytest.mark.parametrize("config", ALL_RULES, ids=lambda c: type(c).__name__)
def test_every_rule_is_pure_and_keeps_the_dtype(config):
    param, grad = np.array([1.0, 2.0], np.float32), np.array([0.1, -0.2], np.float32)
    param0, grad0 = param.copy(), grad.copy()
    _, state = config.step(0.1, param, grad, None)
    snapshot = {k: np.array(v, copy=True) if isinstance(v, np.ndarray) else v for k, v in state.items()}
    new, new_state = config.step(0.1, param, grad, state)
    np.testing.assert_array_equal(param, param0)
    np.testing.assert_array_equal(grad, grad0)
    for key, value in snapshot.items():
        np.testing.assert_array_equal(state[key], value)
    assert new.dtype == np.float32
    config.check_state(new_state, (2,))


@pytest.mark.parametrize("config", ALL_RULES, ids=lambda c: type(c).__name__)
def test_every_rule_refuses_a_state_of_the_wrong_shape(config):
    _, state = config.step(0.1, np.ones(3), np.ones(3), None)
    with pytest.raises(RecordError, match=r"shape \(3,\)"):
        config.check_state(state, (4,))


def test_check_state_names_missing_entries():
    with pytest.raises(RecordError, match=r"NAdam state has entries \['step'\], expected"):
        NAdamConfig().check_state({"step": 1}, (2,))
    with pytest.raises(RecordError, match="invalid step count -1"):
        RmsPropConfig().check_state({"step": -1, "square_avg": np.zeros(2)}, (2,))


@pytest.mark.parametrize("make,message", [
    (lambda: RmsPropConfig(alpha=-0.1), "RMSprop: invalid alpha"),
    (lambda: RmsPropConfig(momentum=-1.0), "RMSprop: invalid momentum"),
    (lambda: AdagradConfig(lr_decay=-1.0), "Adagrad: invalid lr_decay"),
    (lambda: AdagradConfig(initial_accumulator_value=-1.0), "Adagrad: invalid initial_accumulator_value"),
    (lambda: AdadeltaConfig(rho=1.5), "Adadelta: invalid rho"),
    (lambda: AdamaxConfig(betas=(0.9, 1.0)), "Adamax: invalid beta parameter at index 1"),
    (lambda: NAdamConfig(momentum_decay=-1.0), "NAdam: invalid momentum_decay"),
    (lambda: RAdamConfig(betas=(-0.1, 0.9)), "RAdam: invalid beta parameter at index 0"),
    (lambda: RAdamConfig(betas=0.9), "RAdam: betas must be a pair"),
    (lambda: AdamConfig(eps=-1.0), "Adam: invalid eps"),
])
def test_rules_reject_invalid_hyperparameters_by_name(make, message):
    with pytest.raises(OptionError, match=message):
        make()
