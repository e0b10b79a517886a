"""Host cache sizes from sysfs, and the GEMM cache blocks derived from them."""
from __future__ import annotations

from pathlib import Path

from braze.codegen import host_target
from braze.codegen.cache_sizes import CacheSizes, read_cache_sizes
from braze.codegen.gemm_kernel import STREAMED_KC, cache_blocks, tiling_for
from tests.codegen.test_gemm import check


def _cache(root: Path, index: int, level: int, kind: str, size: str, shared: str = "0", ways: str = "") -> None:
    entry = root / f"index{index}"
    entry.mkdir(parents=True)
    for name, text in (("level", str(level)), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
        (entry / name).write_text(text + "\n")
    if ways:
        (entry / "ways_of_associativity").write_text(ways + "\n")


def test_cache_sizes_read_from_sysfs(tmp_path) -> None:
    _cache(tmp_path, 0, 1, "Data", "48K", ways="12")
    _cache(tmp_path, 1, 1, "Instruction", "32K", ways="8")
    _cache(tmp_path, 2, 2, "Unified", "1280K", ways="10")
    _cache(tmp_path, 3, 3, "Unified", "30M", "0-5,12-17")
    assert read_cache_sizes(tmp_path) == CacheSizes(48 * 1024, 1280 * 1024, 30 * 1024 * 1024 // 12, 12)


def test_cache_sizes_default_where_sysfs_is_missing_or_garbled(tmp_path) -> None:
    assert read_cache_sizes(tmp_path / "absent") == CacheSizes()
    _cache(tmp_path, 0, 1, "Data", "lots", ways="many")
    _cache(tmp_path, 2, 2, "Unified", "2M")
    assert read_cache_sizes(tmp_path) == CacheSizes(l2=2 * 1024 * 1024)


def test_cache_blocks_of_a_zen3_core() -> None:
    assert cache_blocks(6, 16, CacheSizes(32 * 1024, 512 * 1024, 16 * 1024 * 1024)) == (256, 126, 1024)


def test_cache_blocks_of_a_zen4_core() -> None:
    """Zen 4 runs 512-bit FMAs in halves: the AVX-512 tile streams its micro-panels from L2 and its B block from L3
    (A's outer), with K blocks of up to STREAMED_KC steps."""
    zen4 = CacheSizes(32 * 1024, 1024 * 1024, 16 * 1024 * 1024)
    assert cache_blocks(12, 32, zen4, half_width=True) == (STREAMED_KC, 60, 1024)
    assert cache_blocks(6, 16, zen4, half_width=True) == (256, 252, 1024)
    assert tiling_for(16, zen4, cpu="znver4").kc == STREAMED_KC


def test_cache_blocks_of_a_full_width_avx512_core() -> None:
    """Two 512-bit FMA ports (a Xeon with 48 KB L1 and 2 MB L2): K blocks of up to STREAMED_KC steps, the B block
    that each A micro-panel meets in turn in half of L2."""
    xeon = CacheSizes(48 * 1024, 2 * 1024 * 1024, 5 * 1024 * 1024)
    assert cache_blocks(12, 32, xeon) == (STREAMED_KC, 120, 256)
    assert 4 * STREAMED_KC * 256 == xeon.l2 // 2
    assert tiling_for(16, xeon, cpu="sapphirerapids").kc == STREAMED_KC
    assert cache_blocks(6, 16, xeon) == cache_blocks(6, 16, xeon, half_width=True)  # the AVX2 tile: B's panel in L1


def test_a_is_read_in_place_where_the_l1_holds_a_micro_panels_aliasing_rows() -> None:
    """Only in the A-outer order (the AVX-512 tile at these L1 sizes), and only where a set of the L1 has a way for
    each of the tile's rows: a 12-way L1 for the 12-row tile, not Zen 4's 8-way one."""
    xeon = CacheSizes(48 * 1024, 2 * 1024 * 1024, 5 * 1024 * 1024, l1d_ways=12)
    zen4 = CacheSizes(32 * 1024, 1024 * 1024, 16 * 1024 * 1024, l1d_ways=8)
    assert tiling_for(16, xeon, cpu="sapphirerapids").a_in_place
    assert not tiling_for(16, zen4, cpu="znver4").a_in_place
    assert not tiling_for(8, xeon, cpu="haswell").a_in_place  # B's outer: A's block is reread for every B panel


def test_b_is_hinted_into_l1_only_in_the_a_outer_order_of_a_full_width_core() -> None:
    xeon = CacheSizes(48 * 1024, 2 * 1024 * 1024, 5 * 1024 * 1024, l1d_ways=12)
    assert tiling_for(16, xeon, cpu="sapphirerapids").prefetch_b
    assert not tiling_for(16, xeon, cpu="znver4").prefetch_b
    assert not tiling_for(8, xeon, cpu="haswell").prefetch_b


def test_cache_blocks_fit_their_caches_and_tiles() -> None:
    for caches in (CacheSizes(), CacheSizes(48 * 1024, 1280 * 1024, 2 * 1024 * 1024), CacheSizes(8192, 16384, 65536)):
        for width in (4, 8, 16):
            for cpu in ("skylake-avx512", "znver4"):
                t = tiling_for(width, caches, cpu=cpu)
                assert t.kc % 32 == 0 and t.mc % t.mr == 0 and t.nc % t.nr == 0
                if t.rows_outer:  # an A micro-panel and a B panel in half of L2
                    assert 4 * t.kc * (t.mr + t.nr) <= caches.l2 // 2 or t.kc == 64
                    assert t.kc <= STREAMED_KC
                else:  # a 16-column B panel in half of L1
                    assert 4 * t.kc * 16 <= caches.l1d // 2 or t.kc == 64
                if t.rows_outer and cpu != "znver4":  # the B block each A micro-panel meets in half of L2
                    assert 4 * t.kc * t.nc <= caches.l2 // 2 or t.nc == 256 // t.nr * t.nr
                assert 4 * t.mc * t.kc <= caches.l2 // 4 or t.mc == t.mr


def test_gemm_with_small_cache_blocks_matches_numpy() -> None:
    """Tiny caches give tiny blocks: every loop of the blocked nest runs several times, with edge blocks."""
    tiling = tiling_for(host_target().vector_width, CacheSizes(8192, 16384, 65536))
    assert (tiling.kc, tiling.mc, tiling.nc) == (64, 12, tiling.nr * (256 // tiling.nr))
    check(37, 300, 150, tiling=tiling, nthreads=2)
    check(37, 300, 150, tiling=tiling, trans_b=True)
