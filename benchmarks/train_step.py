"""Training-step time: a compiled braze step (braze.compile_train_step) beside an eager braze step and torch's
eager step, for the benchmark MLP b64, CNN b64 and transformer layer b8 of benchmarks/models.py in training mode
(batch norm on batch statistics, the transformer's dropout on), and the compiled step's memory (TrainStep.memory).
The transformer layer is also fine-tuned with QLoRA (NF4 bases, rank-8 adapters on every linear weight), its
compiled step reading the bases packed (quantized_weights="packed", the default) and dense ("dense": each base
dequantized every step); torch has no NF4 weights, so those rows have no torch column.

Run from the repository root:

    python -m benchmarks.train_step [--optimizer sgd|adamw] [--rounds 5] [--budget 1.0] [--json out.json]

A step is forward, loss (cross entropy on random labels; mean squared error to a random target for the
transformer), backward and the optimizer's update (SGD with momentum 0.9, or AdamW). The systems run interleaved
in one process (benchmarks.run.interleaved: the median of --rounds rounds of about --budget seconds each), torch
with as many threads as the compiled step uses, so the table's ratios come from one run on one machine state.
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Any, Callable

import numpy as np

from benchmarks import models
from benchmarks.run import interleaved

# (model, batch, how a QLoRA fine-tune's compiled step reads the NF4 bases; None: the plain model)
CASES = (("mlp", 64, None), ("cnn", 64, None), ("transformer", 8, None), ("transformer", 8, "packed"),
         ("transformer", 8, "dense"))
QLORA_RANK = 8


def _target(name: str, case: models.Case) -> np.ndarray:
    rng = np.random.default_rng(7)
    if name == "transformer":
        return rng.standard_normal(case.x.shape).astype(np.float32)
    return rng.integers(0, 10, case.x.shape[0])


def _braze_optimizer(kind: str, params: Any) -> Any:
    import braze
    return braze.optim.SGD(params, lr=0.01, momentum=0.9) if kind == "sgd" else braze.optim.AdamW(params, lr=1e-3)


def _training_model(case: models.Case, qlora: str | None) -> Any:
    """The case's model in training mode, with QLoRA adapters when the case fine-tunes with QLoRA."""
    import braze.nn as nn
    model = case.model.train()
    if qlora is not None:
        model.apply_qlora(nn.QLora(QLORA_RANK, 2 * QLORA_RANK))
    return model


def _systems(name: str, batch: int, optimizer: str,
             qlora: str | None) -> tuple[dict[str, Callable[[], Any]], dict[str, Any]]:
    """One training step of each system for a case, and notes (compile time, threads, the step's memory)."""
    import braze
    import braze.nn.functional as F
    loss_fn = F.mse_loss if name == "transformer" else F.cross_entropy
    compiled_case, eager_case = getattr(models, name)(batch), getattr(models, name)(batch)
    x, y = compiled_case.x, _target(name, compiled_case)
    model = _training_model(compiled_case, qlora)
    start = time.perf_counter()
    step = braze.compile_train_step(model, loss_fn, _braze_optimizer(optimizer, model.parameters()), x, y,
                                    quantized_weights=qlora or "packed")
    notes: dict[str, Any] = {"compile_s": round(time.perf_counter() - start, 3), "threads": step.executable.threads,
                             "memory": step.memory()}
    eager = _training_model(eager_case, qlora)
    eager_opt = _braze_optimizer(optimizer, eager.parameters())
    systems: dict[str, Callable[[], Any]] = {
        "braze compiled": lambda: step(x, y),
        "braze eager": _loop_step(eager, eager_opt, loss_fn, braze.tensor(x), braze.tensor(y))}
    if qlora is None:
        _add_torch(systems, notes, compiled_case, name, optimizer, x, y, step.executable.threads)
    return systems, notes


def _add_torch(systems: dict[str, Callable[[], Any]], notes: dict[str, Any], case: models.Case, name: str,
               optimizer: str, x: np.ndarray, y: np.ndarray, threads: int) -> None:
    try:
        import torch
    except ImportError:
        notes["torch eager"] = "not installed"
        return
    torch.set_num_threads(threads)
    module = case.torch_model().train()
    opt = (torch.optim.SGD(module.parameters(), lr=0.01, momentum=0.9) if optimizer == "sgd"
           else torch.optim.AdamW(module.parameters(), lr=1e-3))
    loss_fn = torch.nn.functional.mse_loss if name == "transformer" else torch.nn.functional.cross_entropy
    systems["torch eager"] = _loop_step(module, opt, loss_fn, torch.from_numpy(x), torch.from_numpy(y))


def _loop_step(model: Any, opt: Any, loss_fn: Callable[[Any, Any], Any], x: Any, y: Any) -> Callable[[], Any]:
    """One step of the training loop torch users write (braze eager runs the same code)."""
    def step() -> Any:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def measure(optimizer: str, rounds: int, budget: float, cases: tuple = CASES) -> list[dict[str, Any]]:
    results = []
    for name, batch, qlora in cases:
        systems, notes = _systems(name, batch, optimizer, qlora)
        seconds = interleaved(systems, rounds, budget, settle=0.05)
        label = f"{name} b{batch}" + (f" QLoRA ({qlora})" if qlora else "")
        results.append({"case": label, "seconds": seconds, "notes": notes})
    return results


def markdown(results: list[dict[str, Any]], optimizer: str) -> str:
    lines = [f"Training step ({optimizer}), ms per step; \"compiled vs X\" is X's time over the compiled step's "
             f"(above 1: compiled is faster)", "", "| case | braze compiled | braze eager | torch eager | compiled vs torch | "
             "compiled vs eager braze | step memory: peak (arena) MB |", "|---|---|---|---|---|---|---|"]
    for r in results:
        s, memory = r["seconds"], r["notes"]["memory"]
        torch_s = s.get("torch eager")
        cells = [f"{s[k] * 1e3:.2f}" if k in s else "n/a" for k in ("braze compiled", "braze eager", "torch eager")]
        vs_torch = f"{torch_s / s['braze compiled']:.2f}x" if torch_s else "n/a"
        vs_eager = f"{s['braze eager'] / s['braze compiled']:.2f}x"
        lines.append(f"| {r['case']} | " + " | ".join(cells) + f" | {vs_torch} | {vs_eager} | "
                     f"{memory['peak'] / 1e6:.1f} ({memory['arena'] / 1e6:.1f}) |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.train_step", description=__doc__.split("\n\n")[0])
    parser.add_argument("--optimizer", default="sgd", choices=["sgd", "adamw"], help="the update (default sgd)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per case (default 5)")
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per system per round (default 1.0)")
    parser.add_argument("--json", metavar="OUT", help="also write the raw results as JSON")
    args = parser.parse_args(argv)
    results = measure(args.optimizer, args.rounds, args.budget)
    print(markdown(results, args.optimizer))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
