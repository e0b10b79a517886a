"""Tensor sizes are exact and capped: a type whose bytes pass BRAZE_MAX_TENSOR_BYTES (or that would wrap int64)
is refused where it is made, by the verifier, by the parser and by the shape inference of ops that build one."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from braze.ir import (BrazeError, GraphBuilder, ParseError, TensorSizeError, TensorType, VerifyError, bool_, float32,
                      int64, interpret, parse, uint8, verify)
from braze.ir.types import DEFAULT_MAX_TENSOR_BYTES, MAX_TENSOR_BYTES_ENV, max_tensor_bytes

MIB = 2 ** 20


def _node_text(node: str, inputs: str, result: str) -> str:
    """A one-node graph whose signature returns its input, so only the node line holds the hostile type."""
    return f"graph @g({inputs}) -> () {{\n  {node} : {result}\n  return\n}}\n"


def test_tensor_type_size_is_exact_where_int64_wraps() -> None:
    with pytest.raises(TensorSizeError, match=r"f32\[4611686018427387905,4\] needs 73786976294838206480 bytes"):
        TensorType((4611686018427387905, 4), float32)


def test_tensor_type_square_of_two_to_the_32_is_refused() -> None:
    with pytest.raises(TensorSizeError, match=r"more than the limit of \d+ bytes \(BRAZE_MAX_TENSOR_BYTES\)"):
        TensorType((4294967296, 4294967296), bool_)


def test_tensor_type_empty_shape_with_huge_dimensions_is_refused() -> None:
    """Strides multiply the non-empty dimensions even when a 0 makes the tensor empty."""
    with pytest.raises(TensorSizeError, match=r"f32\[0,1099511627776,1099511627776\]"):
        TensorType((0, 2 ** 40, 2 ** 40), float32)


def test_tensor_type_empty_shape_of_modest_dimensions_is_allowed() -> None:
    assert TensorType((0, 2 ** 20), float32).size == 0


def test_tensor_type_rank_above_numpys_limit_is_refused() -> None:
    with pytest.raises(TensorSizeError, match="rank 65 has more than 64 dimensions"):
        TensorType((1,) * 65, float32)


def test_tensor_type_negative_dimension_is_a_shape_error() -> None:
    with pytest.raises(BrazeError, match="negative dimension"):
        TensorType((2, -1), float32)


def test_tensor_type_default_cap_is_the_memory_up_to_one_tebibyte(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MAX_TENSOR_BYTES_ENV, raising=False)
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert max_tensor_bytes() == DEFAULT_MAX_TENSOR_BYTES == min(memory, 2 ** 40)


def test_tensor_type_at_the_default_cap_is_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MAX_TENSOR_BYTES_ENV, raising=False)
    assert TensorType((DEFAULT_MAX_TENSOR_BYTES // 8,), int64).nbytes == DEFAULT_MAX_TENSOR_BYTES  # whole pages
    with pytest.raises(TensorSizeError):
        TensorType((DEFAULT_MAX_TENSOR_BYTES // 8 + 1,), int64)


def test_tensor_type_cap_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_TENSOR_BYTES_ENV, str(4 * MIB))
    TensorType((1024, 1024), float32)
    with pytest.raises(TensorSizeError, match=r"f32\[1024,1025\] needs 4198400 bytes, more than the limit of "
                                              r"4194304 bytes \(BRAZE_MAX_TENSOR_BYTES\)"):
        TensorType((1024, 1025), float32)


@pytest.mark.parametrize("value", ["lots", "-1", "1024", "1e9", str(2 ** 63)])
def test_tensor_type_cap_must_be_a_byte_count_of_at_least_one_mebibyte(monkeypatch: pytest.MonkeyPatch,
                                                                       value: str) -> None:
    monkeypatch.setenv(MAX_TENSOR_BYTES_ENV, value)
    with pytest.raises(BrazeError, match="BRAZE_MAX_TENSOR_BYTES=.*expected a number of bytes from 1048576"):
        max_tensor_bytes()


def test_verify_rechecks_sizes_against_a_lowered_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    b = GraphBuilder("big")
    x = b.input("x", TensorType((1024, 1024), float32))
    g = b.finish([b.exp(x)])
    monkeypatch.setenv(MAX_TENSOR_BYTES_ENV, str(MIB))
    with pytest.raises(VerifyError, match=r"%x: tensor type f32\[1024,1024\] needs 4194304 bytes"):
        verify(g)


def test_builder_refuses_a_broadcast_to_two_to_the_62_elements() -> None:
    b = GraphBuilder("huge")
    x = b.input("x", TensorType((1, 1), float32))
    with pytest.raises(TensorSizeError, match=r"f32\[2147483648,2147483648\]"):
        b.sum(b.exp(b.broadcast_to(x, shape=(2147483648, 2147483648))), axes=None)


HOSTILE_NODES = [
    ("broadcast-wraps", "%0 = broadcast_to %x {shape=[4611686018427387905, 4]}", "%x: f32[1,4]",
     "f32[4611686018427387905,4]", r"f32\[4611686018427387905,4\] needs 73786976294838206480 bytes"),
    ("reshape-wraps", "%0 = reshape %x {shape=[4611686018427387905, 4]}", "%x: f32[4]",
     "f32[4611686018427387905,4]", r"needs 73786976294838206480 bytes"),
    ("broadcast-square", "%0 = broadcast_to %x {shape=[4294967296, 4294967296]}", "%x: f32[1,1]",
     "f32[4294967296,4294967296]", r"f32\[4294967296,4294967296\] needs"),
    ("one-hot", "%0 = one_hot %x {num_classes=1099511627776}", "%x: i64[3]", "f32[3,1099511627776]",
     r"f32\[3,1099511627776\] needs 13194139533312 bytes"),
    ("conv2d-dilation", "%0 = conv2d %x, %w {dilation=[1000000, 1000000], padding=[1000000, 1000000]}",
     "%x: f32[1,1,4,4], %w: f32[1,1,3,3]", "f32[1,1,4,4]", r"conv2d: input \(1,1,4,4\) padded to "
     r"\(1,1,2000004,2000004\) needs 32000128000128 bytes"),
    ("conv2d-im2col", "%0 = conv2d %x, %w", "%x: f32[1,1,2048,2048], %w: f32[1,1,1024,1024]", "f32[1,1,1025,1025]",
     r"conv2d: the im2col matrix of input \(1,1,2048,2048\) and weight \(1,1,1024,1024\) needs 8813281280000 bytes"),
    ("max-pool-kernel", "%0 = max_pool2d %x {kernel_size=[1000000, 1000000], padding=[500000, 500000], "
     "stride=[1000000, 1000000]}", "%x: f32[1,4,4]", "f32[1,1,1]", r"max_pool2d: input \(1,4,4\) padded to"),
]


@pytest.mark.parametrize("case", HOSTILE_NODES, ids=[c[0] for c in HOSTILE_NODES])
def test_parse_refuses_a_node_that_builds_a_huge_type(case: tuple[str, str, str, str, str]) -> None:
    _, node, inputs, result, pattern = case
    with pytest.raises(ParseError, match=pattern) as info:
        parse(_node_text(node, inputs, result))
    assert (info.value.line, info.value.column) in {(2, 3), (2, len(node) + 6)}  # the node, or its type


def test_parse_refuses_a_huge_signature_type_at_its_position() -> None:
    text = "graph @g(%x: f32[2147483648,2147483648]) -> () {\n  return\n}\n"
    with pytest.raises(ParseError, match="needs 18446744073709551616 bytes") as info:
        parse(text)
    assert (info.value.line, info.value.column) == (1, 14)


HUGE_GRAPH = """\
graph @g(%x: f32[1,1]) -> (f32[]) {
  %0 = broadcast_to %x {shape=[2147483648, 2147483648]} : f32[2147483648,2147483648]
  %1 = exp %0 : f32[2147483648,2147483648]
  %2 = sum %1 {axes=none, keepdim=false} : f32[]
  return %2
}
"""

WRAPPING_BROADCAST = """\
graph @g(%x: f32[1,4]) -> (f32[4]) {
  %0 = broadcast_to %x {shape=[4611686018427387905, 4]} : f32[4611686018427387905,4]
  %1 = sum %0 {axes=[0], keepdim=false} : f32[4]
  return %1
}
"""

ISOLATED = """
import braze, numpy as np
from braze.ir import BrazeError, parse
for text, shape in {cases!r}:
    try:
        compiled = braze.compile(parse(text))
        print("ran", compiled(np.ones(shape, np.float32)))
    except BrazeError as exc:
        print("refused", type(exc).__name__)
"""


def test_compile_of_a_huge_graph_is_refused_without_crashing() -> None:
    """Once a crash (SIGSEGV) or 2**62 iterations: run in a child process so a regression cannot take pytest down."""
    cases = [(HUGE_GRAPH, (1, 1)), (WRAPPING_BROADCAST, (1, 4))]
    child = subprocess.run([sys.executable, "-c", ISOLATED.format(cases=cases)], capture_output=True, text=True,
                           timeout=120)
    assert (child.returncode, child.stdout.split("\n")) == (0, ["refused ParseError"] * 2 + [""]), child.stderr


@pytest.mark.parametrize("where,text", [
    ("dimension", "graph @g(%x: f32[{n}]) -> () {{\n  return\n}}\n"),
    ("attribute", "graph @g(%x: f32[4]) -> () {{\n  %0 = clamp %x {{min={n}}} : f32[4]\n  return\n}}\n"),
    ("loc-line", 'graph @g(%x: f32[4]) -> () {{\n  %0 = neg %x : f32[4]  loc("m" "f.py":{n})\n  return\n}}\n'),
    ("meta", "graph @g() -> () attributes {{a={n}}} {{\n  return\n}}\n"),
    ("leading-zeros", "graph @g(%x: f32[{z}]) -> () {{\n  return\n}}\n"),
])
def test_parse_refuses_an_integer_of_thousands_of_digits(where: str, text: str) -> None:
    digits = "9" * 5000
    with pytest.raises(ParseError, match=r"integer .*\.\.\. \(5000 digits\) does not fit in 64 bits|"
                                         r"integer -?9+ does not fit"):
        parse(text.format(n=digits, z="0" * 5000 + digits))


def test_parse_accepts_leading_zeros_of_a_small_integer() -> None:
    assert parse("graph @g(%x: f32[" + "0" * 5000 + "3]) -> () {\n  return\n}\n").inputs[0].type.shape == (3,)


NAN_META = "graph @g(%x: f32[4]) -> (f32[4]) attributes {a=nan, b=[1.0, nan], c={d=-nan}} {\n  return %x\n}\n"


def test_parse_graph_attributes_holding_nan_equal_themselves() -> None:
    assert parse(NAN_META) == parse(NAN_META)


def test_parse_graph_attributes_holding_nan_round_trip() -> None:
    assert str(parse(NAN_META)) == NAN_META.replace("-nan", "nan")


def test_builder_graph_attributes_holding_nan_equal_their_parse() -> None:
    b = GraphBuilder("g")
    x = b.input("x", TensorType((4,), float32))
    g = b.finish([x], attributes={"a": float("nan"), "b": [np.float64("nan")]})
    assert parse(str(g)) == g


def test_parse_refuses_nested_graph_literals_past_the_nesting_limit() -> None:
    inner = "graph @h() -> () attributes {a=" * 200 + "1" + "} {\n  return\n}" * 200
    with pytest.raises(ParseError, match="nested deeper than 64 levels"):
        parse(f"graph @g() -> () attributes {{a={inner}}} {{\n  return\n}}\n")


def _dequantized(block_size: int) -> np.ndarray:
    b = GraphBuilder("q")
    codes, scales = b.input("codes", TensorType((2,), uint8)), b.input("scales", TensorType((1,), float32))
    g = b.finish([b.dequantize(codes, scales, scheme="int4", block_size=block_size, shape=(4,))])
    return interpret(g, [np.array([0x98, 0x7F], np.uint8), np.array([0.5], np.float32)])[0]


def test_dequantize_with_a_block_far_larger_than_the_weight_stays_small() -> None:
    """block_size 2**40 used to make the reference repeat each scale 2**40 times (a MemoryError); one block of
    any size at least the weight's 4 values gives the same result."""
    np.testing.assert_array_equal(_dequantized(2 ** 40), _dequantized(64))
