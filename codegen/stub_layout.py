"""What the native call stub (codegen/call_stub.py) and the runtime agree on: the layout of the stub's frame and
the offsets of the numpy array and tuple fields it reads. The runtime builds frames and checks the object layout
without loading LLVM; only emitting the stub needs llvmlite."""
from __future__ import annotations

from dataclasses import dataclass

from .abi import TASK_FIELDS

FRAME_ARRAY_TYPE = len(TASK_FIELDS)
FRAME_INPUTS, FRAME_OUTPUTS = FRAME_ARRAY_TYPE + 1, FRAME_ARRAY_TYPE + 2
FRAME_BUSY = FRAME_ARRAY_TYPE + 3
FRAME_POOL = FRAME_ARRAY_TYPE + 4
POOL_WORDS = 5  # braze_pool_run's address and its task, controls, enter_budget and join_budget arguments
FRAME_HEADER = FRAME_POOL + POOL_WORDS
RECORD_WORDS = 3  # per array: the expected dtype object, rank and address of the expected dims
STUB_BUSY = -1  # what the stub returns when another thread holds the frame
# numpy's NPY_ARRAY_C_CONTIGUOUS, NPY_ARRAY_ALIGNED (data aligned to its dtype) and NPY_ARRAY_WRITEABLE flags
C_CONTIGUOUS, ALIGNED, WRITEABLE = 0x1, 0x100, 0x400


@dataclass(frozen=True)
class ObjectLayout:
    """Byte offsets of the fields the stub reads: in a numpy array object, and of a tuple's first item."""

    type: int
    data: int
    nd: int
    dims: int
    descr: int
    flags: int
    tuple_items: int


def frame_words(inputs: int, outputs: int) -> int:
    """The length of a frame for this many inputs and outputs."""
    return FRAME_HEADER + RECORD_WORDS * (inputs + outputs)
