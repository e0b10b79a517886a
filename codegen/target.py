"""The compilation target: host triple, CPU name, feature string and float32 vector width.

The host CPU and its features come from llvmlite, so AVX-512 or AVX2 are used where present. `BRAZE_CPU` (or the
`cpu=` argument) names another CPU for reproducible code on a different machine; its features then come from
the CPU name alone (an empty feature string). Target machines are created once per target and kept for the life
of the process: they are never handed to an execution engine (which would take ownership of them).

llvmlite is imported when LLVM is first needed, not with this module: a warm compile finds the host target in the
disk cache (codegen/host.py) and its code as a shared object (codegen/shared_object.py), without loading LLVM.
"""
from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

from braze.ir.errors import CodegenError

if TYPE_CHECKING:
    import llvmlite.binding as llvm
    import llvmlite.ir as ir

CPU_ENV = "BRAZE_CPU"
OPT_LEVEL = 3
# CPUs whose 512-bit vector operations run as two 256-bit halves (Zen 4): a k step of a GEMM's or an attention's
# AVX-512 tile takes them twice the cycles it takes a core with full-width FMA units (two 512-bit FMA ports), for the
# same operand bytes, so their kernels are tuned apart (gemm_kernel.cache_blocks, lower/attention.group_tile).
HALF_WIDTH_CPUS = frozenset({"znver4"})

_lock = threading.RLock()
_probed_widths: dict[tuple[str, str, str], int] = {}
_module_targets: weakref.WeakKeyDictionary[ir.Module, Target] = weakref.WeakKeyDictionary()


def init_llvm() -> None:
    """Initialize LLVM's native target and assembly printer; safe to call more than once."""
    from . import llvm_object
    llvm_object.init()


@dataclass(frozen=True)
class Target:
    """What code is generated for: `vector_width` is the number of float32 lanes in one native vector."""

    triple: str
    cpu: str
    features: str
    vector_width: int

    @property
    def is_x86(self) -> bool:
        return is_x86_triple(self.triple)

    @property
    def native_masks(self) -> bool:
        """Whether a masked vector store is one cheap instruction: AVX-512's mask registers (16 float32 lanes on
        x86, also for a CPU named without its features). AVX2's vmaskmovps store is slow on AMD cores, and other
        targets have none (LLVM stores lane by lane)."""
        return self.is_x86 and self.vector_width >= 16

    @property
    def fma(self) -> bool:
        """Whether fused multiply-adds are instructions here: every x86 CPU with AVX2 or AVX-512 has them (a CPU
        named without its features lists none), elsewhere as the features say."""
        return (self.is_x86 and self.vector_width >= 8) or "+fma" in self.features.split(",")

    @property
    def half_width(self) -> bool:
        """Whether this CPU runs 512-bit vector operations as two 256-bit halves (HALF_WIDTH_CPUS)."""
        return self.cpu in HALF_WIDTH_CPUS

    @property
    def identity(self) -> str:
        """Everything about the target that changes machine code; part of every cache key. Without llvmlite loaded,
        a target read from the host's record gives the identity recorded with it (the same text: codegen/host.py)."""
        if "llvmlite" not in sys.modules:
            from .host import recorded_identity
            recorded = recorded_identity(self)
            if recorded is not None:
                return recorded
        import llvmlite

        from . import llvm_object
        return (f"{self.triple}|{self.cpu}|{self.features}|opt{OPT_LEVEL}|pipeline{llvm_object.PIPELINE_LEVEL}|"
                f"llvmlite {llvmlite.__version__}")

    def machine(self) -> llvm.TargetMachine:
        """The process-wide (non-JIT) target machine for optimization, object and assembly output."""
        from . import llvm_object
        try:
            return llvm_object.machine(self.triple, self.cpu, self.features, OPT_LEVEL)
        except RuntimeError as exc:
            raise CodegenError(f"cannot create a target machine for {self.cpu!r} on {self.triple}: {exc}") from None

    def new_module(self, name: str) -> ir.Module:
        """An empty llvmlite module whose triple and data layout are this target's."""
        import llvmlite.ir as ir
        module = ir.Module(name=name)
        module.triple = self.triple
        module.data_layout = str(self.machine().target_data)
        _module_targets[module] = self
        return module

    def __str__(self) -> str:
        return f"{self.cpu} ({self.triple}, {self.vector_width} x f32)"


def target_of(module: ir.Module) -> Target | None:
    """The target a module was created for by Target.new_module, if any."""
    return _module_targets.get(module)


def _create_machine(triple: str, cpu: str, features: str, *, jit: bool = False) -> llvm.TargetMachine:
    from . import llvm_object
    try:
        return llvm_object.create_machine(triple, cpu, features, OPT_LEVEL, jit=jit)
    except RuntimeError as exc:
        raise CodegenError(f"cannot create a target machine for {cpu!r} on {triple}: {exc}") from None


def create_jit_machine(target: Target) -> llvm.TargetMachine:
    """A fresh target machine for an execution engine, which takes ownership of it (never reuse it)."""
    return _create_machine(target.triple, target.cpu, target.features, jit=True)


def is_x86_triple(triple: str) -> bool:
    """Whether an LLVM target triple names an x86 CPU (32 or 64 bits)."""
    return triple.startswith(("x86_64", "i386", "i686"))


def _width_from_features(features: str) -> int:
    flags = set(features.split(","))
    if "+avx512f" in flags:
        return 16
    if "+avx2" in flags:
        return 8
    return 4


def _probe_width(triple: str, cpu: str, features: str) -> int:
    """The float32 lanes a named CPU supports, read from the registers LLVM picks for a <16 x float> add."""
    import llvmlite.binding as llvm
    import llvmlite.ir as ir
    key = (triple, cpu, features)
    with _lock:
        if key in _probed_widths:
            return _probed_widths[key]
        tm = _create_machine(triple, cpu, features)
        module = ir.Module(name="braze_width_probe")
        vec = ir.VectorType(ir.FloatType(), 16)
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ir.PointerType()] * 2), "probe")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        x = b.load(fn.args[0], typ=vec, align=4)
        b.store(b.fadd(x, x), fn.args[1], align=4)
        b.ret_void()
        ref = llvm.parse_assembly(str(module))
        asm = tm.emit_assembly(ref)
        width = 16 if re.search(r"%zmm\d", asm) else 8 if re.search(r"%ymm\d", asm) else 4
        _probed_widths[key] = width
        return width


def _tuned_features(triple: str, features: str) -> str:
    """Let Intel AVX-512 cores use 512-bit vectors in vectorized loops, as AMD cores already do.

    LLVM's tuning for Intel server and client cores prefers 256-bit vectors in the loop vectorizer even when
    AVX-512 is present; our kernels are written for the full vector width, so turn that preference off. On CPUs
    without AVX-512 the flag changes nothing.
    """
    if not is_x86_triple(triple):
        return features
    return f"{features},-prefer-256-bit" if features else "-prefer-256-bit"


def host_target(cpu: str | None = None) -> Target:
    """The target to compile for: the host CPU, or the CPU named by `cpu`, or by the BRAZE_CPU environment variable
    without the instructions this host lacks (runnable_features); from this host's record in the disk cache when
    there is one (codegen/host.py), else asked of LLVM."""
    from .host import recorded_target
    if cpu:
        return recorded_target(cpu, llvm_target)
    forced = os.environ.get(CPU_ENV, "").strip()
    if not forced:
        return recorded_target("", llvm_target)
    return recorded_target(forced, functools.partial(llvm_target, runnable=True), runnable=True)


def llvm_target(requested: str, runnable: bool = False) -> Target:
    """The target LLVM gives for the CPU named `requested` (with `runnable`, limited to what this host can run), or
    for the host's own CPU when it is empty."""
    import llvmlite.binding as llvm
    init_llvm()
    triple = llvm.get_process_triple()
    if not requested:
        return _native_target()
    check_cpu_name(triple, requested)
    features = _tuned_features(triple, "")
    width = _probe_width(triple, requested, features)
    return Target(triple, requested, runnable_features(triple, requested, width) if runnable else features, width)


# A child process asks LLVM for a named CPU's code: of a name it does not know LLVM only warns, and on x86-64 it then
# aborts the whole process when it generates code ("64-bit code requested on a subtarget that doesn't support it").
_TRY_CPU = """import sys
import llvmlite.binding as llvm
llvm.initialize_native_target()
llvm.initialize_native_asmprinter()
machine = llvm.Target.from_triple(sys.argv[1]).create_target_machine(cpu=sys.argv[2])
machine.emit_assembly(llvm.parse_assembly("define void @f() {\\n  ret void\\n}"))
"""
CPU_CHECK_SECONDS = 60


def check_cpu_name(triple: str, cpu: str) -> None:
    """Raise a CodegenError unless LLVM knows the CPU named `cpu` for `triple` (asked in a child process, once per
    name and host: the target is then recorded, codegen/host.py)."""
    try:
        done = subprocess.run([sys.executable, "-c", _TRY_CPU, triple, cpu], capture_output=True, text=True,
                              timeout=CPU_CHECK_SECONDS)
        known = done.returncode == 0 and "not a recognized processor" not in done.stderr
    except (OSError, subprocess.TimeoutExpired):
        known = False
    if not known:
        raise CodegenError(f"{cpu!r} is not a CPU LLVM knows for {triple}: name one such as haswell, "
                           f"skylake-avx512 or znver4 (`llc -mcpu=help` lists them), or leave {CPU_ENV} unset")


def runnable_features(triple: str, cpu: str, width: int) -> str:
    """The feature string of CPU `cpu`'s code without every instruction set this host lacks, so that the code a
    process generates for BRAZE_CPU runs in it: a Zen 3's code may use SSE4a, which LLVM takes for some byte
    shuffles and Intel cores do not have (forced on a Xeon, such a kernel died of an illegal instruction). A CPU
    whose float32 vectors (`width` lanes) the host cannot run is refused with a CodegenError naming what is missing,
    rather than given narrower code than it names."""
    import llvmlite.binding as llvm
    try:
        host = llvm.get_host_cpu_features()
    except RuntimeError:  # LLVM cannot read this host's features: the named CPU's own code
        return _tuned_features(triple, "")
    lacking = sorted(name for name, present in host.items() if not present)
    features = _tuned_features(triple, ",".join(f"-{name}" for name in lacking))
    if _probe_width(triple, cpu, features) < width:
        core = {16: "avx512f", 8: "avx2"}.get(width)
        missing = [core] if core in lacking else [name for name in lacking if name.startswith(("avx", "fma"))][:4]
        raise CodegenError(f"{CPU_ENV}={cpu} asks for code with {width} float32 lanes, which this CPU "
                           f"({llvm.get_host_cpu_name()}) cannot run: it lacks {', '.join(missing) or 'them'}; "
                           f"name a CPU whose vector instructions it has (haswell for AVX2 code)")
    return features


@functools.lru_cache(maxsize=None)
def _native_target() -> Target:
    """The host's own target; asking LLVM for the host features costs most of a millisecond, so ask once."""
    import llvmlite.binding as llvm
    triple = llvm.get_process_triple()
    host_features = llvm.get_host_cpu_features().flatten()
    return Target(triple, llvm.get_host_cpu_name(), _tuned_features(triple, host_features),
                  _width_from_features(host_features))
