"""Loading a .braze artifact in a new process: the first load (empty compiled-object cache) beside the second
(the disk cache warm), for the benchmark models of benchmarks/models.py.

Run from the repository root:

    python -m benchmarks.load_artifact [--repeats 3] [--json out.json]

Each model is exported once; then each load runs in a fresh Python process that imports braze, times
`braze.load(path)` alone (reading, validating, re-planning, building the LLVM module, compiling or fetching the
object from the cache, loading the weights) and makes one call. The first process of a model gets an empty
BRAZE_CACHE_DIR; the later ones share it, so they hit the cache. Figures are the median over --repeats warm
processes; `import braze` and the first import of the code generator's modules (which a process pays once, on
its first compile or load) are shown apart.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

LOADER = """
import json, sys, time
start = time.perf_counter()
import numpy as np
import braze
imported = time.perf_counter()
import braze.runtime.executable  # the code generator's modules (llvmlite, networkx through the fusion pass)
codegen_imported = time.perf_counter()
compiled = braze.load(sys.argv[1])
loaded = time.perf_counter()
compiled(*(np.zeros(v.type.shape, v.type.dtype.numpy) for v in compiled.graph.inputs))
from braze.codegen import cache
print(json.dumps({"import_s": imported - start, "codegen_import_s": codegen_imported - imported,
                  "load_s": loaded - codegen_imported, "cache": cache.stats().as_dict()}))
"""


def child_env(env: dict[str, str]) -> dict[str, str]:
    """The environment of a measured process: as given, but writing bytecode, so imports are timed as a user pays
    them once Python has compiled braze's modules (PYTHONDONTWRITEBYTECODE would recompile every one per process)."""
    return {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _load_once(path: Path, cache_dir: Path) -> dict[str, Any]:
    env = child_env(dict(os.environ, BRAZE_CACHE_DIR=str(cache_dir)))
    result = subprocess.run([sys.executable, "-c", LOADER, str(path)], env=env, capture_output=True, text=True,
                            check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure(repeats: int) -> list[dict[str, Any]]:
    """Cold and warm load times per benchmark model (one case per model: batch 1)."""
    import braze
    from benchmarks import models
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for case in (models.mlp(1), models.cnn(1), models.transformer(1)):
            path, cache_dir = Path(folder) / f"{case.name.split()[0]}.braze", Path(folder) / f"cache-{len(rows)}"
            braze.export(case.model, path, case.x)
            cold = _load_once(path, cache_dir)
            warm = [_load_once(path, cache_dir) for _ in range(repeats)]
            rows.append({"model": case.name, "file_bytes": path.stat().st_size, "cold_load_s": cold["load_s"],
                         "warm_load_s": statistics.median(w["load_s"] for w in warm),
                         "import_s": statistics.median(w["import_s"] for w in warm),
                         "codegen_import_s": statistics.median(w["codegen_import_s"] for w in warm),
                         "warm_cache_hits": warm[-1]["cache"]["hits"], "cold_cache_misses": cold["cache"]["misses"]})
            row = rows[-1]
            print(f"{row['model']:<16} {row['file_bytes']:>10,} bytes  cold {row['cold_load_s'] * 1e3:8.1f} ms  "
                  f"warm {row['warm_load_s'] * 1e3:8.1f} ms  (import braze {row['import_s'] * 1e3:.0f} ms, codegen "
                  f"{row['codegen_import_s'] * 1e3:.0f} ms; "
                  f"cache hits warm {row['warm_cache_hits']}, misses cold {row['cold_cache_misses']})")
    return rows


def run_command(doc: str, measure: Callable[..., list[dict[str, Any]]], repeats_help: str,
                models: tuple[str, ...] = ()) -> None:
    """The command line of a process-per-measurement benchmark: --repeats N and --json OUT (and, given `models`,
    --models a,b choosing among them; measure then gets the chosen ones)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help=f"{repeats_help} (default 3)")
    parser.add_argument("--json", metavar="OUT", help="also write the rows as JSON")
    if models:
        parser.add_argument("--models", default=",".join(models), help=f"comma-separated, from {', '.join(models)}")
    args = parser.parse_args()
    chosen = [m for m in args.models.split(",") if m] if models else []
    unknown = sorted(set(chosen) - set(models))
    if unknown:
        parser.error(f"unknown models {', '.join(unknown)}; choose from {', '.join(models)}")
    rows = measure(args.repeats, chosen) if models else measure(args.repeats)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


def main() -> None:
    run_command(__doc__, measure, "warm processes per model")


if __name__ == "__main__":
    main()
