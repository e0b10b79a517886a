"""`braze bench`: latency percentiles and throughput of a compiled model or artifact, beside onnxruntime and torch
when they are installed (as ratios of their median latency to braze's)."""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable

from braze.cli_model import Progress, build_model, check_arity, parse_shape, random_inputs, run_user_code
from braze.ir.errors import BrazeError


def add_command(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Register bench on the `braze` subcommand parsers."""
    bench = command(sub, "bench", "time a model or a .braze file: latency p50/p90/p99 and throughput",
                    "Compile the model (or load the artifact) and time calls on random inputs; with onnxruntime or "
                    "torch installed, time the same model there too and show each system's median latency as a "
                    "ratio to braze's.",
                    "braze bench model.py:make --input 64x784 --threads 2")
    bench.add_argument("model", metavar="FILE.py:FACTORY|FILE.braze")
    bench.add_argument("--input", action="append", type=parse_shape, default=[], metavar="SHAPE",
                       help="an input shape like 64x784, one per input (a .braze file has its own)")
    bench.add_argument("--dtype", default="float32", choices=["float32", "float64", "int32", "int64", "bool"],
                       help="element type of the inputs (default float32)")
    bench.add_argument("--threads", type=int, help="threads per call for every system (default: as many as braze "
                                                   "chooses for the model)")
    bench.add_argument("--seconds", type=float, default=2.0, help="time spent measuring each system (default 2)")
    bench.add_argument("--seed", type=int, default=0, help="seed of the weights and random inputs (default 0)")
    bench.set_defaults(run=_cmd_bench)


def _cmd_bench(args: argparse.Namespace) -> int:
    import braze
    if args.seconds <= 0:
        raise BrazeError(f"--seconds must be positive, got {args.seconds}")
    with Progress(2, "bench") as progress:
        progress.step("compiling")
        if args.model.endswith(".braze"):
            compiled, model = braze.load(args.model, threads=args.threads), None
            shapes = [v.type.shape for v in compiled.graph.inputs]
            if args.input and [tuple(s) for s in args.input] != shapes:
                raise BrazeError(f"{args.model} takes inputs of shapes {shapes}; --input gave {args.input}")
            dtypes = [v.type.dtype.numpy_name for v in compiled.graph.inputs]
            inputs = [random_inputs([s], d, args.seed + k)[0] for k, (s, d) in enumerate(zip(shapes, dtypes))]
        else:
            if not args.input:
                raise BrazeError("braze bench FILE.py:FACTORY needs --input SHAPE for every input of the model")
            model = build_model(args.model, args.seed).eval()
            check_arity(args.model, model, len(args.input))
            inputs = random_inputs(args.input, args.dtype, args.seed)
            compiled = run_user_code(args.model, braze.compile, model, *inputs, threads=args.threads)
        systems: dict[str, Callable[[], Any] | str] = {"braze": lambda: compiled(*inputs)}
        threads = args.threads or compiled.threads  # the others get as many threads as braze chose
        systems["onnxruntime"] = _onnxruntime(model if model is not None else compiled.graph, inputs, threads)
        systems["torch"] = _torch(args.model, model, inputs, threads)
        _check_outputs(systems)
        progress.step("measuring")
        rows = {name: _measure(fn, args.seconds, progress) if callable(fn) else fn for name, fn in systems.items()}
    batch = inputs[0].shape[0] if inputs and inputs[0].ndim else 1
    print(f"braze bench {args.model}: inputs {', '.join(f'{x.dtype}{list(x.shape)}' for x in inputs)}; "
          f"threads {threads} (braze {compiled.threads})")
    print(_table(rows, batch))
    return 0


def _check_outputs(systems: dict[str, Callable[[], Any] | str]) -> None:
    """Replace a system whose first output differs from braze's (beyond 1e-3 relative) by a note; not timed."""
    import numpy as np
    reference = np.asarray(_first(systems["braze"]()), dtype=np.float64)
    scale = max(1.0, float(np.max(np.abs(reference)))) if reference.size else 1.0
    for name, fn in systems.items():
        if name == "braze" or not callable(fn):
            continue
        got = np.asarray(_first(fn()), dtype=np.float64)
        error = float(np.max(np.abs(got - reference))) if got.shape == reference.shape and got.size else np.inf
        if got.shape != reference.shape or not error <= 1e-3 * scale:
            systems[name] = f"skipped: its output differs from braze's (max abs error {error:.3g}); not timed"


def _first(outputs: Any) -> Any:
    if isinstance(outputs, (tuple, list)):
        return outputs[0]
    return outputs.detach().numpy() if hasattr(outputs, "detach") else outputs


def _measure(fn: Callable[[], Any], seconds: float, progress: Progress) -> list[float]:
    """Seconds per call over about `seconds` of calls, after warm-up calls (at least 5 samples)."""
    fn()
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-7)
    samples = []
    for _ in progress.iterate(range(max(5, min(100_000, int(seconds / once)))), "calls"):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def _table(rows: dict[str, list[float] | str], batch: int) -> str:
    import numpy as np
    braze_p50 = float(np.percentile(rows["braze"], 50))
    lines = [f"{'system':<12} {'p50 ms':>9} {'p90 ms':>9} {'p99 ms':>9} {'calls/s':>10} {'samples/s':>11}  "
             f"p50 vs braze"]
    for name, samples in rows.items():
        if isinstance(samples, str):
            lines.append(f"{name:<12} {samples}")
            continue
        p50, p90, p99 = (float(np.percentile(samples, q)) for q in (50, 90, 99))
        lines.append(f"{name:<12} {p50 * 1e3:>9.3f} {p90 * 1e3:>9.3f} {p99 * 1e3:>9.3f} {1 / p50:>10.1f} "
                     f"{batch / p50:>11.1f}  {p50 / braze_p50:.2f}x")
    return "\n".join(lines)


def _onnxruntime(source: Any, inputs: list[Any], threads: int) -> Callable[[], Any] | str:
    """A call of the model through onnxruntime (exported with braze.export_onnx), or why there is none."""
    import braze
    try:
        import onnxruntime as ort
    except ImportError:
        return "skipped: onnxruntime is not installed (pip install braze[onnx])"
    if not hasattr(braze, "export_onnx"):
        return "skipped: this braze has no ONNX export"
    import tempfile
    try:
        with tempfile.TemporaryDirectory() as folder:
            path = f"{folder}/model.onnx"
            braze.export_onnx(source, path, *([] if isinstance(source, braze.ir.Graph) else inputs))
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # a model ONNX cannot express is reported in the table, not fatal
        return f"skipped: {type(exc).__name__}: {exc}".splitlines()[0][:200]
    feed = {i.name: x for i, x in zip(session.get_inputs(), inputs)}
    return lambda: session.run(None, feed)


def _torch(spec: str, model: Any, inputs: list[Any], threads: int) -> Callable[[], Any] | str:
    """A call of the same model source run by torch (the file imported with `braze` standing for `torch`), with
    the braze model's weights, or why there is none."""
    if model is None:
        return "skipped: a .braze file has no model source to run in torch"
    try:
        import torch
    except ImportError:
        return "skipped: torch is not installed (pip install braze[torch])"
    try:
        twin = _as_torch(spec, model, torch)
    except Exception as exc:  # braze-only code in the model file: report, do not fail
        return f"skipped: the model file does not run under torch ({type(exc).__name__}: {exc})".splitlines()[0][:200]
    torch.set_num_threads(threads)
    tensors = [torch.from_numpy(x) for x in inputs]

    def call() -> Any:
        with torch.inference_mode():
            return twin(*tensors)
    return call


def _as_torch(spec: str, model: Any, torch: Any) -> Any:
    """FACTORY() of the model file imported with the modules `braze`, `braze.nn` ... standing for torch's."""
    import numpy as np

    from braze.cli_model import load_factory
    names = ("braze", "braze.nn", "braze.nn.functional")
    saved = {name: sys.modules.get(name) for name in names}
    sys.modules.update({"braze": torch, "braze.nn": torch.nn, "braze.nn.functional": torch.nn.functional})
    try:
        twin = load_factory(spec)()
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    state = {k: torch.from_numpy(np.array(v)) for k, v in model.valid().materialize().state_dict().items()}
    twin.load_state_dict(state)
    return twin.eval()
