"""Direct convolution of any channels with no scratch (``DirectConv``)."""
from __future__ import annotations

from dataclasses import dataclass

from ...irutil import alloca_once, for_range, i64
from ..epilogue import NO_EPILOGUE, Epilogue
from ..function import Frame
from ..gemm import Tiling
from ..sizes import first_lanes, imin
from ..vec import F32, fma, offset_ptr, splat, vec_type, zeros
from .geometry import ConvKernel, ConvWindow, Geometry, LaneCoords, PixelLanes, store_pixels

# DirectConv unrolls the window positions into straight-line code: beyond this many (an
# STFT's 512-tap window in a speech front end) LLVM takes minutes over the unrolled
# body. The other kernels that unroll or tabulate them keep to it too.
DIRECT_MAX_POSITIONS = 64


@dataclass(frozen=True)
class DirectConv(ConvKernel):
    """Direct convolution for any channels, with no scratch: an MR x NV tile (MR output
    channels by NV vectors of output pixels) in registers, as in the GEMM's micro-kernel,
    summed over the group's input channels and the window positions, the input read in
    place under each position (PixelLanes) instead of from a packed sliver.

    Pixels are the outer loop, so the input under a pixel tile stays in L1 while every
    channel tile reads it. It needs no scratch memory. On stride-1 windows that keep the
    map's size it beats the implicit GEMM with few output channels (fewer channel tiles
    read the input again) and ties with many; on strided ones each channel tile gathers
    the input again, where the GEMM gathers once per sliver, and it loses
    (benchmarks/conv_tuning.md). So it is the fast path only of the 3x3 stride-1 windows
    with few output channels (path.py's ``direct_pays``: ResNet-8's 16-channel layers),
    and elsewhere the lean variant the memory planner picks for convolutions whose
    scratch would raise the arena's peak.
    """
    window: ConvWindow
    tiling: Tiling
    epilogue: Epilogue = NO_EPILOGUE

    def emit(self, f: Frame) -> None:
        b, w, t = f.b, self.window, self.tiling
        lanes, mr, nv = t.lanes, t.mr, t.nv
        geo = Geometry(b, f.size)
        coords = LaneCoords(b, geo, lanes, nv)
        vty = vec_type(F32, lanes)
        p = geo.out_pixels
        kg = b.mul(geo.cin_g, i64(w.window))
        acc = [[alloca_once(b, vty, f"acc{i}.{v}") for v in range(nv)] for i in range(mr)]
        last = b.sub(geo.cout_g, i64(1))
        with for_range(b, geo.batch, "img") as img:
            with for_range(b, geo.groups, "grp") as grp:
                base, wgrp, ochan0 = geo.group(b, f.lhs, f.rhs, img, grp, kg)
                chan_of_group = b.mul(grp, geo.cout_g)
                extra = self.epilogue.moved(b, f.extra, b.mul(ochan0, p))

                def tile(n0, oc0, pxs, real):
                    """Output channels oc0 .. oc0 + MR by the pixels of ``pxs``. Rows past
                    the last channel recompute it (same weights, same value), so every
                    tile is MR rows high."""
                    rows = [imin(b, b.add(oc0, i64(i)), last) if i else oc0 for i in range(mr)]
                    wrows = [offset_ptr(b, wgrp, F32, b.mul(r, kg)) for r in rows]
                    for row in acc:
                        for a in row:
                            b.store(zeros(vty), a)
                    with for_range(b, geo.cin_g, "ic") as c:
                        chan = offset_ptr(b, base, F32, b.mul(c, geo.in_pixels))
                        k0 = b.mul(c, i64(w.window))
                        for r, kpos in enumerate(w.positions):
                            xs = [px.load(b, chan, kpos) for px in pxs]
                            k = b.add(k0, i64(r))
                            for row, wrow in zip(acc, wrows):
                                wk = splat(b, b.load(offset_ptr(b, wrow, F32, k), typ=F32), lanes)
                                for a, x in zip(row, xs):
                                    b.store(fma(b, wk, x, b.load(a, typ=vty)), a)
                    for row, r in zip(acc, rows):
                        dst = offset_ptr(b, f.out, F32, b.mul(b.add(ochan0, r), p))
                        values = self.epilogue.values(b, f.extra, b.add(chan_of_group, r),
                                                      lanes)
                        for v, a in enumerate(row):
                            at = b.add(n0, i64(v * lanes))
                            ptr = offset_ptr(b, dst, F32, at)
                            full = self.epilogue.full(b, extra, b.add(b.mul(r, p), at),
                                                      real[v], lanes)
                            value = self.epilogue.apply(b, b.load(a, typ=vty), values | full)
                            store_pixels(b, value, ptr, real[v])

                def pixels(n0, valid):
                    """Pixels n0 .. n0 + NV*lanes for every output channel of the group
                    (the input under them stays in L1 while the channel tiles run);
                    ``valid``: the real pixels left, or None when all are real."""
                    real = [None if valid is None else first_lanes(b, lanes, v * lanes, valid)
                            for v in range(nv)]
                    pxs = [PixelLanes(b, w, geo, coords.at(b, n0, v),
                                      b.add(n0, i64(v * lanes)), lanes, real[v])
                           for v in range(nv)]
                    with for_range(b, geo.cout_g, "oc", step=mr) as oc0:
                        tile(n0, oc0, pxs, real)

                step = lanes * nv
                full = b.sub(p, b.urem(p, i64(step)))
                with for_range(b, full, "px", step=step) as n0:
                    pixels(n0, None)
                with b.if_then(b.icmp_signed(">", p, full)):
                    pixels(full, b.sub(p, full))

