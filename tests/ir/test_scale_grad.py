"""scale_grad: the operand unchanged forward, the cotangent times the scale backward, gone after decompose."""
from __future__ import annotations

import numpy as np
import pytest

from braze.ir.errors import ShapeError
from braze.ir.evaluate import evaluate, vjp_numpy
from braze.ir.registry import get_op
from braze.ir.types import TensorType, float64


def test_scale_grad_weighs_the_cotangent_and_not_the_scale():
    x, scale = np.arange(6.0).reshape(3, 2), np.array([[0.5], [1.0], [0.25]])
    (out,) = evaluate("scale_grad", [x, scale], {})
    g = np.ones((3, 2))
    gx, gscale = vjp_numpy("scale_grad", g, [x, scale], {})
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(gx, g * scale)
    assert gscale is None


def test_scale_grad_scale_must_broadcast_to_the_operand():
    with pytest.raises(ShapeError, match="the scale .* must broadcast to the operand"):
        get_op("scale_grad").infer_types([TensorType((3, 1), float64), TensorType((3, 2), float64)], {})
