"""braze: capture neural-network modules as graphs and compile them to native CPU code.

The component folders (ir/, frontend/, codegen/, runtime/) sit at the top of the repository and are installed
as braze.ir, braze.frontend, ... by the package-dir mapping of pyproject.toml; a source checkout is used through
`pip install -e .`.
"""
from braze.ir import (BrazeError, DTypeError, ExportError, IndexRangeError, ParseError, RecordError, ShapeError,
                      TensorSizeError, TraceError, VerifyError, bool_, float32, float64, int8, int32, int64, uint8)

__version__ = "0.1.0"

# --- the eager tensor API at top level (braze.tensor, braze.exp, braze.no_grad, ...) and braze.nn ------------

from braze.frontend import *  # noqa: E402, F401, F403
from braze.frontend import __all__ as _frontend_all  # noqa: E402
from braze.frontend import nn  # noqa: E402, F401
from braze.ir import DType  # noqa: E402, F401
from braze.frontend.device import Device  # noqa: E402, F401
from braze.ir.passes import optimize  # noqa: E402, F401
from braze.compiled import CompiledModule, compile  # noqa: E402, F401
from braze.runtime.threads import get_num_threads, set_num_threads  # noqa: E402, F401
from braze.train_step import TrainStep, compile_train_step, train_step_graph  # noqa: E402, F401
from braze.training import grad_graph, trace_loss  # noqa: E402, F401
from braze.dumping import dump  # noqa: E402, F401
from braze.frontend.serialization import save  # noqa: E402, F401
from braze.artifacts import export, load  # noqa: E402, F401  (after the frontend: braze.load reads every file)
from braze.runtime.artifact import ArtifactError  # noqa: E402, F401
from braze.onnx_export import export_onnx  # noqa: E402, F401
from braze import _aliases  # noqa: E402
from braze import utils  # noqa: E402, F401
from braze.frontend.lazy_modules import lazy_submodules  # noqa: E402

_aliases.install()
__getattr__ = lazy_submodules(globals(), {"optim": "braze.frontend.optim",  # imported when first used
                                         "linalg": "braze.frontend.torch_linalg", "special": "braze.frontend.special"})

__all__ = ["BrazeError", "DTypeError", "ExportError", "IndexRangeError", "ParseError", "RecordError", "ShapeError",
           "TensorSizeError", "TraceError", "VerifyError", "ArtifactError", "DType", "Device", "optimize", "compile",
           "CompiledModule", "get_num_threads", "set_num_threads", "dump", "export", "grad_graph", "trace_loss",
           "train_step_graph", "compile_train_step", "TrainStep", "export_onnx", "save", "load", "utils", "optim",
           "linalg", "special", "bool_", "float32", "float64", "int8", "int32", "int64", "uint8", *_frontend_all]
