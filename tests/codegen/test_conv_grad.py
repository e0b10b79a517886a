"""conv2d_grad_weight and conv2d_grad_input kernels against the numpy reference (and the direct loops of the
registry samples) on edge geometries: batch 1 and empty, one channel, odd and prime sizes, strides, padding,
dilation and groups; float32 (GEMM) and float64 (the input gradient on conv_tiled's register tile, the weight
gradients by direct loops); 3 threads give the bytes of 1; forced AVX2 and SSE widths."""
from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest

from braze.codegen import host_target
from braze.ir.ops.conv import conv2d_output_shape
from tests.codegen.lowering_harness import check_node, force_cpu, make_node, run_node
from tests.ir.samples.conv import naive_grad_input, naive_grad_weight

X86 = llvm.get_process_triple().startswith("x86_64")
HOST_FEATURES = set(llvm.get_host_cpu_features().flatten().split(","))

# (n, c, h, w, c_out, kh, kw, stride, padding, dilation, groups)
GEOMETRIES = [
    (1, 1, 4, 4, 1, 1, 1, (1, 1), (0, 0), (1, 1), 1),
    (2, 3, 5, 7, 4, 3, 3, (1, 1), (1, 1), (1, 1), 1),
    (3, 4, 9, 8, 6, 3, 2, (2, 2), (1, 2), (1, 1), 2),
    (2, 6, 11, 13, 9, 3, 3, (2, 1), (2, 0), (2, 1), 3),
    (1, 5, 17, 16, 7, 5, 5, (2, 2), (2, 2), (1, 1), 1),
    (2, 2, 7, 5, 3, 2, 3, (3, 2), (0, 1), (1, 2), 1),
    (1, 2, 7, 10, 3, 3, 3, (1, 3), (1, 1), (1, 1), 1),  # stride 3 along W: col2im one element at a time
    (4, 32, 16, 16, 64, 3, 3, (2, 2), (1, 1), (1, 1), 1),
    # output rows of a multiple or a divisor of the vector width (here 16, 32; 2, 4, 8): the weight gradient packs
    # its input W positions at a time
    (2, 3, 6, 16, 5, 3, 3, (1, 1), (1, 1), (1, 1), 1),
    (2, 4, 9, 33, 6, 3, 3, (2, 2), (1, 1), (1, 2), 2),
    (1, 2, 5, 34, 3, 2, 3, (1, 1), (0, 0), (1, 1), 1),
    (2, 3, 8, 8, 4, 3, 3, (2, 2), (1, 1), (1, 1), 1),
    (1, 2, 10, 4, 3, 3, 3, (1, 1), (0, 0), (1, 1), 1),
    (0, 3, 5, 5, 4, 3, 3, (1, 1), (1, 1), (1, 1), 1),
    (2, 4, 6, 6, 0, 3, 3, (1, 1), (1, 1), (1, 1), 2),
]


def _operands(geometry, dtype, seed: int = 0):
    n, c, h, w, co, kh, kw, stride, padding, dilation, groups = geometry
    rng = np.random.default_rng(seed)
    attrs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    out = conv2d_output_shape("test", (n, c, h, w), (co, c // groups, kh, kw), stride, padding, dilation, groups)
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    g = rng.standard_normal(out).astype(dtype)
    weight = rng.standard_normal((co, c // groups, kh, kw)).astype(dtype)
    return x, g, weight, attrs


def _check_both(geometry, dtype, seed: int = 0) -> None:
    x, g, w, attrs = _operands(geometry, dtype, seed)
    terms = max(g.size, 1)
    check_node(make_node("conv2d_grad_weight", x, g, weight_shape=w.shape, **attrs), [x, g], terms=terms,
               scale=np.maximum(naive_grad_weight(np.abs(x), np.abs(g), w.shape, **attrs), 1.0))
    check_node(make_node("conv2d_grad_input", g, w, input_shape=x.shape, **attrs), [g, w], terms=terms,
               scale=np.maximum(naive_grad_input(np.abs(g), np.abs(w), x.shape, **attrs), 1.0))


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
def test_conv2d_gradients_float32_match_reference(geometry) -> None:
    _check_both(geometry, np.float32)


@pytest.mark.parametrize("cpu", [None, "haswell"])
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
def test_conv2d_gradients_float64_match_reference(geometry, cpu, monkeypatch) -> None:
    force_cpu(cpu, monkeypatch)
    _check_both(geometry, np.float64)


@pytest.mark.parametrize("geometry", [(1, 2, 3, 40, 3, 1, 30, (1, 1), (0, 5), (1, 1), 1),
                                      (2, 2, 4, 45, 2, 2, 27, (1, 2), (1, 3), (1, 1), 2)], ids=str)
def test_conv2d_gradients_float64_of_kernels_wider_than_a_tile(geometry) -> None:
    """30 and 27 kernel columns: more than the tile unrolls and more than its accumulators hold (IR text may carry
    any kernel), so the columns loop and take several tiles."""
    _check_both(geometry, np.float64)


def test_conv2d_gradients_match_direct_loops() -> None:
    """An independent reference: the registry samples' loops over every tap (not the im2col of ir/ops/conv.py)."""
    x, g, w, attrs = _operands(GEOMETRIES[3], np.float64, seed=5)
    got_w = run_node(make_node("conv2d_grad_weight", x, g, weight_shape=w.shape, **attrs), [x, g])[0]
    got_x = run_node(make_node("conv2d_grad_input", g, w, input_shape=x.shape, **attrs), [g, w])[0]
    np.testing.assert_allclose(got_w, naive_grad_weight(x, g, w.shape, **attrs), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_x, naive_grad_input(g, w, x.shape, **attrs), rtol=1e-12, atol=1e-12)


def test_conv2d_grad_input_blocks_of_output_rows_cover_the_image(monkeypatch) -> None:
    """Column blocks of a few output rows (a short last block) add up to the whole-image result."""
    from braze.codegen import conv_grad
    monkeypatch.setattr(conv_grad, "COLUMN_BLOCK_BYTES", 4 * 27 * 9 * 2)  # 2 of 9 output rows per block
    _check_both((2, 3, 9, 9, 5, 3, 3, (1, 1), (1, 1), (1, 1), 1), np.float32, seed=3)


# Shapes no other test compiles: the harness caches kernels by node, not by target.
# all but the first geometry of each have output rows a multiple or a divisor of the width (packed by rows)
FORCED = {"haswell": (8, [(2, 3, 7, 9, 5, 3, 3, (2, 2), (1, 1), (1, 1), 1),
                          (2, 5, 7, 16, 3, 3, 3, (2, 2), (1, 1), (1, 1), 1),
                          (1, 3, 4, 18, 2, 3, 3, (1, 1), (1, 0), (1, 1), 1),
                          (2, 3, 8, 8, 4, 3, 3, (2, 2), (1, 1), (1, 1), 1)]),
          "nehalem": (4, [(1, 4, 6, 7, 6, 3, 3, (1, 2), (1, 0), (1, 1), 2),
                          (2, 3, 5, 8, 4, 3, 3, (1, 2), (1, 1), (1, 1), 1)])}


@pytest.mark.skipif(not X86 or "+avx2" not in HOST_FEATURES, reason="needs an AVX2 host")
@pytest.mark.parametrize("cpu", sorted(FORCED))
def test_conv2d_gradients_on_forced_vector_widths(cpu: str, monkeypatch) -> None:
    monkeypatch.setenv("BRAZE_CPU", cpu)
    width, geometries = FORCED[cpu]
    assert host_target().vector_width == width
    for seed, geometry in enumerate(geometries):
        _check_both(geometry, np.float32, seed)


# (geometry, slices): slices of one image, of a prime count of images, of a batch a vector width long, with
# groups, strides and padding; an empty batch cut into two empty slices.
SLICED = [((3, 3, 5, 7, 4, 3, 3, (1, 1), (1, 1), (1, 1), 1), 3),
          ((6, 4, 9, 8, 6, 3, 2, (2, 2), (1, 2), (1, 1), 2), 2),
          ((16, 5, 6, 6, 17, 3, 3, (1, 1), (1, 1), (1, 1), 1), 8),
          ((0, 3, 5, 5, 4, 3, 3, (1, 1), (1, 1), (1, 1), 1), 2)]


def _check_slices(geometry, slices: int, dtype, seed: int = 0) -> np.ndarray:
    """Every slice's partial weight gradient against the reference of its images alone; 3 threads give the bytes
    of 1 (check_node)."""
    x, g, w, attrs = _operands(geometry, dtype, seed)
    per = x.shape[0] // slices
    scale = np.stack([naive_grad_weight(np.abs(x[s * per:(s + 1) * per]), np.abs(g[s * per:(s + 1) * per]), w.shape,
                                        **attrs) for s in range(slices)])
    node = make_node("conv2d_grad_weight_slices", x, g, weight_shape=w.shape, slices=slices, **attrs)
    return check_node(node, [x, g], terms=max(g.size // max(slices, 1), 1), scale=np.maximum(scale, 1.0))[0]


@pytest.mark.parametrize("case", SLICED, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: d.__name__)
def test_conv2d_grad_weight_slices_match_reference(case, dtype) -> None:
    _check_slices(*case, dtype)


def test_conv2d_grad_weight_slices_sum_to_the_whole_gradient() -> None:
    geometry, slices = SLICED[2]
    x, g, w, attrs = _operands(geometry, np.float64, seed=4)
    parts = _check_slices(geometry, slices, np.float64, seed=4)
    np.testing.assert_allclose(parts.sum(axis=0), naive_grad_weight(x, g, w.shape, **attrs), rtol=1e-12, atol=1e-12)


FORCED_SLICES = {"haswell": ((9, 3, 7, 9, 5, 3, 3, (2, 2), (1, 1), (1, 1), 1), 3),
                 "znver3": ((4, 2, 11, 6, 9, 3, 3, (1, 1), (1, 1), (1, 1), 1), 4)}


@pytest.mark.skipif(not X86 or "+avx2" not in HOST_FEATURES, reason="needs an AVX2 host")
@pytest.mark.parametrize("cpu", sorted(FORCED_SLICES))
def test_conv2d_grad_weight_slices_on_the_avx2_path(cpu: str, monkeypatch) -> None:
    monkeypatch.setenv("BRAZE_CPU", cpu)
    assert host_target().vector_width == 8
    _check_slices(*FORCED_SLICES[cpu], np.float32, seed=2)
