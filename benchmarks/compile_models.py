"""Two larger models for the compile-time benchmark, written once against the torch.nn API so the same code builds
the braze module and its torch twin:

- resnet18: torchvision's ResNet-18 shapes (7x7/2 stem, max pool, BasicBlock stages of 64-128-256-512 channels with
  two blocks each, global average pool, 1000 classes) on 3x64x64 images;
- gpt2: a GPT-2-style decoder, 2 pre-norm layers, d=128, 4 heads, a 64-token causal window, vocabulary 1024, tanh
  GELU, tied input and output embeddings, on 64 token ids.

Each factory returns a benchmarks.models.Case (its numpy forward is braze's own interpreter: these models are
benchmarked for compile time, not checked against a hand-written reference).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

import braze
import braze.nn as bnn

from .models import Case, _torch_twin, _weights

VOCAB, CONTEXT, WIDTH, HEADS, LAYERS = 1024, 64, 128, 4, 2


def _resnet18(nn: Any) -> Any:
    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU()
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)) \
                if stride != 1 or cin != cout else nn.Identity()

        def forward(self, x: Any) -> Any:
            out = self.relu(self.bn1(self.conv1(x)))
            return self.relu(self.bn2(self.conv2(out)) + self.downsample(x))

    class ResNet18(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            blocks, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                blocks += [Block(cin, cout, stride), Block(cout, cout, 1)]
                cin = cout
            self.layers = nn.Sequential(*blocks)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(512, 1000)

        def forward(self, x: Any) -> Any:
            return self.fc(self.pool(self.layers(self.stem(x))).flatten(1))

    return ResNet18()


def _gpt2(nn: Any) -> Any:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
            self.c_attn, self.c_proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
            self.c_fc, self.mlp_proj = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)
            self.gelu = nn.GELU(approximate="tanh")
            self.register_buffer("bias", _tril_like(nn))

        def forward(self, x: Any) -> Any:
            b, t, c = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(WIDTH, dim=2)
            q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // HEADS))
            att = att.masked_fill(self.bias[:t, :t] == 0, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
            x = x + self.c_proj(y)
            return x + self.mlp_proj(self.gelu(self.c_fc(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(VOCAB, WIDTH), nn.Embedding(CONTEXT, WIDTH)
            self.h = nn.ModuleList([Block() for _ in range(LAYERS)])
            self.ln_f = nn.LayerNorm(WIDTH)
            self.lm_head = nn.Linear(WIDTH, VOCAB, bias=False)
            self.lm_head.weight = self.wte.weight

        def forward(self, idx: Any) -> Any:
            x = self.wte(idx) + self.wpe.weight[:idx.shape[1]]
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    return GPT()


def _tril_like(nn: Any) -> Any:
    """The causal mask as a tensor of the library `nn` belongs to (torch.nn or braze.nn)."""
    library = __import__(nn.__name__.split(".")[0])
    return library.tril(library.ones(CONTEXT, CONTEXT))


def _interpreted(model: bnn.Module) -> Any:
    def forward(x: np.ndarray) -> np.ndarray:
        with braze.no_grad():
            return np.asarray(model(braze.tensor(x)))
    return forward


def resnet18(batch: int) -> Case:
    braze.manual_seed(0)
    model = _resnet18(bnn).eval()
    x = np.random.default_rng(1).standard_normal((batch, 3, 64, 64)).astype(np.float32)
    return Case(f"resnet18 b{batch}", model, x, _interpreted(model), _torch_twin(_resnet18, _weights(model)))


def gpt2(batch: int) -> Case:
    braze.manual_seed(0)
    model = _gpt2(bnn).eval()
    x = np.random.default_rng(1).integers(0, VOCAB, (batch, CONTEXT)).astype(np.int64)
    return Case(f"gpt2 b{batch}", model, x, _interpreted(model), _torch_twin(_gpt2, _weights(model)))
