"""`braze cache info|clear`: where the compile cache is, what it holds and its size cap; or empty it."""
from __future__ import annotations

import argparse
from typing import Any, Callable


def add_command(sub: Any, command: Callable[..., argparse.ArgumentParser]) -> None:
    """Register cache (with its info and clear actions) on the `braze` subcommand parsers."""
    cache = command(sub, "cache", "show or clear the compile cache",
                    "info: the cache directory (BRAZE_CACHE_DIR), whether it is used (BRAZE_CACHE), its entries, "
                    "their size and the size cap (BRAZE_CACHE_MAX_MB; least recently used entries are deleted past "
                    "it), and the conv kernel choices measured with BRAZE_TUNE=1 for this CPU. clear: delete every "
                    "entry (the measured choices are kept).",
                    "braze cache info")
    cache.add_argument("action", choices=["info", "clear"], help="show the cache, or delete its entries")
    cache.set_defaults(run=_cmd_cache)


def _cmd_cache(args: argparse.Namespace) -> int:
    from braze.codegen import cache
    if args.action == "clear":
        directory = cache.cache_dir()
        print(f"removed {cache.clear()} entries from {directory}")
    else:
        print(cache.info())
        print(_tuning())
    return 0


def _tuning() -> str:
    """The `tuning` line: whether BRAZE_TUNE is on, and the conv shapes whose kernel was measured on this CPU."""
    from braze.codegen import conv_tuning, host_target
    identity = host_target().identity
    state = "on" if conv_tuning.enabled() else f"off ({conv_tuning.TUNE_ENV}=1 turns it on)"
    return (f"tuning   {state}; {len(conv_tuning.entries(identity))} conv shapes measured on this CPU "
            f"({conv_tuning.table_path(identity)})")
