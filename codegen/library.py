"""A compiled library: machine code of braze's modules, linked by MCJIT or opened as a shared object, and the
registry that finds a library linked earlier in this process.

This module and what it imports load without llvmlite: a library opened from a shared object is called, and
inspected only on request (llvm_ir(), asm() rebuild and optimize its LLVM IR then, through codegen/jit.py).
`BRAZE_DUMP_LLVM=1` and `BRAZE_DUMP_ASM=1` print the optimized LLVM IR and the assembly of every library linked.
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Sequence

from braze.ir.errors import CodegenError

from .shared_object import SharedObject
from .target import Target

if TYPE_CHECKING:
    import llvmlite.binding as llvm

lock = threading.RLock()  # the JIT's too: libraries are linked, registered and inspected under it
_libraries: weakref.WeakValueDictionary[str, CompiledLibrary] = weakref.WeakValueDictionary()

Sources = Sequence[str]


class CompiledLibrary:
    """The machine code of one or more LLVM modules (a graph's kernels and its entry), linked into one MCJIT engine
    or opened as one shared object (codegen/shared_object.py), which lives as long as the library.

    `address(name)` and `cfunc(name, restype, *argtypes)` give callable entry points; `llvm_ir()` and `asm()`
    return the optimized IR and the host assembly, whole or for one function. A library loaded from the disk cache
    rebuilds its optimized IR from the source IR the first time it is inspected.
    """

    def __init__(self, name: str, key: str, target: Target, source_ir: str | Sources | Callable[[], Sources],
                 symbols: tuple[str, ...], linked: tuple[Any, dict[str, int]], from_cache: bool,
                 optimized: Sequence[llvm.ModuleRef | None] | llvm.ModuleRef | None,
                 timings: dict[str, float] | None = None, meta: dict[str, Any] | None = None) -> None:
        self.name, self.key, self.target = name, key, target
        self.symbols, self.from_cache = symbols, from_cache
        self.timings, self.meta = dict(timings or {}), dict(meta or {})
        self._source: Sources | Callable[[], Sources] = (source_ir,) if isinstance(source_ir, str) else source_ir
        self._engine, self._addresses = linked  # what holds the machine code (an MCJIT engine or a SharedObject)
        self._optimized: list[llvm.ModuleRef | None] | None = None if optimized is None else \
            list(optimized) if isinstance(optimized, (list, tuple)) else [optimized]
        self._asm: str | None = None

    @property
    def shared(self) -> bool:
        """Whether the machine code is an opened shared object rather than an MCJIT engine."""
        return isinstance(self._engine, SharedObject)

    @property
    def sources(self) -> tuple[str, ...]:
        """The LLVM IR of each module the library was compiled from; built on first use for a library linked from
        the disk cache."""
        with lock:
            if callable(self._source):
                self._source = tuple(self._source())
            return tuple(self._source)

    @property
    def source_ir(self) -> str:
        """The LLVM IR the library was compiled from, its modules one after another."""
        return "\n".join(self.sources)

    def address(self, name: str) -> int:
        """The address of an exported function; raises CodegenError for unknown names."""
        try:
            return self._addresses[name]
        except KeyError:
            raise CodegenError(f"module {self.name!r} exports no function {name!r}; "
                               f"it exports {', '.join(self.symbols)}") from None

    def cfunc(self, name: str, restype: Any, *argtypes: Any) -> Any:
        """A ctypes function for an exported function with the given C signature (ctypes releases the GIL); it
        keeps the library, and so its machine code, alive. A bare address() does not: hold the library with it."""
        function = ctypes.CFUNCTYPE(restype, *argtypes)(self.address(name))
        function.library = self
        return function

    def llvm_ir(self, function: str | None = None) -> str:
        """The optimized LLVM IR of the modules, or of one function defined in them."""
        modules = self._optimized_modules()
        if function is None:
            return "\n".join(str(m) for m in modules)
        for module in modules:
            try:
                fn = module.get_function(function)
            except NameError:
                continue
            if not fn.is_declaration:
                return str(fn)
        raise CodegenError(f"module {self.name!r} has no function {function!r}")

    def asm(self, function: str | None = None) -> str:
        """The host assembly of the modules, or of one function in them."""
        with lock:
            if self._asm is None:
                self._asm = "\n".join(self.target.machine().emit_assembly(m) for m in self._optimized_modules())
        return self._asm if function is None else _function_asm(self._asm, function, self.name)

    def _optimized_modules(self) -> list[llvm.ModuleRef]:
        from .jit import optimized_module
        with lock:
            sources = self.sources
            if self._optimized is None or len(self._optimized) != len(sources):
                self._optimized = [None] * len(sources)
            for i, text in enumerate(sources):
                if self._optimized[i] is None:
                    self._optimized[i] = optimized_module(text, self.name, self.target)
            return list(self._optimized)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        origin = ("cache" if self.from_cache else "compiled") + (", shared object" if self.shared else "")
        return f"CompiledLibrary({self.name!r}, {origin}, symbols={list(self.symbols)}, target={self.target})"


def register(library: CompiledLibrary) -> CompiledLibrary:
    """Keep `library` findable under its key while it is alive (known_library); returns it."""
    with lock:
        _libraries[library.key] = library
    return library


def known_library(key: str) -> CompiledLibrary | None:
    """The library linked under `key` earlier in this process and still alive, if any."""
    with lock:
        return _libraries.get(key)


def pack_objects(objects: Sequence[tuple[tuple[str, ...], bytes]]) -> tuple[bytes, list[list[Any]]]:
    """Several objects as one cache payload and the index that splits it again (per object: symbols, size)."""
    return b"".join(p for _, p in objects), [[list(syms), len(p)] for syms, p in objects]


def unpack_objects(payload: bytes, index: Any) -> list[tuple[tuple[str, ...], bytes]] | None:
    """The objects of a payload packed by pack_objects, or None when the index does not describe it."""
    if not isinstance(index, list):
        return None
    objects, at = [], 0
    for item in index:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], list)
                and all(isinstance(x, str) for x in item[0]) and isinstance(item[1], int)
                and not isinstance(item[1], bool) and 0 < item[1] <= len(payload) - at):
            return None
        objects.append((tuple(item[0]), payload[at:at + item[1]]))
        at += item[1]
    return objects if at == len(payload) else None


def _function_asm(asm: str, function: str, module: str) -> str:
    """The lines of one function in an assembly listing, from its label to its end marker."""
    lines = asm.splitlines()
    labels = (f"{function}:", f'"{function}":')
    start = next((i for i, line in enumerate(lines) if line.startswith(labels)), None)
    if start is None:
        raise CodegenError(f"module {module!r} has no function {function!r} in its assembly")
    end = next((i for i in range(start, len(lines)) if lines[i].startswith(".Lfunc_end")), len(lines) - 1)
    return "\n".join(lines[start:end + 1]) + "\n"




def dump(library: CompiledLibrary) -> None:
    for env, title, text in (("BRAZE_DUMP_LLVM", "LLVM IR", library.llvm_ir),
                             ("BRAZE_DUMP_ASM", "assembly", library.asm)):
        if os.environ.get(env, "") not in ("", "0"):
            banner = f"==== {title}: {library.name} ({library.target}) ===="
            print(f"{banner}\n{text()}\n{'=' * len(banner)}", file=sys.stderr)
