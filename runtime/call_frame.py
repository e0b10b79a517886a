"""The one-foreign-call path of a call: the native call stub and one executable's frame for it.

`call_stub()(frame.pointer, inputs, outputs)` hands the caller's tuple of input arrays and the tuple of output
arrays to the native stub (codegen/call_stub.py), which checks every array against the frame and runs the entry,
with the arrays' own data, on the calling thread, or on the worker pool the frame names when it allows more than one
thread (runtime/pool.py): no Python work per input and no ctypes conversion per argument.
It returns k + 1, before any native code of the graph has run, when array k (inputs, then outputs) is not exactly
what the entry reads or writes (another type, dtype or shape, not C-contiguous, an input whose index range must be
checked, an `out=` array that is read-only or not aligned to its dtype): the executable's general path
then takes the call. Without a confirmed object layout (runtime/objects.py) there is no stub and
`call_stub()` is None.
"""
from __future__ import annotations

import ctypes
import functools
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from braze.codegen.abi import CALL, FRAME_CLAIM, FRAME_RELEASE, TASK_FIELDS
from braze.codegen.stub_layout import (FRAME_ARRAY_TYPE, FRAME_HEADER, FRAME_INPUTS, FRAME_OUTPUTS, FRAME_POOL,
                                       POOL_WORDS, RECORD_WORDS, frame_words)

from .memory import address, aligned_zeros
from .objects import object_layout
from .signature import InputSpec, OutputSpec

if TYPE_CHECKING:
    import llvmlite.ir as ir

    from braze.codegen.described import Described
    from braze.codegen.stub_layout import ObjectLayout
    from braze.codegen.target import Target


def stub_module() -> Described | None:
    """The call stub's module as codegen/described.py takes it, or None without a confirmed object layout."""
    layout = object_layout()
    if layout is None:
        return None
    from braze.codegen.described import Described
    from braze.codegen.target import host_target
    target = host_target()
    return Described(f"call stub {layout}", lambda: _emit_call_stub(target, layout),
                     ("braze_call", "braze_frame_claim", "braze_frame_release"))


@functools.lru_cache(maxsize=None)
def _stub_library() -> Any:
    """The process's call stub module (compiled once, or opened from the disk cache without loading LLVM), or None
    without a confirmed object layout."""
    module = stub_module()
    if module is None:
        return None
    from braze.codegen.described import compile_described
    return compile_described(module.description, module.build, module.exports)


@functools.lru_cache(maxsize=None)
def call_stub() -> Callable[..., int] | None:
    """The process's braze_call, or None without a confirmed object layout."""
    library = _stub_library()
    return None if library is None else CALL.cfunc(library, "braze_call")


@functools.lru_cache(maxsize=None)
def frame_claims() -> tuple[Callable[[Any], int], Callable[[Any], None]]:
    """braze_frame_claim and braze_frame_release of the process's call stub (call only when call_stub() is not
    None): the general path holds a frame's busy word with them, as the stub does."""
    library = _stub_library()
    return FRAME_CLAIM.cfunc(library, "braze_frame_claim"), FRAME_RELEASE.cfunc(library, "braze_frame_release")


def _emit_call_stub(target: Target, layout: ObjectLayout) -> ir.Module:
    """The stub's module, emitted (and llvmlite loaded) only when no cache entry has its code."""
    from braze.codegen.call_stub import emit_call_stub
    return emit_call_stub(target, layout)


class CallFrame:
    """The stub's frame for one executable (words laid out as codegen/call_stub.py states)."""

    def __init__(self, entry: dict[str, int], inputs: Sequence[InputSpec], outputs: Sequence[OutputSpec]) -> None:
        self.words = aligned_zeros(frame_words(len(inputs), len(outputs)), np.int64)
        for k, field in enumerate(TASK_FIELDS):
            self.words[k] = entry[field]
        self.words[FRAME_ARRAY_TYPE] = id(np.ndarray)
        self.words[FRAME_INPUTS], self.words[FRAME_OUTPUTS] = len(inputs), len(outputs)
        self._keep = [(spec.dtype, np.array(spec.shape or (0,), np.int64)) for spec in (*inputs, *outputs)]
        for k, (spec, (dtype, dims)) in enumerate(zip((*inputs, *outputs), self._keep)):
            # an input whose values must be range-checked gets no dtype here, so the stub always declines it
            checked = isinstance(spec, InputSpec) and spec.bound is not None
            at = FRAME_HEADER + RECORD_WORDS * k
            self.words[at:at + RECORD_WORDS] = (0 if checked else id(dtype), len(spec.shape), address(dims))
        self.pointer = ctypes.c_void_p(address(self.words))  # the stub's first argument

    def set(self, field: str, value: int) -> None:
        """Change one of the entry's arguments (the scratch area, the arena or the thread count, when the count
        changed)."""
        self.words[TASK_FIELDS.index(field)] = value

    def set_pool(self, words: Sequence[int]) -> None:
        """The worker pool the stub runs a call of more than one thread on (POOL_WORDS; all 0 for none)."""
        if len(words) != POOL_WORDS:
            raise ValueError(f"a frame's pool takes {POOL_WORDS} words, got {len(words)}")
        self.words[FRAME_POOL:FRAME_POOL + POOL_WORDS] = words
