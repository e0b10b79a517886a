"""Test-wide settings: compiled objects go to a per-run cache directory, never the user's real cache; calls keep
their configured thread count whatever else the machine runs (the thread cap from other processes' load,
runtime/cpu_load.py, is tested on its own), so that tests of the pool see the calls they make."""
from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_object_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Point BRAZE_CACHE_DIR at a temporary directory for the whole run (tests may override it per test)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("BRAZE_CACHE_DIR", str(tmp_path_factory.mktemp("braze-cache")))
    mp.setenv("BRAZE_ADAPT_THREADS", "0")
    yield
    mp.undo()
