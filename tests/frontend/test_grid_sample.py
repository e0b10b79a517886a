"""F.affine_grid and F.grid_sample against PyTorch: every mode x padding_mode x align_corners on grids inside the
image, exactly on its edges and pixel centres and far outside it, values in float32 and float64 and gradients of
the input and the grid in float64; 5-D (volumetric) sampling; torch's warnings and errors; and a spatial transformer
network (localization net -> theta -> affine_grid -> grid_sample), written once for both libraries, compiled.

Tolerances: float64 values and gradients within rtol 1e-10, atol 1e-12 (the same arithmetic, summed in another
order: 6e-15 seen); float32 values within rtol 1e-5, atol 5e-6 (7e-7 seen: bicubic sums 16 weighted taps of values
near 1 in another order than torch).
"""
from __future__ import annotations

import itertools
import warnings
from typing import Any

import numpy as np
import pytest

import braze
import braze.nn.functional as F
from braze import ir

torch = pytest.importorskip("torch")
tF = torch.nn.functional

RNG = np.random.default_rng(20240712)
MODES = ("bilinear", "nearest", "bicubic")
PADDINGS = ("zeros", "border", "reflection")
COMBINATIONS = list(itertools.product(MODES, PADDINGS, (False, True)))
RTOL64, ATOL64 = 1e-10, 1e-12
RTOL32, ATOL32 = 1e-5, 5e-6


def _edges_and_outside(h: int, w: int) -> np.ndarray:
    """(1, 8, 8, 2) normalized locations: -1, 1 and the pixel centres of both conventions, points just inside and
    outside the borders, and points far outside (reflected many times, or clipped)."""
    xs = np.concatenate([[-1.0, 1.0, -1.0 + 1.0 / w, 1.0 - 1.0 / w, 0.0, 2.0 / (w - 1) - 1.0], [-1.02, 1.03]])
    ys = np.concatenate([[-1.0, 1.0, -1.0 + 1.0 / h, 1.0 - 1.0 / h, 0.3, -3.7], [11.25, -1e3 - 0.1]])
    return np.stack(np.meshgrid(xs, ys), -1)[None]


def _grids(h: int, w: int) -> np.ndarray:
    """A batch of two grids: random locations in [-1.6, 1.6], and the edges and far-outside points."""
    return np.concatenate([RNG.uniform(-1.6, 1.6, (1, 8, 8, 2)), _edges_and_outside(h, w)])


INPUT = RNG.standard_normal((2, 3, 5, 6))
GRID = _grids(5, 6)


def _sample(lib: Any, x: Any, g: Any, mode: str, padding: str, align: bool) -> Any:
    return lib.nn.functional.grid_sample(x, g, mode=mode, padding_mode=padding, align_corners=align)


@pytest.mark.parametrize("mode,padding,align", COMBINATIONS)
@pytest.mark.parametrize("bits", [32, 64])
def test_grid_sample_values_match_torch(mode: str, padding: str, align: bool, bits: int) -> None:
    dtype = np.float32 if bits == 32 else np.float64
    x, g = INPUT.astype(dtype), GRID.astype(dtype)
    got = _sample(braze, braze.tensor(x), braze.tensor(g), mode, padding, align).numpy()
    want = _sample(torch, torch.tensor(x), torch.tensor(g), mode, padding, align).numpy()
    assert got.dtype == want.dtype and got.shape == want.shape == (2, 3, 8, 8)
    rtol, atol = (RTOL32, ATOL32) if bits == 32 else (RTOL64, ATOL64)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("mode,padding,align", COMBINATIONS)
def test_grid_sample_gradients_of_input_and_grid_match_torch(mode: str, padding: str, align: bool) -> None:
    """Random locations in and around the image, so none sits on a pixel boundary (a kink of the interpolation)
    or on a border of the clipping and reflection."""
    x, g = RNG.standard_normal((2, 2, 4, 5)), RNG.uniform(-2.5, 2.5, (2, 3, 7, 2))
    weights = RNG.standard_normal((2, 2, 3, 7))
    grads = []
    for lib in (braze, torch):
        leaves = [lib.tensor(x, requires_grad=True), lib.tensor(g, requires_grad=True)]
        (_sample(lib, *leaves, mode, padding, align) * lib.tensor(weights)).sum().backward()
        grads.append([leaf.grad.numpy() for leaf in leaves])
    for got, want in zip(*grads):
        np.testing.assert_allclose(got, want, rtol=RTOL64, atol=ATOL64)
    if mode == "nearest":
        assert not grads[0][1].any()  # zeros (not None), as torch


@pytest.mark.parametrize("mode,padding,align", [c for c in COMBINATIONS if c[0] != "bicubic"])
def test_volumetric_grid_sample_values_and_gradients_match_torch(mode: str, padding: str, align: bool) -> None:
    x, g = RNG.standard_normal((2, 2, 3, 4, 5)), RNG.uniform(-1.8, 1.8, (2, 2, 3, 4, 3))
    weights = RNG.standard_normal((2, 2, 2, 3, 4))
    results = []
    for lib in (braze, torch):
        leaves = [lib.tensor(x, requires_grad=True), lib.tensor(g, requires_grad=True)]
        out = _sample(lib, *leaves, mode, padding, align)
        (out * lib.tensor(weights)).sum().backward()
        results.append([out.detach().numpy()] + [leaf.grad.numpy() for leaf in leaves])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=RTOL64, atol=ATOL64)


def test_grid_sample_of_infinite_and_nan_locations_is_torch_s() -> None:
    """Clipping takes a NaN (and an infinite location reflected) to pixel 0, as torch; the zeros padding and the
    bicubic weights of such a location give NaN, as torch."""
    x = RNG.standard_normal((1, 2, 3, 4))
    g = np.array([[[[np.inf, 0.0], [-np.inf, 0.2], [np.nan, 0.1], [1e30, 0.0]],
                   [[0.3, np.inf], [-0.5, -np.inf], [0.1, np.nan], [np.nan, np.nan]]]])
    for mode, padding, align in COMBINATIONS:
        got = _sample(braze, braze.tensor(x), braze.tensor(g), mode, padding, align).numpy()
        want = _sample(torch, torch.tensor(x), torch.tensor(g), mode, padding, align).numpy()
        np.testing.assert_allclose(got, want, rtol=RTOL64, atol=ATOL64, err_msg=f"{mode} {padding} {align}")


def test_grid_sample_of_an_image_with_a_single_row_or_column() -> None:
    """A size-1 axis: align_corners=True maps every location to its one pixel (torch's twice_span == 0 case)."""
    x, g = RNG.standard_normal((1, 2, 1, 4)), RNG.uniform(-2, 2, (1, 3, 3, 2))
    for mode, padding, align in COMBINATIONS:
        got = _sample(braze, braze.tensor(x), braze.tensor(g), mode, padding, align).numpy()
        want = _sample(torch, torch.tensor(x), torch.tensor(g), mode, padding, align).numpy()
        np.testing.assert_allclose(got, want, rtol=RTOL64, atol=ATOL64, err_msg=f"{mode} {padding} {align}")


def test_identity_grid_reproduces_the_image() -> None:
    x = RNG.standard_normal((2, 3, 4, 6))
    theta = np.tile(np.eye(2, 3), (2, 1, 1))
    for align in (False, True):
        grid = F.affine_grid(braze.tensor(theta), (2, 3, 4, 6), align_corners=align)
        for mode in MODES:
            out = F.grid_sample(braze.tensor(x), grid, mode=mode, align_corners=align).numpy()
            np.testing.assert_allclose(out, x, rtol=1e-12, atol=1e-12)


# --- affine_grid -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [(2, 3, 4, 5), (2, 1, 1, 3), (2, 1, 7, 1), (2, 3, 2, 3, 4), (2, 1, 1, 2, 3)])
@pytest.mark.parametrize("align", [False, True])
def test_affine_grid_values_and_theta_gradient_match_torch(size: tuple[int, ...], align: bool) -> None:
    rank = len(size) - 2
    theta = RNG.standard_normal((2, rank, rank + 1))
    weights = RNG.standard_normal((2, *size[2:], rank))
    results = []
    for lib in (braze, torch):
        t = lib.tensor(theta, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the unit-size warning of align_corners=True
            grid = lib.nn.functional.affine_grid(t, size, align_corners=align)
        (grid * lib.tensor(weights)).sum().backward()
        results.append((grid.detach().numpy(), t.grad.numpy()))
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=RTOL64, atol=ATOL64)
    theta32 = theta.astype(np.float32)
    got = F.affine_grid(braze.tensor(theta32), size, align_corners=False).numpy()
    want = tF.affine_grid(torch.tensor(theta32), size, align_corners=False).numpy()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=RTOL32, atol=ATOL32)


def test_align_corners_defaults_to_false_with_torch_warning() -> None:
    theta, x = braze.tensor(np.tile(np.eye(2, 3), (1, 1, 1))), braze.tensor(RNG.standard_normal((1, 1, 3, 3)))
    with pytest.warns(UserWarning, match="Default grid_sample and affine_grid behavior has changed") as caught:
        grid = F.affine_grid(theta, (1, 1, 3, 3))
    assert caught[0].filename == __file__
    np.testing.assert_allclose(grid.numpy(), F.affine_grid(theta, (1, 1, 3, 3), align_corners=False).numpy())
    with pytest.warns(UserWarning, match="align_corners=False since 1.3.0") as caught:
        F.grid_sample(x, grid)
    assert caught[0].filename == __file__
    with pytest.warns(UserWarning, match="unit-size grids when align_corners=True"):
        F.affine_grid(theta, (1, 1, 1, 3), align_corners=True)


def test_argument_errors() -> None:
    x, g = braze.tensor(RNG.standard_normal((1, 1, 3, 3))), braze.tensor(RNG.standard_normal((1, 2, 2, 2)))
    with pytest.raises(ValueError, match="expected mode to be 'bilinear', 'nearest' or 'bicubic'"):
        F.grid_sample(x, g, mode="area", align_corners=False)
    with pytest.raises(ValueError, match="expected padding_mode to be 'zeros', 'border', or 'reflection'"):
        F.grid_sample(x, g, padding_mode="circular", align_corners=False)
    with pytest.raises(ValueError, match="same batch size"):
        F.grid_sample(x, braze.tensor(RNG.standard_normal((2, 2, 2, 2))), align_corners=False)
    with pytest.raises(ValueError, match="expected grid to have size 2 in last dimension"):
        F.grid_sample(x, braze.tensor(RNG.standard_normal((1, 2, 2, 3))), align_corners=False)
    with pytest.raises(ValueError, match="expected 4D or 5D input and grid with same number of dimensions"):
        F.grid_sample(x, braze.tensor(RNG.standard_normal((1, 2, 2, 2, 3))), align_corners=False)
    with pytest.raises(ValueError, match="bicubic interpolation only supports 4D input"):
        F.grid_sample(braze.tensor(RNG.standard_normal((1, 1, 2, 2, 2))),
                      braze.tensor(RNG.standard_normal((1, 1, 1, 1, 3))), mode="bicubic", align_corners=False)
    with pytest.raises(TypeError, match="same floating-point dtype"):
        F.grid_sample(x, braze.tensor(RNG.standard_normal((1, 2, 2, 2)).astype(np.float32)), align_corners=False)
    theta = braze.tensor(RNG.standard_normal((1, 2, 3)))
    with pytest.raises(ValueError, match="Expected a batch of 2D affine matrices of shape Nx2x3"):
        F.affine_grid(braze.tensor(RNG.standard_normal((1, 3, 4))), (1, 1, 2, 2), align_corners=False)
    with pytest.raises(NotImplementedError, match="affine_grid only supports 4D and 5D sizes"):
        F.affine_grid(theta, (1, 2, 3), align_corners=False)
    with pytest.raises(ValueError, match="Expected non-zero, positive output size"):
        F.affine_grid(theta, (1, 1, 0, 2), align_corners=False)
    with pytest.raises(ValueError, match="Expected theta to have floating point type"):
        F.affine_grid(braze.tensor(np.ones((1, 2, 3), np.int64)), (1, 1, 2, 2), align_corners=False)


# --- a spatial transformer network -------------------------------------------------------------------------------


def _stn(lib: Any) -> Any:
    """PyTorch's spatial transformer tutorial in small, written once against the torch API for both libraries."""
    tnn, tf = lib.nn, lib.nn.functional

    class STN(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.localization = tnn.Sequential(tnn.Conv2d(1, 4, kernel_size=3), tnn.MaxPool2d(2, stride=2),
                                               tnn.ReLU(True))
            self.fc_loc = tnn.Sequential(tnn.Linear(4 * 5 * 5, 8), tnn.ReLU(True), tnn.Linear(8, 3 * 2))
            self.conv = tnn.Conv2d(1, 2, kernel_size=3, padding=1)

        def forward(self, x: Any) -> Any:
            xs = self.localization(x).view(-1, 4 * 5 * 5)
            theta = self.fc_loc(xs).view(-1, 2, 3)
            grid = tf.affine_grid(theta, x.size(), align_corners=False)
            x = tf.grid_sample(x, grid, align_corners=False)
            return tf.relu(self.conv(x))

    return STN()


def test_spatial_transformer_network_compiled_matches_eager_and_torch() -> None:
    mine, theirs = _stn(braze), _stn(torch)
    mine.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    x = RNG.standard_normal((3, 1, 12, 12)).astype(np.float32)
    with torch.no_grad():
        want = theirs(torch.tensor(x)).numpy()
    with braze.no_grad():
        eager = mine(braze.tensor(x)).numpy()
    np.testing.assert_allclose(eager, want, rtol=RTOL32, atol=ATOL32)
    compiled = braze.compile(mine.valid(), x)
    np.testing.assert_allclose(compiled(x), eager, rtol=RTOL32, atol=ATOL32)


def test_spatial_transformer_trains_its_localization_net_as_torch() -> None:
    """The gradients of every weight, through grid_sample's grid and affine_grid's theta, are torch's."""
    mine, theirs = _stn(braze).double(), _stn(torch).double()
    mine.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    x = RNG.standard_normal((2, 1, 12, 12))
    mine(braze.tensor(x)).square().sum().backward()
    theirs(torch.tensor(x)).square().sum().backward()
    got = {name: p.grad.numpy() for name, p in mine.named_parameters()}
    for name, p in theirs.named_parameters():
        np.testing.assert_allclose(got[name], p.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)


def test_traced_grid_sample_keeps_gathers_and_interprets_as_eager() -> None:
    x, g = RNG.standard_normal((1, 2, 4, 4)), RNG.uniform(-1.5, 1.5, (1, 3, 3, 2))
    graph = braze.trace(lambda x, g: F.grid_sample(x, g, "bicubic", "reflection", True), x, g)
    assert sum(n.op == "gather" for n in graph.nodes) == 16
    want = F.grid_sample(braze.tensor(x), braze.tensor(g), "bicubic", "reflection", True).numpy()
    np.testing.assert_allclose(ir.interpret(graph, [x, g])[0], want, rtol=1e-14)


def test_the_layers_exported() -> None:
    for name in ("affine_grid", "grid_sample"):
        assert name in F.__all__ and callable(getattr(F, name))
    assert "grid_sample" in dir(F)
