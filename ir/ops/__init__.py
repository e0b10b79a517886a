"""Importing this package registers every built-in op."""
from . import leaves, elementwise, reduce, movement, indexing, linalg, conv, pool, norm, loss, random, reparam  # noqa: F401
from . import ordering  # noqa: F401
from . import attention  # noqa: F401
from . import fused  # noqa: F401  (after the others: its reference runs the interpreter)
