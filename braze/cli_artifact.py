"""`braze export`, `braze info` and `braze run`: write a .braze artifact, describe one, run one on .npy inputs."""
from __future__ import annotations

import argparse
import io
import os
from collections import Counter
from typing import Any, Callable, Mapping

from braze.cli_model import Progress, build_model, check_arity, parse_shape, random_inputs, run_user_code, write_output
from braze.ir.errors import BrazeError


def add_commands(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Register export, info and run on the `braze` subcommand parsers."""
    export = command(sub, "export", "write a model's merged inference graph as one .braze file",
                     "Build the model by calling FACTORY() from FILE.py, trace it on random inputs of the given "
                     "shapes, optimize it (LoRA merged, batch norm and constants folded) and write the artifact; "
                     "braze load / braze run need no model code to run it.",
                     "braze export model.py:make --input 1x3x32x32 -o model.braze --onnx model.onnx")
    export.add_argument("model", metavar="FILE.py:FACTORY",
                        help="a Python file and a function in it returning a Module")
    export.add_argument("--input", action="append", type=parse_shape, required=True, metavar="SHAPE",
                        help="an input shape like 1x3x32x32; repeat for several inputs")
    export.add_argument("--dtype", default="float32", choices=["float32", "float64", "int32", "int64", "bool"],
                        help="element type of the inputs (default float32)")
    export.add_argument("-o", "--output", metavar="OUT.braze", help="the artifact to write")
    export.add_argument("--onnx", metavar="OUT.onnx", help="also write the merged graph as an ONNX model")
    export.add_argument("--lora-adapter", metavar="DIR", help="load this PEFT LoRA adapter onto the model first")
    export.add_argument("--passes", metavar="PIPELINE", default="inference",
                        help="the pass pipeline: 'inference' (default) or pass names joined by commas")
    export.add_argument("--seed", type=int, default=0, help="seed of the weights and random inputs (default 0)")
    export.set_defaults(run=_cmd_export)
    info = command(sub, "info", "describe a .braze file: inputs, outputs, parameters, passes, op counts",
                   "Validate a .braze artifact (without compiling it) and describe it.", "braze info model.braze")
    info.add_argument("artifact", metavar="FILE.braze")
    info.set_defaults(run=_cmd_info)
    run = command(sub, "run", "run a .braze file on inputs saved as .npy files",
                  "Load a .braze artifact, run it on one .npy file per input and write the outputs (.npy for one "
                  "output, .npz for several), or print a summary of them.",
                  "braze run model.braze --input x.npy -o y.npy")
    run.add_argument("artifact", metavar="FILE.braze")
    run.add_argument("--input", action="append", default=[], metavar="X.npy", help="one .npy file per input, in order")
    run.add_argument("-o", "--output", metavar="OUT", help="write the outputs here (.npy, or .npz for several)")
    run.add_argument("--threads", type=int, help="threads per call (default: BRAZE_NUM_THREADS, else by size)")
    run.set_defaults(run=_cmd_run)


# --- export -----------------------------------------------------------------------------------------------------

def _cmd_export(args: argparse.Namespace) -> int:
    import braze
    if not args.output and not args.onnx:
        raise BrazeError("braze export: nothing to write: give -o OUT.braze, --onnx OUT.onnx or both")
    with Progress(4, "export") as progress:
        progress.step("building the model")
        model = build_model(args.model, args.seed).eval()
        if args.lora_adapter:
            run_user_code(args.model, model.load_peft_adapter, args.lora_adapter)
        check_arity(args.model, model, len(args.input))
        inputs = random_inputs(args.input, args.dtype, args.seed)
        if args.output:
            progress.step("tracing, optimizing, writing")
            manifest = run_user_code(args.model, braze.export, model, args.output, *inputs,
                                     pipeline=args.passes or "inference")
            print(f"wrote {args.output}: {_signature(manifest)}; {_parameters(manifest['parameters'])}")
        if args.onnx:
            progress.step("writing ONNX")
            run_user_code(args.model, braze.export_onnx, model, args.onnx, *inputs)
            print(f"wrote {args.onnx}")
    return 0


# --- info -------------------------------------------------------------------------------------------------------

def _cmd_info(args: argparse.Namespace) -> int:
    from braze.artifacts import read
    artifact = read(args.artifact)
    print(describe(args.artifact, artifact.graph, artifact.manifest), end="")
    return 0


def describe(path: str, graph: Any, manifest: Mapping[str, Any]) -> str:
    """What `braze info` prints: format, signature, parameters, hash, passes with their notes, op counts."""
    lines = [f"{path}: braze artifact, format version {manifest['format_version']}, written by braze "
             f"{manifest['braze_version']}",
             f"graph @{manifest['graph']}: {_signature(manifest)}",
             f"parameters: {_parameters(manifest['parameters'])}",
             f"content hash: {manifest['content_hash']}", "passes:"]
    width = max([len(p["name"]) for p in manifest["passes"]] + [4])
    for p in manifest["passes"]:
        notes = p["notes"] or [""]
        lines.append(f"  {p['name']:<{width}}  {p['nodes_before']:>4} -> {p['nodes_after']:<4}  {notes[0]}".rstrip())
        lines += [f"  {'':<{width}}  {'':>12}  {note}" for note in notes[1:]]
    if not manifest["passes"]:
        lines.append("  none (the graph was optimized before export)")
    ops = Counter(f"fused ({n.attr['kind']})" if n.op == "fused" else n.op for n in graph.ops())
    lines.append("ops:")
    lines += [f"  {op:<24}{count:>5}" for op, count in sorted(ops.items())]
    return "\n".join(lines) + "\n"


def _signature(manifest: Mapping[str, Any]) -> str:
    def specs(values: Any) -> str:
        return ", ".join(f"{v['name']}: {v['dtype']}[{','.join(map(str, v['shape']))}]" for v in values)
    return f"({specs(manifest['inputs'])}) -> ({specs(manifest['outputs'])})"


def _parameters(totals: Mapping[str, int]) -> str:
    return f"{totals['count']:,} values in {totals['tensors']} tensor(s), {totals['bytes']:,} bytes"


# --- run --------------------------------------------------------------------------------------------------------

def _cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    import braze
    from braze.runtime.artifact import SUFFIX
    if not args.artifact.endswith(SUFFIX):
        raise BrazeError(f"braze run takes a {SUFFIX} file, got {args.artifact!r}")
    arrays = [_read_npy(path) for path in args.input]
    with Progress(2, "run") as progress:
        progress.step("loading")
        compiled = braze.load(args.artifact, threads=args.threads)
        progress.step("running")
        outputs = compiled.executable.run(arrays)
    names = [v.name for v in compiled.graph.outputs]
    if args.output:
        write_output(_encoded(dict(zip(names, outputs)), args.output), args.output)
        return 0
    for k, (name, y) in enumerate(zip(names, outputs)):
        stats = f"min {y.min():.6g}, max {y.max():.6g}, mean {y.mean():.6g}" if y.size and y.dtype.kind in "fiu" else ""
        print(f"output {k} ('{name}'): {y.dtype}{list(y.shape)} {stats}".rstrip())
        print("  " + np.array2string(y.reshape(-1)[:8], precision=6, separator=", ")
              + (" ..." if y.size > 8 else ""))
    return 0


def _read_npy(path: str) -> Any:
    import numpy as np
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        raise BrazeError(f"{path}: cannot read as a .npy array: {err}") from None


def _encoded(outputs: Mapping[str, Any], path: str) -> bytes:
    """The outputs as .npy bytes (one output, a path not ending in .npz) or .npz bytes (keyed by output name)."""
    import numpy as np
    buffer = io.BytesIO()
    if path.endswith(".npz"):
        np.savez(buffer, **outputs)
    elif len(outputs) == 1:
        np.save(buffer, next(iter(outputs.values())), allow_pickle=False)
    else:
        raise BrazeError(f"the artifact has {len(outputs)} outputs: write them to a .npz file, not "
                         f"{os.path.basename(path)}")
    return buffer.getvalue()
