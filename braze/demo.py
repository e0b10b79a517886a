"""`braze demo`: the main job end to end on a small CNN with batch norm and a LoRA-adapted head.

1. Train the CNN eagerly on a toy image task (bars: horizontal, vertical or diagonal).
2. The labels change; apply LoRA to the linear head (the base weights freeze) and fine-tune only the adapters.
3. Trace the evaluation model: the IR shows the batch-norm ops, the base head weight, its LoRA factors and the
   lora_merge that composes them.
4. Optimize with the inference pipeline: LoRA merged into one weight, batch norm folded into the convolutions,
   the rest fused into kernels, intermediates planned into one arena.
5. Compile to native code, compare with eager execution and time both.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

import braze
import braze.nn as nn
import braze.nn.functional as F
from braze.ir.passes import optimize

SIZE = 12


def bars(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Noisy RGB images of one bar each: class 0 horizontal, 1 vertical, 2 diagonal."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 0.3, (n, 3, SIZE, SIZE)).astype(np.float32)
    y = rng.integers(0, 3, n)
    for k in range(n):
        at, color = rng.integers(2, SIZE - 2), rng.uniform(0.5, 1.5, 3)[:, None]
        if y[k] == 0:
            x[k, :, at, :] += color
        elif y[k] == 1:
            x[k, :, :, at] += color
        else:
            x[k, :, np.arange(SIZE), np.arange(SIZE)] += color.T
    return x, y.astype(np.int64)


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16)
        self.head = nn.Linear(16, 3)

    def forward(self, x: Any) -> Any:
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        return self.head(x.mean(dim=(2, 3)))


def train(model: nn.Module, x: braze.Tensor, y: braze.Tensor, steps: int, lr: float) -> float:
    """Adam on the parameters that require grad, in training mode; returns the last loss."""
    model.train()
    opt = braze.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    loss = None
    for _ in range(max(steps, 1)):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return float(loss.item())


def accuracy(model: nn.Module, x: braze.Tensor, y: braze.Tensor) -> float:
    with braze.no_grad():
        return float((model.valid()(x).argmax(dim=1) == y).float().mean().item())


def per_call(fn: Callable[[], Any], seconds: float = 0.2) -> float:
    """Median seconds per call over five rounds of about seconds / 5 each."""
    fn()
    start = time.perf_counter()
    fn()
    calls = max(1, int(seconds / 5 / max(time.perf_counter() - start, 1e-7)))
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - start) / calls)
    return float(np.median(rounds))


def _ops(graph: Any) -> str:
    counts: dict[str, int] = {}
    for node in graph.ops():
        counts[node.op] = counts.get(node.op, 0) + 1
    return ", ".join(f"{op} x{n}" if n > 1 else op for op, n in sorted(counts.items()))


def run(seed: int = 0, steps: int = 200) -> None:
    braze.manual_seed(seed)
    x_np, y_np = bars(128, seed)
    x, y = braze.tensor(x_np), braze.tensor(y_np)
    relabel = braze.tensor(np.array([1, 2, 0])[y_np])  # the task changes: every class gets a new label
    model = SmallCNN()
    print(f"SmallCNN: conv3x3(3->8)+BN+ReLU, conv3x3(8->16, stride 2)+BN+ReLU, mean pool, Linear(16->3); "
          f"{model.num_params():,} parameters")

    start = time.perf_counter()
    train(model, x, y, steps, lr=0.01)
    print(f"\n1. trained eagerly for {steps} steps: accuracy {accuracy(model, x, y):.1%}")
    model.apply_lora(nn.Lora(rank=4, alpha=8, targets=["head"]))
    before = accuracy(model, x, relabel)
    train(model, x, relabel, steps // 2, lr=0.05)
    print(f"2. relabelled task: {before:.1%} before, {accuracy(model, x, relabel):.1%} after {steps // 2} steps "
          f"fine-tuning only the head's LoRA adapters ({time.perf_counter() - start:.1f} s in all)")

    model.eval()
    batch = x_np[:64]
    graph = braze.trace(model.valid(), batch)  # the evaluation snapshot: flags off, parameters frozen
    print(f"\n3. traced the evaluation snapshot: {len(list(graph.ops()))} ops ({_ops(graph)})\n")
    print(graph)
    reports: list[Any] = []
    optimized = optimize(graph, "inference", report=reports)
    print(f"4. after the inference pipeline: {len(list(optimized.ops()))} ops ({_ops(optimized)})\n")
    print(reports[0])
    print()
    print(optimized)

    start = time.perf_counter()
    compiled = braze.compile(model, batch)
    print(f"5. compiled in {time.perf_counter() - start:.2f} s: {len(compiled.kernels())} kernels "
          f"({', '.join(k.op for k in compiled.kernels())}), {compiled.threads} thread(s)")
    tensor = braze.tensor(batch)
    with braze.no_grad():
        eager = model(tensor).numpy()
    native = compiled(batch)
    print(f"   compiled vs eager: max |difference| = {np.max(np.abs(native - eager)):.2e} "
          f"(outputs up to {np.max(np.abs(eager)):.2f})")
    with braze.no_grad():
        eager_s = per_call(lambda: model(tensor))
    compiled_s = per_call(lambda: compiled(batch))
    print(f"   a batch of {len(batch)}: eager {eager_s * 1e3:.2f} ms, compiled {compiled_s * 1e3:.3f} ms: "
          f"{eager_s / compiled_s:.0f}x faster")
