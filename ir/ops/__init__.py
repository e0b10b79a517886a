"""Importing this package registers every built-in op."""
from . import leaves, elementwise, reduce, movement, indexing, linalg, conv, pool, norm, loss, random  # noqa: F401
