"""The symbols an ELF object file defines and the ones it needs, read before the object is linked.

MCJIT links an object whose call goes to a symbol nobody defines without complaint, and the call then jumps to
address 0. So before several objects are linked into one engine, every symbol one of them needs must be defined by
another or by the process (libc: syscall, memcpy); undefined_symbols() gives the list to check (and, read from its
dynamic symbol table, what a shared object needs before it is opened: codegen/shared_object.py). Only 64-bit
little-endian ELF (Linux x86-64 and AArch64) is read; anything malformed raises ValueError.
"""
from __future__ import annotations

import ctypes
import struct

SHT_SYMTAB = 2
SHT_DYNSYM = 11
SHN_UNDEF = 0
STB_LOCAL = 0


def _section(data: bytes, shoff: int, shentsize: int, index: int) -> tuple[int, int, int, int, int]:
    """(type, offset, size, link, entsize) of section `index`."""
    at = shoff + index * shentsize
    if at + 64 > len(data):
        raise ValueError("section header outside the object")
    _, kind, _, _, offset, size, link, _, _, entsize = struct.unpack_from("<IIQQQQIIQQ", data, at)
    if offset + size > len(data):
        raise ValueError("section outside the object")
    return kind, offset, size, link, entsize


def _name(data: bytes, strtab: tuple[int, int], at: int) -> str:
    offset, size = strtab
    if at >= size:
        raise ValueError("symbol name outside the string table")
    end = data.find(b"\0", offset + at, offset + size)
    if end < 0:
        raise ValueError("unterminated symbol name")
    return data[offset + at:end].decode("utf-8", "replace")


def symbols(data: bytes, table: int = SHT_SYMTAB) -> tuple[set[str], set[str]]:
    """(global symbols defined, symbols referenced but undefined) of an ELF64 little-endian object, from its symbol
    table (SHT_SYMTAB) or, for a shared object, its dynamic one (SHT_DYNSYM)."""
    if len(data) < 64 or data[:6] != b"\x7fELF\x02\x01":
        raise ValueError("not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", data, 40)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    if shentsize != 64:
        raise ValueError("unexpected section header size")
    defined: set[str] = set()
    undefined: set[str] = set()
    for index in range(shnum):
        kind, offset, size, link, entsize = _section(data, shoff, shentsize, index)
        if kind != table:
            continue
        if entsize != 24 or not 0 <= link < shnum:
            raise ValueError("malformed symbol table")
        _, str_offset, str_size, _, _ = _section(data, shoff, shentsize, link)
        for at in range(offset + 24, offset + size - size % 24, 24):  # entry 0 is the null symbol
            name_at, info, _, shndx = struct.unpack_from("<IBBH", data, at)
            if info >> 4 == STB_LOCAL or not name_at:
                continue
            name = _name(data, (str_offset, str_size), name_at)
            (undefined if shndx == SHN_UNDEF else defined).add(name)
    return defined, undefined


def undefined_symbols(objects: list[bytes]) -> set[str]:
    """The symbols the objects need that none of them defines."""
    defined: set[str] = set()
    needed: set[str] = set()
    for data in objects:
        has, wants = symbols(data)
        defined |= has
        needed |= wants
    return needed - defined


def unresolved_in_process(names: set[str]) -> list[str]:
    """The names among `names` that nothing loaded in this process defines (sorted)."""
    process = ctypes.CDLL(None)
    return sorted(s for s in names if not hasattr(process, s))
