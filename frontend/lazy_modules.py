"""Submodules a package names but imports only when first used (PEP 562), so `import braze` does not pay for the
optimizers or the data loader that a program compiling or loading a model never touches."""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Callable, Mapping


def lazy_submodules(namespace: dict[str, Any], modules: Mapping[str, str]) -> Callable[[str], ModuleType]:
    """A module-level __getattr__ for `namespace` (a package's globals()) that imports modules[name] on the first
    access of `name` and binds it there."""
    def __getattr__(name: str) -> ModuleType:
        if name not in modules:
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        module = importlib.import_module(modules[name])
        namespace[name] = module
        return module
    return __getattr__
