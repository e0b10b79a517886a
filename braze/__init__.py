"""braze: capture neural-network modules as graphs and compile them to native CPU code."""
import os as _os

# The component folders (ir/, frontend/, codegen/, runtime/) sit at the top of the repository and are
# installed as braze.ir, braze.frontend, ... When this package is imported from a source checkout (the
# repository root on sys.path, as with `python -m` run there), let the checkout's folders resolve too.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_root, "pyproject.toml")) and _os.path.isfile(_os.path.join(_root, "ir", "registry.py")):
    __path__.append(_root)  # noqa: F821 (the package's own search path)

from braze.ir import (BrazeError, DTypeError, ParseError, RecordError, ShapeError, TraceError, VerifyError,  # noqa: E402
                      bool_, float32, float64, int8, int32, int64, uint8)

__version__ = "0.1.0"

# --- the eager tensor API at top level (braze.tensor, braze.exp, braze.no_grad, ...) and braze.nn ------------
import importlib as _importlib  # noqa: E402
import importlib.abc as _importlib_abc  # noqa: E402
import importlib.util as _importlib_util  # noqa: E402
import sys as _sys  # noqa: E402

from braze.frontend import *  # noqa: E402, F401, F403
from braze.frontend import __all__ as _frontend_all  # noqa: E402
from braze.frontend import nn  # noqa: E402, F401
from braze.ir import DType  # noqa: E402, F401
from braze.frontend.device import Device  # noqa: E402, F401
from braze.ir.passes import optimize  # noqa: E402, F401
from braze.compiled import CompiledModule, compile  # noqa: E402, F401


class _NnAlias(_importlib_abc.MetaPathFinder, _importlib_abc.Loader):
    """Make `braze.nn[.x]` the very module objects of `braze.frontend.nn[.x]` (one class identity, any depth)."""

    real_specs: dict = {}

    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name != "braze.nn" and not name.startswith("braze.nn."):
            return None
        return _importlib_util.spec_from_loader(name, self)

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        module = _importlib.import_module("braze.frontend.nn" + spec.name[len("braze.nn"):])
        self.real_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module):  # type: ignore[no-untyped-def]
        """The real module is already executed; undo the import system's overwrite of its __spec__."""
        module.__spec__ = self.real_specs.pop(module.__spec__.name)


_sys.meta_path.insert(0, _NnAlias())
_sys.modules["braze.nn"] = nn
_sys.modules["braze.nn.functional"] = nn.functional
_sys.modules["braze.optim"] = optim  # noqa: F405 (bound by the star import above)

__all__ = ["BrazeError", "DTypeError", "ParseError", "RecordError", "ShapeError", "TraceError", "VerifyError",
           "DType", "Device", "optimize", "compile", "CompiledModule", "bool_", "float32", "float64", "int8",
           "int32", "int64", "uint8", *_frontend_all]
