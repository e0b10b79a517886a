"""Load a LoRA adapter trained with PEFT onto a braze model, merge it into plain weights and export the result.

1. One model definition serves both frameworks: `build(nn)` takes torch.nn or braze.nn, so module paths match.
2. torch + PEFT fine-tune a LoRA adapter on the braze model's weights and `save_pretrained` it: a directory with
   adapter_config.json and adapter_model.safetensors, the format nearly every published LoRA comes in.
3. `model.load_peft_adapter(directory)` attaches braze LoRA adapters holding those factors: braze's outputs equal
   torch + PEFT's.
4. `model.valid().materialize()` merges the adapters into dense weights; braze.export writes the merged inference
   graph as one .braze file, and braze.load runs it (no model code needed) with the adapted model's outputs.
5. `save_peft_adapter` writes braze's adapters back in PEFT's layout, and PEFT loads them.

Run: python examples/peft_adapter.py   (needs torch and peft: pip install "torch==2.13.0" peft; seconds)
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import peft
import torch

import braze
import braze.nn as bnn


def build(nn: Any) -> Any:
    """A small classifier of 2-d points, written once against the torch.nn API braze shares."""
    return nn.Sequential(nn.Linear(2, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 3))


def spirals(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.tile(np.linspace(0.05, 1.0, n), 3)
    label = np.repeat(np.arange(3), n)
    angle = 4.0 * t + label * 2.0 * np.pi / 3 + rng.normal(0.0, 0.1, t.size)
    return np.stack([t * np.sin(angle), t * np.cos(angle)], axis=1).astype(np.float32), label


def fine_tune_with_peft(base_weights: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray, directory: Path) -> Any:
    """Train a PEFT LoRA adapter (rank 4, alpha 8, on the two hidden layers) and save it; returns the PEFT model."""
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a model this small runs fastest on one thread
    model = build(torch.nn)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in base_weights.items()})
    adapted = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["2", "4"]))
    opt = torch.optim.Adam([p for p in adapted.parameters() if p.requires_grad], lr=1e-2)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(150):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(adapted(tx), ty).backward()
        opt.step()
    adapted.save_pretrained(directory)
    return adapted.eval()


def accuracy(logits: np.ndarray, y: np.ndarray) -> float:
    return float((logits.argmax(axis=1) == y).mean())


def close(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal up to float32 rounding of differently ordered sums: 1e-5 of the largest logit."""
    return float(np.abs(got - want).max()) <= 1e-5 * max(1.0, float(np.abs(want).max()))


def main() -> None:
    x, y = spirals(100, seed=0)
    braze.manual_seed(0)
    model = build(bnn).eval()
    weights = {k: np.array(v) for k, v in model.state_dict().items()}
    with tempfile.TemporaryDirectory() as tmp:
        adapter = Path(tmp) / "spiral-lora"
        theirs = fine_tune_with_peft(weights, x, y, adapter)
        print(f"1-2. PEFT saved {sorted(p.name for p in adapter.iterdir())}")
        with torch.no_grad():
            expected = theirs(torch.from_numpy(x)).numpy()

        with braze.no_grad():
            base_logits = model(braze.tensor(x)).numpy()
        model.load_peft_adapter(adapter)
        with braze.no_grad():
            ours = model(braze.tensor(x)).numpy()
        print(f"3. accuracy: base {accuracy(base_logits, y):.2f}, with the PEFT adapter {accuracy(ours, y):.2f}; "
              f"max |braze - torch+PEFT| = {np.abs(ours - expected).max():.2e}")
        assert close(ours, expected)

        merged = model.valid().materialize()
        assert not any(p.adapter is not None for p in merged.parameters())
        manifest = braze.export(model, Path(tmp) / "tuned.braze", x)  # merges the adapters itself
        loaded = braze.load(Path(tmp) / "tuned.braze")
        print(f"4. merged into {sum(1 for _ in merged.parameters())} plain parameters; exported "
              f"{manifest['parameters']['count']} values; max |loaded - adapted| = {np.abs(loaded(x) - ours).max():.2e}")
        assert close(loaded(x), ours)

        model.save_peft_adapter(Path(tmp) / "from-braze")
        fresh = build(torch.nn)
        fresh.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
        reloaded = peft.PeftModel.from_pretrained(fresh, Path(tmp) / "from-braze").eval()
        with torch.no_grad():
            again = reloaded(torch.from_numpy(x)).numpy()
        print(f"5. PEFT loads braze's adapter: max |PEFT - braze| = {np.abs(again - ours).max():.2e}")
        assert close(again, ours)


if __name__ == "__main__":
    main()
