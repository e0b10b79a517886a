"""The long IR fuzz run for maintainers: mutated printed graphs through parse, verify, interpret (and compile).

    python -m tests.ir.fuzz_ir --budget 20000 --seed 1 [--compile] [--out DIR]

Each case k of a seed is reproducible on its own (`--seed S --start k --budget 1`): its base graph, edits and
inputs come from random.Random(f"{seed}:{k}"). Cases run in a worker process that reports each outcome on a line;
a worker that dies (a crash in native code) or stays silent for --timeout seconds (a hang) is replaced, and the
case's text is saved to the output directory, as is every case that broke the property of tests/ir/fuzzing.py
(with its traceback), named <crashed|hung|failed>-<seed>-<case>.ir. Exits 1 if any case crashed, hung or failed. The default suite runs a small budget of it.
"""
from __future__ import annotations

import argparse
import json
import random
import select
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

from .fuzzing import BASES, EDITS, SNIPPETS, TYPED_EDITS, VOCABULARY, Edit, check_mutant, fuzz_size_limit, mutate


def case(seed: int, k: int) -> tuple[int, list[Edit], int]:
    """Case k of a seed: the base graph's index, one to three edits, and the seed of generated inputs."""
    rng = random.Random(f"{seed}:{k}")
    edits = [_edit(rng) for _ in range(rng.choice((1, 1, 2, 3)))]
    return rng.randrange(len(BASES)), edits, rng.randrange(2 ** 16)


def _edit(rng: random.Random) -> Edit:
    """Half of the edits typed (a number or name for another), the others as the fuzz test draws them."""
    if rng.random() < 0.5:
        kind = rng.choice(sorted(TYPED_EDITS))
        return kind, rng.random(), rng.choice(TYPED_EDITS[kind][1])
    pieces = rng.choice((SNIPPETS, VOCABULARY))
    return rng.choice(EDITS), rng.random(), rng.choice(pieces) if rng.random() < 0.9 else chr(rng.randrange(32, 0x2FFF))


def mutant(seed: int, k: int) -> str:
    """The text of case k."""
    base, edits, _ = case(seed, k)
    return mutate(BASES[base][0], edits)


def work(seed: int, start: int, stop: int, compile: bool, out: Path) -> None:
    """Run cases start..stop-1, printing one JSON line per case."""
    for k in range(start, stop):
        base, _, input_seed = case(seed, k)
        _, graph, arrays = BASES[base]
        text = mutant(seed, k)
        try:
            with fuzz_size_limit():
                outcome = check_mutant(text, graph, arrays, seed=input_seed, compile=compile)
        except Exception:  # noqa: BLE001  (the point: anything but a braze error is a finding)
            outcome = "failed"
            _save(out / f"failed-{seed}-{k}.ir", text)
            (out / f"failed-{seed}-{k}.txt").write_text(traceback.format_exc(), encoding="utf-8")
        print(json.dumps([k, outcome]), flush=True)


def _save(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8", errors="surrogatepass")


def run(seed: int, start: int, budget: int, compile: bool, out: Path, timeout: float) -> Counter[str]:
    """Run the cases in workers, replacing one that crashes or hangs; the outcome counts."""
    out.mkdir(parents=True, exist_ok=True)
    counts: Counter[str] = Counter()
    k, stop = start, start + budget
    while k < stop:
        command = [sys.executable, "-m", "tests.ir.fuzz_ir", "--worker", "--seed", str(seed), "--start", str(k),
                   "--budget", str(stop - k), "--out", str(out)] + (["--compile"] if compile else [])
        worker = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert worker.stdout is not None
        while k < stop:
            ready, _, _ = select.select([worker.stdout], [], [], timeout)
            line = worker.stdout.readline() if ready else ""
            if not line:
                break
            counts[json.loads(line)[1]] += 1
            k += 1
        if k < stop:  # the worker died on case k, or said nothing for `timeout` seconds
            kind = "crashed" if ready else "hung"
            worker.kill()
            code = worker.wait()
            _save(out / f"{kind}-{seed}-{k}.ir", mutant(seed, k))
            print(f"case {k}: {kind} (exit {code})", file=sys.stderr)
            counts[kind] += 1
            k += 1
        else:
            worker.wait()
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=int, default=2000, help="number of mutated cases (default 2000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=0, help="first case index (to reproduce one case)")
    parser.add_argument("--compile", action="store_true", help="also compile accepted graphs and compare")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "braze-fuzz-ir",
                        help="where findings are saved (default: braze-fuzz-ir in the temporary directory)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds a case may take before it hangs")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        work(args.seed, args.start, args.start + args.budget, args.compile, args.out)
        return 0
    began = time.monotonic()
    counts = run(args.seed, args.start, args.budget, args.compile, args.out, args.timeout)
    print(json.dumps({"seed": args.seed, "cases": args.budget, "seconds": round(time.monotonic() - began, 1),
                      **dict(sorted(counts.items()))}))
    return 1 if counts["failed"] or counts["crashed"] or counts["hung"] else 0


if __name__ == "__main__":
    sys.exit(main())
