"""torch.utils.checkpoint.checkpoint for models with gradient checkpointing switched on.

Checkpointing trades compute for memory: torch drops a segment's activations and recomputes them during backward.
braze keeps the activations, so `checkpoint(fn, *args)` is `fn(*args)`: the same values and gradients (the same
dropout masks too, which torch arranges by replaying the random state), without the memory saving.
"""
from __future__ import annotations

from typing import Any, Callable

from braze.ir.errors import BrazeError


def checkpoint(function: Callable[..., Any], *args: Any, use_reentrant: bool | None = None,
               context_fn: Callable[[], Any] | None = None, determinism_check: str = "default", debug: bool = False,
               preserve_rng_state: bool = True, **kwargs: Any) -> Any:
    """function(*args, **kwargs), run inside the forward context context_fn gives (as torch runs it); the other
    options concern recomputation, which braze does not do."""
    if determinism_check not in ("default", "none"):
        raise BrazeError(f"checkpoint: determinism_check={determinism_check!r} is not supported; supported values: "
                         f"'default', 'none'")
    if context_fn is None:
        return function(*args, **kwargs)
    forward_context, _recompute_context = context_fn()
    with forward_context:
        return function(*args, **kwargs)


__all__ = ["checkpoint"]
