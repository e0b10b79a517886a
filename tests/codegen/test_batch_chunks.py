"""A batch run in chunks (codegen/batch_chunks.py): the entry loops over chunks of rows, each through every kernel,
and gives the whole batch's results on any thread count; when the chunks pay, how many, and the cache keeping
chunked and whole modules apart."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import braze
from braze import ir, nn
from braze.codegen.abi import CLAIM_OFFSET
from braze.codegen.batch_chunks import MAX_CHUNKS, REUSE, ROWS_VARIABLE, chunk_rows, peak_bytes, rows_for
from braze.codegen.graph_cache import compile_module
from braze.ir.errors import CodegenError
from braze.ir.passes import optimize
from braze.ir.rows import rows_graph
from braze.runtime.executable import Executable

from .native import at_once

F32 = ir.float32


class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        x = nn.functional.relu(self.c2(nn.functional.relu(self.c1(x))))
        return self.fc(x.mean(dim=(2, 3)))


def _inputs(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _compiled(monkeypatch: pytest.MonkeyPatch, model, x: np.ndarray, rows: int, threads: int):
    monkeypatch.setenv(ROWS_VARIABLE, str(rows))
    return braze.compile(model, x, threads=threads)


# (batch, rows, threads): with two chunks a thread or more, each thread runs the chunks it claims by itself; with
# fewer, all the threads run each chunk together
CASES = [(6, 2, 1), (6, 2, 2), (6, 2, 3), (6, 1, 2), (6, 1, 3), (8, 2, 2)]


@pytest.mark.parametrize("batch, rows, threads", CASES)
def test_a_cnn_in_chunks_gives_the_whole_batch(monkeypatch: pytest.MonkeyPatch, batch: int, rows: int,
                                               threads: int) -> None:
    braze.manual_seed(0)
    model, x = SmallCNN().eval(), _inputs((batch, 3, 10, 10))
    whole = _compiled(monkeypatch, model, x, 0, threads)
    chunked = _compiled(monkeypatch, model, x, rows, threads)
    assert whole.executable.built.chunks == 1 and chunked.executable.built.chunks == batch // rows
    assert chunked.executable.built.arena_bytes < whole.executable.built.arena_bytes
    reference = ir.interpret(whole.graph, [x])[0]
    for _ in range(2):  # the second call reuses the arena and the claim words of the first
        got = chunked(x)
        np.testing.assert_allclose(got, whole(x), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_transformer_layer_in_chunks_of_one_row(monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    braze.manual_seed(1)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).eval()
    x = _inputs((4, 9, 32), seed=1)
    whole = _compiled(monkeypatch, layer, x, 0, threads)
    chunked = _compiled(monkeypatch, layer, x, 1, threads)
    assert chunked.executable.built.chunks == 4
    np.testing.assert_allclose(chunked(x), whole(x), rtol=1e-5, atol=1e-5)


def _copies_graph() -> ir.Graph:
    """y = relu(x + w) returned twice beside the input: two of the three outputs are copies, each per chunk."""
    b = ir.GraphBuilder("copies")
    x = b.input("x", ir.TensorType((6, 4), F32))
    w = b.param("w", ir.TensorType((1, 4), F32), id=0)
    y = b.relu(b.add(x, w))
    weights = {"w": np.linspace(-1, 1, 4, dtype=np.float32).reshape(1, 4)}
    return optimize(b.finish([y, x, y], weights=weights), ["plan_memory"])


@pytest.mark.parametrize("rows, threads", [(2, 1), (2, 2), (1, 2), (1, 3)])
def test_outputs_copied_per_chunk(monkeypatch: pytest.MonkeyPatch, rows: int, threads: int) -> None:
    monkeypatch.setenv(ROWS_VARIABLE, str(rows))
    graph = _copies_graph()
    built, library = compile_module(graph, use_cache=False)
    assert built.chunks == 6 // rows
    x = _inputs((6, 4))
    got = Executable(built, library, threads=threads).run([x])
    for a, b in zip(got, ir.interpret(graph, [x])):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("rows, threads", [(1, 2), (1, 3), (2, 2), (2, 3)])
def test_threads_entering_at_once_each_run_their_chunks(monkeypatch: pytest.MonkeyPatch, rows: int,
                                                        threads: int) -> None:
    """The entry called on every thread id at the same moment (as the pool does when all workers come): with two
    chunks a thread or more each thread claims chunks and runs them alone in its arena slot, else they share each
    chunk's kernels; either way each output row is written once, with the whole batch's values."""
    braze.manual_seed(3)
    model, x = SmallCNN().eval(), _inputs((6, 3, 40, 40), seed=3)  # chunks long enough for the threads to meet
    want = _compiled(monkeypatch, model, x, 0, 1)(x)
    exe = _compiled(monkeypatch, model, x, rows, threads).executable
    # an arena slot per thread that may run chunks of its own: with two chunks a thread or more
    slots = max(1, min(threads, 6 // rows // 2))
    assert exe._arena.nbytes >= exe.built.arena_for(threads) == slots * -(-exe.built.arena_bytes // 64) * 64
    inputs, weights, outputs, arena, scratch, _, _, sync = exe._one_thread
    start = threading.Barrier(threads)

    def enter(tid: int) -> None:
        start.wait()
        exe._entry(inputs, weights, outputs, arena, scratch, tid, threads, sync)
    for _ in range(5):
        got = np.full_like(want, np.nan)
        exe._input_ptrs[0], exe._output_ptrs[0] = x.ctypes.data, got.ctypes.data
        at_once(enter, threads)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        assert not exe._sync[CLAIM_OFFSET:CLAIM_OFFSET + 16].any(), "the chunks' claim words are left zero"


def test_the_cache_keeps_chunked_and_whole_modules_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = _copies_graph()
    monkeypatch.setenv(ROWS_VARIABLE, "0")
    whole, _ = compile_module(graph)
    monkeypatch.setenv(ROWS_VARIABLE, "3")
    chunked, _ = compile_module(graph)
    again, library = compile_module(graph)  # linked before: the layout comes from the cache entry's meta
    assert (whole.chunks, chunked.chunks, again.chunks) == (1, 2, 2)
    assert whole.entry != chunked.entry == again.entry and again.arena_bytes == chunked.arena_bytes
    assert again.rows == 3 and whole.rows is None
    x = _inputs((6, 4), seed=2)
    for a, b in zip(Executable(again, library, threads=1).run([x]), ir.interpret(graph, [x])):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("value, rows", [("0", None), ("3", 3), ("4", None), ("6", None), ("", None)])
def test_the_rows_variable(monkeypatch: pytest.MonkeyPatch, value: str, rows: int | None) -> None:
    """A count dividing the batch into several chunks is taken; 0, or one that does not, keeps the batch whole; unset,
    a graph this small stays whole."""
    monkeypatch.setenv(ROWS_VARIABLE, value)
    assert chunk_rows(_copies_graph()) == rows


def test_a_bad_rows_variable_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ROWS_VARIABLE, "four")
    with pytest.raises(CodegenError, match=ROWS_VARIABLE):
        chunk_rows(_copies_graph())


def test_a_training_step_keeps_its_batch_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ROWS_VARIABLE, "2")
    graph = _copies_graph()
    step = graph.replace(attributes={**graph.attributes, "outputs": ["output", "input", "param_update:w"]})
    assert chunk_rows(graph) == 2 and chunk_rows(step) is None


def _big_cnn() -> ir.Graph:
    """The benchmark CNN's shape at batch 64 (32 x 32 images): its first conv writes 8 MB."""
    braze.manual_seed(2)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, stride=2, padding=1),
                          nn.ReLU()).eval()
    return braze.optimize(braze.trace(model, np.zeros((64, 3, 32, 32), np.float32)))


def test_chunks_bring_the_activations_to_half_the_cache() -> None:
    graph = _big_cnn()
    peak = peak_bytes(graph)
    assert peak == 4 * 64 * (32 * 32 * 32 + 64 * 16 * 16)  # the second conv reads 8 MB and writes 4 MB
    assert rows_for(graph, peak) is None  # it fits: no chunks
    for l2 in (peak // 2, peak // 8, peak // 64, 2 * 1024 * 1024):
        rows = rows_for(graph, l2)
        chunks = 64 // rows
        assert chunks <= MAX_CHUNKS and rows_graph(graph, rows) is not None
        # the fewest chunks that fit, or the most allowed
        assert peak // chunks <= l2 // 2 or chunks == MAX_CHUNKS
        assert chunks == 2 or peak // (chunks // 2) > l2 // 2
    assert rows_for(graph, 2 * 1024 * 1024) == 4


def test_chunks_streaming_the_weights_again_must_do_enough_work_with_them() -> None:
    """Where the weights do not fit in the L2 beside a chunk, every chunk reads them all again: only chunks doing
    REUSE work per weight byte are taken."""
    cnn = _big_cnn()
    weights = sum(p.type.nbytes for p in cnn.params())
    work = sum(ir.get_op(n.op).work_estimate(n) for n in cnn.ops())
    rows = rows_for(cnn, 2 * weights - 64)
    assert rows is not None and work // (64 // rows) >= REUSE * weights  # a conv does thousands
    braze.manual_seed(3)
    layer = nn.Linear(1024, 1024).eval()  # 4 MB of weights, 8 work per weight byte at 64 rows
    linear = braze.optimize(braze.trace(layer, np.zeros((64, 1024), np.float32)))
    assert peak_bytes(linear) > 256 * 1024 and rows_for(linear, 256 * 1024) is None
