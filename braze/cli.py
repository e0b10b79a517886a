"""The `braze` command line: `braze demo`, `braze version`."""
from __future__ import annotations

import argparse
import sys
from typing import Sequence


def _cmd_version(args: argparse.Namespace) -> int:
    import braze
    print(braze.__version__)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from braze.demo import run
    run(seed=args.seed, steps=args.steps)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="braze", description="Capture neural-network modules as IR graphs and "
                                                               "compile them to native CPU code.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train a small model eagerly and show its IR")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo.add_argument("--steps", type=int, default=200, help="training steps (default 200)")
    demo.set_defaults(run=_cmd_demo)
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
