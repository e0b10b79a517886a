"""Training-step time: a compiled braze step (braze.compile_train_step) beside an eager braze step and torch's
eager step, for the benchmark MLP b64, CNN b64 and transformer layer b8 of benchmarks/models.py in training mode
(batch norm on batch statistics, the transformer's dropout on), and the compiled step's memory (TrainStep.memory).
The transformer layer is also fine-tuned with QLoRA (NF4 bases, rank-8 adapters on every linear weight), its
compiled step reading the bases packed (quantized_weights="packed", the default) and dense ("dense": each base
dequantized every step); torch has no NF4 weights, so those rows have no torch column. Last, the GPT-2-style model
of benchmarks/compile_models.py (2 layers, d=128, 64 tokens, vocabulary 1024) is fine-tuned with LoRA (rank 8 on
the attention projections c_attn and c_proj, AdamW) on next-token cross entropy; its torch twin gets the same
adapters from peft when it is installed, else from a plain torch LoRA wrapper (noted in the table).

Run from the repository root:

    python -m benchmarks.train_step [--optimizer sgd|adamw] [--rounds 5] [--budget 1.0] [--no-torch-compile]
                                    [--json out.json]

A step is forward, loss (cross entropy on random labels; mean squared error to a random target for the
transformer), backward and the optimizer's update (SGD with momentum 0.9, or AdamW). The systems run interleaved
in one process (benchmarks.run.interleaved: the median of --rounds rounds of about --budget seconds each), torch
with as many threads as the compiled step uses, so the table's ratios come from one run on one machine state.
"torch.compile" is torch.compile of the torch twin's whole step function (forward, loss, backward,
optimizer.step); its first call, which compiles, is excluded and its time printed below the table.
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Any, Callable

import numpy as np

from benchmarks import compile_models, models
from benchmarks.run import interleaved

# (model, batch, how a QLoRA fine-tune's compiled step reads the NF4 bases; None: the plain model)
CASES = (("mlp", 64, None), ("cnn", 64, None), ("transformer", 8, None), ("transformer", 8, "packed"),
         ("transformer", 8, "dense"), ("gpt2", 8, "lora"))
QLORA_RANK = 8
LORA_TARGETS = ("c_attn", "c_proj")  # GPT-2's attention projections


def _target(name: str, case: models.Case) -> np.ndarray:
    rng = np.random.default_rng(7)
    if name == "transformer":
        return rng.standard_normal(case.x.shape).astype(np.float32)
    if name == "gpt2":
        return rng.integers(0, compile_models.VOCAB, case.x.shape)
    return rng.integers(0, 10, case.x.shape[0])


def _loss(name: str, functional: Any) -> Callable[[Any, Any], Any]:
    """The case's loss in the library `functional` belongs to (braze.nn.functional or torch.nn.functional)."""
    if name == "transformer":
        return functional.mse_loss
    if name == "gpt2":
        return lambda logits, y: functional.cross_entropy(logits.reshape(-1, compile_models.VOCAB), y.reshape(-1))
    return functional.cross_entropy


def _case(name: str, batch: int) -> models.Case:
    return compile_models.gpt2(batch) if name == "gpt2" else getattr(models, name)(batch)


def _braze_optimizer(kind: str, params: Any) -> Any:
    import braze
    return braze.optim.SGD(params, lr=0.01, momentum=0.9) if kind == "sgd" else braze.optim.AdamW(params, lr=1e-3)


def _training_model(case: models.Case, adapters: str | None) -> Any:
    """The case's model in training mode, with the adapters the case fine-tunes ("lora", or QLoRA otherwise)."""
    import braze.nn as nn
    model = case.model.train()
    if adapters == "lora":
        model.apply_lora(nn.Lora(QLORA_RANK, 2 * QLORA_RANK, targets=LORA_TARGETS))
    elif adapters is not None:
        model.apply_qlora(nn.QLora(QLORA_RANK, 2 * QLORA_RANK))
    return model


def _trained(model: Any) -> list[Any]:
    """The parameters an optimizer steps: all, or with adapters only theirs (the bases are frozen)."""
    return [p for p in model.parameters() if p.requires_grad]


def _systems(name: str, batch: int, optimizer: str, adapters: str | None,
             torch_compile: bool) -> tuple[dict[str, Callable[[], Any]], dict[str, Any]]:
    """One training step of each system for a case, and notes (compile time, threads, the step's memory)."""
    import braze
    import braze.nn.functional as F
    optimizer = "adamw" if adapters == "lora" else optimizer
    loss_fn = _loss(name, F)
    compiled_case, eager_case = _case(name, batch), _case(name, batch)
    x, y = compiled_case.x, _target(name, compiled_case)
    model = _training_model(compiled_case, adapters)
    start = time.perf_counter()
    step = braze.compile_train_step(model, loss_fn, _braze_optimizer(optimizer, _trained(model)), x, y,
                                    quantized_weights="packed" if adapters in (None, "lora") else adapters)
    notes: dict[str, Any] = {"compile_s": round(time.perf_counter() - start, 3), "threads": step.executable.threads,
                             "memory": step.memory()}
    eager = _training_model(eager_case, adapters)
    eager_opt = _braze_optimizer(optimizer, _trained(eager))
    systems: dict[str, Callable[[], Any]] = {
        "braze compiled": lambda: step(x, y),
        "braze eager": _loop_step(eager, eager_opt, loss_fn, braze.tensor(x), braze.tensor(y))}
    if adapters in (None, "lora"):
        _add_torch(systems, notes, compiled_case, name, optimizer, adapters, (x, y), step.executable.threads,
                   torch_compile)
    return systems, notes


def _add_torch(systems: dict[str, Callable[[], Any]], notes: dict[str, Any], case: models.Case, name: str,
               optimizer: str, adapters: str | None, batch: tuple[np.ndarray, np.ndarray], threads: int,
               torch_compile: bool) -> None:
    """torch eager (and torch.compile of the same step, on a second twin) for a case, when torch is installed."""
    try:
        import torch
    except ImportError:
        notes["torch eager"] = "not installed"
        return
    torch.set_num_threads(threads)
    x, y = (torch.from_numpy(a) for a in batch)
    loss_fn = _loss(name, torch.nn.functional)

    def twin_step() -> Callable[[], Any]:
        module = _torch_adapted(case.torch_model().train(), adapters, notes)
        params = [p for p in module.parameters() if p.requires_grad]
        opt = (torch.optim.SGD(params, lr=0.01, momentum=0.9) if optimizer == "sgd"
               else torch.optim.AdamW(params, lr=1e-3))
        return _loop_step(module, opt, loss_fn, x, y)
    systems["torch eager"] = twin_step()
    if torch_compile:
        compiled = torch.compile(twin_step())
        start = time.perf_counter()
        compiled()
        notes["torch.compile first call s"] = round(time.perf_counter() - start, 3)
        systems["torch.compile"] = compiled


def _torch_adapted(module: Any, adapters: str | None, notes: dict[str, Any]) -> Any:
    """The torch twin with LoRA on LORA_TARGETS (rank and alpha as braze's): peft's when it is installed, else
    a plain wrapper of each targeted Linear (frozen base + trainable A, B; B zero, as peft initializes it)."""
    if adapters != "lora":
        return module
    try:
        import peft
    except ImportError:
        notes["torch LoRA"] = "plain torch twin (peft not installed)"
        return _plain_lora(module)
    notes["torch LoRA"] = f"peft {peft.__version__}"
    config = peft.LoraConfig(r=QLORA_RANK, lora_alpha=2 * QLORA_RANK, target_modules=list(LORA_TARGETS))
    return peft.get_peft_model(module, config)


def _plain_lora(module: Any) -> Any:
    import torch

    class LoraLinear(torch.nn.Module):
        def __init__(self, base: Any) -> None:
            super().__init__()
            self.base, self.scale = base, 2.0
            self.lora_A = torch.nn.Parameter(torch.randn(QLORA_RANK, base.in_features) * 0.01)
            self.lora_B = torch.nn.Parameter(torch.zeros(base.out_features, QLORA_RANK))

        def forward(self, x: Any) -> Any:
            return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scale

    for p in module.parameters():
        p.requires_grad_(False)
    for parent in list(module.modules()):
        for child_name, child in list(parent.named_children()):
            if child_name in LORA_TARGETS and isinstance(child, torch.nn.Linear):
                setattr(parent, child_name, LoraLinear(child))
    return module


def _loop_step(model: Any, opt: Any, loss_fn: Callable[[Any, Any], Any], x: Any, y: Any) -> Callable[[], Any]:
    """One step of the training loop torch users write (braze eager runs the same code)."""
    def step() -> Any:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def _label(name: str, batch: int, adapters: str | None) -> str:
    if adapters == "lora":
        return f"{name} b{batch} LoRA (adamw)"
    return f"{name} b{batch}" + (f" QLoRA ({adapters})" if adapters else "")


def measure(optimizer: str, rounds: int, budget: float, cases: tuple = CASES,
            torch_compile: bool = True) -> list[dict[str, Any]]:
    results = []
    for name, batch, adapters in cases:
        systems, notes = _systems(name, batch, optimizer, adapters, torch_compile)
        seconds = interleaved(systems, rounds, budget, settle=0.05)
        results.append({"case": _label(name, batch, adapters), "seconds": seconds, "notes": notes})
    return results


SYSTEMS = ("braze compiled", "braze eager", "torch eager", "torch.compile")


def markdown(results: list[dict[str, Any]], optimizer: str) -> str:
    lines = [f"Training step ({optimizer} unless the case says otherwise), ms per step; \"vs X\" is X's time over "
             f"the compiled step's (above 1: compiled braze is faster)", "",
             "| case | " + " | ".join(SYSTEMS) + " | vs torch eager | vs torch.compile | vs eager braze | "
             "step memory: peak (arena) MB |", "|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for r in results:
        s, memory, compiled = r["seconds"], r["notes"]["memory"], r["seconds"]["braze compiled"]
        cells = [f"{s[k] * 1e3:.2f}" if k in s else "n/a" for k in SYSTEMS]
        ratios = [f"{s[k] / compiled:.2f}x" if k in s else "n/a" for k in ("torch eager", "torch.compile",
                                                                          "braze eager")]
        lines.append(f"| {r['case']} | " + " | ".join(cells + ratios) + f" | {memory['peak'] / 1e6:.1f} "
                     f"({memory['arena'] / 1e6:.1f}) |")
        extra = {k: v for k, v in r["notes"].items() if k not in ("memory", "threads")}
        notes.append(f"- {r['case']}: threads {r['notes']['threads']}, " + ", ".join(f"{k} {v}" for k, v in
                                                                                    extra.items()))
    return "\n".join(lines + [""] + notes) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.train_step", description=__doc__.split("\n\n")[0])
    parser.add_argument("--optimizer", default="sgd", choices=["sgd", "adamw"], help="the update (default sgd)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per case (default 5)")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per system per round (default 1.0)")
    parser.add_argument("--no-torch-compile", action="store_true", help="leave out the torch.compile column")
    parser.add_argument("--json", metavar="OUT", help="also write the raw results as JSON")
    args = parser.parse_args(argv)
    results = measure(args.optimizer, args.rounds, args.budget, torch_compile=not args.no_torch_compile)
    print(markdown(results, args.optimizer))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
