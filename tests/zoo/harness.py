"""Run one model source text under torch and under braze (only the imports swapped) and compare braze with torch.

A zoo model file starts with torch's three import lines; `run_as` executes it with those lines as written (torch)
or swapped for braze's, so the same class definitions build a torch model and a braze model. `check_model` loads
the torch weights into the braze model through braze's torch .pt reader (strictly), then compares eager outputs,
the gradients of a scalar loss with respect to every parameter and floating input, and the output of the compiled
valid() snapshot with torch's eval() output.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

ZOO = Path(__file__).parent
TORCH_IMPORTS = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
BRAZE_IMPORTS = "import braze as torch\nimport braze.nn as nn\nimport braze.nn.functional as F\n"

Namespace = dict[str, Any]


def load_model_source(name: str) -> str:
    """The text of tests/zoo/<name>.py."""
    return (ZOO / f"{name}.py").read_text()


def run_as(source: str, flavor: str) -> Namespace:
    """Execute the source in a fresh namespace with torch's modules (flavor "torch") or braze's ("braze") bound
    to `torch`, `nn` and `F` by its import lines."""
    if flavor not in ("torch", "braze"):
        raise ValueError(f"run_as: flavor must be 'torch' or 'braze', got {flavor!r}")
    if not source.startswith(TORCH_IMPORTS):
        raise ValueError("run_as: a zoo model source must start with the three lines\n" + TORCH_IMPORTS)
    if flavor == "braze":
        source = BRAZE_IMPORTS + source[len(TORCH_IMPORTS):]
    namespace: Namespace = {"__name__": f"zoo_{flavor}"}
    exec(compile(source, f"<zoo model, {flavor}>", "exec"), namespace)
    return namespace


def torch_weights_to_braze(torch_model: Any, braze_model: Any, tmp_path: Path) -> None:
    """torch.save the torch model's state dict and load it strictly into the braze model with braze.load."""
    import torch

    import braze
    path = Path(tmp_path) / f"{type(torch_model).__name__}.pt"
    torch.save(torch_model.state_dict(), path)
    braze_model.load_state_dict(braze.load(path), strict=True)


def check_model(name: str, build: Callable[[Namespace], Any], inputs: Callable[[Namespace, np.random.Generator], tuple],
                tmp_path: Path, *, dtype: str = "float64", loss: Callable[[Namespace, Any], Any] | None = None,
                rtol: float, atol: float, compile_rtol: float, compile_atol: float) -> None:
    """In eval mode at `dtype`: strict weight load, eager outputs and the gradients of `loss(ns, outputs)` (default:
    a fixed random projection of the output) wrt every parameter and floating input equal to torch (rtol/atol),
    and braze.compile(model.valid(), *inputs) equal to torch's eval() output (compile_rtol/compile_atol)."""
    import torch

    import braze
    source = load_model_source(name)
    runs = {flavor: _Run(run_as(source, flavor), dtype) for flavor in ("torch", "braze")}
    torch.manual_seed(0)
    for run in runs.values():
        run.model = build(run.ns).to(run.dtype).eval()
    torch_weights_to_braze(runs["torch"].model, runs["braze"].model, tmp_path)
    for run in runs.values():
        run.forward_backward(inputs, loss or _projection_loss)
    ours, theirs = runs["braze"], runs["torch"]
    _assert_close(ours.outputs, theirs.outputs, rtol, atol, f"{name} ({dtype}): eager output")
    assert ours.grads.keys() == theirs.grads.keys(), f"{name}: braze's and torch's parameters differ"
    for key, grad in theirs.grads.items():
        _assert_close([ours.grads[key]], [grad], rtol, atol, f"{name} ({dtype}): gradient of {key}")
    examples = [x.detach() for x in ours.inputs]
    native = braze.compile(ours.model.valid(), *examples)(*[x.numpy() for x in examples])
    with torch.no_grad():
        reference = theirs.model(*[x.detach() for x in theirs.inputs])
    _assert_close(_arrays(native), _arrays(reference), compile_rtol, compile_atol, f"{name} ({dtype}): compiled")


class _Run:
    """One flavor's namespace, model, inputs and results."""

    def __init__(self, ns: Namespace, dtype: str) -> None:
        self.ns, self.dtype = ns, getattr(ns["torch"], dtype)
        self.model: Any = None
        self.inputs: list[Any] = []
        self.outputs: list[Any] = []
        self.grads: dict[str, Any] = {}

    def forward_backward(self, inputs: Callable[[Namespace, np.random.Generator], tuple],
                         loss: Callable[[Namespace, Any], Any]) -> None:
        """Run the model on its inputs (floating ones cast to the dtype and requiring grad) and backpropagate."""
        self.inputs = [x.detach().to(self.dtype).requires_grad_(True) if x.is_floating_point() else x
                       for x in inputs(self.ns, np.random.default_rng(0))]
        out = self.model(*self.inputs)
        loss(self.ns, out).backward()
        self.outputs = _arrays(out)
        self.grads = {f"parameter {key}": _grad(p) for key, p in self.model.named_parameters()}
        self.grads.update({f"input {i}": _grad(x) for i, x in enumerate(self.inputs) if x.is_floating_point()})


def _projection_loss(ns: Namespace, out: Any) -> Any:
    """sum(out * w) with w fixed random weights, so a wrong output element cannot hide in a plain sum."""
    torch, rng = ns["torch"], np.random.default_rng(12345)
    terms = [(y * torch.tensor(rng.standard_normal(tuple(y.shape)), dtype=y.dtype)).sum() for y in _leaves(out)]
    return sum(terms[1:], terms[0])


def _leaves(out: Any) -> list[Any]:
    return [leaf for item in out for leaf in _leaves(item)] if isinstance(out, (tuple, list)) else [out]


def _arrays(out: Any) -> list[np.ndarray]:
    return [np.asarray(y.detach().numpy() if hasattr(y, "detach") else y) for y in _leaves(out)]


def _grad(x: Any) -> np.ndarray | None:
    return None if x.grad is None else x.grad.detach().numpy()


def _assert_close(actual: list, expected: list, rtol: float, atol: float, what: str) -> None:
    assert len(actual) == len(expected), f"{what}: {len(actual)} values, torch has {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert (a is None) == (e is None), f"{what} [{i}]: braze has a value: {a is not None}, torch: {e is not None}"
        if e is not None:
            assert a.shape == e.shape, f"{what} [{i}]: shape {a.shape}, torch {e.shape}"
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=f"{what} [{i}]")
