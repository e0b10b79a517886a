"""Max pooling with indices and max unpooling (F.max_pool1d/2d_with_indices, F.max_unpool1d/2d, nn.MaxUnpool1d/2d),
F.gumbel_softmax and F.triplet_margin_with_distance_loss / nn.TripletMarginWithDistanceLoss: PyTorch's values,
indices and float64 gradients (within rtol 1e-10, atol 1e-12), torch's reprs and errors, the statistics of Gumbel
samples (seeded, so they cannot flake), and traced and compiled graphs equal to eager.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F
from braze import ir

torch = pytest.importorskip("torch")
tF = torch.nn.functional

RNG = np.random.default_rng(20240713)
RTOL, ATOL = 1e-10, 1e-12


def _both(fn: Callable[..., Any], *arrays: np.ndarray) -> list[tuple[list[np.ndarray], list[np.ndarray]]]:
    """For braze and then torch: fn(lib, *leaves)'s outputs and the float leaves' gradients of a fixed random
    projection of the float outputs."""
    results = []
    for lib in (braze, torch):
        leaves = [lib.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
        out = fn(lib, *leaves)
        outs = out if isinstance(out, tuple) else (out,)
        rng = np.random.default_rng(0)
        total = sum((o * lib.tensor(rng.standard_normal(tuple(o.shape)))).sum() for o in outs if o.requires_grad)
        total.backward()
        grads = [leaf.grad.numpy() for leaf in leaves if leaf.grad is not None]
        results.append(([o.detach().numpy() for o in outs], grads))
    return results


def _assert_same(results: list[tuple[list[np.ndarray], list[np.ndarray]]]) -> None:
    (got_out, got_grad), (want_out, want_grad) = results
    assert len(got_out) == len(want_out) and len(got_grad) == len(want_grad)
    for got, want in zip(got_out + got_grad, want_out + want_grad):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


# --- max pooling with indices ------------------------------------------------------------------------------------

POOLS = [  # kernel_size, stride, padding, dilation, ceil_mode
    (2, None, 0, 1, False),
    (3, 2, 1, 1, True),
    (3, 2, 0, 1, True),
    ((2, 3), 1, 0, 2, False),
    ((3, 2), (2, 1), (1, 1), 1, False),
]


@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil", POOLS)
def test_max_pool2d_with_indices_matches_torch(kernel: Any, stride: Any, padding: Any, dilation: Any,
                                               ceil: bool) -> None:
    x = RNG.standard_normal((2, 3, 7, 8))
    _assert_same(_both(lambda m, x: m.nn.functional.max_pool2d_with_indices(x, kernel, stride, padding, dilation,
                                                                             ceil), x))
    _assert_same(_both(lambda m, x: m.nn.functional.max_pool2d_with_indices(x[0], kernel, stride, padding, dilation,
                                                                             ceil), x))


def test_max_pool1d_with_indices_matches_torch() -> None:
    x = RNG.standard_normal((2, 3, 9))
    _assert_same(_both(lambda m, x: m.nn.functional.max_pool1d_with_indices(x, 3, 2, 1, ceil_mode=True), x))
    _assert_same(_both(lambda m, x: m.nn.functional.max_pool1d_with_indices(x[1], 2), x))


def test_max_pool_indices_of_ties_infinities_and_nans_are_torch_s() -> None:
    """Ties: the first in row-major order; a window of -inf values (padding included): its first input pixel; NaNs:
    the window's last NaN."""
    x = np.array([[1.0, 1.0, 0.0, -np.inf], [1.0, np.nan, -np.inf, -np.inf], [0.0, 2.0, np.nan, 2.0],
                  [-np.inf, -np.inf, 2.0, 2.0]])[None, None]
    for args in ((2, 1, 1), (2, 1, 0), (3, 1, 1), (2, 2, 0)):
        got = [t.numpy() for t in F.max_pool2d_with_indices(braze.tensor(x), *args)]
        want = [t.numpy() for t in tF.max_pool2d_with_indices(torch.tensor(x), *args)]
        np.testing.assert_array_equal(got[1], want[1], err_msg=str(args))
        np.testing.assert_array_equal(got[0], want[0], err_msg=str(args))


# --- max unpooling ------------------------------------------------------------------------------------------------

UNPOOLS = [  # kernel_size, stride, padding, input shape, output_size
    (2, None, 0, (2, 3, 6, 8), None),
    (2, None, 0, (2, 3, 7, 9), (7, 9)),
    (3, 2, 1, (1, 2, 7, 6), [1, 2, 7, 6]),
    ((3, 2), (2, 1), (1, 0), (2, 2, 6, 5), (6, 5)),
    (2, None, 0, (3, 7, 8), (7, 8)),
]


@pytest.mark.parametrize("kernel,stride,padding,shape,size", UNPOOLS)
def test_max_unpool2d_of_max_pool2d_matches_torch(kernel: Any, stride: Any, padding: Any, shape: tuple[int, ...],
                                                  size: Any) -> None:
    x = RNG.standard_normal(shape)

    def fn(m: Any, x: Any) -> Any:
        values, indices = m.nn.functional.max_pool2d_with_indices(x, kernel, stride, padding)
        return m.nn.functional.max_unpool2d(values * 2.0, indices, kernel, stride, padding, output_size=size), indices

    results = _both(fn, x)
    _assert_same(results)
    unpooled, indices = results[0][0]
    planes = unpooled.reshape(-1, unpooled.shape[-2] * unpooled.shape[-1])
    for plane, positions in zip(planes, indices.reshape(len(planes), -1)):
        assert set(np.flatnonzero(plane)) == set(positions.tolist())


def test_max_unpool1d_matches_torch() -> None:
    x = RNG.standard_normal((2, 3, 9))
    for size in (None, [9], (2, 3, 9)):
        _assert_same(_both(lambda m, x: m.nn.functional.max_unpool1d(
            *m.nn.functional.max_pool1d_with_indices(x, 2), 2, output_size=size), x))
    _assert_same(_both(lambda m, x: m.nn.functional.max_unpool1d(
        *m.nn.functional.max_pool1d_with_indices(x[0], 3, 2, 1), 3, 2, 1), x))


def test_max_unpool_places_values_at_given_indices() -> None:
    values = braze.tensor(np.array([[[[1.0, 2.0], [3.0, 4.0]]]]), requires_grad=True)
    indices = braze.tensor(np.array([[[[0, 3], [9, 14]]]]))
    out = F.max_unpool2d(values, indices, 2, output_size=(4, 4))
    want = np.zeros(16)
    want[[0, 3, 9, 14]] = [1, 2, 3, 4]
    np.testing.assert_array_equal(out.detach().numpy(), want.reshape(1, 1, 4, 4))
    (out * braze.tensor(np.arange(16.0).reshape(1, 1, 4, 4))).sum().backward()
    np.testing.assert_array_equal(values.grad.numpy(), [[[[0.0, 3.0], [9.0, 14.0]]]])


def test_max_unpool_errors_are_torch_s() -> None:
    values, indices = F.max_pool2d_with_indices(braze.tensor(RNG.standard_normal((1, 1, 4, 4))), 2)
    with pytest.raises(ValueError, match=r'invalid output_size "\(9, 9\)" \(dim 0 must be between 2 and 6\)'):
        F.max_unpool2d(values, indices, 2, output_size=(9, 9))
    with pytest.raises(ValueError, match="output_size should be a sequence containing 2 or 4 elements"):
        F.max_unpool2d(values, indices, 2, output_size=(4, 4, 4))
    with pytest.raises(ValueError, match="Expected shape of indices to be same as that of the input tensor"):
        F.max_unpool2d(values, indices[..., :1], 2)
    with pytest.raises(IndexError, match="out of range"):
        F.max_unpool2d(values, indices + 100, 2)


@pytest.mark.parametrize("name,args", [("MaxUnpool2d", (2,)), ("MaxUnpool2d", ((2, 3), (1, 2), 1)),
                                       ("MaxUnpool1d", (3,)), ("MaxUnpool1d", (3, 2, 1))])
def test_max_unpool_layers_repr_and_output_match_torch(name: str, args: tuple) -> None:
    mine, theirs = getattr(nn, name)(*args), getattr(torch.nn, name)(*args)
    assert repr(mine) == repr(theirs)
    assert (mine.kernel_size, mine.stride, mine.padding) == (theirs.kernel_size, theirs.stride, theirs.padding)
    rank = 2 if name.endswith("2d") else 1
    pool = f"max_pool{rank}d_with_indices"
    x = RNG.standard_normal((2, 3, 7, 8)[-(rank + 2):])
    _assert_same(_both(lambda m, x: (mine if m is braze else theirs)(
        *getattr(m.nn.functional, pool)(x, *args), output_size=x.shape[-rank:]), x))


class _SegNetBlock(nn.Module):
    """SegNet's encoder/decoder pairing: the decoder unpools to the positions of the encoder's maxima."""

    def __init__(self) -> None:
        super().__init__()
        self.enc, self.dec = nn.Conv2d(2, 4, 3, padding=1), nn.Conv2d(4, 2, 3, padding=1)
        self.unpool = nn.MaxUnpool2d(2, stride=2)

    def forward(self, x: Any) -> Any:
        h, indices = F.max_pool2d_with_indices(F.relu(self.enc(x)), 2, stride=2)
        return self.dec(self.unpool(h, indices, output_size=x.size()))


def test_segnet_block_compiles_to_eager() -> None:
    model = _SegNetBlock()
    x = RNG.standard_normal((2, 2, 7, 9)).astype(np.float32)
    with braze.no_grad():
        want = model(braze.tensor(x)).numpy()
    compiled = braze.compile(model.valid(), x)
    np.testing.assert_allclose(compiled(x), want, rtol=1e-5, atol=1e-6)


# --- gumbel_softmax -----------------------------------------------------------------------------------------------

LOGITS = np.log(np.array([0.4, 0.1, 0.3, 0.2]))


def test_gumbel_softmax_samples_are_distributions_along_dim() -> None:
    braze.manual_seed(0)
    x = braze.tensor(RNG.standard_normal((3, 4, 5)).astype(np.float32))
    for dim in (0, 1, -1):
        y = F.gumbel_softmax(x, tau=0.7, dim=dim).numpy()
        assert y.dtype == np.float32 and (y >= 0).all()
        np.testing.assert_allclose(y.sum(axis=dim), 1.0, rtol=1e-6)
        hard = F.gumbel_softmax(x, hard=True, dim=dim).numpy()
        np.testing.assert_allclose(hard.sum(axis=dim), 1.0, rtol=1e-6)
        assert np.isin(np.round(hard, 6), (0.0, 1.0)).all()


def test_gumbel_softmax_argmax_is_distributed_as_softmax_of_the_logits() -> None:
    """The Gumbel-max trick: argmax(logits + g) is a categorical sample of softmax(logits), for every tau. 40000
    draws put each frequency within 0.0025 (one standard deviation) of its probability; the bound is 0.015."""
    braze.manual_seed(1)
    x = braze.tensor(np.tile(LOGITS, (40000, 1)))
    for tau in (0.5, 3.0):
        counts = np.bincount(F.gumbel_softmax(x, tau=tau).numpy().argmax(-1), minlength=4) / 40000
        np.testing.assert_allclose(counts, np.exp(LOGITS), atol=0.015)
        hard = F.gumbel_softmax(x, tau=tau, hard=True).numpy()
        np.testing.assert_allclose(hard.mean(0), np.exp(LOGITS), atol=0.015)


def test_gumbel_softmax_temperature_sharpens_or_flattens_samples() -> None:
    braze.manual_seed(2)
    x = braze.tensor(np.tile(LOGITS, (2000, 1)))
    assert F.gumbel_softmax(x, tau=0.05).numpy().max(-1).mean() > 0.95
    assert F.gumbel_softmax(x, tau=100.0).numpy().max(-1).max() < 0.3


def test_hard_gumbel_softmax_is_one_hot_with_the_soft_gradient() -> None:
    logits = RNG.standard_normal((6, 5))
    weights = braze.tensor(RNG.standard_normal((6, 5)))
    grads, outs = [], []
    for hard in (False, True):
        braze.manual_seed(3)
        x = braze.tensor(logits, requires_grad=True)
        y = F.gumbel_softmax(x, tau=0.8, hard=hard)
        (y * weights).sum().backward()
        grads.append(x.grad.numpy())
        outs.append(y.detach().numpy())
    soft, hard = outs
    one_hot = np.eye(5)[soft.argmax(-1)]
    np.testing.assert_allclose(hard, one_hot, rtol=0, atol=1e-15)
    assert (hard[one_hot == 0] == 0).all()
    np.testing.assert_array_equal(grads[1], grads[0])


def test_gumbel_softmax_repeats_under_a_seed_and_warns_on_eps() -> None:
    x = braze.tensor(RNG.standard_normal((4, 6)))
    braze.manual_seed(7)
    first = F.gumbel_softmax(x).numpy()
    braze.manual_seed(7)
    np.testing.assert_array_equal(F.gumbel_softmax(x).numpy(), first)
    assert not np.array_equal(F.gumbel_softmax(x).numpy(), first)
    with pytest.warns(UserWarning, match="`eps` parameter is deprecated and has no effect"):
        F.gumbel_softmax(x, eps=1e-5)


def test_traced_gumbel_softmax_keeps_the_noise_of_the_eager_call_as_dropout_does() -> None:
    """Under trace the noise is drawn as eagerly and becomes a constant: interpreting the graph repeats the eager
    sample that followed the same seed, every run, and compiled code too."""
    x = RNG.standard_normal((5, 4)).astype(np.float32)
    fn = lambda t: F.gumbel_softmax(t, tau=0.5, hard=True, dim=0)  # noqa: E731
    braze.manual_seed(11)
    eager = fn(braze.tensor(x)).numpy()
    braze.manual_seed(11)
    graph = braze.trace(fn, x)
    assert {"softmax", "argmax", "one_hot"} <= {n.op for n in graph.nodes}
    first, second = ir.interpret(graph, [x])[0], ir.interpret(graph, [x])[0]
    np.testing.assert_array_equal(first, eager)
    np.testing.assert_array_equal(second, eager)
    np.testing.assert_allclose(braze.compile(graph)(x), eager, rtol=1e-6, atol=1e-7)


def test_gumbel_softmax_matches_torch_where_the_noise_cannot_matter() -> None:
    """Logits 1e3 apart: Gumbel noise (within about -4 and 37 in float64) never changes the hard sample, and the
    soft one is exactly one-hot, so both libraries give the same values and (zero) gradients."""
    x = RNG.standard_normal((3, 4))
    _assert_same(_both(lambda m, x: m.nn.functional.gumbel_softmax(
        x + m.tensor([0.0, 1e3, -1e3, 0.0], dtype=m.float64), hard=True), x))


# --- triplet_margin_with_distance_loss ----------------------------------------------------------------------------


def _cosine_distance(m: Any) -> Callable[[Any, Any], Any]:
    return lambda a, b: 1.0 - m.nn.functional.cosine_similarity(a, b)


@pytest.mark.parametrize("distance", [None, "cosine", "l1"])
@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_triplet_margin_with_distance_loss_matches_torch(distance: str | None, swap: bool, reduction: str) -> None:
    a, p, n = (RNG.standard_normal((6, 5)) for _ in range(3))

    def fn(m: Any, a: Any, p: Any, n: Any) -> Any:
        d = None if distance is None else _cosine_distance(m) if distance == "cosine" else \
            (lambda x, y: (x - y).abs().sum(-1))
        return m.nn.functional.triplet_margin_with_distance_loss(a, p, n, distance_function=d, margin=1.5, swap=swap,
                                                                 reduction=reduction)

    _assert_same(_both(fn, a, p, n))
    layer = lambda m: m.nn.TripletMarginWithDistanceLoss(  # noqa: E731
        distance_function=None if distance is None else _cosine_distance(m), margin=0.7, swap=swap,
        reduction=reduction)
    _assert_same(_both(lambda m, a, p, n: layer(m)(a, p, n), a, p, n))


def test_triplet_margin_with_distance_loss_layer_is_torch_s() -> None:
    mine, theirs = nn.TripletMarginWithDistanceLoss(), torch.nn.TripletMarginWithDistanceLoss()
    assert repr(mine) == repr(theirs)
    assert isinstance(mine.distance_function, nn.PairwiseDistance)
    assert list(mine.state_dict()) == list(theirs.state_dict()) == []
    custom = dict(distance_function=lambda a, b: (a - b).abs().sum(-1), margin=0.5, swap=True, reduction="sum")
    mine, theirs = nn.TripletMarginWithDistanceLoss(**custom), torch.nn.TripletMarginWithDistanceLoss(**custom)
    assert repr(mine) == repr(theirs)
    for attribute in theirs.__constants__:
        assert getattr(mine, attribute) == getattr(theirs, attribute)
    with pytest.raises(ValueError, match="expected margin to be greater than 0, got 0 instead"):
        nn.TripletMarginWithDistanceLoss(margin=0)
    with pytest.raises(TypeError):
        nn.TripletMarginWithDistanceLoss(None)  # keyword-only, as torch
    x = braze.tensor(RNG.standard_normal((2, 3)))
    with pytest.raises(ValueError, match="margin must be greater than 0, got -1"):
        F.triplet_margin_with_distance_loss(x, x, x, margin=-1)
    with pytest.raises(ValueError, match="same number of dimensions"):
        F.triplet_margin_with_distance_loss(x, x, x[0])
    with pytest.raises(ValueError, match="reduction='batchmean' is not supported"):
        F.triplet_margin_with_distance_loss(x, x, x, reduction="batchmean")


def test_triplet_margin_with_distance_loss_compiles_to_eager() -> None:
    class Embedder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(6, 4)
            self.loss = nn.TripletMarginWithDistanceLoss(
                distance_function=lambda a, b: 1.0 - F.cosine_similarity(a, b), swap=True)

        def forward(self, a: Any, p: Any, n: Any) -> Any:
            return self.loss(self.fc(a), self.fc(p), self.fc(n))

    model = Embedder()
    arrays = [RNG.standard_normal((5, 6)).astype(np.float32) for _ in range(3)]
    with braze.no_grad():
        want = model(*map(braze.tensor, arrays)).numpy()
    np.testing.assert_allclose(braze.compile(model.valid(), *arrays)(*arrays), want, rtol=1e-5, atol=1e-6)
    assert math.isfinite(float(want))


def test_new_names_are_exported() -> None:
    for name in ("max_pool1d_with_indices", "max_pool2d_with_indices", "max_unpool1d", "max_unpool2d",
                 "gumbel_softmax", "triplet_margin_with_distance_loss"):
        assert name in F.__all__ and callable(getattr(F, name))
    for name in ("MaxUnpool1d", "MaxUnpool2d", "TripletMarginWithDistanceLoss"):
        assert isinstance(getattr(nn, name), type) and issubclass(getattr(nn, name), nn.Module)
