"""torch.autocast / torch.amp.autocast for code that turns mixed precision on or off around a region.

braze computes in float32 and float64 only, so an autocast region never changes a dtype: disabled
(`enabled=False`, as rotary-embedding code uses it to keep float32) or asking for float32/float64 it runs the region
unchanged, and asking for float16/bfloat16 (torch's default on every device) is refused, naming the argument.
"""
from __future__ import annotations

import contextlib

from braze.ir.errors import BrazeError
from braze.ir.types import DType, float32, float64

_COMPUTE = (float32, float64)


class autocast(contextlib.ContextDecorator):  # noqa: N801  (torch's name)
    """A region (context manager or decorator) in which torch would compute in lower precision; braze runs it as
    it is. device_type is torch's ("cpu", "cuda", ...); dtype must be float32 or float64 unless enabled=False."""

    def __init__(self, device_type: str, dtype: DType | None = None, enabled: bool = True,
                 cache_enabled: bool | None = None) -> None:
        if not isinstance(device_type, str):
            raise BrazeError(f"autocast: device_type must be a device type string such as 'cpu', got "
                             f"{type(device_type).__name__}")
        if enabled and not any(dtype is d for d in _COMPUTE):
            asked = "float16/bfloat16 (the default)" if dtype is None else repr(dtype)
            raise BrazeError(f"autocast: dtype={asked} is not supported: braze computes in float32 and float64 "
                             f"only; pass dtype=braze.float32 or enabled=False")
        self.device_type, self.dtype, self.enabled = device_type, dtype, bool(enabled)

    def __enter__(self) -> autocast:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def is_autocast_enabled(device_type: str | None = None) -> bool:
    """Always False: no region ever computes in lower precision."""
    return False


__all__ = ["autocast", "is_autocast_enabled"]
