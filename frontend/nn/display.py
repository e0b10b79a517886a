"""How modules print: repr(module) in torch's exact format, and format() with parameters, flags and counts.

repr is torch's: `Name(extra_repr)` on one line, or the extra_repr lines and `(name): child` lines indented by
two spaces, children only. format() is braze's detailed tree (document 001's module display): each
parameter's dtype and shape with its state (lazy, quantized, adapters, buffer), each flag, and the parameter
count of the tree.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from .module import Module
    from .param import Param


def add_indent(text: str, spaces: int) -> str:
    """Indent every line but the first (torch's _addindent)."""
    first, *rest = text.split("\n")
    return "\n".join([first] + [" " * spaces + line for line in rest])


def enclose(name: str, extra: str, lines: Sequence[str]) -> str:
    """`name(...)` around the extra_repr lines and child lines, as torch lays it out."""
    extra_lines = extra.split("\n") if extra else []
    body = extra_lines + list(lines)
    if not body:
        return f"{name}()"
    if len(extra_lines) == 1 and not lines:
        return f"{name}({extra_lines[0]})"
    return name + "(\n  " + "\n  ".join(body) + "\n)"


def torch_repr(module: Module) -> str:
    """torch.nn.Module.__repr__."""
    children = [add_indent(f"({name}): {child!r}", 2) for name, child in module.__dict__["_modules"].items()]
    return enclose(type(module).__name__, module.extra_repr(), children)


def repeated_repr(module: Module) -> str:
    """torch.nn.ModuleList.__repr__: consecutive children with equal reprs fold into `(i-j): n x child`."""
    blocks: list[list[Any]] = []  # [first index, last index, repr]
    for i, child in enumerate(module.__dict__["_modules"].values()):
        text = repr(child)
        if blocks and blocks[-1][2] == text:
            blocks[-1][1] = i
        else:
            blocks.append([i, i, text])
    lines = [add_indent(f"({a}): {text}" if a == b else f"({a}-{b}): {b - a + 1} x {text}", 2)
             for a, b, text in blocks]
    return enclose(type(module).__name__, "", lines)


def detailed(module: Module) -> str:
    """The module tree with its extra_repr, parameters, buffers, flags and children, and the parameter count."""
    d = module.__dict__
    lines = [line for line in module.extra_repr().split("\n") if line]
    for registry in ("_parameters", "_buffers"):
        for name, p in d[registry].items():
            lines.append(f"({name}): {_describe(p)}")
    lines += [f"({name}): {flag!r}" for name, flag in d["_flags"].items()]
    for name, child in d["_modules"].items():
        lines.append(f"({name}): {'None' if child is None else detailed(child)}".replace("\n", "\n  "))
    count = module.num_params()
    suffix = f"  # {count:,} params" if count else ""
    if not lines:
        return f"{type(module).__name__}(){suffix}"
    if len(lines) == 1 and "\n" not in lines[0] and not lines[0].startswith("("):
        return f"{type(module).__name__}({lines[0]}){suffix}"
    body = "".join(f"\n  {line}" for line in lines)
    return f"{type(module).__name__}({body}\n){suffix}"


def _describe(p: Param | None) -> str:
    if p is None:
        return "None"
    notes = [] if p.is_initialized else ["lazy"]
    if p._packed is not None:
        notes.append(f"quantized {p._packed.scheme}")
    if p.adapter is not None:
        notes.append(repr(p.adapter))
    if p.is_buffer:
        notes.append("buffer" if p.persistent else "buffer, not persistent")
    elif p.lazy_dtype.is_float and not p.requires_grad:
        notes.append("requires_grad=False")
    if p.lazy_device.index != 0:
        notes.append(str(p.lazy_device))
    extra = f" ({', '.join(notes)})" if notes else ""
    return f"{p.lazy_dtype}[{', '.join(map(str, p.lazy_shape))}]{extra}"
