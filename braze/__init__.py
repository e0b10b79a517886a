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
