"""Where this process's numpy keeps an array's fields, so that native code can read them (codegen/call_stub.py).

numpy's C API reads an array's data pointer, rank, dims, dtype and flags straight from the object's struct
(PyArrayObject_fields, after the object header), and a tuple's items sit after its variable-size header. The
offsets are not assumed: `object_layout()` derives them from the header size and then checks every one against
arrays whose fields Python can see (their data address, shape, dtype and contiguity). Any disagreement (another
Python build, a numpy that moved a field) gives None, and the runtime then keeps to its Python call path.
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

from braze.codegen.stub_layout import C_CONTIGUOUS, ObjectLayout


def _word(obj: object, offset: int) -> int:
    return ctypes.c_uint64.from_address(id(obj) + offset).value


def _int(obj: object, offset: int) -> int:
    return ctypes.c_int32.from_address(id(obj) + offset).value


@functools.lru_cache(maxsize=None)
def object_layout() -> ObjectLayout | None:
    """The layout of numpy arrays and tuples in this process, or None when it cannot be confirmed."""
    head = object.__sizeof__(object())  # PyObject_HEAD: the reference count and the type
    layout = ObjectLayout(type=head - 8, data=head, nd=head + 8, dims=head + 16, descr=head + 40, flags=head + 48,
                          tuple_items=head + 8)
    return layout if _confirmed(layout) else None


def _confirmed(layout: ObjectLayout) -> bool:
    """Whether the layout reads the right fields of a few arrays and a tuple."""
    base = np.arange(7 * 11 * 3, dtype=np.float64).reshape(7, 11, 3)
    cases = [(base, True), (base[:, 1:5], False), (np.zeros((), np.int8), True), (base.T, False)]
    for array, contiguous in cases:
        dims = ctypes.cast(ctypes.c_void_p(_word(array, layout.dims)), ctypes.POINTER(ctypes.c_int64))
        if (_word(array, layout.type) != id(np.ndarray) or _word(array, layout.descr) != id(array.dtype)
                or _word(array, layout.data) != array.__array_interface__["data"][0]
                or _int(array, layout.nd) != array.ndim
                or tuple(dims[d] for d in range(array.ndim)) != array.shape
                or bool(_int(array, layout.flags) & C_CONTIGUOUS) != contiguous):
            return False
    pair = (base, cases[1][0])
    return _word(pair, layout.tuple_items) == id(base) and _word(pair, layout.tuple_items + 8) == id(pair[1])
