"""`braze.nn`, `braze.optim`, `braze.amp`, `braze.cuda`, `braze.linalg`, `braze.special`, `braze.utils.data` and
`braze.utils.checkpoint` are the modules of `braze.frontend.nn`, `braze.frontend.optim`, `braze.frontend.amp`,
`braze.frontend.cuda`, `braze.frontend.torch_linalg`, `braze.frontend.special`, `braze.frontend.data` and
`braze.frontend.checkpoint` under short names.

A finder makes `import braze.nn.x` return the very module object `braze.frontend.nn.x` (never a second copy with
its own classes), at any depth.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any, Sequence

ALIASES = {"braze.nn": "braze.frontend.nn", "braze.optim": "braze.frontend.optim",
           "braze.utils.data": "braze.frontend.data", "braze.utils.checkpoint": "braze.frontend.checkpoint",
           "braze.amp": "braze.frontend.amp", "braze.cuda": "braze.frontend.cuda",
           "braze.linalg": "braze.frontend.torch_linalg", "braze.special": "braze.frontend.special"}


def _target(name: str) -> str | None:
    for alias, real in ALIASES.items():
        if name == alias or name.startswith(alias + "."):
            return real + name[len(alias):]
    return None


class AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves alias module names to the real modules."""

    def __init__(self) -> None:
        self.real_specs: dict[str, ModuleSpec | None] = {}

    def find_spec(self, name: str, path: Sequence[str] | None, target: Any = None) -> ModuleSpec | None:
        return importlib.util.spec_from_loader(name, self) if _target(name) else None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = importlib.import_module(_target(spec.name) or spec.name)
        self.real_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The real module already ran; undo the import system's overwrite of its __spec__."""
        module.__spec__ = self.real_specs.pop(module.__spec__.name)


def install() -> None:
    """Register the finder once and bind the top-level aliases whose modules are already imported (the others,
    braze.optim and braze.utils.data among them, are imported when first used: see braze.frontend.lazy_modules)."""
    if not any(isinstance(f, AliasFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, AliasFinder())
    for alias, real in ALIASES.items():
        if real in sys.modules:
            sys.modules.setdefault(alias, sys.modules[real])
