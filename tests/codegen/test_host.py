"""The host's target from its record in the disk cache: the target LLVM gives, found without asking LLVM again,
and a malformed record asked again."""
from __future__ import annotations

import pytest

from braze.codegen import cache, host
from braze.codegen.target import llvm_target
from tests.codegen.test_cache import cache_root  # noqa: F401  (the isolated cache directory, autouse)

pytestmark = pytest.mark.skipif(host._record_key("") is None, reason="no /proc/cpuinfo or llvmlite library file")


def _asked(calls: list[str]):
    def ask(requested: str):
        calls.append(requested)
        return llvm_target(requested)
    return ask


def test_host_record_gives_the_target_llvm_gives_without_asking_again(cache_root, monkeypatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(host, "_known", {})
    first = host.recorded_target("", _asked(calls))
    monkeypatch.setattr(host, "_known", {})  # a new process: only the record is left
    second = host.recorded_target("", _asked(calls))
    assert calls == [""] and second == first == llvm_target("")
    assert host.recorded_identity(second) == llvm_target("").identity
    assert cache.stats().as_dict() == cache.CacheStats().as_dict()  # bookkeeping, not compiled code


def test_host_record_that_is_malformed_is_asked_again(cache_root, monkeypatch) -> None:
    calls: list[str] = []
    key = host._record_key("x86-64")
    cache.store(key, b"", (), {"triple": "x86_64-unknown-linux-gnu", "cpu": "x86-64", "vector_width": "4"})
    monkeypatch.setattr(host, "_known", {})
    assert host.recorded_target("x86-64", _asked(calls)) == llvm_target("x86-64") and calls == ["x86-64"]
    assert cache.load(key).meta["vector_width"] == llvm_target("x86-64").vector_width  # recorded again
