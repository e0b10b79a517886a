"""The prepared-weights cache (runtime/prepared_cache.py): a warm compile whose passes were found in the disk cache
maps the prepared weights the first compile made instead of preparing them, with bit-identical outputs; a write of
new weights prepares fresh buffers and leaves the entry alone; a damaged or mismatched entry is deleted and the
weights are prepared again. MIN_BYTES is lowered so that these small models qualify."""
from __future__ import annotations

import numpy as np
import pytest

import braze
from braze.codegen import cache, cache_entry
from braze.ir.errors import BrazeError
from braze.runtime import prepared_cache
from braze.runtime.executable import Executable
from tests.codegen.test_cache import cache_root  # noqa: F401  (the isolated cache directory, autouse)
from tests.runtime.artifact_cases import bn_cnn, inputs, lora_mlp

CASES = [(lora_mlp, (4, 6)), (bn_cnn, (2, 3, 5, 5))]


@pytest.fixture(autouse=True)
def small_models_qualify(monkeypatch) -> None:
    monkeypatch.setattr(prepared_cache, "MIN_BYTES", 0)
    monkeypatch.setattr(cache_entry, "MAP_BYTES", 0)  # mapped, as the entry of a large model is


def prepared_entries() -> list[str]:
    return [p.stem for p in cache.cache_dir().glob(f"*{cache.SUFFIX}")
            if (entry := cache.load(p.stem, counted=False)) is not None
            and entry.meta.get("kind") == prepared_cache.KIND]


@pytest.mark.parametrize("make,shape", CASES)
def test_prepared_cache_warm_compile_maps_the_prepared_weights_and_gives_bit_identical_outputs(make, shape,
                                                                                            monkeypatch) -> None:
    x = inputs(*shape, seed=5)
    cold = braze.compile(make(), x, threads=1)
    assert cold.executable.prepare_calls == 1 and len(prepared_entries()) == 1
    warm = braze.compile(make(), x, threads=1)
    assert "cached passes" in warm.timings.stages and warm.executable.prepare_calls == 0
    assert all(not buffer.flags.writeable for buffer in warm.executable._prepared)  # the entry's, not a copy
    assert [b.tobytes() for b in warm.executable.prepared] == [b.tobytes() for b in cold.executable.prepared]
    monkeypatch.setenv("BRAZE_CACHE", "0")
    uncached = braze.compile(make(), x, threads=1)
    assert warm(x).tobytes() == cold(x).tobytes() == uncached(x).tobytes()


def test_prepared_cache_write_weights_after_a_hit_prepares_fresh_buffers_and_leaves_the_entry() -> None:
    x = inputs(4, 6)
    cold = braze.compile(lora_mlp(), x, threads=1)
    warm = braze.compile(lora_mlp(), x, threads=1)
    assert warm.executable.prepare_calls == 0
    weights = {slot.path: np.asarray(warm.graph.weights[slot.path]) * 2 for slot in warm.executable.built.weights}
    warm.executable.write_weights(weights)
    assert warm.executable.prepare_calls == 1 and all(b.flags.writeable for b in warm.executable._prepared)
    doubled = braze.compile(lora_mlp(), x, threads=1).executable
    doubled.write_weights(weights)
    assert warm(x).tobytes() == doubled(x).tobytes() != cold(x).tobytes()
    again = braze.compile(lora_mlp(), x, threads=1)
    assert again.executable.prepare_calls == 0 and again(x).tobytes() == cold(x).tobytes()


def damaged_slots(meta: dict) -> dict:
    return {**meta, "slots": [[key, nbytes + 64, offset] for key, nbytes, offset in meta["slots"]]}


def foreign_kind(meta: dict) -> dict:
    return {**meta, "kind": "braze-optimized-graph 1"}


def misaligned_offset(meta: dict) -> dict:
    return {**meta, "slots": [[key, nbytes, offset + 4] for key, nbytes, offset in meta["slots"]]}


def offset_past_the_payload(meta: dict) -> dict:
    return {**meta, "slots": [[key, nbytes, offset + 2 ** 40] for key, nbytes, offset in meta["slots"]]}


def slots_not_a_list(meta: dict) -> dict:
    return {**meta, "slots": {"0": meta["slots"]}}


def a_slot_missing(meta: dict) -> dict:
    return {**meta, "slots": meta["slots"][:-1] + [["x", 1]]}


@pytest.mark.parametrize("damage", [damaged_slots, foreign_kind, misaligned_offset, offset_past_the_payload,
                                    slots_not_a_list, a_slot_missing])
def test_prepared_cache_entry_that_does_not_list_the_slots_is_deleted_and_the_weights_prepared(damage) -> None:
    x = inputs(2, 3, 5, 5)
    cold = braze.compile(bn_cnn(), x, threads=1)
    (key,) = prepared_entries()
    entry = cache.load(key)
    cache.store(key, bytes(entry.payload), (), damage(entry.meta))
    warm = braze.compile(bn_cnn(), x, threads=1)
    assert "cached passes" in warm.timings.stages and warm.executable.prepare_calls == 1
    assert warm(x).tobytes() == cold(x).tobytes()
    assert prepared_entries() == [key]  # deleted, then written again by this compile


def test_prepared_cache_entry_with_a_flipped_bit_is_never_used() -> None:
    x = inputs(2, 3, 5, 5)
    cold = braze.compile(bn_cnn(), x, threads=1)
    (key,) = prepared_entries()
    path = cache.entry_path(key)
    data = bytearray(path.read_bytes())
    data[-3] ^= 1
    path.write_bytes(bytes(data))
    warm = braze.compile(bn_cnn(), x, threads=1)
    assert warm.executable.prepare_calls == 1 and warm(x).tobytes() == cold(x).tobytes()


def test_prepared_cache_keeps_only_prepared_weights_of_min_bytes(monkeypatch) -> None:
    monkeypatch.setattr(prepared_cache, "MIN_BYTES", 1 << 20)
    x = inputs(4, 6)
    braze.compile(lora_mlp(), x, threads=1)
    warm = braze.compile(lora_mlp(), x, threads=1)
    assert prepared_entries() == [] and warm.executable.prepare_calls == 1


def test_executable_refuses_prepared_buffers_that_do_not_fit_its_slots() -> None:
    compiled = braze.compile(lora_mlp(), inputs(4, 6), threads=1)
    built, library = compiled.executable.built, compiled.executable.library
    good = list(compiled.executable.prepared)
    with pytest.raises(BrazeError, match="prepared weights; got 1"):
        Executable(built, library, prepared=good[:1])
    with pytest.raises(BrazeError, match="aligned, contiguous array of"):
        Executable(built, library, prepared=[good[0][:-4], good[1]])
    with pytest.raises(BrazeError, match="not 64-byte aligned"):
        Executable(built, library, prepared=[good[0], np.frombuffer(bytes(good[1].nbytes + 4), np.uint8)[4:]])
    assert Executable(built, library, prepared=good)(inputs(4, 6)).tobytes() == compiled(inputs(4, 6)).tobytes()
