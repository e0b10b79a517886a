"""Param, ParamId, ParamMapper and Flag: identity, lazy initialization, clones, mappers, gradients, devices, item
assignment."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import braze
from braze import Device
from braze.nn import Flag, Param, ParamId, ParamMapper
from braze.nn import functional as F


class CountingInit:
    """An initializer that records its calls and returns a fixed value."""

    def __init__(self, value: np.ndarray | None = None) -> None:
        self.calls: list[tuple[Device, bool]] = []
        self.value = np.arange(6, dtype=np.float32).reshape(2, 3) if value is None else value

    def __call__(self, device: Device, requires_grad: bool) -> braze.Tensor:
        self.calls.append((device, requires_grad))
        return braze.tensor(self.value)


def lazy_param(init: CountingInit | None = None, **kw) -> Param:
    init = init or CountingInit()
    return Param.uninitialized(init, init.value.shape, **kw)


# --- ParamId --------------------------------------------------------------------------------------------------


def test_param_id_new_ids_are_unique():
    assert len({int(ParamId()) for _ in range(100)}) == 100


def test_param_id_restored_id_moves_the_counter_past_it():
    big = int(ParamId()) + 1000
    assert int(ParamId(big)) == big
    assert int(ParamId()) > big


def test_param_id_rejects_negative_ids():
    with pytest.raises(braze.BrazeError, match="non-negative"):
        ParamId(-1)


def test_param_id_rejects_ids_beyond_64_bits_without_moving_the_counter():
    with pytest.raises(braze.BrazeError, match="at most 9223372036854775807"):
        ParamId(2 ** 63)
    assert int(ParamId()) < 2 ** 62


def test_param_id_repr_names_the_value():
    assert repr(ParamId(7)) == "ParamId(7)"


# --- construction ---------------------------------------------------------------------------------------------


def test_param_from_float_tensor_requires_grad_by_default():
    assert Param(braze.zeros(2)).requires_grad


def test_param_from_int_tensor_does_not_require_grad():
    assert not Param(braze.tensor([1, 2])).requires_grad


def test_param_int_requiring_grad_is_a_dtype_error():
    with pytest.raises(braze.DTypeError, match="floating-point"):
        Param(braze.tensor([1, 2]), requires_grad=True)


def test_param_value_is_a_leaf_sharing_the_array_but_a_new_tensor():
    t = braze.randn(3, requires_grad=True) * 2
    p = Param(t)
    assert p.val() is not t and p.val().is_leaf and np.shares_memory(p.val()._data, t._data)


def test_param_initialized_keeps_a_recorded_value():
    w = braze.randn(2, requires_grad=True)
    p = Param.initialized(ParamId(), w * 2)
    assert not p.val().is_leaf and p.is_require_grad()


def test_param_from_data_places_on_device():
    p = Param.from_data([[1.0, 2.0]], Device("cpu", 3))
    assert p.device == Device("cpu", 3) and p.requires_grad and p.shape == (1, 2)


# --- lazy initialization --------------------------------------------------------------------------------------


def test_lazy_param_does_not_initialize_on_construction():
    init = CountingInit()
    p = lazy_param(init)
    assert not p.is_initialized and init.calls == []


def test_lazy_metadata_never_initializes():
    init = CountingInit()
    p = lazy_param(init, device="cpu:2", dtype=braze.float32)
    assert (p.lazy_shape, p.lazy_device, p.lazy_dtype, p.shape, p.numel()) == ((2, 3), Device("cpu", 2),
                                                                               braze.float32, (2, 3), 6)
    assert init.calls == []


def test_param_shape_is_a_size_without_initializing():
    p = braze.nn.Linear(4, 3).weight
    assert isinstance(p.shape, braze.Size) and p.shape.numel() == 12 and p.size() == (3, 4)
    assert not p.is_initialized


def test_lazy_init_receives_device_and_requires_grad():
    init = CountingInit()
    lazy_param(init, device="cpu:1").val()
    assert init.calls == [(Device("cpu", 1), True)]


def test_lazy_init_value_is_placed_on_the_declared_device():
    p = lazy_param(device="cpu:1")
    assert p.val().device == Device("cpu", 1)


def test_lazy_init_wrong_shape_is_a_shape_error():
    p = Param.uninitialized(lambda d, rg: braze.zeros(4), (2, 3))
    with pytest.raises(braze.ShapeError, match=r"\(4,\).*\(2, 3\)"):
        p.val()


def test_lazy_init_failure_can_be_retried():
    calls = []

    def init(device, requires_grad):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first call fails")
        return braze.zeros(2)
    p = Param.uninitialized(init, (2,))
    with pytest.raises(RuntimeError):
        p.val()
    assert p.val().shape == (2,)


def test_val_returns_the_same_tensor_each_call():
    p = lazy_param()
    assert p.val() is p.val()


# --- clones ---------------------------------------------------------------------------------------------------


def test_clones_share_lazy_init_and_run_it_once():
    init = CountingInit()
    p = lazy_param(init)
    q = p.clone()
    q.val()
    p.val()
    assert len(init.calls) == 1 and np.shares_memory(p.val()._data, q.val()._data)


def test_clone_is_initialized_when_another_clone_initialized():
    p = lazy_param()
    q = copy.copy(p)
    p.val()
    assert q.is_initialized


def test_clone_has_its_own_tensor_object():
    p = Param(braze.zeros(2))
    assert p.clone().val() is not p.val() and p.clone().id == p.id


def test_clone_transforms_do_not_propagate():
    p = lazy_param()
    q = p.clone()
    q.map(lambda t: t * 10)
    assert float(np.asarray(p).sum()) == 15.0 and float(np.asarray(q).sum()) == 150.0


def test_clone_assign_does_not_propagate():
    p = Param(braze.zeros(2))
    q = p.clone()
    q.assign(np.ones(2))
    assert np.asarray(p).tolist() == [0.0, 0.0]


def test_deepcopy_has_its_own_array_and_id():
    p = Param(braze.zeros(2))
    q = copy.deepcopy(p)
    assert q.id == p.id and not np.shares_memory(q.val()._data, p.val()._data)


def test_deepcopy_of_lazy_param_does_not_share_initialization():
    init = CountingInit()
    p = lazy_param(init)
    q = copy.deepcopy(p)
    q.val()
    assert not p.is_initialized and len(init.calls) == 1


# --- mappers --------------------------------------------------------------------------------------------------


def test_init_mapper_chains_lazily():
    init = CountingInit()
    p = lazy_param(init).init_mapper(lambda t: t + 1)
    assert init.calls == [] and float(np.asarray(p)[0, 0]) == 1.0


def test_init_mapper_on_shared_lazy_param_leaves_the_clone_alone():
    init = CountingInit()
    p = lazy_param(init)
    q = p.clone()
    q.init_mapper(lambda t: t * 2)
    assert float(np.asarray(q).sum()) == 30.0 and float(np.asarray(p).sum()) == 15.0 and len(init.calls) == 1


def test_init_mapper_on_initialized_param_applies_now():
    p = Param(braze.ones(2)).init_mapper(lambda t: t * 3)
    assert np.asarray(p).tolist() == [3.0, 3.0]


def test_param_mapper_applies_functions_in_order():
    m = ParamMapper().with_load(lambda t: t + 1).with_load(lambda t: t * 2)
    assert np.asarray(m.on_load(braze.ones(1))).tolist() == [4.0]


def test_transform_for_load_applies_mapper_device_id_and_grad_settings():
    init = CountingInit()
    p = lazy_param(init, device="cpu:1").load_mapper(lambda t: t * 2)
    p.transform_for_load(np.ones((2, 3), np.float32), ParamId(12345))
    assert (init.calls, int(p.id), p.device, p.requires_grad) == ([], 12345, Device("cpu", 1), True)
    assert np.asarray(p).tolist() == [[2.0] * 3] * 2


def test_transform_for_save_returns_a_mapped_clone():
    p = Param(braze.ones(2)).save_mapper(lambda t: t * 5)
    saved = p.transform_for_save()
    assert np.asarray(saved).tolist() == [5.0, 5.0] and np.asarray(p).tolist() == [1.0, 1.0]
    assert saved.id == p.id


def test_consume_gives_id_value_and_mapper():
    p = Param(braze.ones(2)).save_mapper(lambda t: t)
    pid, value, mapper = p.consume()
    assert pid == p.id and value is p.val() and len(mapper.save) == 1


# --- assign ---------------------------------------------------------------------------------------------------


def test_assign_keeps_tensor_identity_and_writes_a_new_array():
    p = Param(braze.zeros(2))
    t, old = p.val(), p.val()._data
    p.assign(np.array([1.0, 2.0]))
    assert p.val() is t and t._data is not old and old.tolist() == [0.0, 0.0]


def test_assign_casts_to_the_param_dtype():
    p = Param(braze.zeros(2))
    p.assign(np.array([1, 2], np.int64))
    assert p.dtype == braze.float32


def test_assign_shape_mismatch_names_both_shapes():
    with pytest.raises(braze.ShapeError, match=r"\(3,\).*\(2,\)"):
        Param(braze.zeros(2)).assign(np.zeros(3))


def test_assign_into_lazy_param_skips_initialization():
    init = CountingInit()
    p = lazy_param(init)
    p.assign(np.ones((2, 3)))
    assert init.calls == [] and p.requires_grad


def test_assign_copies_the_source():
    src = np.zeros(2, np.float32)
    p = Param(braze.ones(2))
    p.assign(src)
    src[0] = 9
    assert np.asarray(p).tolist() == [0.0, 0.0]


# --- gradients ------------------------------------------------------------------------------------------------


def test_param_gradient_reaches_param_grad():
    p = Param(braze.ones(3))
    (p * 2).sum().backward()
    assert np.asarray(p.grad).tolist() == [2.0, 2.0, 2.0]


def test_set_require_grad_false_is_effective_and_configured():
    p = Param(braze.ones(2)).set_require_grad(False)
    assert not p.requires_grad and not p.is_require_grad() and not p.val().requires_grad


def test_set_require_grad_true_on_int_param_is_a_dtype_error():
    with pytest.raises(braze.DTypeError):
        Param(braze.tensor([1])).set_require_grad(True)


def test_requires_grad_setter_configures():
    p = Param(braze.ones(2))
    p.requires_grad = False
    assert not p.is_require_grad()


def test_valid_param_keeps_configured_requirement():
    v = Param(braze.ones(2)).valid()
    assert not v.requires_grad and v.is_require_grad() and not v.is_autodiff()


def test_train_param_restores_effective_requirement():
    v = Param(braze.ones(2)).valid().train()
    assert v.requires_grad and v.val().requires_grad


def test_grad_of_lazy_param_is_none_without_initializing():
    p = lazy_param()
    assert p.grad is None and not p.is_initialized


# --- devices --------------------------------------------------------------------------------------------------


def test_to_device_of_tracked_param_is_an_intermediate():
    p = Param(braze.ones(2)).to_device("cpu:1")
    assert p.device == Device("cpu", 1) and not p.val().is_leaf and p.requires_grad


def test_to_device_of_private_lazy_param_initializes_on_destination():
    init = CountingInit()
    p = lazy_param(init).to_device("cpu:1")
    assert init.calls == [] and p.lazy_device == Device("cpu", 1)
    p.val()
    assert init.calls[0][0] == Device("cpu", 1)


def test_to_device_of_shared_lazy_param_initializes_where_it_is():
    init = CountingInit()
    p = lazy_param(init)
    q = p.clone()
    p.to_device("cpu:1")
    assert init.calls[0][0] == Device("cpu", 0) and p.device == Device("cpu", 1) and q.device == Device("cpu", 0)


def test_fork_gives_an_independent_leaf():
    p = Param(braze.ones(2))
    old = p.val()
    p.fork("cpu:2")
    assert p.val().is_leaf and p.requires_grad and p.device == Device("cpu", 2)
    assert not np.shares_memory(old._data, p.val()._data)


def test_param_devices_report_lazy_device():
    assert lazy_param(device="cpu:4").devices() == [Device("cpu", 4)]


# --- tensor-like use ------------------------------------------------------------------------------------------


def test_param_works_in_expressions():
    w = Param(braze.tensor([[1.0, 2.0], [3.0, 4.0]]))
    b = Param(braze.tensor([1.0, 1.0]))
    x = braze.tensor([[1.0, 0.0]])
    assert (x @ w.T + b).tolist() == [[2.0, 4.0]]


def test_param_reflected_operators_and_numpy():
    p = Param(braze.tensor([1.0, 2.0]))
    assert (2 * p).tolist() == [2.0, 4.0] and (1 - p).tolist() == [0.0, -1.0]
    assert np.asarray(p).tolist() == [1.0, 2.0]


def test_param_forwards_tensor_methods():
    p = Param(braze.ones(2, 3))
    assert p.reshape(3, 2).shape == (3, 2) and float(p.sum()) == 6.0 and p[0].shape == (3,)


def test_param_comparisons_are_elementwise():
    assert (Param(braze.tensor([1.0, 3.0])) > 2).tolist() == [False, True]


def test_param_is_hashable_by_identity():
    p = Param(braze.ones(1))
    assert {p: 1}[p] == 1


def test_param_repr_shows_id_shape_and_state():
    p = lazy_param()
    assert repr(p) == f"Param(id={int(p.id)}, float32[2, 3], cpu:0, requires_grad=True, lazy)"


# --- Flag -----------------------------------------------------------------------------------------------------


def test_flag_configured_and_effective_values():
    f = Flag(True).disable()
    assert (bool(f), f.configured) == (False, True)
    assert bool(f.apply_configured())


def test_flag_set_changes_both_values():
    f = Flag(True).set(False)
    assert (f.value, f.configured) == (False, False)


def test_flag_has_an_id_and_clones_keep_it():
    f = Flag()
    assert isinstance(f.id, ParamId) and f.clone().id == f.id and f.clone() is not f


def test_flag_as_tensor_is_bool_scalar():
    t = Flag(False).__braze_tensor__()
    assert t.dtype == braze.bool_ and t.shape == () and not bool(t)


def test_flag_drives_dropout():
    x = braze.ones(100)
    assert F.dropout(x, 0.5, training=Flag(False)).tolist() == x.tolist()
    assert F.dropout(x, 0.5, training=Flag(True)).tolist() != x.tolist()


class _Cached(braze.nn.Module):
    """A module that writes its input into a buffer by slice assignment, as a key/value cache does."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", braze.zeros(2, 4), persistent=False)

    def forward(self, x: braze.Tensor) -> braze.Tensor:
        self.cache[:, 1:3] = x
        return self.cache * 2


def test_item_assignment_into_a_buffer_updates_its_stored_value() -> None:
    m = _Cached()
    stored = m.cache.val()
    m(braze.ones(2, 2))
    assert m.cache.val() is stored and stored.tolist() == [[0.0, 1.0, 1.0, 0.0]] * 2


def test_traced_item_assignment_into_a_buffer_is_a_buffer_update() -> None:
    m = _Cached().eval()
    graph = braze.trace(m, braze.ones(2, 2))
    assert tuple(graph.attributes["outputs"]) == ("output", "buffer_update:cache")
    x = np.full((2, 2), 3.0, dtype=np.float32)
    np.testing.assert_array_equal(braze.compile(m, braze.ones(2, 2))(x), [[0.0, 6.0, 6.0, 0.0]] * 2)


def test_item_assignment_into_a_trainable_parameter_needs_no_grad() -> None:
    lin = braze.nn.Linear(2, 2)
    with pytest.raises(braze.BrazeError, match="requires grad"):
        lin.weight[0] = 1.0
    with braze.no_grad():
        lin.weight[0] = 1.0
    assert lin.weight.val().tolist()[0] == [1.0, 1.0]


def test_item_assignment_into_a_lora_parameter_is_refused() -> None:
    lin = braze.nn.Linear(2, 2).apply_lora(braze.nn.Lora(1, 1))
    with pytest.raises(braze.BrazeError, match="value is computed .*materialize"), braze.no_grad():
        lin.weight[0] = 1.0
