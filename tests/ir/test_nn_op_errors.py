"""Bad operands and attributes of the neural-network ops raise errors that name the op, the shapes and why."""
from __future__ import annotations

import re

import numpy as np
import pytest

from braze import ir
from braze.ir import AttributeSchemaError, BrazeError, DTypeError, ShapeError, TensorType


def _infer(name: str, *types: TensorType, **attrs: object) -> tuple[TensorType, ...]:
    op = ir.get_op(name)
    return op.infer_types(types, op.check_attrs(attrs))


def f64(*shape: int) -> TensorType:
    return TensorType(shape, ir.float64)


def f32(*shape: int) -> TensorType:
    return TensorType(shape, ir.float32)


def i64(*shape: int) -> TensorType:
    return TensorType(shape, ir.int64)


def test_conv2d_channel_mismatch_names_weight_and_input() -> None:
    message = "conv2d: expected input with 3 channels (weight (8,3,3,3)), got (1,4,8,8)"
    with pytest.raises(ShapeError, match=re.escape(message)):
        _infer("conv2d", f32(1, 4, 8, 8), f32(8, 3, 3, 3))


def test_conv2d_grouped_channel_mismatch_names_groups() -> None:
    with pytest.raises(ShapeError, match=re.escape("expected input with 4 channels (weight (6,2,3,3) and groups=2)")):
        _infer("conv2d", f32(1, 6, 8, 8), f32(6, 2, 3, 3), groups=2)


def test_conv2d_output_channels_must_divide_by_groups() -> None:
    with pytest.raises(ShapeError, match="5 output channels, not divisible by groups=2"):
        _infer("conv2d", f32(1, 4, 8, 8), f32(5, 2, 3, 3), groups=2)


def test_conv2d_kernel_larger_than_padded_input() -> None:
    with pytest.raises(ShapeError, match=re.escape("padded input size 4x4 (input (1,1,2,2)) is smaller than the "
                                                   "dilated kernel size 5x5")):
        _infer("conv2d", f32(1, 1, 2, 2), f32(1, 1, 3, 3), padding=(1, 1), dilation=(2, 2))


def test_conv2d_requires_a_batched_input() -> None:
    with pytest.raises(ShapeError, match=re.escape("conv2d: expected a 4-d input (N,C,H,W), got (3,8,8)")):
        _infer("conv2d", f32(3, 8, 8), f32(8, 3, 3, 3))


def test_conv2d_bias_must_match_output_channels() -> None:
    with pytest.raises(ShapeError, match=re.escape("expected bias of shape (8,) for weight (8,3,3,3), got (3,)")):
        _infer("conv2d", f32(1, 3, 8, 8), f32(8, 3, 3, 3), f32(3))


def test_conv2d_rejects_mixed_dtypes() -> None:
    with pytest.raises(DTypeError, match="conv2d: operand dtypes differ"):
        _infer("conv2d", f32(1, 3, 8, 8), f64(8, 3, 3, 3))


@pytest.mark.parametrize("attrs, message", [({"stride": (1, 1, 1)}, "'stride' expects 2 values"),
                                            ({"stride": (0, 1)}, "'stride' values must be >= 1"),
                                            ({"padding": (-1, 0)}, "'padding' values must be >= 0"),
                                            ({"groups": 0}, "groups must be positive")])
def test_conv2d_bad_geometry_attributes(attrs: dict, message: str) -> None:
    with pytest.raises((AttributeSchemaError, ShapeError), match=message):
        _infer("conv2d", f32(1, 3, 8, 8), f32(8, 3, 3, 3), **attrs)


def test_conv2d_grad_input_checks_the_gradient_shape() -> None:
    with pytest.raises(ShapeError, match=re.escape("expected an output gradient of shape (1,8,6,6) for input "
                                                   "(1,3,8,8) and weight (8,3,3,3), got (1,8,8,8)")):
        _infer("conv2d_grad_input", f32(1, 8, 8, 8), f32(8, 3, 3, 3), input_shape=(1, 3, 8, 8))


def test_conv2d_grad_weight_checks_the_gradient_shape() -> None:
    with pytest.raises(ShapeError, match="conv2d_grad_weight: expected an output gradient of shape"):
        _infer("conv2d_grad_weight", f32(1, 3, 8, 8), f32(1, 8, 5, 5), weight_shape=(8, 3, 3, 3))


def test_max_pool2d_padding_at_most_half_the_kernel() -> None:
    with pytest.raises(ShapeError, match=re.escape("max_pool2d: padding [2, 2] must be at most half of "
                                                   "kernel_size [2, 2]")):
        _infer("max_pool2d", f32(1, 1, 9, 9), kernel_size=(2, 2), stride=(1, 1), padding=(2, 2))


def test_max_pool2d_output_too_small() -> None:
    with pytest.raises(ShapeError, match=re.escape("max_pool2d: input (1,2,2) gives output size 0x0, "
                                                   "which is too small")):
        _infer("max_pool2d", f32(1, 2, 2), kernel_size=(3, 3), stride=(1, 1))


def test_max_pool2d_rank() -> None:
    with pytest.raises(ShapeError, match=re.escape("expected a 3-d (C,H,W) or 4-d (N,C,H,W) input, got (8,8)")):
        _infer("max_pool2d", f32(8, 8), kernel_size=(2, 2), stride=(2, 2))


def test_max_pool2d_requires_floats() -> None:
    with pytest.raises(DTypeError, match="max_pool2d: expects floating-point operands"):
        _infer("max_pool2d", i64(1, 4, 4), kernel_size=(2, 2), stride=(2, 2))


def test_max_pool2d_select_values_shaped_like_input() -> None:
    with pytest.raises(ShapeError, match=re.escape("expected values shaped like the input (1,4,4), got (1,2,2)")):
        _infer("max_pool2d_select", f32(1, 2, 2), f32(1, 4, 4), kernel_size=(2, 2), stride=(2, 2))


def test_avg_pool2d_grad_checks_the_gradient_shape() -> None:
    with pytest.raises(ShapeError, match=re.escape("avg_pool2d_grad: expected a gradient of shape (1,2,2) for "
                                                   "input (1,4,4), got (1,3,3)")):
        _infer("avg_pool2d_grad", f32(1, 3, 3), input_shape=(1, 4, 4), kernel_size=(2, 2), stride=(2, 2))


def test_adaptive_avg_pool2d_output_size_has_two_values() -> None:
    with pytest.raises(AttributeSchemaError, match="'output_size' expects 2 values"):
        _infer("adaptive_avg_pool2d", f32(1, 4, 4), output_size=(2, 2, 2))


def test_layer_norm_trailing_shape_mismatch() -> None:
    message = "layer_norm: given normalized_shape (4,), expected input with shape (*,4), got (2,3)"
    with pytest.raises(ShapeError, match=re.escape(message)):
        _infer("layer_norm", f32(2, 3), normalized_shape=(4,))


def test_layer_norm_weight_shape() -> None:
    with pytest.raises(ShapeError, match=re.escape("expected weight of shape (3,) (normalized_shape), got (2,)")):
        _infer("layer_norm", f32(2, 3), f32(2), normalized_shape=(3,))


def test_layer_norm_needs_a_normalized_dimension() -> None:
    with pytest.raises(ShapeError, match="normalized_shape must have at least one dimension"):
        _infer("layer_norm", f32(2, 3), normalized_shape=())


def test_batch_norm_parameter_shape() -> None:
    with pytest.raises(ShapeError, match=re.escape("batch_norm: expected running_var of shape (3,) for input "
                                                   "(2,3,4) with 3 channels, got (4,)")):
        _infer("batch_norm", f32(2, 3, 4), f32(3), f32(4), f32(3), f32(3))


def test_batch_norm_input_rank() -> None:
    with pytest.raises(ShapeError, match=re.escape("expected an input of rank 2 (N,C) or more (N,C,...), got (3,)")):
        _infer("batch_norm", f32(3), f32(3), f32(3), f32(3), f32(3))


def test_batch_norm_train_needs_more_than_one_value_per_channel() -> None:
    with pytest.raises(ShapeError, match=re.escape("expected more than 1 value per channel when training, "
                                                   "got input (1,3)")):
        _infer("batch_norm_train", f32(1, 3), f32(3), f32(3))


def test_cross_entropy_class_index_target_shape() -> None:
    message = "cross_entropy: expected a class-index target of shape (2,5) for input (2,3,5), got (2,4)"
    with pytest.raises(ShapeError, match=re.escape(message)):
        _infer("cross_entropy", f32(2, 3, 5), i64(2, 4))


def test_cross_entropy_probability_target_shape() -> None:
    with pytest.raises(ShapeError, match=re.escape("class-probability target must have the input's shape (2,3), "
                                                   "got (3,)")):
        _infer("cross_entropy", f32(2, 3), f32(3))


@pytest.mark.parametrize("dtype", [ir.bool_, ir.uint8, ir.int8])
def test_cross_entropy_target_dtype(dtype: ir.DType) -> None:
    with pytest.raises(DTypeError, match="cross_entropy: target must be class indices"):
        _infer("cross_entropy", f32(2, 3), TensorType((2,), dtype))


def test_cross_entropy_scalar_input() -> None:
    with pytest.raises(ShapeError, match=re.escape("expected an input of shape (C,) or (N,C,d1,...), got ()")):
        _infer("cross_entropy", f32(), i64())


def test_cross_entropy_target_out_of_range() -> None:
    with pytest.raises(BrazeError, match="cross_entropy: target 7 is out of bounds for 3 classes"):
        ir.evaluate("cross_entropy", [np.zeros((2, 3)), np.array([0, 7])])


def test_cross_entropy_label_smoothing_range() -> None:
    with pytest.raises(AttributeSchemaError, match="'label_smoothing' must be in"):
        _infer("cross_entropy", f32(2, 3), i64(2), label_smoothing=1.5)


def test_cross_entropy_reduction_choices() -> None:
    with pytest.raises(AttributeSchemaError, match="'reduction' must be one of"):
        _infer("cross_entropy", f32(2, 3), i64(2), reduction="avg")


def test_mse_loss_shapes_must_broadcast() -> None:
    with pytest.raises(ShapeError, match=re.escape("mse_loss: operand shapes f32[2,3], f32[2] do not broadcast")):
        _infer("mse_loss", f32(2, 3), f32(2))


def test_dropout_probability_range() -> None:
    with pytest.raises(AttributeSchemaError, match=re.escape("dropout: attribute 'p' must be in [0, 1], got 1.5")):
        _infer("dropout", f32(4), TensorType((), ir.bool_), i64(), p=1.5)


def test_dropout_training_flag_is_bool() -> None:
    with pytest.raises(DTypeError, match="dropout: the training flag must be bool"):
        _infer("dropout", f32(4), i64(), i64())


def test_dropout_training_flag_is_a_scalar() -> None:
    with pytest.raises(ShapeError, match="dropout: the training flag must have rank 0"):
        _infer("dropout", f32(4), TensorType((1,), ir.bool_), i64())


def test_dropout_seed_is_an_integer() -> None:
    with pytest.raises(DTypeError, match=re.escape("dropout: the seed must be i64[], got f32[]")):
        _infer("dropout", f32(4), TensorType((), ir.bool_), f32())


def test_conv2d_empty_kernel_is_refused() -> None:
    with pytest.raises(ShapeError, match=re.escape("conv2d: weight (6,2,0,2) has an empty kernel")):
        _infer("conv2d", f32(1, 4, 8, 8), f32(6, 2, 0, 2), groups=2)


def test_cross_entropy_of_zero_classes_is_refused() -> None:
    with pytest.raises(ShapeError, match=re.escape("cross_entropy: input (5,0) has no classes (axis 1 has size 0)")):
        _infer("cross_entropy", f32(5, 0), i64(5))


def test_dropout_seed_must_be_i64() -> None:
    """Kernels read the seed as 8 bytes: an i32 seed was read past its buffer (found by the IR fuzzer)."""
    with pytest.raises(DTypeError, match=re.escape("dropout: the seed must be i64[], got i32[]")):
        _infer("dropout", f32(2, 3), TensorType((), ir.bool_), TensorType((), ir.int32), p=0.5)
