"""braze.optim.lr_scheduler against torch.optim.lr_scheduler (skipped without torch): each scheduler's learning
rates (and cycled momentum) over 100 steps with two parameter groups, and its state-dict entries."""
from __future__ import annotations

import numpy as np
import pytest

import braze
from braze import optim
from braze.optim import lr_scheduler

torch = pytest.importorskip("torch")

STEPS = 100
CASES = {
    "StepLR": lambda m, o: m.StepLR(o, step_size=7, gamma=0.5),
    "MultiStepLR": lambda m, o: m.MultiStepLR(o, milestones=[10, 30, 30, 70], gamma=0.3),
    "ExponentialLR": lambda m, o: m.ExponentialLR(o, gamma=0.97),
    "CosineAnnealingLR": lambda m, o: m.CosineAnnealingLR(o, T_max=30, eta_min=0.001),
    "CosineAnnealingWarmRestarts": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=7, T_mult=2, eta_min=0.001),
    "LambdaLR": lambda m, o: m.LambdaLR(o, lr_lambda=[lambda e: 0.95 ** e, lambda e: 1 / (1 + e)]),
    "MultiplicativeLR": lambda m, o: m.MultiplicativeLR(o, lr_lambda=lambda e: 0.98),
    "LinearLR": lambda m, o: m.LinearLR(o, start_factor=0.2, end_factor=0.9, total_iters=40),
    "ConstantLR": lambda m, o: m.ConstantLR(o, factor=0.3, total_iters=12),
    "OneCycleLR": lambda m, o: m.OneCycleLR(o, max_lr=[0.5, 0.2], total_steps=101),
    "OneCycleLR-three-phase": lambda m, o: m.OneCycleLR(o, max_lr=0.5, epochs=10, steps_per_epoch=12,
                                                        three_phase=True, anneal_strategy="linear"),
    "CyclicLR-triangular2": lambda m, o: m.CyclicLR(o, base_lr=0.01, max_lr=[0.1, 0.2], step_size_up=9,
                                                    step_size_down=5, mode="triangular2"),
    "CyclicLR-exp_range": lambda m, o: m.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=6, mode="exp_range",
                                                  gamma=0.98),
    "CyclicLR-scale_fn": lambda m, o: m.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=4, cycle_momentum=False,
                                                 scale_fn=lambda x: 1 / (1 + x), scale_mode="iterations"),
    "PolynomialLR": lambda m, o: m.PolynomialLR(o, total_iters=60, power=2.0),
    "SequentialLR": lambda m, o: m.SequentialLR(o, [m.LinearLR(o, start_factor=0.1, total_iters=10),
                                                    m.ExponentialLR(o, gamma=0.9), m.CosineAnnealingLR(o, T_max=20)],
                                                milestones=[10, 40]),
    "ChainedScheduler": lambda m, o: m.ChainedScheduler([m.ConstantLR(o, factor=0.5, total_iters=8),
                                                         m.ExponentialLR(o, gamma=0.95)]),
}


def sgd(lib):
    if lib is lr_scheduler:
        ps, make = [braze.nn.Param(np.zeros(2)), braze.nn.Param(np.zeros(3))], optim.SGD
    else:
        ps, make = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))], torch.optim.SGD
    return make([{"params": [ps[0]]}, {"params": [ps[1]], "lr": 0.05}], lr=0.1, momentum=0.9)


def schedule(lib, make):
    """The learning rates and momenta of 100 steps, and the scheduler's state dict."""
    opt = sgd(lib)
    s = make(lib, opt)
    lrs, momenta = [s.get_last_lr()], []
    for _ in range(STEPS):
        opt.step()
        s.step()
        lrs.append(list(s.get_last_lr()))
        momenta.append([g["momentum"] for g in opt.param_groups])
    return np.array(lrs), np.array(momenta), s.state_dict()


@pytest.mark.parametrize("name", list(CASES))
def test_scheduler_matches_torch_over_100_steps(name):
    ours, our_momenta, our_state = schedule(lr_scheduler, CASES[name])
    theirs, their_momenta, their_state = schedule(torch.optim.lr_scheduler, CASES[name])
    assert len(set(ours[:, 0])) > 1
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=0)
    np.testing.assert_allclose(our_momenta, their_momenta, rtol=1e-12, atol=0)
    assert sorted(our_state) == sorted(their_state)
    assert our_state.get("last_epoch") == their_state.get("last_epoch")


@pytest.mark.parametrize("mode,threshold_mode", [("min", "rel"), ("min", "abs"), ("max", "rel"), ("max", "abs")])
def test_reduce_lr_on_plateau_matches_torch_over_100_steps(mode, threshold_mode):
    results = []
    for lib in (lr_scheduler, torch.optim.lr_scheduler):
        opt = sgd(lib)
        s = lib.ReduceLROnPlateau(opt, mode=mode, patience=3, cooldown=2, factor=0.5, min_lr=[0.001, 0.01],
                                  threshold_mode=threshold_mode, threshold=0.01)
        lrs = []
        for i in range(STEPS):
            opt.step()
            s.step(np.sin(i / 5) + (i % 7) * 0.01)
            lrs.append(s.get_last_lr())
        results.append((np.array(lrs), s.state_dict()))
    (ours, our_state), (theirs, their_state) = results
    assert len(set(ours[:, 0])) > 2
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=0)
    assert sorted(our_state) == sorted(their_state)


@pytest.mark.parametrize("name", ["StepLR", "MultiStepLR", "CosineAnnealingWarmRestarts", "OneCycleLR",
                                  "CyclicLR-triangular2", "SequentialLR"])
def test_torch_scheduler_state_dict_resumes_in_braze(name):
    topt = sgd(torch.optim.lr_scheduler)
    theirs = CASES[name](torch.optim.lr_scheduler, topt)
    for _ in range(40):
        topt.step()
        theirs.step()
    opt = sgd(lr_scheduler)
    ours = CASES[name](lr_scheduler, opt)
    ours.load_state_dict(theirs.state_dict())
    for group, torch_group in zip(opt.param_groups, topt.param_groups):
        group.update({k: v for k, v in torch_group.items() if k != "params"})
    for _ in range(40):
        opt.step()
        ours.step()
        topt.step()
        theirs.step()
        np.testing.assert_allclose(ours.get_last_lr(), theirs.get_last_lr(), rtol=1e-12, atol=0)
