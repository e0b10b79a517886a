"""Lookups in the elementwise nest: a gather reads its table (x) where its indices point, a lane group at a time by
one masked vector gather, each index range-checked (checks.py) and clamped into the table before any address is
formed. A gather node alone is the nest over its indices with this one lookup; inside a fused elementwise region
(the fuse pass's lookups) its result feeds the region's other ops without going through memory.

The nest carries each table as the position its indices add to: the table's walk over the domain has the indexed
axis's stride 0, and a lane's element is that position plus its index times the axis's stride. Indices are read
from memory (the fuse pass takes a gather into a region only so), so a check that saw a bad index scans them once
more after the loop, in the gather's row-major order, for the first bad one, which the reference reports.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import llvmlite.ir as ir

from braze.ir.graph import Node
from braze.ir.ops._common import normalize_axis
from braze.ir.ops.indexing import axis_subject
from braze.ir.views import View, broadcast, contiguous

from ..loops import I32, I64, i64, lane_mask, splat, vector_const
from .base import Kernel, constant, gather, iota, load
from .checks import IndexCheck, index_check
from .nest import Table, TableRow


@dataclass(frozen=True)
class Lookup:
    """A gather evaluated in a nest: its table, the table's stride along the indexed axis, its index check, and
    whether every position in the table fits 32 bits (the x86 gathers then take 16 offsets, not 8)."""

    node: Node
    table: Table
    step: int
    check: IndexCheck
    narrow: bool

    def emit(self, b: ir.IRBuilder, row: TableRow, indices: ir.Value, lanes: int) -> ir.Value:
        """The table's elements at `indices` (one lane group, or one element when lanes is 1), each index clamped
        into the table's axis (the call reports one outside)."""
        dtype = self.table.dtype
        if lanes == 1:
            chosen = self.check.index(indices)
            return load(b, self.table.ptr, b.add(row.offset, b.mul(chosen, i64(self.step))), dtype)
        index = b.sext(indices, ir.VectorType(I64, lanes)) if indices.type.element != I64 else indices
        outside = self.check.outside(index, row.mask)
        typ = ir.VectorType(I32 if self.narrow else I64, lanes)
        edge = b.select(b.icmp_signed("<", index, vector_const(index.type, 0)), vector_const(typ, 0),
                        vector_const(typ, max(self.check.size - 1, 0)))
        index = b.select(outside, edge, b.trunc(index, typ) if self.narrow else index)
        offsets = b.mul(index, vector_const(typ, self.step))
        start = b.trunc(row.offset, typ.element) if self.narrow else row.offset
        offsets = b.add(offsets, splat(b, start, lanes))
        if row.step:
            offsets = b.add(offsets, b.mul(iota(typ.element, lanes), vector_const(typ, row.step)))
        mask = row.mask if row.mask is not None else lane_mask(lanes, lanes)
        return gather(b, self.table.ptr, offsets, dtype, mask, constant(dtype, 0, lanes))


def gather_lookup(k: Kernel, node: Node, table_ptr: ir.Value, table_view: View, indices_ptr: ir.Value,
                  indices_view: View, domain: Sequence[int]) -> Lookup:
    """The lookup of gather `node` in a nest over `domain`, its table (x) and its indices read from kernel operands
    through the given views of their buffers (the indices' view is theirs at the gather's own shape)."""
    x, indices = node.inputs
    axis = normalize_axis("gather", node.attr["axis"], x.type.rank)
    at_index = list(table_view.strides)
    at_index[axis] = 0
    walk = broadcast(View(table_view.offset, tuple(at_index)), indices.shape, domain)
    check = index_check(k, node, 1, x.shape[axis], axis_subject(node.attr["axis"]), ptr=indices_ptr,
                        walk=(indices.shape, indices_view.strides, indices_view.offset))
    span = table_view.offset + sum((d - 1) * s for d, s in zip(x.shape, table_view.strides))
    return Lookup(node, Table(table_ptr, x.dtype, walk), table_view.strides[axis], check, span < 2 ** 31)


def dense_gather_lookup(k: Kernel, node: Node) -> Lookup:
    """The lookup of a gather node of its own: table and indices are its dense operands, the domain its result."""
    x, indices = node.inputs
    return gather_lookup(k, node, k.ins[0], contiguous(x.shape), k.ins[1], contiguous(indices.shape),
                         indices.shape)


__all__ = ["Lookup", "dense_gather_lookup", "gather_lookup"]
