"""The harness's results as text and pictures: the full markdown tables, the README's performance table and a PNG
per model (matplotlib when installed).

"% of peak" is the FLOPs of one call (twice the op traits' work estimate of the compiled graph: multiply-adds of
matmuls and convolutions, plus one per element the other ops write) over the time, as a share of the FMA peak the
same child measured at the same thread count (benchmarks/peak.py). torch.compile's cell is the better of default
and freezing, with the variant named.
"""
from __future__ import annotations

import datetime
import os
import platform
from pathlib import Path
from typing import Any

PEERS = ("numpy eager", "braze eager", "torch eager", "torch.compile", "onnxruntime")
TORCH_COMPILE = ("torch.compile", "torch.compile freezing")


def _time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def _peer_seconds(seconds: dict[str, float], peer: str) -> tuple[float | None, str]:
    """A peer's time and a label suffix; torch.compile's is the better of its variants."""
    if peer != "torch.compile":
        return seconds.get(peer), ""
    timed = [(seconds[name], name) for name in TORCH_COMPILE if name in seconds]
    if not timed:
        return None, ""
    best, name = min(timed)
    return best, " (freezing)" if name.endswith("freezing") else " (default)"


def _percent_of_peak(flops: float | None, seconds: float | None, peak: float | None) -> str:
    if not (flops and seconds and peak):
        return "-"
    return f"{100 * flops / seconds / 1e9 / peak:.0f}%"


# A run's FMA peak on n threads below this share of n times its 1-thread peak says the CPUs were not all there while
# it ran (another process, a virtual machine's host): its cells at that thread count measure the machine, not braze.
SCALED_PEAK = 0.9


def peak_warnings(runs: list[dict[str, Any]]) -> list[str]:
    """A line for each thread count whose FMA peak fell short of SCALED_PEAK times the 1-thread peak scaled up."""
    one = next((r.get("peak_gflops") for r in runs if r["threads"] == 1), None)
    return [f"Void at {r['threads']} threads: the FMA peak read {r['peak_gflops']} GFLOP/s, below "
            f"{SCALED_PEAK:.0%} of {r['threads']} x {one} (the 1-thread peak): the CPUs were not all free while it ran."
            for r in runs if one and r.get("peak_gflops") and r["threads"] > 1
            and r["peak_gflops"] < SCALED_PEAK * r["threads"] * one]


def _threads(run: dict[str, Any], used: int | None) -> str:
    return f"{run['threads']}" + (f" (braze: {used})" if used is not None else "")


def markdown(results: dict[str, Any]) -> str:
    """Every model's latency per system with ratios to braze compiled, then SGEMM GFLOP/s."""
    runs = results["runs"]
    present = [p for p in PEERS if any(_peer_seconds(m["seconds"], p)[0] for r in runs for m in r["models"].values())]
    lines = ["| model | threads | braze compiled | % of peak | first call | " + " | ".join(present) + " |",
             "|---|---|---|---|---|" + "---|" * len(present)]
    for name in dict.fromkeys(name for r in runs for name in r["models"]):
        for run in runs:
            entry = run["models"].get(name)
            if entry is None:
                continue
            seconds, notes = entry["seconds"], entry["notes"]
            base = seconds.get("braze compiled")
            cells = [_time(base), _percent_of_peak(notes.get("flops"), base, run.get("peak_gflops")),
                     _time(notes.get("first_call_s"))]
            for peer in present:
                value, label = _peer_seconds(seconds, peer)
                ratio = f" ({value / base:.2f}x)" if value is not None and base else ""
                braze_onnx = peer == "onnxruntime" and notes.get("onnx exporter") == "braze.export_onnx"
                cells.append(_time(value) + ratio + label + (" *" if braze_onnx and value is not None else ""))
            lines.append(f"| {name} | {_threads(run, notes.get('braze threads'))} | " + " | ".join(cells) + " |")
    lines += ["", "Ratios: the system's time over braze compiled's (above 1: braze compiled is faster). threads: the "
              "CPUs every system may use (braze: the threads braze chose). first call: braze's first call after "
              "compiling. onnxruntime runs the model torch.onnx.export writes; * marks the model braze.export_onnx "
              "wrote, where torch's export fails.", ""]
    lines += _sgemm_lines(runs)
    warnings = peak_warnings(runs)
    if warnings:
        lines += ["", *warnings]
    errors = [f"- {name}, {run['threads']} thread(s), {key}: {value}" for run in runs
              for name, m in run["models"].items() for key, value in m["notes"].items()
              if key in ("braze compiled", *PEERS, *TORCH_COMPILE) and value != "not installed"]
    if errors:
        lines += ["", "Not timed:", *errors]
    return "\n".join(lines) + "\n"


def _sgemm_lines(runs: list[dict[str, Any]]) -> list[str]:
    lines = ["| SGEMM n | threads | braze GFLOP/s | % of peak | numpy GFLOP/s | braze / numpy |",
             "|---|---|---|---|---|---|"]
    for run in runs:
        peak = run.get("peak_gflops")
        for row in run.get("sgemm", []):
            ours, theirs = row.get("braze_gflops"), row.get("numpy_gflops")
            ratio = f"{ours / theirs:.2f}" if ours and theirs else "-"
            share = f"{100 * ours / peak:.0f}%" if ours and peak else "-"
            lines.append(f"| {row['n']} | {_threads(run, row.get('braze threads'))} | {ours or '-'} | {share} | "
                         f"{theirs or '-'} | {ratio} |")
    return lines


def readme_table(results: dict[str, Any]) -> str:
    """The README's performance section: how and where it was measured, then braze against the best peer."""
    m, load = results["machine"], results.get("load", {})
    versions = ", ".join(f"{k} {m[k]}" for k in ("python", "numpy", "llvmlite", "torch", "onnxruntime") if k in m)
    peaks = ", ".join(f"{r['peak_gflops']} GFLOP/s on {r['threads']} thread(s)" for r in results["runs"]
                      if r.get("peak_gflops"))
    lines = [f"Measured {m.get('date', '')} with `{results.get('command', 'python -m benchmarks.run')}` on "
             f"{m.get('cpu_model', m.get('cpu'))} ({target_text(m)}, {m.get('cpus')} CPUs); {versions}. "
             f"FMA peak {peaks}. Load average before and after the run: "
             f"{_load(load.get('before'))} / {_load(load.get('after'))}.", "",
             "| model | threads | braze | % of peak | best peer | braze vs best peer |", "|---|---|---|---|---|---|"]
    for run in results["runs"]:
        for name, entry in run["models"].items():
            seconds, notes = entry["seconds"], entry["notes"]
            base = seconds.get("braze compiled")
            timed = [(_peer_seconds(seconds, p)[0], p + _peer_seconds(seconds, p)[1]) for p in PEERS
                     if p != "braze eager"]
            timed = [(t, p) for t, p in timed if t]
            best = min(timed) if timed else None
            versus = f"{best[0] / base:.2f}x" if best and base else "-"
            peer = f"{best[1]} {_time(best[0])}" if best else "-"
            lines.append(f"| {name} | {_threads(run, notes.get('braze threads'))} | {_time(base)} | "
                         f"{_percent_of_peak(notes.get('flops'), base, run.get('peak_gflops'))} | {peer} | {versus} |")
    lines += ["", "braze vs best peer: the best peer's time over braze's (above 1: braze is faster).", ""]
    lines += _sgemm_lines(results["runs"])
    warnings = peak_warnings(results["runs"])
    if warnings:
        lines += ["", *warnings]
    return "\n".join(lines) + "\n"


def _load(values: list[float] | None) -> str:
    return "-" if not values else " ".join(f"{v:.2f}" for v in values)


def plots(results: dict[str, Any], out: Path) -> list[Path]:
    """One PNG per model: each system's time per thread count, braze compiled first; none without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    for name in dict.fromkeys(name for r in results["runs"] for name in r["models"]):
        entries = [(r["threads"], r["models"][name]["seconds"]) for r in results["runs"] if name in r["models"]]
        systems = list(dict.fromkeys(s for _, seconds in entries for s in seconds))
        figure, axes = plt.subplots(figsize=(1.2 + 1.1 * len(systems), 3.6))
        width = 0.8 / max(len(entries), 1)
        for k, (threads, seconds) in enumerate(entries):
            axes.bar([i + k * width for i in range(len(systems))], [seconds.get(s, 0) * 1e3 for s in systems],
                     width, label=f"{threads} thread(s)")
        axes.set_xticks([i + width * (len(entries) - 1) / 2 for i in range(len(systems))], systems, rotation=30,
                        ha="right", fontsize=8)
        axes.set_ylabel("ms per call (lower is better)")
        axes.set_title(name)
        axes.legend(fontsize=8)
        figure.tight_layout()
        path = out / f"{name.split(' (')[0].replace(' ', '_')}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written


def machine() -> dict[str, Any]:
    """Where and with what the run happened: date, CPU, the versions of every system."""
    import llvmlite
    import llvmlite.binding as llvm
    import numpy as np
    info: dict[str, Any] = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                            "python": platform.python_version(), "numpy": np.__version__,
                            "llvmlite": llvmlite.__version__, "machine": platform.machine(),
                            "cpu": llvm.get_host_cpu_name(), "cpu_model": _cpu_model(), "cpus": os.cpu_count(),
                            **compile_target()}
    for module in ("torch", "onnxruntime"):
        try:
            info[module] = __import__(module).__version__
        except ImportError:
            pass
    return info


def compile_target() -> dict[str, Any]:
    """The CPU braze compiles for and its float32 lanes: the host's, or the one BRAZE_CPU forces (e.g. the AVX2
    code on an AVX-512 host), so that a table says which code it timed."""
    from braze.codegen.target import CPU_ENV, host_target
    target = host_target()
    return {"target": target.cpu, "target_lanes": target.vector_width,
            "target_forced": bool(os.environ.get(CPU_ENV, "").strip())}


def target_text(m: dict[str, Any]) -> str:
    """How a table names the code it timed: "LLVM target znver4, 16 float32 lanes", or "LLVM target znver3, 8
    float32 lanes, forced by BRAZE_CPU on a znver4 host"."""
    target = m.get("target", m.get("cpu"))
    lanes = f", {m['target_lanes']} float32 lanes" if m.get("target_lanes") else ""
    if m.get("target_forced"):
        return f"LLVM target {target}{lanes}, forced by BRAZE_CPU on a {m.get('cpu')} host"
    return f"LLVM target {target}{lanes}"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
