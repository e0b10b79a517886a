"""braze.optim.lr_scheduler without torch: each schedule's first rates by hand (over bare learning rates, the form
ModuleOptimizer uses), momentum cycling, the order warning, state dicts and bad options."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import braze
import braze.nn.functional as F
from braze import RecordError, optim
from braze.optim import GradientsParams, ModuleOptimizer, OptionError, SgdConfig
from braze.optim import lr_scheduler as sched

from .test_optim import MLP, data

C = math.cos
HAND = [
    ("StepLR", lambda o: sched.StepLR(o, step_size=2, gamma=0.5), [1, 1, 0.5, 0.5, 0.25]),
    ("MultiStepLR", lambda o: sched.MultiStepLR(o, milestones=[1, 3, 3], gamma=0.1), [1, 0.1, 0.1, 0.001, 0.001]),
    ("ExponentialLR", lambda o: sched.ExponentialLR(o, gamma=0.5), [1, 0.5, 0.25, 0.125]),
    ("CosineAnnealingLR", lambda o: sched.CosineAnnealingLR(o, T_max=2), [1, 0.5, 0, 0.5, 1]),
    ("CosineAnnealingWarmRestarts", lambda o: sched.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=2),
     [1, 0.5, 1, (1 + C(math.pi / 4)) / 2, 0.5, (1 + C(3 * math.pi / 4)) / 2, 1]),
    ("LambdaLR", lambda o: sched.LambdaLR(o, lambda e: 1 / (e + 1)), [1, 1 / 2, 1 / 3, 1 / 4]),
    ("MultiplicativeLR", lambda o: sched.MultiplicativeLR(o, lambda e: 0.5), [1, 0.5, 0.25]),
    ("LinearLR", lambda o: sched.LinearLR(o, start_factor=0.5, total_iters=2), [0.5, 0.75, 1, 1]),
    ("ConstantLR", lambda o: sched.ConstantLR(o, factor=0.5, total_iters=2), [0.5, 0.5, 1, 1]),
    ("PolynomialLR", lambda o: sched.PolynomialLR(o, total_iters=4, power=2.0), [1, 0.5625, 0.25, 0.0625, 0, 0]),
    # initial 1 / 4, peak 1 at step 4, then linearly to 0.25 / 2 at step 9
    ("OneCycleLR", lambda o: sched.OneCycleLR(o, max_lr=1.0, total_steps=10, pct_start=0.5, anneal_strategy="linear",
                                              cycle_momentum=False, div_factor=4.0, final_div_factor=2.0),
     [0.25, 0.4375, 0.625, 0.8125, 1, 0.825, 0.65, 0.475, 0.3, 0.125]),
    ("CyclicLR", lambda o: sched.CyclicLR(o, base_lr=0.0, max_lr=1.0, step_size_up=2, cycle_momentum=False),
     [0, 0.5, 1, 0.5, 0, 0.5]),
    ("SequentialLR", lambda o: sched.SequentialLR(o, [sched.ConstantLR(o, factor=0.5, total_iters=10),
                                                      sched.ExponentialLR(o, gamma=0.5)], milestones=[2]),
     [0.5, 0.5, 1, 0.5, 0.25]),
    ("ChainedScheduler", lambda o: sched.ChainedScheduler([sched.ConstantLR(o, factor=0.5, total_iters=2),
                                                          sched.ExponentialLR(o, gamma=0.5)]),
     [0.5, 0.25, 0.25, 0.125]),
]


@pytest.mark.parametrize("name,make,expected", HAND, ids=[h[0] for h in HAND])
def test_schedule_by_hand_over_bare_learning_rates(name, make, expected):
    rates = sched.LearningRates(1.0)
    s = make(rates)
    seen = [s.get_last_lr()[0]]
    for _ in expected[1:]:
        s.step()
        seen.append(s.get_last_lr()[0])
    np.testing.assert_allclose(seen, expected, rtol=1e-12, atol=1e-15)
    assert rates.param_groups[0]["lr"] == seen[-1]


def test_reduce_lr_on_plateau_by_hand():
    # patience 1: the third epoch without improvement halves the rate; 0.5 improves; two more bad epochs halve again
    s = sched.ReduceLROnPlateau(1.0, patience=1, factor=0.5)
    lrs = []
    for metric in [1, 1, 1, 1, 0.5, 0.5, 0.5]:
        s.step(metric)
        lrs.append(s.get_last_lr()[0])
    assert lrs == [1, 1, 0.5, 0.5, 0.5, 0.5, 0.25]


def test_a_float_schedules_module_optimizer_like_the_torch_style_optimizer():
    x, y = data()
    a, b = MLP(), MLP()
    opt = optim.SGD(a.parameters(), lr=0.1, momentum=0.9)
    torch_style = sched.CosineAnnealingLR(opt, T_max=8, eta_min=0.01)
    module_optim = ModuleOptimizer(SgdConfig(momentum=0.9))
    bare = sched.CosineAnnealingLR(0.1, T_max=8, eta_min=0.01)
    for _ in range(10):
        opt.zero_grad()
        F.mse_loss(a(x), y).backward()
        opt.step()
        torch_style.step()
        grads = GradientsParams.from_grads(F.mse_loss(b(x), y).backward(), b)
        b = module_optim.step(bare.get_last_lr()[0], b, grads)
        bare.step()
    assert bare.get_last_lr() == torch_style.get_last_lr()
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        np.testing.assert_array_equal(np.asarray(p), np.asarray(q), err_msg=name)


def test_one_cycle_cycles_the_momentum_the_optimizer_uses():
    p = braze.nn.Param(np.zeros(2))
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    s = sched.OneCycleLR(opt, max_lr=1.0, total_steps=10, base_momentum=0.8, max_momentum=0.9)
    assert opt.param_groups[0]["momentum"] == 0.9 and opt.param_groups[0]["max_lr"] == 1.0
    for _ in range(3):
        opt.step()
        s.step()
    assert 0.8 < opt.param_groups[0]["momentum"] < 0.9
    adam = optim.Adam([braze.nn.Param(np.zeros(2))])
    sched.CyclicLR(adam, base_lr=0.01, max_lr=0.1, base_momentum=0.7, max_momentum=0.85)
    assert adam.param_groups[0]["betas"] == (0.85, 0.999)


def test_momentum_cycling_needs_an_optimizer_with_momentum():
    with pytest.raises(OptionError, match="cycle_momentum=False"):
        sched.OneCycleLR(0.1, max_lr=1.0, total_steps=10)


def test_stepping_the_scheduler_before_the_optimizer_warns():
    opt = optim.SGD([braze.nn.Param(np.zeros(2))], lr=0.1)
    s = sched.StepLR(opt, step_size=1)
    with pytest.warns(UserWarning, match=r"lr_scheduler.step\(\)` before `optimizer.step\(\)"):
        s.step()
    opt2 = optim.SGD([braze.nn.Param(np.zeros(2))], lr=0.1)
    s2 = sched.StepLR(opt2, step_size=1)
    opt2.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s2.step()


def test_get_lr_outside_step_warns_to_use_get_last_lr():
    s = sched.ExponentialLR(0.1, gamma=0.5)
    with pytest.warns(UserWarning, match="get_last_lr"):
        s.get_lr()


def test_step_with_an_epoch_uses_the_closed_form_and_warns():
    s = sched.StepLR(1.0, step_size=3, gamma=0.5)
    with pytest.warns(UserWarning, match="epoch parameter"):
        s.step(7)
    assert s.get_last_lr() == [0.25] and s.last_epoch == 7


def test_one_cycle_refuses_steps_past_the_total():
    s = sched.OneCycleLR(0.1, max_lr=1.0, total_steps=2, cycle_momentum=False)
    s.step()
    s.step()
    with pytest.raises(OptionError, match="tried to step 3 times"):
        s.step()


@pytest.mark.parametrize("make", [
    lambda: sched.CosineAnnealingWarmRestarts(1.0, T_0=3, T_mult=2),
    lambda: sched.SequentialLR(rates := sched.LearningRates([1.0, 0.5]), [
        sched.LinearLR(rates, start_factor=0.1, total_iters=4), sched.ExponentialLR(rates, gamma=0.9)], [4]),
    lambda: sched.CyclicLR(1.0, base_lr=0.1, max_lr=1.0, step_size_up=3, mode="triangular2", cycle_momentum=False),
    lambda: sched.ReduceLROnPlateau(1.0, patience=0),
])
def test_state_dict_resumes_the_schedule(make):
    a, b = make(), make()
    step = (lambda s, i: s.step(1.0)) if isinstance(a, sched.ReduceLROnPlateau) else (lambda s, i: s.step())
    for i in range(5):
        step(a, i)
    b.load_state_dict(a.state_dict())
    for group_a, group_b in zip(a.optimizer.param_groups, b.optimizer.param_groups):
        group_b.update(group_a)
    for i in range(6):
        step(a, i)
        step(b, i)
        assert a.get_last_lr() == b.get_last_lr()


def test_load_state_dict_refuses_unknown_and_mistyped_entries():
    s = sched.StepLR(1.0, step_size=2)
    with pytest.raises(RecordError, match="unknown entries bogus"):
        s.load_state_dict({**s.state_dict(), "bogus": 1})
    with pytest.raises(RecordError, match="'last_epoch' is a str"):
        s.load_state_dict({**s.state_dict(), "last_epoch": "3"})


@pytest.mark.parametrize("make,message", [
    (lambda: sched.ReduceLROnPlateau(0.1, mode="lowest"), r"mode 'lowest' is unknown; valid modes: 'min', 'max'"),
    (lambda: sched.ReduceLROnPlateau(0.1, threshold_mode="relative"), "threshold_mode 'relative' is unknown"),
    (lambda: sched.ReduceLROnPlateau(0.1, factor=1.0), "factor should be < 1.0"),
    (lambda: sched.StepLR(0.1, step_size=2, gama=0.5), "StepLR: unknown option gama; valid options: optimizer, "
                                                          "step_size, gamma, last_epoch"),
    (lambda: sched.StepLR(0.1, step_size=0), "step_size must be a positive number"),
    (lambda: sched.StepLR("adam", step_size=1), "expected an Optimizer, a LearningRates or learning rates"),
    (lambda: sched.LearningRates(-0.1), "expected learning rates >= 0"),
    (lambda: sched.LinearLR(0.1, start_factor=0.0), "start_factor must be in"),
    (lambda: sched.CyclicLR(0.1, base_lr=0.0, max_lr=1.0, mode="sine", cycle_momentum=False), "mode 'sine'"),
    (lambda: sched.LambdaLR([0.1, 0.2], [lambda e: 1.0]), "expected 2 lr_lambdas, but got 1"),
    (lambda: sched.SequentialLR(0.1, [sched.ReduceLROnPlateau(0.1)], []), "does not support ReduceLROnPlateau"),
    (lambda: sched.ChainedScheduler([sched.StepLR(0.1, step_size=1), sched.StepLR(0.2, step_size=1)]),
     "same optimizer"),
    (lambda: sched.StepLR(0.1, step_size=1, last_epoch=3), "initial_lr"),
])
def test_bad_scheduler_options_are_refused(make, message):
    with pytest.raises(OptionError, match=message):
        make()


def test_reduce_lr_on_plateau_needs_a_number():
    with pytest.raises(OptionError, match="metrics must be a number"):
        sched.ReduceLROnPlateau(0.1).step("low")


def test_a_subclass_defining_get_lr_schedules_like_torchs():
    class Warmup(sched.LRScheduler):
        def __init__(self, optimizer, warmup):
            self.warmup = warmup
            super().__init__(optimizer)

        def get_lr(self):
            return [base * min(1.0, (self.last_epoch + 1) / self.warmup) for base in self.base_lrs]

    opt = optim.SGD([braze.nn.Param(np.zeros(2))], lr=0.4)
    s = Warmup(opt, warmup=4)
    lrs = [s.get_last_lr()[0]]
    for _ in range(5):
        opt.step()
        s.step()
        lrs.append(opt.param_groups[0]["lr"])
    np.testing.assert_allclose(lrs, [0.1, 0.2, 0.3, 0.4, 0.4, 0.4], rtol=1e-15)
