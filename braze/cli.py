"""The `braze` command line: `braze dump`, `export`, `info`, `run`, `bench`, `serve`, `cache`, `demo`, `version` and
`--version`.

Every error is one line, `braze: error: ...`, with a non-zero exit status and no traceback unless --debug is
given; an exception raised by the user's own code (the model file, its factory, its forward) is shown as the
traceback of the user's frames, then that line.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn, Sequence

from braze.cli_model import (UserCodeError, build_model, check_arity, parse_shape, random_inputs, run_user_code,
                             write_output)
from braze.dumping import TRAINING_STAGES, training_stage
from braze.ir.errors import BrazeError

EXIT_ERROR, EXIT_USER_CODE, EXIT_INTERNAL = 2, 1, 3


def _cmd_version(args: argparse.Namespace) -> int:
    import braze
    print(braze.__version__)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from braze.demo import run
    run(seed=args.seed, steps=args.steps)
    return 0


def _cmd_dump(args: argparse.Namespace) -> int:
    import braze
    if args.kernel is not None and args.stage == "ir":
        raise BrazeError("--kernel names a kernel of the compiled code: add --stage llvm or --stage asm")
    if args.timings and (args.stage != "ir" or args.after_each or args.format != "text"):
        raise BrazeError("--timings prints the compile-time breakdown; it cannot be combined with --stage, "
                         "--after-each or --format")
    if args.stage in TRAINING_STAGES and (args.mode != "train" or args.model.endswith(".braze")):
        raise BrazeError(f"--stage {args.stage} shows a graph of the compiled training step: it needs --mode train "
                         f"and a FILE.py:FACTORY model")
    if args.model.endswith(".braze"):
        return _dump_artifact(args)
    if not args.input:
        raise BrazeError(f"{args.model}: give --input SHAPE for every input of the model's forward")
    model = build_model(args.model, args.seed)
    if args.mode == "train":
        model.train()
    else:
        model.eval()
    check_arity(args.model, model, len(args.input))
    inputs = [braze.tensor(x) for x in random_inputs(args.input, args.dtype, args.seed)]
    if args.timings:
        compiled = run_user_code(args.model, braze.compile, model, *inputs, pipeline=args.passes or "inference")
        write_output(f"{compiled.timings}\n", args.output)
        return 0
    if args.stage in TRAINING_STAGES:
        graph = run_user_code(args.model, _training_graph, model, inputs, args)
        write_output(braze.dump(graph, passes=args.passes, after_each=args.after_each, format=args.format,
                                provenance=args.provenance), args.output)
        return 0
    if args.stage != "ir":
        write_output(run_user_code(args.model, _native_code, model, inputs, args), args.output)
        return 0
    text = run_user_code(args.model, lambda: braze.dump(model, *inputs, passes=args.passes,
                                                        after_each=args.after_each, format=args.format,
                                                        provenance=args.provenance))
    write_output(text, args.output)
    return 0


def _dump_artifact(args: argparse.Namespace) -> int:
    """`braze dump FILE.braze`: the artifact's graph (after --passes, if given) or its compiled code."""
    import braze
    from braze.artifacts import read
    if args.input:
        raise BrazeError(f"{args.model} has its input types in it: give no --input")
    if args.timings:
        write_output(f"{braze.load(args.model).timings}\n", args.output)
        return 0
    if args.stage != "ir":
        _check_code_options(args)
        write_output(_code_listing(braze.load(args.model), args), args.output)
        return 0
    graph = read(args.model).graph
    write_output(braze.dump(graph, passes=args.passes, after_each=args.after_each, format=args.format,
                            provenance=args.provenance), args.output)
    return 0


def _check_code_options(args: argparse.Namespace) -> None:
    if args.after_each or args.format != "text":
        raise BrazeError(f"--stage {args.stage} prints code; it cannot be combined with --after-each or --format")


def _training_graph(model: Any, inputs: list[Any], args: argparse.Namespace) -> Any:
    """The --stage graph of a training step on the inputs and a random target for --loss, with --optimizer."""
    import numpy as np

    import braze
    import braze.nn.functional as F
    output = braze.trace(model, *inputs).outputs[0].type  # traced, so the model's buffers do not move
    rng = np.random.default_rng(args.seed)
    if args.loss == "cross_entropy":  # class indices along the output's dim 1, as cross_entropy reads them
        target = rng.integers(0, output.shape[1], (output.shape[0], *output.shape[2:]))
    else:
        target = rng.standard_normal(output.shape).astype(output.dtype.numpy)
    optimizer = {"sgd": braze.optim.SGD, "adam": braze.optim.Adam, "adamw": braze.optim.AdamW}[args.optimizer]
    return training_stage(model, getattr(F, args.loss), optimizer(model.parameters()), [*inputs, target], args.stage)


def _native_code(model: Any, inputs: list[Any], args: argparse.Namespace) -> str:
    """The optimized LLVM IR or the assembly of the compiled model, whole or of the kernel --kernel names."""
    import braze
    _check_code_options(args)
    compiled = braze.compile(model, *inputs, pipeline=args.passes or "inference")
    return _code_listing(compiled, args)


def _code_listing(compiled: Any, args: argparse.Namespace) -> str:
    """The LLVM IR or assembly of a compiled module, headed by its kernel list when it is shown whole."""
    text = compiled.llvm_ir(args.kernel) if args.stage == "llvm" else compiled.asm(args.kernel)
    if args.kernel is None:
        comment = ";" if args.stage == "llvm" else "#"
        listing = "".join(f"{comment}   {k.name}: {k.op}\n" for k in compiled.kernels())
        text = f"{comment} entry {compiled.executable.built.entry}, kernels in call order:\n{listing}{text}"
    return text if text.endswith("\n") else text + "\n"


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `braze: error: <message> (see braze <command> --help)`."""

    def error(self, message: str) -> NoReturn:
        print(f"braze: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_ERROR)


def command(sub: Any, name: str, help: str, description: str, example: str) -> argparse.ArgumentParser:
    """A subcommand parser whose --help ends with an example; --debug shows tracebacks."""
    parser = sub.add_parser(name, help=help, description=description, epilog=f"example:\n  {example}",
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the full traceback of an error")
    return parser


def _add_dump(sub: Any) -> None:
    dump = command(sub, "dump", "trace a model built by a factory function and print its IR or its code",
                   "Build the model by calling FACTORY() from FILE.py, trace it on random inputs of the given "
                   "shapes and print (or write) the graph, or with --stage the compiled LLVM IR or assembly. "
                   "A .braze file shows its stored graph, or its compiled code.",
                   "braze dump model.py:make --input 1x3x32x32 --passes inference --after-each")
    dump.add_argument("model", metavar="FILE.py:FACTORY|FILE.braze",
                      help="a Python file and a function in it returning a Module, or a .braze artifact")
    dump.add_argument("--input", action="append", type=parse_shape, default=[], metavar="SHAPE",
                      help="an input shape like 1x3x32x32; repeat for several inputs (not for a .braze file)")
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
    dump.add_argument("--stage", default="ir", choices=["ir", "llvm", "asm", *TRAINING_STAGES],
                      help="what to print: the IR graph (default), or the compiled graph's optimized LLVM IR or "
                           "host assembly (after the --passes pipeline, 'inference' by default); with --mode train, "
                           "a graph of the compiled training step: forward (model and loss), backward (with the "
                           "gradients) or step (with the optimizer's update)")
    dump.add_argument("--loss", default="cross_entropy", choices=["cross_entropy", "mse_loss"],
                      help="with --stage forward|backward|step: the loss, on a random target (default cross_entropy)")
    dump.add_argument("--optimizer", default="sgd", choices=["sgd", "adam", "adamw"],
                      help="with --stage step: the optimizer, with torch's default hyper-parameters (default sgd)")
    dump.add_argument("--kernel", metavar="NAME", help="with --stage llvm|asm: only this kernel (names are listed "
                                                      "at the top of the whole module's output)")
    dump.add_argument("--timings", action="store_true",
                      help="compile (after the --passes pipeline, 'inference' by default) and print the wall time "
                           "of every compile stage instead of the IR")
    dump.add_argument("-o", "--output", metavar="OUT", help="write to this file instead of standard output")
    dump.set_defaults(run=_cmd_dump)


def build_parser() -> argparse.ArgumentParser:
    import braze
    from braze import cli_artifact, cli_bench, cli_cache, cli_serve
    parser = _Parser(prog="braze", description="Capture neural-network modules as IR graphs, compile them to "
                                               "native CPU code and export merged inference graphs.")
    parser.add_argument("--version", action="version", version=f"braze {braze.__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_dump(sub)
    cli_artifact.add_commands(sub, command)
    cli_bench.add_command(sub, command)
    cli_cache.add_command(sub, command)
    cli_serve.add_command(sub, command)
    demo = command(sub, "demo", "train a small CNN with LoRA, then trace, optimize, compile and time it",
                   "Train a small CNN with LoRA adapters, then trace, optimize, compile and time it.",
                   "braze demo --steps 50")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo.add_argument("--steps", type=int, default=200, help="training steps (default 200)")
    demo.set_defaults(run=_cmd_demo)
    version = command(sub, "version", "print the braze version", "Print the braze version.", "braze version")
    version.set_defaults(run=_cmd_version)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (0, or 1 for the user's exception, 2 for an error)."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except BrokenPipeError:  # `braze ... | head` closes our stdout early
        return 0
    except KeyboardInterrupt:
        print("braze: error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        return _report(exc)


def _report(exc: Exception) -> int:
    """Print the one-line error (after the user's traceback for their own exception); the exit status."""
    if isinstance(exc, UserCodeError):
        sys.stderr.write(exc.user_traceback)
        status = EXIT_USER_CODE
    elif isinstance(exc, BrazeError):
        status = EXIT_ERROR
    else:
        exc, status = RuntimeError(f"internal error: {type(exc).__name__}: {exc}"), EXIT_INTERNAL
    lines = str(exc).splitlines() or [type(exc).__name__]
    more = " (run with --debug for the details)" if len(lines) > 1 or status == EXIT_INTERNAL else ""
    print(f"braze: error: {lines[0]}{more}", file=sys.stderr)
    return status
