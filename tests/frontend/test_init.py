"""braze.nn.init: torch's fan computation and gains exactly, each initializer's bounds and statistics against
torch's formula (and against torch's own samples where installed), lazy Params chained without allocating."""
from __future__ import annotations

import math

import numpy as np
import pytest

import braze
from braze import nn
from braze.nn import init

SHAPES = [(7, 5), (16, 3, 5, 5), (4, 6, 3), (2, 3, 2, 2, 2), (1, 9)]


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def big(dtype=braze.float64):
    return braze.zeros(400, 500, dtype=dtype)


# --- fans and gains -------------------------------------------------------------------------------------------


def test_fan_in_and_fan_out_of_a_conv_weight():
    assert init._calculate_fan_in_and_fan_out(braze.zeros(16, 3, 5, 5)) == (75, 400)


@pytest.mark.parametrize("shape", SHAPES)
def test_fan_in_and_fan_out_match_torch(torch, shape):
    expected = torch.nn.init._calculate_fan_in_and_fan_out(torch.zeros(shape))
    assert init._calculate_fan_in_and_fan_out(braze.zeros(shape)) == expected


def test_fan_of_a_vector_raises_as_torch():
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        init._calculate_fan_in_and_fan_out(braze.zeros(3))


@pytest.mark.parametrize("args", [("linear",), ("conv2d",), ("sigmoid",), ("tanh",), ("relu",), ("leaky_relu",),
                                  ("leaky_relu", 0.2), ("leaky_relu", 3), ("selu",)])
def test_calculate_gain_matches_torch(torch, args):
    assert init.calculate_gain(*args) == torch.nn.init.calculate_gain(*args)


def test_calculate_gain_rejects_unknown_nonlinearity():
    with pytest.raises(ValueError, match="Unsupported nonlinearity swish"):
        init.calculate_gain("swish")


def test_kaiming_rejects_unknown_mode():
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        init.kaiming_uniform_(braze.zeros(3, 4), mode="fan_avg")


# --- bounds and statistics --------------------------------------------------------------------------------------
# (initializer, kwargs, the distribution's bound (uniform) or std (normal) by torch's formula for a (400, 500) tensor)

UNIFORM = [
    (init.uniform_, {"a": -0.3, "b": 0.7}, (-0.3, 0.7)),
    (init.xavier_uniform_, {"gain": 2.0}, 2.0 * math.sqrt(6.0 / 900)),
    (init.kaiming_uniform_, {}, math.sqrt(2.0) / math.sqrt(500) * math.sqrt(3.0)),
    (init.kaiming_uniform_, {"a": 0.2, "mode": "fan_out", "nonlinearity": "leaky_relu"},
     math.sqrt(2.0 / 1.04) / math.sqrt(400) * math.sqrt(3.0)),
]
NORMAL = [
    (init.normal_, {"mean": 0.5, "std": 2.0}, (0.5, 2.0)),
    (init.xavier_normal_, {"gain": 0.5}, (0.0, 0.5 * math.sqrt(2.0 / 900))),
    (init.kaiming_normal_, {"mode": "fan_out", "nonlinearity": "relu"}, (0.0, math.sqrt(2.0) / math.sqrt(400))),
    (init.kaiming_normal_, {"nonlinearity": "tanh"}, (0.0, 5.0 / 3 / math.sqrt(500))),
]


@pytest.mark.parametrize("fn, kwargs, bound", UNIFORM, ids=lambda v: getattr(v, "__name__", None))
def test_uniform_initializers_fill_torch_bounds(fn, kwargs, bound):
    low, high = bound if isinstance(bound, tuple) else (-bound, bound)
    a = np.asarray(fn(big(), **kwargs))
    assert low <= a.min() < low + 0.01 * (high - low) and high - 0.01 * (high - low) < a.max() <= high
    assert abs(a.mean() - (low + high) / 2) < 0.01 * (high - low)  # std of the mean: 0.0005 of the width
    assert abs(a.std() - (high - low) / math.sqrt(12)) < 0.01 * (high - low)


@pytest.mark.parametrize("fn, kwargs, moments", NORMAL, ids=lambda v: getattr(v, "__name__", None))
def test_normal_initializers_have_torch_moments(fn, kwargs, moments):
    mean, std = moments
    a = np.asarray(fn(big(), **kwargs))
    assert abs(a.mean() - mean) < 0.01 * std and abs(a.std() / std - 1.0) < 0.01


@pytest.mark.parametrize("fn, kwargs, expected", UNIFORM + NORMAL, ids=lambda v: getattr(v, "__name__", None))
def test_initializer_statistics_match_torch_samples(torch, fn, kwargs, expected):
    ours = np.asarray(fn(big(), **kwargs))
    theirs = getattr(torch.nn.init, fn.__name__)(torch.zeros(400, 500, dtype=torch.float64), **kwargs).numpy()
    scale = theirs.std()
    assert abs(ours.mean() - theirs.mean()) < 0.02 * scale and abs(ours.std() / scale - 1.0) < 0.02
    if fn in (init.uniform_, init.xavier_uniform_, init.kaiming_uniform_):
        assert abs(ours.max() - theirs.max()) < 0.01 * scale and abs(ours.min() - theirs.min()) < 0.01 * scale


def test_trunc_normal_stays_in_bounds_with_the_truncated_moments():
    a = np.asarray(init.trunc_normal_(big(), mean=0.1, std=1.0, a=-0.5, b=1.5))
    assert a.min() >= -0.5 and a.max() <= 1.5
    # moments of N(0.1, 1) truncated to [-0.5, 1.5]: alpha=-0.6, beta=1.4
    pdf = lambda x: math.exp(-x * x / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    cdf = lambda x: (1 + math.erf(x / math.sqrt(2))) / 2  # noqa: E731
    z = cdf(1.4) - cdf(-0.6)
    mean = 0.1 + (pdf(-0.6) - pdf(1.4)) / z
    var = 1 + (-0.6 * pdf(-0.6) - 1.4 * pdf(1.4)) / z - ((pdf(-0.6) - pdf(1.4)) / z) ** 2
    assert abs(a.mean() - mean) < 0.005 and abs(a.std() - math.sqrt(var)) < 0.005


@pytest.mark.filterwarnings("ignore:mean is more than 2 std")
def test_trunc_normal_with_a_negligible_interval_raises():
    with pytest.raises(braze.BrazeError, match="trunc_normal_.*probability"):
        init.trunc_normal_(braze.zeros(3), a=20.0, b=21.0)


def test_constant_ones_zeros_fill_exactly():
    t = braze.zeros(2, 3, dtype=braze.int64)
    assert np.asarray(init.constant_(t, 7)).tolist() == [[7] * 3] * 2
    assert np.asarray(init.ones_(braze.zeros(4))).tolist() == [1.0] * 4
    assert np.asarray(init.zeros_(braze.ones(4))).tolist() == [0.0] * 4


@pytest.mark.parametrize("shape, groups", [((6, 3, 3, 3), 1), ((8, 2, 3, 5), 2), ((4, 4, 3), 1), ((2, 3, 1, 3, 3), 1)])
def test_dirac_and_eye_equal_torch(torch, shape, groups):
    expected = torch.nn.init.dirac_(torch.empty(shape), groups).numpy()
    np.testing.assert_array_equal(np.asarray(init.dirac_(braze.ones(*shape), groups)), expected)
    np.testing.assert_array_equal(np.asarray(init.eye_(braze.ones(3, 5))), torch.nn.init.eye_(torch.empty(3, 5)))


def test_dirac_conv_weight_passes_channels_through():
    conv = nn.Conv2d(3, 3, 3, padding=1, bias=False)
    init.dirac_(conv.weight)
    x = braze.randn(2, 3, 5, 5)
    np.testing.assert_allclose(np.asarray(conv(x)), np.asarray(x), atol=1e-6)


def test_eye_and_dirac_reject_other_ranks():
    with pytest.raises(ValueError, match="Only tensors with 2 dimensions"):
        init.eye_(braze.zeros(2, 2, 2))
    with pytest.raises(ValueError, match="3, 4, or 5 dimensions"):
        init.dirac_(braze.zeros(2, 2))


@pytest.mark.parametrize("shape", [(6, 10), (10, 6), (4, 3, 2, 2)])
def test_orthogonal_rows_or_columns_are_orthonormal_times_gain(shape):
    q = np.asarray(init.orthogonal_(braze.zeros(*shape, dtype=braze.float64), gain=1.5)).reshape(shape[0], -1)
    small = q @ q.T if q.shape[0] <= q.shape[1] else q.T @ q
    np.testing.assert_allclose(small, 2.25 * np.eye(small.shape[0]), atol=1e-12)


def test_sparse_zeroes_the_torch_count_per_column():
    a = np.asarray(init.sparse_(braze.zeros(10, 40, dtype=braze.float64), sparsity=0.25, std=0.5))
    assert ((a == 0).sum(axis=0) == math.ceil(0.25 * 10)).all()
    assert abs(a[a != 0].std() - 0.5) < 0.1


def test_random_initializer_on_integer_tensor_raises():
    with pytest.raises(braze.DTypeError, match="nn.init.normal_: expects a floating-point tensor"):
        init.normal_(braze.zeros(3, dtype=braze.int64))


# --- tensors, Params, generators ---------------------------------------------------------------------------------


def test_initializer_returns_the_tensor_filled_in_place_outside_autodiff():
    t = braze.zeros(3, 4, requires_grad=True)
    array = t._data
    out = init.uniform_(t)
    assert out is t and t._data is array and t.is_leaf and t.requires_grad and (array != 0).all()


def test_initializer_keeps_an_initialized_params_tensor_and_gradient_requirement():
    layer = nn.Linear(4, 3)
    value = layer.weight.val()
    init.constant_(layer.weight, 0.25)
    assert layer.weight.val() is value and layer.weight.requires_grad
    assert (np.asarray(layer.weight) == 0.25).all()


def test_initializer_on_lazy_param_chains_without_allocating():
    layer = nn.Linear(300, 200)
    init.kaiming_normal_(layer.weight, nonlinearity="relu")
    init.zeros_(layer.bias)
    assert not layer.weight.is_initialized and not layer.bias.is_initialized
    w = np.asarray(layer.weight)
    assert abs(w.std() / (math.sqrt(2.0) / math.sqrt(300)) - 1.0) < 0.02
    assert (np.asarray(layer.bias) == 0).all() and layer.weight.requires_grad


def test_initializer_on_a_lazy_param_reaches_its_clones_only_through_shared_state():
    layer = nn.Linear(3, 2)
    twin = layer.weight.clone()
    init.ones_(layer.weight)
    assert (np.asarray(layer.weight) == 1).all() and not (np.asarray(twin) == 1).all()


def test_apply_with_initializers_is_the_torchvision_idiom():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Linear(4, 2))

    def reset(m):
        if isinstance(m, nn.Conv2d):
            init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.Linear):
            init.normal_(m.weight, 0, 0.01)
            init.constant_(m.bias, 0)
    model.apply(reset)
    assert (np.asarray(model[2].bias) == 0).all() and np.abs(np.asarray(model[2].weight)).max() < 0.1


def test_generator_makes_draws_repeatable_and_independent_of_the_global_stream():
    a = init.normal_(braze.zeros(5), generator=braze.Generator().manual_seed(3))
    braze.manual_seed(99)
    b = init.normal_(braze.zeros(5), generator=braze.Generator().manual_seed(3))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_manual_seed_repeats_global_draws():
    braze.manual_seed(5)
    a = np.asarray(init.xavier_uniform_(braze.zeros(3, 3)))
    braze.manual_seed(5)
    np.testing.assert_array_equal(a, np.asarray(init.xavier_uniform_(braze.zeros(3, 3))))
