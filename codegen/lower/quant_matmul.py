"""quantized_matmul, alone or as the anchor of a gemm region: y = g @ W with W (n, k) read packed (quant_decode.py)
and dequantized inside the loop, never as a dense matrix: the input gradient of a packed linear layer.

W's rows are the reduction axis and its columns y's columns, so the kernel is a tiled product (quant_tiles.py)
whose panels are DEPTH rows of W decoded as they are stored. Rows are decoded two at a time, so each one's nibble
parity is static (an odd row of an odd row length starts at a high nibble). The region's elementwise epilogue then
runs over this thread's columns of C (quant_gemm.py).
"""
from __future__ import annotations

import llvmlite.ir as ir

from braze.ir.types import float32

from ..loops import I1, for_range, i64, vector_loop
from .base import Kernel, store
from .quant_decode import PackedWeight, decode
from .quant_gemm import PackedProduct, register_packed
from .quant_tiles import Tiled, panel_bytes, tiled_product


def _rows(p: PackedWeight):
    """The unpack of W's rows: panel[i, :cols] = W[i0 + i, j0:j0 + cols], two rows at a time (i0 even)."""
    def unpack(b: ir.IRBuilder, panel: ir.Value, i0: ir.Value, depth: ir.Value, j0: ir.Value, cols: int,
               tile: int) -> None:
        def row(i: ir.Value, parity: int) -> None:
            def one(j: ir.Value, lanes: int) -> None:
                w = decode(b, p, b.add(i0, i), parity, b.add(j0, j), lanes)
                store(b, w, panel, b.add(b.mul(i, i64(tile)), j), float32)
            vector_loop(b, 0, cols, p.width, one, name="unpack")
        with for_range(b, 0, b.lshr(depth, i64(1)), name="pair") as q:
            even = b.shl(q, i64(1))
            row(even, p.parity(0))
            row(b.add(even, i64(1)), p.parity(1))
        with b.if_then(b.trunc(depth, I1)):
            row(b.sub(depth, i64(1)), p.parity(0))
    return unpack


def _emit(b: ir.IRBuilder, k: Kernel, p: PackedWeight, m: int, g: ir.Value, c: ir.Value, finish) -> None:
    """C = g @ W: W's rows contracted, its columns C's."""
    finish(*tiled_product(b, k, Tiled(g, c, m, p.n, p.k, p.width, _rows(p))))


register_packed("quantized_matmul", PackedProduct(lambda p, m: panel_bytes(p.width), _emit))
