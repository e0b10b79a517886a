"""Samples for the fusion region op: one body per kind, checked against the same computation written in numpy.

The operands are float32 (fused has no VJP, so no finite-difference check needs float64), and the bodies declare
float32 inputs; the expected values use the numpy calls the ops' references use, so they agree bit for bit.
"""
import numpy as np

from braze.ir import Graph, GraphBuilder, TensorType, float32

from . import Sample, normal


def _f32(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return normal(shape, seed).astype(np.float32)


def _body(kind: str, shapes: list[tuple[int, ...]], build) -> Graph:
    b = GraphBuilder(kind)
    ins = [b.input(f"in{k}", TensorType(s, float32)) for k, s in enumerate(shapes)]
    return b.finish([build(b, *ins)])


_ELEMENTWISE = _body("elementwise", [(3, 4), (4,)], lambda b, x, y: b.relu(b.add(x, y)))
_GEMM = _body("gemm", [(2, 3), (3, 4), (4,)], lambda b, x, w, c: b.tanh(b.add(b.matmul(x, w), c)))
_LINEAR = _body("gemm", [(5, 3), (4, 3), (4,)], lambda b, x, w, c: b.relu(b.add(b.linear(x, w), c)))


def _softmax_longhand(b: GraphBuilder, x):
    scaled = b.mul(x, b.scalar(0.5, x))
    shifted = b.exp(b.sub(scaled, b.max(scaled, axes=(1,), keepdim=True)))
    return b.div(shifted, b.sum(shifted, axes=(1,), keepdim=True))


_REDUCTION = _body("reduction", [(3, 5)], _softmax_longhand)


def _softmax_expected(x: np.ndarray) -> np.ndarray:
    scaled = x * np.float32(0.5)
    shifted = np.exp(scaled - np.max(scaled, axis=(1,), keepdims=True))
    return shifted / np.sum(shifted, axis=(1,), keepdims=True)


SAMPLES = [
    Sample("fused", (_f32((3, 4), 1), _f32((4,), 2)), {"kind": "elementwise", "body": _ELEMENTWISE, "shape": (3, 4)},
           expected=lambda x, y: np.maximum(x + y, np.float32(0)), torch=lambda x, y: (x + y).relu(),
           label="elementwise"),
    Sample("fused", (_f32((2, 3), 3), _f32((3, 4), 4), _f32((4,), 5)), {"kind": "gemm", "body": _GEMM, "shape": (2, 4)},
           expected=lambda x, w, c: np.tanh(np.matmul(x, w) + c), torch=lambda x, w, c: (x @ w + c).tanh(),
           label="gemm"),
    Sample("fused", (_f32((5, 3), 7), _f32((4, 3), 8), _f32((4,), 9)),
           {"kind": "gemm", "body": _LINEAR, "shape": (5, 4)}, expected=lambda x, w, c: np.maximum(np.matmul(x, w.T) + c, np.float32(0)),
           torch=lambda x, w, c: (x @ w.T + c).relu(), label="gemm-linear"),
    Sample("fused", (_f32((3, 5), 6),), {"kind": "reduction", "body": _REDUCTION, "shape": (3, 5), "axes": (1,)},
           expected=_softmax_expected, torch=lambda x: (x * 0.5).softmax(1), label="reduction"),
]
