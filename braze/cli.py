"""The `braze` command line: `braze demo`, `braze dump`, `braze version`."""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
from typing import Any, Callable, Sequence


def _cmd_version(args: argparse.Namespace) -> int:
    import braze
    print(braze.__version__)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from braze.demo import run
    run(seed=args.seed, steps=args.steps)
    return 0


def load_factory(spec: str) -> Callable[[], Any]:
    """FACTORY from FILE.py in `FILE.py:FACTORY`; the file runs as a fresh module with its folder importable."""
    from braze.ir.errors import BrazeError
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise BrazeError(f"expected FILE.py:FACTORY (a Python file and a function in it), got {spec!r}")
    if not os.path.isfile(path):
        raise BrazeError(f"no such file: {path}")
    stem = os.path.splitext(os.path.basename(path))[0]
    module_name = "_braze_dump_" + "".join(c if c.isalnum() else "_" for c in stem)
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise BrazeError(f"cannot load {path} as Python source")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        module_spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise BrazeError(f"{path} defines no function {name!r}")
    return factory


def parse_shape(text: str) -> tuple[int, ...]:
    """`1x3x32x32` -> (1, 3, 32, 32); `scalar` (or an empty string) is a rank-0 input."""
    if text in ("", "scalar"):
        return ()
    try:
        dims = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a shape like 1x3x32x32, got {text!r}") from None
    if any(d < 0 for d in dims):
        raise argparse.ArgumentTypeError(f"dimensions must be non-negative, got {text!r}")
    return dims


def random_input(shape: tuple[int, ...], dtype: str, rng: Any) -> Any:
    """Example data: standard normal floats, 0/1 integers (valid class or token indices), random bools."""
    import numpy as np
    d = np.dtype(dtype)
    if d.kind == "f":
        return rng.standard_normal(shape).astype(d)
    if d.kind == "b":
        return rng.random(shape) < 0.5
    return rng.integers(0, 2, shape).astype(d)


def _cmd_dump(args: argparse.Namespace) -> int:
    import numpy as np

    import braze
    from braze.ir.errors import BrazeError
    factory = load_factory(args.model)
    braze.manual_seed(args.seed)  # initialization and dropout seeds repeat from run to run
    model = factory()
    if not isinstance(model, braze.nn.Module):
        raise BrazeError(f"{args.model} returned a {type(model).__name__}, not a braze.nn.Module")
    if args.mode == "train":
        model.train()
    else:
        model.eval()
    rng = np.random.default_rng(args.seed)
    inputs = [braze.tensor(random_input(shape, args.dtype, rng)) for shape in args.input]
    if args.stage != "ir":
        _write(_native_code(model, inputs, args), args.output)
        return 0
    text = braze.dump(model, *inputs, passes=args.passes, after_each=args.after_each, format=args.format,
                      provenance=args.provenance)
    _write(text, args.output)
    return 0


def _native_code(model: Any, inputs: list[Any], args: argparse.Namespace) -> str:
    """The optimized LLVM IR or the assembly of the compiled model, whole or of the kernel --kernel names."""
    import braze
    from braze.ir.errors import BrazeError
    if args.after_each or args.format != "text":
        raise BrazeError(f"--stage {args.stage} prints code; it cannot be combined with --after-each or --format")
    compiled = braze.compile(model, *inputs, pipeline=args.passes or "inference")
    text = compiled.llvm_ir(args.kernel) if args.stage == "llvm" else compiled.asm(args.kernel)
    if args.kernel is None:
        comment = ";" if args.stage == "llvm" else "#"
        listing = "".join(f"{comment}   {k.name}: {k.op}\n" for k in compiled.kernels())
        text = f"{comment} entry {compiled.executable.built.entry}, kernels in call order:\n{listing}{text}"
    return text if text.endswith("\n") else text + "\n"


def _write(text: str, path: str | None) -> None:
    """Standard output, or the file `path` written whole (a temporary file renamed into place)."""
    if not path:
        sys.stdout.write(text)
        return
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".braze-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="braze", description="Capture neural-network modules as IR graphs and "
                                                               "compile them to native CPU code.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train a small CNN with LoRA, then trace, optimize, compile and time it")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo.add_argument("--steps", type=int, default=200, help="training steps (default 200)")
    demo.set_defaults(run=_cmd_demo)
    dump = sub.add_parser("dump", help="trace a model built by a factory function and print its IR or its code",
                          description="Build the model by calling FACTORY() from FILE.py, trace it on random inputs "
                                      "of the given shapes and print (or write) the graph, or with --stage the "
                                      "compiled LLVM IR or assembly.")
    dump.add_argument("model", metavar="FILE.py:FACTORY", help="a Python file and a function in it returning a Module")
    dump.add_argument("--input", action="append", type=parse_shape, required=True, metavar="SHAPE",
                      help="an input shape like 1x3x32x32; repeat for several inputs")
    dump.add_argument("--dtype", default="float32", choices=["float32", "float64", "int32", "int64", "bool"],
                      help="element type of the inputs (default float32)")
    dump.add_argument("--format", default="text", choices=["text", "dot", "summary"],
                      help="IR text, a Graphviz dot drawing, or op counts and sizes (default text)")
    dump.add_argument("--mode", default="eval", choices=["train", "eval"],
                      help="trace the model in training or evaluation mode (default eval)")
    dump.add_argument("--provenance", action="store_true", help="show each node's module path and source line")
    dump.add_argument("--seed", type=int, default=0, help="seed of the weights, dropout and random inputs (default 0)")
    dump.add_argument("--passes", metavar="PIPELINE",
                      help="optimize the traced graph with a pass pipeline: 'inference' or pass names joined by commas")
    dump.add_argument("--after-each", action="store_true",
                      help="show the traced graph and the graph after every pass, not only the last one")
    dump.add_argument("--stage", default="ir", choices=["ir", "llvm", "asm"],
                      help="what to print: the IR graph (default), or the compiled graph's optimized LLVM IR or "
                           "host assembly (after the --passes pipeline, 'inference' by default)")
    dump.add_argument("--kernel", metavar="NAME", help="with --stage llvm|asm: only this kernel (names are listed "
                                                      "at the top of the whole module's output)")
    dump.add_argument("-o", "--output", metavar="OUT", help="write to this file instead of standard output")
    dump.set_defaults(run=_cmd_dump)
    version = sub.add_parser("version", help="print the braze version")
    version.set_defaults(run=_cmd_version)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except BrokenPipeError:  # `braze ... | head` closes our stdout early
        return 0
    except Exception as exc:  # a clean message instead of a traceback for braze's own errors
        from braze.ir.errors import BrazeError
        if isinstance(exc, BrazeError):
            print(f"braze: error: {exc}", file=sys.stderr)
            return 2
        raise
