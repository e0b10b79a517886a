"""Cached native code as a shared object: linked when a graph's entry is stored, opened without llvmlite by a later
process, outputs bit-identical to MCJIT's, MCJIT when there is no linker, and a damaged shared object rebuilt."""
from __future__ import annotations

import gc
import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import braze
from braze.codegen import cache, host_target, shared_object
from braze.codegen.graph_cache import compile_module
from braze.codegen.module_layout import graph_digest, module_key
from braze.runtime.executable import Executable
from tests.codegen.test_cache import cache_root  # noqa: F401  (the isolated cache directory, autouse)
from tests.codegen.test_graph_cache import planned_stack, stored_entry

ROOT = Path(__file__).resolve().parents[2]
needs_linker = pytest.mark.skipif(shared_object.linker() is None, reason="no system linker (ld or cc) on PATH")

WARM_SCRIPT = """
import json, sys
import numpy as np
import braze
braze.manual_seed(0)
model = braze.nn.Sequential(braze.nn.Linear(64, 256), braze.nn.ReLU(), braze.nn.Linear(256, 64)).eval()
x = np.random.default_rng(3).standard_normal((256, 64)).astype(np.float32)
compiled = braze.compile(model, x, threads=2)
y = compiled(x)
print(json.dumps({"llvmlite": "llvmlite" in sys.modules, "shared": compiled.executable.library.shared,
                  "hit": compiled.timings.cache_hit, "y": y.tobytes().hex()}))
"""


def _run(cache_dir: Path, env: dict[str, str] | None = None) -> dict:
    env = dict(env or os.environ, BRAZE_CACHE_DIR=str(cache_dir), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(WARM_SCRIPT)], env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cold_then_warm(graph: braze.ir.Graph, x: np.ndarray) -> tuple[np.ndarray, bool, Executable]:
    """The graph compiled cold (MCJIT): its output on x and whether its code was a shared object; then, that library
    dropped, the executable found warm in the cache."""
    cold = Executable(*compile_module(graph), threads=1)
    y, shared = cold(x), cold.library.shared
    del cold
    gc.collect()
    cache.reset_stats()
    return y, shared, Executable(*compile_module(graph), threads=1)


@needs_linker
def test_shared_object_warm_compile_in_a_new_process_never_imports_llvmlite(cache_root) -> None:
    cold = _run(cache_root)
    warm = _run(cache_root)  # the call stub and the worker pool (two threads) come from shared objects too
    assert not cold["hit"] and cold["llvmlite"]
    assert warm["hit"] and warm["shared"] and not warm["llvmlite"]
    assert warm["y"] == cold["y"]


@needs_linker
def test_shared_object_and_mcjit_give_bit_identical_outputs(cache_root) -> None:
    graph = planned_stack(3, batch=6)
    x = np.random.default_rng(7).standard_normal((6, 24)).astype(np.float32)
    y, shared, warm = _cold_then_warm(graph, x)
    assert not shared and warm.library.shared and warm.library.from_cache and cache.stats().hits == 1
    assert y.tobytes() == warm(x).tobytes()
    np.testing.assert_allclose(warm(x), braze.ir.interpret(graph, [x])[0], rtol=1e-5, atol=1e-5)
    assert warm.built.entry in warm.library.llvm_ir()  # inspection still builds the IR on demand


def test_shared_object_without_a_linker_the_objects_link_by_mcjit(cache_root, monkeypatch) -> None:
    monkeypatch.setenv("PATH", "")
    shared_object.linker.cache_clear()
    try:
        graph = planned_stack(2, batch=6)
        x = np.random.default_rng(8).standard_normal((6, 24)).astype(np.float32)
        y, _, warm = _cold_then_warm(graph, x)
        assert warm.library.from_cache and not warm.library.shared and cache.stats().hits == 1
        assert shared_object.META_KEY not in cache.load(module_key(graph_digest(graph, host_target()))).meta
        assert y.tobytes() == warm(x).tobytes()
    finally:
        shared_object.linker.cache_clear()


def _damaged(shared: bytes) -> list[tuple[str, bytes]]:
    """Shared objects that must never be opened: foreign, not shared, truncated, another module's."""
    machine = struct.unpack_from("<H", shared, 18)[0]
    return [("another machine", shared[:18] + struct.pack("<H", machine ^ 0x7f) + shared[20:]),
            ("a relocatable object", shared[:16] + struct.pack("<H", 1) + shared[18:]),
            ("truncated", shared[:200]),
            ("not ELF", b"\0" * len(shared))]


@needs_linker
def test_shared_object_damaged_is_rebuilt_never_opened(cache_root) -> None:
    graph = planned_stack(2, batch=5)
    key, entry = stored_entry(graph)
    objects, shared = shared_object.detach(entry.payload, entry.meta)
    stranger = stored_entry(planned_stack(1, batch=5))[1]
    cases = [*_damaged(bytes(shared)), ("another graph's", bytes(shared_object.detach(stranger.payload,
                                                                                     stranger.meta)[1]))]
    for what, bad in cases:
        payload, meta = shared_object.attach(bytes(objects), bad, {k: v for k, v in entry.meta.items()
                                                                   if k != shared_object.META_KEY})
        cache.entry_path(key).write_bytes(cache.encode_entry(key, payload, entry.symbols, meta))  # a valid hash
        gc.collect()
        cache.reset_stats()
        built, library = compile_module(graph)
        assert cache.stats().rebuilds == 1 and not library.from_cache and built.module is not None, what
        del built, library


def test_shared_object_size_that_does_not_fit_the_payload_is_refused() -> None:
    for size in (0, 10, "10", True):
        with pytest.raises(ValueError, match="does not fit"):
            shared_object.detach(b"0123456789", {shared_object.META_KEY: size})
    assert shared_object.detach(b"0123456789", {shared_object.META_KEY: 4}) == (b"012345", b"6789")
    assert shared_object.detach(b"0123", {}) == (b"0123", None)
