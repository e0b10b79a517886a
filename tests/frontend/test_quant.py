"""Weight quantization: the schemes' codes, scales and error bounds (checked in numpy), nibble packing, the NF4 code
book, quantized parameters in modules, records and state dicts."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import braze
from braze import BrazeError, RecordError, nn
from braze.frontend.dispatch import eager_apply, intercept
from braze.nn import ParamGroup, Quantizer
from braze.nn.quant import NF4_HALF_GAP

# bitsandbytes' NF4 code book, as published (functional.get_4bit_type("nf4")).
BNB_NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
           -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
           0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023,
           1.0]


def weights(shape=(6, 10), seed=0, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def roundtrip(q: nn.QuantizedTensor) -> np.ndarray:
    return np.asarray(q.dequantize()).astype(np.float64)


def unpacked(q: nn.QuantizedTensor) -> np.ndarray:
    """The 4-bit indices, read one nibble at a time (element k: byte k // 2, low nibble when k is even)."""
    codes, n = np.asarray(q.codes), int(np.prod(q.shape))
    return np.array([(codes[k // 2] >> (4 * (k % 2))) & 15 for k in range(n)])


# --- int8 -------------------------------------------------------------------------------------------------------
def test_int8_scale_is_max_abs_row_over_127_and_codes_round():
    w = weights()
    q = Quantizer("int8").quantize(w)
    want_scales = (np.abs(w.astype(np.float64)).max(axis=1) / 127).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(q.scales), want_scales)
    codes = np.asarray(q.codes)
    assert codes.dtype == np.int8 and codes.shape == w.shape and np.abs(codes).max() == 127
    np.testing.assert_array_equal(codes, np.rint(w / want_scales[:, None].astype(np.float64)))


@pytest.mark.parametrize("shape,seed", [((6, 10), 0), ((4, 3, 2, 2), 1), ((1, 50), 2), ((30,), 3)])
def test_int8_roundtrip_error_is_at_most_half_a_step_per_element(shape, seed):
    w = weights(shape, seed) * 3
    q = Quantizer("int8").quantize(w)
    step = np.asarray(q.scales).astype(np.float64).reshape((-1,) + (1,) * (len(shape) - 1))
    error = np.abs(roundtrip(q) - w)
    assert np.all(error <= step / 2 * (1 + 2 ** -20))
    assert np.all(error <= q.error_bound() * (1 + 2 ** -20))


def test_int8_tensor_has_one_scale():
    w = weights()
    q = Quantizer("int8-tensor").quantize(w)
    assert np.asarray(q.scales).shape == (1,)
    assert np.asarray(q.scales)[0] == np.float32(np.abs(w.astype(np.float64)).max() / 127)
    assert np.all(np.abs(roundtrip(q) - w) <= np.asarray(q.scales)[0] / 2 * (1 + 2 ** -20))


def test_zero_rows_and_blocks_dequantize_to_zero():
    w = np.zeros((3, 8), np.float32)
    w[1] = 1.0
    for scheme in ("int8", "int8-tensor", "int4", "nf4"):
        np.testing.assert_array_equal(roundtrip(Quantizer(scheme, block_size=8).quantize(w)), w)


# --- 4-bit ------------------------------------------------------------------------------------------------------
def test_nf4_code_book_is_bitsandbytes():
    from braze.ir.ops.reparam import NF4
    assert list(NF4) == BNB_NF4
    assert NF4_HALF_GAP == pytest.approx((1 - 0.6961928009986877) / 2)


@pytest.mark.parametrize("scheme", ["int4", "nf4"])
@pytest.mark.parametrize("shape,block_size", [((6, 10), 64), ((6, 10), 16), ((5, 7), 4), ((3, 3, 3), 5)])
def test_4bit_codes_are_the_nearest_level_of_each_absmax_block(scheme, shape, block_size):
    w = weights(shape, 4)
    q = Quantizer(scheme, block_size=block_size).quantize(w)
    flat = w.reshape(-1).astype(np.float64)
    n = flat.size
    absmax = np.array([np.abs(flat[i:i + block_size]).max() for i in range(0, n, block_size)])
    np.testing.assert_array_equal(np.asarray(q.scales), absmax.astype(np.float32))
    assert np.asarray(q.codes).shape == ((n + 1) // 2,) and np.asarray(q.scales).shape == (-(-n // block_size),)
    levels = np.array(BNB_NF4 if scheme == "nf4" else [(k - 8) / 7 for k in range(16)])
    normalized = flat / np.repeat(np.asarray(q.scales).astype(np.float64), block_size)[:n]
    nearest = np.abs(normalized[:, None] - levels[None, :]).argmin(axis=1)
    np.testing.assert_array_equal(unpacked(q), nearest)


def test_int4_roundtrip_error_is_at_most_absmax_over_14():
    w = weights((8, 16), 5)
    q = Quantizer("int4", block_size=32).quantize(w)
    absmax = np.repeat(np.asarray(q.scales).astype(np.float64), 32).reshape(w.shape)
    assert np.all(np.abs(roundtrip(q) - w) <= absmax / 14 * (1 + 2 ** -20))
    assert np.all(np.abs(roundtrip(q) - w) <= q.error_bound() * (1 + 2 ** -20))


def test_nf4_roundtrip_error_is_within_half_the_code_book_gap():
    w = weights((8, 16), 6)
    q = Quantizer("nf4", block_size=32).quantize(w)
    absmax = np.repeat(np.asarray(q.scales).astype(np.float64), 32).reshape(w.shape)
    levels = np.array(BNB_NF4)
    x = (w / absmax).reshape(-1)
    i = np.clip(np.searchsorted(levels, x), 1, 15)  # x lies in [levels[i - 1], levels[i]]
    half_gap = ((levels[i] - levels[i - 1]) / 2).reshape(w.shape)
    error = np.abs(roundtrip(q) - w)
    assert np.all(error <= half_gap * absmax * (1 + 1e-6))
    assert np.all(error <= NF4_HALF_GAP * absmax * (1 + 1e-6))


def test_nibbles_pack_low_first_and_an_odd_count_is_padded():
    w = np.array([-1.0, 1.0, 0.0, 1.0, -1.0], np.float32)  # nf4 indices 0, 15, 7, 15, 0
    q = Quantizer("nf4", block_size=64).quantize(w)
    np.testing.assert_array_equal(np.asarray(q.codes), np.array([0xF0, 0xF7, 0x00], np.uint8))
    np.testing.assert_array_equal(roundtrip(q), w)


# --- the quantizer ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [("int2",), ("nf4", 0), ("int4", 2.5), ("int8", True)])
def test_quantizer_rejects_bad_schemes_and_block_sizes(args):
    with pytest.raises(BrazeError):
        Quantizer(*args)


def test_quantizer_refuses_integer_tensors_and_scalars_per_channel():
    with pytest.raises(BrazeError, match="floating-point"):
        Quantizer("nf4").quantize(np.arange(4))
    with pytest.raises(BrazeError, match="rank >= 1"):
        Quantizer("int8").quantize(np.float32(1.0))


def test_float64_weights_dequantize_to_float64():
    q = Quantizer("int8").quantize(weights(dtype=np.float64))
    assert q.dequantize().dtype == braze.float64


# --- quantized modules ------------------------------------------------------------------------------------------
class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 8)
        self.norm = nn.BatchNorm1d(8)
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.norm(self.fc(x)))


def quantized(model):
    return sorted(path for path, p in model.named_parameters() if p.stored_tensors()[0][0] == ".codes")


def test_quantize_weights_quantizes_the_weights_only():
    m = Net().quantize_weights(Quantizer("int8"))
    assert quantized(m) == ["fc.weight", "head.weight"]
    assert m.fc.weight.shape == (8, 16) and m.fc.weight.dtype == braze.float32


def test_quantize_weights_group_quantizes_the_group_only():
    m = Net().quantize_weights_group(Quantizer("nf4"), ParamGroup.paths("head.*"))
    assert quantized(m) == ["head.weight"]


def test_quantized_value_is_the_dequantized_codes_through_the_registered_op():
    m = Net().quantize_weights(Quantizer("nf4", block_size=16))
    ops = []

    def record(name, operands, attrs):
        ops.append(name)
        return eager_apply(name, *operands, **attrs)
    with intercept(record):
        value = m.fc.weight.val()
    assert ops == ["dequantize"]
    codes, scales = (t for _, t in m.fc.weight.stored_tensors())
    np.testing.assert_array_equal(np.asarray(value), np.asarray(eager_apply(
        "dequantize", codes, scales, scheme="nf4", block_size=16, shape=(8, 16))))


def test_quantized_model_output_is_close_to_the_dense_one():
    braze.manual_seed(0)
    m = Net().eval()
    x = braze.randn(4, 16)
    dense = np.asarray(m(x))
    m.quantize_weights(Quantizer("int8"))
    np.testing.assert_allclose(np.asarray(m(x)), dense, atol=0.05)


def test_quantized_parameter_keeps_configuration_but_never_requires_grad():
    m = Net().quantize_weights(Quantizer("int8"))
    p = m.fc.weight
    assert p.is_require_grad() and not p.requires_grad and p.grad is None and p.is_initialized
    with pytest.raises(BrazeError, match="quantized"):
        p.assign(np.zeros((8, 16)))


def test_quantized_module_moves_casts_and_copies_without_dequantizing():
    m = Net().quantize_weights(Quantizer("int4", block_size=8))
    before = np.asarray(m.fc.weight.val())
    clone = copy.deepcopy(m)
    m.to("cpu:1")
    assert quantized(m) == ["fc.weight", "head.weight"] and m.fc.weight.device == braze.Device("cpu", 1)
    m.double()
    assert m.fc.weight.val().dtype == braze.float64 and quantized(m) == ["fc.weight", "head.weight"]
    np.testing.assert_array_equal(np.asarray(m.fc.weight.val()), before.astype(np.float64))
    assert clone.fc.weight.device == braze.Device("cpu", 0)


def test_quantized_record_holds_codes_and_scales_and_loads_exactly(tmp_path):
    src = Net().quantize_weights(Quantizer("nf4", block_size=32))
    record = src.into_record()
    assert [k for k in record if k.startswith("fc.weight")] == ["fc.weight.codes", "fc.weight.scales"]
    assert record["fc.weight.codes"].id == record["fc.weight.scales"].id == src.fc.weight.id
    assert record["fc.weight.codes"].array.dtype == np.uint8
    src.save_file(tmp_path / "q.safetensors")
    dst = Net().quantize_weights(Quantizer("nf4", block_size=32)).load_file(tmp_path / "q.safetensors")
    for (k, p), (_, q) in zip(src.named_param_slots(), dst.named_param_slots()):
        assert p.id == q.id
        for (_, t), (_, u) in zip(p.stored_tensors(), q.stored_tensors()):
            np.testing.assert_array_equal(np.asarray(t), np.asarray(u))


def test_quantized_record_into_a_dense_model_is_a_clear_error():
    record = Net().quantize_weights(Quantizer("int8")).into_record()
    with pytest.raises(RecordError, match="fc.weight: the record holds it quantized"):
        Net().load_record(record)
    with pytest.raises(RecordError, match="fc.weight: the record holds a dense value, the module stores it "
                                          "quantized"):
        Net().quantize_weights(Quantizer("int8")).load_record(Net().into_record())


def test_quantized_codes_are_never_cast_by_a_record():
    record = Net().quantize_weights(Quantizer("int8")).into_record()
    with pytest.raises(RecordError, match="fc.weight.codes: the record holds int8, the module's nf4 codes are uint8"):
        Net().quantize_weights(Quantizer("nf4", block_size=8)).load_record(record.with_options(validate=False))


def test_quantized_state_dict_round_trips():
    src = Net().quantize_weights(Quantizer("int4", block_size=16))
    state = src.state_dict()
    assert "fc.weight.codes" in state and "fc.weight" not in state
    dst = Net().quantize_weights(Quantizer("int4", block_size=16))
    dst.load_state_dict(state)
    np.testing.assert_array_equal(np.asarray(dst.fc.weight.val()), np.asarray(src.fc.weight.val()))


def test_requantizing_a_quantized_weight_is_explicit_and_stable():
    m = Net().quantize_weights(Quantizer("nf4", block_size=16))
    once = np.asarray(m.fc.weight.val())
    m.quantize_weights(Quantizer("nf4", block_size=16))
    np.testing.assert_allclose(np.asarray(m.fc.weight.val()), once, rtol=1e-6, atol=1e-7)


def test_quant_int8_of_a_weight_with_no_rows_is_empty() -> None:
    from braze.frontend.nn.quant import quantize_array
    codes, scales = quantize_array(np.zeros((0, 5), np.float32), "int8", 64)
    assert codes.shape == (0, 5) and codes.dtype == np.int8 and scales.shape == (0,)
    codes, scales = quantize_array(np.zeros((0, 5), np.float32), "int8-tensor", 64)
    assert codes.shape == (0, 5) and scales.shape == (1,) and scales[0] == 0
