"""Run one model source text under torch and under braze (only the imports swapped) and check braze against torch.

A zoo model file starts with torch's three import lines; `run_as` executes it with those lines as written (torch)
or swapped for braze's, so the same class definitions build a torch model and a braze model. `check_model` loads
the torch weights into the braze model through braze's torch .pt reader (strictly), then compares eager outputs,
the gradients of a scalar loss with respect to every parameter and floating input, and the output of the compiled
valid() snapshot against torch's eval() output.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

ZOO = Path(__file__).parent
TORCH_IMPORTS = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
BRAZE_IMPORTS = "import braze as torch\nimport braze.nn as nn\nimport braze.nn.functional as F\n"
FLAVORS = ("torch", "braze")

Namespace = dict[str, Any]


def load_model_source(name: str) -> str:
    """The text of tests/zoo/<name>.py."""
    return (ZOO / f"{name}.py").read_text()


def run_as(source: str, flavor: str, filename: str = "<zoo model>") -> Namespace:
    """Execute the source in a fresh namespace, with torch's modules (flavor "torch") or braze's ("braze") bound to
    `torch`, `nn` and `F`; the import swap keeps line numbers, so errors point at the model file's lines."""
    if flavor not in FLAVORS:
        raise ValueError(f"run_as: flavor must be one of {FLAVORS}, got {flavor!r}")
    if not source.startswith(TORCH_IMPORTS):
        raise ValueError("run_as: a zoo model source must start with the three lines\n" + TORCH_IMPORTS)
    if flavor == "braze":
        source = BRAZE_IMPORTS + source[len(TORCH_IMPORTS):]
    namespace: Namespace = {"__name__": f"zoo_{flavor}"}
    exec(compile(source, filename, "exec", dont_inherit=True), namespace)  # not our __future__ flags
    return namespace


def run_model_file(name: str, flavor: str) -> Namespace:
    """run_as on tests/zoo/<name>.py, with tracebacks naming that file."""
    return run_as(load_model_source(name), flavor, str(ZOO / f"{name}.py"))


def torch_weights_to_braze(torch_model: Any, braze_model: Any, tmp_path: Path) -> None:
    """Save the torch model's state dict with torch.save and load it strictly into the braze model through
    braze's torch .pt reader (braze.load), as a user moving a checkpoint across would."""
    import torch

    import braze
    path = Path(tmp_path) / f"{type(torch_model).__name__}.pt"
    torch.save(torch_model.state_dict(), path)
    braze_model.load_state_dict(braze.load(path), strict=True)


def build_pair(torch_ns: Namespace, braze_ns: Namespace, build: Callable[[Namespace], Any], tmp_path: Path, *,
               dtype: str = "float32", seed: int = 0) -> tuple[Any, Any]:
    """The model built in each namespace and cast to `dtype`, the torch one initialized from `seed` and the braze
    one carrying its weights (torch_weights_to_braze); both in eval mode."""
    import torch
    torch.manual_seed(seed)
    theirs, ours = build(torch_ns), build(braze_ns)
    theirs.to(getattr(torch, dtype)).eval()
    ours.to(getattr(braze_ns["torch"], dtype)).eval()
    torch_weights_to_braze(theirs, ours, tmp_path)
    return theirs, ours


def check_model(name: str, build: Callable[[Namespace], Any], inputs: Callable[[Namespace, np.random.Generator], tuple],
                tmp_path: Path, *, dtype: str = "float64",
                loss: Callable[[Namespace, Any], Any] | None = None, rtol: float, atol: float,
                compile_rtol: float, compile_atol: float, compiled: bool = True, train: bool = False,
                seed: int = 0) -> None:
    """Check tests/zoo/<name>.py under braze against torch at `dtype`: strict weight load, eager outputs, gradients
    of `loss(ns, outputs)` (default: a fixed random projection of every floating output) with respect to every
    parameter and floating input (rtol/atol), and braze.compile(model.valid(), *inputs) against torch's eval()
    output (compile_rtol/compile_atol; compiled=False skips it). Eager checks run in eval mode, or in training
    mode with train=True (for models whose training mode is deterministic, e.g. batch norm)."""
    import torch

    import braze
    runs = {flavor: _Run(run_model_file(name, flavor), dtype) for flavor in FLAVORS}
    runs["torch"].model, runs["braze"].model = build_pair(runs["torch"].ns, runs["braze"].ns, build, tmp_path,
                                                          dtype=dtype, seed=seed)
    for run in runs.values():
        run.model.train(train)
        run.forward_backward(inputs, loss or _projection_loss, seed)
    ours, theirs = runs["braze"], runs["torch"]
    _assert_trees_close(ours.outputs, theirs.outputs, rtol, atol, f"{name} ({dtype}): eager output")
    assert ours.grads.keys() == theirs.grads.keys(), f"{name}: braze's and torch's parameters differ"
    for key, grad in theirs.grads.items():
        _assert_trees_close(ours.grads[key], grad, rtol, atol, f"{name} ({dtype}): gradient of {key}")
    if compiled:
        examples = [x.detach() for x in ours.inputs]
        native = braze.compile(ours.model.valid(), *examples)(*[x.numpy() for x in examples])
        with torch.no_grad():
            reference = theirs.model.eval()(*[x.detach() for x in theirs.inputs])
        _assert_trees_close(_arrays(native), _arrays(reference), compile_rtol, compile_atol,
                            f"{name} ({dtype}): compiled output")


class _Run:
    """One flavor's namespace, model, inputs and results."""

    def __init__(self, ns: Namespace, dtype: str) -> None:
        self.ns, self.torch, self.dtype = ns, ns["torch"], getattr(ns["torch"], dtype)
        self.model: Any = None
        self.inputs: list[Any] = []
        self.outputs: list[Any] = []
        self.grads: dict[str, Any] = {}

    def forward_backward(self, inputs: Callable[[Namespace, np.random.Generator], tuple],
                         loss: Callable[[Namespace, Any], Any], seed: int) -> None:
        """Run the model on its inputs (floating ones cast to the dtype and requiring grad) and backpropagate."""
        self.inputs = [self._leaf(x) for x in inputs(self.ns, np.random.default_rng(seed))]
        out = self.model(*self.inputs)
        loss(self.ns, out).backward()
        self.outputs = _arrays(out)
        self.grads = {f"parameter {key}": _grad(p) for key, p in self.model.named_parameters()}
        self.grads.update({f"input {i}": _grad(x) for i, x in enumerate(self.inputs) if x.is_floating_point()})

    def _leaf(self, x: Any) -> Any:
        if not x.is_floating_point():
            return x
        return x.detach().to(self.dtype).requires_grad_(True)


def _projection_loss(ns: Namespace, out: Any) -> Any:
    """sum(out_i * w_i) over the floating outputs, w_i fixed random weights: every output element reaches the
    gradient with a different weight, so a wrong element cannot hide in a sum."""
    torch, rng = ns["torch"], np.random.default_rng(12345)
    terms = [(y * torch.tensor(rng.standard_normal(tuple(y.shape)), dtype=y.dtype)).sum()
             for y in _leaves(out) if y is not None and y.is_floating_point()]
    return sum(terms[1:], terms[0])


def _leaves(out: Any) -> list[Any]:
    if isinstance(out, (tuple, list)):
        return [leaf for item in out for leaf in _leaves(item)]
    return [out]


def _arrays(out: Any) -> list[Any]:
    return [None if y is None else np.asarray(y.detach().numpy() if hasattr(y, "detach") else y)
            for y in _leaves(out)]


def _grad(x: Any) -> Any:
    return None if x.grad is None else x.grad.detach().numpy()


def _assert_trees_close(actual: Any, expected: Any, rtol: float, atol: float, what: str) -> None:
    if not isinstance(expected, list):
        actual, expected = [actual], [expected]
    assert len(actual) == len(expected), f"{what}: {len(actual)} values, torch has {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert (a is None) == (e is None), f"{what} [{i}]: braze gives {a is not None}, torch {e is not None}"
        if e is not None:
            assert a.shape == e.shape, f"{what} [{i}]: shape {a.shape}, torch {e.shape}"
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=f"{what} [{i}]")
