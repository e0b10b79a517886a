"""Document 001, the Module interface: devices, fork/to_device, train/valid, visit/map, require-grad groups,
freeze/unfreeze and num_params (quantization, reparameterization, LoRA, materialize and records are tested with
their own features).

Each test's docstring quotes the sentence it checks. "A backend without autodiff" is a validation snapshot
(`valid()`): its tensors have autodiff disabled.
"""
from __future__ import annotations

import numpy as np

import braze
from braze import Device, nn
from braze.nn import ModuleMapper, ModuleVisitor, Param, ParamGroup

D1, D2 = Device("cpu", 1), Device("cpu", 2)


class Model(nn.Module):
    """Linear layers (lazy parameters), batch norm (buffers and a flag), dropout (a flag) and an int buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Linear(3, 4)
        self.norm = nn.BatchNorm1d(4)
        self.drop = nn.Dropout(0.5)
        self.head = nn.Linear(4, 2)
        self.register_buffer("steps", braze.tensor(0))

    def forward(self, x):
        return self.head(self.drop(self.norm(self.encoder(x))))


def x() -> braze.Tensor:
    return braze.randn(8, 3)


def grads(m) -> dict[str, bool]:
    """Effective gradient requirement of every floating-point parameter."""
    return {k: p.requires_grad for k, p in m.named_parameters()}


def configured(m) -> dict[str, bool]:
    return {k: p.is_require_grad() for k, p in m.named_parameters()}


def flags(m) -> dict[str, bool]:
    return {k: bool(f) for k, f in m.named_flags()}


def all_true(d) -> bool:
    return all(d.values())


def none_true(d) -> bool:
    return not any(d.values())


def lazy(calls, device=None):
    def init(device, requires_grad):
        calls.append(device)
        return braze.ones(2)
    return Param.uninitialized(init, (2,), device=device)


# --- the trait ------------------------------------------------------------------------------------------------
def test_every_layer_is_a_module():
    """ "Trait for all neural network modules." """
    layers = [nn.Linear(2, 2), nn.Conv2d(1, 1, 3), nn.BatchNorm2d(2), nn.LayerNorm(2), nn.Dropout(), nn.ReLU(),
              nn.Embedding(3, 2), nn.Sequential(nn.Identity()), nn.MultiheadAttention(4, 2), nn.MSELoss()]
    assert all(isinstance(m, nn.Module) and callable(m.valid) and callable(m.visit) for m in layers)


def test_modules_are_made_by_subclassing():
    """ "Modules should be created using the derive attribute." (a subclass of nn.Module; other fields are
    plain attributes) """
    class MyModule(nn.Module):
        def __init__(self):
            super().__init__()
            self.my_param = nn.Linear(2, 2)
            self.my_other_field = 3
    m = MyModule()
    assert [k for k, _ in m.named_parameters()] == ["my_param.weight", "my_param.bias"] and m.my_other_field == 3


def test_training_and_validation_use_the_same_module_type():
    """ "Training and validation use the same module type." """
    m = Model()
    assert type(m.valid()) is Model and type(m.valid().norm) is nn.BatchNorm1d


def test_the_trait_does_not_guarantee_autodiff():
    """ "This trait provides state transitions, not a guarantee that a value currently has autodiff enabled." """
    class Inner(ModuleMapper):
        def map_float(self, path, param):
            return param.map(lambda t: t.inner()) if path == "head.bias" else param
    m = Model().map(Inner())
    assert not m.head.bias.val().is_autodiff() and m.head.weight.val().is_autodiff()
    assert m.train().head.bias.val().is_autodiff()


def test_contexts_can_be_mixed_and_are_inspected_per_tensor():
    """ "Inspect individual parameter tensors with Tensor::is_autodiff and Tensor::is_require_grad; contexts can
    be mixed." """
    m = Model()
    m.head = m.head.valid()
    assert m.encoder.weight.val().is_autodiff() and m.encoder.weight.val().is_require_grad()
    assert not m.head.weight.val().is_autodiff() and not m.head.weight.val().is_require_grad()


# --- collect_devices / devices --------------------------------------------------------------------------------
def test_collect_devices_adds_to_the_vector_without_duplicates():
    """ "Return all the devices found in the underneath module tree added to the given vector without
    duplicates." """
    m = Model()
    m.head.to_device(D1)
    assert m.collect_devices([D2, D1]) == [D2, D1, Device("cpu", 0)]


def test_collect_devices_does_not_initialize_lazy_parameters():
    """ "Device collection should not initialize lazy parameters. Use Param::lazy_device to inspect their
    devices without accessing tensor values." """
    m = Model()
    m.head.fork(D1)
    assert m.collect_devices([]) == [Device("cpu", 0), D1] and not m.head.weight.is_initialized
    assert m.head.weight.lazy_device == D1


def test_devices_without_duplicates():
    """ "Return all the devices found in the underneath module tree without duplicates." """
    m = Model()
    assert m.devices() == [Device("cpu", 0)]
    m.norm.to_device(D2)
    assert m.devices() == [Device("cpu", 0), D2]


def test_devices_report_lazy_initialization_device():
    """ "Lazy tensor parameters report their initialization device without being initialized." """
    m = nn.Module()
    m.w = Param.uninitialized(lambda d, rg: braze.ones(2), (2,), device=D2)
    assert m.devices() == [D2] and not m.w.is_initialized


def test_devices_ignore_autodiff_settings():
    """ "Device equality ignores autodiff and checkpointing settings, so this list is not a summary of the
    module’s training state." """
    m = Model()
    assert m.devices() == m.valid().devices() == m.freeze().devices()


# --- fork -----------------------------------------------------------------------------------------------------
def test_fork_moves_every_submodule():
    """ "Fork the module and all of its sub-modules to the given device." """
    m = Model()
    m(x())
    assert m.fork(D1) is m and m.devices() == [D1]


def test_fork_gives_the_destination_its_own_autodiff_graph():
    """ "This is similar to to_device, but it ensures the output module on the new device will have its own
    autodiff graph." """
    m = Model().eval()
    m(x())
    source = m.head.weight.val()
    m.fork(D1)
    m(x().to(D1)).sum().backward()
    assert m.head.weight.val().is_leaf and m.head.weight.grad is not None and source.grad is None


def test_transfers_preserve_autodiff_association():
    """ "Both transfers preserve the source tensors’ autodiff association and checkpointing strategy." """
    train, valid = Model(), Model().valid()
    for m in (train, valid):
        m(x())
    assert all(p.is_autodiff() for p in train.fork(D1).parameters())
    assert all(p.is_autodiff() for p in Model().to_device(D1).parameters())
    assert not any(p.is_autodiff() for p in valid.fork(D1).parameters())
    assert not any(p.is_autodiff() for p in Model().valid().to_device(D2).parameters())


def test_destination_defaults_do_not_enable_training():
    """ "The destination’s autodiff defaults do not enable training; use train first when starting from a
    validation module." """
    m = Model().valid().fork(D1)
    assert none_true(grads(m)) and none_true(flags(m))
    assert all_true(grads(m.train())) and all_true(flags(m))


def test_fork_lazy_parameter_initializes_on_destination_unless_shared():
    """ "A parameter not initialized yet initializes on the destination, unless a clone shares it, in which
    case it initializes where it is and is then copied." """
    calls = []
    private, shared = nn.Module(), nn.Module()
    private.w, shared.w = lazy(calls), lazy(calls)
    clone = shared.w.clone()
    private.fork(D1)
    assert calls == [] and not private.w.is_initialized
    private.w.val()
    shared.fork(D1)
    assert calls == [D1, Device("cpu", 0)] and shared.w.device == D1 and clone.device == Device("cpu", 0)
    assert shared.w.val().is_leaf and not np.shares_memory(shared.w.val()._data, clone.val()._data)


# --- to_device ------------------------------------------------------------------------------------------------
def test_to_device_moves_every_submodule():
    """ "Move the module and all of its sub-modules to the given device." """
    m = Model()
    assert m.to_device(D2) is m and m.devices() == [D2]


def test_to_device_is_registered_by_autodiff_when_active():
    """ "For initialized parameters, the operation supports autodiff and is registered when activated. This may
    not be what you want." """
    m = Model()
    m(x())
    m.to_device(D1)
    assert m.head.weight.val().grad_fn == "copy"
    v = Model().valid()
    v(x())
    assert v.to_device(D1).head.weight.val().grad_fn is None


def test_to_device_output_is_an_intermediary_model():
    """ "The output model will be an intermediary model, meaning that you can’t optimize it with gradient
    descent." """
    m = Model().eval()
    m(x())
    leaf = m.head.weight.val()
    m.to_device(D1)
    m(x().to(D1)).sum().backward()
    assert not m.head.weight.val().is_leaf and m.head.weight.grad is None and leaf.grad is not None


def test_use_fork_to_optimize_on_the_target_device():
    """ "If you want to optimize the output network on the target device, use fork instead." """
    m = Model().eval()
    m(x())
    m.fork(D1)
    m(x().to(D1)).sum().backward()
    assert all(p.grad is not None and p.grad.device == D1 for p in m.parameters())


def test_to_device_lazy_parameter_initializes_on_destination_unless_shared():
    """ "A parameter not initialized yet initializes on the destination, unless a clone shares it, in which
    case it initializes where it is and is then moved." """
    calls = []
    private, shared = nn.Module(), nn.Module()
    private.w, shared.w = lazy(calls), lazy(calls)
    clone = shared.w.clone()
    private.to_device(D1)
    assert calls == [] and private.w.lazy_device == D1
    private.w.val()
    shared.to_device(D1)
    assert calls == [D1, Device("cpu", 0)] and shared.w.device == D1 and clone.device == Device("cpu", 0)
    assert shared.w.val().grad_fn == "copy"


def test_fork_preserves_gradient_retention_in_every_case():
    """ "To train the module on the destination device, use fork. This preserves gradient retention whether the
    parameters are uninitialized, initialized, or shared with clones." """
    uninit, init, shared = nn.Module(), nn.Module(), nn.Module()
    uninit.w, init.w, shared.w = lazy([]), lazy([]), lazy([])
    init.w.val()
    keep = shared.w.clone()
    for m in (uninit, init, shared):
        m.fork(D1)
        assert m.w.requires_grad and m.w.val().is_leaf and m.w.val().requires_grad and m.w.device == D1
    assert keep.requires_grad


# --- train ----------------------------------------------------------------------------------------------------
def test_train_enables_autodiff_and_restores_configured_state():
    """ "Enables autodiff and restores configured training state throughout the module." """
    v = Model().valid()
    v.train()
    assert all(p.is_autodiff() for p in v.parameters()) and all_true(grads(v)) and all_true(flags(v))


def test_train_is_the_transition_back_after_valid():
    """ "This is the supported transition back to training after valid." """
    v = Model().valid().train()
    v(x()).sum().backward()
    assert all(p.grad is not None for p in v.parameters())


def test_train_applies_the_latest_settings():
    """ "It applies the latest gradient-tracking settings and training-flag values." """
    v = Model().valid()
    v.set_require_grad_group(ParamGroup.paths("encoder.*"), False)
    v.freeze_group(ParamGroup.paths("drop.*"))
    v.train()
    assert grads(v) == {"encoder.weight": False, "encoder.bias": False, "norm.weight": True, "norm.bias": True,
                        "head.weight": True, "head.bias": True}
    assert flags(v) == {"norm.training": True, "drop.training": False}


def test_changes_on_a_validation_module_update_what_train_applies():
    """ "Mappings, device moves, forks and explicit state changes on a validation module preserve or update
    what this method applies." """
    class Scale(ModuleMapper):
        def map_float(self, path, param):
            return param.map(lambda t: t * 2)
    v = Model().valid()
    v.map(Scale()).to_device(D1).fork(D2).no_grad()
    v.set_require_grad_group(ParamGroup.paths("head.*"), True)
    v.train()
    assert grads(v) == {"encoder.weight": False, "encoder.bias": False, "norm.weight": False, "norm.bias": False,
                        "head.weight": True, "head.bias": True}
    assert all_true(flags(v)) and v.devices() == [D2]


def test_tensor_bearing_modules_get_autodiff_from_train():
    """ "Tensor-bearing modules require the autodiff feature to enable autodiff." (autodiff is always built in:
    train() enables it on every tensor) """
    v = Model().valid()
    assert not any(t.is_autodiff() for t in v.buffers())
    assert all(t.is_autodiff() for t in v.train().buffers())


def test_train_does_not_undo_explicit_freezing():
    """ "This does not undo explicit freezing or restore tensor checkpointing strategies discarded by valid." """
    m = Model().freeze().valid().train()
    assert none_true(grads(m)) and none_true(flags(m))


# --- valid ----------------------------------------------------------------------------------------------------
def test_valid_returns_a_snapshot_without_autodiff_or_training_flags():
    """ "Returns a validation snapshot without autodiff or active training flags." """
    m = Model()
    v = m.valid()
    assert v is not m and not any(p.is_autodiff() for _, p in v.named_param_slots()) and none_true(flags(v))
    assert not v(x()).requires_grad


def test_valid_disables_and_retains_configured_state():
    """ "Tensor gradient requirements and module-owned training flags are disabled in the returned value while
    their configured state is retained internally." """
    m = Model()
    m.freeze_group(ParamGroup.paths("head.*", "drop.*"))
    v = m.valid()
    assert none_true(grads(v)) and none_true(flags(v))
    assert configured(v) == configured(m) and [f.configured for f in v.flags()] == [True, False]


def test_use_train_to_apply_the_retained_state():
    """ "Use Module::train to apply that state." """
    m = Model().freeze_group(ParamGroup.paths("norm.*"))
    v = m.valid().train()
    assert grads(v) == grads(m) and flags(v) == flags(m)


def test_mappings_moves_and_forks_preserve_the_validation_state():
    """ "Mappings, device moves and forks preserve both the disabled effective validation state and what train
    will restore." """
    m = Model().freeze_group(ParamGroup.paths("head.*"))
    v = m.valid().map(ModuleMapper()).to_device(D1).fork(D2)
    assert none_true(grads(v)) and none_true(flags(v)) and configured(v) == configured(m)
    assert grads(v.train()) == grads(m) and flags(v) == flags(m)


def test_valid_is_idempotent_but_still_disables_flags():
    """ "Calling valid when the module’s tensors are already on a plain device still disables its training
    flags, so the operation is idempotent but not necessarily a structural no-op." """
    v = Model().valid()
    v.unfreeze()
    assert all_true(flags(v)) and not any(p.is_autodiff() for p in v.parameters())
    w = v.valid()
    assert w is not v and none_true(flags(w)) and grads(w) == grads(v.valid())
    assert all_true(flags(v))


def test_valid_removes_the_autodiff_association_and_train_does_not_restore_it():
    """ "Tensor checkpointing strategies are removed with autodiff and are not restored by Module::train." (what
    valid removes with autodiff is each value's recorded-graph association: a transferred parameter becomes a
    plain leaf, and train() makes it trainable again without reconnecting it to the graph it came from) """
    m = Model()
    m(x())
    m.to_device(D1)
    assert m.head.weight.val().grad_fn == "copy"
    t = m.valid().train()
    assert t.head.weight.val().is_leaf and t.head.weight.requires_grad


def test_keep_the_original_module_to_continue_training():
    """ "Keep the original module when continuing training after validation." """
    m = Model()
    before = {k: np.array(v, copy=True) for k, v in m.state_dict().items()}
    m.valid()(x())
    assert all_true(grads(m)) and all_true(flags(m))
    assert all(np.array_equal(before[k], v) for k, v in m.state_dict().items())


# --- visit / map ----------------------------------------------------------------------------------------------
def test_visit_reaches_every_parameter_and_control_value():
    """ "Visit each parameter and module-owned control value with a visitor." """
    seen = []

    class Collect(ModuleVisitor):
        def visit_float(self, path, param):
            seen.append(path)

        def visit_int(self, path, param):
            seen.append(path)

        def visit_flag(self, path, flag):
            seen.append(path)
    Model().visit(Collect())
    assert seen == ["steps", "encoder.weight", "encoder.bias", "norm.weight", "norm.bias", "norm.running_mean",
                    "norm.running_var", "norm.num_batches_tracked", "norm.training", "drop.training",
                    "head.weight", "head.bias"]


def test_map_reaches_every_parameter_and_control_value():
    """ "Map each parameter and module-owned control value with a mapper." """
    class Off(ModuleMapper):
        def map_float(self, path, param):
            return param.map(lambda t: t * 0)

        def map_flag(self, path, flag):
            return nn.Flag(False)
    m = Model().map(Off())
    assert none_true(flags(m)) and all(float(np.abs(np.asarray(p)).sum()) == 0 for p in m.parameters())


# --- set_require_grad -----------------------------------------------------------------------------------------
def test_set_require_grad_every_float_parameter():
    """ "Set whether every floating-point tensor parameter in the module tree requires gradients." """
    m = Model().set_require_grad(False)
    assert none_true(grads(m)) and m.steps.dtype == braze.int64
    assert all_true(grads(m.set_require_grad(True))) and not m.norm.running_mean.requires_grad


def test_set_require_grad_leaves_flags_unchanged():
    """ "Module-owned control flags are left unchanged." """
    m = Model().eval().set_require_grad(False)
    assert none_true(flags(m)) and all_true(flags(Model().set_require_grad(False)))


def test_use_freeze_for_gradients_and_training_behavior():
    """ "Use freeze to disable both gradients and training behavior." """
    m = Model().freeze()
    assert none_true(grads(m)) and none_true(flags(m))


def test_set_require_grad_without_autodiff_takes_effect_through_train():
    """ "On a backend without autodiff, the enabled setting is preserved and takes effect when train
    transitions the module back to training." """
    v = Model().no_grad().valid().set_require_grad(True)
    assert none_true(grads(v)) and all_true(configured(v)) and all_true(grads(v.train()))


def test_set_require_grad_true_overrides_selective_configurations():
    """ "Setting this to true overrides selective gradient configurations" """
    m = Model().set_require_grad_group(ParamGroup.paths("encoder.*"), False).set_require_grad(True)
    assert all_true(grads(m))


# --- set_require_grad_group -----------------------------------------------------------------------------------
def test_set_require_grad_group_matched_parameters():
    """ "Set whether matched floating-point tensor parameters require gradients." """
    m = Model().set_require_grad_group(ParamGroup.paths("*.weight"), False)
    assert [k for k, v in grads(m).items() if not v] == ["encoder.weight", "norm.weight", "head.weight"]


def test_set_require_grad_group_only_float_parameters():
    """ "Only floating-point tensor parameters within group are affected." """
    m = Model()
    m.set_require_grad_group(ParamGroup.all(), True)
    assert not m.steps.requires_grad and not m.norm.num_batches_tracked.requires_grad
    assert not m.norm.running_mean.requires_grad and all_true(grads(m))


def test_set_require_grad_group_ignores_flags_and_unmatched():
    """ "Other parameter values matched by the group, including module-owned control flags, are ignored;
    unmatched tensor parameters are also left unchanged." """
    m = Model().set_require_grad_group(ParamGroup.paths("norm.*", "drop.*"), False)
    assert all_true(flags(m)) and grads(m)["encoder.weight"] and not grads(m)["norm.weight"]


def test_ids_from_module_selects_a_subtree_changing_only_gradients():
    """ "This means a group created with ParamGroup::ids_from_module can select an entire subtree while this
    method changes only its tensor gradient state." """
    m = Model()
    m.set_require_grad_group(ParamGroup.ids_from_module(m.norm), False)
    assert grads(m) == {"encoder.weight": True, "encoder.bias": True, "norm.weight": False, "norm.bias": False,
                        "head.weight": True, "head.bias": True}
    assert m.norm.training


def test_set_require_grad_group_without_autodiff_takes_effect_through_train():
    """ "On a backend without autodiff, the enabled setting is preserved and takes effect through train." """
    v = Model().no_grad().valid().set_require_grad_group(ParamGroup.paths("head.*"), True)
    assert none_true(grads(v)) and configured(v)["head.bias"]
    assert [k for k, g in grads(v.train()).items() if g] == ["head.weight", "head.bias"]


def test_group_variants_change_flags_with_gradients():
    """ "Use freeze_group or unfreeze_group when matched training flags should be changed together with tensor
    gradients." """
    m = Model().freeze_group(ParamGroup.paths("norm.*"))
    assert not m.norm.training and not grads(m)["norm.weight"]
    assert m.unfreeze_group(ParamGroup.paths("norm.*")).norm.training and grads(m)["norm.weight"]


# --- no_grad --------------------------------------------------------------------------------------------------
def test_no_grad_disables_every_float_parameter():
    """ "Disable gradients for every floating-point tensor parameter in the module tree." """
    assert none_true(grads(Model().no_grad()))


def test_no_grad_equals_set_require_grad_false():
    """ "This is equivalent to set_require_grad(false)." """
    a, b = Model().no_grad(), Model().set_require_grad(False)
    assert grads(a) == grads(b) and configured(a) == configured(b) and flags(a) == flags(b)


def test_no_grad_keeps_layer_training_behavior():
    """ "Module-owned control flags are left unchanged, so dropout, noise, randomized activations and
    batch-normalization running statistics retain their current behavior." / "Use valid for inference. no_grad
    is useful for partial fine-tuning when tensor gradients should be disabled while layer training behavior
    remains active." / "For example, matched batch-normalization layers continue updating their running
    statistics, and dropout remains enabled." """
    m = Model().no_grad()
    m(x())
    assert all_true(flags(m)) and int(m.norm.num_batches_tracked) == 1
    assert float(np.abs(np.asarray(m.norm.running_mean)).sum()) > 0
    ones = braze.ones(200, 4)
    assert not np.array_equal(np.asarray(m.drop(ones)), np.asarray(ones))


def test_no_grad_persists_without_autodiff():
    """ "This persistently disables gradient tracking, including on a backend without autodiff." """
    v = Model().valid().no_grad()
    assert none_true(configured(v)) and none_true(grads(v.train()))


def test_train_does_not_undo_no_grad():
    """ "A later train keeps gradients disabled; it does not undo no_grad." """
    m = Model().no_grad().train()
    assert none_true(grads(m)) and not m(x()).requires_grad


def test_use_freeze_when_training_behavior_should_also_stop():
    """ "Use freeze when that module-owned training behavior should also stop." """
    m = Model().freeze()
    m(x())
    assert int(m.norm.num_batches_tracked) == 0 and none_true(flags(m))


# --- freeze ---------------------------------------------------------------------------------------------------
def test_freeze_the_whole_tree():
    """ "Freeze the whole module tree." / "Every floating-point tensor parameter stops requiring gradients, and
    every module-owned training flag is disabled." """
    m = Model().freeze()
    assert none_true(grads(m)) and none_true(flags(m)) and none_true(configured(m))


def test_freeze_applies_to_stochastic_and_stateful_layers():
    """ "This applies both to parameterless stochastic layers such as dropout, noise and randomized
    activations, and to stateful layers such as batch normalization." """
    m = Model().freeze()
    ones = braze.ones(50, 4)
    assert np.array_equal(np.asarray(m.drop(ones)), np.asarray(ones))
    m.norm(braze.randn(8, 4))
    assert int(m.norm.num_batches_tracked) == 0


def test_freeze_is_persistent():
    """ "Gradient tracking and training flags are persistently disabled." """
    m = Model().freeze().train().valid().train()
    assert none_true(grads(m)) and none_true(flags(m))


def test_freeze_without_autodiff_disables_flags_now_and_train_keeps_tensors_untracked():
    """ "On a backend without autodiff, flags are disabled immediately, and train keeps tensors untracked rather
    than undoing the freeze." """
    v = Model().valid().unfreeze()
    assert all_true(flags(v))
    v.freeze()
    assert none_true(flags(v)) and none_true(grads(v.train())) and not v(x()).requires_grad


def test_freeze_keeps_the_module_on_its_device_for_partial_finetuning():
    """ "freeze is intended for partial finetuning where a module remains on the training device but should not
    participate in training." """
    m = Model().to_device(D1)
    m.head.freeze()
    m(x().to(D1)).sum().backward()
    assert m.devices() == [D1] and grads(m)["encoder.weight"] and not grads(m)["head.weight"]


# --- unfreeze -------------------------------------------------------------------------------------------------
def test_unfreeze_the_whole_tree():
    """ "Unfreeze the whole module tree." """
    m = Model().freeze().unfreeze()
    assert all_true(grads(m)) and all_true(flags(m))


def test_unfreeze_enables_flags_rather_than_restoring():
    """ "Every floating-point tensor parameter is configured to require gradients, and every module-owned
    training flag is set to enabled rather than restored to a prior value." """
    m = Model()
    m.drop.flag("training").set(False)
    m.set_require_grad_group(ParamGroup.paths("head.*"), False)
    m.eval().unfreeze()
    assert all_true(flags(m)) and all_true(configured(m))


def test_unfreeze_overwrites_selective_configurations():
    """ "This overwrites selective gradient configurations" """
    m = Model().freeze_group(ParamGroup.paths("encoder.*")).unfreeze()
    assert all_true(grads(m)) and all_true(flags(m))


def test_unfreeze_without_autodiff_enables_flags_now_and_gradients_through_train():
    """ "On a backend without autodiff, training flags are enabled immediately while gradient tracking takes
    effect when train transitions the module back to the autodiff backend." """
    v = Model().freeze().valid().unfreeze()
    assert all_true(flags(v)) and none_true(grads(v)) and all_true(grads(v.train()))


# --- freeze_group / unfreeze_group ----------------------------------------------------------------------------
def test_freeze_group_leaves_the_rest_untouched():
    """ "Freeze every module-owned value in the given group, leaving the rest of the module untouched." """
    m = Model().freeze_group(ParamGroup.ids_from_module(Model()))
    assert all_true(grads(m)) and all_true(flags(m))
    m.freeze_group(ParamGroup.ids_from_module(m.drop) | ParamGroup.paths("head.bias"))
    assert flags(m) == {"norm.training": True, "drop.training": False}
    assert [k for k, g in grads(m).items() if not g] == ["head.bias"]


def test_freeze_group_clears_gradients_and_disables_flags():
    """ "freeze_group clears gradient requirements on matched tensor parameters and disables matched training
    flags." """
    m = Model().freeze_group(ParamGroup.ids_from_module(Model().norm) | ParamGroup.paths("norm.*"))
    assert not grads(m)["norm.weight"] and not m.norm.training and m.drop.training


def test_freeze_group_is_persistent():
    """ "Gradient tracking and training flags are persistently disabled for matched values." """
    m = Model().freeze_group(ParamGroup.paths("head.*", "drop.*")).valid().train()
    assert not grads(m)["head.weight"] and not m.drop.training and grads(m)["encoder.weight"] and m.norm.training


def test_freeze_group_without_autodiff():
    """ "On a backend without autodiff, matched flags are disabled immediately, and train keeps matched tensors
    untracked rather than undoing the group freeze." """
    v = Model().valid().unfreeze()
    v.freeze_group(ParamGroup.paths("norm.*"))
    assert not v.norm.training and v.drop.training
    v.train()
    assert not grads(v)["norm.weight"] and grads(v)["head.weight"]


def test_freeze_group_is_not_inference_mode():
    """ "Like freeze, this should not be used for inference; use valid instead." """
    m = Model().freeze_group(ParamGroup.paths("head.*"))
    assert m(x()).requires_grad and not m.valid()(x()).requires_grad


def test_unfreeze_group_leaves_the_rest_untouched():
    """ "Unfreeze every module-owned value in the given group, leaving the rest of the module untouched." """
    m = Model().freeze().unfreeze_group(ParamGroup.paths("head.*"))
    assert [k for k, g in grads(m).items() if g] == ["head.weight", "head.bias"] and none_true(flags(m))


def test_unfreeze_group_is_the_inverse_of_freeze_group():
    """ "The inverse of freeze_group: matched tensor parameters are configured to require gradients, and
    matched training flags are set to enabled rather than restored to prior values." """
    group = ParamGroup.ids_from_module(Model().drop) | ParamGroup.paths("drop.*", "norm.*")
    m = Model().eval().freeze_group(group).unfreeze_group(group)
    assert flags(m) == {"norm.training": True, "drop.training": True} and all_true(grads(m))


def test_unfreeze_group_without_autodiff():
    """ "On a backend without autodiff, matched training flags are enabled immediately while gradient tracking
    for matched tensors takes effect when train transitions the module back to the autodiff backend." """
    v = Model().freeze().valid().unfreeze_group(ParamGroup.paths("norm.*"))
    assert flags(v) == {"norm.training": True, "drop.training": False} and none_true(grads(v))
    assert [k for k, g in grads(v.train()).items() if g] == ["norm.weight", "norm.bias"]


# --- num_params -----------------------------------------------------------------------------------------------
def test_num_params_counts_the_tree_without_initializing():
    """ "Get the number of parameters the module has, including all of its sub-modules, without initializing
    the ones not initialized yet." """
    m = Model()
    assert m.num_params() == (3 * 4 + 4) + (4 + 4) + (4 * 2 + 2)
    assert not any(p.is_initialized for p in m.parameters())
