"""The disk cache against entries that are intact but wrong, files that are not entries, and directories that are
not the user's: each is rebuilt or refused, never linked, blocking, or read without bound."""
from __future__ import annotations

import os
import stat
import time

import pytest

from braze.codegen import cache, compile_ir, host_target
from tests.codegen.test_cache import cache_root, entries  # noqa: F401  (the autouse fixture)
from tests.codegen.test_jit import add_module, run_add, unique_name
from tests.frontend.limited_run import run_limited


def other_entry(cache_root) -> tuple[bytes, tuple[str, ...]]:
    """The payload and symbols of another module's valid entry (which is then removed)."""
    module = add_module(unique_name())
    compile_ir(module, use_cache=True)
    path = cache.entry_path(key_of(module))  # the cache may hold other entries (the code generator's digest)
    entry = cache.decode_entry(path.stem, path.read_bytes())
    path.unlink()
    cache.reset_stats()
    return entry.payload, entry.symbols


def key_of(module) -> str:
    return cache.make_key(str(module), host_target().identity)


def assert_rebuilt(module, name: str) -> None:
    library = compile_ir(module)
    assert not library.from_cache and cache.stats().rebuilds == 1
    run_add(library, name)
    assert cache.decode_entry(key_of(module), cache.entry_path(key_of(module)).read_bytes()).symbols == (name,)


def test_cache_entry_holding_another_modules_object_is_rebuilt(cache_root):
    payload, symbols = other_entry(cache_root)
    name = unique_name()
    module = add_module(name)
    cache.entry_path(key_of(module)).write_bytes(cache.encode_entry(key_of(module), payload, symbols))
    assert_rebuilt(module, name)


def test_cache_entry_whose_object_lacks_its_symbols_is_rebuilt(cache_root):
    payload, _ = other_entry(cache_root)
    name = unique_name()
    module = add_module(name)
    cache.entry_path(key_of(module)).write_bytes(cache.encode_entry(key_of(module), payload, (name,)))
    assert_rebuilt(module, name)


def test_cache_planted_entry_does_not_break_the_module_it_came_from(cache_root):
    owner = unique_name()
    owner_module = add_module(owner)
    compile_ir(owner_module, use_cache=True)
    path = cache.entry_path(key_of(owner_module))
    stolen = cache.decode_entry(path.stem, path.read_bytes())
    name = unique_name()
    module = add_module(name)
    cache.entry_path(key_of(module)).write_bytes(cache.encode_entry(key_of(module), stolen.payload, stolen.symbols))
    run_add(compile_ir(module), name)
    run_add(compile_ir(add_module(owner, scale=2.0)), owner, scale=2.0)


def test_cache_entry_that_is_not_an_object_file_is_rebuilt_without_crashing(cache_root):
    report = run_limited(f"""
        import json, os
        os.environ["BRAZE_CACHE_DIR"] = {str(cache_root)!r}
        from braze.codegen import cache, compile_ir, host_target
        from tests.codegen.test_jit import add_module, run_add
        module = add_module("k_deadbeef_add")
        key = cache.make_key(str(module), host_target().identity)
        os.makedirs({str(cache_root)!r}, mode=0o700, exist_ok=True)
        junk = b"\\x7fELF\\x02\\x01" + bytes(range(256)) * 4
        cache.entry_path(key).write_bytes(cache.encode_entry(key, junk, ("k_deadbeef_add",)))
        run_add(compile_ir(module), "k_deadbeef_add")
        print(json.dumps(cache.stats().as_dict()))
    """)
    assert report["rebuilds"] == 1 and report["stores"] == 1


def test_cache_fifo_named_like_an_entry_is_removed_not_read(cache_root):
    report = run_limited(f"""
        import json, os
        os.environ["BRAZE_CACHE_DIR"] = {str(cache_root)!r}
        from braze.codegen import cache, compile_ir, host_target
        from tests.codegen.test_jit import add_module, run_add
        module = add_module("k_0000f1f0_add")
        os.makedirs({str(cache_root)!r}, mode=0o700, exist_ok=True)
        os.mkfifo(cache.entry_path(cache.make_key(str(module), host_target().identity)))
        run_add(compile_ir(module), "k_0000f1f0_add")
        print(json.dumps(cache.stats().as_dict()))
    """, timeout=60)
    assert report["rebuilds"] == 1 and report["stores"] == 1


def test_cache_symlink_out_of_the_directory_is_removed_not_followed(cache_root):
    name = unique_name()
    module = add_module(name)
    cache_root.mkdir(mode=0o700)
    cache.entry_path(key_of(module)).symlink_to("/dev/zero")
    assert_rebuilt(module, name)
    assert not cache.entry_path(key_of(module)).is_symlink()


def test_cache_entry_over_the_size_limit_is_rebuilt_unread(cache_root):
    name = unique_name()
    module = add_module(name)
    cache_root.mkdir(mode=0o700)
    with open(cache.entry_path(key_of(module)), "wb") as f:
        f.truncate(cache.MAX_ENTRY_BYTES + 1)  # sparse: no disk used
    assert_rebuilt(module, name)


def test_cache_directory_is_created_private(cache_root):
    compile_ir(add_module(unique_name()))
    assert stat.S_IMODE(cache_root.stat().st_mode) == 0o700


def test_cache_directory_of_another_user_is_refused_with_a_warning(cache_root):
    cache_root.mkdir(mode=0o700)
    try:
        os.chown(cache_root, 65534, 65534)
    except PermissionError:
        pytest.skip("needs a directory owned by another user (run as root)")
    name = unique_name()
    with pytest.warns(cache.UntrustedCacheWarning, match="owned by uid 65534"):
        run_add(compile_ir(add_module(name)), name)
    assert entries(cache_root) == [] and cache.stats().untrusted == 2 and cache.stats().stores == 0


def test_cache_directory_others_may_write_is_refused(cache_root):
    cache_root.mkdir(mode=0o700)
    os.chmod(cache_root, 0o777)
    name = unique_name()
    with pytest.warns(cache.UntrustedCacheWarning, match="others may write to it"):
        run_add(compile_ir(add_module(name)), name)
    assert entries(cache_root) == []


def test_cache_store_removes_temporary_files_of_killed_stores(cache_root):
    cache_root.mkdir(mode=0o700)
    old = cache_root / f".0123456789abcdef.x1{cache.TEMP_SUFFIX}"
    fresh = cache_root / f".fedcba9876543210.y2{cache.TEMP_SUFFIX}"
    for path in (old, fresh):
        path.write_bytes(b"half an entry")
    then = time.time() - 2 * cache.STALE_TEMP_SECONDS
    os.utime(old, (then, then))
    compile_ir(add_module(unique_name()))
    assert not old.exists() and fresh.exists() and len(entries(cache_root)) == 1
