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

from braze.frontend import *  # noqa: E402, F401, F403
from braze.frontend import __all__ as _frontend_all  # noqa: E402
from braze.frontend import nn  # noqa: E402, F401
from braze.ir import DType  # noqa: E402, F401
from braze.frontend.device import Device  # noqa: E402, F401
from braze.ir.passes import optimize  # noqa: E402, F401
from braze.compiled import CompiledModule, compile  # noqa: E402, F401
from braze.dumping import dump  # noqa: E402, F401
from braze.frontend.serialization import load, save  # noqa: E402, F401
from braze import _aliases  # noqa: E402
from braze import utils  # noqa: E402, F401


_aliases.install()

__all__ = ["BrazeError", "DTypeError", "ParseError", "RecordError", "ShapeError", "TraceError", "VerifyError",
           "DType", "Device", "optimize", "compile", "CompiledModule", "dump", "save", "load", "utils", "bool_",
           "float32", "float64", "int8", "int32", "int64", "uint8", *_frontend_all]
