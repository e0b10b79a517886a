"""Compile time in a new process, cold (BRAZE_CACHE=0) beside warm (the disk cache filled by an earlier process), for
the benchmark models of benchmarks/models.py and the ResNet-18 and GPT-2-style models of benchmarks/compile_models.py,
with the stage breakdown of CompiledModule.timings.

Run from the repository root:

    python -m benchmarks.compile_time [--repeats 3] [--models mlp,cnn,transformer,resnet18,gpt2] [--json out.json]

Every measurement is one fresh Python process that builds the model, then times `braze.compile(model, x)` (trace,
passes, code generation or cache lookup, prepare) and reports the compile's own stage times. `import braze` and the
first import of the code generator (llvmlite, the lowerings), which a process pays once, are shown apart. The warm
processes share one cache directory that a first, unmeasured process filled. Figures are medians over --repeats
processes; the table shows cold over warm and the largest stages of each, so the numbers are read as ratios and
shares, not as lone absolute claims about a machine that may be busy.

Beside braze, measured in the same run, each in a new process too: torch.compile's first call of the same torch
module (inductor with an empty cache directory of its own, so it compiles: what a new user waits for) and
onnxruntime's session creation for braze's ONNX export of the model (braze.export_onnx). Either is skipped,
with a note, when torch or onnxruntime is not installed.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.load_artifact import child_env, run_command

MODELS = ("mlp", "cnn", "transformer", "resnet18", "gpt2")

COMPILER = """
import json, sys, time
start = time.perf_counter()
import braze
imported = time.perf_counter()
import braze.runtime.executable  # llvmlite and the runtime, paid once per process
codegen_imported = time.perf_counter()
from benchmarks.compile_time import case_of
case = case_of(sys.argv[1])
model = case.model.eval()
built = time.perf_counter()
compiled = braze.compile(model, case.x)
compiled_at = time.perf_counter()
compiled(case.x)
print(json.dumps({"import_s": imported - start, "codegen_import_s": codegen_imported - imported,
                  "compile_s": compiled_at - built, "stages": compiled.timings.as_dict(),
                  "cache_hit": compiled.timings.cache_hit}))
"""


TORCH_COMPILER = """
import json, sys, time
import torch
from benchmarks.compile_time import case_of
case = case_of(sys.argv[1])
module = case.torch_model()
x = torch.from_numpy(case.x)
start = time.perf_counter()
compiled = torch.compile(module)
with torch.no_grad():
    compiled(x)
print(json.dumps({"first_call_s": time.perf_counter() - start}))
"""

ORT_SESSION = """
import json, sys, time
import onnxruntime
start = time.perf_counter()
session = onnxruntime.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
print(json.dumps({"session_s": time.perf_counter() - start}))
"""


def _run(script: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run a measuring script in a new Python process from the repository root; its last line of JSON."""
    root = Path(__file__).resolve().parents[1]
    env = child_env(dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH", "")]))))
    result = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True,
                            check=True, cwd=root)
    return json.loads(result.stdout.strip().splitlines()[-1])


def _compile_once(model: str, env: dict[str, str]) -> dict[str, Any]:
    return _run(COMPILER, [model], env)


def _installed(name: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(name) is not None


def _others(model: str, repeats: int, folder: Path) -> dict[str, float | None]:
    """torch.compile's first call and onnxruntime's session creation for `model` (None when not installed)."""
    found: dict[str, float | None] = {"torch_compile_s": None, "ort_session_s": None}
    if _installed("torch"):
        runs = [_run(TORCH_COMPILER, [model], dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(folder / f"inductor-{k}")))
                for k in range(repeats)]
        found["torch_compile_s"] = statistics.median(r["first_call_s"] for r in runs)
    if _installed("onnxruntime") and _installed("onnx"):
        import braze
        case = case_of(model)
        path = folder / f"{model}.onnx"
        try:
            braze.export_onnx(case.model, path, case.x)
        except braze.BrazeError as exc:
            print(f"{model}: no ONNX export ({str(exc).splitlines()[0]}), so no onnxruntime session")
            return found
        runs = [_run(ORT_SESSION, [str(path)], dict(os.environ)) for _ in range(repeats)]
        found["ort_session_s"] = statistics.median(r["session_s"] for r in runs)
    return found


def case_of(model: str) -> Any:
    """The batch-1 case of a model of benchmarks/models.py or benchmarks/compile_models.py."""
    from benchmarks import compile_models, models
    source = models if hasattr(models, model) else compile_models
    return getattr(source, model)(1)


def _ms(seconds: float | None) -> str:
    return "not installed" if seconds is None else f"{seconds * 1e3:.0f} ms"


def _median_stages(runs: list[dict[str, Any]]) -> dict[str, float]:
    names = dict.fromkeys(name for run in runs for name in run["stages"])
    return {name: statistics.median(run["stages"].get(name, 0.0) for run in runs) for name in names}


def _top(stages: dict[str, float], count: int = 3) -> str:
    total = sum(stages.values()) or 1.0
    biggest = sorted(stages.items(), key=lambda item: -item[1])[:count]
    return ", ".join(f"{name} {seconds / total:.0%}" for name, seconds in biggest)


def measure(repeats: int, chosen: list[str] | None = None) -> list[dict[str, Any]]:
    """Cold and warm compile times and stage breakdowns per benchmark model (batch 1)."""
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for k, model in enumerate(chosen or MODELS):
            cache_dir = str(Path(folder) / f"cache-{k}")
            cold_env = dict(os.environ, BRAZE_CACHE="0", BRAZE_CACHE_DIR=cache_dir)
            warm_env = {key: v for key, v in os.environ.items() if key != "BRAZE_CACHE"}
            warm_env["BRAZE_CACHE_DIR"] = cache_dir
            cold = [_compile_once(model, cold_env) for _ in range(repeats)]
            _compile_once(model, warm_env)  # fills the cache
            warm = [_compile_once(model, warm_env) for _ in range(repeats)]
            row = {"model": f"{model} b1", "cold_compile_s": statistics.median(r["compile_s"] for r in cold),
                   "warm_compile_s": statistics.median(r["compile_s"] for r in warm),
                   "import_s": statistics.median(r["import_s"] for r in warm + cold),
                   "codegen_import_s": statistics.median(r["codegen_import_s"] for r in warm + cold),
                   "warm_all_hits": all(r["cache_hit"] for r in warm),
                   "cold_stages": _median_stages(cold), "warm_stages": _median_stages(warm),
                   **_others(model, repeats, Path(folder))}
            rows.append(row)
            print(f"{row['model']:<16} cold {row['cold_compile_s'] * 1e3:8.1f} ms  warm "
                  f"{row['warm_compile_s'] * 1e3:7.1f} ms  cold/warm {row['cold_compile_s'] / row['warm_compile_s']:5.1f}x"
                  f"  (import braze {row['import_s'] * 1e3:.0f} ms, codegen {row['codegen_import_s'] * 1e3:.0f} ms; "
                  f"warm hits: {'all' if row['warm_all_hits'] else 'not all'})")
            print(f"{'':<16} cold: {_top(row['cold_stages'])}")
            print(f"{'':<16} warm: {_top(row['warm_stages'])}")
            print(f"{'':<16} torch.compile first call {_ms(row['torch_compile_s'])}, onnxruntime session "
                  f"{_ms(row['ort_session_s'])}")
    return rows


def main() -> None:
    run_command(__doc__, measure, "processes per model, cold and warm", MODELS)


if __name__ == "__main__":
    main()
