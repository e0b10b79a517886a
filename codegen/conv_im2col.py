"""conv2d's implicit im2col matrix as the GEMM's B operand, packed straight from the input.

Row k = (ci, kh, kw) of the matrix holds, for each output position p = oh*OW + ow, the input element that tap
(kh, kw) of channel ci multiplies (zero where the window hangs over the padding). K blocks hold whole input
channels (k_unit = kH*kW), so every tap has a row in each channel of a block: a loop over the kernel rows computes
where each tap (kh, kw) of the row reads for each vector of a panel (the load offsets and lane masks) once per
panel and reuses it for those taps' rows of every channel of the block, which then cost one or two masked loads
per vector, or one masked gather. Only the kW taps of a kernel row are unrolled (all kH*kW unrolled, the packers
were half of a conv model's LLVM IR; a single tap per channel step measured 6-13% slower packing).

How a vector of W output positions is read:
- stride 1 or 2 along W, and a vector spans at most MAX_RUNS output rows: the positions in each output row are
  one run of input columns. One masked load of stride*W lanes per run (only the lanes of the run's positions are
  set), every stride-th lane kept by a shuffle, the runs joined by selects;
- otherwise: a masked gather with the per-lane offsets.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import llvmlite.ir as ir

from .gemm_kernel import I1, I32, L1, Tiling, const64, elem_ptr, lane_mask, masked_load, prefetch, store_vec
from .gemm_pack import gather
from .loops import for_range, splat, undef, vector_const

if TYPE_CHECKING:
    from .conv import ConvSpec

# Loads one vector of a tap's row from an input plane: (builder, plane pointer) -> <W x float>.
VectorLoad = Callable[[ir.IRBuilder, ir.Value], ir.Value]


@dataclass(frozen=True)
class TapVector:
    """How one vector of a tap's row is read from an input plane: `load` reads it; `starts` are the plane offsets
    of the runs it reads (none for a gather), which the packer prefetches a few channels ahead."""

    load: VectorLoad
    starts: tuple[ir.Value, ...] = ()


SEGMENT_STRIDES = (1, 2)
# A vector touching more output rows than this is gathered (short rows: one load per row would cost more).
MAX_RUNS = 3
# The packer prefetches the runs of a kernel row's first tap this many input channels ahead: consecutive channels'
# rows lie a plane apart (4 KB for 32 x 32 floats), a jump the stream prefetchers need not follow, and the packing
# of the CNN's stride-2 layers was 13-14% of their time on AVX2 (from the same layers with twice the output channels,
# which pack the same panels). Compiled side by side, one Zen 4 thread: AVX2 64->128 stride 2 at 16x16, batch 64
# (its input 4 MB, from L3) 2.6-4% faster in five runs; the CNN's other layers and stride-1 3x3 layers of 32-128
# channels, AVX2 and AVX-512, batch 1-64, within 1% either way in most runs, up to 2.6% faster in some.
PREFETCH_CHANNELS = 4


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
        """Pack rows [k0, k0+kc) of the `lanes` columns from `col` into the NR-wide panel rows at `panel`: per kernel
        row, where its taps read (offsets and masks) once, then their rows of every input channel of the block."""
        s, w = self.spec, tiling.width
        segments = s.stride[1] in SEGMENT_STRIDES and _rows_per_vector(s.out_shape[3], w) <= MAX_RUNS
        reader = self._segment_loads if segments else self._gather_loads
        taps = self.k_unit
        first = builder.udiv(k0, const64(taps))
        with for_range(builder, 0, s.kh, name="pb.kh") as kh:
            dh = builder.mul(kh, const64(s.dilation[0]))
            loads = [reader(builder, col, lanes, w, dh, const64(kw * s.dilation[1])) for kw in range(s.kw)]
            ahead = const64(PREFETCH_CHANNELS * s.h * s.w)
            with for_range(builder, 0, builder.udiv(kc, const64(taps)), name="pb.ci") as ci:
                plane = elem_ptr(builder, base, builder.mul(builder.add(first, ci), const64(s.h * s.w)))
                for start in (start for vector in loads[0] for start in vector.starts):
                    prefetch(builder, elem_ptr(builder, plane, builder.add(start, ahead)), L1)
                row = builder.add(builder.mul(ci, const64(taps)), builder.mul(kh, const64(s.kw)))
                for kw, tap in enumerate(loads):
                    at = builder.mul(builder.add(row, const64(kw)), const64(tiling.nr))
                    for v, vector in enumerate(tap):
                        dst = elem_ptr(builder, panel, builder.add(at, const64(v * w)))
                        store_vec(builder, vector.load(builder, plane), dst)

    def _origin(self, builder: ir.IRBuilder, p: ir.Value) -> tuple[ir.Value, ir.Value]:
        """Output position p (i64) as its (oh, ow)."""
        oh = builder.udiv(p, const64(self.spec.out_shape[3]))
        return oh, builder.sub(p, builder.mul(oh, const64(self.spec.out_shape[3])))

    def _segment_loads(self, builder: ir.IRBuilder, col: ir.Value, lanes: int, w: int, dh: ir.Value,
                       dw: ir.Value) -> list[TapVector]:
        """Per vector: one run of input columns of tap (dh, dw) per output row the vector's positions lie in."""
        s = self.spec
        sh, sw = s.stride
        ow_count = s.out_shape[3]
        wide = sw * w
        position = vector_const(ir.VectorType(I32, wide), [j // sw for j in range(wide)])
        column = vector_const(ir.VectorType(I32, wide), list(range(wide)))
        shift = builder.sub(dw, const64(s.padding[1]))
        out = []
        for v in range(-(-lanes // w)):
            oh, ow = self._origin(builder, builder.add(col, const64(v * w)))
            needed = vector_const(ir.VectorType(I1, wide), [j % sw == 0 and j // sw < min(w, lanes - v * w)
                                                            for j in range(wide)])
            ih = builder.add(builder.mul(oh, const64(sh)), builder.sub(dh, const64(s.padding[0])))
            split = builder.sub(const64(ow_count), ow)  # positions before the vector wraps to the next row
            runs, starts = [], []
            for r in range(_rows_per_vector(ow_count, w)):
                # Run r holds positions [first, first + OW) (run 0: [0, split)), in input row ih + r*sh; position
                # i of a later run is at column (i - first)*sw + dw - pw, of run 0 at (ow + i)*sw + dw - pw.
                first = const64(0) if r == 0 else builder.add(split, const64((r - 1) * ow_count))
                end = split if r == 0 else builder.add(first, const64(ow_count))
                inside = builder.and_(_at_least(builder, position, first),
                                      builder.not_(_at_least(builder, position, end)))
                origin = ow if r == 0 else builder.neg(first)
                iw = builder.add(builder.mul(origin, const64(sw)), shift)
                runs.append(self._run(builder, builder.add(ih, const64(r * sh)), iw, column,
                                      builder.and_(needed, inside)))
                starts.append(first)
            out.append(TapVector(self._joined(runs, starts, w, sw), tuple(start for start, _ in runs)))
        return out

    def _run(self, builder: ir.IRBuilder, ih: ir.Value, iw: ir.Value, column: ir.Constant,
             lanes: ir.Value) -> tuple[ir.Value, ir.Value]:
        """The start offset and wide lane mask of one run: input row ih, columns iw, iw+1, ... (the set lanes)."""
        s = self.spec
        wide = column.type.count
        inside = builder.icmp_unsigned("<", builder.add(splat(builder, builder.trunc(iw, I32), wide), column),
                                       vector_const(column.type, [s.w] * wide))
        row_ok = splat(builder, builder.icmp_unsigned("<", ih, const64(s.h)), wide)
        mask = builder.and_(builder.and_(inside, row_ok), lanes)
        return builder.add(builder.mul(ih, const64(s.w)), iw), mask

    @staticmethod
    def _joined(runs: list, starts: list, w: int, sw: int) -> VectorLoad:
        """Load every run and keep, in each lane, the run its position lies in."""
        keep = vector_const(ir.VectorType(I32, w), [i * sw for i in range(w)])
        iota = vector_const(ir.VectorType(I32, w), list(range(w)))

        def load(b: ir.IRBuilder, plane: ir.Value) -> ir.Value:
            value = None
            for (start, mask), first in zip(runs, starts):
                run = masked_load(b, elem_ptr(b, plane, start), mask, w * sw)
                run = run if sw == 1 else b.shuffle_vector(run, undef(run.type), keep)
                value = run if value is None else b.select(_at_least(b, iota, first), run, value)
            return value
        return load

    def _gather_loads(self, builder: ir.IRBuilder, col: ir.Value, lanes: int, w: int, dh: ir.Value,
                      dw: ir.Value) -> list[TapVector]:
        """Per vector: each lane's offset in the plane for tap (dh, dw), and the lanes inside the input."""
        s = self.spec
        vi32 = ir.VectorType(I32, w)
        shift = splat(builder, builder.trunc(builder.sub(dw, const64(s.padding[1])), I32), w)
        out = []
        for v in range(-(-lanes // w)):
            p = builder.add(splat(builder, builder.trunc(builder.add(col, const64(v * w)), I32), w),
                            vector_const(vi32, list(range(w))))
            oh = builder.udiv(p, _vconst(w, s.out_shape[3]))
            ow = builder.sub(p, builder.mul(oh, _vconst(w, s.out_shape[3])))
            row = builder.trunc(builder.sub(dh, const64(s.padding[0])), I32)
            ih = builder.add(builder.mul(oh, _vconst(w, s.stride[0])), splat(builder, row, w))
            iw = builder.add(builder.mul(ow, _vconst(w, s.stride[1])), shift)
            inside = builder.and_(builder.icmp_unsigned("<", ih, _vconst(w, s.h)),
                                  builder.icmp_unsigned("<", iw, _vconst(w, s.w)))
            mask = builder.and_(inside, lane_mask(w, min(w, lanes - v * w)))
            index = builder.add(builder.mul(ih, _vconst(w, s.w)), iw)
            out.append(TapVector(lambda b, plane, index=index, mask=mask: gather(b, plane, index, mask)))
        return out


def _at_least(builder: ir.IRBuilder, lanes: ir.Constant, bound: ir.Value) -> ir.Value:
    """lanes[i] >= bound, lane by lane (bound an i64 scalar)."""
    return builder.icmp_signed(">=", lanes, splat(builder, builder.trunc(bound, I32), lanes.type.count))


def _rows_per_vector(ow: int, w: int) -> int:
    """The most output rows W consecutive positions starting at a multiple of W can touch."""
    if ow % w == 0 or w % ow == 0:
        return max(1, w // ow)
    return -(-(w - 1) // ow) + 1


def _vconst(width: int, value: int) -> ir.Constant:
    return vector_const(ir.VectorType(I32, width), [value] * width)


__all__ = ["Im2col"]
