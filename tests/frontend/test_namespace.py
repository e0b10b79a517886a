"""The torch namespace: dtype aliases, devices, Size, creation keywords and Tensor.to's forms."""
from __future__ import annotations

import numpy as np
import pytest

import braze


@pytest.mark.parametrize("alias, dtype", [("long", braze.int64), ("int", braze.int32), ("float", braze.float32),
                                          ("double", braze.float64), ("bool", braze.bool_), ("uint8", braze.uint8)])
def test_namespace_dtype_alias_is_the_braze_dtype(alias: str, dtype: braze.DType) -> None:
    assert getattr(braze, alias) is dtype


@pytest.mark.parametrize("spelling", [braze.half, braze.float16, braze.bfloat16, "float16", np.float16])
def test_namespace_16_bit_floats_are_refused_as_tensor_dtypes(spelling: object) -> None:
    with pytest.raises(braze.DTypeError, match="no (b?float16) arithmetic"):
        braze.zeros(2, dtype=spelling)


def test_tensor_half_is_refused_with_the_reason() -> None:
    with pytest.raises(braze.DTypeError, match="float16"):
        braze.ones(2).half()


@pytest.mark.parametrize("spec", ["cpu", "cpu:0", ("cpu", 0), braze.device("cpu")])
def test_device_accepts_torch_spellings(spec: object) -> None:
    d = braze.device(*spec) if isinstance(spec, tuple) else braze.device(spec)
    assert (d, d.type, d.index) == (braze.device("cpu:0"), "cpu", 0)


def test_device_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(braze.BrazeError, match=r"unknown device kind 'cuda' \(known: cpu\)"):
        braze.ones(2).to("cuda")


CREATORS = [
    lambda **kw: braze.arange(5, **kw), lambda **kw: braze.zeros(2, 3, **kw), lambda **kw: braze.ones((2,), **kw),
    lambda **kw: braze.empty(2, **kw), lambda **kw: braze.full((2, 2), 1.5, **kw), lambda **kw: braze.eye(3, **kw),
    lambda **kw: braze.linspace(0, 1, 4, **kw), lambda **kw: braze.rand(2, **kw), lambda **kw: braze.randn(2, **kw),
    lambda **kw: braze.randint(0, 5, (3,), **kw), lambda **kw: braze.randperm(4, **kw),
    lambda **kw: braze.tensor([1.0, 2.0], **kw), lambda **kw: braze.zeros_like(braze.ones(2), **kw),
    lambda **kw: braze.ones_like(braze.ones(2), **kw), lambda **kw: braze.full_like(braze.ones(2), 3.0, **kw),
    lambda **kw: braze.rand_like(braze.ones(2), **kw), lambda **kw: braze.randn_like(braze.ones(2), **kw),
    lambda **kw: braze.randint_like(braze.ones(2), 4, **kw), lambda **kw: braze.empty_like(braze.ones(2), **kw)]


@pytest.mark.parametrize("create", CREATORS)
def test_creation_takes_device_keyword(create) -> None:
    assert create(device=braze.device("cpu", 1)).device == braze.device("cpu:1")
    assert create(device="cpu").device == braze.device("cpu")


def test_creation_requires_grad_keyword_makes_a_leaf() -> None:
    t = braze.arange(3.0, requires_grad=True)
    assert t.requires_grad and t.is_leaf


def test_size_is_a_tuple_with_torch_behaviour() -> None:
    s = braze.zeros(2, 3, 4).shape
    assert isinstance(s, braze.Size) and s == (2, 3, 4) and s.numel() == 24
    assert isinstance(s[1:], braze.Size) and s[-1] == 4 and repr(s) == "braze.Size([2, 3, 4])"
    assert braze.zeros(2, 3).size(-1) == 3 and isinstance(braze.zeros(2).size(), braze.Size)


def test_to_forms() -> None:
    x, other = braze.arange(4), braze.zeros(1, dtype=braze.double)
    assert x.to(braze.float).dtype == braze.float32
    assert x.to("cpu", braze.double).dtype == braze.float64
    assert x.to(other).dtype == braze.float64
    assert x.to(device="cpu", dtype=braze.float, non_blocking=True).dtype == braze.float32
    assert x.to(x.dtype) is x and x.to(x.dtype, copy=True) is not x
    assert x.to(memory_format=braze.contiguous_format) is x


def test_to_refuses_unknown_keywords_and_memory_formats() -> None:
    x = braze.ones(2)
    with pytest.raises(TypeError, match="bogus"):
        x.to(bogus=1)
    with pytest.raises(braze.BrazeError, match="to\\(\\): memory_format=braze.channels_last is not supported"):
        x.to(memory_format=braze.channels_last)


def test_new_methods_default_to_this_tensors_dtype_and_device() -> None:
    x = braze.ones(2, dtype=braze.double, device="cpu:1")
    for t in (x.new_zeros(2, 3), x.new_ones((1,)), x.new_empty(2), x.new_full((2,), 7.0), x.new_tensor([1, 2])):
        assert (t.dtype, t.device) == (braze.float64, braze.device("cpu:1"))
    assert x.new_full((2,), 7).tolist() == [7.0, 7.0] and x.new_zeros(1, dtype=braze.long).dtype == braze.int64


def test_inplace_random_fills_follow_their_parameters() -> None:
    braze.manual_seed(0)
    w = braze.zeros(4000)
    assert w.normal_(2.0, 0.5) is w and abs(float(w.mean()) - 2.0) < 0.05 and abs(float(w.std()) - 0.5) < 0.05
    w.uniform_(-3, -1)
    assert -3 <= float(w.min()) and float(w.max()) < -1
    w.uniform_(**{"from": 5, "to": 6})
    assert 5 <= float(w.min()) and float(w.max()) < 6


def test_inplace_fill_of_a_parameter_needs_no_grad() -> None:
    w = braze.zeros(3, requires_grad=True)
    with pytest.raises(braze.BrazeError, match="no_grad"):
        w.normal_()
    with braze.no_grad():
        w.uniform_(1, 2)
    assert float(w.min()) >= 1


def test_tensor_split_takes_torchs_split_size_name() -> None:
    parts = braze.arange(5).split(split_size=2)
    assert [p.tolist() for p in parts] == [[0, 1], [2, 3], [4]]


@pytest.mark.parametrize("dtype, floating", [(braze.float32, True), (braze.float64, True), (braze.long, False),
                                             (braze.uint8, False), (braze.bool, False)])
def test_is_floating_point_follows_the_dtype(dtype: braze.DType, floating: bool) -> None:
    assert (braze.zeros(2, dtype=dtype).is_floating_point(), dtype.is_floating_point) == (floating, floating)


def test_cuda_is_never_available_and_seeding_it_does_nothing() -> None:
    import braze.cuda
    braze.cuda.manual_seed_all(0)
    assert (braze.cuda.is_available(), braze.cuda.device_count(), braze.cuda.is_bf16_supported()) == (False, 0, False)
