"""The lowering registry: coverage of the op registry, errors for ops without a lowering, and the shape of the code
the lowerings emit (vector registers in the assembly, no division in element loops)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from braze.codegen import host_target
from braze.codegen.lower import KernelContext, lower_node, lowered_ops
from braze.codegen.lower.accuracy import ACCURACY
from braze.ir.errors import CodegenError
from braze.ir.graph import Loc
from braze.ir.registry import get_op, leaf_ops, op_names
from braze.ir.types import TensorType, float32
from tests.codegen.lowering_harness import compile_node, make_node, random_array

# Ops that need no kernel: leaves (their values are buffers), the ops the decompose pass rewrites into others
# (losses, batch norm on batch statistics, slice_scatter, and scale_grad, the identity on values), and those still
# waiting for one.
NOT_LOWERED = leaf_ops() | frozenset({
    "cross_entropy", "mse_loss", "scale_grad", "batch_norm_train", "slice_scatter", "batch_norm_flag",
})

RNG = np.random.default_rng(3)


def test_lowered_ops_cover_every_forward_op() -> None:
    assert lowered_ops() == frozenset(op_names()) - NOT_LOWERED


def test_not_lowered_ops_exist_in_the_registry() -> None:
    for name in NOT_LOWERED:
        get_op(name)


def test_accuracy_table_names_lowered_ops() -> None:
    assert set(ACCURACY) <= lowered_ops()


def test_lower_node_without_lowering_names_op_and_provenance() -> None:
    node = make_node("mse_loss", TensorType((4,), float32), TensorType((4,), float32))
    node = node.replace(loc=Loc("decoder.loss", "train.py", 12))
    ctx = KernelContext(host_target().new_module("no_lowering"), host_target(), "k_00000000_mse_loss")
    with pytest.raises(CodegenError, match=r"mse_loss.*decoder\.loss @ train\.py:12"):
        lower_node(node, ctx)


def _vector_register() -> str:
    width = host_target().vector_width
    return {16: "zmm", 8: "ymm"}.get(width, "xmm")


@pytest.mark.parametrize("op, shapes, attrs", [
    ("add", [(64, 33), (33,)], {}),
    ("gelu", [(1000,)], {}),
    ("sum", [(40, 64)], {"axes": (1,)}),
    ("sum", [(40, 64)], {"axes": (0,)}),
    ("softmax", [(8, 100)], {"axis": -1}),
    ("layer_norm", [(8, 96)], {"normalized_shape": (96,)}),
    ("matmul", [(32, 48), (48, 64)], {}),
    ("max_pool2d", [(1, 2, 16, 40)], {"kernel_size": (2, 2), "stride": (2, 2)}),
])
def test_kernels_use_full_vector_registers(op: str, shapes, attrs) -> None:
    node = make_node(op, *[random_array(RNG, s, "f32") for s in shapes], **attrs)
    assert _vector_register() in compile_node(node).library.asm()


_DIVISION = re.compile(r"= (udiv|sdiv|urem|srem) ")


def _blocks(ir_text: str, function: str) -> dict[str, str]:
    """The basic blocks of one function in LLVM IR text, by label."""
    start = ir_text.index(f'@"{function}"(') if f'@"{function}"(' in ir_text else ir_text.index(f"@{function}(")
    body = ir_text[start:ir_text.index("\n}", start)]
    blocks, label = {}, "entry"
    for line in body.splitlines()[1:]:
        match = re.match(r'^"?([\w.$-]+)"?:', line)
        if match:
            label = match.group(1)
            continue
        blocks[label] = blocks.get(label, "") + line + "\n"
    return blocks


@pytest.mark.parametrize("op, shapes, attrs, loops", [
    ("add", [(3, 5, 7, 9), (5, 1, 9)], {}, ("e.body", "e.tail.body")),
    ("transpose", [(6, 5, 7, 9)], {"perm": (3, 1, 0, 2)}, ("tc.body",)),
    ("transpose", [(6, 5, 7, 9)], {"perm": (1, 0, 2, 3)}, ("c.body", "c.tail.body")),
    ("sum", [(6, 5, 7, 9)], {"axes": (0, 2)}, ("r0.body", "r1.body")),
    ("softmax", [(6, 5, 7, 9)], {"axis": 3}, ("i.body", "i.tail.body", "s.body", "s.tail.body")),
    ("pad", [(6, 5, 7)], {"pads": (1, 0, 2, 1, 0, 3)}, ("p.body", "f.body")),
    ("max_pool2d", [(2, 3, 11, 13)], {"kernel_size": (3, 3), "stride": (2, 2)}, ("kw.body",)),
])
def test_element_loops_have_no_division(op: str, shapes, attrs, loops) -> None:
    node = make_node(op, *[random_array(RNG, s, "f32") for s in shapes], **attrs)
    compiled = compile_node(node)
    blocks = _blocks(compiled.library.source_ir, compiled.spec.name)
    found = [label for label in blocks if any(label == name or label.startswith(name + ".") for name in loops)]
    assert found, f"no blocks named {loops} in {sorted(blocks)}"
    for label in found:
        assert not _DIVISION.search(blocks[label]), f"division in loop block {label}:\n{blocks[label]}"
