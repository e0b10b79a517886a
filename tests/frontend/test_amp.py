"""torch.autocast regions: disabled or float32/float64 ones run unchanged, lower-precision ones are refused."""
from __future__ import annotations

import pytest

import braze
import braze.amp


def _double(x: braze.Tensor) -> braze.Tensor:
    with braze.autocast(device_type=x.device.type, enabled=False):
        return x * 2


def test_autocast_disabled_region_computes_as_outside() -> None:
    x = braze.ones(2, dtype=braze.float64, requires_grad=True)
    y = _double(x)
    assert (y.dtype, y.tolist(), y.requires_grad) == (braze.float64, [2.0, 2.0], True)


def test_autocast_is_a_decorator_and_the_amp_module_has_it() -> None:
    @braze.amp.autocast("cpu", dtype=braze.float32)
    def f() -> bool:
        return braze.is_autocast_enabled()
    assert braze.amp.autocast is braze.autocast and f() is False


@pytest.mark.parametrize("dtype, shown", [(None, "float16/bfloat16"), (braze.bfloat16, "braze.bfloat16"),
                                          (braze.float16, "braze.float16")])
def test_autocast_to_16_bit_floats_is_refused_naming_the_dtype(dtype: object, shown: str) -> None:
    with pytest.raises(braze.BrazeError, match=f"autocast: dtype={shown}.* is not supported: braze computes in "
                                               f"float32 and float64 only"):
        braze.autocast("cpu", dtype=dtype)


def test_autocast_device_type_must_be_a_string() -> None:
    with pytest.raises(braze.BrazeError, match="autocast: device_type must be a device type string"):
        braze.autocast(braze.device("cpu"), enabled=False)
