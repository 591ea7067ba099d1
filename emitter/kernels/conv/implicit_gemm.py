"""The implicit GEMM (``ConvGemm``), per image and group:
``out (Cout_g x P) = W (Cout_g x Cin_g*R) * im2col(in) (Cin_g*R x P)``, P the output
pixels and R the window size.

The OIHW weights already are the row-major A matrix; the im2col matrix is never built:
gemm.py packs one KC x NR sliver of it at a time (``Im2colPacker``), reading NR output
pixels per window position with vector loads, masked where the window leaves the image
(zero padding). 1x1 / stride 1 / no padding is a plain GEMM over the input
(``MatrixPacker``); a strided 1x1 window packs its slivers from input rows with wide
loads and a shuffle (``SubsamplePacker``), no gathers.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ...irutil import I32, for_range, i64
from ..epilogue import NO_EPILOGUE, Epilogue
from ..function import Frame
from ..gemm import GemmShape, MatrixPacker, Tiling, emit_gemm, scratch_floats, whole_or_tail
from ..sizes import first_lanes, imin, splat_i32
from ..vec import F32, const_vec, masked_load, offset_ptr, splat, store_vec, vec_type
from .geometry import ConvKernel, ConvWindow, Geometry, LaneCoords, PixelLanes

# Windows of up to this many positions are unrolled in the im2col pack (a 7x7 window's
# 49 among them); longer ones loop over their positions at run time.
UNROLLED_POSITIONS = 64


@dataclass(frozen=True)
class Im2colPacker:
    """Packs a sliver of the implicit im2col matrix of one image and group.

    Row ``c * R + r`` is input channel c under window position r, column n is output
    pixel n. K blocks hold whole channels, so the window loop is unrolled at compile time
    (up to ``UNROLLED_POSITIONS`` positions, a run-time loop beyond).
    """
    w: ConvWindow
    geo: Geometry
    coords: LaneCoords
    base: ir.Value          # channel 0 of the group in this image
    tiling: Tiling
    k_block: int
    first: ir.Value | None = None   # the output pixel of column 0 (ConvGemm.pixel_range)

    def pack(self, b, dst, k0, kc, n0, valid):
        if self.first is not None:
            n0 = b.add(n0, self.first)
        if self.w.contiguous:
            whole_or_tail(b, valid, self.tiling,
                          lambda v: self._pack(b, dst, k0, kc, n0, v, True))
        else:
            # Gathers read any lane anywhere: lanes past the last pixel re-read pixel n0,
            # so one copy of the (large, unrolled) window loop serves the tail too.
            self._pack(b, dst, k0, kc, n0, valid, False)

    def _pack(self, b, dst, k0, kc, n0, valid, mask_tail: bool):
        """``mask_tail``: lanes past ``valid`` load zeros; else they read pixel n0 (or,
        ``valid`` None, all lanes are real)."""
        t, w = self.tiling, self.w
        rows = []
        for v in range(t.nv):
            coords = self.coords.at(b, n0, v)
            real = None if valid is None else first_lanes(b, t.lanes, v * t.lanes, valid)
            if real is not None and not mask_tail:
                coords = [b.select(real, c, splat(b, b.extract_element(c0, i64(0)), t.lanes))
                          for c, c0 in zip(coords, self.coords.at(b, n0, 0))]
                real = None
            rows.append(PixelLanes(b, w, self.geo, coords, b.add(n0, i64(v * t.lanes)),
                                   t.lanes, real))
        c0 = b.udiv(k0, i64(w.window))
        with for_range(b, b.udiv(kc, i64(w.window)), "pc") as c:
            chan = offset_ptr(b, self.base, F32, b.mul(b.add(c0, c), self.geo.in_pixels))
            row0 = b.mul(c, i64(w.window * t.nr))

            def position(r, kpos):      # r: an int, or an i64 value
                at = b.add(row0, i64(r * t.nr) if isinstance(r, int) else b.mul(r, i64(t.nr)))
                for v, lanes in enumerate(rows):
                    dst_idx = b.add(at, i64(v * t.lanes))
                    store_vec(b, lanes.load(b, chan, kpos), offset_ptr(b, dst, F32, dst_idx))
            if w.window <= UNROLLED_POSITIONS:
                for r, kpos in enumerate(w.positions):
                    position(r, kpos)
            else:
                # A long window (a 1-D spectrogram's 256 or 400 taps) is a run-time loop:
                # unrolled, one block of thousands of gathers takes LLVM seconds to compile.
                with for_range(b, i64(w.window), "kp") as r:
                    kpos, rest = [], r
                    for size in reversed(w.size):
                        kpos.append(b.urem(rest, i64(size)))
                        rest = b.udiv(rest, i64(size))
                    position(r, tuple(reversed(kpos)))


@dataclass(frozen=True)
class SubsamplePacker:
    """Packs a sliver of the B matrix of a strided 1x1 convolution (``ConvGemm.pieces``)
    of one image and group: column n is output pixel n = oy * ow + ox, which reads input
    pixel (oy * sy, ox * sx) of each channel, without gathers.

    A vector of ``lanes`` output pixels lies on at most ``pieces`` output rows. Each
    piece is one contiguous read of sx * lanes input columns, masked to the columns its
    lanes use, then every sx-th kept (a shuffle); the pieces are ORed together.
    Where the pieces lie is computed once per sliver (one division per vector), so the
    channel loop does only the reads, shuffles, ORs and stores. Lanes past ``valid``
    read nothing and pack zeros."""
    w: ConvWindow
    geo: Geometry
    base: ir.Value          # channel 0 of the group in this image
    tiling: Tiling
    pieces: int
    first: ir.Value | None = None   # the output pixel of column 0 (ConvGemm.pixel_range)

    @property
    def k_block(self) -> int:
        return self.tiling.kc

    def pack(self, b, dst, k0, kc, n0, valid):
        t, geo = self.tiling, self.geo
        sy, sx = self.w.stride
        lanes, span = t.lanes, sx * t.lanes
        if self.first is not None:
            n0 = b.add(n0, self.first)
        ow = geo.out_sp[1]
        row = b.mul(geo.in_sp[1], i64(sy))      # input elements per output row
        # Element e of a wide read is used by lane e / sx where e % sx == 0; the others
        # name a lane no piece holds.
        lane_of = const_vec(I32, [e // sx if e % sx == 0 else lanes for e in range(span)])
        reads = []      # per vector and piece: (offset of the read, its mask)
        for v in range(t.nv):
            p = b.add(n0, i64(v * lanes))
            oy = b.udiv(p, ow)
            ox = b.sub(p, b.mul(oy, ow))
            real = b.sub(valid, i64(v * lanes))
            pieces = []
            for r in range(self.pieces):
                # Lanes [lo, hi) lie on output row oy + r; lane j reads input element
                # (oy + r) * row + sx * (ox + j - r * ow).
                lo = b.sub(b.mul(ow, i64(r)), ox) if r else i64(0)
                hi = imin(b, b.sub(b.mul(ow, i64(r + 1)), ox), real)
                lo32, hi32 = splat_i32(b, lo, span), splat_i32(b, hi, span)
                read = b.and_(b.icmp_signed(">=", lane_of, lo32),
                              b.icmp_signed("<", lane_of, hi32))
                at = b.add(b.mul(b.add(oy, i64(r)), row),
                           b.mul(b.sub(ox, b.mul(ow, i64(r))), i64(sx)))
                pieces.append((at, read))
            reads.append(pieces)
        wide = vec_type(F32, span)
        keep = const_vec(I32, range(0, span, sx))
        bits = vec_type(I32, lanes)
        with for_range(b, kc, "pc") as c:
            chan = offset_ptr(b, self.base, F32, b.mul(b.add(k0, c), geo.in_pixels))
            row0 = b.mul(c, i64(t.nr))
            for v, pieces in enumerate(reads):
                value = None
                for at, read in pieces:
                    x = masked_load(b, offset_ptr(b, chan, F32, at), wide, read)
                    if sx > 1:
                        x = b.shuffle_vector(x, x, keep)
                    # A piece's other lanes read nothing and hold +0.0, all bits clear,
                    # so an OR of the pieces' bits blends them exactly, cheaper than
                    # selects (benchmarks/conv_tuning.md).
                    x = b.bitcast(x, bits)
                    value = x if value is None else b.or_(value, x)
                store_vec(b, b.bitcast(value, vec_type(F32, lanes)),
                          offset_ptr(b, dst, F32, b.add(row0, i64(v * lanes))))


def subsample_pieces(out_cols: int, lanes: int) -> int:
    """The most output rows a vector of ``lanes`` consecutive output pixels lies on."""
    return 1 + -(-(lanes - 1) // out_cols)

@dataclass(frozen=True)
class ConvGemm(ConvKernel):
    """The implicit GEMM (module docstring).

    ``pixel_range`` (the parallel entry's split hook, parallel.py): the call computes
    only output pixels ``px0`` .. ``px0 + pxn`` (two more size arguments), i.e. a block
    of the GEMM's columns, so tasks that split a layer by pixels share no packing (a
    split by output channels packs every im2col sliver in every task)."""
    window: ConvWindow
    tiling: Tiling
    epilogue: Epilogue = NO_EPILOGUE
    pixel_range: bool = False
    # A strided 1x1 window: B is packed from rows of the input (SubsamplePacker), each
    # vector of output pixels lying on at most this many output rows; 0: im2col.
    pieces: int = 0

    @property
    def scratch_bytes(self) -> int:
        return scratch_floats(self.tiling, self.window.k_block(self.tiling)) * 4

    def emit(self, f: Frame) -> None:
        b, w, t = f.b, self.window, self.tiling
        geo = Geometry(b, f.size)
        coords = None if w.is_pointwise or self.pieces else LaneCoords(b, geo, t.lanes, t.nv)
        kg = b.mul(geo.cin_g, i64(w.window))
        px0 = f.size.pixels[0] if self.pixel_range else None
        shape = GemmShape(geo.cout_g, f.size.pixels[1] if self.pixel_range else geo.out_pixels,
                          kg, a_sm=kg, a_sk=i64(1), c_sm=geo.out_pixels)
        with for_range(b, geo.batch, "img") as img:
            with for_range(b, geo.groups, "grp") as grp:
                base, a, ochan0 = geo.group(b, f.lhs, f.rhs, img, grp, kg)
                c_start = b.mul(ochan0, geo.out_pixels)
                if px0 is not None:
                    c_start = b.add(c_start, px0)
                c = offset_ptr(b, f.out, F32, c_start)
                if w.is_pointwise:
                    # 1x1, stride 1, no padding: output pixel n reads input pixel n.
                    packer = MatrixPacker(base if px0 is None else offset_ptr(b, base, F32, px0),
                                          geo.in_pixels, i64(1), True, t, w.k_block(t))
                elif self.pieces:
                    packer = SubsamplePacker(w, geo, base, t, self.pieces, px0)
                else:
                    packer = Im2colPacker(w, geo, coords, base, t, w.k_block(t), px0)
                extra = self.epilogue.moved(b, f.extra, c_start)
                emit_gemm(b, shape, a, c, packer, f.scratch, t,
                          self.epilogue.per_row(extra, b.mul(grp, geo.cout_g), geo.out_pixels,
                                                t.lanes))

