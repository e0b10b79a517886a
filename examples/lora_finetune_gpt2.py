"""Fine-tune a small GPT-2-style language model with LoRA through one compiled training step, then ship it.

1. A GPT-2-style decoder (token and position embeddings, pre-LN blocks of causal self-attention and a tanh-GELU
   MLP, a linear head) stands in for a pretrained model. `apply_lora` freezes every base weight and adapts the
   attention and MLP linears (c_attn, c_proj, c_fc).
2. `braze.compile_train_step` compiles forward, loss, backward (gradients of the adapter factors only) and
   AdamW's update as one native call; each call trains on a fresh batch of a synthetic next-token task
   (counting up from a random token by a random stride, so the model must read the context to find the stride).
3. `step.sync(model)` writes the trained adapters and the optimizer state back into the model and the optimizer.
   The base weights are bit-for-bit what they were.
4. `model.valid().materialize()` folds the adapters into dense weights (the reparameterization fold): the merged
   model gives the adapted model's outputs, with no adapters left.
5. `braze.export` writes the merged inference graph to one .braze file; a fresh Python process, which has none of
   this file's code, loads it with `braze.load` and gives the in-process compiled model's outputs bit for bit.

Run: python examples/lora_finetune_gpt2.py   (about fifteen seconds on two cores, mostly compiling; a few with a warm
compile cache)
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import braze
import braze.nn as nn
import braze.nn.functional as F


@dataclass
class GPTConfig:
    vocab_size: int = 32
    block_size: int = 16
    n_layer: int = 1
    n_head: int = 2
    n_embd: int = 32
    dropout: float = 0.1


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head

    def forward(self, x: braze.Tensor) -> braze.Tensor:
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).reshape(B, T, C)))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: braze.Tensor) -> braze.Tensor:
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(config.n_embd), CausalSelfAttention(config)
        self.ln_2, self.mlp = nn.LayerNorm(config.n_embd), MLP(config)

    def forward(self, x: braze.Tensor) -> braze.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Token ids (B, T) -> next-token logits (B, T, vocab_size)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def forward(self, idx: braze.Tensor) -> braze.Tensor:
        x = self.drop(self.wte(idx) + self.wpe(braze.arange(idx.shape[1])))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def next_token_loss(logits: braze.Tensor, targets: braze.Tensor) -> braze.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def counting_batch(rng: np.random.Generator, config: GPTConfig, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """Sequences start + stride * t (mod vocab) with a random start and stride in {1, 2, 3}: inputs and the
    next tokens."""
    start = rng.integers(0, config.vocab_size, (batch, 1))
    stride = rng.integers(1, 4, (batch, 1))
    tokens = (start + stride * np.arange(config.block_size + 1)) % config.vocab_size
    return tokens[:, :-1], tokens[:, 1:]


def run(seed: int = 0, steps: int = 60, batch: int = 16) -> dict[str, float]:
    """The whole walk-through; returns the numbers it prints."""
    braze.manual_seed(seed)
    rng = np.random.default_rng(seed)
    config = GPTConfig()
    model = GPT(config).train()
    model.apply_lora(nn.Lora(rank=8, alpha=16, targets=("c_attn", "c_proj", "c_fc")))
    base = {path: np.array(p.base(), copy=True) for path, p in model.named_parameters() if p.adapter is not None}
    trainable = [p for p in model.parameters() if p.requires_grad]
    print(f"1. GPT-2-style model: {model.num_params():,} parameters, {sum(p.numel() for p in trainable):,} of "
          f"them in the LoRA adapters of {len(base)} linears")

    start = time.perf_counter()
    optimizer = braze.optim.AdamW(trainable, lr=2e-2, weight_decay=0.01)
    step = braze.compile_train_step(model, next_token_loss, optimizer, *counting_batch(rng, config, batch))
    compiled_at = time.perf_counter()
    losses = [float(step(*counting_batch(rng, config, batch))) for _ in range(steps)]
    trained_at = time.perf_counter()
    print(f"2. compiled the training step in {compiled_at - start:.1f} s; {steps} AdamW steps in "
          f"{trained_at - compiled_at:.2f} s: loss {losses[0]:.3f} -> {losses[-1]:.3f}")

    step.sync(model)
    unchanged = all(np.array_equal(np.asarray(p.base()), base[path])
                    for path, p in model.named_parameters() if path in base)
    x, y = counting_batch(rng, config, 8)
    with braze.no_grad():
        adapted = np.asarray(model.valid()(braze.tensor(x)))
    accuracy = float((adapted.argmax(-1)[:, 2:] == y[:, 2:]).mean())  # from the third token on the stride is known
    print(f"3. synced: base weights bit-for-bit unchanged: {unchanged}; next-token accuracy {accuracy:.1%} "
          f"(from the third token)")

    merged = model.valid().materialize()
    with braze.no_grad():
        difference = float(np.max(np.abs(np.asarray(merged(braze.tensor(x))) - adapted)))
    left = sum(p.adapter is not None for p in merged.parameters())
    print(f"4. merged model: {left} adapters left, max |merged - adapted| = {difference:.2e}")

    loaded, compiled = export_and_load_elsewhere(merged, x)
    artifact_same = bool(np.array_equal(loaded, compiled))
    print(f"5. in a fresh process the file's logits are the compiled model's bit for bit: {artifact_same}; "
          f"max |loaded - eager| = {np.max(np.abs(loaded - adapted)):.2e}")
    print(f"done in {time.perf_counter() - start:.1f} s")
    return {"first_loss": losses[0], "last_loss": losses[-1], "accuracy": accuracy, "base_unchanged": float(unchanged),
            "merge_difference": difference, "adapters_left": float(left), "artifact_same": float(artifact_same),
            "artifact_difference": float(np.max(np.abs(loaded - adapted)))}


RUN_THE_FILE = """
import sys
import numpy as np
import braze
np.save(sys.argv[3], braze.load(sys.argv[1], threads=1)(np.load(sys.argv[2])))
"""


def export_and_load_elsewhere(model: nn.Module, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Export the model and run the file in a new Python process: its outputs, and the compiled model's here."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "gpt2_lora.braze"
        manifest = braze.export(model, path, x)
        np.save(Path(folder) / "tokens.npy", x)
        subprocess.run([sys.executable, "-c", RUN_THE_FILE, str(path), "tokens.npy", "logits.npy"], cwd=folder,
                       check=True)
        loaded = np.load(Path(folder) / "logits.npy")
        print(f"   exported {path.stat().st_size:,} bytes, {manifest['parameters']['count']:,} parameters")
    return loaded, braze.compile(model, x, threads=1)(x)


if __name__ == "__main__":
    run()
