"""conv2d's implicit im2col matrix as the GEMM's B operand, packed straight from the input.

Row k = (ci, kh, kw) of the matrix holds, for each output position p = oh*OW + ow, the input element that tap
(kh, kw) of channel ci multiplies (zero where the window hangs over the padding). K blocks hold whole input
channels (k_unit = kH*kW), so the taps of a block are static: where tap (kh, kw) reads for each vector of a panel
(the load offsets and lane masks) is computed once per panel and reused for every channel of the block, whose
rows then cost one or two masked loads per vector, or one masked gather. (Kernels of more than STATIC_TAPS taps
unroll only the taps of one kernel row, recomputed per row, to bound the code size.)

How a vector of W output positions is read:
- stride 1 or 2 along W and output rows at least W long: the positions are one run of input columns, or two when
  the vector wraps to the next output row. One masked load of stride*W lanes per run (only the lanes the vector
  needs are set), every stride-th lane kept by a shuffle, the two runs joined by a select;
- otherwise: a masked gather with the per-lane offsets.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import llvmlite.ir as ir

from .gemm_kernel import I1, I32, Tiling, const64, elem_ptr, lane_mask, masked_load, store_vec
from .gemm_pack import gather
from .loops import for_range, i64, splat

if TYPE_CHECKING:
    from .conv import ConvSpec

# Loads one vector of a tap's row from an input plane: (builder, plane pointer) -> <W x float>.
VectorLoad = Callable[[ir.IRBuilder, ir.Value], ir.Value]

SEGMENT_STRIDES = (1, 2)
# Kernels with up to this many taps have all of them unrolled, their offsets and masks computed once per panel.
STATIC_TAPS = 49


@dataclass(frozen=True)
class Im2col:
    """The implicit im2col matrix of one image and group (see the module docstring)."""

    spec: ConvSpec
    batch_strides: tuple[int, ...]

    @property
    def k_unit(self) -> int:
        """K blocks are multiples of this: one input channel's taps."""
        return self.spec.kh * self.spec.kw

    def pack_panel(self, builder: ir.IRBuilder, base: ir.Value, col: ir.Value, lanes: int, tiling: Tiling,
                   panel: ir.Value, k0: ir.Value, kc: ir.Value) -> None:
        """Pack rows [k0, k0+kc) of the `lanes` columns from `col` into the NR-wide panel rows at `panel`."""
        s, w = self.spec, tiling.width
        segments = s.stride[1] in SEGMENT_STRIDES and s.out_shape[3] >= w
        reader = self._segment_loads if segments else self._gather_loads

        def reads(b: ir.IRBuilder, kh: ir.Value | int) -> list[list[VectorLoad]]:
            dh = b.mul(i64(kh), const64(s.dilation[0]))
            return [reader(b, col, lanes, w, dh, kw * s.dilation[1]) for kw in range(s.kw)]

        def store_rows(b: ir.IRBuilder, plane: ir.Value, row: ir.Value, loads: list[list[VectorLoad]]) -> None:
            for kw, tap in enumerate(loads):
                at = b.mul(b.add(row, const64(kw)), const64(tiling.nr))
                for v, load in enumerate(tap):
                    store_vec(b, load(b, plane), elem_ptr(b, panel, b.add(at, const64(v * w))))

        taps = self.k_unit
        static = [reads(builder, kh) for kh in range(s.kh)] if taps <= STATIC_TAPS else None
        first = builder.udiv(k0, const64(taps))
        with for_range(builder, 0, builder.udiv(kc, const64(taps)), name="pb.ci") as ci:
            plane = elem_ptr(builder, base, builder.mul(builder.add(first, ci), const64(s.h * s.w)))
            row = builder.mul(ci, const64(taps))
            if static is not None:
                for kh, loads in enumerate(static):
                    store_rows(builder, plane, builder.add(row, const64(kh * s.kw)), loads)
            else:  # a large kernel: only the kW taps of one kernel row are unrolled
                with for_range(builder, 0, s.kh, name="pb.kh") as kh:
                    store_rows(builder, plane, builder.add(row, builder.mul(kh, const64(s.kw))), reads(builder, kh))

    def _origin(self, builder: ir.IRBuilder, p: ir.Value) -> tuple[ir.Value, ir.Value]:
        """Output position p (i64) as its (oh, ow)."""
        oh = builder.udiv(p, const64(self.spec.out_shape[3]))
        return oh, builder.sub(p, builder.mul(oh, const64(self.spec.out_shape[3])))

    def _segment_loads(self, builder: ir.IRBuilder, col: ir.Value, lanes: int, w: int, dh: ir.Value,
                       dw: int) -> list[VectorLoad]:
        """Per vector: the runs of input columns of tap (dh, dw), as (start offset, wide lane mask) pairs."""
        s = self.spec
        sh, sw = s.stride
        ow_count = s.out_shape[3]
        wide = sw * w
        position = ir.Constant(ir.VectorType(I32, wide), [j // sw for j in range(wide)])
        column = ir.Constant(ir.VectorType(I32, wide), list(range(wide)))
        out = []
        for v in range(-(-lanes // w)):
            oh, ow = self._origin(builder, builder.add(col, const64(v * w)))
            needed = ir.Constant(ir.VectorType(I1, wide), [j % sw == 0 and j // sw < min(w, lanes - v * w)
                                                            for j in range(wide)])
            split = builder.sub(const64(ow_count), ow)  # positions before the vector wraps to the next row
            in_first = builder.icmp_signed("<", position, splat(builder, builder.trunc(split, I32), wide))
            ih = builder.add(builder.mul(oh, const64(sh)), builder.sub(dh, const64(s.padding[0])))
            runs = [self._run(builder, ih, builder.add(builder.mul(ow, const64(sw)), const64(dw - s.padding[1])),
                              column, builder.and_(needed, in_first))]
            if ow_count % w:  # vectors start at multiples of W: they wrap only when OW is not one
                start = builder.sub(const64(dw - s.padding[1]), builder.mul(split, const64(sw)))
                runs.append(self._run(builder, builder.add(ih, const64(sh)), start, column,
                                      builder.and_(needed, builder.not_(in_first))))
            out.append(self._joined(runs, in_first, w, sw))
        return out

    def _run(self, builder: ir.IRBuilder, ih: ir.Value, iw: ir.Value, column: ir.Constant,
             lanes: ir.Value) -> tuple[ir.Value, ir.Value]:
        """The start offset and wide lane mask of one run: input row ih, columns iw, iw+1, ... (the set lanes)."""
        s = self.spec
        wide = column.type.count
        inside = builder.icmp_unsigned("<", builder.add(splat(builder, builder.trunc(iw, I32), wide), column),
                                       ir.Constant(column.type, [s.w] * wide))
        row_ok = splat(builder, builder.icmp_unsigned("<", ih, const64(s.h)), wide)
        mask = builder.and_(builder.and_(inside, row_ok), lanes)
        return builder.add(builder.mul(ih, const64(s.w)), iw), mask

    @staticmethod
    def _joined(runs: list, in_first: ir.Value, w: int, sw: int) -> VectorLoad:
        keep = ir.Constant(ir.VectorType(I32, w), [i * sw for i in range(w)])

        def load(b: ir.IRBuilder, plane: ir.Value) -> ir.Value:
            values = []
            for start, mask in runs:
                value = masked_load(b, elem_ptr(b, plane, start), mask, w * sw)
                values.append(value if sw == 1 else b.shuffle_vector(value, ir.Constant(value.type, ir.Undefined), keep))
            if len(values) == 1:
                return values[0]
            first = in_first if sw == 1 else b.shuffle_vector(in_first, ir.Constant(in_first.type, ir.Undefined), keep)
            return b.select(first, values[0], values[1])
        return load

    def _gather_loads(self, builder: ir.IRBuilder, col: ir.Value, lanes: int, w: int, dh: ir.Value,
                      dw: int) -> list[VectorLoad]:
        """Per vector: each lane's offset in the plane for tap (dh, dw), and the lanes inside the input."""
        s = self.spec
        vi32 = ir.VectorType(I32, w)
        out = []
        for v in range(-(-lanes // w)):
            p = builder.add(splat(builder, builder.trunc(builder.add(col, const64(v * w)), I32), w),
                            ir.Constant(vi32, list(range(w))))
            oh = builder.udiv(p, _vconst(w, s.out_shape[3]))
            ow = builder.sub(p, builder.mul(oh, _vconst(w, s.out_shape[3])))
            row = builder.trunc(builder.sub(dh, const64(s.padding[0])), I32)
            ih = builder.add(builder.mul(oh, _vconst(w, s.stride[0])), splat(builder, row, w))
            iw = builder.add(builder.mul(ow, _vconst(w, s.stride[1])), _vconst(w, dw - s.padding[1]))
            inside = builder.and_(builder.icmp_unsigned("<", ih, _vconst(w, s.h)),
                                  builder.icmp_unsigned("<", iw, _vconst(w, s.w)))
            mask = builder.and_(inside, lane_mask(w, min(w, lanes - v * w)))
            index = builder.add(builder.mul(ih, _vconst(w, s.w)), iw)
            out.append(lambda b, plane, index=index, mask=mask: gather(b, plane, index, mask))
        return out


def _vconst(width: int, value: int) -> ir.Constant:
    return ir.Constant(ir.VectorType(I32, width), [value] * width)


__all__ = ["Im2col"]
