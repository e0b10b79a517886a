"""The disk cache of objects: hits across processes, corrupt entries rebuilt, environment switches."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import llvmlite
import llvmlite.ir as ir
import braze
import pytest

from braze.codegen import cache, compile_ir, host_target
from braze.ir.errors import CodegenError
from tests.codegen.test_jit import add_module, run_add, unique_name

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def cache_root(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(root))
    monkeypatch.delenv("BRAZE_CACHE", raising=False)
    monkeypatch.delenv("BRAZE_CPU", raising=False)
    cache.reset_stats()
    return root


def entries(root: Path) -> list[Path]:
    return sorted(root.glob(f"*{cache.SUFFIX}")) if root.exists() else []


def test_cache_key_depends_on_ir_and_target():
    target = host_target()
    base = cache.make_key("ir", target.identity)
    assert base == cache.make_key("ir", target.identity)
    assert base != cache.make_key("ir2", target.identity)
    assert base != cache.make_key("ir", target.identity.replace(target.cpu, "x86-64"))
    assert llvmlite.__version__ in target.identity


def test_cache_first_compile_is_a_miss_and_stores(cache_root):
    compile_ir(add_module(unique_name()))
    assert (cache.stats().misses, cache.stats().stores, cache.stats().hits) == (1, 1, 0)
    assert len(entries(cache_root)) == 1


def test_cache_hit_in_new_process(cache_root, tmp_path):
    name = unique_name()
    module = add_module(name)
    compile_ir(module)
    ir_path = tmp_path / "module.ll"
    ir_path.write_text(str(module))
    script = textwrap.dedent(f"""
        import ctypes, json, numpy as np
        from braze.codegen import cache, compile_ir
        lib = compile_ir(open({str(ir_path)!r}).read())
        x = np.arange(21, dtype=np.float32); out = np.zeros_like(x)
        args = (ctypes.c_void_p,) * 3 + (ctypes.c_int64,)
        lib.cfunc({name!r}, None, *args)(x.ctypes.data, x.ctypes.data, out.ctypes.data, 21)
        print(json.dumps(dict(cache.stats().as_dict(), from_cache=lib.from_cache,
                              correct=bool((out == 2 * x).all()), inspect={name!r} in lib.llvm_ir())))
    """)
    env = dict(os.environ, BRAZE_CACHE_DIR=str(cache_root), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["hits"] == 1 and report["misses"] == 0 and report["from_cache"]
    assert report["correct"] and report["inspect"]


def _valid_entry_bytes(cache_root: Path) -> tuple[bytes, tuple[str, ...]]:
    """The payload and symbols of a freshly compiled, valid entry."""
    compile_ir(add_module(unique_name()))
    (path,) = entries(cache_root)
    data = path.read_bytes()
    path.unlink()
    entry = cache.decode_entry(path.stem, data)
    assert entry is not None
    return entry.payload, entry.symbols


CORRUPTIONS = {
    "truncated": lambda key, data: data[: len(data) // 2],
    "flipped": lambda key, data: data[:-40] + bytes([data[-40] ^ 0x5A]) + data[-39:],
    "foreign": lambda key, data: data.replace(key.encode(), ("0" * 64).encode()),
    "garbage": lambda key, data: b"\x7fELF" + bytes(range(256)) * 4,
}


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_cache_corrupt_entry_is_rebuilt(cache_root, kind):
    payload, symbols = _valid_entry_bytes(cache_root)
    name = unique_name()
    module = add_module(name)
    key = cache.make_key(str(module), host_target().identity)
    # a well-formed entry for this key that holds another module's code, then damaged
    good = cache.encode_entry(key, payload, symbols)
    cache.entry_path(key).write_bytes(CORRUPTIONS[kind](key, good))
    cache.reset_stats()
    library = compile_ir(module)
    assert (cache.stats().rebuilds, cache.stats().hits, cache.stats().stores) == (1, 0, 1)
    assert not library.from_cache
    run_add(library, name)
    assert cache.decode_entry(key, cache.entry_path(key).read_bytes()).symbols == (name,)


def test_cache_disabled_by_env(cache_root, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE", "0")
    name = unique_name()
    run_add(compile_ir(add_module(name)), name)
    assert entries(cache_root) == []
    assert cache.stats().as_dict() == cache.CacheStats().as_dict()


def test_cache_dir_env_moves_entries(tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(elsewhere))
    compile_ir(add_module(unique_name()))
    assert cache.cache_dir() == elsewhere
    assert len(entries(elsewhere)) == 1


def test_cache_default_dir_under_user_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("BRAZE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "braze"


def test_cache_unwritable_dir_still_compiles(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(blocker))
    name = unique_name()
    run_add(compile_ir(add_module(name)), name)
    assert cache.stats().write_errors == 1 and cache.stats().rebuilds == 0


# --- size cap, least recently used eviction, info and clear -------------------------------------------------

def stored(key: str, nbytes: int, age_s: float) -> Path:
    """An entry of `nbytes` payload bytes last used `age_s` seconds ago."""
    assert cache.store(key, b"x" * nbytes, ("f",))
    path = cache.entry_path(key)
    when = path.stat().st_mtime - age_s
    os.utime(path, (when, when))
    return path


def test_cache_store_past_the_cap_evicts_the_least_recently_used_entries(cache_root, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_MAX_MB", str(7000 / 2 ** 20))  # room for two entries of 3000 bytes
    old, used, recent = stored("a" * 64, 3000, 300), stored("b" * 64, 3000, 200), stored("c" * 64, 3000, 100)
    assert cache.load("b" * 64) is not None  # a hit makes b the most recently used
    cache.store("d" * 64, b"y" * 3000, ("f",))
    assert not old.exists() and not recent.exists() and used.exists() and cache.entry_path("d" * 64).exists()
    assert cache.stats().evictions == 2 and cache.info().bytes <= 7000


def test_cache_store_keeps_the_new_entry_even_when_it_alone_is_over_the_cap(cache_root, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_MAX_MB", str(1000 / 2 ** 20))
    old = stored("a" * 64, 100, 100)
    cache.store("b" * 64, b"y" * 5000, ("f",))
    assert not old.exists() and cache.load("b" * 64).payload == b"y" * 5000


@pytest.mark.parametrize("raw", ["0", "-5", "lots", "nan", "inf"])
def test_cache_max_mb_that_is_not_a_positive_number_is_an_error_naming_it(raw, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_MAX_MB", raw)
    with pytest.raises(braze.BrazeError, match=f"BRAZE_CACHE_MAX_MB must be a positive number of megabytes, got "
                                               f"'{raw}'"):
        cache.max_bytes()


def test_cache_info_and_clear_count_the_entries(cache_root, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_MAX_MB", "2.5")
    stored("a" * 64, 100, 0), stored("b" * 64, 200, 0)
    info = cache.info()
    assert (info.path, info.entries, info.max_bytes, info.enabled) == (cache_root, 2, int(2.5 * 2 ** 20), True)
    assert info.bytes == sum(p.stat().st_size for p in entries(cache_root)) and "2.5 MB" in str(info)
    assert cache.clear() == 2 and entries(cache_root) == [] and cache.info().entries == 0


def test_cache_described_module_is_found_without_building_its_ir(cache_root) -> None:
    from braze.codegen import shared_object
    from braze.codegen.described import compile_described
    from braze.codegen.library import _libraries
    name = unique_name()
    built: list[str] = []

    def build() -> ir.Module:
        built.append(name)
        return add_module(name)
    description = f"test add {name}"
    run_add(compile_described(description, build, (name,)), name)
    _libraries.clear()
    library = compile_described(description, build, (name,))
    assert built == [name] and library.from_cache  # the second process-wide lookup built nothing
    assert library.shared == (shared_object.linker() is not None)  # opened from its shared object where linked
    run_add(library, name)
    assert name in library.llvm_ir()  # inspection builds the IR on demand
    _libraries.clear()
    with pytest.raises(CodegenError, match="exports"):  # an entry exporting other names is discarded, then rebuilt
        compile_described(description, build, ("another_name",))
    assert cache.stats().rebuilds == 1
