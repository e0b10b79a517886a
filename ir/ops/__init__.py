"""Importing this package registers every built-in op."""
from . import leaves, elementwise  # noqa: F401
