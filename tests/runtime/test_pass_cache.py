"""The optimized-graph cache (runtime/pass_cache.py): a second compile of the same traced graph and weights skips
every pass, gives the same graph and bit-identical outputs; other weights, options or a damaged entry run the
passes."""
from __future__ import annotations

import numpy as np
import pytest

import braze
from braze.codegen import cache, cache_entry
from braze.codegen.module_layout import with_leaf_ids
from braze.runtime import memory, pass_cache
from braze.runtime.compile_path import compile_passes
from tests.codegen.test_cache import cache_root  # noqa: F401  (the isolated cache directory, autouse)
from tests.runtime.artifact_cases import bn_cnn, inputs, lora_mlp

PASSES = list(compile_passes("inference"))


def passes_run(compiled: braze.CompiledModule) -> list[str]:
    return [name for name in compiled.timings.stages if name.startswith("pass ")]


@pytest.mark.parametrize("make,shape", [(lora_mlp, (4, 6)), (bn_cnn, (2, 3, 5, 5))])
def test_pass_cache_second_compile_runs_no_pass_and_gives_bit_identical_outputs(make, shape, monkeypatch) -> None:
    x = inputs(*shape, seed=3)
    first = make()
    cold = braze.compile(first, x, threads=1)
    model = make()  # another instance: the same graph text but for its param ids, and the same weights
    model.load_state_dict(first.state_dict())
    warm = braze.compile(model, x, threads=1)
    assert passes_run(cold) == [f"pass {name}" for name in PASSES] and "cached passes" not in cold.timings.stages
    assert passes_run(warm) == [] and "cached passes" in warm.timings.stages
    assert str(with_leaf_ids(warm.graph)) == str(with_leaf_ids(cold.graph))
    traced_ids = {leaf.path: leaf.id for leaf in braze.trace(model.valid(), braze.tensor(x)).params()}
    assert {leaf.path: leaf.id for leaf in warm.graph.params()}.items() <= traced_ids.items()
    assert all(np.array_equal(warm.graph.weights[p], w) for p, w in cold.graph.weights.items())
    monkeypatch.setenv("BRAZE_CACHE", "0")
    uncached = braze.compile(make(), x, threads=1)
    assert warm(x).tobytes() == cold(x).tobytes() == uncached(x).tobytes()


def test_pass_cache_other_weights_of_the_same_structure_run_the_passes() -> None:
    x = inputs(2, 3, 5, 5)
    braze.compile(bn_cnn(seed=0), x, threads=1)
    other = bn_cnn(seed=1)
    compiled = braze.compile(other, x, threads=1)
    assert "cached passes" not in compiled.timings.stages and passes_run(compiled)
    np.testing.assert_allclose(compiled(x), other(braze.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_pass_cache_key_follows_weights_passes_and_options() -> None:
    graph = braze.trace(lora_mlp(), braze.tensor(inputs(4, 6)))
    base = pass_cache.key(graph, PASSES, {})
    changed = {**graph.weights, "0.bias": graph.weights["0.bias"] + 1}
    assert base == pass_cache.key(graph, PASSES, {}) != pass_cache.key(graph.replace(weights=changed), PASSES, {})
    assert base != pass_cache.key(graph, PASSES[:-2] + PASSES[-1:], {})
    assert base != pass_cache.key(graph, PASSES, {"policy": "keep"})
    assert pass_cache.key(graph, PASSES, {"flags": object()}) is None  # not JSON: not cached
    assert pass_cache.key(graph, [*PASSES, "a_user_pass"], {}) is None  # a user's pass: code the key cannot name


def test_pass_cache_key_is_the_same_hashed_on_several_threads(monkeypatch) -> None:
    graph = braze.trace(bn_cnn(), braze.tensor(inputs(2, 3, 5, 5)))
    alone = pass_cache.key(graph, PASSES, {})
    monkeypatch.setattr(memory, "PARALLEL_BYTES", 1)
    monkeypatch.setattr(memory, "cpu_count", lambda: 3)
    assert pass_cache.key(graph, PASSES, {}) == alone


@pytest.mark.parametrize("damage", [
    lambda meta: {**meta, "graph": meta["graph"].replace("return", "retrun")},
    lambda meta: {**meta, "weights": [[path, "f32", [9], 0, 36] for path, *_ in meta["weights"]]},
    lambda meta: {**meta, "weights": meta["weights"][1:]},
    lambda meta: {**meta, "kind": "something else"},
])
def test_pass_cache_damaged_entry_is_deleted_and_the_passes_run(damage) -> None:
    x = inputs(2, 3, 5, 5)
    model = bn_cnn()
    braze.compile(model, x, threads=1)
    key = pass_cache.key(braze.trace(model.valid(), braze.tensor(x)), PASSES, {})
    entry = cache.load(key)
    cache.store(key, entry.payload, (), damage(entry.meta))
    cache.reset_stats()
    compiled = braze.compile(model, x, threads=1)
    assert cache.stats().rebuilds == 1 and passes_run(compiled) and "cached passes" not in compiled.timings.stages
    np.testing.assert_allclose(compiled(x), model(braze.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_pass_cache_weight_changed_in_place_after_a_warm_compile_misses_and_answers_right() -> None:
    x = inputs(2, 3, 5, 5)
    model = bn_cnn()
    braze.compile(model, x, threads=1)
    warm = braze.compile(model, x, threads=1)
    before = warm(x)
    weight = model[0].weight
    array = weight.detach().numpy()
    array *= 2.0  # in place: the memory the next trace reads, other values
    assert np.shares_memory(weight.detach().numpy(), array)
    changed = braze.compile(model, x, threads=1)
    assert passes_run(changed) and "cached passes" not in changed.timings.stages
    np.testing.assert_allclose(changed(x), model(braze.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-5)
    assert warm(x).tobytes() == before.tobytes()  # compiled code holds the weights it was compiled with


def test_pass_cache_hit_shares_the_derived_weights_it_read_and_copies_one_on_write(monkeypatch) -> None:
    monkeypatch.setattr(cache_entry, "MAP_BYTES", 0)  # mapped read-only, as a large entry is
    x = inputs(2, 3, 5, 5)
    model = bn_cnn()
    cold = braze.compile(model, x, threads=1)
    warm = braze.compile(model, x, threads=1)
    assert "cached passes" in warm.timings.stages
    folded = warm.graph.weights["0.weight"]
    assert memory.unchangeable(folded)
    executable = warm.executable
    assert any(w is folded for w in executable._weights)  # shared: not copied at load
    executable.write_weights({"0.weight": np.zeros_like(folded)})
    assert not any(w is folded for w in executable._weights)
    assert np.array_equal(folded, cold.graph.weights["0.weight"])  # the shared array itself is never written
    np.testing.assert_array_equal(executable.weight("0.weight"), 0)


def test_pass_cache_hit_mapped_keeps_working_after_the_cache_is_cleared_and_refilled(monkeypatch) -> None:
    """The derived weights of a mapped entry stay what they were when the entry's file is removed (`braze cache
    clear`, eviction) and another model's entries fill the cache."""
    monkeypatch.setattr(cache_entry, "MAP_BYTES", 0)
    x = inputs(2, 3, 5, 5)
    model = bn_cnn()
    cold = braze.compile(model, x, threads=1)
    warm = braze.compile(model, x, threads=1)
    assert "cached passes" in warm.timings.stages
    assert cache.clear() > 0
    braze.compile(bn_cnn(), x, threads=1)
    assert warm(x).tobytes() == cold(x).tobytes()


def test_pass_cache_entry_of_many_digest_blocks_hits_bit_identical_and_refuses_a_flipped_bit(monkeypatch) -> None:
    """A large entry's path (read and hashed a digest block at a time on several threads), with blocks of 64 bytes
    so that the derived weights span many: a hit gives the cold compile's outputs bit for bit; one bit changed in
    a block in the middle of the payload is found, the entry deleted and the passes run again."""
    monkeypatch.setattr(cache_entry, "MAP_BYTES", 0)
    monkeypatch.setattr(cache_entry, "DIGEST_BLOCK_BYTES", 64)
    x = inputs(2, 3, 5, 5)
    model = bn_cnn()
    cold = braze.compile(model, x, threads=1)
    warm = braze.compile(model, x, threads=1)
    assert "cached passes" in warm.timings.stages and warm(x).tobytes() == cold(x).tobytes()
    path = cache.entry_path(pass_cache.key(braze.trace(model.valid(), braze.tensor(x)), PASSES, {}))
    data = bytearray(path.read_bytes())
    entry = cache.load(path.stem)
    assert len(entry.payload) > 4 * 64
    data[len(data) - len(entry.payload) // 2] ^= 1
    path.write_bytes(bytes(data))
    cache.reset_stats()
    again = braze.compile(model, x, threads=1)
    assert cache.stats().rebuilds == 1 and passes_run(again) and again(x).tobytes() == cold(x).tobytes()
