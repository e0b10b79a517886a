"""The Tensor's data API: creation dtypes, conversions, metadata, repr, the generator and in-place updates."""
from __future__ import annotations

import numpy as np
import pytest

import braze


def test_tensor_python_floats_are_float32() -> None:
    assert braze.tensor([1.0, 2.5]).dtype == braze.float32


def test_tensor_python_ints_are_int64() -> None:
    assert braze.tensor([[1, 2], [3, 4]]).dtype == braze.int64


def test_tensor_python_bools_are_bool() -> None:
    assert braze.tensor([True, False]).dtype == braze.bool_


def test_tensor_numpy_float64_stays_float64() -> None:
    assert braze.tensor(np.zeros(3)).dtype == braze.float64


def test_tensor_numpy_int32_keeps_dtype() -> None:
    assert braze.tensor(np.arange(3, dtype=np.int32)).dtype == braze.int32


def test_tensor_explicit_dtype_converts() -> None:
    t = braze.tensor([1, 2], dtype=braze.float64)
    assert t.dtype == braze.float64 and t.tolist() == [1.0, 2.0]


def test_tensor_python_floats_with_a_float64_dtype_are_exact() -> None:
    """As torch's: 0.1 as float64 is the double nearest 0.1, not 0.1 rounded to float32 first."""
    assert braze.tensor(0.1, dtype=braze.float64).item() == 0.1
    assert braze.tensor([1 / 3, 1e-300], dtype=braze.float64).tolist() == [1 / 3, 1e-300]
    assert braze.tensor(0.1).item() == float(np.float32(0.1))


def test_tensor_copies_its_data() -> None:
    a = np.ones(3, np.float32)
    t = braze.tensor(a)
    a[0] = 5
    assert t.tolist() == [1.0, 1.0, 1.0]


def test_from_numpy_shares_memory() -> None:
    a = np.ones(3, np.float32)
    t = braze.from_numpy(a)
    a[0] = 5
    assert t.tolist()[0] == 5


def test_tensor_rejects_unsupported_dtype() -> None:
    with pytest.raises(braze.DTypeError):
        braze.tensor(np.zeros(2, np.float16))


def test_shape_is_tuple_and_size_matches() -> None:
    t = braze.zeros(2, 3, 4)
    assert t.shape == (2, 3, 4) and t.size() == (2, 3, 4) and t.size(-1) == 4 and t.size(1) == 3


def test_dim_ndim_numel() -> None:
    t = braze.ones((2, 5))
    assert (t.dim(), t.ndim, t.numel(), len(t)) == (2, 2, 10, 2)


def test_item_and_tolist() -> None:
    assert braze.tensor([[3.5]]).item() == 3.5
    assert braze.tensor([[1, 2]]).tolist() == [[1, 2]]


def test_item_rejects_many_elements() -> None:
    with pytest.raises(braze.BrazeError, match="one-element"):
        braze.tensor([1.0, 2.0]).item()


def test_numpy_and_array_protocol() -> None:
    t = braze.tensor([1.0, 2.0])
    assert isinstance(t.numpy(), np.ndarray)
    np.testing.assert_array_equal(np.asarray(t), np.array([1.0, 2.0], np.float32))


def test_numpy_requires_detach_when_tracking() -> None:
    t = braze.tensor([1.0], requires_grad=True)
    with pytest.raises(braze.BrazeError, match="detach"):
        t.numpy()
    assert t.detach().numpy().tolist() == [1.0]


def test_repr_like_torch() -> None:
    assert repr(braze.tensor([1.0, 2.0, 3.0], requires_grad=True)) == "tensor([1., 2., 3.], requires_grad=True)"
    assert repr(braze.tensor([1.5, -2.25])) == "tensor([ 1.5000, -2.2500])"
    assert repr(braze.tensor([1, 2])) == "tensor([1, 2])"
    assert repr(braze.tensor(np.array([0.5]))) == "tensor([0.5000], dtype=braze.float64)"


def test_repr_names_the_producing_op() -> None:
    t = braze.tensor([1.0], requires_grad=True) * 2
    assert repr(t) == "tensor([2.], grad_fn=<mul>)"


def test_bool_float_int_conversions() -> None:
    assert bool(braze.tensor([1.0])) and float(braze.tensor(2.5)) == 2.5 and int(braze.tensor([7])) == 7


def test_bool_of_many_elements_is_ambiguous() -> None:
    with pytest.raises(braze.BrazeError, match="ambiguous"):
        bool(braze.tensor([1.0, 2.0]))


def test_iteration_yields_rows() -> None:
    rows = list(braze.arange(6).reshape(2, 3))
    assert [r.tolist() for r in rows] == [[0, 1, 2], [3, 4, 5]]


def test_tensors_hash_by_identity() -> None:
    a, b = braze.tensor([1.0]), braze.tensor([1.0])
    assert len({a, b}) == 2


def test_dtype_conversion_methods() -> None:
    t = braze.tensor([1.7, -2.2])
    assert t.long().tolist() == [1, -2] and t.int().dtype == braze.int32 and t.double().dtype == braze.float64
    assert t.bool().tolist() == [True, True] and braze.tensor([1]).float().dtype == braze.float32
    assert t.to(braze.float64).dtype == braze.float64 and t.to("cpu") is t and t.to(t) is t


def test_zeros_ones_full_defaults() -> None:
    assert braze.zeros(2).dtype == braze.float32 and braze.ones(2, dtype=braze.int64).tolist() == [1, 1]
    assert braze.full((2,), 3).dtype == braze.int64 and braze.full((2,), 0.5).tolist() == [0.5, 0.5]
    assert braze.full((1,), True).dtype == braze.bool_


def test_arange_dtypes_and_values() -> None:
    assert braze.arange(4).tolist() == [0, 1, 2, 3] and braze.arange(4).dtype == braze.int64
    np.testing.assert_allclose(braze.arange(0, 1, 0.25).numpy(), [0, 0.25, 0.5, 0.75])
    assert braze.arange(1, 7, 2).tolist() == [1, 3, 5] and braze.arange(0.0, 2).dtype == braze.float32


def test_like_functions_follow_input() -> None:
    x = braze.tensor(np.zeros((2, 3)))
    assert braze.zeros_like(x).dtype == braze.float64 and braze.ones_like(x).tolist() == [[1.0] * 3] * 2
    assert braze.full_like(x, 2).tolist() == [[2.0] * 3] * 2 and braze.randn_like(x).shape == (2, 3)
    assert braze.rand_like(x, dtype=braze.float32).dtype == braze.float32


def test_manual_seed_makes_random_repeatable() -> None:
    braze.manual_seed(3)
    a, b = braze.randn(4), braze.rand(2, 2)
    braze.manual_seed(3)
    assert np.array_equal(a.numpy(), braze.randn(4).numpy()) and np.array_equal(b.numpy(), braze.rand(2, 2).numpy())


def test_rand_is_in_unit_interval() -> None:
    r = braze.rand(1000).numpy()
    assert r.dtype == np.float32 and r.min() >= 0 and r.max() < 1


def test_randint_and_randperm() -> None:
    r = braze.randint(3, 7, (50,)).numpy()
    assert r.min() >= 3 and r.max() < 7 and braze.randint(5, (2, 2)).shape == (2, 2)
    assert sorted(braze.randperm(6).tolist()) == list(range(6))


def test_generator_objects_are_independent() -> None:
    g1, g2 = braze.Generator(5), braze.Generator(5)
    assert np.array_equal(braze.randn(3, generator=g1).numpy(), braze.randn(3, generator=g2).numpy())


def test_copy_and_zero_in_place() -> None:
    t = braze.ones(3)
    t.copy_(braze.tensor([1.0, 2.0, 3.0]))
    assert t.tolist() == [1.0, 2.0, 3.0]
    assert t.zero_().tolist() == [0.0, 0.0, 0.0] and t.fill_(2).tolist() == [2.0] * 3


def test_copy_into_grad_leaf_needs_no_grad() -> None:
    w = braze.ones(2, requires_grad=True)
    with pytest.raises(braze.BrazeError, match="no_grad"):
        w.copy_(braze.zeros(2))
    with braze.no_grad():
        w.copy_(braze.zeros(2))
    assert w.detach().tolist() == [0.0, 0.0]


def test_clone_copies_and_keeps_gradient() -> None:
    x = braze.tensor([1.0, 2.0], requires_grad=True)
    c = x.clone()
    c.sum().backward()
    assert not np.shares_memory(c.detach().numpy(), x.detach().numpy()) and x.grad.tolist() == [1.0, 1.0]


@pytest.mark.parametrize("dtype, size", [(braze.float32, 4), (braze.float64, 8), (braze.int64, 8),
                                         (braze.uint8, 1), (braze.bool, 1)])
def test_element_size_is_the_dtypes_bytes(dtype: braze.DType, size: int) -> None:
    assert braze.zeros(2, dtype=dtype).element_size() == size


def test_memory_queries_of_a_transposed_tensor() -> None:
    """Every braze tensor is dense, row-major and in host memory, a transposed one too."""
    x = braze.ones(2, 3).t()
    assert (x.nelement(), x.is_contiguous(), x.is_cuda, x.is_cpu) == (6, True, False, True)


def test_is_contiguous_refuses_channels_last() -> None:
    with pytest.raises(braze.BrazeError, match="is_contiguous: memory_format=braze.channels_last is not supported"):
        braze.ones(1, 2, 2, 2).is_contiguous(memory_format=braze.channels_last)
