"""Document 002, Param: identity, lazy initialization shared by clones, val/base, mappers, lazy metadata and the
module interface of a lone parameter (adapters and LoRA belong to the reparameterization documents' tests).

Each test's docstring quotes the sentence it checks.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

import braze
from braze import Device, nn
from braze.nn import ModuleMapper, ModuleVisitor, Param, ParamGroup, ParamId


class Init:
    """A recording initializer."""

    def __init__(self, shape=(2, 3)) -> None:
        self.shape, self.calls = shape, []

    def __call__(self, device, requires_grad):
        self.calls.append((device, requires_grad))
        return braze.tensor(np.arange(np.prod(self.shape), dtype=np.float32).reshape(self.shape))


def lazy(init: Init | None = None, **kw) -> Param:
    init = init or Init()
    return Param.uninitialized(init, init.shape, **kw)


def values(p: Param) -> list:
    return np.asarray(p).tolist()


# --- overview -------------------------------------------------------------------------------------------------
def test_params_hold_tensors_updated_in_training_and_loaded_for_inference():
    """ "Parameters are the fundamental building blocks of modules where they serve as containers for tensors
    that can be updated during training, and loaded during inference." """
    m = nn.Module()
    m.w = Param(braze.ones(2))
    (m.w * 3).sum().backward()
    with braze.no_grad():
        m.w.assign(m.w - 0.5 * m.w.grad)
    inference = nn.Module()
    inference.w = Param(braze.zeros(2))
    inference.load_state_dict(m.state_dict())
    assert values(inference.w) == [-0.5, -0.5]


def test_values_that_are_not_saved_or_trained_need_no_param():
    """ "If you don’t want to save the tensors and/or don’t want to update it during training, you don’t need
    this type to wrap your tensor." """
    m = nn.Module()
    m.table = np.arange(3)  # a plain attribute: neither saved nor trained
    m.register_buffer("cache", braze.zeros(2), persistent=False)
    assert m.state_dict() == {} and list(m.parameters()) == []


# --- cloning --------------------------------------------------------------------------------------------------
def test_cloning_never_allocates_or_initializes():
    """ "Cloning a parameter is always cheap; it never allocates or initializes tensors." """
    init = Init()
    p = lazy(init)
    p.clone()
    q = Param(braze.ones(3))
    assert init.calls == [] and not p.is_initialized
    assert np.shares_memory(q.clone().val()._data, q.val()._data)


def test_clones_initialize_at_most_once_to_the_same_value():
    """ "Clones share the same lazy initialization state, so initialization happens at most once and all clones
    resolve to the same value regardless of which one triggered it." """
    init = Init()
    p = lazy(init)
    a, b = p.clone(), copy.copy(p)
    b.val()
    assert len(init.calls) == 1 and values(a) == values(b) == values(p)
    assert np.shares_memory(a.val()._data, p.val()._data)


def test_clone_sharing_is_scoped_to_lazy_initialization():
    """ "This sharing is strictly scoped to lazy initialization. It only guarantees that all clones observe the
    same initialization result." """
    p = lazy()
    q = p.clone()
    p.val()
    assert q.is_initialized and q.val() is not p.val() and values(q) == values(p)


def test_later_transformations_never_propagate_across_clones():
    """ "Subsequent transformations operate on independent parameter values and never propagate across
    clones." """
    p = lazy()
    q = p.clone()
    q.map(lambda t: t + 100)
    q.set_require_grad(False)
    r = p.clone()
    r.assign(np.zeros((2, 3)))
    assert values(p)[0] == [0.0, 1.0, 2.0] and p.requires_grad and values(q)[0][0] == 100.0


# --- id -------------------------------------------------------------------------------------------------------
def test_id_is_unique():
    """ "The unique ID of this parameter." """
    ids = {Param(braze.ones(1)).id for _ in range(50)}
    assert len(ids) == 50 and all(isinstance(i, ParamId) for i in ids)


def test_id_associates_a_gradient_with_a_parameter():
    """ "This is used by eg. optimizers to associate a gradient with a specific parameter." """
    m = nn.Module()
    m.a, m.b = Param(braze.ones(2)), Param(braze.ones(2))
    (m.a * 2 + m.b * 3).sum().backward()
    by_id = {p.id: p.grad for p in m.parameters()}
    copy_of_m = m.valid()
    assert values(by_id[copy_of_m.a.id]) == [2.0, 2.0] and values(by_id[copy_of_m.b.id]) == [3.0, 3.0]


# --- constructors and accessors -------------------------------------------------------------------------------
def test_initialized_creates_an_initialized_parameter():
    """ "Create a new parameter that is already initialized." """
    p = Param.initialized(ParamId(), braze.ones(2))
    assert p.is_initialized and values(p) == [1.0, 1.0]


def test_uninitialized_creates_a_lazy_parameter():
    """ "Create a new parameter that is not already initialized." """
    init = Init()
    p = Param.uninitialized(init, (2, 3), device=Device("cpu", 1), requires_grad=False)
    assert not p.is_initialized and init.calls == [] and not p.is_require_grad()


def test_val_initializes_lazily():
    """ "Gets the effective parameter value, initializing it lazily if needed." """
    init = Init()
    p = lazy(init)
    assert values(p.val())[1] == [3.0, 4.0, 5.0] and len(init.calls) == 1


def test_val_of_initialized_returns_cached_value_and_of_lazy_triggers_init():
    """ "For initialized parameters, this returns a clone of the cached value. For uninitialized parameters,
    this triggers initialization." """
    init = Init()
    p = lazy(init)
    first = p.val()
    assert p.val() is first and len(init.calls) == 1


def test_base_is_the_raw_stored_value():
    """ "Gets the raw stored parameter value (the frozen base when a LoRA adapter is attached), without applying
    any adapter composition." """
    p = Param(braze.ones(2))
    assert p.base() is p.val()


def test_is_initialized_reports_computed_or_lazy():
    """ "Check if the parameter has been initialized." / "Returns true if the parameter’s value has been computed
    and cached, false if it’s still lazy and will be initialized on first access." """
    p = lazy()
    assert not p.is_initialized
    p.val()
    assert p.is_initialized


def test_into_value_gives_the_value():
    """ "Gets the parameter’s value while consuming the parameter." """
    p = Param(braze.ones(2))
    assert p.into_value() is p.val()


def test_consume_gives_id_and_raw_value():
    """ "Gets the parameter id and raw value while consuming the parameter." """
    p = Param(braze.ones(2))
    pid, value, mapper = p.consume()
    assert pid == p.id and value is p.base() and mapper is p.mapper


def test_map_executes_a_function_on_the_value():
    """ "Execute the given function on the inner value." """
    p = Param(braze.ones(2)).map(lambda t: t * 4)
    assert values(p) == [4.0, 4.0] and p.requires_grad


def test_from_mapped_value_preserves_the_mapper():
    """ "Create an initialized parameter with the given id, value, and param mapper." / "for creating parameters
    while preserving the param mapper, typically used in ModuleMapper implementations." """
    src = Param(braze.ones(2)).save_mapper(lambda t: t * 2)

    class Rebuild(ModuleMapper):
        def map_float(self, path, param):
            pid, value, mapper = param.consume()
            return Param.from_mapped_value(pid, value + 1, mapper)
    m = nn.Module()
    m.w = src
    m.map(Rebuild())
    assert m.w.id == src.id and m.w.mapper is src.mapper and values(m.w.transform_for_save()) == [4.0, 4.0]


def test_load_mapper_runs_when_loading():
    """ "Runs a transformation on the parameter when loading." """
    p = Param(braze.zeros(2)).load_mapper(lambda t: t + 7)
    p.transform_for_load(np.ones(2, np.float32), p.id)
    assert values(p) == [8.0, 8.0]


def test_save_mapper_runs_when_saving():
    """ "Runs a transformation on the parameter when saving." """
    p = Param(braze.ones(2)).save_mapper(lambda t: t * -1)
    assert values(p.transform_for_save()) == [-1.0, -1.0] and values(p) == [1.0, 1.0]


def test_init_mapper_transforms_the_initialization_value():
    """ "Returns a new parameter whose initialization value is transformed by the given function." """
    p = lazy().init_mapper(lambda t: t * 0)
    assert values(p) == [[0.0] * 3] * 2


def test_init_mapper_chains_lazily_or_applies_now():
    """ "If the parameter is still uninitialized (lazy), the transformation is chained onto the existing
    initialization without triggering evaluation. If the parameter is already initialized, it immediately
    applies the transformation to the current value." """
    init = Init()
    p = lazy(init).init_mapper(lambda t: t + 1).init_mapper(lambda t: t * 2)
    assert init.calls == [] and values(p)[0] == [2.0, 4.0, 6.0]
    q = Param(braze.ones(1))
    q.init_mapper(lambda t: t + 1)
    assert values(q) == [2.0]


def test_lazy_device_does_not_initialize():
    """ "The device on which the parameter is or will be initialized, without triggering initialization." /
    "Use this instead of crate::tensor::Tensor::device when you need the device but want to preserve lazy
    initialization." """
    init = Init()
    p = lazy(init, device="cpu:3")
    assert p.lazy_device == Device("cpu", 3) and init.calls == []
    assert Param(braze.ones(1).to("cpu:2")).lazy_device == Device("cpu", 2)


def test_lazy_device_places_loaded_tensors():
    """ "when loading tensors into an uninitialized parameter, we need to know the target device to move the
    loaded tensor appropriately, but we don’t want to trigger the initialization function" """
    init = Init()
    p = lazy(init, device="cpu:1")
    p.transform_for_load(np.ones((2, 3), np.float32), p.id)
    assert p.val().device == Device("cpu", 1) and init.calls == []


def test_set_require_grad_overrides_the_requirement():
    """ "Override the gradient requirement for the current parameter." """
    p = Param(braze.ones(2)).set_require_grad(False)
    assert not p.requires_grad and not p.val().requires_grad
    assert p.set_require_grad(True).requires_grad


def test_lazy_shape_does_not_initialize():
    """ "The shape of the parameter, without triggering initialization." / "Use this instead of
    crate::tensor::Tensor::shape when you need the shape but want to preserve lazy initialization." """
    init = Init((4, 5))
    p = lazy(init)
    assert p.lazy_shape == (4, 5) and init.calls == []


def test_lazy_shape_validates_loading_without_initializing():
    """ "when applying tensors to an uninitialized parameter, we need to validate the shape without triggering
    the initialization function" """
    init = Init()
    m = nn.Module()
    m.w = lazy(init)
    with pytest.raises(braze.RecordError, match="shape mismatch"):
        m.load_state_dict({"w": np.zeros((3, 2))})
    assert init.calls == [] and not m.w.is_initialized


def test_transform_for_load_applies_load_transformations():
    """ "Transform a parameter for loading by applying load transformations." / "This method is used to restore
    a parameter from a tensor (typically during deserialization)." """
    p = Param(braze.zeros(2)).load_mapper(lambda t: t * 3)
    assert values(p.transform_for_load(np.ones(2, np.float32), ParamId(777))) == [3.0, 3.0] and p.id == 777


def test_transform_for_load_moves_maps_and_preserves_require_grad():
    """ "It ensures the tensor is moved to the expected device, applies the param mapper’s on_load
    transformation, and preserves the autodiff settings (require_grad)." """
    frozen = lazy(device="cpu:2", requires_grad=False).load_mapper(lambda t: t + 1)
    frozen.transform_for_load(braze.zeros(2, 3), frozen.id)
    trained = Param(braze.zeros(2, 3))
    trained.transform_for_load(braze.zeros(2, 3), trained.id)
    assert frozen.device == Device("cpu", 2) and values(frozen)[0] == [1.0] * 3 and not frozen.requires_grad
    assert trained.requires_grad and trained.val().is_leaf


def test_transform_for_save_applies_save_transformations():
    """ "Transform a parameter for saving by applying save transformations." / "This method is used to prepare a
    parameter for saving (typically during serialization)." / "It applies the param mapper’s
    on_save transformation, which can be used to modify the tensor before serialization (e.g., quantization,
    precision conversion)." """
    p = Param(braze.tensor([1.5, 2.5])).save_mapper(lambda t: t.to(braze.float64))
    saved = p.transform_for_save()
    assert saved.dtype == braze.float64 and p.dtype == braze.float32 and saved.id == p.id


def test_from_tensor_creates_a_parameter_from_a_float_tensor():
    """ "Create a new parameter from a float tensor." """
    p = Param.from_tensor(braze.ones(2))
    assert p.requires_grad and p.is_initialized


def test_uninitialized_parameters_make_loading_cheaper():
    """ "We strongly recommend using Param::uninitialized if you are using this method to initialize parameters
    inside a module, since the tensor initialization will be lazy, making the loading of weights more
    performant." """
    init = Init()
    m = nn.Module()
    m.w = lazy(init)
    m.load_state_dict({"w": np.ones((2, 3), np.float32)})
    assert init.calls == [] and values(m.w)[0] == [1.0] * 3


def test_from_data_creates_a_parameter_from_data():
    """ "Create a new parameter from data." """
    p = Param.from_data([[1.0, 2.0]], Device("cpu", 1))
    assert values(p) == [[1.0, 2.0]] and p.device == Device("cpu", 1)


# --- trait implementations ------------------------------------------------------------------------------------
def test_param_valid_is_without_autodiff():
    """ "Returns the same module, but on the inner backend without auto-differentiation." """
    p = Param(braze.ones(2))
    v = p.valid()
    assert not v.is_autodiff() and v.id == p.id and p.is_autodiff() and v.is_require_grad()


def test_param_train_wraps_an_inner_value_back_into_autodiff():
    """ "Wraps an inner module back into an auto-diff module." """
    v = Param(braze.ones(2)).valid().train()
    assert v.is_autodiff() and v.val().requires_grad


def test_clone_returns_a_duplicate():
    """ "Returns a duplicate of the value." """
    p = Param(braze.ones(2))
    q = p.clone()
    assert q is not p and q.id == p.id and values(q) == values(p)


def test_clone_from_performs_copy_assignment():
    """ "Performs copy-assignment from source." """
    init = Init()
    source, target = lazy(init), Param(braze.zeros(1))
    target.clone_from(source)
    target.val()
    assert target.id == source.id and source.is_initialized and len(init.calls) == 1
    assert values(target) == values(source) and target.val() is not source.val()


def test_param_formats_itself():
    """ "Formats the value using the given formatter." """
    p = Param(braze.ones(2, 3))
    assert repr(p) == f"Param(id={int(p.id)}, float32[2, 3], cpu:0, requires_grad=True)"


def test_param_dereferences_to_its_value():
    """ "Dereferences the value." / "The resulting type after dereferencing." (a Tensor) """
    p = Param(braze.tensor([[1.0, 2.0]]))
    assert (p @ p.T).tolist() == [[5.0]] and p.sum().item() == 3.0 and np.asarray(p).shape == (1, 2)
    assert type(p.val()) is braze.Tensor and type(p * 1) is braze.Tensor


def test_module_display_shows_parameters():
    """ "Formats the module with provided display settings." / "Custom display settings for the module." /
    "Custom attributes for the module." / "Attributes of the module used for display purposes." / "Gets the
    number of the parameters of the module." (a module's repr shows its custom attributes, each parameter's
    dtype and shape, and the parameter count) """
    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.gain = lazy(Init((2, 3)))

        def extra_repr(self):
            return "mode=fast"
    text = Scale().format()
    assert text.splitlines() == ["Scale(", "  mode=fast", "  (gain): float32[2, 3] (lazy)", ")  # 6 params"]


def test_param_visit_and_map_as_a_module():
    """ "Visit each tensor parameter in the module with a visitor." / "Map each tensor parameter in the module
    with a mapper." """
    seen = []

    class V(ModuleVisitor):
        def visit_int(self, path, param):
            seen.append(param)

    class M(ModuleMapper):
        def map_float(self, path, param):
            return param.map(lambda t: t * 2)
    ints = Param(braze.tensor([1, 2]))
    ints.visit(V())
    assert seen == [ints] and values(Param(braze.ones(1)).map(M())) == [2.0]


def test_param_devices_as_a_module():
    """ "Return all the devices found in the underneath module tree added to the given vector without
    duplicates." / "Return all the devices found in the underneath module tree without duplicates." """
    p = lazy(device="cpu:1")
    assert p.collect_devices([Device("cpu", 1)]) == [Device("cpu", 1)] and p.devices() == [Device("cpu", 1)]
    assert not p.is_initialized


def test_param_to_device_and_fork_as_a_module():
    """ "Move the module and all of its sub-modules to the given device." / "Fork the module and all of its
    sub-modules to the given device." """
    p = Param(braze.ones(2))
    assert p.to_device("cpu:1").device == Device("cpu", 1) and not p.val().is_leaf
    assert p.fork("cpu:2").device == Device("cpu", 2) and p.val().is_leaf


def test_param_no_grad_and_groups_as_a_module():
    """ "Each tensor in the module tree will not require grad." / "Set require_grad to false for every parameter
    in the given group, leaving the rest of the module untouched." / "Set require_grad to true for every
    parameter in the given group, leaving the rest of the module untouched." """
    p = Param(braze.ones(2))
    assert not p.no_grad().requires_grad
    group = ParamGroup.ids([p.id])
    assert p.unfreeze_group(group).requires_grad and not p.freeze_group(group).requires_grad
    other = Param(braze.ones(2))
    assert other.freeze_group(group).requires_grad


def test_param_train_moves_to_the_autodiff_backend():
    """ "Move the module and all of its sub-modules to the autodiff backend." """
    v = Param(braze.ones(2)).valid()
    assert not v.requires_grad and v.train().requires_grad


def test_param_num_params_as_a_module():
    """ "Get the number of parameters the module has, including all of its sub-modules." / "Gets the number of
    the parameters of the module." """
    p = lazy(Init((3, 4)))
    assert p.num_params() == 12 and not p.is_initialized


def test_param_module_into_record_collects_its_value():
    """ "Collect this module's parameters into a ModuleRecord." (Param implements Module) """
    p = Param(braze.randn(3, 4))
    record = p.into_record()
    assert list(record) == [""] and record[""].id == p.id
    np.testing.assert_array_equal(record[""].array, np.asarray(p))


def test_param_module_load_record_and_files_round_trip(tmp_path):
    """ "Apply a ModuleRecord to this module, consuming and returning it." / "Save this module's parameters to a
    burnpack file on disk." / "Load this module's parameters from a burnpack file on disk, returning the loaded
    module." (Param implements Module; the file is safetensors) """
    p = Param(braze.randn(2, 5))
    q = Param(braze.zeros(2, 5))
    assert q.load_record(p.into_record()) is q and q.id == p.id
    np.testing.assert_array_equal(np.asarray(q), np.asarray(p))
    p.save_file(tmp_path / "p.safetensors")
    r = Param(braze.zeros(2, 5)).try_load_file(tmp_path / "p.safetensors")
    np.testing.assert_array_equal(np.asarray(r), np.asarray(p))
    with pytest.raises(braze.RecordError):
        Param(braze.zeros(3, 3)).load_file(tmp_path / "p.safetensors")
