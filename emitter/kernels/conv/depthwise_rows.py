"""Depthwise 2-D convolution along output rows (``DepthwiseRows``)."""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ...irutil import for_range, i64
from ..epilogue import NO_EPILOGUE, Epilogue
from ..function import Frame
from ..sizes import first_lanes
from ..vec import F32, fma, masked_store, offset_ptr, store_vec, vec_type, zeros
from .depthwise import channel_of
from .geometry import ConvKernel, ConvWindow, Geometry, row_interior, row_vector


@dataclass(frozen=True)
class DepthwiseRows(ConvKernel):
    """Depthwise 2-D convolution (one input channel per group), vectorized along output
    rows: ``lanes`` consecutive output columns of one row, the window unrolled with its
    weights in registers (splatted once per channel).

    The layout is ONNX's NCHW, so the columns of a row are contiguous and lanes over
    them read as well as lanes over channels would in NHWC, with no transposes around
    the layer. Padding is handled by splitting each dim into the border and the
    interior: output rows whose window rows all lie in the image, and vectors of
    columns whose window columns do, read with plain vector loads, ``block`` rows by
    ``unroll`` vectors at a time, so that independent chains of FMAs hide their latency
    and, at stride 1, rows of a block share the input rows they read; the border
    rows select zeros for the window rows outside the image, and the border vectors
    (and the last, partial one) mask their loads and stores. A stride-s row reads s *
    lanes contiguous columns once per window position and keeps every s-th (a shuffle,
    no gather). ``lanes`` is the target's vector width, halved for narrow images.

    Taken for column strides 2 to ``ConvTuning.rows_max_stride``, where it beats
    Depthwise's gathers, and at stride 1 where an output row fills more than half a
    vector; on narrower maps Depthwise's flat vectors of pixels, which run across rows,
    waste fewer lanes (benchmarks/conv_tuning.md).
    """
    window: ConvWindow
    lanes: int
    block: int = 1      # interior output rows per step
    unroll: int = 4     # interior vectors of columns per step
    epilogue: Epilogue = NO_EPILOGUE

    def emit(self, f: Frame) -> None:
        b, w, lanes = f.b, self.window, self.lanes
        geo = Geometry(b, f.size)
        oh = geo.out_sp[0]
        rows_lo, rows_hi, (v_lo, v_hi, v_unrolled, nv) = row_interior(b, w, geo, lanes,
                                                                      self.unroll)
        vectors = (v_lo, v_hi, v_unrolled, nv)
        # Interior rows in blocks of ``block`` (then one by one): neighbouring output
        # rows share input rows at stride 1, each loaded once for the block.
        rows_blocked = b.add(rows_lo, b.mul(b.udiv(b.sub(rows_hi, rows_lo), i64(self.block)),
                                            i64(self.block)))
        row_ranges = [(i64(0), rows_lo, True, 1), (rows_lo, rows_blocked, False, self.block),
                      (rows_blocked, rows_hi, False, 1), (rows_hi, oh, True, 1)]
        if self.block == 1:
            del row_ranges[2]
        with for_range(b, geo.batch, "img") as img:
            with for_range(b, geo.cout, "oc") as oc:
                row = _DepthwiseRow(self, b, geo, *channel_of(b, f, geo, w, self.epilogue,
                                                              lanes, img, oc))
                for start, stop, checked, block in row_ranges:
                    with for_range(b, stop, "oy", start=start, step=block) as oy:
                        row.emit(oy, checked, vectors, block)


class _DepthwiseRow:
    """The code of one output row of DepthwiseRows."""

    def __init__(self, k: DepthwiseRows, b: ir.IRBuilder, geo: Geometry, chan, dst, ws,
                 values, extra):
        self.k, self.b, self.geo, self.chan, self.dst, self.ws = k, b, geo, chan, dst, ws
        self.values, self.extra = values, extra
        self.vty = vec_type(F32, k.lanes)

    def emit(self, oy, checked: bool, vectors, block: int) -> None:
        """Output rows ``oy`` .. ``oy + block``; ``checked``: some window rows may lie
        outside the image. An input row is addressed by its offset from row oy * stride
        - pad (``r * stride + ky * dil`` for output row oy + r)."""
        b, w = self.b, self.k.window
        v_lo, v_hi, v_unrolled, nv = vectors
        ih, iw = self.geo.in_sp
        (sh, _), (ph, _), (dh, _) = w.stride, w.pad_low, w.dil
        self.block, self.rows, self.valid = block, {}, {}
        for j in sorted({r * sh + ky * dh for r in range(block) for ky in range(w.size[0])}):
            iy = b.add(b.mul(oy, i64(sh)), i64(j - ph))
            valid = None
            if checked:
                valid = b.icmp_unsigned("<", iy, ih)
                iy = b.select(valid, iy, i64(0))
            self.rows[j] = offset_ptr(b, self.chan, F32, b.mul(iy, iw))
            self.valid[j] = valid
        self.row_start = [b.mul(b.add(oy, i64(r)), self.geo.out_sp[1]) for r in range(block)]
        self.out_row = [offset_ptr(b, self.dst, F32, start) for start in self.row_start]
        # The left and right borders stay separate loops (as the border rows do): where a
        # model's sizes reach the kernel as constants, their masks fold; one loop over
        # both would build them at run time, and on narrow maps borders are most vectors.
        with for_range(b, v_lo, "vb") as v:
            self._vectors(v, 1, masked=True)
        with for_range(b, v_unrolled, "vu", start=v_lo, step=self.k.unroll) as v:
            self._vectors(v, self.k.unroll, masked=False)
        with for_range(b, v_hi, "vi", start=v_unrolled) as v:
            self._vectors(v, 1, masked=False)
        with for_range(b, nv, "ve", start=v_hi) as v:
            self._vectors(v, 1, masked=True)

    def _vectors(self, v, count: int, masked: bool) -> None:
        """``count`` vectors of output columns from vector ``v`` of each row of the
        block."""
        b, w, lanes = self.b, self.k.window, self.k.lanes
        (sh, _), (dh, _) = w.stride, w.dil
        ow = self.geo.out_sp[1]
        x0s = [b.mul(b.add(v, i64(u)), i64(lanes)) for u in range(count)]
        accs = [[zeros(self.vty)] * count for _ in range(self.block)]
        loaded = {}
        for i, (ky, kx) in enumerate(w.positions):
            for r in range(self.block):
                j = r * sh + ky * dh
                for u, x0 in enumerate(x0s):
                    if (j, kx, u) not in loaded:
                        loaded[j, kx, u] = row_vector(b, w, lanes, self.geo, self.rows[j],
                                                       self.valid[j], kx, x0, masked)
                    accs[r][u] = fma(b, self.ws[i], loaded[j, kx, u], accs[r][u])
        epilogue = self.k.epilogue
        for r in range(self.block):
            for x0, acc in zip(x0s, accs[r]):
                mask = first_lanes(b, lanes, 0, b.sub(ow, x0)) if masked else None
                full = epilogue.full(b, self.extra, b.add(self.row_start[r], x0), mask, lanes)
                acc = epilogue.apply(b, acc, self.values | full)
                ptr = offset_ptr(b, self.out_row[r], F32, x0)
                if masked:
                    masked_store(b, acc, ptr, mask)
                else:
                    store_vec(b, acc, ptr)

