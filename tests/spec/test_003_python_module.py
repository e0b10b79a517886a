"""Document 003, the Python Module: parameters, buffers and children registered by attribute assignment,
traversal, state_dict / load_state_dict, to(device), train/eval, zero_grad and the interface methods.

Each test's docstring quotes the sentence it checks.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import braze
from braze import Device, RecordError, nn
from braze.nn import functional as F


class Block(nn.Module):
    """A torch-style block: a weight, a bias, running statistics and a dropout flag."""

    def __init__(self, n: int = 3) -> None:
        super().__init__()
        self.weight = braze.randn(n, n)
        self.bias = braze.zeros(n)
        self.register_buffer("running_mean", braze.zeros(n))
        self.training = nn.Flag(True)

    def forward(self, x):
        return F.dropout(x @ self.weight.T + self.bias, 0.5, training=self.flag("training"))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = Block()
        self.head = nn.Module()
        self.head.proj = Block()
        self.gain = braze.ones(3)

    def forward(self, x):
        return self.head.proj(self.encoder(x)) * self.gain


def keys(pairs):
    return [k for k, _ in pairs]


# --- overview -------------------------------------------------------------------------------------------------
def test_module_is_the_base_class_of_named_parameters_buffers_and_children():
    """ "Base class for layers: named parameters, buffers and children." """
    b = Block()
    assert keys(b.named_parameters()) == ["weight", "bias"] and keys(b.named_buffers()) == ["running_mean"]
    assert keys(Net().named_children()) == ["encoder", "head"]


def test_module_is_plain_python_holding_references():
    """ "Written in Python rather than C++ on purpose. A Module holds references and iterates dicts, none of
    which is hot" """
    m = nn.Module()
    child = Block()
    m.child = child
    assert inspect.getsourcefile(nn.Module).endswith(".py") and m.child is child
    assert isinstance(m._modules, dict) and isinstance(child._parameters, dict)


def test_dotted_names_line_up_with_the_state_dict():
    """ "The structure — named children plus named parameters, recursive with a dotted prefix — exists so
    parameter names line up with a state_dict for loading and comparison." """
    net = Net()
    params = keys(net.named_parameters())
    assert params == ["gain", "encoder.weight", "encoder.bias", "head.proj.weight", "head.proj.bias"]
    assert set(params) <= set(net.state_dict())


def test_pytorch_style_code_reads_across():
    """ "It mirrors torch.nn closely enough that PyTorch code reads across unchanged." """
    class TorchStyle(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(braze.randn(2, 2))
            self.register_buffer("steps", braze.tensor(0))

        def forward(self, x):
            return x @ self.w

    m = TorchStyle()
    opt_params = list(m.parameters())
    m.eval()
    m.train()
    out = m(braze.ones(1, 2))
    assert len(opt_params) == 1 and out.shape == (1, 2) and sorted(m.state_dict()) == ["steps", "w"]


def test_assigning_a_tensor_makes_a_parameter_and_a_module_a_child():
    """ "Assigning a Tensor attribute makes a parameter, and assigning a Module makes a child." """
    m = nn.Module()
    m.weight = braze.ones(2)
    m.child = nn.Module()
    assert keys(m.named_parameters()) == ["weight"] and keys(m.named_children()) == ["child"]


def test_registration_happens_in_setattr_without_an_explicit_call():
    """ "That is done in __setattr__, so self.weight = ... registers without any explicit call." """
    m = nn.Module()
    setattr(m, "weight", braze.ones(2))
    assert "weight" in m._parameters and "weight" not in m.__dict__


def test_register_buffer_opts_out_of_training():
    """ "register_buffer is the explicit opt-out for state that must travel with the module but must not be
    trained." """
    b = Block()
    assert "running_mean" in b.state_dict() and "running_mean" not in keys(b.named_parameters())
    assert not b.running_mean.requires_grad


# --- register_buffer ------------------------------------------------------------------------------------------
def test_register_buffer_records_persistent_untrained_state():
    """ "Records persistent state that is not trained." """
    m = nn.Module()
    m.register_buffer("count", braze.tensor([0]))
    assert "count" in m.state_dict() and list(m.parameters()) == []


def test_buffer_is_in_state_dict_but_never_in_parameters():
    """ "A buffer appears in state_dict, so it saves, loads and interoperates with a torch checkpoint — but
    never in parameters(), so an optimiser cannot see it." """
    b = Block()
    sd = b.state_dict()
    sd["running_mean"] = np.full(3, 2.0, np.float32)
    b.load_state_dict(sd)
    assert np.asarray(b.running_mean).tolist() == [2.0] * 3
    assert all(p is not b.running_mean for p in b.parameters())


def test_buffers_carry_no_gradient():
    """ "Batch normalisation's running statistics are the motivating case: they carry no gradient, and letting
    an optimiser "train" them would destroy the estimate." """
    b = Block()
    b.set_require_grad(True)
    b(braze.ones(1, 3)).sum().backward()
    assert b.running_mean.grad is None and not b.running_mean.requires_grad


def test_register_buffer_raises_when_the_tensor_requires_grad():
    """ "Raises if the tensor has requires_grad." """
    with pytest.raises(braze.BrazeError, match="requires grad"):
        nn.Module().register_buffer("b", braze.ones(2, requires_grad=True))


# --- traversal ------------------------------------------------------------------------------------------------
def test_named_modules_yields_self_first_then_depth_first():
    """ "Yields self first, then children depth-first, so a caller can match on the root as well as the
    leaves." """
    net = Net()
    found = list(net.named_modules())
    assert found[0] == ("", net) and keys(found) == ["", "encoder", "head", "head.proj"]


def test_named_parameters_and_parameters_agree():
    """ "named_parameters" / "parameters" (the traversal headings): every parameter once, by dotted name. """
    net = Net()
    net.head.proj.weight = net.encoder.weight
    assert [p for _, p in net.named_parameters()] == list(net.parameters()) and len(list(net.parameters())) == 4


def test_named_buffers_are_dotted():
    """ "named_buffers" (a traversal heading): buffers by dotted name. """
    assert keys(Net().named_buffers()) == ["encoder.running_mean", "head.proj.running_mean"]


# --- state ----------------------------------------------------------------------------------------------------
def test_state_dict_has_parameters_and_buffers_by_dotted_name():
    """ "Parameters and buffers, by dotted name." """
    assert sorted(Net().state_dict()) == sorted(["gain", "encoder.weight", "encoder.bias", "encoder.running_mean",
                                                 "head.proj.weight", "head.proj.bias", "head.proj.running_mean"])


def test_state_dict_restores_running_statistics():
    """ "Buffers are included because that is what makes a checkpoint complete: a batch-normalised model
    restored without its running statistics evaluates against the wrong distribution while looking perfectly
    healthy." """
    trained = Block()
    trained.running_mean.assign(np.array([1.0, 2.0, 3.0]))
    restored = Block()
    restored.load_state_dict(trained.state_dict())
    assert np.asarray(restored.running_mean).tolist() == [1.0, 2.0, 3.0]


def test_load_state_dict_copies_in_place_preserving_device_dtype_requires_grad():
    """ "Copies values in by name, in place, preserving each entry's device, dtype and requires_grad." """
    b = Block().to("cpu:1")
    b.bias.set_require_grad(False)
    weight = b.weight.val()
    b.load_state_dict({k: v.astype(np.float64) for k, v in Block().state_dict().items()})
    assert b.weight.val() is weight and b.weight.device == Device("cpu", 1) and b.weight.dtype == braze.float32
    assert b.weight.requires_grad and not b.bias.requires_grad


def test_load_state_dict_missing_or_unexpected_key_raises():
    """ "Every key must match — a missing or unexpected one raises rather than being ignored." """
    sd = Block().state_dict()
    missing = {k: v for k, v in sd.items() if k != "bias"}
    with pytest.raises(RecordError, match="missing keys: bias"):
        Block().load_state_dict(missing)
    with pytest.raises(RecordError, match="unexpected keys: extra"):
        Block().load_state_dict({**sd, "extra": np.zeros(1)})


# --- placement and mode ---------------------------------------------------------------------------------------
def test_to_moves_every_parameter_and_buffer_in_place():
    """ "Moves every parameter and buffer to a device, in place." """
    net = Net()
    assert net.to(Device("cpu", 1)) is net
    assert {str(p.device) for _, p in net.named_param_slots()} == {"cpu:1"}


def test_to_replaces_each_parameter_with_a_new_tensor():
    """ "The optimiser captures the parameter list when it is built, and to replaces each parameter with a new
    tensor — so an optimiser made first would keep updating the old ones while the model used the new." """
    b = Block()
    captured = b.weight.val()
    b.to("cpu:1")
    assert b.weight.val() is not captured and captured.device == Device("cpu", 0)


def test_call_to_before_constructing_an_optimiser():
    """ "Call this before constructing an optimiser." / "torch has the same ordering constraint for the same
    reason." (moved first, the optimiser built afterwards updates the parameters the model uses) """
    b = Block().eval().to("cpu:1")
    opt = braze.optim.SGD(b.parameters(), lr=0.5)
    before = np.array(b.bias, copy=True)
    b(braze.ones(1, 3).to("cpu:1")).sum().backward()
    opt.step()
    assert b.bias.device == Device("cpu", 1) and np.allclose(np.asarray(b.bias), before - 0.5)


def test_to_transfers_through_the_host():
    """ "Transfer goes through the host, because that is what a transfer to a discrete device is." """
    b = Block()
    before = np.array(b.weight, copy=True)
    old = b.weight.val()
    b.to("cpu:2")
    np.testing.assert_array_equal(np.asarray(b.weight), before)
    assert not np.shares_memory(old._data, b.weight.val()._data)


def test_to_moves_gradients_with_their_parameters():
    """ "Gradients move with their parameters; dropping them would leave a subsequent optimiser step silently
    updating nothing." """
    b = Block().eval()
    b(braze.ones(1, 3)).sum().backward()
    grad = np.array(b.weight.grad, copy=True)
    b.to("cpu:1")
    assert b.weight.grad.device == Device("cpu", 1)
    np.testing.assert_array_equal(np.asarray(b.weight.grad), grad)


def test_train_sets_training_mode_recursively():
    """ "Sets training mode recursively." """
    net = Net().eval()
    net.train()
    assert all(m.training for m in net.modules())


def test_only_dropout_and_batchnorm_behave_differently_between_modes():
    """ "Only Dropout and BatchNorm2d behave differently between modes." """
    braze.manual_seed(0)
    x4 = braze.randn(2, 3, 4, 4)
    x2 = braze.randn(4, 6)
    seq = nn.Sequential(nn.Linear(6, 6), nn.ReLU())
    drop, bn = nn.Dropout(0.5), nn.BatchNorm2d(3)
    same = np.asarray(seq.train()(x2)).copy()
    assert np.array_equal(np.asarray(seq.eval()(x2)), same)
    assert not np.array_equal(np.asarray(drop.train()(x2)), np.asarray(drop.eval()(x2)))
    assert not np.allclose(np.asarray(bn.train()(x4)), np.asarray(bn.eval()(x4)))


def test_eval_is_train_false():
    """ "train(False)." (eval) """
    a, b = Net().eval(), Net().train(False)
    assert [m.training for m in a.modules()] == [m.training for m in b.modules()] == [False] * 4


def test_zero_grad_assigns_an_undefined_tensor():
    """ "Clears every parameter's gradient by assigning an undefined tensor." """
    b = Block().eval()
    b(braze.ones(1, 3)).sum().backward()
    b.zero_grad()
    assert all(p.grad is None for p in b.parameters())


def test_zero_grad_is_required_because_backward_accumulates():
    """ "Required between steps, because backward accumulates." """
    b = Block().eval()
    b(braze.ones(1, 3)).sum().backward()
    once = np.array(b.bias.grad, copy=True)
    b(braze.ones(1, 3)).sum().backward()
    np.testing.assert_allclose(np.asarray(b.bias.grad), 2 * once)
    b.zero_grad()
    b(braze.ones(1, 3)).sum().backward()
    np.testing.assert_allclose(np.asarray(b.bias.grad), once)


# --- interface and attribute plumbing -------------------------------------------------------------------------
def test_forward_and_call():
    """ "forward" / "__call__" (the interface headings): calling a module runs its forward. """
    b = Block().eval()
    x = braze.ones(2, 3)
    np.testing.assert_array_equal(np.asarray(b(x)), np.asarray(b.forward(x)))


def test_repr_is_readable():
    """ "__repr__" (an interface heading): torch's readable tree of children; format() adds shapes and counts. """
    text = repr(Net())
    assert text == "Net(\n  (encoder): Block()\n  (head): Module(\n    (proj): Block()\n  )\n)"
    detailed = Net().format()
    assert "(encoder): Block(" in detailed and "(weight): float32[3, 3]" in detailed and "# 27 params" in detailed


def test_setattr_routes_tensors_to_parameters_and_modules_to_modules():
    """ "Routes a Tensor into _parameters and a Module into _modules, which is what makes self.weight = ...
    register without a call." """
    m = nn.Module()
    m.weight = braze.ones(1)
    m.sub = nn.Module()
    assert list(m._parameters) == ["weight"] and list(m._modules) == ["sub"]


def test_getattr_is_only_invoked_when_normal_lookup_fails():
    """ "Only invoked when normal lookup fails, so parameters, buffers and children resolve without shadowing
    real attributes." """
    class WithMethod(nn.Module):
        def scale(self):
            return 2
    m = WithMethod()
    m.register_buffer("stat", braze.ones(1))
    m.child = nn.Module()
    assert m.scale() == 2 and m.stat is m._buffers["stat"] and m.child is m._modules["child"]
