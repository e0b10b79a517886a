"""Document 000, the overview: modules, parameters and traversal, training and validation (the optimization
section, including device transfers of tracked parameters, is tested in test_000_optimization.py).

Each test's docstring quotes the sentence it checks.
"""
from __future__ import annotations

import numpy as np

import braze
from braze import Device, nn
from braze.nn import Flag, ModuleMapper, ModuleVisitor, Param, ParamGroup, ParamId


class Net(nn.Module):
    """Configuration (sizes, dropout rate) builds the structure; the parameters are lazy until used."""

    def __init__(self, width: int = 4, p: float = 0.5) -> None:
        super().__init__()
        self.width = width
        self.fc = nn.Linear(3, width)
        self.norm = nn.BatchNorm1d(width)
        self.drop = nn.Dropout(p)
        self.out = nn.Linear(width, 1)

    def forward(self, x):
        return self.out(self.drop(self.norm(self.fc(x))))


def grads(m) -> list[bool]:
    return [p.requires_grad for p in m.parameters()]


def flags(m) -> list[bool]:
    return [bool(f) for f in m.flags()]


# --- Module ---------------------------------------------------------------------------------------------------
def test_modules_organize_parameters_to_optimize_save_and_load():
    """ "Modules organize parameters into structures that can be optimized, saved, and loaded." """
    m = Net().eval()
    loss = m(braze.randn(5, 3)).sum()
    loss.backward()
    with braze.no_grad():
        for p in m.parameters():
            p.assign(p - 0.1 * p.grad)
    restored = Net()
    restored.load_state_dict(m.state_dict())
    assert all(np.array_equal(a, b) for a, b in zip(restored.state_dict().values(), m.state_dict().values()))


def test_subclassing_generates_traversal_and_transitions():
    """ "#[derive(Module)] generates parameter traversal and training/validation conversions." """
    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = braze.ones(2)
            self.on = Flag()
    t = Tiny()
    assert [k for k, _ in t.named_parameters()] == ["w"] and not t.valid().w.requires_grad
    assert t.valid().train().w.requires_grad


def test_forward_is_up_to_the_implementer():
    """ "A module does not force the declaration of the forward pass, leaving it up to the implementer to decide
    how it should be defined." """
    class Scorer(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = braze.ones(3)

        def score(self, a, b):
            return (a * self.w).sum() + (b * self.w).sum()
    s = Scorer()
    assert float(s.score(braze.ones(3), braze.ones(3))) == 6.0 and s.num_params() == 3


def test_configuration_is_separate_from_stored_parameters():
    """ "Configuration describes a module's structure and hyperparameters; records store its parameters
    separately." (the state dict carries parameters only; a module built from the same configuration takes
    them) """
    trained = Net(width=6, p=0.25)
    state = trained.state_dict()
    assert "width" not in state and "p" not in state
    rebuilt = Net(width=6, p=0.25)
    rebuilt.load_state_dict(state)
    assert rebuilt.drop.p == 0.25 and np.array_equal(np.asarray(rebuilt.fc.weight), np.asarray(trained.fc.weight))


# --- parameters and traversal ---------------------------------------------------------------------------------
def test_param_gives_identity_and_lazy_initialization():
    """ "Param<T> gives a value an identity and supports lazy initialization." """
    calls = []
    p = Param.uninitialized(lambda d, rg: calls.append(d) or braze.zeros(2), (2,))
    assert isinstance(p.id, ParamId) and calls == []
    p.val()
    assert calls == [Device("cpu", 0)] and p.id == p.clone().id == p.valid().id


def test_identity_associates_gradients():
    """ "Tensor parameters use that identity to associate optimizer state and gradients." (gradients by id) """
    m = Net().eval()
    m(braze.randn(4, 3)).sum().backward()
    by_id = {p.id: p.grad for p in m.parameters()}
    snapshot = m.valid()
    assert all(by_id[p.id] is not None for p in snapshot.parameters())
    assert len(by_id) == len(list(m.parameters()))


def test_flags_represent_module_owned_training_behavior():
    """ "Param<Flag> represents module-owned control state, such as whether dropout or batch normalization
    behaves as during training." """
    m = Net()
    assert [k for k, _ in m.named_flags()] == ["norm.training", "drop.training"]
    assert all(isinstance(f.id, ParamId) for f in m.flags())
    ones = braze.ones(100, 4)
    m.drop.flag("training").set(False)
    assert np.array_equal(np.asarray(m.drop(ones)), np.asarray(ones))
    m.drop.flag("training").set(True)
    assert not np.array_equal(np.asarray(m.drop(ones)), np.asarray(ones))


def test_visit_inspects_and_map_transforms():
    """ "Module::visit inspects parameters; Module::map transforms them." """
    shapes = []

    class Shapes(ModuleVisitor):
        def visit_float(self, path, param):
            shapes.append(param.lazy_shape)

    class Zero(ModuleMapper):
        def map_float(self, path, param):
            return param.map(lambda t: t * 0)
    m = Net()
    m.visit(Shapes())
    assert shapes[:2] == [(4, 3), (4,)] and not m.fc.weight.is_initialized
    m.map(Zero())
    assert float(np.abs(np.asarray(m.fc.weight)).sum()) == 0.0


def test_hooks_for_tensor_kinds_flags_and_paths():
    """ "Visitors and mappers have hooks for float, integer, and boolean tensors, control flags, and module
    paths." """
    kinds = set()

    class All(ModuleVisitor):
        def enter_module(self, path, module):
            kinds.add("enter")

        def exit_module(self, path, module):
            kinds.add("exit")

        def visit_float(self, path, param):
            kinds.add("float")

        def visit_int(self, path, param):
            kinds.add("int")

        def visit_bool(self, path, param):
            kinds.add("bool")

        def visit_flag(self, path, flag):
            kinds.add("flag")
    m = Net()
    m.register_buffer("mask", braze.tensor([True, False]))
    m.visit(All())
    assert kinds == {"enter", "exit", "float", "int", "bool", "flag"}
    assert {name for name in dir(ModuleMapper) if name.startswith("map_")} == {"map_float", "map_int", "map_bool",
                                                                             "map_flag"}


def test_base_reads_stored_value_and_val_the_effective_one():
    """ "param.base() reads the stored base; param.val() materializes the effective value, including a
    reparameterization." (without a reparameterization both are the stored value) """
    p = Param(braze.ones(2))
    assert p.base() is p.val() and p.adapter is None


# --- training and validation ----------------------------------------------------------------------------------
def test_module_has_valid_and_train_hooks():
    """ "Module includes the valid(&self) and train(self) transition hooks; the derive generates both alongside
    traversal." """
    m = Net()
    assert callable(m.valid) and callable(m.train) and "valid" not in type(m).__dict__
    assert m.valid().train() is not m


def test_same_type_and_mixed_autodiff_contexts():
    """ "Training and validation use the same module type, and a module can contain parameters with different
    runtime autodiff contexts." """
    m = Net()
    m.out = m.out.valid()
    assert type(m.valid()) is Net
    assert m.fc.weight.is_autodiff() and not m.out.weight.is_autodiff()


def test_valid_snapshot_disables_autodiff_and_flags():
    """ "valid(&self) creates a validation snapshot with autodiff and training flags disabled." """
    v = Net().valid()
    assert not any(p.is_autodiff() for p in v.parameters()) and not any(flags(v))


def test_valid_keeps_configured_trainability_and_flag_settings():
    """ "It keeps configured trainability and flag settings" """
    m = Net().freeze_group(ParamGroup.paths("out.*", "drop.*"))
    v = m.valid()
    assert [p.is_require_grad() for p in v.parameters()] == [p.is_require_grad() for p in m.parameters()]
    assert [f.configured for f in v.flags()] == [True, False]


def test_train_enables_autodiff_and_applies_configuration():
    """ "train(self) enables autodiff and applies configured trainability and flags." """
    m = Net().freeze_group(ParamGroup.paths("norm.*"))
    t = m.valid().train()
    assert all(p.is_autodiff() for p in t.parameters()) and grads(t) == grads(m) and flags(t) == [False, True]


def test_train_does_not_undo_explicit_freezing():
    """ "It does not undo explicit freezing, reconstruct folded adapters, or restore discarded checkpointing
    strategies." """
    m = Net().freeze().train()
    assert not any(grads(m)) and not any(flags(m))


def test_no_grad_keeps_flags():
    """ "no_grad() persistently disables parameter gradients while leaving control flags unchanged." """
    m = Net().no_grad().train()
    assert not any(grads(m)) and all(flags(m))


def test_freeze_unfreeze_configure_both_and_groups_target_subtrees():
    """ "freeze() and unfreeze() configure both gradients and flags; group variants target subtrees." """
    m = Net().freeze()
    assert not any(grads(m)) and not any(flags(m))
    m.unfreeze_group(ParamGroup.ids_from_module(m.norm))
    assert grads(m) == [False, False, True, True, False, False] and flags(m) == [True, False]
    assert all(grads(m.unfreeze())) and all(flags(m))


def test_keep_training_module_and_validate_with_its_snapshot():
    """ "Keep the training module and use its valid() snapshot for validation." """
    m = Net()
    x = braze.randn(6, 3)
    m(x)
    eval_out = m.valid()(x)
    assert not eval_out.requires_grad and m.training and m(x).requires_grad


def test_inspect_tensors_rather_than_devices():
    """ "Inspect individual tensors with is_autodiff(), is_tracked(), and is_require_grad() rather than
    inferring training state from the trait or module.devices()." """
    m = Net()
    m(braze.randn(2, 3))
    v = m.valid()
    w, vw = m.fc.weight.val(), v.fc.weight.val()
    assert (w.is_autodiff(), w.is_tracked(), w.is_require_grad()) == (True, True, True)
    assert (vw.is_autodiff(), vw.is_tracked(), vw.is_require_grad()) == (False, False, False)
    assert m.devices() == v.devices()


def test_device_equality_ignores_autodiff_and_devices_dedupe():
    """ "Device equality ignores autodiff settings, and the latter method deduplicates compute resources." """
    m = Net()
    m.out.to_device("cpu:1")
    v = m.valid()
    assert m.devices() == v.devices() == [Device("cpu", 0), Device("cpu", 1)]
    assert m.fc.weight.device == v.fc.weight.device
