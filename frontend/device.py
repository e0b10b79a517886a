"""Device: where a tensor lives. Every device is host memory, but identity and migration are real.

A tensor carries its device; ops refuse operands from different devices, and moving a tensor to another
device copies it (recorded by autodiff, so a moved tensor that requires grad is an intermediate).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from braze.ir.errors import BrazeError

KINDS = ("cpu",)
# torch's other device kinds: recognised as devices (so `.to("cuda")` says the device is unknown, rather than
# "not a dtype"), then refused by Device.
FOREIGN_KINDS = ("cuda", "mps", "xpu", "meta", "xla", "hip", "npu")


@dataclass(frozen=True, slots=True)
class Device:
    """A compute device: a kind ("cpu") and an index; `str(Device())` is "cpu:0".

    Constructed as torch.device is: `Device("cpu")`, `Device("cpu:1")`, `Device("cpu", 1)`, `Device(other)`.
    """

    kind: str = "cpu"
    index: int | None = 0

    def __post_init__(self) -> None:
        if isinstance(self.kind, Device):
            object.__setattr__(self, "index", self.kind.index if self.index in (None, 0) else self.index)
            object.__setattr__(self, "kind", self.kind.kind)
        elif isinstance(self.kind, str) and ":" in self.kind:
            kind, _, index = self.kind.partition(":")
            if not index.isdigit():
                raise BrazeError(f"Device: cannot parse {self.kind!r}; expected 'kind' or 'kind:index'")
            object.__setattr__(self, "kind", kind)
            object.__setattr__(self, "index", int(index))
        if self.index is None:
            object.__setattr__(self, "index", 0)
        if self.kind not in KINDS:
            raise BrazeError(f"Device: unknown device kind {self.kind!r} (known: {', '.join(KINDS)})")
        if not isinstance(self.index, int) or isinstance(self.index, bool) or self.index < 0:
            raise BrazeError(f"Device: the index must be a non-negative int, got {self.index!r}")

    @property
    def type(self) -> str:
        """The device kind, as torch.device.type."""
        return self.kind

    def __str__(self) -> str:
        return f"{self.kind}:{self.index}"

    def __repr__(self) -> str:
        return f"Device({self.kind!r}, {self.index})"


CPU = Device()


def as_device(value: Any) -> Device:
    """A Device from a Device, "cpu" / "cpu:1", or None (the default device, cpu:0)."""
    if value is None:
        return CPU
    if isinstance(value, Device):
        return value
    if isinstance(value, str):
        return Device(value)
    raise BrazeError(f"Device: expected a Device or a string like 'cpu:0', got {type(value).__name__}")


def is_device_like(value: Any) -> bool:
    """True for a Device or a string that names one (used where an argument may be a device or a dtype)."""
    if isinstance(value, Device):
        return True
    return isinstance(value, str) and value.partition(":")[0] in KINDS + FOREIGN_KINDS
