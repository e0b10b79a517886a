"""nn.ParameterList and nn.ParameterDict against torch's: state dict keys, parameter order and repr of the same
structure, strict loading of a torch checkpoint giving torch's outputs and gradients, optimizer steps, dtype
conversion, the list and dict API (tensors becoming Parameters, slicing, mutation, the dict methods), and a model
reading them traced (its parameters as graph params) and compiled, equal to eager."""
from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any

import numpy as np
import pytest

import braze
import braze.nn as nn

torch = pytest.importorskip("torch")

R = np.random.default_rng(11)


def model_class(lib: Any) -> Any:
    """The same model written against either library: a list and a dict of parameters read in forward."""
    class Model(lib.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = lib.nn.Linear(4, 4)
            self.plist = lib.nn.ParameterList([lib.nn.Parameter(lib.randn(4, 4)), lib.randn(4)])
            self.plist.append(lib.randn(4, 3))
            self.pdict = lib.nn.ParameterDict({"shift": lib.randn(3), "scale": lib.randn(3)})
            self.pdict.update(OrderedDict([("gate", lib.randn(3)), ("bias", lib.randn(3))]))

        def forward(self, x: Any) -> Any:
            x = self.proj(x)
            for p in self.plist[:2]:
                x = x @ p if p.ndim == 2 else x * p
            y = x @ self.plist[-1]
            return (y * self.pdict["scale"] + self.pdict["shift"]) * self.pdict["gate"].sigmoid() + self.pdict["bias"]
    return Model


def pair() -> tuple[Any, Any]:
    """A torch model and a braze one holding the torch model's values (loaded strictly)."""
    torch.manual_seed(0)
    theirs, ours = model_class(torch)(), model_class(braze)()
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    return theirs, ours


def test_state_dict_keys_and_parameter_order_match_torch() -> None:
    theirs, ours = pair()
    keys = ["proj.weight", "proj.bias", "plist.0", "plist.1", "plist.2", "pdict.scale", "pdict.shift", "pdict.gate",
            "pdict.bias"]
    assert list(ours.state_dict()) == list(theirs.state_dict()) == keys
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()] == keys
    assert [n for n, _ in ours.named_modules()] == [n for n, _ in theirs.named_modules()]
    assert all(p.requires_grad for p in ours.parameters())


def test_repr_matches_torch() -> None:
    theirs, ours = pair()
    assert repr(ours) == repr(theirs)
    mixed = [(lib.nn.ParameterList([lib.zeros(2, 3, dtype=lib.float64), lib.ones(())]).append(3),
              lib.nn.ParameterDict({"k": lib.zeros(5), "o": None})) for lib in (braze, torch)]
    assert [repr(m) for m in mixed[0]] == [repr(m) for m in mixed[1]]
    assert repr(nn.ParameterList()) == "ParameterList()" and repr(nn.ParameterDict()) == "ParameterDict()"


def test_torch_checkpoint_loads_strictly_and_gives_torch_outputs_and_gradients(tmp_path: Any) -> None:
    torch.manual_seed(1)
    theirs = model_class(torch)().double()
    torch.save(theirs.state_dict(), tmp_path / "model.pt")
    ours = model_class(braze)().to(braze.float64)
    ours.load_state_dict(braze.load(tmp_path / "model.pt"))
    x = R.standard_normal((5, 4))
    out_t, out_b = theirs(torch.tensor(x)), ours(braze.tensor(x))
    np.testing.assert_allclose(out_b.detach().numpy(), out_t.detach().numpy(), rtol=1e-12, atol=1e-12)
    cotangent = R.standard_normal(tuple(out_t.shape))
    (out_t * torch.tensor(cotangent)).sum().backward()
    (out_b * braze.tensor(cotangent)).sum().backward()
    grads = dict(ours.named_parameters())
    for name, p in theirs.named_parameters():
        np.testing.assert_allclose(grads[name].grad.numpy(), p.grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=name)


def test_a_missing_or_extra_entry_fails_a_strict_load() -> None:
    _, ours = pair()
    state = ours.state_dict()
    with pytest.raises(Exception, match="missing keys: pdict.gate"):
        ours.load_state_dict({k: v for k, v in state.items() if k != "pdict.gate"})
    with pytest.raises(Exception, match="unexpected keys: plist.3"):
        ours.load_state_dict({**state, "plist.3": np.zeros(2, np.float32)})


def test_sgd_updates_them_as_torch_does() -> None:
    theirs, ours = pair()
    x = R.standard_normal((3, 4)).astype(np.float32)
    opts = (torch.optim.SGD(theirs.parameters(), lr=0.1, momentum=0.9), braze.optim.SGD(ours.parameters(), lr=0.1,
                                                                                         momentum=0.9))
    for _ in range(2):
        for model, opt, lib in ((theirs, opts[0], torch), (ours, opts[1], braze)):
            opt.zero_grad()
            model(lib.tensor(x)).square().mean().backward()
            opt.step()
    for key, value in theirs.state_dict().items():
        np.testing.assert_allclose(ours.state_dict()[key], value.numpy(), rtol=1e-5, atol=1e-6, err_msg=key)


def test_to_float64_converts_them() -> None:
    theirs, ours = pair()
    theirs.double()
    ours.to(braze.float64)
    assert {str(p.dtype) for p in ours.parameters()} == {"float64"}
    x = R.standard_normal((2, 4))
    np.testing.assert_allclose(ours(braze.tensor(x)).detach().numpy(), theirs(torch.tensor(x)).detach().numpy(),
                               rtol=1e-12, atol=1e-12)


def test_traced_they_are_graph_params_and_compiled_matches_eager() -> None:
    _, ours = pair()
    ours.eval()
    x = braze.randn(3, 4)
    graph = braze.trace(ours, x)
    paths = [dict(node.attrs)["path"] for node in graph.nodes if node.op == "param"]
    assert sorted(paths) == sorted(ours.state_dict())
    compiled = braze.compile(ours, x)
    for scale in (1.0, -2.0):
        np.testing.assert_allclose(compiled(x * scale).numpy(), ours(x * scale).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_list_api() -> None:
    first = nn.Parameter(braze.randn(2))
    plist = nn.ParameterList([first])
    assert plist.append(braze.zeros(3)) is plist
    plist += [braze.ones(1), nn.Parameter(braze.zeros(2), requires_grad=False)]
    assert len(plist) == 4 and plist[0] is first and plist[-4] is first
    assert isinstance(plist[1], nn.Parameter) and plist[1].requires_grad and not plist[3].requires_grad
    assert [tuple(p.shape) for p in plist] == [(2,), (3,), (1,), (2,)]
    part = plist[1::2]
    assert isinstance(part, nn.ParameterList) and [p for p in part] == [plist[1], plist[3]]
    assert list(part.state_dict()) == ["0", "1"]
    plist[-1] = braze.full((5,), 2.0)
    assert isinstance(plist[3], nn.Parameter) and plist[3].requires_grad and tuple(plist[3].shape) == (5,)
    assert list(plist.state_dict()) == ["0", "1", "2", "3"]
    plist.extend(iter(["note"]))
    assert plist[4] == "note" and len(list(plist.parameters())) == 4
    plist[4] = braze.ones(1)
    assert len(list(plist.parameters())) == 5
    assert not [k for k in dir(plist) if k.isdigit()]
    with pytest.raises(IndexError):
        plist[5]
    with pytest.raises(IndexError):
        plist[-6] = braze.ones(1)
    with pytest.raises(TypeError, match="iterable"):
        plist.extend(braze.ones(3))
    with pytest.raises(RuntimeError, match="should not be called"):
        plist(braze.ones(1))


def test_dict_api() -> None:
    pdict = nn.ParameterDict({"b": braze.ones(1), "a": braze.zeros(2)})
    assert list(pdict) == ["a", "b"]  # a plain dict enters in sorted key order, as torch
    pdict.update([("z", braze.ones(3)), ("c", 4)])
    pdict.update(OrderedDict([("y", braze.ones(1)), ("x", braze.ones(1))]))
    assert list(pdict.keys()) == ["a", "b", "z", "c", "y", "x"] and list(reversed(pdict))[0] == "x"
    assert list(pdict.state_dict()) == ["a", "b", "z", "y", "x"]
    assert isinstance(pdict["z"], nn.Parameter) and pdict["c"] == 4 and "c" in pdict and "q" not in pdict
    assert [k for k, _ in pdict.items()] == list(pdict) and len(list(pdict.values())) == len(pdict) == 6
    assert pdict.get("q") is None and pdict.get("q", 1) == 1 and pdict.get("a") is pdict["a"]
    assert pdict.setdefault("a", braze.ones(9)).shape == (2,) and pdict.setdefault("w", braze.ones(4)).shape == (4,)
    assert pdict.pop("b").shape == (1,) and "b" not in pdict and "b" not in dict(pdict.named_parameters())
    assert pdict.popitem()[0] == "w"
    del pdict["c"]
    copied = pdict.copy()
    assert list(copied) == list(pdict) and copied["a"] is pdict["a"]
    merged = pdict | nn.ParameterDict({"new": braze.ones(1)})
    assert list(merged) == list(pdict) + ["new"] and "new" not in pdict
    pdict |= nn.ParameterDict({"new": braze.ones(2)})
    assert pdict["new"].shape == (2,)
    assert list(pdict.fromkeys(["p", "q"], braze.ones(1))) == ["p", "q"]
    pdict["update"] = braze.ones(2)  # a key that names a method still gives the entry
    assert isinstance(pdict["update"], nn.Parameter) and callable(pdict.update)
    twin = copy.deepcopy(pdict)
    twin["only_in_twin"] = braze.ones(1)
    assert "only_in_twin" not in pdict
    pdict.clear()
    assert len(pdict) == 0 and not list(pdict.parameters())
    with pytest.raises(KeyError):
        pdict["missing"]
    with pytest.raises(TypeError, match="not a string"):
        pdict[1] = braze.ones(1)
    with pytest.raises(ValueError, match="length 3; 2 is required"):
        pdict.update([("a", braze.ones(1), 2)])
    with pytest.raises(TypeError, match="iterable"):
        pdict.update(3)
    with pytest.raises(RuntimeError, match="should not be called"):
        pdict(braze.ones(1))


def test_a_valid_snapshot_keeps_its_own_keys() -> None:
    """Entries added to or removed from a valid() snapshot's ParameterDict leave the original's keys alone."""
    model = model_class(braze)()
    snapshot = model.valid()
    snapshot.pdict["extra"] = braze.zeros(3)
    del snapshot.pdict["gate"]
    assert list(model.pdict.keys()) == ["scale", "shift", "gate", "bias"]
    assert list(snapshot.pdict.keys()) == ["scale", "shift", "bias", "extra"]
