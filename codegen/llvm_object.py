"""LLVM IR text to an object file: parse, verify, optimize, verify again, emit.

The JIT and the compile workers both compile through compile_text, so a worker's object is the one this process
would emit: the same target machine options, the same module pipeline (PIPELINE_LEVEL, with loop and SLP
vectorization, or the short pipeline for a module marked EXPLICIT: the choice travels in the IR text itself). A
failure raises LLVMFailure naming the stage; the JIT turns it into a CodegenError.

This module imports llvmlite and nothing of braze: a compile worker loads it on its own and runs serve(), so it can
compile as soon as llvmlite is imported; braze's lowerings (kernel_worker.py) load when the parent asks for them.
Messages are framed by write_message / read_message.
"""
from __future__ import annotations

import json
import threading
import time
from typing import Any, BinaryIO, Callable


class _Binding:
    """llvmlite.binding, imported on first use (about 0.1 s): a compile starts its workers (compile_workers.py,
    which uses this module's message framing) before this process loads LLVM itself."""

    def __getattr__(self, name: str) -> Any:
        import llvmlite.binding
        return getattr(llvmlite.binding, name)


llvm = _Binding()

# The IR braze emits is explicit already (vector code, unrolled register tiles, addressing hoisted by hand), so the
# level-1 module pipeline runs the benchmark models as fast as level 3 did (within 1-3%, the noise of the
# measurement) in 35-50% less optimization time. The code generator keeps the target machine's level (`opt`).
PIPELINE_LEVEL = 1
# A module whose code is explicit to the point that LLVM's loop and vectorization passes find nothing to do (a GEMM's
# register tiles, packers and blocking loops) carries this named metadata and gets the short pipeline instead (unless
# it holds vector math: is_explicit): SROA, instruction combining and CFG simplification, a tenth of the level-1
# pipeline's time with the same machine code speed (measured kernel by kernel on the benchmark models, AVX-512 and
# AVX2); the code generator keeps its level.
EXPLICIT = "braze.explicit"

_lock = threading.Lock()
_initialized = False
_machines: dict[tuple[str, str, str, int], llvm.TargetMachine] = {}


class LLVMFailure(Exception):
    """LLVM rejected a module: `stage` is "parse" (invalid IR) or "optimize" (invalid after optimization)."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage


def init() -> None:
    """Initialize LLVM's native target and assembly printer once per process."""
    global _initialized
    with _lock:
        if not _initialized:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _initialized = True


def create_machine(triple: str, cpu: str, features: str, opt: int, *, jit: bool = False) -> llvm.TargetMachine:
    """A new target machine (an execution engine takes ownership of the one it is given)."""
    init()
    return llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=opt, jit=jit)


def machine(triple: str, cpu: str, features: str, opt: int) -> llvm.TargetMachine:
    """The process-wide target machine for optimization and object output; never given to an engine."""
    key = (triple, cpu, features, opt)
    with _lock:
        tm = _machines.get(key)
    if tm is None:
        tm = create_machine(triple, cpu, features, opt)
        with _lock:
            tm = _machines.setdefault(key, tm)
    return tm


def parse(text: str, tm: llvm.TargetMachine, triple: str) -> llvm.ModuleRef:
    """The verified module of `text`, retargeted to the machine."""
    init()
    try:
        ref = llvm.parse_assembly(text)
        ref.verify()
    except RuntimeError as exc:
        raise LLVMFailure("parse", str(exc)) from None
    ref.triple = triple
    ref.data_layout = str(tm.target_data)
    return ref


def is_explicit(text: str) -> bool:
    """Whether LLVM IR text gets the short pipeline: it is marked EXPLICIT (llvmlite prints named metadata on a line
    of its own) and defines no alwaysinline function. Vector math (codegen/vecmath.py, a GEMM's GELU epilogue) is
    alwaysinline: inlined and simplified by the level-1 passes, it runs as fast as before and gives the same bits
    wherever it is inlined (an epilogue in the micro-kernel or in a function of its own)."""
    return f"\n!{EXPLICIT} = " in text and " alwaysinline" not in text


def optimize(ref: llvm.ModuleRef, tm: llvm.TargetMachine, explicit: bool = False) -> llvm.ModuleRef:
    """Run the PIPELINE_LEVEL module pipeline with loop and SLP vectorization (`explicit`: the short pipeline of
    EXPLICIT), then verify the result."""
    if explicit:
        builder = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=0))
        passes = llvm.create_new_module_pass_manager()
        passes.add_sroa_pass()
        passes.add_instruction_combine_pass()
        passes.add_simplify_cfg_pass()
        passes.run(ref, builder)
    else:
        pto = llvm.create_pipeline_tuning_options(speed_level=PIPELINE_LEVEL)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        builder = llvm.create_pass_builder(tm, pto)
        builder.getModulePassManager().run(ref, builder)
    try:
        ref.verify()
    except RuntimeError as exc:
        raise LLVMFailure("optimize", str(exc)) from None
    return ref


def exported_functions(ref: llvm.ModuleRef) -> tuple[str, ...]:
    """The functions the module defines with external linkage: what its object exports."""
    return tuple(f.name for f in ref.functions if not f.is_declaration and f.linkage == llvm.Linkage.external)


def compile_text(text: str, triple: str, cpu: str, features: str, opt: int,
                 timed: Callable[[str, float], None] = lambda stage, seconds: None
                 ) -> tuple[llvm.ModuleRef, tuple[str, ...], bytes]:
    """The optimized module, exported symbols and object file of `text`; `timed(stage, seconds)` hears each
    stage's wall time ("LLVM parse", "LLVM optimize", "emit object")."""
    tm = machine(triple, cpu, features, opt)
    start = time.perf_counter()
    ref = parse(text, tm, triple)
    parsed = time.perf_counter()
    timed("LLVM parse", parsed - start)
    optimize(ref, tm, is_explicit(text))
    optimized = time.perf_counter()
    timed("LLVM optimize", optimized - parsed)
    payload = tm.emit_object(ref)
    timed("emit object", time.perf_counter() - optimized)
    return ref, exported_functions(ref), payload


MAX_MESSAGE_BYTES = 1 << 30


def write_message(stream: BinaryIO, data: bytes) -> None:
    """One message: its length as 8 little-endian bytes, then the bytes."""
    stream.write(len(data).to_bytes(8, "little"))
    stream.write(data)
    stream.flush()


def read_message(stream: BinaryIO) -> bytes | None:
    """The next message, or None at the end of the stream; a torn or oversized message raises EOFError."""
    head = stream.read(8)
    if not head:
        return None
    size = int.from_bytes(head, "little") if len(head) == 8 else -1
    if not 0 <= size <= MAX_MESSAGE_BYTES:
        raise EOFError("a compile message's length is torn or too large")
    data = stream.read(size)
    if len(data) != size:
        raise EOFError("a compile message ended early")
    return data


Lowering = Callable[[dict[str, Any]], tuple[dict[str, Any], str]]


def serve(stdin: BinaryIO, stdout: BinaryIO, load_lowering: Callable[[], Lowering]) -> None:
    """A compile worker's loop (compile_workers.py starts it with this file loaded on its own, llvmlite alone): it
    says it is ready at once and compiles LLVM IR texts; a "load" request imports braze's lowerings
    (`load_lowering()`), after which "lower" requests (a kernel part to lower and compile) are served too. Every
    answer says whether the lowerings are loaded."""
    lowering: list[Any] = []
    write_message(stdout, b'{"ready": true}')
    while (message := read_message(stdin)) is not None:
        job = json.loads(message)
        timings: dict[str, float] = {}
        header: dict[str, Any] = {}
        payload = b""
        try:
            kind = job.get("kind")
            if kind == "load" or (kind == "lower" and not lowering):
                lowering[:] = [load_lowering()]
            if kind == "load":
                symbols: tuple[str, ...] = ()
            else:
                if kind == "lower":
                    start = time.perf_counter()
                    header["part"], text = lowering[0](job["part"])
                    timings["lower"] = time.perf_counter() - start
                else:
                    text = job["text"]
                _, symbols, payload = compile_text(text, job["triple"], job["cpu"], job["features"], job["opt"],
                                                   lambda stage, seconds: timings.__setitem__(stage, seconds))
        except LLVMFailure as exc:
            header = {"ok": False, "stage": exc.stage, "error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - the parent lowers the part itself and reports the error there
            header = {"ok": False, "stage": "lower", "error": f"{type(exc).__name__}: {exc}"}
        else:
            header.update(ok=True, symbols=list(symbols), timings=timings)
        header["lowering"] = bool(lowering)
        write_message(stdout, json.dumps(header).encode())
        if header["ok"]:
            write_message(stdout, payload)
