"""The benchmark models: each as a braze module, a hand-written numpy forward of the same weights, and (when
torch is installed) the same torch module with those weights loaded.

- mlp: Linear 784-512-512-10 with ReLU;
- cnn: conv3x3(3->32)+BN+ReLU, conv3x3(32->64, stride 2)+BN+ReLU, conv3x3(64->128, stride 2)+BN+ReLU, global
  average pool, linear(128->10), on 3x32x32 images (padding 1; batch norm with non-trivial running statistics);
- transformer: one post-norm encoder layer, d_model 256, 4 heads, ffn 1024, GELU (erf), batch first, sequence 128;
- linear4: Linear(4, 4), for the call overhead.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import braze
import braze.nn as nn
import braze.nn.functional as F


@dataclass
class Case:
    """One benchmarked model at one batch size."""

    name: str
    model: nn.Module
    x: np.ndarray
    numpy_forward: Callable[[np.ndarray], np.ndarray]
    torch_model: Callable[[], Any]


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32)
        self.c2, self.b2 = nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64)
        self.c3, self.b3 = nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.BatchNorm2d(128)
        self.fc = nn.Linear(128, 10)

    def forward(self, x: Any) -> Any:
        x = F.relu(self.b1(self.c1(x)))
        x = F.relu(self.b2(self.c2(x)))
        x = F.relu(self.b3(self.c3(x)))
        return self.fc(x.mean(dim=(2, 3)))


def _weights(model: nn.Module) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in model.state_dict().items()}


def _randomize_batch_norm(model: nn.Module, rng: np.random.Generator) -> None:
    for _, m in model.named_modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.running_mean.assign(rng.standard_normal(c).astype(np.float32) * 0.1)
            m.running_var.assign(rng.uniform(0.5, 1.5, c).astype(np.float32))
            m.weight.assign(rng.uniform(0.5, 1.5, c).astype(np.float32))
            m.bias.assign(rng.standard_normal(c).astype(np.float32) * 0.1)


# --- hand-written numpy forwards ---------------------------------------------------------------------------------

def _linear(w: np.ndarray, b: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    wt = np.ascontiguousarray(w.T)
    return lambda x: x @ wt + b


def numpy_mlp(weights: dict[str, np.ndarray], layers: int) -> Callable[[np.ndarray], np.ndarray]:
    fcs = [_linear(weights[f"{2 * k}.weight"], weights[f"{2 * k}.bias"]) for k in range(layers)]

    def forward(x: np.ndarray) -> np.ndarray:
        for k, fc in enumerate(fcs):
            x = fc(x)
            if k < len(fcs) - 1:
                x = np.maximum(x, 0)
        return x
    return forward


def _conv_bn_relu(w: np.ndarray, b: np.ndarray, bn: dict[str, np.ndarray], stride: int, eps: float = 1e-5
                  ) -> Callable[[np.ndarray], np.ndarray]:
    cout = w.shape[0]
    wm = np.ascontiguousarray(w.reshape(cout, -1).T)
    scale = (bn["weight"] / np.sqrt(bn["running_var"] + eps)).astype(np.float32)
    shift = (bn["bias"] - bn["running_mean"] * scale).astype(np.float32)

    def forward(x: np.ndarray) -> np.ndarray:
        n = x.shape[0]
        padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))[:, :, ::stride, ::stride]
        oh, ow = windows.shape[2], windows.shape[3]
        cols = windows.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, -1)
        y = (cols @ wm + b) * scale + shift
        return np.maximum(y, 0).reshape(n, oh, ow, cout).transpose(0, 3, 1, 2)
    return forward


def numpy_cnn(weights: dict[str, np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    def bn(k: int) -> dict[str, np.ndarray]:
        return {s: weights[f"b{k}.{s}"] for s in ("weight", "bias", "running_mean", "running_var")}
    convs = [_conv_bn_relu(weights[f"c{k}.weight"], weights[f"c{k}.bias"], bn(k), s) for k, s in ((1, 1), (2, 2),
                                                                                                   (3, 2))]
    fc = _linear(weights["fc.weight"], weights["fc.bias"])

    def forward(x: np.ndarray) -> np.ndarray:
        for conv in convs:
            x = conv(x)
        return fc(x.mean(axis=(2, 3)))
    return forward


def _erf(x: np.ndarray) -> np.ndarray:
    """Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7): numpy has no erf."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(axis=-1, keepdims=True)
    return centered / np.sqrt(var + eps) * w + b


def numpy_encoder(weights: dict[str, np.ndarray], heads: int) -> Callable[[np.ndarray], np.ndarray]:
    w = weights
    qkv = _linear(w["self_attn.in_proj_weight"], w["self_attn.in_proj_bias"])
    out = _linear(w["self_attn.out_proj.weight"], w["self_attn.out_proj.bias"])
    ff1, ff2 = _linear(w["linear1.weight"], w["linear1.bias"]), _linear(w["linear2.weight"], w["linear2.bias"])

    def forward(x: np.ndarray) -> np.ndarray:
        batch, seq, d = x.shape
        dh = d // heads
        q, k, v = np.split(qkv(x), 3, axis=-1)
        q, k, v = (t.reshape(batch, seq, heads, dh).transpose(0, 2, 1, 3) for t in (q, k, v))
        scores = q @ k.transpose(0, 1, 3, 2) * np.float32(1.0 / math.sqrt(dh))
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        attn = (scores / scores.sum(axis=-1, keepdims=True)) @ v
        h = _layer_norm(x + out(attn.transpose(0, 2, 1, 3).reshape(batch, seq, d)), w["norm1.weight"], w["norm1.bias"])
        f = ff1(h)
        f = 0.5 * f * (1.0 + _erf(f * np.float32(1.0 / math.sqrt(2.0))))
        return _layer_norm(h + ff2(f), w["norm2.weight"], w["norm2.bias"])
    return forward


# --- torch twins ------------------------------------------------------------------------------------------------

def _torch_twin(build: Callable[[Any], Any], weights: dict[str, np.ndarray]) -> Callable[[], Any]:
    def make() -> Any:
        import torch
        module = build(torch.nn)
        module.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in weights.items()})
        return module.eval()
    return make


def _torch_cnn(tnn: Any) -> Any:
    import torch

    class TorchCNN(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.b1 = tnn.Conv2d(3, 32, 3, padding=1), tnn.BatchNorm2d(32)
            self.c2, self.b2 = tnn.Conv2d(32, 64, 3, stride=2, padding=1), tnn.BatchNorm2d(64)
            self.c3, self.b3 = tnn.Conv2d(64, 128, 3, stride=2, padding=1), tnn.BatchNorm2d(128)
            self.fc = tnn.Linear(128, 10)

        def forward(self, x: Any) -> Any:
            x = torch.relu(self.b1(self.c1(x)))
            x = torch.relu(self.b2(self.c2(x)))
            x = torch.relu(self.b3(self.c3(x)))
            return self.fc(x.mean(dim=(2, 3)))
    return TorchCNN()


# --- the cases --------------------------------------------------------------------------------------------------

def mlp(batch: int) -> Case:
    braze.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).eval()
    w = _weights(model)
    twin = _torch_twin(lambda t: t.Sequential(t.Linear(784, 512), t.ReLU(), t.Linear(512, 512), t.ReLU(),
                                              t.Linear(512, 10)), w)
    x = np.random.default_rng(1).standard_normal((batch, 784)).astype(np.float32)
    return Case(f"mlp b{batch}", model, x, numpy_mlp(w, 3), twin)


def cnn(batch: int) -> Case:
    braze.manual_seed(0)
    model = CNN()
    _randomize_batch_norm(model, np.random.default_rng(2))
    model.eval()
    w = _weights(model)
    x = np.random.default_rng(1).standard_normal((batch, 3, 32, 32)).astype(np.float32)
    return Case(f"cnn b{batch}", model, x, numpy_cnn(w), _torch_twin(_torch_cnn, w))


def transformer(batch: int) -> Case:
    braze.manual_seed(0)
    model = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.1, activation="gelu", batch_first=True).eval()
    w = _weights(model)
    twin = _torch_twin(lambda t: t.TransformerEncoderLayer(256, 4, 1024, dropout=0.1, activation="gelu",
                                                           batch_first=True), w)
    x = np.random.default_rng(1).standard_normal((batch, 128, 256)).astype(np.float32)
    return Case(f"transformer b{batch}", model, x, numpy_encoder(w, 4), twin)


def linear4() -> Case:
    braze.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4)).eval()
    w = _weights(model)
    twin = _torch_twin(lambda t: t.Sequential(t.Linear(4, 4)), w)
    x = np.random.default_rng(1).standard_normal((1, 4)).astype(np.float32)
    return Case("linear4 b1 (call overhead)", model, x, numpy_mlp(w, 1), twin)


def cases(quick: bool) -> list[Case]:
    """Every benchmarked model and batch size (the same list with --quick; only the timing is shorter)."""
    return [mlp(1), mlp(64), cnn(1), cnn(64), transformer(1), transformer(8), linear4()]
