"""The standard layers against PyTorch: PyTorch's weights loaded through load_state_dict give PyTorch's outputs,
updated buffers and gradients (train and eval mode; float32 to 1e-5, float64 to 1e-10)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import braze  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")

RNG = np.random.default_rng(1234)


@dataclass
class Lib:
    """One framework at one dtype, so a case builds its module and inputs once for both."""

    is_torch: bool
    bits: int

    @property
    def nn(self) -> Any:
        return torch.nn if self.is_torch else braze.nn

    @property
    def dt(self) -> Any:
        return {32: torch.float32, 64: torch.float64}[self.bits] if self.is_torch else \
            {32: braze.float32, 64: braze.float64}[self.bits]

    def tensor(self, array: Any, requires_grad: bool = False) -> Any:
        a = np.asarray(array)
        if a.dtype.kind == "f":
            a = a.astype(np.float32 if self.bits == 32 else np.float64)
        return torch.tensor(a, requires_grad=requires_grad) if self.is_torch else \
            braze.tensor(a, requires_grad=requires_grad)


def _call(m: Any, xs: list[Any], lib: Lib) -> Any:
    return m(*xs)


@dataclass
class Case:
    id: str
    make: Callable[[Lib], Any]
    inputs: list[np.ndarray]
    call: Callable[[Any, list[Any], Lib], Any] = _call
    modes: tuple[bool, ...] = (True, False)
    bits: tuple[int, ...] = (32, 64)
    extra: dict[str, Any] = field(default_factory=dict)


def r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def idx(high: int, *shape: int) -> np.ndarray:
    return RNG.integers(0, high, shape).astype(np.int64)


def _padding_mask(batch: int, src: int) -> np.ndarray:
    m = RNG.random((batch, src)) < 0.4
    m[:, 0] = False  # every query keeps one key, so no row of the softmax is empty
    return m


def _bool_attn_mask(tgt: int, src: int) -> np.ndarray:
    m = RNG.random((tgt, src)) < 0.4
    m[:, 0] = False
    return m


CAUSAL = np.triu(np.ones((5, 5), dtype=bool), 1)
KPM, ATTN_BOOL, ATTN_FLOAT, SRC_MASK = _padding_mask(2, 6), _bool_attn_mask(4, 6), r(4, 6), _bool_attn_mask(6, 6)
ATTN_3D = r(2 * 2, 4, 6)


def mha(**kw: Any) -> Callable[[Lib], Any]:
    return lambda lib: lib.nn.MultiheadAttention(8, 2, dtype=lib.dt, **kw)


def mha_call(**kw: Any) -> Callable[[Any, list[Any], Lib], Any]:
    def call(m: Any, xs: list[Any], lib: Lib) -> Any:
        masks = {k: (lib.tensor(v) if isinstance(v, np.ndarray) else v) for k, v in kw.items()}
        return m(*xs, **masks)
    return call


def tel(**kw: Any) -> Callable[[Lib], Any]:
    return lambda lib: lib.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, dtype=lib.dt, **kw)


CASES = [
    Case("linear", lambda lib: lib.nn.Linear(5, 3, dtype=lib.dt), [r(4, 5)]),
    Case("linear_3d_nobias", lambda lib: lib.nn.Linear(5, 3, bias=False, dtype=lib.dt), [r(2, 4, 5)]),
    Case("conv", lambda lib: lib.nn.Conv2d(3, 4, 3, dtype=lib.dt), [r(2, 3, 7, 7)]),
    Case("conv_stride_padding_dilation", lambda lib: lib.nn.Conv2d(3, 4, (3, 2), stride=(2, 1), padding=(1, 2),
                                                                  dilation=(1, 2), dtype=lib.dt), [r(2, 3, 7, 8)]),
    Case("conv_groups_nobias", lambda lib: lib.nn.Conv2d(4, 6, 3, groups=2, bias=False, dtype=lib.dt),
         [r(2, 4, 5, 5)]),
    Case("conv_same_even_kernel", lambda lib: lib.nn.Conv2d(3, 2, 4, padding="same", dtype=lib.dt), [r(1, 3, 6, 6)]),
    Case("conv_reflect", lambda lib: lib.nn.Conv2d(3, 2, 3, padding=2, padding_mode="reflect", dtype=lib.dt),
         [r(2, 3, 5, 6)]),
    Case("conv_replicate", lambda lib: lib.nn.Conv2d(3, 2, 3, padding=(1, 2), padding_mode="replicate",
                                                    dtype=lib.dt), [r(2, 3, 5, 6)]),
    Case("conv_circular", lambda lib: lib.nn.Conv2d(3, 2, 3, stride=2, padding=1, padding_mode="circular",
                                                   dtype=lib.dt), [r(2, 3, 5, 6)]),
    Case("conv_same_circular", lambda lib: lib.nn.Conv2d(3, 2, 4, padding="same", padding_mode="circular",
                                                        dtype=lib.dt), [r(1, 3, 5, 6)]),
    Case("conv_unbatched", lambda lib: lib.nn.Conv2d(3, 2, 3, padding=1, dtype=lib.dt), [r(3, 5, 5)]),
    Case("batchnorm1d", lambda lib: lib.nn.BatchNorm1d(4, dtype=lib.dt), [r(6, 4)]),
    Case("batchnorm1d_3d_cumulative", lambda lib: lib.nn.BatchNorm1d(4, momentum=None, dtype=lib.dt),
         [r(3, 4, 5)]),
    Case("batchnorm2d", lambda lib: lib.nn.BatchNorm2d(3, eps=1e-3, momentum=0.3, dtype=lib.dt), [r(2, 3, 4, 5)]),
    Case("batchnorm1d_nobias", lambda lib: lib.nn.BatchNorm1d(4, bias=False, dtype=lib.dt), [r(5, 4)]),
    Case("batchnorm2d_noaffine", lambda lib: lib.nn.BatchNorm2d(3, affine=False, dtype=lib.dt), [r(2, 3, 4, 4)]),
    Case("batchnorm2d_no_running_stats", lambda lib: lib.nn.BatchNorm2d(3, track_running_stats=False,
                                                                       dtype=lib.dt), [r(2, 3, 4, 4)]),
    Case("layernorm", lambda lib: lib.nn.LayerNorm(6, dtype=lib.dt), [r(2, 3, 6)]),
    Case("layernorm_2d_shape", lambda lib: lib.nn.LayerNorm((3, 6), eps=1e-3, dtype=lib.dt), [r(2, 3, 6)]),
    Case("layernorm_noaffine", lambda lib: lib.nn.LayerNorm(6, elementwise_affine=False, dtype=lib.dt), [r(4, 6)]),
    Case("layernorm_nobias", lambda lib: lib.nn.LayerNorm(6, bias=False, dtype=lib.dt), [r(4, 6)]),
    Case("dropout_p0", lambda lib: lib.nn.Dropout(0.0), [r(3, 4)]),
    Case("dropout_eval", lambda lib: lib.nn.Dropout(0.5), [r(3, 4)], modes=(False,)),
    Case("embedding", lambda lib: lib.nn.Embedding(10, 4, dtype=lib.dt), [idx(10, 3, 5)]),
    Case("embedding_padding_idx", lambda lib: lib.nn.Embedding(10, 4, padding_idx=2, dtype=lib.dt),
         [np.array([[2, 1, 2, 9], [0, 2, 3, 3]])]),
    Case("embedding_scale_grad_by_freq", lambda lib: lib.nn.Embedding(10, 4, scale_grad_by_freq=True, dtype=lib.dt),
         [np.array([[2, 1, 2, 9], [0, 2, 3, 3]])]),
    Case("hardtanh", lambda lib: lib.nn.Hardtanh(-0.5, 0.75), [r(3, 4)]),
    Case("relu", lambda lib: lib.nn.ReLU(), [r(3, 4)]),
    Case("gelu", lambda lib: lib.nn.GELU(), [r(3, 4)]),
    Case("gelu_tanh", lambda lib: lib.nn.GELU(approximate="tanh"), [r(3, 4)]),
    Case("silu", lambda lib: lib.nn.SiLU(), [r(3, 4)]),
    Case("tanh", lambda lib: lib.nn.Tanh(), [r(3, 4)]),
    Case("sigmoid", lambda lib: lib.nn.Sigmoid(), [r(3, 4)]),
    Case("softmax", lambda lib: lib.nn.Softmax(dim=1), [r(2, 3, 4)]),
    Case("flatten", lambda lib: lib.nn.Flatten(), [r(2, 3, 4, 2)]),
    Case("flatten_range", lambda lib: lib.nn.Flatten(0, 1), [r(2, 3, 4)]),
    Case("identity", lambda lib: lib.nn.Identity(3, unused=True), [r(2, 3)]),
    Case("maxpool", lambda lib: lib.nn.MaxPool2d(2), [r(2, 3, 6, 6)]),
    Case("maxpool_stride_padding_ceil", lambda lib: lib.nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True),
         [r(2, 3, 6, 7)]),
    Case("maxpool_dilation", lambda lib: lib.nn.MaxPool2d((2, 3), dilation=(1, 2)), [r(1, 2, 6, 8)]),
    Case("avgpool", lambda lib: lib.nn.AvgPool2d(2), [r(2, 3, 6, 6)]),
    Case("avgpool_padding_exclude", lambda lib: lib.nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True,
                                                                 count_include_pad=False), [r(2, 3, 6, 7)]),
    Case("adaptive_avgpool", lambda lib: lib.nn.AdaptiveAvgPool2d(3), [r(2, 3, 7, 8)]),
    Case("adaptive_avgpool_keep_dim", lambda lib: lib.nn.AdaptiveAvgPool2d((2, None)), [r(2, 3, 5, 4)]),
    Case("sequential_cnn", lambda lib: lib.nn.Sequential(
        lib.nn.Conv2d(3, 4, 3, padding=1, dtype=lib.dt), lib.nn.BatchNorm2d(4, dtype=lib.dt), lib.nn.ReLU(),
        lib.nn.MaxPool2d(2), lib.nn.Flatten(), lib.nn.Linear(4 * 3 * 3, 5, dtype=lib.dt)), [r(2, 3, 6, 6)]),
    Case("mha_self", mha(), [r(5, 2, 8)] * 3),
    Case("mha_cross_batch_first", mha(batch_first=True), [r(2, 4, 8), r(2, 6, 8), r(2, 6, 8)]),
    Case("mha_nobias_per_head_weights", mha(bias=False), [r(4, 2, 8), r(6, 2, 8), r(6, 2, 8)],
         call=mha_call(average_attn_weights=False)),
    Case("mha_masks_bool", mha(batch_first=True), [r(2, 4, 8), r(2, 6, 8), r(2, 6, 8)],
         call=mha_call(attn_mask=ATTN_BOOL, key_padding_mask=KPM)),
    Case("mha_mask_float", mha(), [r(4, 2, 8), r(6, 2, 8), r(6, 2, 8)], call=mha_call(attn_mask=ATTN_FLOAT)),
    Case("mha_mask_3d", mha(), [r(4, 2, 8), r(6, 2, 8), r(6, 2, 8)], call=mha_call(attn_mask=ATTN_3D)),
    Case("mha_causal_no_weights", mha(batch_first=True), [r(2, 5, 8)] * 3,
         call=mha_call(attn_mask=CAUSAL, is_causal=True, need_weights=False)),
    Case("mha_unbatched", mha(), [r(4, 8), r(6, 8), r(6, 8)], call=mha_call(key_padding_mask=KPM[0])),
    Case("mha_dropout_eval", mha(dropout=0.5), [r(4, 2, 8), r(6, 2, 8), r(6, 2, 8)], modes=(False,)),
    Case("mha_kdim_vdim", mha(kdim=5, vdim=3), [r(4, 2, 8), r(6, 2, 5), r(6, 2, 3)]),
    Case("mha_bias_kv_zero_attn", mha(add_bias_kv=True, add_zero_attn=True, batch_first=True),
         [r(2, 4, 8), r(2, 6, 8), r(2, 6, 8)], call=mha_call(attn_mask=ATTN_BOOL, key_padding_mask=KPM)),
    Case("tel_post_norm_relu", tel(), [r(5, 2, 8)]),
    Case("tel_pre_norm_gelu_batch_first", tel(norm_first=True, activation="gelu", batch_first=True),
         [r(2, 5, 8)]),
    Case("tel_masks", tel(batch_first=True), [r(2, 6, 8)],
         call=lambda m, xs, lib: m(xs[0], src_mask=lib.tensor(SRC_MASK),
                                   src_key_padding_mask=lib.tensor(KPM))),
    Case("tel_causal_nobias", tel(bias=False, norm_first=True), [r(5, 2, 8)],
         call=lambda m, xs, lib: m(xs[0], src_mask=lib.tensor(CAUSAL), is_causal=True)),
    Case("tel_dropout_eval", lambda lib: lib.nn.TransformerEncoderLayer(8, 2, 16, dtype=lib.dt), [r(5, 2, 8)],
         modes=(False,)),
    Case("cross_entropy", lambda lib: lib.nn.CrossEntropyLoss(), [r(5, 4), idx(4, 5)]),
    Case("cross_entropy_weight_ignore_smoothing", lambda lib: lib.nn.CrossEntropyLoss(
        weight=lib.tensor([0.2, 1.0, 2.0, 0.7]), ignore_index=1, label_smoothing=0.1), [r(6, 4), idx(4, 6)]),
    Case("cross_entropy_spatial_sum", lambda lib: lib.nn.CrossEntropyLoss(reduction="sum"),
         [r(2, 4, 3, 3), idx(4, 2, 3, 3)]),
    Case("cross_entropy_probabilities", lambda lib: lib.nn.CrossEntropyLoss(reduction="none"),
         [r(3, 4), np.abs(r(3, 4)) / 4]),
    Case("mse", lambda lib: lib.nn.MSELoss(), [r(3, 4), r(3, 4)]),
    Case("mse_none", lambda lib: lib.nn.MSELoss(reduction="none"), [r(3, 4), r(3, 4)]),
]

PARAMS = [pytest.param(c, bits, train, id=f"{c.id}-f{bits}-{'train' if train else 'eval'}")
          for c in CASES for bits in c.bits for train in c.modes]


def _perturbed_torch_module(case: Case, bits: int) -> Any:
    """The torch module with every float state entry moved off its default (ones, zeros) and a batch count."""
    torch.manual_seed(0)
    tm = case.make(Lib(True, bits))
    with torch.no_grad():
        for name, t in tm.state_dict().items():
            if name.endswith("running_var"):
                t.uniform_(0.5, 1.5)
            elif t.is_floating_point():
                t.add_(torch.empty_like(t).uniform_(-0.3, 0.3))
            elif name.endswith("num_batches_tracked"):
                t.fill_(3)
    return tm


def _flat(out: Any) -> list[Any]:
    return list(out) if isinstance(out, tuple) else [out]


def _np(t: Any) -> np.ndarray:
    return t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)


@pytest.mark.parametrize("case,bits,train", PARAMS)
def test_layer_matches_torch(case: Case, bits: int, train: bool) -> None:
    check_against_torch(case, bits, train)


def check_against_torch(case: Case, bits: int, train: bool, tol: float | None = None) -> None:
    """Same state dict keys; torch's weights loaded give torch's outputs, buffers and gradients."""
    tol = tol if tol is not None else (1e-5 if bits == 32 else 1e-10)
    tm = _perturbed_torch_module(case, bits)
    bm = case.make(Lib(False, bits))
    torch_state = tm.state_dict()
    assert list(bm.state_dict()) == list(torch_state)
    bm.load_state_dict({k: v.numpy() for k, v in torch_state.items()})
    tm.train(train)
    bm.train(train)

    libs = (Lib(True, bits), Lib(False, bits))
    xs = [[lib.tensor(x, requires_grad=x.dtype.kind == "f") for x in case.inputs] for lib in libs]
    if case.inputs[1:] and case.inputs[0] is case.inputs[1]:  # self-attention: the very same tensor thrice
        xs = [[x[0]] * len(case.inputs) for x in xs]
    outs_t = _flat(case.call(tm, xs[0], libs[0]))
    outs_b = _flat(case.call(bm, xs[1], libs[1]))
    assert [o is None for o in outs_t] == [o is None for o in outs_b]
    for ot, ob in zip(outs_t, outs_b):
        if ot is not None:
            assert tuple(ob.shape) == tuple(ot.shape)
            np.testing.assert_allclose(_np(ob), _np(ot), rtol=tol, atol=tol)

    for key, value in tm.state_dict().items():  # buffers updated in training (running statistics)
        np.testing.assert_allclose(bm.state_dict()[key], value.numpy(), rtol=tol, atol=tol, err_msg=key)

    cotangents = [RNG.standard_normal(tuple(o.shape)) for o in outs_t if o is not None]
    for lib, outs in zip(libs, (outs_t, outs_b)):
        live = [o for o in outs if o is not None]
        sum(((o * lib.tensor(c)).sum() for o, c in zip(live, cotangents)), lib.tensor(0.0)).backward()
    grads_b = {n: p.grad for n, p in bm.named_parameters()}
    for name, p in tm.named_parameters():
        if p.grad is None:
            assert grads_b[name] is None or not np.any(_np(grads_b[name])), name
        else:
            np.testing.assert_allclose(_np(grads_b[name]), p.grad.numpy(), rtol=tol, atol=tol, err_msg=name)
    for xt, xb in zip(xs[0], xs[1]):
        if xt.requires_grad and xt.grad is not None:
            np.testing.assert_allclose(_np(xb.grad), xt.grad.numpy(), rtol=tol, atol=tol)


def test_state_dict_keys_of_a_transformer_layer_match_torch() -> None:
    tm = torch.nn.TransformerEncoderLayer(8, 2, 16, activation=torch.nn.GELU())
    bm = braze.nn.TransformerEncoderLayer(8, 2, 16, activation=braze.nn.GELU())
    assert list(bm.state_dict()) == list(tm.state_dict())
    assert [n for n, _ in bm.named_modules()] == [n for n, _ in tm.named_modules()]
    assert [n for n, _ in bm.named_parameters()] == [n for n, _ in tm.named_parameters()]


@pytest.mark.parametrize("make", [
    lambda nn: nn.Linear(3, 4), lambda nn: nn.Linear(3, 4, bias=False),
    lambda nn: nn.Conv2d(3, 8, 3), lambda nn: nn.Conv2d(4, 8, (3, 1), stride=2, padding=1, dilation=2, groups=2,
                                                        bias=False, padding_mode="reflect"),
    lambda nn: nn.Conv2d(3, 8, 4, padding="same"),
    lambda nn: nn.BatchNorm1d(5), lambda nn: nn.BatchNorm2d(5, momentum=None, affine=False),
    lambda nn: nn.LayerNorm((2, 3), eps=1e-6, elementwise_affine=False), lambda nn: nn.Dropout(0.25),
    lambda nn: nn.Embedding(10, 3), lambda nn: nn.Embedding(10, 3, padding_idx=-1),
    lambda nn: nn.Embedding(10, 3, scale_grad_by_freq=True, sparse=True), lambda nn: nn.Hardtanh(),
    lambda nn: nn.Hardtanh(-2, 3, inplace=True),
    lambda nn: nn.ReLU(), lambda nn: nn.GELU(approximate="tanh"), lambda nn: nn.SiLU(), lambda nn: nn.Tanh(),
    lambda nn: nn.Sigmoid(), lambda nn: nn.Softmax(dim=-1), lambda nn: nn.Flatten(), lambda nn: nn.Identity(),
    lambda nn: nn.MaxPool2d(3, 2, 1), lambda nn: nn.AvgPool2d(2), lambda nn: nn.AdaptiveAvgPool2d((3, 4)),
    lambda nn: nn.CrossEntropyLoss(), lambda nn: nn.MSELoss(),
])
def test_extra_repr_matches_torch(make: Callable[[Any], Any]) -> None:
    assert make(braze.nn).extra_repr() == make(torch.nn).extra_repr()
