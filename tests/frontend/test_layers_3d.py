"""The 3-d layers (Conv3d, ConvTranspose3d, BatchNorm3d, InstanceNorm3d, the 3-d pooling and padding layers, trilinear
Upsample) against PyTorch through the harness of test_layers_vs_torch (torch's state dict loaded strictly; outputs and
gradients for input and parameters, float32 to 1e-5, float64 to 1e-10), plus their repr, initialization, errors,
and a small 3-d CNN compiled (equal to torch in eval)."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import braze  # noqa: E402
import braze.nn as nn  # noqa: E402
import braze.nn.functional as F  # noqa: E402
from tests.frontend.test_layers_vs_torch import Case, check_against_torch, r  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")

STATELESS = (True,)  # train and eval modes are alike for these

CASES = [
    Case("conv3d", lambda lib: lib.nn.Conv3d(3, 4, 3, dtype=lib.dt), [r(2, 3, 5, 6, 6)], modes=STATELESS),
    Case("conv3d_stride_padding_dilation_noncubic", lambda lib: lib.nn.Conv3d(
        3, 4, (3, 2, 3), stride=(2, 1, 2), padding=(1, 2, 0), dilation=(2, 1, 1), dtype=lib.dt), [r(2, 3, 7, 5, 6)],
        modes=STATELESS),
    Case("conv3d_groups_nobias", lambda lib: lib.nn.Conv3d(4, 6, (2, 3, 3), groups=2, bias=False, dtype=lib.dt),
         [r(2, 4, 4, 5, 5)], modes=STATELESS),
    Case("conv3d_depthwise", lambda lib: lib.nn.Conv3d(4, 8, 3, padding=1, groups=4, dtype=lib.dt),
         [r(1, 4, 4, 5, 6)], modes=STATELESS),
    Case("conv3d_same_even_kernel", lambda lib: lib.nn.Conv3d(3, 2, (2, 4, 3), padding="same", dilation=(1, 1, 2),
                                                             dtype=lib.dt), [r(1, 3, 4, 6, 6)], modes=STATELESS),
    Case("conv3d_valid", lambda lib: lib.nn.Conv3d(2, 3, (1, 3, 2), padding="valid", dtype=lib.dt),
         [r(2, 2, 3, 5, 4)], modes=STATELESS),
    Case("conv3d_unbatched", lambda lib: lib.nn.Conv3d(3, 2, 3, stride=2, padding=1, dtype=lib.dt), [r(3, 5, 5, 6)],
         modes=STATELESS),
    Case("conv3d_reflect", lambda lib: lib.nn.Conv3d(2, 3, 3, padding=(1, 2, 1), padding_mode="reflect",
                                                    dtype=lib.dt), [r(2, 2, 4, 5, 6)], modes=STATELESS),
    Case("conv3d_replicate", lambda lib: lib.nn.Conv3d(2, 3, 3, padding=2, padding_mode="replicate", dtype=lib.dt),
         [r(1, 2, 3, 4, 5)], modes=STATELESS),
    Case("conv3d_circular_strided", lambda lib: lib.nn.Conv3d(2, 3, 3, stride=2, padding=1, padding_mode="circular",
                                                             dtype=lib.dt), [r(2, 2, 5, 4, 5)], modes=STATELESS),
    Case("conv3d_same_circular", lambda lib: lib.nn.Conv3d(2, 2, (3, 2, 4), padding="same", padding_mode="circular",
                                                          dtype=lib.dt), [r(1, 2, 4, 5, 6)], modes=STATELESS),
    Case("conv_transpose3d", lambda lib: lib.nn.ConvTranspose3d(4, 3, 3, stride=2, padding=1, output_padding=1,
                                                               dtype=lib.dt), [r(2, 4, 3, 4, 3)], modes=STATELESS),
    Case("conv_transpose3d_groups_dilation_nobias", lambda lib: lib.nn.ConvTranspose3d(
        4, 6, (2, 3, 2), stride=(1, 2, 3), padding=(0, 1, 1), groups=2, bias=False, dilation=(2, 1, 1),
        dtype=lib.dt), [r(1, 4, 3, 4, 3)], modes=STATELESS),
    Case("conv_transpose3d_unbatched_deep_stride", lambda lib: lib.nn.ConvTranspose3d(
        2, 2, (3, 2, 2), stride=(3, 1, 1), padding=(2, 0, 0), output_padding=(1, 0, 0), dtype=lib.dt),
        [r(2, 4, 3, 3)], modes=STATELESS),
    Case("batchnorm3d", lambda lib: lib.nn.BatchNorm3d(3, eps=1e-3, momentum=0.3, dtype=lib.dt), [r(2, 3, 3, 4, 5)]),
    Case("batchnorm3d_cumulative_no_affine", lambda lib: lib.nn.BatchNorm3d(2, momentum=None, affine=False,
                                                                           dtype=lib.dt), [r(3, 2, 2, 3, 2)]),
    Case("batchnorm3d_no_running_stats", lambda lib: lib.nn.BatchNorm3d(2, track_running_stats=False, dtype=lib.dt),
         [r(2, 2, 3, 3, 2)]),
    Case("instancenorm3d", lambda lib: lib.nn.InstanceNorm3d(3, dtype=lib.dt), [r(2, 3, 3, 4, 5)]),
    Case("instancenorm3d_affine_unbatched", lambda lib: lib.nn.InstanceNorm3d(3, affine=True, dtype=lib.dt),
         [r(3, 3, 4, 2)]),
    Case("maxpool3d", lambda lib: lib.nn.MaxPool3d(2), [r(2, 3, 4, 6, 6)], modes=STATELESS),
    Case("maxpool3d_padding_dilation_ceil", lambda lib: lib.nn.MaxPool3d(
        (3, 2, 3), stride=2, padding=(1, 1, 0), dilation=(1, 2, 1), ceil_mode=True), [r(1, 2, 6, 7, 8)],
        modes=STATELESS),
    Case("maxpool3d_unbatched_overlapping", lambda lib: lib.nn.MaxPool3d(3, stride=1, padding=1), [r(2, 4, 5, 5)],
         modes=STATELESS),
    Case("avgpool3d", lambda lib: lib.nn.AvgPool3d(2), [r(2, 3, 4, 6, 6)], modes=STATELESS),
    Case("avgpool3d_padding_ceil", lambda lib: lib.nn.AvgPool3d(3, stride=2, padding=1, ceil_mode=True),
         [r(1, 2, 6, 7, 8)], modes=STATELESS),
    Case("avgpool3d_exclude_pad", lambda lib: lib.nn.AvgPool3d((3, 2, 3), stride=(2, 1, 2), padding=(1, 1, 0),
                                                               ceil_mode=True, count_include_pad=False),
         [r(1, 2, 6, 7, 8)], modes=STATELESS),
    Case("avgpool3d_divisor_override", lambda lib: lib.nn.AvgPool3d(3, stride=2, padding=1, ceil_mode=True,
                                                                    divisor_override=5), [r(1, 2, 6, 7, 8)],
         modes=STATELESS),
    Case("avgpool3d_unbatched_divisor_exclude_pad", lambda lib: lib.nn.AvgPool3d(
        3, stride=2, padding=1, count_include_pad=False, divisor_override=7), [r(2, 5, 6, 7)], modes=STATELESS),
    Case("adaptive_avgpool3d", lambda lib: lib.nn.AdaptiveAvgPool3d((2, 3, None)), [r(2, 3, 5, 7, 4)],
         modes=STATELESS),
    Case("adaptive_avgpool3d_unbatched_global", lambda lib: lib.nn.AdaptiveAvgPool3d(1), [r(3, 5, 7, 4)],
         modes=STATELESS),
    Case("adaptive_maxpool3d", lambda lib: lib.nn.AdaptiveMaxPool3d((2, None, 3)), [r(2, 3, 5, 4, 7)],
         modes=STATELESS),
    Case("adaptive_maxpool3d_unbatched_upsampling", lambda lib: lib.nn.AdaptiveMaxPool3d(4), [r(2, 3, 5, 6)],
         modes=STATELESS),
    Case("zeropad3d", lambda lib: lib.nn.ZeroPad3d((1, 2, 0, 1, 2, 0)), [r(2, 3, 3, 4, 5)], modes=STATELESS),
    Case("zeropad3d_crop", lambda lib: lib.nn.ZeroPad3d((-1, 2, 1, -1, 0, 1)), [r(3, 3, 4, 5)], modes=STATELESS),
    Case("constantpad3d", lambda lib: lib.nn.ConstantPad3d(1, 2.5), [r(2, 2, 3, 4, 3)], modes=STATELESS),
    Case("reflectionpad3d", lambda lib: lib.nn.ReflectionPad3d((1, 2, 2, 0, 1, 1)), [r(2, 2, 3, 4, 5)],
         modes=STATELESS),
    Case("reflectionpad3d_unbatched", lambda lib: lib.nn.ReflectionPad3d(1), [r(2, 3, 4, 5)], modes=STATELESS),
    Case("replicationpad3d", lambda lib: lib.nn.ReplicationPad3d((3, 0, 1, 2, 0, 4)), [r(2, 2, 3, 2, 3)],
         modes=STATELESS),
    Case("circularpad3d", lambda lib: lib.nn.CircularPad3d((1, 2, 2, 1, 0, 3)), [r(1, 2, 3, 4, 5)], modes=STATELESS),
    Case("circularpad3d_unbatched", lambda lib: lib.nn.CircularPad3d(1), [r(2, 3, 4, 5)], modes=STATELESS),
    Case("upsample_trilinear", lambda lib: lib.nn.Upsample(scale_factor=(2, 1.5, 0.5), mode="trilinear"),
         [r(1, 2, 2, 3, 4)], modes=STATELESS),
    Case("upsample_trilinear_aligned_size", lambda lib: lib.nn.Upsample(size=(3, 5, 7), mode="trilinear",
                                                                        align_corners=True), [r(2, 2, 2, 3, 4)],
         modes=STATELESS),
    Case("upsample_nearest_5d", lambda lib: lib.nn.Upsample(scale_factor=2), [r(1, 2, 2, 3, 2)], modes=STATELESS),
    Case("upsample_nearest_5d_size", lambda lib: lib.nn.Upsample(size=(3, 2, 5)), [r(2, 1, 2, 3, 4)],
         modes=STATELESS),
]

PARAMS = [pytest.param(c, bits, train, id=f"{c.id}-f{bits}-{'train' if train else 'eval'}")
          for c in CASES for bits in c.bits for train in c.modes]


@pytest.mark.parametrize("case,bits,train", PARAMS)
def test_layer_matches_torch(case: Case, bits: int, train: bool) -> None:
    check_against_torch(case, bits, train)


@pytest.mark.parametrize("make", [
    lambda nn: nn.Conv3d(3, 8, 3), lambda nn: nn.Conv3d(4, 8, (3, 1, 2), stride=2, padding=1, dilation=(1, 2, 1),
                                                        groups=2, bias=False, padding_mode="reflect"),
    lambda nn: nn.Conv3d(3, 8, 4, padding="same"), lambda nn: nn.ConvTranspose3d(4, 6, 3, stride=2, output_padding=1),
    lambda nn: nn.BatchNorm3d(5), lambda nn: nn.BatchNorm3d(5, momentum=None, affine=False),
    lambda nn: nn.InstanceNorm3d(4, affine=True), lambda nn: nn.MaxPool3d(3, 2, 1),
    lambda nn: nn.MaxPool3d((1, 2, 2), ceil_mode=True), lambda nn: nn.AvgPool3d(2),
    lambda nn: nn.AvgPool3d((1, 2, 2), stride=1, padding=(0, 1, 1), divisor_override=3),
    lambda nn: nn.AdaptiveAvgPool3d((1, None, 3)), lambda nn: nn.AdaptiveMaxPool3d(2), lambda nn: nn.ZeroPad3d(1),
    lambda nn: nn.ConstantPad3d((1, 2, 3, 4, 5, 6), 0.5), lambda nn: nn.ReflectionPad3d(2),
    lambda nn: nn.ReplicationPad3d((1, 0, 1, 0, 1, 0)), lambda nn: nn.CircularPad3d(1),
    lambda nn: nn.Upsample(scale_factor=2, mode="trilinear"),
])
def test_extra_repr_matches_torch(make: Callable[[Any], Any]) -> None:
    assert make(braze.nn).extra_repr() == make(torch.nn).extra_repr()


@pytest.mark.parametrize("make,weight_shape,fan_in", [
    (lambda nn: nn.Conv3d(4, 6, (2, 3, 5), groups=2), (6, 2, 2, 3, 5), 2 * 2 * 3 * 5),
    (lambda nn: nn.ConvTranspose3d(4, 6, (3, 2, 2), groups=2), (4, 3, 3, 2, 2), 3 * 3 * 2 * 2),
])
def test_convolution_init_is_torchs(make: Callable[[Any], Any], weight_shape: tuple[int, ...], fan_in: int) -> None:
    """weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with torch's fan_in, in torch's shapes."""
    bound = 1 / math.sqrt(fan_in)
    for lib in (braze.nn, torch.nn):
        layer = make(lib)
        weight, bias = (np.asarray(t.detach().numpy()) for t in (layer.weight, layer.bias))
        assert weight.shape == weight_shape and bias.shape == (6,)
        assert np.abs(weight).max() <= bound and np.abs(weight).max() > 0.8 * bound
        assert np.abs(bias).max() <= bound


def cnn(lib: Any) -> Any:
    """Conv3d, BatchNorm3d, ReLU, MaxPool3d, Conv3d, AdaptiveAvgPool3d and Linear of torch.nn or braze.nn, as a video
    model's stem."""
    class Net(lib.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.bn = lib.Conv3d(3, 8, 3, padding=1), lib.BatchNorm3d(8)
            self.pool, self.conv2 = lib.MaxPool3d(2), lib.Conv3d(8, 6, (1, 3, 3), padding=(0, 1, 1), bias=False)
            self.gap, self.fc = lib.AdaptiveAvgPool3d(1), lib.Linear(6, 5)

        def forward(self, x: Any) -> Any:
            x = self.pool(self.bn(self.conv1(x)).relu())
            return self.fc(self.gap(self.conv2(x)).flatten(1))
    return Net()


def test_small_3d_cnn_compiled_matches_torch_eval() -> None:
    torch.manual_seed(0)
    tm = cnn(torch.nn)
    with torch.no_grad():
        tm.bn.running_mean.uniform_(-0.5, 0.5)
        tm.bn.running_var.uniform_(0.5, 1.5)
        tm.bn.weight.uniform_(0.5, 1.5)
    tm.eval()
    bm = cnn(nn)
    bm.load_state_dict({k: v.numpy() for k, v in tm.state_dict().items()}, strict=True)
    x = r(2, 3, 4, 8, 8).astype(np.float32)
    compiled = braze.compile(bm.valid(), x)
    with torch.no_grad():
        want = tm(torch.tensor(x)).numpy()
    np.testing.assert_allclose(np.asarray(compiled(x)), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("pool", [
    lambda F, x: F.max_pool3d(x, 2), lambda F, x: F.max_pool3d(x, 3, stride=1, padding=1),
    lambda F, x: F.max_pool3d(x, (3, 2, 3), stride=2, padding=1, dilation=(1, 2, 1), ceil_mode=True),
    lambda F, x: F.adaptive_max_pool3d(x, 1), lambda F, x: F.adaptive_max_pool3d(x, (2, 3, 3)),
    lambda F, x: F.adaptive_max_pool3d(x[0], (3, 4, 5)), lambda F, x: F.adaptive_max_pool2d(x[0], (4, 5)),
    lambda F, x: F.adaptive_max_pool1d(x[0, 0], 4),
])
def test_max_pooling_ties_route_the_gradient_as_torch(pool: Callable[[Any, Any], Any]) -> None:
    """Inputs of three values tie in most windows: the gradient goes to each window's first maximum, as torch's."""
    x = np.random.default_rng(0).integers(0, 3, (2, 2, 5, 6, 7)).astype(np.float64)
    got, want = [], []
    for lib, functional, out in ((braze, F, got), (torch, torch.nn.functional, want)):
        leaf = lib.tensor(x, requires_grad=True)
        y = pool(functional, leaf)
        (y * lib.tensor(np.random.default_rng(1).standard_normal(tuple(y.shape)))).sum().backward()
        out += [y.detach().numpy(), leaf.grad.numpy()]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("call,message", [
    (lambda: F.conv3d(braze.zeros(1, 2, 4, 4, 4), braze.zeros(3, 2, 3, 3, 3), stride=2, padding="same"),
     "padding='same' is not supported for strided convolutions"),
    (lambda: F.conv3d(braze.zeros(1, 2, 4, 4), braze.zeros(3, 2, 3, 3)), "expected a 5-d"),
    (lambda: F.conv3d(braze.zeros(2, 4, 4), braze.zeros(3, 2, 3, 3, 3)), "expected a 4-d .* or 5-d"),
    (lambda: F.conv3d(braze.zeros(1, 2, 2, 4, 4), braze.zeros(3, 2, 3, 3, 3)), "depth extent 3 exceeds"),
    (lambda: F.conv_transpose3d(braze.zeros(1, 2, 3, 3, 3), braze.zeros(2, 2, 3, 3, 3), stride=2,
                                output_padding=(2, 0, 0)), "output_padding"),
    (lambda: F.max_pool3d(braze.zeros(1, 2, 4, 4, 4), 2, return_indices=True), "return_indices=True"),
    (lambda: F.avg_pool3d(braze.zeros(1, 2, 4, 4, 4), 2, divisor_override=0), "divisor_override must be non-zero"),
    (lambda: F.adaptive_avg_pool3d(braze.zeros(1, 2, 4, 4, 4), (2, 2)), "output_size expects an int or a triple"),
    (lambda: F.max_pool3d(braze.zeros(2, 4, 4), 2), "expected a 4-d"),
    (lambda: nn.BatchNorm3d(2)(braze.zeros(2, 2, 3, 3)), r"expected 5D input \(got 4D input\)"),
    (lambda: nn.InstanceNorm3d(2)(braze.zeros(2, 3, 3)), "expected 4D or 5D input"),
    (lambda: nn.ReflectionPad3d(1)(braze.zeros(3, 3, 3)), "expected 4D or 5D input"),
    (lambda: nn.ConvTranspose3d(2, 2, 3, padding_mode="circular"), 'Only "zeros" padding mode is supported'),
    (lambda: F.interpolate(braze.zeros(1, 2, 3, 3), scale_factor=2, mode="trilinear"), "expects a 5-d"),
])
def test_errors_name_the_argument(call: Callable[[], Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


class Volumes(nn.Module):
    """Every 3-d layer with parameters or a backward of its own in one small model, for a compiled training step."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv3d(2, 4, 3, padding=1), nn.BatchNorm3d(4)
        self.pool, self.avg = nn.MaxPool3d(2), nn.AvgPool3d(3, stride=1, padding=1, count_include_pad=False)
        self.up, self.norm = nn.ConvTranspose3d(4, 3, 2, stride=2), nn.InstanceNorm3d(3, affine=True)
        self.gap, self.fc = nn.AdaptiveMaxPool3d((1, 2, 2)), nn.Linear(12, 3)

    def forward(self, x: Any) -> Any:
        h = self.avg(self.pool(F.relu(self.bn(self.conv(x)))))
        return self.fc(self.gap(self.norm(self.up(h))).flatten(1))


def test_compiled_train_step_equals_eager_in_float64() -> None:
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((2, 2, 4, 6, 6)), rng.integers(0, 3, 2)
    models = []
    for _ in range(2):
        braze.manual_seed(0)
        models.append(Volumes().double().train())
    model, eager = models
    opt, eager_opt = (braze.optim.SGD(m.parameters(), lr=0.05) for m in models)
    step = braze.compile_train_step(model, F.cross_entropy, opt, x, y)
    losses = [float(step(x, y)) for _ in range(2)]
    step.sync(model)
    want = []
    for _ in range(2):
        eager_opt.zero_grad()
        loss = F.cross_entropy(eager(braze.tensor(x)), braze.tensor(y))
        loss.backward()
        eager_opt.step()
        want.append(loss.item())
    np.testing.assert_allclose(losses, want, rtol=1e-10)
    trained = dict(eager.named_parameters())
    for path, param in model.named_parameters():
        np.testing.assert_allclose(param.detach().numpy(), trained[path].detach().numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=path)
