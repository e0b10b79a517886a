"""Module: registration, traversal, state dicts, training state, groups, visitors, devices and repr."""
from __future__ import annotations

import numpy as np
import pytest

import braze
from braze import Device
from braze.nn import Flag, Module, ModuleMapper, ModuleVisitor, Param, ParamGroup
from braze.nn import functional as F


class Leaf(Module):
    """Two parameters, a buffer and a flag."""

    def __init__(self, n: int = 2) -> None:
        super().__init__()
        self.weight = braze.ones(n, n)
        self.bias = braze.zeros(n)
        self.register_buffer("stat", braze.zeros(n))
        self.training = Flag(True)

    def forward(self, x):
        return F.dropout(x @ self.weight.T + self.bias, 0.5, training=self.flag("training"))


class Tree(Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = Leaf()
        self.b = Leaf()
        self.scale = braze.ones(1)

    def forward(self, x):
        return self.b(self.a(x)) * self.scale


def names(pairs) -> list[str]:
    return [n for n, _ in pairs]


# --- registration ---------------------------------------------------------------------------------------------


def test_tensor_assignment_registers_a_param():
    assert isinstance(Leaf()._parameters["weight"], Param)


def test_module_assignment_registers_a_child():
    assert names(Tree().named_children()) == ["a", "b"]


def test_flag_assignment_registers_a_flag_and_training_reads_it():
    m = Leaf()
    assert names(m.named_flags()) == ["training"] and m.training is True


def test_assignment_before_init_raises():
    class Bad(Module):
        def __init__(self):
            self.w = braze.ones(1)
    with pytest.raises(braze.BrazeError, match="super\\(\\).__init__"):
        Bad()


def test_reassigning_a_tensor_keeps_the_param_id():
    m = Leaf()
    old = m.weight.id
    m.weight = braze.zeros(2, 2)
    assert m.weight.id == old


def test_assigning_a_tensor_to_a_buffer_keeps_it_a_buffer():
    m = Leaf()
    m.stat = braze.ones(2)
    assert names(m.named_buffers()) == ["stat"] and np.asarray(m.stat).tolist() == [1.0, 1.0]


def test_register_parameter_none_is_skipped_in_traversal():
    m = Module()
    m.register_parameter("bias", None)
    assert m.bias is None and list(m.parameters()) == [] and m.state_dict() == {}


def test_register_buffer_requiring_grad_raises():
    with pytest.raises(braze.BrazeError, match="requires grad"):
        Module().register_buffer("b", braze.ones(1, requires_grad=True))


def test_non_persistent_buffer_is_not_in_state_dict():
    m = Module()
    m.register_buffer("b", braze.ones(1), persistent=False)
    assert names(m.named_buffers()) == ["b"] and m.state_dict() == {}


def test_delattr_removes_a_registered_name():
    m = Leaf()
    del m.bias
    assert names(m.named_parameters()) == ["weight"]


def test_getattr_unknown_name_raises_attribute_error():
    with pytest.raises(AttributeError, match="nope"):
        Leaf().nope


def test_plain_attributes_are_not_registered():
    m = Module()
    m.size = 3
    m.table = np.zeros(2)
    assert list(m.parameters()) == [] and m.size == 3


def test_dir_lists_registered_names():
    assert {"weight", "bias", "stat"} <= set(dir(Leaf()))


def test_add_module_rejects_non_modules():
    with pytest.raises(TypeError):
        Module().add_module("x", 3)


# --- traversal ------------------------------------------------------------------------------------------------


def test_named_parameters_are_dotted_own_first_then_children():
    assert names(Tree().named_parameters()) == ["scale", "a.weight", "a.bias", "b.weight", "b.bias"]


def test_named_parameters_prefix_and_no_recursion():
    assert names(Tree().named_parameters(prefix="m", recurse=False)) == ["m.scale"]


def test_shared_parameter_appears_once():
    t = Tree()
    t.b.weight = t.a.weight
    assert names(t.named_parameters()).count("b.weight") == 0 and len(list(t.parameters())) == 4


def test_named_modules_self_first_depth_first():
    assert names(Tree().named_modules()) == ["", "a", "b"]


def test_named_param_slots_include_buffers_once():
    assert names(Tree().named_param_slots()) == ["scale", "a.weight", "a.bias", "a.stat", "b.weight", "b.bias",
                                                 "b.stat"]


def test_named_buffers_yield_tensors():
    assert all(isinstance(t, braze.Tensor) for t in Tree().buffers())


def test_get_submodule_and_parameter():
    t = Tree()
    assert t.get_submodule("a") is t.a and t.get_parameter("b.bias") is t.b.bias


def test_apply_visits_every_module():
    seen = []
    Tree().apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Leaf", "Leaf", "Tree"]


# --- state dict -----------------------------------------------------------------------------------------------


def test_state_dict_has_params_and_persistent_buffers():
    assert list(Tree().state_dict()) == ["scale", "a.weight", "a.bias", "a.stat", "b.weight", "b.bias", "b.stat"]


def test_load_state_dict_round_trip_keeps_identity_and_dtype():
    src, dst = Tree(), Tree()
    src.a.weight.assign(np.full((2, 2), 7.0))
    value = dst.a.weight.val()
    dst.load_state_dict({k: v.astype(np.float64) for k, v in src.state_dict().items()})
    assert dst.a.weight.val() is value and dst.a.weight.dtype == braze.float32
    assert np.asarray(dst.a.weight).tolist() == [[7.0, 7.0], [7.0, 7.0]] and dst.a.weight.requires_grad


def test_load_state_dict_reports_all_key_problems_in_one_error():
    sd = Tree().state_dict()
    del sd["a.bias"], sd["scale"]
    sd["extra"] = np.zeros(1)
    with pytest.raises(braze.RecordError) as e:
        Tree().load_state_dict(sd)
    assert all(k in str(e.value) for k in ("a.bias", "scale", "extra"))


def test_load_state_dict_shape_mismatch_leaves_the_module_unchanged():
    m = Tree()
    sd = {k: np.full(v.shape, 5, v.dtype) for k, v in m.state_dict().items()}
    sd["b.bias"] = np.zeros(3, np.float32)
    with pytest.raises(braze.RecordError, match=r"b.bias: shape mismatch.*\[3\].*\[2\]"):
        m.load_state_dict(sd)
    assert np.asarray(m.a.weight).tolist() == [[1.0, 1.0], [1.0, 1.0]]


def test_load_state_dict_non_strict_returns_missing_and_unexpected():
    result = Tree().load_state_dict({"scale": np.ones(1), "zzz": np.ones(1)}, strict=False)
    assert result.unexpected_keys == ["zzz"] and "a.weight" in result.missing_keys


def test_load_state_dict_accepts_array_like_objects():
    class ArrayLike:
        def __init__(self, a):
            self.a = a

        def __array__(self, dtype=None, copy=None):
            return self.a
    m = Tree()
    m.load_state_dict({k: ArrayLike(np.ones_like(v)) for k, v in m.state_dict().items()})
    assert np.asarray(m.a.bias).tolist() == [1.0, 1.0]


def test_load_state_dict_unsupported_dtype_is_a_record_error():
    m = Module()
    m.w = braze.ones(1)
    with pytest.raises(braze.RecordError, match="w: unsupported dtype"):
        m.load_state_dict({"w": np.array(["x"])})


def test_load_state_dict_into_lazy_params_does_not_initialize():
    calls = []
    m = Module()
    m.w = Param.uninitialized(lambda d, rg: calls.append(1) or braze.zeros(2), (2,))
    m.load_state_dict({"w": np.ones(2)})
    assert calls == [] and np.asarray(m.w).tolist() == [1.0, 1.0]


# --- training state -------------------------------------------------------------------------------------------


def test_eval_turns_flags_off_and_train_restores():
    t = Tree().eval()
    assert not t.a.training and not t.training
    assert t.train().a.training and t.training


def test_module_without_flags_remembers_the_mode():
    t = Tree()
    t.eval()
    assert t.training is False and t.train().training is True


def test_valid_snapshot_is_new_and_original_untouched():
    t = Tree()
    v = t.valid()
    assert v is not t and v.a is not t.a and type(v) is Tree
    assert t.a.training and t.a.weight.requires_grad
    assert not v.a.training and not v.a.weight.requires_grad and v.a.weight.is_require_grad()


def test_valid_snapshot_shares_parameter_arrays_but_owns_buffers():
    t = Tree()
    v = t.valid()
    assert np.shares_memory(v.a.weight.val()._data, t.a.weight.val()._data)
    assert not np.shares_memory(v.a.stat.val()._data, t.a.stat.val()._data)


def test_valid_snapshot_keeps_shared_params_shared():
    t = Tree()
    t.b.weight = t.a.weight
    v = t.valid()
    assert v.a.weight is v.b.weight


def test_valid_snapshot_forward_records_nothing():
    out = Tree().valid()(braze.ones(1, 2))
    assert not out.requires_grad


def test_training_state_of_valid_snapshot_train():
    v = Tree().valid().train()
    assert v.a.weight.requires_grad and v.a.training


def test_freeze_then_train_stays_frozen():
    t = Tree().freeze().train()
    assert not t.a.weight.requires_grad and not t.a.training


def test_no_grad_leaves_flags_and_train_keeps_it():
    t = Tree().no_grad().train()
    assert not t.a.weight.requires_grad and t.a.training


def test_unfreeze_enables_everything():
    t = Tree().freeze().unfreeze()
    assert all(p.requires_grad for p in t.parameters()) and all(bool(f) for f in t.flags())


def test_set_require_grad_skips_buffers_and_int_params():
    m = Leaf()
    m.count = braze.tensor([1, 2])
    m.set_require_grad(True)
    assert not m.stat.requires_grad and not m.count.requires_grad


def test_group_by_path_glob():
    t = Tree().freeze_group(ParamGroup.paths("a.*"))
    assert not t.a.weight.requires_grad and not t.a.training and t.b.weight.requires_grad and t.b.training


def test_group_by_ids_from_module():
    t = Tree()
    t.set_require_grad_group(ParamGroup.ids_from_module(t.b), False)
    assert t.a.weight.requires_grad and not t.b.weight.requires_grad and t.b.training


def test_group_by_predicate_and_combinators():
    t = Tree()
    biases = ParamGroup.predicate(lambda path, v: path.endswith("bias"))
    t.freeze_group(biases & ~ParamGroup.paths("b.*"))
    assert not t.a.bias.requires_grad and t.b.bias.requires_grad and t.a.weight.requires_grad


def test_group_repr_describes_it():
    assert repr(ParamGroup.paths("a.*") | ParamGroup.all()) == "ParamGroup(paths('a.*') | all)"


def test_zero_grad_sets_none():
    t = Tree()
    t(braze.ones(1, 2)).sum().backward()
    assert t.scale.grad is not None
    t.zero_grad()
    assert all(p.grad is None for p in t.parameters())


def test_zero_grad_set_to_none_false_zeros():
    t = Tree()
    t(braze.ones(1, 2)).sum().backward()
    t.zero_grad(set_to_none=False)
    assert np.asarray(t.scale.grad).tolist() == [0.0]


# --- visit / map ----------------------------------------------------------------------------------------------


class Recorder(ModuleVisitor):
    def __init__(self):
        self.events = []

    def enter_module(self, path, module):
        self.events.append(("enter", path))

    def exit_module(self, path, module):
        self.events.append(("exit", path))

    def visit_float(self, path, param):
        self.events.append(("float", path))

    def visit_int(self, path, param):
        self.events.append(("int", path))

    def visit_bool(self, path, param):
        self.events.append(("bool", path))

    def visit_flag(self, path, flag):
        self.events.append(("flag", path))


def test_visit_calls_hooks_by_kind_with_paths():
    m = Module()
    m.f = braze.ones(1)
    m.register_buffer("i", braze.tensor([1]))
    m.register_buffer("b", braze.tensor([True]))
    m.on = Flag()
    m.child = Module()
    r = Recorder()
    m.visit(r)
    assert r.events == [("enter", ""), ("float", "f"), ("int", "i"), ("bool", "b"), ("flag", "on"),
                        ("enter", "child"), ("exit", "child"), ("exit", "")]


def test_map_replaces_values_and_shared_params_stay_shared():
    class Double(ModuleMapper):
        def map_float(self, path, param):
            return param.map(lambda t: t * 2)
    t = Tree()
    t.b.weight = t.a.weight
    t.map(Double())
    assert np.asarray(t.a.weight).tolist() == [[2.0, 2.0], [2.0, 2.0]] and t.b.weight is t.a.weight


def test_map_hook_returning_the_wrong_type_raises():
    class Bad(ModuleMapper):
        def map_flag(self, path, flag):
            return True
    with pytest.raises(braze.BrazeError, match="must return a Flag"):
        Leaf().map(Bad())


# --- devices --------------------------------------------------------------------------------------------------


def test_device_str_and_parse():
    assert str(Device()) == "cpu:0" and braze.tensor([1.0]).to("cpu:2").device == Device("cpu", 2)


def test_device_rejects_unknown_kinds():
    with pytest.raises(braze.BrazeError, match="unknown device kind"):
        Device("gpu", 0)


def test_ops_on_different_devices_raise_naming_both():
    a = braze.ones(2)
    with pytest.raises(braze.BrazeError, match="cpu:0 and cpu:1"):
        a + a.to("cpu:1")


def test_results_take_operand_device_and_constants_adopt_it():
    x = braze.ones(2).to("cpu:1")
    assert (x * 2 + np.ones(2, np.float32)).device == Device("cpu", 1)


def test_move_gradient_flows_back_to_the_source_device():
    a = braze.ones(2, requires_grad=True)
    (a.to("cpu:1") * 3).sum().backward()
    assert a.grad.device == Device("cpu", 0) and a.grad.tolist() == [3.0, 3.0]


def test_module_devices_dedupe_and_do_not_initialize():
    m = Module()
    m.a = Param.uninitialized(lambda d, rg: braze.zeros(1), (1,), device="cpu:1")
    m.b = braze.ones(1)
    m.c = braze.ones(1)
    assert m.devices() == [Device("cpu", 1), Device("cpu", 0)] and not m.a.is_initialized
    assert m.collect_devices([Device("cpu", 0)]) == [Device("cpu", 0), Device("cpu", 1)]


def test_module_to_moves_values_and_grads_in_place():
    t = Tree()
    t(braze.ones(1, 2)).sum().backward()
    old = t.scale.val()
    assert t.to("cpu:1") is t
    assert t.devices() == [Device("cpu", 1)] and t.scale.grad.device == Device("cpu", 1)
    assert t.scale.val() is not old and old.device == Device("cpu", 0)


def test_module_to_dtype_casts_floating_values():
    m = Leaf()
    m.count = braze.tensor([1])
    m.double()
    assert m.weight.dtype == braze.float64 and m.stat.dtype == braze.float64 and m.count.dtype == braze.int64


def test_to_device_gives_intermediates_and_fork_gives_leaves():
    t = Tree().to_device("cpu:1")
    assert not t.a.weight.val().is_leaf
    t.fork("cpu:2")
    assert t.a.weight.val().is_leaf and t.a.weight.requires_grad and t.devices() == [Device("cpu", 2)]


def test_num_params_counts_parameters_not_buffers():
    assert Tree().num_params() == 2 * (4 + 2) + 1


# --- interface ------------------------------------------------------------------------------------------------


def test_call_runs_forward():
    assert Tree()(braze.ones(1, 2)).shape == (1, 2)


def test_module_without_forward_raises_when_called():
    with pytest.raises(NotImplementedError, match="Module does not define forward"):
        Module()(1)


def test_format_is_a_tree_with_shapes_and_counts():
    text = Tree().format()
    assert "(a): Leaf(" in text and "(weight): float32[2, 2]" in text and "(stat): float32[2] (buffer)" in text
    assert text.endswith("# 13 params") and "(training): Flag(True" in text


def test_repr_uses_extra_repr():
    class Act(Module):
        def extra_repr(self):
            return "inplace=False"
    assert repr(Act()) == "Act(inplace=False)"
