"""`braze demo`: train a small classifier eagerly, then look at its forward pass as IR and run it there."""
from __future__ import annotations

import time

import numpy as np

import braze
import braze.nn as nn
import braze.nn.functional as F
from braze import ir


def spirals(n_per_class: int, classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A 2-D toy problem that a linear model cannot solve: interleaved spiral arms."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for c in range(classes):
        t = np.linspace(0.0, 1.0, n_per_class)
        angle = 4.0 * t + c * 2.0 * np.pi / classes + rng.normal(0.0, 0.15, n_per_class)
        xs.append(np.stack([t * np.sin(angle), t * np.cos(angle)], axis=1))
        ys.append(np.full(n_per_class, c))
    return np.concatenate(xs).astype(np.float32), np.concatenate(ys).astype(np.int64)


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(2, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 3))


def forward_graph(model: nn.Module, batch: int) -> ir.Graph:
    """The model's forward pass written as an IR graph by hand (tracing builds this automatically later)."""
    b = ir.GraphBuilder("spiral_mlp")
    h = b.input("x", ir.TensorType((batch, 2), ir.float32))
    weights = {}
    linears = [(name, m) for name, m in model.named_children() if isinstance(m, nn.Linear)]
    for k, (name, layer) in enumerate(linears):
        w_value, b_value = layer.weight.val(), layer.bias.val()
        w = b.param(f"{name}.weight", ir.TensorType(w_value.shape, ir.float32), id=int(layer.weight.id))
        bias = b.param(f"{name}.bias", ir.TensorType(b_value.shape, ir.float32), id=int(layer.bias.id))
        weights[f"{name}.weight"], weights[f"{name}.bias"] = w_value.detach().numpy(), b_value.detach().numpy()
        h = b.add(b.matmul(h, b.transpose(w, perm=(1, 0))), bias)
        if k < len(linears) - 1:
            h = b.gelu(h, approximate="none")
    return b.finish([h], weights=weights)


def run(seed: int = 0, steps: int = 200) -> None:
    braze.manual_seed(seed)
    x_np, y_np = spirals(100, 3, seed)
    x, y = braze.tensor(x_np), braze.tensor(y_np)
    model = build_model()
    print(model)
    print(f"{model.num_params():,} parameters\n")

    opt = braze.optim.Adam(model.parameters(), lr=0.01)
    start = time.perf_counter()
    for step in range(steps + 1):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if step % max(steps // 5, 1) == 0:
            accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
            print(f"step {step:4d}  loss {loss.item():.4f}  accuracy {accuracy:.1%}")
    print(f"trained eagerly in {time.perf_counter() - start:.2f} s\n")

    graph = forward_graph(model, len(x_np))
    print(graph)
    assert ir.parse(str(graph)) == graph, "the text form reads back to the same graph"
    with braze.no_grad():
        eager = model(x).numpy()
    (interpreted,) = ir.interpret(graph, [x_np])
    print(f"IR interpreter vs eager: max |difference| = {np.max(np.abs(interpreted - eager)):.2e}")
