"""Loss graphs and the composed layers compile: braze.compile(model_returning_loss, x, targets) for the
cross-entropy, NLL, MSE, BCE and elementwise-loss families, and the group/RMS norms, 1-d and transposed
convolutions, interpolation, pads and activations, each equal to eager braze (float32, rtol 1e-5)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F

RNG = np.random.default_rng(7)


def floats(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def unit(*shape: int) -> np.ndarray:
    return RNG.uniform(0.05, 0.95, shape).astype(np.float32)


class Scored(nn.Module):
    """A linear head and a loss of its logits: the shape of a language model's training objective."""

    def __init__(self, loss: Callable[[Any, Any], Any], features: int = 6, classes: int = 4) -> None:
        super().__init__()
        self.head = nn.Linear(features, classes)
        self.loss = loss

    def forward(self, x: Any, target: Any) -> Any:
        return self.loss(self.head(x), target)


INDICES = np.array([0, 3, 1, 2, 3], dtype=np.int64)
IGNORED = np.array([0, -100, 1, 2, -100], dtype=np.int64)
LOSSES = [
    ("cross_entropy", nn.CrossEntropyLoss(), INDICES),
    ("cross_entropy_ignore_smoothing_sum", nn.CrossEntropyLoss(label_smoothing=0.2, reduction="sum"), IGNORED),
    ("cross_entropy_none", nn.CrossEntropyLoss(reduction="none"), INDICES),
    ("cross_entropy_probabilities", nn.CrossEntropyLoss(label_smoothing=0.1), unit(5, 4)),
    ("cross_entropy_weighted", nn.CrossEntropyLoss(weight=braze.tensor(unit(4))), INDICES),
    ("nll", lambda a, t: F.nll_loss(F.log_softmax(a, 1), t), IGNORED),
    ("mse", nn.MSELoss(), floats(5, 4)),
    ("mse_none", nn.MSELoss(reduction="none"), floats(5, 4)),
    ("bce", lambda a, t: F.binary_cross_entropy(F.sigmoid(a), t), unit(5, 4)),
    ("bce_with_logits", nn.BCEWithLogitsLoss(pos_weight=braze.tensor(unit(4) * 2)), unit(5, 4)),
    ("l1", nn.L1Loss(), floats(5, 4)),
    ("smooth_l1", nn.SmoothL1Loss(beta=0.5), floats(5, 4)),
    ("huber", nn.HuberLoss(reduction="sum", delta=0.3), floats(5, 4)),
    ("kl_div", lambda a, t: F.kl_div(F.log_softmax(a, 1), t, reduction="batchmean"), unit(5, 4)),
]


@pytest.mark.parametrize("loss,target", [pytest.param(fn, t, id=name) for name, fn, t in LOSSES])
def test_compiled_loss_graph_equals_eager(loss: Any, target: np.ndarray) -> None:
    model = Scored(loss).valid()
    x = floats(5, 6)
    compiled = braze.compile(model, x, target)
    with braze.no_grad():
        want = model(braze.tensor(x), braze.tensor(target)).numpy()
    np.testing.assert_allclose(compiled(x, target), want, rtol=1e-5, atol=1e-6)


def test_compiled_cross_entropy_graph_has_no_cross_entropy_node() -> None:
    graph = braze.optimize(braze.trace(Scored(nn.CrossEntropyLoss()).valid(), floats(5, 6), INDICES))
    assert "cross_entropy" not in {n.op for n in graph.nodes}


class Composed(nn.Module):
    """One of every composed layer family, chained."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1d = nn.Conv1d(3, 4, 3, padding=1, padding_mode="reflect")
        self.norm1d = nn.GroupNorm(2, 4)
        self.up = nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1, output_padding=1)
        self.pad = nn.ReflectionPad2d((1, 0, 1, 1))
        self.rms = nn.RMSNorm(9)
        self.prelu = nn.PReLU(4)

    def forward(self, x: Any) -> Any:
        h = F.mish(self.norm1d(self.conv1d(x)))
        h = self.up(F.leaky_relu(h.unsqueeze(2), 0.1))
        h = F.interpolate(self.pad(h), size=(5, 9), mode="bilinear", align_corners=False)
        h = self.rms(F.hardswish(h)) + F.elu(h) + F.softplus(h) + F.relu6(h)
        h = self.prelu(F.pad(h, (1, 1), mode="circular"))
        return F.normalize(F.adaptive_max_pool2d(F.glu(h, 1), (2, 3)).flatten(1), dim=1)


def test_compiled_composed_layers_equal_eager() -> None:
    model = Composed().valid()
    x = floats(2, 3, 7)
    compiled = braze.compile(model, x)
    with braze.no_grad():
        want = model(braze.tensor(x)).numpy()
    np.testing.assert_allclose(compiled(x), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kernel, stride, padding, output_padding, groups, phases", [
    (3, 2, 1, 1, 1, 4), (4, 3, 2, 2, 2, 9), (2, 2, 0, 0, 1, 4), ((4, 3), (2, 1), (1, 1), (1, 0), 1, 2)])
def test_compiled_conv_transpose2d_by_phases_equals_eager(kernel: Any, stride: Any, padding: Any,
                                                        output_padding: Any, groups: int, phases: int) -> None:
    """A transposed convolution without dilation compiles as one conv2d per output phase (woven by two stacks)."""
    model = nn.ConvTranspose2d(4, 6, kernel, stride=stride, padding=padding, output_padding=output_padding,
                               groups=groups).valid()
    x = floats(2, 4, 5, 3)
    compiled = braze.compile(model, x)
    with braze.no_grad():
        want = model(braze.tensor(x)).numpy()
    assert [n.op for n in compiled.graph.nodes].count("conv2d") == phases
    np.testing.assert_allclose(compiled(x), want, rtol=1e-5, atol=1e-5)


def test_compiled_conv1d_with_bias_equals_eager() -> None:
    model = nn.Conv1d(3, 5, 3, stride=2).valid()  # a conv2d with one output row and a bias epilogue
    x = floats(2, 3, 11)
    with braze.no_grad():
        want = model(braze.tensor(x)).numpy()
    np.testing.assert_allclose(braze.compile(model, x)(x), want, rtol=1e-5, atol=1e-6)


class TextClassifier(nn.Module):
    """Embedding, a bidirectional recurrent layer unrolled over the traced length, and a linear head on h_n."""

    def __init__(self, cell: str) -> None:
        super().__init__()
        self.embed = nn.Embedding(20, 6)
        self.rnn = getattr(nn, cell)(6, 5, bidirectional=True, batch_first=True)
        self.head = nn.Linear(10, 3)

    def forward(self, tokens: Any) -> Any:
        out, state = self.rnn(self.embed(tokens))
        h = state[0] if isinstance(state, tuple) else state
        return self.head(braze.cat([h[-2], h[-1]], dim=1)) + out.mean()


@pytest.mark.parametrize("cell", ["LSTM", "GRU"])
def test_compiled_recurrent_classifier_equals_eager(cell: str) -> None:
    model = TextClassifier(cell).valid()
    tokens = RNG.integers(0, 20, (2, 4)).astype(np.int64)
    with braze.no_grad():
        want = model(braze.tensor(tokens)).numpy()
    np.testing.assert_allclose(braze.compile(model, tokens)(tokens), want, rtol=1e-5, atol=1e-6)


def test_compiled_embedding_max_norm_renormalizes_like_eager() -> None:
    model = nn.Embedding(10, 4, max_norm=0.5).valid()
    tokens = np.array([[2, 1, 2, 9]], dtype=np.int64)
    compiled = braze.compile(model, tokens)  # traced before eager renormalizes the weight in place
    with braze.no_grad():
        want = model(braze.tensor(tokens)).numpy()
    np.testing.assert_allclose(compiled(tokens), want, rtol=1e-5, atol=1e-6)
    assert np.all(np.linalg.norm(want, axis=-1) <= 0.5 + 1e-6)
