"""braze.ir: types, the op registry, graphs, their text form, the verifier and the reference interpreter."""
from . import ops as _ops  # noqa: F401  (registers the built-in ops)
from .errors import (AttributeSchemaError, BrazeError, DTypeError, ExportError, IndexRangeError, ParseError,
                     RecordError, ShapeError, TensorSizeError, TraceError, UnknownOpError, VerifyError)
from .evaluate import evaluate, vjp_numpy
from .registry import Emitter, OpDef, defop, get_op, op_names
from .types import DTYPES, DType, TensorType, as_dtype, bool_, float32, float64, int8, int32, int64, type_of, uint8
from .builder import GraphBuilder
from .graph import FlagLeaf, Graph, Loc, Node, ParamLeaf, Value
from .interpret import interpret
from .parser import parse
from .verify import verify
