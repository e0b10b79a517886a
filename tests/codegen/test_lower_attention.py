"""The attention kernel against the registry's reference on edge shapes: one query or key, key counts around the
vector width and past one key block (4 vectors), primes, row groups with rows left over, no queries or keys, head widths of 1 and 3, masks broadcast
over batch and heads, torch's causal mask with L != S, rows masked everywhere; in float32 and float64, on the host's
vector width and forced AVX2 and SSE, with 1, 2 and 3 threads giving the same bytes; and against torch's
F.scaled_dot_product_attention where torch is installed."""
from __future__ import annotations

import random

import llvmlite.binding as llvm
import numpy as np
import pytest

from braze import ir
from braze.codegen import host_target
from braze.codegen.lower.attention import copied_values, group_tile, passes, unit_rows
from braze.ir.errors import ParseError
from braze.ir.interpret import interpret
from braze.ir.passes import optimize
from braze.runtime.compile_path import compile_graph
from tests.codegen.lowering_harness import check_node, fused_nodes, make_node, run_node

X86 = llvm.get_process_triple().startswith("x86_64")
HOST_FEATURES = set(llvm.get_host_cpu_features().flatten().split(","))


def _operands(seed: int, batch: tuple[int, ...], l: int, s: int, e: int, ev: int, dtype: str,
              mask: str | None = None, mask_shape: tuple[int, ...] | None = None) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(batch + shape).astype(dtype) for shape in ((l, e), (s, e), (s, ev))]
    shape = mask_shape if mask_shape is not None else batch + (l, s)
    if mask == "bool":
        arrays.append(rng.random(shape) < 0.7)
    elif mask == "float":
        arrays.append(rng.uniform(-2.0, 1.0, shape).astype(dtype))
    return arrays


def _largest(array: np.ndarray) -> float:
    """The largest finite magnitude in the array (0 when it has none)."""
    return float(np.abs(array[np.isfinite(array)]).max(initial=0.0))


def check(arrays: list[np.ndarray], *, scale: float = 0.5, causal: bool = False,
          zero_masked_rows: bool = False) -> np.ndarray:
    """The kernel within its accuracy of the reference (1 and 3 threads identical), and 2 threads identical too; the
    error is bounded by sums of max(E, S) terms times |v| (1 + scale E |q| |k|), the score error carried to v."""
    node = make_node("attention", *arrays, scale=scale, causal=causal, zero_masked_rows=zero_masked_rows)
    q, k, v = (_largest(a) for a in arrays[:3])
    magnitude = max(v, 1.0) * (1.0 + abs(scale) * q * k * arrays[0].shape[-1])
    terms = max(arrays[0].shape[-1], arrays[1].shape[-2])
    (got,) = check_node(node, arrays, terms=terms, scale=magnitude)
    (two,) = run_node(node, arrays, nthreads=2)
    assert got.tobytes() == two.tobytes()
    return got


# (batch, L, S, E, Ev): one query/key, around and past the vector widths (4, 8, 16 lanes), past a key block
# (32 keys in float32 on AVX2, 64 on AVX-512) and past a unit's 64 query rows, primes, empty L and S, E of 1 and 3.
SHAPES = [((1,), 1, 1, 1, 1), ((2,), 3, 7, 3, 5), ((1, 2), 9, 17, 4, 3), ((2,), 33, 70, 5, 9), ((), 13, 131, 16, 1),
          ((2,), 0, 5, 3, 2), ((2,), 4, 0, 3, 2), ((1,), 5, 15, 1, 17)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s[0])) + f"_{s[1]}_{s[2]}_{s[3]}_{s[4]}")
def test_attention_matches_reference_on_edge_shapes(shape, dtype: str) -> None:
    batch, l, s, e, ev = shape
    check(_operands(1, batch, l, s, e, ev, dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("l, s", [(5, 70), (70, 5), (33, 33), (1, 9)])
def test_attention_causal_masks_keys_after_the_query_as_torch_with_l_and_s_apart(l: int, s: int, dtype: str) -> None:
    check(_operands(2, (2,), l, s, 3, 4, dtype), causal=True)


@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("mask_shape", [(9, 17), (1, 1, 1, 17), (2, 1, 9, 17), (2, 3, 9, 1)],
                         ids=lambda s: "x".join(map(str, s)))
def test_attention_masks_broadcast_over_batch_heads_and_rows(kind: str, mask_shape: tuple[int, ...]) -> None:
    check(_operands(3, (2, 3), 9, 17, 4, 2, "float32", kind, mask_shape), scale=0.3)


# A positive scale goes into the softmax's exponent and the scores stay unscaled; a float mask (added to the scaled
# scores), a negative scale (which turns the maximum into the minimum) and zero (every key alike) keep it on them.
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("scale, mask", [(0.8, "bool"), (0.8, "float"), (-0.6, None), (-0.6, "bool"), (0.0, None)])
def test_attention_scale_of_any_sign_with_and_without_masks(scale: float, mask: str | None, dtype: str) -> None:
    check(_operands(9, (2,), 11, 70, 5, 3, dtype, mask), scale=scale)


# Rows taken a group at a time (4 or 6 with 32 vector registers, 4 with 16) and the rest in a group of their own
# (with causal, one by one): unit row counts that leave 1-5 rows over, in the last of several units too, causal
# groups starting at a row that is no multiple of the group, head widths past GROUP vectors and scalar tails of Ev
# longer than GROUP.
# The last three: a last key block narrower than the others, on code of its own width (130 keys in blocks of 128;
# 107 keys of 64 dimensions in blocks of 64 (float32) or 32 (float64), the last block several vectors and passes).
GROUPED = [((2,), 70, 70, 8, 69), ((1,), 66, 37, 5, 31), ((1,), 131, 9, 2, 4), ((1,), 531, 40, 6, 7),
           ((3,), 7, 130, 17, 15), ((1,), 9, 107, 64, 16), ((2,), 13, 77, 64, 64), ((1,), 14, 33, 16, 20)]


@pytest.mark.parametrize("cpu, tile", [("sapphirerapids", (6, 4)), ("znver4", (4, 4)), ("haswell", (4, 3))])
def test_attention_row_group_tile_per_core(cpu: str, tile: tuple[int, int]) -> None:
    """6 rows by 4 vectors on a core with full-width 512-bit FMA units, 4 by 4 on Zen 4's halves, 4 by 3 with 16
    registers (AVX2): the GROUPED shapes leave every count of rows over from none to 5 of 6 (and of 4)."""
    assert group_tile(host_target(cpu=cpu)) == tile


def test_attention_score_passes_are_as_few_and_as_even_as_the_registers_allow() -> None:
    """A block's score vectors in passes of at most P (the register tile's), of sizes that differ by at most one:
    5 vectors in passes of 3 and 2, not 4 and 1 (a pass of one vector leaves a row group G FMA chains)."""
    sizes = lambda vectors, most: [len(p) for p in passes(vectors, most)]
    assert sizes(4, 4) == [4] and sizes(5, 4) == [2, 3] and sizes(8, 4) == [4, 4] and sizes(1, 4) == [1]
    assert sizes(8, 3) == [2, 3, 3] and sizes(4, 3) == [2, 2] and sizes(7, 3) == [2, 2, 3]
    assert [v for p in passes(13, 4) for v in p] == list(range(13))


def test_attention_units_of_up_to_256_rows_cut_for_two_threads() -> None:
    """A unit takes up to ROWS query rows (ACC_BYTES of accumulators), fewer where a node would otherwise have
    fewer than UNITS units, in equal blocks that are whole row groups."""
    assert unit_rows(32, 128, 256, 4) == 128      # the transformer at batch 8: a unit per batch point and head
    assert unit_rows(1, 1024, 256, 4) == 256
    assert unit_rows(1, 128, 256, 4) == 64        # one head: two units
    assert unit_rows(1, 531, 256, 4) == 180       # three blocks of 180, 180 and 171 rows
    assert unit_rows(1, 8, 256, 4) == 8           # no blocks below MIN_ROWS rows
    assert unit_rows(4, 1024, 256 * 4, 4) == 64   # 256 float32 a row: ACC_BYTES holds 64 rows
    assert unit_rows(4, 1024, 1024 * 4, 4) == 32  # 1024: it holds 16, but no unit is cut below MIN_ROWS


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", GROUPED, ids=lambda s: "x".join(map(str, s[0])) + f"_{s[1]}_{s[2]}_{s[3]}_{s[4]}")
def test_attention_row_groups_and_leftover_rows_match_reference(shape, causal: bool, dtype: str) -> None:
    batch, l, s, e, ev = shape
    check(_operands(6, batch, l, s, e, ev, dtype), causal=causal)


def _masked_rows(dtype: str) -> list[np.ndarray]:
    """Row 1 masked everywhere, row 3 masked but for one key in the second key block."""
    arrays = _operands(4, (1,), 5, 70, 3, 6, dtype, "bool")
    arrays[3][0, 1, :] = False
    arrays[3][0, 3, :] = False
    arrays[3][0, 3, 66] = True
    return arrays


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_attention_row_masked_everywhere_is_nan_as_softmax(dtype: str) -> None:
    got = check(_masked_rows(dtype))
    assert np.isnan(got[0, 1]).all() and not np.isnan(got[0, [0, 2, 3, 4]]).any()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_attention_row_masked_everywhere_is_zero_with_zero_masked_rows(dtype: str) -> None:
    arrays = _masked_rows(dtype)
    got = check(arrays, zero_masked_rows=True)
    assert (got[0, 1] == 0).all()
    np.testing.assert_allclose(got[0, 3], arrays[2][0, 66], rtol=1e-6)


def test_attention_nan_and_infinite_scores_make_their_rows_nan() -> None:
    arrays = _operands(5, (1,), 4, 9, 2, 3, "float32")
    arrays[0][0, 1, 0] = np.nan
    arrays[1][0, 7, 1] = np.inf
    got = check(arrays)
    assert np.isnan(got[0, 1]).all()


@pytest.mark.skipif(not X86 or "+avx2" not in HOST_FEATURES, reason="needs an AVX2 host")
@pytest.mark.parametrize("cpu, width", [("haswell", 8), ("nehalem", 4)])
def test_attention_forced_avx2_and_sse_match_reference(cpu: str, width: int, monkeypatch) -> None:
    """Shapes no other test compiles: the harness caches kernels by node, not by target."""
    monkeypatch.setenv("BRAZE_CPU", cpu)
    assert host_target().vector_width == width
    for seed, (dtype, l, s, e, ev) in enumerate([("float32", 7, width * 8 + 1, 3, width - 1),
                                                 ("float32", 3, width + 1, width + 1, 2 * width + 3),
                                                 ("float64", 6, width * 4 + 3, 2, width + 1),
                                                 ("float32", 67, 70, 5, 4 * width + 3)]):
        check(_operands(10 + seed, (2,), l, s, e, ev, dtype, "bool", (l, s)), causal=seed in (1, 3))


@pytest.mark.parametrize("tile", [(4, 4), (6, 4)])
def test_attention_on_either_wide_register_tile_matches_reference(tile: tuple[int, int], monkeypatch) -> None:
    """Both tiles of 32-register targets on the host (whichever its core takes): rows left over from groups of G and
    passes of up to P key vectors, float32 and float64, causal or not. Shapes no other test compiles (the harness
    caches kernels by node)."""
    import braze.codegen.lower.attention as attention
    monkeypatch.setattr(attention, "FULL_WIDTH_TILE", tile)
    monkeypatch.setitem(attention.TILES, 32, tile)
    width = host_target().vector_width
    for seed, (dtype, l, e, ev) in enumerate([("float32", 29 + tile[0], 64, 64), ("float64", 11 + tile[0], 7, 9)]):
        check(_operands(20 + seed, (2,), l, 5 * width + 3, e, ev, dtype), causal=seed == 1)


def test_attention_matches_torch_sdpa() -> None:
    torch = pytest.importorskip("torch")
    arrays = _masked_rows("float32")
    got = check(arrays, scale=0.4, zero_masked_rows=True)
    want = torch.nn.functional.scaled_dot_product_attention(*map(torch.from_numpy, arrays), scale=0.4).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    causal = _operands(6, (2, 2), 7, 4, 3, 5, "float64")
    got = check(causal, scale=0.7, causal=True, zero_masked_rows=True)
    want = torch.nn.functional.scaled_dot_product_attention(*map(torch.from_numpy, causal), is_causal=True,
                                                            scale=0.7).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


# --- attention regions: the kernel reading q, k, v and writing its result through view ops -----------------------

def heads_graph(batch: int, length: int, heads: int, head: int, causal: bool = False, mask: bool = False,
                dtype: str = "f32") -> "ir.Graph":
    """MultiheadAttention's traced form after fuse_attention: q, k, v sliced from one QKV projection and split into
    heads, the attention's result merged back into rows (optionally with a bool mask (L, S), broadcast)."""
    width = heads * head
    row = f"{dtype}[{batch},{length},{width}]"
    split = f"{dtype}[{batch},{length},{heads},{head}]"
    per_head = f"{dtype}[{batch},{heads},{length},{head}]"
    lines = [f"graph @mha(%qkv: {dtype}[{batch},{length},{3 * width}]"
             + (f", %keep: bool[{length},{length}]" if mask else "") + f") -> ({row}) {{"]
    for n in range(3):
        lines += [f"  %s{n} = slice %qkv {{starts=[0, 0, {n * width}], steps=[1, 1, 1], "
                  f"stops=[{batch}, {length}, {(n + 1) * width}]}} : {row}",
                  f"  %r{n} = reshape %s{n} {{shape=[{batch}, {length}, {heads}, {head}]}} : {split}",
                  f"  %t{n} = transpose %r{n} {{perm=[0, 2, 1, 3]}} : {per_head}"]
    operands = "%t0, %t1, %t2" + (", %keep" if mask else "")
    lines += [f"  %a = attention {operands} {{causal={str(causal).lower()}, scale=0.375, zero_masked_rows=false}} "
              f": {per_head}",
              f"  %m = transpose %a {{perm=[0, 2, 1, 3]}} : {split}",
              f"  %out = reshape %m {{shape=[{batch}, {length}, {width}]}} : {row}",
              "  return %out", "}"]
    return ir.parse("\n".join(lines))


def _region(graph, arrays):
    (found,) = fused_nodes(optimize(graph, ["fuse"]), arrays)
    return found


@pytest.mark.parametrize("batch,length,heads,head,causal,mask", [
    (1, 1, 1, 1, False, False), (2, 5, 2, 4, False, False), (2, 17, 3, 16, True, False), (1, 70, 2, 33, False, True),
    (3, 9, 4, 8, True, True),
    # value rows 3 KB apart, copied per key block (copied_values); 70 and 67 keys end on a narrower block
    (1, 70, 4, 64, False, False), (2, 67, 4, 64, True, True), (1, 128, 4, 64, False, False)])
def test_attention_region_reads_and_writes_through_views(batch, length, heads, head, causal, mask) -> None:
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((batch, length, 3 * heads * head)).astype(np.float32)]
    if mask:
        arrays.append(rng.random((length, length)) < 0.7)
    node, operands = _region(heads_graph(batch, length, heads, head, causal, mask), arrays)
    assert node.attr["kind"] == "attention" and len(node.attr["body"].nodes) == 12
    magnitude = _largest(arrays[0]) * (1.0 + 0.375 * _largest(arrays[0]) ** 2 * head)
    check_node(node, operands, terms=max(head, length), scale=magnitude)


def test_attention_copies_value_rows_whose_stride_is_a_multiple_of_a_kilobyte() -> None:
    assert copied_values(768, 64, 4) and copied_values(384, 64, 8)  # MultiheadAttention's 256- and 128-wide QKV
    assert not copied_values(64, 64, 4)  # contiguous rows: read in place
    assert not copied_values(216, 72, 4) and not copied_values(100, 64, 4)


def test_attention_region_in_float64_and_forced_avx2(monkeypatch) -> None:
    rng = np.random.default_rng(4)
    for length, heads, head in ((11, 2, 5), (70, 2, 64)):  # the second's value rows are copied
        arrays = [rng.standard_normal((2, length, 3 * heads * head))]
        node, operands = _region(heads_graph(2, length, heads, head, dtype="f64"), arrays)
        check_node(node, operands, terms=max(head, length),
                   scale=_largest(arrays[0]) * (1.0 + 0.375 * head * _largest(arrays[0]) ** 2))
    if X86:
        monkeypatch.setenv("BRAZE_CPU", "haswell")
        arrays = [rng.standard_normal((2, 11, 3 * 2 * 9)).astype(np.float32)]
        node, operands = _region(heads_graph(2, 11, 2, 9), arrays)
        check_node(node, operands, terms=11, scale=_largest(arrays[0]) * (1.0 + 0.375 * 9 * _largest(arrays[0]) ** 2))


def test_attention_region_whose_mask_comes_through_a_view_runs_op_by_op() -> None:
    """A region the fuse pass never forms (the mask transposed inside it) still computes the reference: its
    kernel declines the views and the region runs op by op."""
    graph = ir.parse("""graph @g(%q: f32[1,2,5,4], %keep: bool[5,5]) -> (f32[1,2,5,4]) {
  %0 = fused %q, %keep {axes=[], body=graph @attention(%in0: f32[1,2,5,4], %in1: bool[5,5]) -> (f32[1,2,5,4]) {
    %0 = transpose %in1 {perm=[1, 0]} : bool[5,5]
    %1 = attention %in0, %in0, %in0, %0 {causal=false, scale=0.5, zero_masked_rows=true} : f32[1,2,5,4]
    return %1
  }, kind="attention", shape=[1, 2, 5, 4]} : f32[1,2,5,4]
  return %0
}""")
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal((1, 2, 5, 4)).astype(np.float32), rng.random((5, 5)) < 0.6]
    (node, operands), = [(n, arrays) for n in graph.nodes if n.op == "fused"]
    check_node(node, operands, terms=5, scale=10.0, threads=False)


def test_attention_region_with_a_constant_query_runs_op_by_op_and_one_with_a_copy_is_refused() -> None:
    """Bodies no pass writes but a parsed file may hold: a query that is a body constant computes the reference op
    by op; a result written through a flip (a copy, not a view) is no attention region at all."""
    values = ", ".join(str(v / 8) for v in range(12))
    graph = ir.parse(f"""graph @g(%k: f32[1,3,4]) -> (f32[1,3,4]) {{
  %0 = fused %k {{axes=[], body=graph @attention(%in0: f32[1,3,4]) -> (f32[1,3,4]) {{
    %0 = constant {{value=array<f32[1,3,4]>[{values}]}} : f32[1,3,4]
    %1 = attention %0, %in0, %in0 {{causal=false, scale=0.5, zero_masked_rows=false}} : f32[1,3,4]
    return %1
  }}, kind="attention", shape=[1, 3, 4]}} : f32[1,3,4]
  return %0
}}""")
    arrays = [np.random.default_rng(6).standard_normal((1, 3, 4)).astype(np.float32)]
    check_node(graph.nodes[0], arrays, terms=4, scale=20.0, threads=False)
    with pytest.raises(ParseError, match="attention region's body holds one attention op and view ops .* holds "
                                         "attention, flip"):
        ir.parse("""graph @g(%k: f32[1,3,4]) -> (f32[1,3,4]) {
  %0 = fused %k {axes=[], body=graph @attention(%in0: f32[1,3,4]) -> (f32[1,3,4]) {
    %0 = attention %in0, %in0, %in0 {causal=true, scale=0.5, zero_masked_rows=false} : f32[1,3,4]
    %1 = flip %0 {axes=[1]} : f32[1,3,4]
    return %1
  }, kind="attention", shape=[1, 3, 4]} : f32[1,3,4]
  return %0
}""")


def random_heads_graph(rng: random.Random) -> tuple[str, list[tuple[int, ...]]]:
    """IR text of an attention whose q, k and v are cut from their own projections at random offsets, split into
    heads (transposed, or reshaped straight to the head layout), their batch axes sometimes swapped there and back,
    and whose result is merged back into rows, transposed, reshaped or left as it is; with the source shapes."""
    b, h, l, s, e = rng.randint(1, 2), rng.randint(1, 3), rng.randint(1, 9), rng.randint(1, 9), rng.choice([1, 3, 8, 17])
    lines, sources, operands = [], [], []
    for name, rows in (("q", l), ("k", s), ("v", s)):
        width = h * e + rng.randint(0, 3)
        start = rng.randint(0, width - h * e)
        sources.append((b, rows, width))
        heads = f"f32[{b},{h},{rows},{e}]"
        lines += [f"  %{name}0 = slice %{name} {{starts=[0, 0, {start}], steps=[1, 1, 1], "
                  f"stops=[{b}, {rows}, {start + h * e}]}} : f32[{b},{rows},{h * e}]",
                  f"  %{name}1 = reshape %{name}0 {{shape=[{b}, {rows}, {h}, {e}]}} : f32[{b},{rows},{h},{e}]",
                  f"  %{name}2 = transpose %{name}1 {{perm=[0, 2, 1, 3]}} : {heads}" if rng.random() < 0.8 else
                  f"  %{name}2 = reshape %{name}1 {{shape=[{b}, {h}, {rows}, {e}]}} : {heads}"]
        last = f"%{name}2"
        if rng.random() < 0.3:
            lines += [f"  %{name}3 = transpose %{name}2 {{perm=[1, 0, 2, 3]}} : f32[{h},{b},{rows},{e}]",
                      f"  %{name}4 = transpose %{name}3 {{perm=[1, 0, 2, 3]}} : {heads}"]
            last = f"%{name}4"
        operands.append(last)
    causal = str(rng.random() < 0.3).lower()
    lines.append(f"  %a = attention {', '.join(operands)} {{causal={causal}, scale=0.3, zero_masked_rows=false}} "
                 f": f32[{b},{h},{l},{e}]")
    ending = rng.choice(["rows", "swap", "flat", "none"])
    out, shape = "%a", (b, h, l, e)
    if ending == "rows":
        lines += [f"  %m = transpose %a {{perm=[0, 2, 1, 3]}} : f32[{b},{l},{h},{e}]",
                  f"  %o = reshape %m {{shape=[{b}, {l}, {h * e}]}} : f32[{b},{l},{h * e}]"]
        out, shape = "%o", (b, l, h * e)
    elif ending == "swap":  # the head size on a strided axis: the transpose stays a copy
        lines.append(f"  %o = transpose %a {{perm=[0, 1, 3, 2]}} : f32[{b},{h},{e},{l}]")
        out, shape = "%o", (b, h, e, l)
    elif ending == "flat":
        lines.append(f"  %o = reshape %a {{shape=[{b * h}, {l}, {e}]}} : f32[{b * h},{l},{e}]")
        out, shape = "%o", (b * h, l, e)
    args = ", ".join(f"%{n}: f32[{','.join(map(str, src))}]" for n, src in zip("qkv", sources))
    text = "\n".join([f"graph @g({args}) -> (f32[{','.join(map(str, shape))}]) {{", *lines, f"  return {out}", "}"])
    return text, sources


@pytest.mark.parametrize("seed", range(12))
def test_attention_regions_from_random_head_splits_match_the_interpreter(seed: int) -> None:
    """Every chain the fuse pass takes into a region is read (and written) right: float32 sums of at most 17 terms
    of values below 5 in magnitude, within 1e-5; two threads give the one-thread bytes."""
    text, sources = random_heads_graph(random.Random(seed))
    graph = ir.parse(text)
    fused = optimize(graph, ["fuse"])
    assert [n.attr["kind"] for n in fused.nodes if n.op == "fused"] == ["attention"]
    arrays = [np.random.default_rng(seed).standard_normal(shape).astype(np.float32) for shape in sources]
    want = interpret(graph, arrays)[0]
    one = compile_graph(fused, pipeline=["plan_memory"], threads=1).run(arrays)[0]
    np.testing.assert_allclose(one, want, rtol=1e-5, atol=1e-5)
    two = compile_graph(fused, pipeline=["plan_memory"], threads=2).run(arrays)[0]
    assert two.tobytes() == one.tobytes()
