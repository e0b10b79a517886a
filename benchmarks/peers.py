"""The peers braze compiled is timed against, beside numpy eager and braze eager: torch eager, torch.compile
(default, and with inductor's freezing, which folds the weights into the compiled graph as braze does) and
onnxruntime. Each `add_*` puts a callable into `systems`, or says in `notes` why it could not (not installed, an
export or compile error): a missing peer is reported, never fatal. Their first calls (torch.compile's compile)
happen here, before timing.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

Systems = dict[str, Callable[[], Any]]


def torch_module(notes: dict[str, Any], case: Any, threads: int) -> Any:
    """The case's torch module on `threads` threads, or None (with a note) without torch."""
    try:
        import torch
    except ImportError:
        notes["torch eager"] = "not installed"
        return None
    torch.set_num_threads(threads)
    return case.torch_model()


def add_torch(systems: Systems, notes: dict[str, Any], case: Any, threads: int) -> None:
    """Add torch eager."""
    module = torch_module(notes, case, threads)
    if module is None:
        return
    import torch
    tx = torch.from_numpy(case.x)

    def run() -> Any:
        with torch.inference_mode():
            return module(tx).numpy()
    systems["torch eager"] = run


TORCH_COMPILE = {"torch.compile": False, "torch.compile freezing": True}  # system name -> inductor freezing


def add_torch_compile(systems: Systems, notes: dict[str, Any], case: Any, module: Any) -> None:
    """Add torch.compile of the torch model, default and with freezing; the compile (the first call, the only one
    that reads the freezing option) is timed into notes["compile_s[...]"] and is not part of the measurement."""
    if module is None:
        notes.update({name: "torch is not installed" for name in TORCH_COMPILE})
        return
    import torch
    import torch._inductor.config as inductor
    tx = torch.from_numpy(case.x)
    for name, freezing in TORCH_COMPILE.items():
        try:
            torch._dynamo.reset()
            compiled = torch.compile(case.torch_model())
            start = time.perf_counter()
            with inductor.patch(freezing=freezing), torch.inference_mode():
                compiled(tx)
            notes[f"compile_s[{name}]"] = round(time.perf_counter() - start, 2)
        except Exception as exc:  # a model inductor cannot compile here is reported, not fatal
            notes[name] = f"error: {type(exc).__name__}: {exc}"[:300]
            continue
        systems[name] = _inference(compiled, tx)


def _inference(compiled: Any, tx: Any) -> Callable[[], Any]:
    import torch

    def run() -> Any:
        with torch.inference_mode():
            return compiled(tx).numpy()
    return run


def add_onnxruntime(systems: Systems, notes: dict[str, Any], case: Any, module: Any, threads: int) -> None:
    """Add onnxruntime on the model torch.onnx.export writes, or braze.export_onnx's where torch's fails (or torch
    is not installed); notes["onnx exporter"] says which."""
    try:
        import onnxruntime as ort
    except ImportError:
        notes["onnxruntime"] = "not installed"
        return
    try:
        model, notes["onnx exporter"] = _torch_onnx(module, case.x), "torch.onnx.export"
    except Exception as exc:  # the legacy exporter cannot export every model (is_causal as a Tensor)
        notes["torch.onnx.export"] = f"error: {type(exc).__name__}: {exc}"[:300]
        try:
            model, notes["onnx exporter"] = _braze_onnx(case), "braze.export_onnx"
        except Exception as exc:  # export or loading problems are reported, never fatal
            notes["onnxruntime"] = f"error: {type(exc).__name__}: {exc}"[:300]
            return
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    try:
        runner = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        notes["onnxruntime"] = f"error: {type(exc).__name__}: {exc}"[:300]
        return
    feed = {runner.get_inputs()[0].name: case.x}
    systems["onnxruntime"] = lambda: runner.run(None, feed)[0]


def _torch_onnx(module: Any, x: Any) -> bytes:
    """The model's ONNX bytes from torch's legacy exporter (raises without torch or when the export fails)."""
    import io

    import torch
    if module is None:
        raise ImportError("torch is not installed")
    buffer = io.BytesIO()
    torch.onnx.export(module, (torch.from_numpy(x),), buffer, input_names=["x"], dynamo=False)
    return buffer.getvalue()


def _braze_onnx(case: Any) -> bytes:
    import tempfile

    import braze
    with tempfile.TemporaryDirectory() as directory:
        return braze.export_onnx(case.model, Path(directory) / "model.onnx", case.x).SerializeToString()
