"""torch.cuda for code that asks whether a GPU is there (`"cuda" if torch.cuda.is_available() else "cpu"`): braze
runs on the CPU, so there is none; seeding it does nothing, as torch does nothing without CUDA."""
from __future__ import annotations


def is_available() -> bool:
    """False: braze has no CUDA devices."""
    return False


def device_count() -> int:
    """0: braze has no CUDA devices."""
    return 0


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """False: there is no CUDA device to compute in bfloat16."""
    return False


def manual_seed(seed: int) -> None:
    """Nothing to seed (torch ignores the call without CUDA too); braze.manual_seed seeds braze's generator."""


def manual_seed_all(seed: int) -> None:
    """Nothing to seed, as manual_seed."""


__all__ = ["is_available", "device_count", "is_bf16_supported", "manual_seed", "manual_seed_all"]
