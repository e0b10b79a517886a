"""The compilation target: host detection, the BRAZE_CPU override and the vector width."""
from __future__ import annotations

import llvmlite
import llvmlite.binding as llvm
import pytest

from braze.codegen import cache, compile_ir, host, host_target, init_llvm
from braze.ir.errors import CodegenError
from tests.codegen.test_jit import add_module, run_add, unique_name


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("BRAZE_CPU", raising=False)


def test_target_init_initializes_llvm_once(monkeypatch):
    from braze.codegen import llvm_object
    calls = []
    for name in ("initialize_native_target", "initialize_native_asmprinter"):
        real = getattr(llvm, name)
        monkeypatch.setattr(llvm, name, lambda real=real, name=name: (calls.append(name), real())[1])
    monkeypatch.setattr(llvm_object, "_initialized", False)
    init_llvm()
    init_llvm()
    assert calls == ["initialize_native_target", "initialize_native_asmprinter"]
    name = unique_name()
    run_add(compile_ir(add_module(name), use_cache=False), name)  # LLVM still generates working code


def test_target_host_matches_llvm():
    target = host_target()
    assert target.triple == llvm.get_process_triple()
    assert target.cpu == llvm.get_host_cpu_name()
    assert llvm.get_host_cpu_features().flatten() in target.features


def test_target_vector_width_follows_features():
    features = llvm.get_host_cpu_features().flatten().split(",")
    expected = 16 if "+avx512f" in features else 8 if "+avx2" in features else 4
    assert host_target().vector_width == expected


@pytest.mark.skipif(not host_target().is_x86, reason="x86 CPU names")
def test_target_native_masks_only_with_avx512_also_for_a_named_cpu():
    """Masked stores are cheap with AVX-512's mask registers, however the CPU was chosen; AVX2's are not."""
    assert [host_target(cpu=c).native_masks for c in ("znver4", "skylake-avx512", "znver3", "haswell")] == \
        [True, True, False, False]


def test_target_identity_names_cpu_features_and_llvmlite():
    target = host_target()
    for part in (target.cpu, target.features, llvmlite.__version__):
        assert part in target.identity


def test_target_env_override_changes_cpu_and_key(monkeypatch):
    host = host_target()
    monkeypatch.setenv("BRAZE_CPU", "x86-64")
    generic = host_target()
    assert generic.cpu == "x86-64"
    assert "+avx" not in generic.features
    assert cache.make_key("same ir", generic.identity) != cache.make_key("same ir", host.identity)


def test_target_option_overrides_env(monkeypatch):
    monkeypatch.setenv("BRAZE_CPU", "x86-64")
    assert host_target(cpu="nehalem").cpu == "nehalem"


@pytest.mark.skipif(not llvm.get_process_triple().startswith("x86_64"), reason="x86-64 CPU names")
def test_target_generic_cpu_code_runs_here(monkeypatch):
    monkeypatch.setenv("BRAZE_CPU", "x86-64")
    target = host_target()
    assert target.vector_width == 4
    name = unique_name()
    library = compile_ir(add_module(name, target))
    assert library.target.cpu == "x86-64"
    assert "zmm" not in library.asm() and "ymm" not in library.asm()
    run_add(library, name, n=33)


@pytest.mark.skipif(not host_target().is_x86 or host_target().vector_width < 8, reason="x86 AVX2 CPU names")
def test_target_env_cpu_leaves_out_what_this_host_lacks(monkeypatch):
    """BRAZE_CPU's code runs in this process, so the instructions the host lacks are taken out of it (a Zen 3's SSE4a
    on an Intel host); a CPU named with cpu= (code to read, not run) keeps all of its own."""
    monkeypatch.setattr(host, "_known", {})
    monkeypatch.setenv("BRAZE_CPU", "znver3")
    forced = host_target()
    lacking = [name for name, present in llvm.get_host_cpu_features().items() if not present]
    assert forced.cpu == "znver3" and forced.vector_width == 8
    assert all(f"-{name}" in forced.features.split(",") for name in lacking)
    assert host_target(cpu="znver3").features == "-prefer-256-bit"
    name = unique_name()
    run_add(compile_ir(add_module(name, forced)), name, n=37)


@pytest.mark.skipif(not host_target().is_x86, reason="x86 CPU names")
def test_target_env_cpu_whose_vectors_this_host_cannot_run_is_refused(monkeypatch):
    """Named an AVX-512 CPU on a host without AVX-512 (faked here), BRAZE_CPU is refused with the reason, not given
    narrower code than it names."""
    real = llvm.get_host_cpu_features()
    without = {name: present and not name.startswith("avx512") for name, present in real.items()}
    monkeypatch.setattr(llvm, "get_host_cpu_features", lambda: without)
    monkeypatch.setattr(host, "_known", {})
    monkeypatch.setenv("BRAZE_CPU", "skylake-avx512")
    with pytest.raises(CodegenError, match=r"BRAZE_CPU=skylake-avx512 asks for code with 16 float32 lanes.*avx512f"):
        host_target()


@pytest.mark.parametrize("how", ["env", "argument"])
def test_target_unknown_cpu_name_is_refused_not_fatal(monkeypatch, how):
    """LLVM only warns of a CPU name it does not know, and on x86-64 then aborts the process when it generates code:
    the name is refused with a CodegenError first, and the process goes on."""
    monkeypatch.setattr(host, "_known", {})
    if how == "env":
        monkeypatch.setenv("BRAZE_CPU", "no-such-cpu")
    with pytest.raises(CodegenError, match="'no-such-cpu' is not a CPU LLVM knows"):
        host_target() if how == "env" else host_target(cpu="no-such-cpu")
    name = unique_name()
    monkeypatch.delenv("BRAZE_CPU", raising=False)
    run_add(compile_ir(add_module(name)), name)


def test_target_new_module_carries_triple_and_layout():
    module = host_target().new_module("m")
    assert module.triple == llvm.get_process_triple()
    assert module.data_layout


@pytest.mark.skipif(not llvm.get_process_triple().startswith("x86_64"), reason="x86-64 CPU names")
def test_target_module_remembers_its_target():
    name = unique_name()
    library = compile_ir(add_module(name, host_target(cpu="x86-64")))
    assert library.target.cpu == "x86-64"
    run_add(library, name)
