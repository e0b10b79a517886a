"""The conv2d kernel search (BRAZE_TUNE=1): measured choices recorded per CPU, taken by later compiles, kept out of
compiles without BRAZE_TUNE, never trusted beyond what a table may say, and named in the cache keys so that code
built with one choice is never found by a compile that makes another."""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import braze
import braze as torch
from braze.codegen import conv_search, conv_tuning, host_target
from braze.codegen.conv import ConvSpec, conv_kernel
from braze.codegen.gemm import tiling_for

nn = torch.nn

# 8 -> 16 channels, 3x3, padding 1, over 2 images of 12x12: covered by all three kernels on every vector width.
SPEC = ConvSpec(2, 8, 12, 12, 16, 3, 3, padding=(1, 1), prepacked_weight=True)


@pytest.fixture
def tuning(monkeypatch: Any, tmp_path: Any) -> str:
    """Tuning on, with a cache directory (and so a table) of this test's own; the host target's identity."""
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(conv_tuning.TUNE_ENV, "1")
    return host_target().identity


def _model() -> nn.Module:
    braze.manual_seed(0)
    return nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU()).eval()


def _x() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((2, 8, 12, 12)).astype(np.float32)


def _eager(model: nn.Module, x: np.ndarray) -> np.ndarray:
    with braze.no_grad():
        return model(braze.tensor(x)).numpy()


def _write_table(identity: str, entries: Any) -> None:
    path = conv_tuning.table_path(identity)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(entries if isinstance(entries, str) else json.dumps(entries))


def _width() -> int:
    return host_target().vector_width


def _conv_scratch(compiled: Any) -> int:
    (info,) = [k for k in compiled.kernels() if "conv" in k.op or k.op == "fused"]
    return info.scratch_bytes


def test_record_is_taken_only_with_tuning_on(tuning: str, monkeypatch: Any) -> None:
    width = _width()
    assert conv_tuning.tuned_kernel(SPEC, width, tuning) is None
    before = conv_tuning.digest(tuning)
    assert conv_tuning.record(SPEC, width, tuning, {"im2col": 2e-3, "direct": 1e-3, "channels": 3e-3}) == "direct"
    assert conv_tuning.tuned_kernel(SPEC, width, tuning) == "direct"
    assert conv_kernel(SPEC, tiling=tiling_for(width)) == "direct"
    assert conv_tuning.digest(tuning) not in ("", before)
    monkeypatch.delenv(conv_tuning.TUNE_ENV)
    assert conv_tuning.tuned_kernel(SPEC, width, tuning) is None
    assert conv_tuning.digest(tuning) == ""


@pytest.mark.parametrize("text", ["not json", "[1, 2]", "[" * 100_000, json.dumps({"conv2d:1": {"kernel": "fastest"}}),
                                  json.dumps({"conv2d:1": {"kernel": "direct", "seconds": {"direct": "soon"}}}),
                                  json.dumps({"conv2d:1": {"kernel": "direct", "seconds": {"gpu": 1.0}}})])
def test_a_table_that_is_not_one_is_read_as_empty(tuning: str, text: str) -> None:
    _write_table(tuning, text)
    assert conv_tuning.entries(tuning) == {}
    model, x = _model(), _x()
    np.testing.assert_allclose(braze.compile(model, x)(x), _eager(model, x), rtol=1e-4, atol=1e-4)


def test_a_table_others_may_write_to_is_neither_read_nor_written(tuning: str) -> None:
    key = conv_tuning.spec_key(SPEC, _width())
    _write_table(tuning, {key: {"kernel": "direct", "seconds": {}}})
    folder = conv_tuning.table_path(tuning).parent
    folder.chmod(0o777)
    try:
        with pytest.warns(UserWarning):
            assert conv_tuning.entries(tuning) == {}
        conv_tuning.record(SPEC, _width(), tuning, {"im2col": 1.0, "direct": 2.0})
        assert json.loads(conv_tuning.table_path(tuning).read_text())[key]["kernel"] == "direct"
    finally:
        folder.chmod(0o700)
    assert conv_tuning.tuned_kernel(SPEC, _width(), tuning) == "direct"


def test_a_recorded_kernel_that_does_not_cover_the_shape_is_ignored(tuning: str) -> None:
    """A 9x9 kernel has more taps than the direct and channels kernels take: the rule's im2col runs instead."""
    spec = ConvSpec(1, 4, 12, 12, 8, 9, 9, prepacked_weight=True)
    for kernel in ("direct", "channels"):
        _write_table(tuning, {conv_tuning.spec_key(spec, _width()): {"kernel": kernel, "seconds": {}}})
        assert conv_kernel(spec, tiling=tiling_for(_width())) == "im2col"


@pytest.mark.parametrize("first, second", [("im2col", "direct"), ("direct", "im2col")])
def test_compiles_take_the_recorded_kernel_and_never_an_older_choice(tuning: str, first: str, second: str) -> None:
    """im2col needs per-thread scratch, the direct kernel none: the compiled kernel's scratch tells them apart."""
    model, x = _model(), _x()
    key = conv_tuning.spec_key(SPEC, _width())
    scratch = {}
    for kernel in (first, second):
        _write_table(tuning, {key: {"kernel": kernel, "seconds": {}}})
        compiled = braze.compile(model, x)
        scratch[kernel] = _conv_scratch(compiled)
        np.testing.assert_allclose(compiled(x), _eager(model, x), rtol=1e-4, atol=1e-4)
    assert scratch["im2col"] > 0 and scratch["direct"] == 0


def test_tuned_compile_searches_the_convs_and_records_the_fastest(tuning: str) -> None:
    model, x = _model(), _x()
    compiled = braze.compile(model, x)
    assert "tune" in compiled.timings.stages
    np.testing.assert_allclose(compiled(x), _eager(model, x), rtol=1e-4, atol=1e-4)
    (entry,) = conv_tuning.entries(tuning).values()
    assert set(entry["seconds"]) == set(conv_search.candidates(SPEC, _width())) and len(entry["seconds"]) >= 2
    assert entry["kernel"] == min(entry["seconds"], key=entry["seconds"].get)
    assert all(seconds > 0 for seconds in entry["seconds"].values())
    # a second compile finds the choice: nothing is searched again
    assert conv_search.tune(compiled.graph) == {}


def test_without_tuning_nothing_is_searched_or_written(monkeypatch: Any, tmp_path: Any) -> None:
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(conv_tuning.TUNE_ENV, raising=False)
    model, x = _model(), _x()
    compiled = braze.compile(model, x)
    assert "tune" not in compiled.timings.stages
    assert not conv_tuning.table_path(host_target().identity).exists()


def test_graph_convs_finds_fused_regions_and_skips_depthwise() -> None:
    braze.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.Conv2d(16, 16, 3, padding=1, groups=16)).eval()
    compiled = braze.compile(model, _x())
    assert conv_search.graph_convs(compiled.graph) == [SPEC]


def test_a_compile_worker_lowers_with_the_choices_it_is_sent(tuning: str, monkeypatch: Any) -> None:
    """A worker's own environment may say otherwise (started before BRAZE_TUNE changed): the sent choices win."""
    key = conv_tuning.spec_key(SPEC, _width())
    _write_table(tuning, {key: {"kernel": "direct", "seconds": {}}})
    assert conv_tuning.choices(tuning) == {key: "direct"}
    tiling = tiling_for(_width())
    monkeypatch.delenv(conv_tuning.TUNE_ENV)
    rule = conv_kernel(SPEC, tiling=tiling)
    assert conv_tuning.choices(tuning) == {}
    other = "im2col" if rule != "im2col" else "direct"
    with conv_tuning.choices_in_use({key: other, "bad": "gpu", 3: "direct"}):
        assert conv_kernel(SPEC, tiling=tiling) == other
    monkeypatch.setenv(conv_tuning.TUNE_ENV, "1")
    with conv_tuning.choices_in_use({}):  # the parent compiled without tuning: the rule, whatever the table says
        assert conv_kernel(SPEC, tiling=tiling) == rule
    with conv_tuning.choices_in_use("not a mapping"):
        assert conv_kernel(SPEC, tiling=tiling) == rule


def test_convs_with_nothing_to_compute_are_not_searched(tuning: str) -> None:
    model, empty = _model(), np.zeros((0, 8, 12, 12), np.float32)
    assert braze.compile(model, empty)(empty).shape == (0, 16, 12, 12)
    assert conv_tuning.entries(tuning) == {}


def test_a_conv_whose_weight_is_an_input_is_searched_unpacked(tuning: str) -> None:
    class Conv(nn.Module):
        def forward(self, x: Any, w: Any) -> Any:
            return torch.nn.functional.conv2d(x, w, padding=1)
    x, w = _x(), np.random.default_rng(1).standard_normal((16, 8, 3, 3)).astype(np.float32)
    compiled = braze.compile(Conv().eval(), x, w)
    with braze.no_grad():
        expected = torch.nn.functional.conv2d(braze.tensor(x), braze.tensor(w), padding=1).numpy()
    np.testing.assert_allclose(compiled(x, w), expected, rtol=1e-4, atol=1e-4)
    unpacked = ConvSpec(2, 8, 12, 12, 16, 3, 3, padding=(1, 1))
    (key,) = conv_tuning.entries(tuning)
    assert key == conv_tuning.spec_key(unpacked, _width())
    assert "channels" not in conv_tuning.entries(tuning)[key]["seconds"]  # it reads its weight pre-packed only
