"""Native code as a shared object: a module's objects linked by the system linker when they are compiled, and opened
with ctypes by a later process, which then runs cached code without loading LLVM (llvmlite's import and MCJIT's
linking were most of a warm compile).

What it needs on the machine: to link, a linker on PATH (`ld`, else `cc`; looked up once per process); to open, Linux
(ELF, dlopen) that allows text relocations. The shared object is linked from the very objects MCJIT links (static
relocation model, large code model), so both run the same machine code and give the same bytes: their absolute
addresses (of constants, of the kernels the entry calls) become text relocations, which the dynamic loader applies
when it opens the shared object. Position-independent objects were tried and refused: MCJIT links their GOT
relocations (R_X86_64_GOT64) wrongly, and the fallback must run the same objects. Where a linker or dlopen is
missing, or a system refuses text relocations (SELinux's execmod), or anything fails, the objects are linked by
MCJIT as before, silently: the shared object is an addition to a cache entry (`attach`), never a replacement for
its objects.

A cache entry trusts its bytes as far as the entry was checked (its sha256 and size, codegen/cache.py); before dlopen
`open_shared` also requires a 64-bit little-endian ELF shared object for this machine that defines every function
wanted and needs from the process only what the process defines (elf_symbols, as MCJIT's linking checks). The bytes
go to a private temporary file in the cache directory (mode 0600, in the user's own 0700 directory), are opened with
RTLD_LOCAL and RTLD_NOW, and the file is unlinked at once: the mapping keeps the code, and nothing is left behind.
The code is unmapped (dlclose) when its SharedObject is garbage-collected.
"""
from __future__ import annotations

import _ctypes
import ctypes
import functools
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
import weakref
from pathlib import Path
from typing import Any, Sequence

from . import elf_symbols

META_KEY = "shared_object"  # the size of the shared object at the end of an entry's payload
LINK_TIMEOUT_S = 120.0
ET_DYN = 3
_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183}  # ELF e_machine by platform.machine()


class SharedObject:
    """An opened shared object and the addresses of its functions; dlclose'd when garbage-collected."""

    def __init__(self, library: ctypes.CDLL, addresses: dict[str, int]) -> None:
        self.library, self.addresses = library, addresses
        if hasattr(_ctypes, "dlclose"):
            # not at exit: daemon threads (the worker pool's) may still run code of a live library then
            weakref.finalize(self, _ctypes.dlclose, library._handle).atexit = False


@functools.lru_cache(maxsize=None)
def linker() -> tuple[str, ...] | None:
    """The command that links objects into a shared object (output and inputs follow), or None without one. Calls
    between the objects bind inside the shared object (-Bsymbolic): nothing loaded before can interpose. The
    objects' absolute addresses become text relocations (-z notext: see the module doc)."""
    if not sys.platform.startswith("linux"):
        return None
    ld = shutil.which("ld")
    if ld is not None:
        return ld, "-shared", "-Bsymbolic", "-z", "notext", "-z", "noexecstack"
    cc = shutil.which("cc") or shutil.which("gcc")
    return (cc, "-shared", "-nostdlib", "-Wl,-Bsymbolic", "-Wl,-z,notext", "-Wl,-z,noexecstack") if cc else None


def link(objects: Sequence[bytes | memoryview]) -> bytes | None:
    """The shared object of the objects, or None when there is no linker or it fails."""
    command = linker()
    if command is None or not objects:
        return None
    with tempfile.TemporaryDirectory(prefix="braze-link-") as folder:
        inputs = []
        for k, data in enumerate(objects):
            inputs.append(Path(folder) / f"{k}.o")
            inputs[-1].write_bytes(data)
        output = Path(folder) / "module.so"
        try:
            done = subprocess.run([*command, "-o", str(output), *map(str, inputs)], capture_output=True,
                                  timeout=LINK_TIMEOUT_S, check=False)
            data = output.read_bytes() if done.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            return None
    return data if data is not None and _header_problem(data) is None else None


def attach(payload: bytes, shared: bytes | None, meta: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    """A cache payload with the shared object (if any) after it, and the meta that records its size."""
    if shared is None:
        return payload, meta
    return payload + shared, {**meta, META_KEY: len(shared)}


def detach(payload: bytes | memoryview, meta: dict[str, Any]) -> tuple[bytes | memoryview, bytes | memoryview | None]:
    """(the rest of the payload, the shared object or None) of a payload made by `attach`; ValueError when the meta's
    size does not fit the payload."""
    size = meta.get(META_KEY)
    if size is None:
        return payload, None
    if type(size) is not int or not 0 < size < len(payload):
        raise ValueError(f"the entry's shared object size {size!r} does not fit its payload of {len(payload)} bytes")
    return payload[:len(payload) - size], payload[len(payload) - size:]


def open_shared(data: bytes | memoryview, wanted: Sequence[str], directory: Path, name: str) -> SharedObject:
    """The shared object of `data`, opened (see the module doc), with the address of every function `wanted`.
    ValueError for bytes that are not such a shared object (never opened); OSError when this machine cannot open
    one (no dlopen, no executable mapping in `directory`)."""
    data = bytes(data)
    problem = _header_problem(data)
    if problem is None:
        defined, needed = elf_symbols.symbols(data, elf_symbols.SHT_DYNSYM)
        lacking = sorted(set(wanted) - defined)
        unresolved = elf_symbols.unresolved_in_process(needed)
        problem = (f"it does not export {', '.join(lacking)}" if lacking else
                   f"it calls {', '.join(unresolved)}, which nothing defines" if unresolved else None)
    if problem is not None:
        raise ValueError(f"module {name!r}: its shared object is unusable: {problem}")
    library = _dlopen(data, directory, name)
    addresses = {symbol: ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value or 0 for symbol in wanted}
    missing = [symbol for symbol, at in addresses.items() if not at]
    if missing:
        raise ValueError(f"module {name!r}: no address for {', '.join(missing)} in its shared object")
    return SharedObject(library, addresses)


def _dlopen(data: bytes, directory: Path, name: str) -> ctypes.CDLL:
    """Open the bytes as a shared object through a private file in `directory`, unlinked once opened."""
    if not sys.platform.startswith("linux"):
        raise OSError("shared objects are opened on Linux only")
    from .cache import TEMP_SUFFIX  # the cache's temporary-file name: a file left by a killed process is swept
    fd, path = tempfile.mkstemp(prefix=f".{name[:24]}.", suffix=f".so{TEMP_SUFFIX}", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
    finally:
        os.unlink(path)


def _header_problem(data: bytes) -> str | None:
    """What makes `data` not a 64-bit little-endian ELF shared object for this machine, or None."""
    if len(data) < 64 or data[:6] != b"\x7fELF\x02\x01":
        return "not a 64-bit little-endian ELF file"
    kind, machine = struct.unpack_from("<HH", data, 16)
    if kind != ET_DYN:
        return f"ELF type {kind}, not a shared object"
    if machine != _MACHINES.get(platform.machine().lower()):
        return f"built for ELF machine {machine}, not this {platform.machine()}"
    (shoff,) = struct.unpack_from("<Q", data, 40)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    if shentsize != 64 or not 0 < shnum or shoff + shnum * shentsize > len(data):
        return "its section table lies outside it"
    return None
