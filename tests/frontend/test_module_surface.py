"""The torch Module surface: repr in torch's exact format, hooks in torch's order with torch's handles and
gradients, traversal options, apply, requires_grad_ and dtype conversion."""
from __future__ import annotations

import numpy as np
import pytest

import braze
from braze import nn
from braze.ir.interpret import interpret


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def zoo(nn):
    """A model with every standard layer kind and container, for repr comparison."""
    class Zoo(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 8, 3, stride=2, padding=1, bias=False)
            self.seq = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.LayerNorm(8), nn.Dropout(0.25))
            self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)] + [nn.GELU(), nn.Tanh(), nn.Tanh()])
            self.heads = nn.ModuleDict({"emb": nn.Embedding(10, 3, padding_idx=0), "bn": nn.BatchNorm2d(4)})
            self.attn = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
            self.pools = nn.Sequential(nn.MaxPool2d(2), nn.AvgPool2d(3, 1), nn.AdaptiveAvgPool2d((1, 1)),
                                       nn.Flatten(), nn.Softmax(dim=1), nn.SiLU(), nn.Sigmoid(), nn.Identity(),
                                       nn.BatchNorm1d(5, momentum=None))
            self.empty = nn.ModuleList()
    return Zoo()


def test_repr_equals_torch_for_the_same_model(torch):
    assert repr(zoo(nn)) == repr(zoo(torch.nn))


def test_repr_nests_children_with_extra_repr():
    model = nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.ReLU(), nn.Linear(3, 1, bias=False)))
    assert repr(model) == ("Sequential(\n"
                           "  (0): Linear(in_features=2, out_features=3, bias=True)\n"
                           "  (1): Sequential(\n"
                           "    (0): ReLU()\n"
                           "    (1): Linear(in_features=3, out_features=1, bias=False)\n"
                           "  )\n"
                           ")")


def test_repr_puts_multiline_extra_repr_before_children():
    class Custom(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Identity()

        def extra_repr(self):
            return "a=1\nb=2"
    assert repr(Custom()) == "Custom(\n  a=1\n  b=2\n  (fc): Identity()\n)"


def test_module_list_repr_folds_repeated_children():
    blocks = nn.ModuleList([nn.ReLU(), nn.ReLU(), nn.Tanh(), nn.ReLU()])
    assert repr(blocks) == "ModuleList(\n  (0-1): 2 x ReLU()\n  (2): Tanh()\n  (3): ReLU()\n)"


# --- forward hooks ------------------------------------------------------------------------------------------------


def hooked(nn, log):
    """Sequential(Linear, ReLU) with pre- and forward hooks on every module (one prepended), logging their order."""
    model = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
    for name, m in [("seq", model), ("fc", model[0]), ("relu", model[1])]:
        m.register_forward_pre_hook(lambda mod, args, name=name: log.append(f"pre {name}"))
        m.register_forward_hook(lambda mod, args, out, name=name: log.append(f"post {name} {tuple(out.shape)}"))
        m.register_forward_pre_hook(lambda mod, args, name=name: log.append(f"first {name}"), prepend=True)
        m.register_forward_hook(lambda mod, args, kwargs, out, name=name: log.append(f"kw {name} {sorted(kwargs)}"),
                                with_kwargs=True)
    return model


def test_forward_hooks_fire_in_torch_order(torch):
    ours, theirs = [], []
    hooked(nn, ours)(braze.ones(4, 3))
    hooked(torch.nn, theirs)(torch.ones(4, 3))
    assert ours == theirs


def test_forward_hooks_nest_around_children():
    log = []
    hooked(nn, log)(braze.ones(4, 3))
    assert log[:3] == ["first seq", "pre seq", "first fc"] and log[-2:] == ["post seq (4, 2)", "kw seq []"]


def test_hook_results_replace_arguments_and_output():
    fc = nn.Linear(2, 2)
    fc.register_forward_pre_hook(lambda m, args: args[0] * 0)
    fc.register_forward_hook(lambda m, args, out: out + 1)
    np.testing.assert_allclose(np.asarray(fc(braze.ones(1, 2))), np.asarray(fc.bias)[None] + 1, rtol=1e-6)


def test_pre_hook_with_kwargs_replaces_args_and_kwargs():
    class Scale(nn.Module):
        def forward(self, x, factor=1.0):
            return x * factor
    m = Scale()
    m.register_forward_pre_hook(lambda mod, args, kwargs: (args, {"factor": 3.0}), with_kwargs=True)
    assert m(braze.ones(1)).tolist() == [3.0]
    m.register_forward_pre_hook(lambda mod, args, kwargs: args, with_kwargs=True)
    with pytest.raises(braze.BrazeError, match="forward pre-hook must return None or a tuple of"):
        m(braze.ones(1))


def test_handles_remove_hooks():
    log = []
    fc = nn.Linear(2, 2)
    handle = fc.register_forward_hook(lambda m, a, o: log.append("hook"))
    fc(braze.ones(1, 2))
    handle.remove()
    handle.remove()  # removing twice is harmless, as torch
    fc(braze.ones(1, 2))
    with fc.register_forward_pre_hook(lambda m, a: log.append("scoped")):
        fc(braze.ones(1, 2))
    fc(braze.ones(1, 2))
    assert log == ["hook", "scoped"] and not fc._forward_hooks and not fc._forward_pre_hooks


def test_valid_snapshot_keeps_the_hooks_it_was_taken_with_and_owns_later_ones():
    log = []
    model = nn.Linear(2, 2)
    handle = model.register_forward_hook(lambda m, a, o: log.append("original"))
    snapshot = model.valid()
    snapshot.register_forward_hook(lambda m, a, o: log.append("snapshot"))
    handle.remove()
    model(braze.ones(1, 2))
    snapshot(braze.ones(1, 2))
    assert log == ["original", "snapshot"]


def test_always_call_hook_runs_when_forward_raises():
    class Broken(nn.Module):
        def forward(self, x):
            raise ValueError("boom")
    log = []
    m = Broken()
    m.register_forward_hook(lambda mod, args, out: log.append(("always", out)), always_call=True)
    m.register_forward_hook(lambda mod, args, out: log.append("normal"))
    with pytest.raises(ValueError, match="boom"):
        m(braze.ones(1))
    assert log == [("always", None)]


def test_reading_hooks_run_while_tracing_and_changing_hooks_are_traced():
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    shapes = []
    model[0].register_forward_hook(lambda m, args, out: shapes.append(tuple(out.shape)))
    model[1].register_forward_hook(lambda m, args, out: out * 2.0)
    x = braze.randn(2, 3)
    graph = braze.trace(model, x)
    assert shapes == [(2, 4)]
    (out,) = interpret(graph, [np.asarray(x)])
    np.testing.assert_allclose(out, np.asarray(model(x)), rtol=1e-6)
    assert shapes == [(2, 4)] * 2


# --- backward hooks -----------------------------------------------------------------------------------------------


def backward_case(lib, log, x_requires_grad=True, zero_first=False):
    lib.manual_seed(0)
    model = lib.nn.Sequential(lib.nn.Linear(3, 4), lib.nn.Tanh(), lib.nn.Linear(4, 2)).double()
    with lib.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(lib.tensor(np.linspace(-1, 1, p.numel()).reshape(tuple(p.shape)) * (i + 1)))

    def hook(name):
        def record(mod, grad_input, grad_output):
            log.append((name, [None if g is None else np.asarray(g.detach()).round(12).tolist() for g in grad_input],
                        [np.asarray(g.detach()).round(12).tolist() for g in grad_output]))
            if zero_first and name == "0":
                return tuple(None if g is None else g * 0 for g in grad_input)
        return record
    for name, m in [("seq", model), ("0", model[0]), ("1", model[1]), ("2", model[2])]:
        m.register_full_backward_hook(hook(name))
    x = lib.tensor(np.linspace(0.5, -0.5, 6).reshape(2, 3), dtype=lib.float64, requires_grad=x_requires_grad)
    model(x).pow(2).sum().backward()
    return x


@pytest.mark.filterwarnings("ignore:Full backward hook is firing")
@pytest.mark.parametrize("x_requires_grad", [True, False])
def test_full_backward_hooks_see_torchs_gradients_in_torchs_order(torch, x_requires_grad):
    ours, theirs = [], []
    backward_case(braze, ours, x_requires_grad)
    backward_case(torch, theirs, x_requires_grad)
    assert [entry[0] for entry in ours] == [entry[0] for entry in theirs]
    assert ours == theirs


def test_full_backward_hook_can_replace_grad_input():
    x = backward_case(braze, [], zero_first=True)
    assert (np.asarray(x.grad) == 0).all()


def test_full_backward_hook_reports_grad_output():
    log = []
    fc = nn.Linear(2, 1)
    fc.register_full_backward_hook(lambda m, gi, go: log.append((gi[0].shape, go[0].tolist())))
    (fc(braze.ones(3, 2, requires_grad=True)) * 5.0).sum().backward()
    assert log == [((3, 2), [[5.0], [5.0], [5.0]])]


# --- traversal, apply, gradients, dtypes --------------------------------------------------------------------------


def test_modules_with_and_without_duplicates():
    shared = nn.Linear(2, 2)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    assert len(list(model.modules())) == 3 and len(list(model.modules(remove_duplicate=False))) == 4
    assert [n for n, _ in model.named_modules(prefix="net", remove_duplicate=False)] == ["net", "net.0", "net.1",
                                                                                       "net.2"]
    assert [n for n, _ in model.named_children()] == ["0", "1"] and list(model.children())[1] is model[1]


def test_apply_visits_children_before_self_as_torch(torch):
    ours, theirs = [], []
    zoo(nn).apply(lambda m: ours.append(type(m).__name__))
    zoo(torch.nn).apply(lambda m: theirs.append(type(m).__name__))
    assert ours == theirs


def test_requires_grad_false_freezes_every_parameter():
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    assert model.requires_grad_(False) is model
    assert not any(p.requires_grad for p in model.parameters())


def test_to_a_tensor_takes_its_dtype_and_half_names_the_supported_dtypes():
    model = nn.Linear(2, 2)
    model.to(braze.zeros(1, dtype=braze.float64))
    assert model.weight.dtype == braze.float64 and model.float().weight.dtype == braze.float32
    with pytest.raises(braze.DTypeError, match="Module.half: float16 is not a braze dtype.*float32 or float64"):
        model.half()
