"""Direct 2-D convolution of few channels along output rows (``RowConv``): the stems
ChannelConv does not take."""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ...irutil import alloca_once, for_range, i64
from ..epilogue import NO_EPILOGUE, Epilogue
from ..function import Frame
from ..sizes import first_lanes, imin
from ..vec import F32, fma, masked_store, offset_ptr, splat, store_vec, vec_type, zeros
from .geometry import ConvKernel, ConvWindow, Geometry, row_interior, row_vector


@dataclass(frozen=True)
class RowConv(ConvKernel):
    """Direct 2-D convolution of few input and output channels per group (stems such as
    MobileNetV1's 3->8 3x3/2 on a 96x96 image), vectorized along output rows as
    DepthwiseRows is: a tile of ``mr`` output channels by ``unroll`` vectors of ``lanes``
    consecutive output columns of one row, summed over the group's input channels (a
    run-time loop) and the window positions (unrolled). Each input vector is read once
    per tile (``row_vector``: plain loads at stride 1, wide loads and a shuffle at 2 to
    4; border rows and vectors checked, the interior not, as in DepthwiseRows) and feeds
    ``mr`` FMAs, one per output channel, whose weights are broadcast from memory (OIHW,
    as they come: no packing, so the weights may be computed at run time). Channels of
    a tile past the group's last one recompute it (same weights, same value), so every
    tile is ``mr`` channels high.

    ChannelConv, the other stem kernel, has output channels in its lanes: it needs them
    a multiple of the lanes (8 of 16 would leave its vectors half empty) and constant
    weights; RowConv takes the stems it does not.
    """
    window: ConvWindow
    lanes: int
    mr: int         # output channels per tile
    unroll: int     # vectors of columns per tile in a row's interior
    epilogue: Epilogue = NO_EPILOGUE

    def emit(self, f: Frame) -> None:
        b, w, lanes, mr = f.b, self.window, self.lanes, self.mr
        geo = Geometry(b, f.size)
        oh = geo.out_sp[0]
        rows_lo, rows_hi, (v_lo, v_hi, v_unrolled, nv) = row_interior(b, w, geo, lanes,
                                                                      self.unroll)
        kg = b.mul(geo.cin_g, i64(w.window))
        last = b.sub(geo.cout_g, i64(1))
        acc = [[alloca_once(b, vec_type(F32, lanes), f"racc{m}.{u}")
                for u in range(self.unroll)] for m in range(mr)]
        with for_range(b, geo.batch, "img") as img:
            with for_range(b, geo.groups, "grp") as grp:
                chan0 = b.add(b.mul(img, geo.cin), b.mul(grp, geo.cin_g))
                x = offset_ptr(b, f.lhs, F32, b.mul(chan0, geo.in_pixels))
                ochan0 = b.add(b.mul(img, geo.cout), b.mul(grp, geo.cout_g))
                with for_range(b, geo.cout_g, "oc", step=mr) as oc:
                    chans = [imin(b, b.add(oc, i64(m)), last) if m else oc for m in range(mr)]
                    channels = [b.add(b.mul(grp, geo.cout_g), c) for c in chans]
                    starts = [b.mul(b.add(ochan0, c), geo.out_pixels) for c in chans]
                    tile = _RowTile(
                        self, b, geo, x, acc,
                        weights=[offset_ptr(b, f.rhs, F32, b.mul(c, kg)) for c in channels],
                        dst=[offset_ptr(b, f.out, F32, start) for start in starts],
                        values=[self.epilogue.values(b, f.extra, c, lanes) for c in channels],
                        extra=[self.epilogue.moved(b, f.extra, start) for start in starts])
                    for start, stop, checked in ((i64(0), rows_lo, True),
                                                 (rows_lo, rows_hi, False),
                                                 (rows_hi, oh, True)):
                        with for_range(b, stop, "oy", start=start) as oy:
                            tile.row(oy, checked, v_lo, v_hi, v_unrolled, nv)


class _RowTile:
    """The code of one output row of RowConv's tile of channels: per channel of the
    tile, its weights, output plane, epilogue operands (per channel and moved to its
    plane); ``acc``: the accumulators (allocas), channels by vectors."""

    def __init__(self, k: RowConv, b: ir.IRBuilder, geo: Geometry, x, acc, weights, dst,
                 values, extra):
        self.k, self.b, self.geo, self.x, self.acc = k, b, geo, x, acc
        self.weights, self.dst, self.values, self.extra = weights, dst, values, extra
        self.vty = vec_type(F32, k.lanes)

    def row(self, oy, checked: bool, v_lo, v_hi, v_unrolled, nv) -> None:
        """Output row ``oy``; ``checked``: some window rows may lie outside the image."""
        b, w = self.b, self.k.window
        ih, iw = self.geo.in_sp
        (sh, _), (ph, _), (dh, _) = w.stride, w.pad_low, w.dil
        self.offsets, self.valid = [], []
        for ky in range(w.size[0]):
            iy = b.add(b.mul(oy, i64(sh)), i64(ky * dh - ph))
            valid = None
            if checked:
                valid = b.icmp_unsigned("<", iy, ih)
                iy = b.select(valid, iy, i64(0))
            self.offsets.append(b.mul(iy, iw))
            self.valid.append(valid)
        self.row_start = b.mul(oy, self.geo.out_sp[1])
        unroll = self.k.unroll
        with for_range(b, v_lo, "vb") as v:
            self._vectors(v, 1, masked=True)
        with for_range(b, v_unrolled, "vu", start=v_lo, step=unroll) as v:
            self._vectors(v, unroll, masked=False)
        with for_range(b, v_hi, "vi", start=v_unrolled) as v:
            self._vectors(v, 1, masked=False)
        with for_range(b, nv, "ve", start=v_hi) as v:
            self._vectors(v, 1, masked=True)

    def _vectors(self, v, count: int, masked: bool) -> None:
        """``count`` vectors of output columns from vector ``v`` of the row, for each
        channel of the tile."""
        b, k, geo = self.b, self.k, self.geo
        w, lanes = k.window, k.lanes
        x0s = [b.mul(b.add(v, i64(u)), i64(lanes)) for u in range(count)]
        acc = [row[:count] for row in self.acc]
        for a in (a for row in acc for a in row):
            b.store(zeros(self.vty), a)
        with for_range(b, geo.cin_g, "ic") as c:
            plane = offset_ptr(b, self.x, F32, b.mul(c, geo.in_pixels))
            rows = [offset_ptr(b, plane, F32, off) for off in self.offsets]
            wk = [offset_ptr(b, weights, F32, b.mul(c, i64(w.window)))
                  for weights in self.weights]
            for r, (ky, kx) in enumerate(w.positions):
                xs = [row_vector(b, w, lanes, geo, rows[ky], self.valid[ky], kx, x0, masked)
                      for x0 in x0s]
                for m, row in enumerate(acc):
                    wv = splat(b, b.load(offset_ptr(b, wk[m], F32, i64(r)), typ=F32), lanes)
                    for a, xv in zip(row, xs):
                        b.store(fma(b, wv, xv, b.load(a, typ=self.vty)), a)
        epilogue, ow = k.epilogue, geo.out_sp[1]
        for u, x0 in enumerate(x0s):
            mask = first_lanes(b, lanes, 0, b.sub(ow, x0)) if masked else None
            at = b.add(self.row_start, x0)
            for m, row in enumerate(acc):
                full = epilogue.full(b, self.extra[m], at, mask, lanes)
                value = epilogue.apply(b, b.load(row[u], typ=self.vty),
                                       self.values[m] | full)
                ptr = offset_ptr(b, self.dst[m], F32, at)
                if masked:
                    masked_store(b, value, ptr, mask)
                else:
                    store_vec(b, value, ptr)

