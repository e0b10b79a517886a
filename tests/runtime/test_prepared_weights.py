"""Weights prepared once per Executable: a matmul whose B is a param (or a param's transpose) reads B pre-packed.

The module's prepare function packs each such weight into its own buffer when the Executable is built; the GEMM
kernels then read the packed panels instead of packing B on every call. Outputs must match eager execution within
the model tolerance of test_models.py, the packed bytes must be the panel layout of the weight (NR-column panels of
K rows, the last zero-padded), and a weight read by two matmuls is packed once into one shared buffer. A conv2d
whose weight is a param reads it as its GEMM's A packed once (MR-row panels of K steps per group); a depthwise conv
reads its weight in place.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import braze
import braze.nn as nn
import braze.nn.functional as F
from braze.codegen.conv import CHANNELS_WIDTH, ConvSpec
from braze.codegen.conv_channels import ChannelLayout
from braze.codegen.gemm import default_tiling
from braze.codegen.gemv import GEMV_ROWS

TOLERANCE = 2e-5


class Deep(nn.Module):
    """Three linear layers large enough that the GEMM would pack every weight on every call."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(96, 80), nn.Linear(80, 64), nn.Linear(64, 10)

    def forward(self, x: Any) -> Any:
        return self.c(F.relu(self.b(F.relu(self.a(x)))))


class Shared(nn.Module):
    """One square weight applied twice: both matmuls read the same packed B."""

    def __init__(self, width: int = 48) -> None:
        super().__init__()
        self.w = nn.Parameter(braze.randn(width, width) * 0.2)

    def forward(self, x: Any) -> Any:
        return F.linear(F.relu(F.linear(x, self.w)), self.w)


class Plain(nn.Module):
    """x @ W with W stored (k, n): B is the param itself, too large to read in place at this batch."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(braze.randn(512, 256) * 0.05)

    def forward(self, x: Any) -> Any:
        return braze.matmul(x, self.w)


def compiled(model: nn.Module, x: np.ndarray, threads: int = 1) -> tuple[Any, Any]:
    """The compiled module (called once) and its Executable."""
    fn = braze.compile(model, x, threads=threads)
    return fn, fn.executable


def eager(model: nn.Module, x: np.ndarray) -> np.ndarray:
    return np.asarray(model(braze.from_numpy(x)))


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    bound = TOLERANCE * max(1.0, float(np.abs(want).max()))
    assert np.abs(np.asarray(got) - want).max() <= bound


def packed_layout(b: np.ndarray, nr: int) -> np.ndarray:
    """B (k x n) as NR-column panels of K rows, the last panel zero-padded to NR columns."""
    k, n = b.shape
    panels = -(-n // nr)
    padded = np.zeros((k, panels * nr), np.float32)
    padded[:, :n] = b
    return padded.reshape(k, panels, nr).transpose(1, 0, 2).reshape(-1)


@pytest.mark.parametrize("batch", [1, 5, 64])
@pytest.mark.parametrize("threads", [1, 2])
def test_mlp_with_prepacked_weights_matches_eager(batch: int, threads: int) -> None:
    braze.manual_seed(0)
    model = Deep().eval()
    x = np.random.default_rng(batch).standard_normal((batch, 96)).astype(np.float32)
    fn, exe = compiled(model, x, threads)
    # the GEMV kernel of a few rows reads each weight in place, as the model stores it
    assert len(exe.built.prepared) == (0 if batch <= GEMV_ROWS else 3)
    assert_close(fn(x), eager(model, x))
    assert_close(fn(x * 2), eager(model, x * 2))


def test_prepare_runs_once_and_fills_the_packed_weight_before_the_first_call() -> None:
    braze.manual_seed(1)
    model = Deep().eval()
    x = np.random.default_rng(0).standard_normal((GEMV_ROWS + 2, 96)).astype(np.float32)  # a batch that packs
    exe = braze.compile(model, x).executable
    assert exe.prepare_calls == 1
    nr = default_tiling().nr
    weights = {slot.path: slot.array(exe.graph) for slot in exe.built.weights}
    for slot, buffer in zip(exe.built.prepared, exe._prepared):
        assert buffer.nbytes >= slot.nbytes
        packed = buffer[:slot.nbytes].view(np.float32)
        source = exe.built.weights[slot.source]
        np.testing.assert_array_equal(packed, packed_layout(weights[source.path].T, nr))
    for _ in range(3):
        assert_close(exe(x), eager(model, x))
    assert exe.prepare_calls == 1


def test_a_weight_read_by_two_matmuls_is_packed_once() -> None:
    braze.manual_seed(2)
    model = Shared().eval()
    x = np.random.default_rng(1).standard_normal((4, 48)).astype(np.float32)
    fn, exe = compiled(model, x)
    assert len(exe.built.prepared) == 1
    assert_close(fn(x), eager(model, x))
    prepare = str(exe.built.module.get_global(exe.built.prepare))
    assert prepare.count("prepack_b") == 1
    assert sum(info.op in ("matmul", "linear", "fused:gemm") for info in exe.built.kernels) == 2


def test_an_untransposed_param_b_is_prepacked_too() -> None:
    braze.manual_seed(3)
    model = Plain().eval()
    x = np.random.default_rng(2).standard_normal((32, 512)).astype(np.float32)
    fn, exe = compiled(model, x)
    assert len(exe.built.prepared) == 1
    packed = exe._prepared[0][:exe.built.prepared[0].nbytes].view(np.float32)
    np.testing.assert_array_equal(packed, packed_layout(np.asarray(model.w), default_tiling().nr))
    assert_close(fn(x), eager(model, x))


def test_a_small_batch_reads_an_untransposed_weight_in_place() -> None:
    braze.manual_seed(4)
    model = Plain().eval()
    x = np.random.default_rng(3).standard_normal((1, 512)).astype(np.float32)
    fn, exe = compiled(model, x)
    assert exe.built.prepared == () and exe.built.prepare is None and exe.prepare_calls == 0
    assert_close(fn(x), eager(model, x))


class ConvNet(nn.Module):
    """conv + bias + relu, a grouped conv, a depthwise conv and a stride-2 conv."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.grouped = nn.Conv2d(16, 32, 3, padding=1, groups=4)
        self.depthwise = nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.down = nn.Conv2d(32, 24, 3, stride=2, padding=1)

    def forward(self, x: Any) -> Any:
        x = F.relu(self.stem(x))
        x = F.relu(self.grouped(x))
        x = F.relu(self.depthwise(x))
        return self.down(x)


PACKED_CONVS = ("stem.weight", "grouped.weight", "down.weight")


def conv_packed_layout(w: np.ndarray, groups: int, mr: int) -> np.ndarray:
    """A conv weight as each group's (c_out/groups x K) A in MR-row panels of K steps, the last zero-padded."""
    per_group = w.reshape(groups, w.shape[0] // groups, -1)
    return np.concatenate([packed_layout(a.T, mr) for a in per_group])


def channels_packed_layout(w: np.ndarray, groups: int, layout: ChannelLayout) -> np.ndarray:
    """A conv weight for the channels kernel: per group, the channels zero-padded to whole vectors of W, then per
    channel tile of V (the last V') vectors, for each of the K steps the tile's V'*W weights side by side."""
    width, out = layout.width, []
    for a in w.reshape(groups, w.shape[0] // groups, -1):
        padded = np.zeros((layout.blocks * width, a.shape[1]), np.float32)
        padded[:a.shape[0]] = a
        for tile in range(layout.channel_tiles):
            vectors = layout.last_vectors if tile == layout.channel_tiles - 1 else layout.vectors
            first = tile * layout.vectors * width
            out.append(padded[first:first + vectors * width].T.reshape(-1))
    return np.concatenate(out)


def conv_slots(exe: Any) -> dict[str, Any]:
    """The prepared slots of conv weights by the path of the weight they pack."""
    return {exe.built.weights[slot.source].path: slot for slot in exe.built.prepared if ":conv_w:" in slot.key}


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("threads", [1, 2])
def test_cnn_with_prepacked_conv_weights_matches_eager(batch: int, threads: int) -> None:
    braze.manual_seed(5)
    model = ConvNet().eval()
    x = np.random.default_rng(batch).standard_normal((batch, 3, 12, 12)).astype(np.float32)
    fn, exe = compiled(model, x, threads)
    assert sorted(conv_slots(exe)) == sorted(PACKED_CONVS)
    assert sum(info.op in ("conv2d", "fused:conv") for info in exe.built.kernels) == 4
    assert_close(fn(x), eager(model, x))
    assert_close(fn(x * 2), eager(model, x * 2))


def test_conv_weights_are_packed_once_before_the_first_call() -> None:
    braze.manual_seed(6)
    model = ConvNet().eval()
    x = np.random.default_rng(4).standard_normal((2, 3, 10, 10)).astype(np.float32)
    exe = braze.compile(model, x).executable
    assert exe.prepare_calls == 1
    tiling = default_tiling()
    slots = conv_slots(exe)
    for path, groups in zip(PACKED_CONVS, (1, 4, 1)):
        slot = slots[path]
        buffer = exe._prepared[slot.slot - len(exe.built.weights)]
        assert buffer.nbytes >= slot.nbytes
        weight = exe.built.weights[slot.source].array(exe.graph)
        # the stride-2 conv's K = 32*3*3 = 288 puts it on the channels kernel on AVX-512 (codegen/conv.py)
        on_channels = path == "down.weight" and tiling.width >= CHANNELS_WIDTH
        assert (":channels:" in slot.key) == on_channels
        if on_channels:
            spec = ConvSpec(2, weight.shape[1] * groups, 10, 10, weight.shape[0], 3, 3, groups=groups)
            want = channels_packed_layout(weight, groups, ChannelLayout(spec, tiling.width))
        else:
            want = conv_packed_layout(weight, groups, tiling.mr)
        np.testing.assert_array_equal(buffer[:slot.nbytes].view(np.float32), want)
    for _ in range(3):
        assert_close(exe(x), eager(model, x))
    assert exe.prepare_calls == 1


def test_a_depthwise_conv_reads_its_weight_in_place() -> None:
    braze.manual_seed(7)
    model = nn.Conv2d(8, 8, 3, padding=1, groups=8).eval()
    x = np.random.default_rng(5).standard_normal((2, 8, 9, 9)).astype(np.float32)
    fn, exe = compiled(model, x)
    assert exe.built.prepared == () and exe.built.prepare is None and exe.prepare_calls == 0
    assert_close(fn(x), eager(model, x))


def test_large_weights_are_copied_and_prepared_on_several_threads_with_the_same_bytes(monkeypatch) -> None:
    """Past memory.PARALLEL_BYTES, weights are copied and each prepared form filled by its own function on several
    threads: the buffers and outputs are the very ones the module's one prepare function gives."""
    from braze.runtime import memory
    braze.manual_seed(7)
    model = ConvNet().eval()
    x = np.random.default_rng(8).standard_normal((2, 3, 10, 10)).astype(np.float32)
    alone = braze.compile(model, x).executable
    monkeypatch.setattr(memory, "PARALLEL_BYTES", 1)
    monkeypatch.setattr(memory, "cpu_count", lambda: 3)
    spread = braze.compile(model, x).executable
    assert len(spread.built.prepared) >= 2 and spread.prepare_calls == 1
    assert all(a.tobytes() == b.tobytes() for a, b in zip(alone._prepared, spread._prepared))
    assert all(a.tobytes() == b.tobytes() for a, b in zip(alone._weights, spread._weights))
    assert spread(x).tobytes() == alone(x).tobytes()
