"""The whole-graph object cache: a warm compile links stored code without building LLVM IR, keys that change with
everything the code depends on, damaged layouts rebuilt, kernel reuse, two processes compiling into one cache at
once, and outputs bit-identical warm and cold."""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import llvmlite
import numpy as np
import pytest

import braze
from braze.codegen import cache, host_target, module_layout, shared_object
from braze.codegen.graph_cache import compile_built, compile_module
from braze.codegen.jit import unpack_objects
from braze.codegen.module_builder import build_module
from braze.codegen.module_layout import graph_digest, module_key
from braze.runtime.compile_path import planned_graph
from braze.runtime.executable import Executable
from tests.codegen.test_cache import cache_root  # noqa: F401  (the isolated cache directory, autouse)

ROOT = Path(__file__).resolve().parents[2]


def stack(layers: int, width: int = 24, seed: int = 0) -> braze.nn.Module:
    """`layers` identical Linear+ReLU layers, then a Linear to 3 outputs."""
    braze.manual_seed(seed)
    body = [m for _ in range(layers) for m in (braze.nn.Linear(width, width), braze.nn.ReLU())]
    return braze.nn.Sequential(*body, braze.nn.Linear(width, 3)).eval()


def planned_stack(layers: int, batch: int) -> braze.ir.Graph:
    x = np.random.default_rng(1).standard_normal((batch, 24)).astype(np.float32)
    return planned_graph(braze.trace(stack(layers), braze.tensor(x)))


def test_graph_cache_key_changes_with_graph_target_llvmlite_and_builder(monkeypatch) -> None:
    target = host_target()
    graph = planned_stack(2, batch=5)
    base = module_key(graph_digest(graph, target))
    assert base == module_key(graph_digest(planned_stack(2, batch=5), target))
    assert base != module_key(graph_digest(planned_stack(2, batch=6), target))
    assert base != module_key(graph_digest(graph, replace(target, features=target.features + ",-avx2")))
    assert base != module_key(graph_digest(graph, replace(target, cpu="x86-64")))
    monkeypatch.setattr(llvmlite, "__version__", "0.0.0-other")
    assert base != module_key(graph_digest(graph, target))
    monkeypatch.undo()
    monkeypatch.setattr(module_layout, "builder_version", lambda: "another builder")
    assert base != module_key(graph_digest(graph, target))


def test_graph_cache_builder_version_covers_the_lowerings() -> None:
    version = module_layout.builder_version()
    assert version.startswith(f"{module_layout.BUILDER_VERSION}:") and len(version.split(":")[1]) == 64


def test_sources_digest_is_recorded_by_the_files_stamps_and_follows_an_edit(tmp_path, monkeypatch) -> None:
    root = tmp_path / "src"
    (root / "lower").mkdir(parents=True)
    (root / "a.py").write_text("A = 1\n")
    (root / "lower" / "b.py").write_text("B = 2\n")
    patterns = ("*.py", "lower/*.py")
    first = module_layout.sources_digest(root, patterns)
    monkeypatch.setenv("BRAZE_CACHE", "0")
    assert module_layout.sources_digest(root, patterns) == first  # what the files hash to, recorded or not
    monkeypatch.delenv("BRAZE_CACHE")
    reads = []
    real = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: (reads.append(self.name), real(self))[1])
    assert module_layout.sources_digest(root, patterns) == first and reads == []  # read back, no file read
    (root / "lower" / "b.py").write_text("B = 3\n")
    assert module_layout.sources_digest(root, patterns) != first and sorted(reads) == ["a.py", "b.py"]


def test_graph_cache_identical_layers_share_one_kernel() -> None:
    built = build_module(planned_stack(4, batch=5))
    gemms = [k for k in built.kernels if k.op == "fused:gemm"]
    assert len(gemms) == 5 and len({k.name for k in gemms}) == 2  # four 24x24 layers, then the 24x3 head
    assert len({p.key for p in built.prepared}) == len(built.prepared)  # each layer's weight has its own buffer


def test_graph_cache_reuse_on_and_off_give_bit_identical_outputs() -> None:
    graph = planned_stack(4, batch=5)
    x = np.random.default_rng(2).standard_normal((5, 24)).astype(np.float32)
    shared = Executable.build(graph, use_cache=False)(x)
    separate = build_module(graph, reuse=False)
    alone = Executable(separate, compile_built(separate, use_cache=False))(x)
    assert separate.distinct_kernels > Executable.build(graph, use_cache=False).built.distinct_kernels
    assert shared.tobytes() == alone.tobytes()
    np.testing.assert_allclose(shared, braze.ir.interpret(graph, [x])[0], rtol=1e-5, atol=1e-5)


def test_graph_cache_cold_compile_stores_the_layout_beside_the_object(cache_root) -> None:
    graph = planned_stack(3, batch=7)
    built, library = compile_module(graph)
    assert built.module is not None and not library.from_cache
    key = module_key(graph_digest(graph, built.target))
    entry = cache.decode_entry(key, cache.entry_path(key).read_bytes())
    assert entry is not None and entry.meta["entry"] == built.entry in entry.symbols
    assert set(entry.symbols) == {built.entry, built.prepare, *(s for p in built.parts for s in p.symbols)}
    unbuilt = replace(built, module=None, parts=tuple(replace(p, module=None) for p in built.parts))
    assert module_layout.built_from_meta(graph, built.target, entry.meta) == unbuilt


def test_graph_cache_entry_with_a_damaged_layout_is_rebuilt_not_linked(cache_root) -> None:
    donor_graph = planned_stack(1, batch=9)
    compile_module(donor_graph)
    donor = cache.load(module_key(graph_digest(donor_graph, host_target())))
    graph = planned_stack(2, batch=9)
    key = module_key(graph_digest(graph, host_target()))
    cache_root.mkdir(exist_ok=True)
    cache.entry_path(key).write_bytes(cache.encode_entry(key, donor.payload, donor.symbols, {"entry": 7}))
    cache.reset_stats()
    built, library = compile_module(graph)
    assert cache.stats().rebuilds == 1 and not library.from_cache and built.module is not None
    assert cache.load(key).meta["entry"] == built.entry


def test_graph_cache_disabled_builds_every_time(monkeypatch) -> None:
    monkeypatch.setenv("BRAZE_CACHE", "0")
    built, library = compile_module(planned_stack(2, batch=11))
    assert built.module is not None and cache.stats().as_dict() == cache.CacheStats().as_dict()


WARM_SCRIPT = """
import json, sys
import numpy as np
import braze
from braze.codegen import cache
braze.manual_seed(0)
body = [m for _ in range(3) for m in (braze.nn.Linear(24, 24), braze.nn.ReLU())]
model = braze.nn.Sequential(*body, braze.nn.Linear(24, 3)).eval()
x = np.random.default_rng(3).standard_normal((4, 24)).astype(np.float32)
compiled = braze.compile(model, x)
y = compiled(x)
llvmlite_loaded = "llvmlite" in sys.modules
print(json.dumps({"stats": cache.stats().as_dict(), "hit": compiled.timings.cache_hit,
                  "llvmlite": llvmlite_loaded, "shared": compiled.executable.library.shared,
                  "module_built": compiled.executable.built.module is not None,
                  "lowerings_imported": "braze.codegen.module_builder" in sys.modules,
                  "stages": list(compiled.timings.stages), "y": y.tobytes().hex(),
                  "llvm": compiled.executable.built.entry in compiled.llvm_ir()}))  # last: it builds the IR
"""


def _compile_in_processes(cache_root: Path, count: int) -> list[dict]:
    """Run WARM_SCRIPT in `count` processes started together, sharing one cache directory."""
    env = dict(os.environ, BRAZE_CACHE_DIR=str(cache_root), PYTHONPATH=str(ROOT))
    running = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(WARM_SCRIPT)], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(count)]
    reports = []
    for process in running:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


def test_graph_cache_warm_compile_in_a_new_process_builds_no_llvm_module(cache_root) -> None:
    first, second = _compile_in_processes(cache_root, 2)  # compiling into one directory at once
    (warm,) = _compile_in_processes(cache_root, 1)
    assert not first["hit"] or not second["hit"]
    cold = first if not first["hit"] else second
    assert cold["module_built"] and "build IR" in cold["stages"]
    assert warm["hit"] and not warm["module_built"] and not warm["lowerings_imported"]
    # with a linker the warm process opens the shared object linked by the cold one, and never loads llvmlite;
    # without one it links the objects with MCJIT
    linked = shared_object.linker() is not None
    assert "build IR" not in warm["stages"] and ("open shared object" if linked else "link") in warm["stages"]
    assert warm["shared"] == linked and warm["llvmlite"] != linked and not cold["shared"]
    assert "cached passes" in warm["stages"] and not any(s.startswith("pass ") for s in warm["stages"])
    # three hits: the optimized graph (runtime/pass_cache.py), its code and the runtime's call stub (compiled
    # once per process)
    assert (warm["stats"]["hits"], warm["stats"]["misses"], warm["stats"]["rebuilds"]) == (3, 0, 0)
    assert warm["y"] == first["y"] == second["y"]  # bit-identical outputs
    assert warm["llvm"] and cold["llvm"]  # a warm library still shows its IR (built on demand)
    assert [p.name for p in cache_root.iterdir() if p.suffix != cache.SUFFIX] == []  # no temporary left behind


def test_graph_cache_entry_of_another_cpu_under_this_cpus_key_is_rebuilt_not_linked(cache_root) -> None:
    graph = planned_stack(2, batch=5)
    foreign_target = host_target(cpu="x86-64")
    compile_module(graph, target=foreign_target)
    foreign = cache.load(module_key(graph_digest(graph, foreign_target)))
    key = module_key(graph_digest(graph, host_target()))
    cache.entry_path(key).write_bytes(cache.encode_entry(key, foreign.payload, foreign.symbols, foreign.meta))
    cache.reset_stats()
    built, library = compile_module(graph)  # the entry's symbols name the other target's module: refused
    assert cache.stats().rebuilds == 1 and not library.from_cache and built.module is not None
    x = np.random.default_rng(2).standard_normal((5, 24)).astype(np.float32)
    np.testing.assert_allclose(Executable(built, library, threads=1)(x), braze.ir.interpret(graph, [x])[0],
                               rtol=1e-5, atol=1e-5)


def test_graph_cache_a_new_graph_compiles_only_its_new_kernels(cache_root) -> None:
    deep, shallow = planned_stack(4, batch=5), planned_stack(2, batch=5)  # the same layer shapes, other graphs
    built_deep, _ = compile_module(deep)
    cache.reset_stats()
    built, library = compile_module(shallow)
    shared = {p.key for p in built_deep.parts} & {p.key for p in built.parts}
    assert shared and all(p.module is None for p in built.parts if p.key in shared)  # declared, not lowered
    assert cache.stats().hits == len(shared) and not library.from_cache
    x = np.random.default_rng(4).standard_normal((5, 24)).astype(np.float32)
    fresh = Executable(build := build_module(shallow), compile_built(build, use_cache=False))(x)
    assert Executable(built, library)(x).tobytes() == fresh.tobytes()


def test_graph_cache_a_damaged_kernel_entry_is_rebuilt_not_linked(cache_root) -> None:
    graph = planned_stack(2, batch=3)
    built = compile_module(graph)[0]
    gc.collect()  # the library is gone: the next compile looks in the cache
    part = built.parts[0]
    donor = cache.load(built.parts[1].key)  # a valid object that exports another kernel
    cache.entry_path(module_key(graph_digest(graph, host_target()))).unlink()
    cache.entry_path(part.key).write_bytes(cache.encode_entry(part.key, donor.payload, donor.symbols, donor.meta))
    cache.reset_stats()
    rebuilt, library = compile_module(graph)
    assert cache.stats().rebuilds == 1
    assert set(cache.load(part.key).symbols) == set(part.symbols)  # built again (here or in a worker) and stored
    x = np.random.default_rng(5).standard_normal((3, 24)).astype(np.float32)
    np.testing.assert_allclose(Executable(rebuilt, library)(x), braze.ir.interpret(graph, [x])[0],
                               rtol=1e-5, atol=1e-5)


def stored_entry(graph: braze.ir.Graph) -> tuple[str, cache.CacheEntry]:
    """The key and whole-graph cache entry of a graph compiled now (its library dropped again)."""
    compile_module(graph)
    gc.collect()
    key = module_key(graph_digest(graph, host_target()))
    return key, cache.load(key)


def test_graph_cache_entry_whose_object_index_lies_is_rebuilt_not_linked(cache_root) -> None:
    graph = planned_stack(2, batch=4)
    key, entry = stored_entry(graph)
    sizes = [size for _, size in entry.meta["objects"]]
    for index in ([[syms, size + 1] for syms, size in entry.meta["objects"]],  # sizes past the payload
                  [[syms, 0] for syms, _ in entry.meta["objects"]],           # empty objects
                  [[entry.meta["objects"][0][0], sum(sizes)]],                # one object where there are several
                  "objects"):
        cache.entry_path(key).write_bytes(cache.encode_entry(key, entry.payload, entry.symbols,
                                                             {**entry.meta, "objects": index}))
        cache.reset_stats()
        built, library = compile_module(graph)
        assert cache.stats().rebuilds == 1 and not library.from_cache and built.module is not None
        del built, library
        gc.collect()


def test_graph_cache_objects_that_call_an_undefined_kernel_are_refused(cache_root) -> None:
    from braze.codegen.jit import link_objects
    from braze.ir.errors import CodegenError
    graph = planned_stack(1, batch=4)
    built, library = compile_module(graph)
    entry = cache.load(module_key(graph_digest(graph, host_target())))
    objects = unpack_objects(shared_object.detach(entry.payload, entry.meta)[0], entry.meta["objects"])
    with pytest.raises(CodegenError, match="which nothing defines"):  # the entry object without its kernels
        link_objects("partial", "partial-key", host_target(), objects[-1:], [], from_cache=True)


def test_graph_cache_compiles_runtime_modules_beside_the_kernels_for_compile_described_to_link() -> None:
    from braze.codegen.described import Described, compile_described, described_key, wanted
    from tests.codegen.test_jit import add_module, run_add, unique_name
    name = unique_name()
    built: list[str] = []

    def build():
        built.append(name)
        return add_module(name)
    module = Described(f"test beside {name}", build, (name,))
    target = host_target()
    assert wanted([module], target) == [(described_key(module.description, target), module)]
    x = np.ones((2, 29), np.float32)  # a width no other test compiles: the graph is not linked in this process yet
    graph = planned_graph(braze.trace(stack(3, width=29), braze.tensor(x)))
    compile_module(graph, beside=lambda: [module])  # its kernels are compiled as tasks, and the module with them
    assert built == [name] and wanted([module], target) == []  # compiled once, beside the kernels
    library = compile_described(module.description, build, module.exports)
    assert built == [name] and not library.from_cache  # linked from the object compiled beside, not built again
    run_add(library, name)
    assert name in library.llvm_ir()
