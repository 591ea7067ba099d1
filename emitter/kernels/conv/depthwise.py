"""Depthwise convolution (one input channel per group, few outputs per group) vectorized
over flat vectors of output pixels, which run across rows: the R weights of a channel
broadcast once (``Depthwise``). The path for maps whose rows fill vectors badly
(DepthwiseRows takes the others) and for any window rank.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ...irutil import I32, alloca_once, for_range, i64
from ..epilogue import NO_EPILOGUE, Epilogue
from ..function import Frame
from ..vec import F32, fma, offset_ptr, splat, vec_type, zeros
from .geometry import (ConvKernel, ConvWindow, Geometry, LaneCoords, PixelLanes,
                       pixel_vectors, store_pixels)


@dataclass(frozen=True)
class Depthwise(ConvKernel):
    """Direct convolution, one input channel per group, vectorized over output pixels."""
    window: ConvWindow
    lanes: int
    epilogue: Epilogue = NO_EPILOGUE

    def emit(self, f: Frame) -> None:
        b, w, lanes = f.b, self.window, self.lanes
        geo = Geometry(b, f.size)
        coords = LaneCoords(b, geo, lanes, 1)
        vty = vec_type(F32, lanes)
        state = [alloca_once(b, vec_type(I32, lanes), f"coord{i}") for i in range(w.rank)]
        with for_range(b, geo.batch, "img") as img:
            with for_range(b, geo.cout, "oc") as oc:
                chan, dst, ws, values, extra = channel_of(b, f, geo, w, self.epilogue, lanes,
                                                          img, oc)

                def pixels(n0, valid, here):
                    px = PixelLanes(b, w, geo, here, n0, lanes, valid)
                    acc = zeros(vty)
                    for r, kpos in enumerate(w.positions):
                        acc = fma(b, ws[r], px.load(b, chan, kpos), acc)
                    acc = self.epilogue.apply(
                        b, acc, values | self.epilogue.full(b, extra, n0, valid, lanes))
                    store_pixels(b, acc, offset_ptr(b, dst, F32, n0), valid)

                pixel_vectors(b, geo, coords, state, pixels)


def channel_of(b: ir.IRBuilder, f: Frame, geo: Geometry, w: ConvWindow, epilogue: Epilogue,
               lanes: int, img, oc) -> tuple:
    """Output channel ``oc`` of image ``img`` of a depthwise kernel: its input channel,
    its output plane, its weights broadcast to ``lanes``, the epilogue's operands of
    the channel and those moved to the plane."""
    ic = b.add(b.mul(img, geo.cin), b.udiv(oc, geo.cout_g))
    chan = offset_ptr(b, f.lhs, F32, b.mul(ic, geo.in_pixels))
    dst_start = b.mul(b.add(b.mul(img, geo.cout), oc), geo.out_pixels)
    dst = offset_ptr(b, f.out, F32, dst_start)
    wrow = offset_ptr(b, f.rhs, F32, b.mul(oc, i64(w.window)))
    ws = [splat(b, b.load(offset_ptr(b, wrow, F32, r), typ=F32), lanes)
          for r in range(w.window)]
    return (chan, dst, ws, epilogue.values(b, f.extra, oc, lanes),
            epilogue.moved(b, f.extra, dst_start))
