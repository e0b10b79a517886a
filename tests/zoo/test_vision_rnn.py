"""The vision and recurrent half of the model zoo: ResNet (basic blocks, and ResNeXt-style grouped bottlenecks),
MobileNetV2, a U-Net and an LSTM text classifier (packing its padded batch by length), each one source text run
under torch and under braze.

Checked against torch: strict loading of torch's weights (batch-norm running stats and num_batches_tracked
included, set to trained-looking values first); eager outputs, the gradients of the model's training loss with
respect to every parameter and floating input, and the batch-norm buffers after the step, in float64 to 1e-9 in
training and evaluation mode; float32 eager to 1e-4 and the compiled valid() snapshot to 1e-4 in evaluation mode.
In training mode the dropout layers are switched to evaluation: their random masks are each framework's own.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

from tests.zoo.harness import check_model, load_model_source, run_as, torch_weights_to_braze

torch = pytest.importorskip("torch")

Namespace = dict[str, Any]  # what run_as returns: the model file's names, with torch, nn and F

FLOAT64 = {"rtol": 1e-9, "atol": 1e-10}
# float32: braze's kernels and torch's sum in different orders; 1e-4 relative and 1e-5 absolute leave room for
# that and still catch a wrong element
FLOAT32 = {"rtol": 1e-4, "atol": 1e-5, "compile_rtol": 1e-4, "compile_atol": 1e-5}


@dataclass(frozen=True)
class Case:
    """A zoo model: its file, how to build it, its example inputs and its training loss."""

    id: str
    file: str
    build: Callable[[Namespace], Any]
    inputs: Callable[[Namespace, np.random.Generator], tuple]
    loss: Callable[[Namespace, Any], Any]


def trained_batch_norm(model: Any, ns: Namespace) -> Any:
    """The model with running stats as after training (a fresh mean 0 / var 1 would hide a wrong eval path)."""
    rng = np.random.default_rng(7)
    with ns["torch"].no_grad():
        for module in model.modules():
            if isinstance(module, ns["nn"].BatchNorm2d):
                module.running_mean.copy_(ns["torch"].tensor(rng.normal(0.0, 0.3, module.num_features)))
                module.running_var.copy_(ns["torch"].tensor(rng.uniform(0.5, 2.0, module.num_features)))
                module.num_batches_tracked.fill_(5)
    return model


def images(*shape: int) -> Callable[[Namespace, np.random.Generator], tuple]:
    return lambda ns, rng: (ns["torch"].tensor(rng.standard_normal(shape)),)


def classes(*targets: int) -> Callable[[Namespace, Any], Any]:
    """nn.CrossEntropyLoss() of the logits against fixed class targets."""
    return lambda ns, logits: ns["nn"].CrossEntropyLoss()(logits, ns["torch"].tensor(targets))


def segmentation_loss(ns: Namespace, logits: Any) -> Any:
    """Per-pixel cross-entropy against a fixed mask of the logits' spatial size."""
    n, _, h, w = logits.shape
    mask = np.random.default_rng(3).integers(0, logits.shape[1], (n, h, w))
    return ns["F"].cross_entropy(logits, ns["torch"].tensor(mask))


CASES = [
    Case("resnet_basic", "resnet", lambda ns: trained_batch_norm(ns["resnet_tiny"](num_classes=5), ns),
         images(2, 3, 32, 32), classes(1, 4)),
    Case("resnext_bottleneck", "resnet", lambda ns: trained_batch_norm(ns["resnext_tiny"](num_classes=5), ns),
         images(2, 3, 16, 16), classes(0, 3)),
    Case("mobilenet_v2", "mobilenet", lambda ns: trained_batch_norm(ns["MobileNetV2"](num_classes=5), ns),
         images(2, 3, 32, 32), classes(2, 0)),
    Case("unet", "unet", lambda ns: trained_batch_norm(ns["UNet"](n_channels=3, n_classes=2), ns),
         images(1, 3, 17, 19), segmentation_loss),  # odd sizes: both up paths pad with F.pad
    Case("lstm_classifier", "lstm", lambda ns: ns["LSTMClassifier"](vocab_size=50, num_classes=3),
         lambda ns, rng: padded_tokens(ns, rng, [5, 8, 2]), classes(0, 2, 1)),
]


def padded_tokens(ns: Namespace, rng: np.random.Generator, lengths: list[int]) -> tuple:
    """Token ids (B, max length) padded with 0 (the padding index: its embedding row must get no gradient), and the
    lengths, unsorted as a DataLoader batch comes."""
    tokens = rng.integers(1, 50, (len(lengths), max(lengths)))
    tokens[np.arange(max(lengths))[None, :] >= np.array(lengths)[:, None]] = 0
    return ns["torch"].tensor(tokens), ns["torch"].tensor(lengths)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_zoo_model_float32_and_compiled_match_torch(case: Case, tmp_path: Any) -> None:
    check_model(case.file, case.build, case.inputs, tmp_path, dtype="float32", loss=case.loss, **FLOAT32)


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_zoo_model_float64_step_matches_torch(case: Case, mode: str, tmp_path: Any) -> None:
    ours, theirs = (training_step(case, ns, model) for ns, model in float64_pair(case, mode == "train", tmp_path))
    assert ours.keys() == theirs.keys()
    for key, want in theirs.items():
        np.testing.assert_allclose(ours[key], want, err_msg=f"{case.id} ({mode}): {key}", **FLOAT64)


# batch norm's running stats over several steps (ResNeXt) and the packed LSTM; the others add time, not coverage
TRAINED = [c for c in CASES if c.id in ("resnext_bottleneck", "lstm_classifier")]


@pytest.mark.parametrize("case", TRAINED, ids=[c.id for c in TRAINED])
def test_zoo_model_trains_like_torch(case: Case, tmp_path: Any) -> None:
    """Three steps of SGD with momentum and weight decay under a StepLR schedule give torch's weights and
    batch-norm buffers."""
    ours, theirs = (trained_state(case, ns, model) for ns, model in float64_pair(case, True, tmp_path))
    assert ours.keys() == theirs.keys()
    for key, want in theirs.items():
        np.testing.assert_allclose(ours[key], want, err_msg=f"{case.id}: {key} after training", **FLOAT64)


def float64_pair(case: Case, train: bool, tmp_path: Any) -> tuple[tuple[Namespace, Any], tuple[Namespace, Any]]:
    """(braze's, torch's) namespace and model in float64 with torch's weights, dropout layers in evaluation."""
    source = load_model_source(case.file)
    models = {}
    for flavor in ("torch", "braze"):
        ns = run_as(source, flavor)
        model = case.build(ns).to(ns["torch"].float64).train(train)
        for module in model.modules():
            if isinstance(module, ns["nn"].Dropout):
                module.eval()
        models[flavor] = (ns, model)
    torch_weights_to_braze(models["torch"][1], models["braze"][1], tmp_path)
    return models["braze"], models["torch"]


def float64_inputs(case: Case, ns: Namespace, seed: int) -> list[Any]:
    return [x.to(ns["torch"].float64).requires_grad_() if x.is_floating_point() else x
            for x in case.inputs(ns, np.random.default_rng(seed))]


def training_step(case: Case, ns: Namespace, model: Any) -> dict[str, np.ndarray]:
    """The output, the loss's gradients and the buffers after one forward and backward pass, by name."""
    inputs = float64_inputs(case, ns, 0)
    out = model(*inputs)
    case.loss(ns, out).backward()
    result = {"output": out.detach().numpy()}
    result.update({f"gradient of {key}": p.grad.numpy() for key, p in model.named_parameters()})
    result.update({f"gradient of input {k}": x.grad.numpy() for k, x in enumerate(inputs) if x.is_floating_point()})
    result.update({f"buffer {key}": b.numpy() for key, b in model.named_buffers()})
    return result


def trained_state(case: Case, ns: Namespace, model: Any) -> dict[str, np.ndarray]:
    """The state dict after three optimizer steps on fresh inputs each."""
    optimizer = ns["torch"].optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    scheduler = ns["torch"].optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    for step in range(3):
        optimizer.zero_grad()
        case.loss(ns, model(*float64_inputs(case, ns, step))).backward()
        optimizer.step()
        scheduler.step()
    return {key: np.asarray(v.numpy() if hasattr(v, "numpy") else v) for key, v in model.state_dict().items()}
