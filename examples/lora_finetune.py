"""Fine-tune a small classifier with LoRA, then merge the adapters into plain weights.

1. Train an MLP on interleaved spirals.
2. The task shifts: the spirals rotate. The trained model loses accuracy on the new data.
3. apply_lora freezes every base parameter and attaches trainable low-rank adapters to the Linear weights;
   only the adapters are optimized on the shifted task.
4. The base weights are bit-for-bit what they were; the adapters alone recover the accuracy.
5. The adapters are saved on their own (a record of the adapter group, as PEFT saves an adapter file) and
   loaded into a copy of the pretrained model given the same LoRA configuration: it computes the same outputs.
6. `model.valid().materialize()` folds the adapters into dense weights: the merged model gives the adapted
   model's outputs, with no adapters left.
7. `braze.export` writes the merged inference graph as one .braze file (the adapters merged by the inference
   pipeline); a fresh Python process, which has none of this file's code, loads it with `braze.load` and gives
   the compiled model's outputs bit for bit.

Run: python examples/lora_finetune.py   (a few seconds on two cores)
"""
from __future__ import annotations

import copy
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import braze
import braze.nn as nn
import braze.nn.functional as F


def spirals(n_per_class: int, classes: int, seed: int, rotation: float = 0.0) -> tuple[braze.Tensor, braze.Tensor]:
    """Interleaved spiral arms, rotated by `rotation` radians."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for c in range(classes):
        t = np.linspace(0.05, 1.0, n_per_class)
        angle = 4.0 * t + c * 2.0 * np.pi / classes + rotation + rng.normal(0.0, 0.1, n_per_class)
        xs.append(np.stack([t * np.sin(angle), t * np.cos(angle)], axis=1))
        ys.append(np.full(n_per_class, c))
    return braze.tensor(np.concatenate(xs).astype(np.float32)), braze.tensor(np.concatenate(ys))


def accuracy(model: nn.Module, x: braze.Tensor, y: braze.Tensor) -> float:
    with braze.no_grad():
        return float((model(x).argmax(dim=1) == y).float().mean().item())


def train(model: nn.Module, x: braze.Tensor, y: braze.Tensor, steps: int, lr: float) -> float:
    """Adam on the parameters that require grad; returns the last loss."""
    opt = braze.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    loss = None
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return float(loss.item())


def run(seed: int = 0, steps: int = 300) -> dict[str, float]:
    """The whole walk-through; returns the numbers it prints."""
    braze.manual_seed(seed)
    x, y = spirals(120, 3, seed)
    x_new, y_new = spirals(120, 3, seed + 1, rotation=1.2)
    model = nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3))
    start = time.perf_counter()

    train(model, x, y, steps, lr=0.01)
    base_accuracy, shifted_before = accuracy(model, x, y), accuracy(model, x_new, y_new)
    print(f"base model: accuracy {base_accuracy:.1%} on its task, {shifted_before:.1%} on the rotated task")

    pretrained = copy.deepcopy(model)
    lora = nn.Lora(rank=4, alpha=8)
    model.apply_lora(lora)
    base = {path: np.array(p.base(), copy=True) for path, p in model.named_parameters() if p.adapter is not None}
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"LoRA: {trainable:,} trainable adapter parameters of {model.num_params():,}")
    train(model, x_new, y_new, steps, lr=0.01)
    shifted_after = accuracy(model, x_new, y_new)
    print(f"after fine-tuning the adapters: {shifted_after:.1%} on the rotated task")
    unchanged = all(np.array_equal(np.asarray(p.base()), base[path])
                    for path, p in model.named_parameters() if path in base)
    print(f"base weights bit-for-bit unchanged: {unchanged}")

    adapters = model.into_record_group(nn.ParamGroup.paths("*.lora_a", "*.lora_b"))
    reloaded = pretrained.apply_lora(lora).load_record(adapters)
    with braze.no_grad():
        same = bool(np.array_equal(np.asarray(reloaded(x_new)), np.asarray(model(x_new))))
    print(f"adapter record: {len(adapters)} tensors; pretrained model + adapter record gives the same outputs: {same}")

    merged = model.valid().materialize()
    with braze.no_grad():
        adapted_out, merged_out = np.asarray(model.valid()(x_new)), np.asarray(merged(x_new))
    difference = float(np.max(np.abs(adapted_out - merged_out)))
    left = sum(p.adapter is not None for p in merged.parameters())
    print(f"merged model: {left} adapters left, max |merged - adapted| = {difference:.2e}")
    artifact_same = export_and_load_elsewhere(model, np.asarray(x_new))
    print(f"done in {time.perf_counter() - start:.1f} s")
    return {"base_accuracy": base_accuracy, "shifted_before": shifted_before, "shifted_after": shifted_after,
            "base_unchanged": float(unchanged), "merge_difference": difference, "adapters_left": float(left),
            "adapter_tensors": float(len(adapters)), "reloaded_same": float(same),
            "artifact_same": float(artifact_same)}


LOAD_IN_A_FRESH_PROCESS = """
import sys
import numpy as np
import braze
compiled = braze.load(sys.argv[1], threads=1)
np.save(sys.argv[3], compiled(np.load(sys.argv[2])))
"""


def export_and_load_elsewhere(model: nn.Module, x: np.ndarray) -> bool:
    """Export the merged model, run the file in a new Python process; True if it matches the compiled model."""
    compiled = braze.compile(model.valid(), x, threads=1)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "spirals.braze"
        manifest = braze.export(model, path, x)
        np.save(Path(folder) / "x.npy", x)
        subprocess.run([sys.executable, "-c", LOAD_IN_A_FRESH_PROCESS, str(path), "x.npy", "y.npy"], cwd=folder,
                       check=True)
        loaded = np.load(Path(folder) / "y.npy")
        size = path.stat().st_size
    fold = next(p for p in manifest["passes"] if p["name"] == "fold_reparameterizations")
    same = bool(np.array_equal(loaded, compiled(x)))
    print(f"artifact: {size:,} bytes, {manifest['parameters']['count']:,} parameters, adapters merged into "
          f"{', '.join(sorted(fold['details']['params']))}; in a fresh process its outputs are the compiled "
          f"model's bit for bit: {same}")
    return same


if __name__ == "__main__":
    run()
