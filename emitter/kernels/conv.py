"""Convolution kernels.

Fast paths, f32 with ONNX's layout (input/output N C spatial..., kernel O I spatial...),
batch_group_count 1 and no base (lhs) dilation; any stride, padding, window dilation,
feature groups and number of spatial dims:

- implicit GEMM, per image and group: ``out (Cout_g x P) = W (Cout_g x Cin_g*R) *
  im2col(in) (Cin_g*R x P)`` where P is the number of output pixels and R the window
  size. The OIHW weights already are the row-major A matrix; the im2col matrix is never
  built: gemm.py packs one KC x NR sliver of it at a time (``Im2colPacker``), reading
  NR output pixels per window position with vector loads, masked where the window
  leaves the image (zero padding). 1x1 / stride 1 / no padding is a plain GEMM over
  the input (``MatrixPacker``); a strided 1x1 window packs its slivers from input rows
  with wide loads and a shuffle (``SubsamplePacker``), no gathers.
- depthwise (one input channel per group, few outputs per group): direct convolution
  vectorized over output pixels, the R weights of a channel broadcast once
  (``Depthwise``); 2-D windows with a column stride of 2 to 4, or of 1 on maps at least
  half a vector wide, go along output rows instead (``DepthwiseRows``: interior/border
  split, wide loads and a shuffle in place of gathers).
- direct (``DirectConv``, any channels): the same direct scheme with an MR x NV tile of
  output channels by pixels; no scratch: the ``lean`` variant, for the layers where the
  GEMM's packed sliver would raise the arena's peak (the memory planner asks for it),
  and the fast path of 3x3 stride-1 windows that keep the map's size with few output
  channels (``_direct_pays``).
- Winograd F(2x2, 3x3) (winograd.py, ``WinogradConv``): 3x3 stride-1 windows of one
  group with enough channels on large enough maps (``_winograd_pays``); lean: DirectConv.
- channels in lanes (``ChannelConv``): 2-D stems (Cin <= 4), windows on small maps
  (<= 256 output pixels), strided windows of more than one position on any map, and
  1x1 windows on maps below 64 pixels (at stride 1 up to 14 x 14, where the output
  channels fill its panels or K is long), with constant weights, which it takes packed
  at compile time (``pack_weights``): a direct convolution vectorized over output
  channels, each input value broadcast to two vectors of them (three for 1x1 windows),
  the input read in place (reads outside the image left out, checked per row and at
  the edge columns), the next panel's weights prefetched while a panel is computed: no
  scratch, its own lean variant.

All are compiled from the window alone (``ConvWindow``: size, stride, padding,
dilation, slack); batch, groups, channels and image sizes are run-time arguments, so e.g.
every 1x1 convolution of a model shares one function, and every 3x3 pad-1 one another.
The coordinates of a vector of output pixels come from one scalar division of its first
pixel plus the precomputed mixed-radix digits of the lane offsets (``PixelLanes``), so
no vector division runs in the inner loops.

Each fast kernel applies the epilogue of its output fusion (epilogue.py: the bias,
scale, ReLU/ReLU6 and residual add optimizer/fusion.py fuses after a float convolution)
to the results in registers before storing them.

Everything else (other dimension numbers, base dilation, batch groups, other element
types) goes through ``emit_naive_conv``, a loop nest compiled for the exact shapes.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cached_property
from itertools import product
from math import prod

import numpy as np
from llvmlite import ir

from ...hlo import ConvDimensionNumbers, Instruction, Opcode, Shape, Window, dtypes
from ...hlo.fusion import output_fusion_core
from ..irutil import I1, I8, I32, I64, alloca_once, for_range, i64, llvm_type
from . import scalar
from .dot import row_major_strides
from .epilogue import NO_EPILOGUE, Epilogue, EpilogueOperands, plan_epilogue
from .function import Frame, KernelPlan
from .gemm import (GemmShape, MatrixPacker, Tiling, emit_gemm, scratch_floats, tiling_for,
                   whole_or_tail)
from .sizes import first_lanes, imin, product as size_product, splat_i32
from .vec import (F32, const_vec, fma, lane_mask, load_vec, masked_gather, masked_load,
                  masked_store, offset_ptr, prefetch, splat, store_vec, transpose_square,
                  vec_type, zeros)
from .winograd import WinogradConv


@dataclass(frozen=True)
class ConvWindow:
    """What the fast kernels are compiled from: the window, per spatial dim."""
    size: tuple[int, ...]
    stride: tuple[int, ...]
    pad_low: tuple[int, ...]
    pad_high: tuple[int, ...]
    dil: tuple[int, ...]
    # Padded input rows the last window of a strided dim never reaches: (in + pad_low +
    # pad_high - span) % stride. Layers of one model almost always agree on it, and it
    # tells which window positions can fall off the high edge.
    slack: tuple[int, ...]

    @staticmethod
    def of(w: Window, in_sp: tuple[int, ...]) -> "ConvWindow":
        span = [(k - 1) * d + 1 for k, d in zip(w.size, w.rhs_dilation)]
        slack = tuple((n + lo + hi - sp) % s for n, lo, hi, sp, s in
                      zip(in_sp, w.pad_low, w.pad_high, span, w.stride))
        return ConvWindow(w.size, w.stride, w.pad_low, w.pad_high, w.rhs_dilation, slack)

    @property
    def rank(self) -> int:
        return len(self.size)

    @property
    def window(self) -> int:
        return prod(self.size)

    @cached_property
    def positions(self) -> list[tuple[int, ...]]:
        """Window positions in the kernel's row-major order (the K order of the GEMM)."""
        return list(product(*(range(s) for s in self.size)))

    @property
    def contiguous(self) -> bool:
        """Consecutive output pixels read consecutive input elements for every window
        position: stride 1, and each inner dim padded to keep the output as wide as the
        input (pad_low + pad_high = (size - 1) * dil)."""
        return all(s == 1 for s in self.stride) and all(
            lo + hi == (k - 1) * d for lo, hi, k, d in
            zip(self.pad_low[1:], self.pad_high[1:], self.size[1:], self.dil[1:]))

    @property
    def is_pointwise(self) -> bool:
        return all(v == 1 for v in self.size + self.stride) and not any(self.pad_low) \
            and not any(self.pad_high)

    def may_leave(self, i: int, k: int) -> bool:
        """Whether window position k of dim i reads outside the image for some output:
        below it when k * dil < pad_low; above it when the last output reads past in - 1,
        at (out - 1) * stride + k * dil - pad_low
        = in - 1 + pad_high - (size - 1 - k) * dil - slack."""
        return (k * self.dil[i] < self.pad_low[i]
                or self.pad_high[i] - (self.size[i] - 1 - k) * self.dil[i] - self.slack[i] > 0)

    def k_block(self, t: Tiling) -> int:
        """GEMM K block: whole channels, so the window loop is unrolled at compile time."""
        return t.kc if self.is_pointwise else max(1, t.kc // self.window) * self.window


def _size_params(rank: int) -> tuple[str, ...]:
    return (("batch", "groups", "cin_g", "cout_g") + tuple(f"in{i}" for i in range(rank))
            + tuple(f"out{i}" for i in range(rank)))


def _sizes_of(instr: Instruction) -> dict[str, int]:
    x, k = (o.shape for o in instr.operands)
    groups = instr.attrs["feature_group_count"]
    sizes = {"batch": x.dims[0], "groups": groups, "cin_g": x.dims[1] // groups,
             "cout_g": k.dims[0] // groups}
    sizes.update({f"in{i}": d for i, d in enumerate(x.dims[2:])})
    sizes.update({f"out{i}": d for i, d in enumerate(instr.shape.dims[2:])})
    return sizes


class Geometry:
    """The run-time sizes of one call, and the products the loops need."""

    def __init__(self, b: ir.IRBuilder, size: dict[str, ir.Value], rank: int):
        self.batch, self.groups = size["batch"], size["groups"]
        self.cin_g, self.cout_g = size["cin_g"], size["cout_g"]
        self.in_sp = [size[f"in{i}"] for i in range(rank)]
        self.out_sp = [size[f"out{i}"] for i in range(rank)]
        self.cin = b.mul(self.cin_g, self.groups)
        self.cout = b.mul(self.cout_g, self.groups)
        self.in_pixels = size_product(b, self.in_sp)
        self.out_pixels = size_product(b, self.out_sp)
        self.in_strides = [size_product(b, self.in_sp[i + 1:]) for i in range(rank)]


def _digits(b: ir.IRBuilder, value: ir.Value, extents: list[ir.Value]) -> list[ir.Value]:
    """Mixed-radix digits of ``value`` (scalar or vector) over ``extents`` (same shape),
    outermost first; the outermost digit is the unbounded quotient."""
    digits = [None] * len(extents)
    for i in reversed(range(1, len(extents))):
        digits[i] = b.urem(value, extents[i])
        value = b.udiv(value, extents[i])
    digits[0] = value
    return digits


def _add_digits(b: ir.IRBuilder, x: list[ir.Value], y: list[ir.Value],
                extents: list[ir.Value]) -> list[ir.Value]:
    """Mixed-radix ``x + y`` digit by digit (each inner digit < its extent, so one
    conditional subtraction per digit handles the carry)."""
    out, carry = [None] * len(x), None
    for i in reversed(range(len(x))):
        s = b.add(x[i], y[i])
        if carry is not None:
            s = b.add(s, carry)
        if i == 0:
            out[i] = s
            break
        over = b.icmp_unsigned(">=", s, extents[i])
        out[i] = b.select(over, b.sub(s, extents[i]), s)
        carry = b.zext(over, s.type)
    return out


class LaneCoords:
    """Output-pixel coordinates for vectors of ``lanes`` pixels, without vector division:
    ``digits[v]`` are the coordinates of the lane offsets ``v * lanes + j``, computed
    once per call; a vector's coordinates are its first pixel's plus these."""

    def __init__(self, b: ir.IRBuilder, geo: Geometry, lanes: int, vectors: int):
        self.lanes = lanes
        self.extents = [splat_i32(b, e, lanes) for e in geo.out_sp]
        self.scalar_extents = [b.trunc(e, I32) for e in geo.out_sp]
        self.digits = [_digits(b, const_vec(I32, range(v * lanes, (v + 1) * lanes)),
                               self.extents) for v in range(vectors)]
        self.step = [splat(b, d, lanes) for d in
                     _digits(b, ir.Constant(I32, lanes), self.scalar_extents)]

    def at(self, b: ir.IRBuilder, n0: ir.Value, v: int = 0) -> list[ir.Value]:
        """Coordinates (i32 vectors) of pixels ``n0 + v * lanes + j``."""
        first = [splat(b, c, self.lanes)
                 for c in _digits(b, b.trunc(n0, I32), self.scalar_extents)]
        return _add_digits(b, first, self.digits[v], self.extents)

    def advance(self, b: ir.IRBuilder, coords: list[ir.Value]) -> list[ir.Value]:
        """The coordinates ``lanes`` pixels further on."""
        return _add_digits(b, coords, self.step, self.extents)


class PixelLanes:
    """``lanes`` consecutive output pixels from ``n0`` at ``coords``; ``load`` reads the
    input under any window position. ``valid``: the lanes that are real (None: all)."""

    def __init__(self, b: ir.IRBuilder, w: ConvWindow, geo: Geometry, coords, n0: ir.Value,
                 lanes: int, valid: ir.Value | None):
        self.w, self.geo, self.n0, self.lanes, self.valid = w, geo, n0, lanes, valid
        # o_i * stride_i - pad_i, per lane
        self.pos = [b.sub(b.mul(c, _ivec(s, lanes)), _ivec(p, lanes))
                    for c, s, p in zip(coords, w.stride, w.pad_low)]
        self.in_sp = [splat_i32(b, e, lanes) for e in geo.in_sp]
        self.offsets = None
        if not w.contiguous:
            off = _ivec(0, lanes)
            for p, s in zip(self.pos, geo.in_strides):
                off = b.add(off, b.mul(p, splat_i32(b, s, lanes)))
            self.offsets = off

    def load(self, b: ir.IRBuilder, chan: ir.Value, kpos: tuple[int, ...]) -> ir.Value:
        """in[pixel * stride + kpos * dil - pad] for each lane, 0 outside the image."""
        w, lanes = self.w, self.lanes
        mask = self.valid
        for i, k in enumerate(kpos):
            if not w.may_leave(i, k):
                continue
            inside = b.icmp_unsigned("<", b.add(self.pos[i], _ivec(k * w.dil[i], lanes)),
                                     self.in_sp[i])
            mask = inside if mask is None else b.and_(mask, inside)
        vty = vec_type(F32, lanes)
        strides = self.geo.in_strides
        if self.offsets is None:
            # Contiguous: lane j reads element n0 + j + sum((k_i*dil_i - pad_i) * stride_i).
            start = self.n0
            for k, d, p, s in zip(kpos, w.dil, w.pad_low, strides):
                if k * d - p:
                    start = b.add(start, b.mul(i64(k * d - p), s))
            ptr = offset_ptr(b, chan, F32, start)
            return load_vec(b, ptr, vty) if mask is None else masked_load(b, ptr, vty, mask)
        shift = _ivec(0, lanes)
        for k, d, s in zip(kpos, w.dil, strides):
            if k * d:
                shift = b.add(shift, b.mul(_ivec(k * d, lanes), splat_i32(b, s, lanes)))
        all_lanes = lane_mask(lanes, lanes)
        return masked_gather(b, chan, F32, b.add(self.offsets, shift),
                             all_lanes if mask is None else mask)


def _ivec(v: int, lanes: int) -> ir.Constant:
    return const_vec(I32, [v] * lanes)


@dataclass(frozen=True)
class Im2colPacker:
    """Packs a sliver of the implicit im2col matrix of one image and group.

    Row ``c * R + r`` is input channel c under window position r, column n is output
    pixel n. K blocks hold whole channels so the window loop is unrolled at compile time.
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
            for r, kpos in enumerate(w.positions):
                for v, lanes in enumerate(rows):
                    dst_idx = b.add(row0, i64(r * t.nr + v * t.lanes))
                    store_vec(b, lanes.load(b, chan, kpos), offset_ptr(b, dst, F32, dst_idx))


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
                    # so an OR of the pieces' bits blends them exactly (with no masks:
                    # 0.8 of the pack's time against selects).
                    x = b.bitcast(x, bits)
                    value = x if value is None else b.or_(value, x)
                store_vec(b, b.bitcast(value, vec_type(F32, lanes)),
                          offset_ptr(b, dst, F32, b.add(row0, i64(v * lanes))))


def subsample_pieces(out_cols: int, lanes: int) -> int:
    """The most output rows a vector of ``lanes`` consecutive output pixels lies on."""
    return 1 + -(-(lanes - 1) // out_cols)


# --- the kernels ------------------------------------------------------------------------

@dataclass(frozen=True)
class ConvGemm(EpilogueOperands):
    """Implicit GEMM per image and group (see the module docstring).

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
    def params(self) -> tuple[str, ...]:
        return _size_params(self.window.rank) + (("px0", "pxn") if self.pixel_range else ())

    @property
    def scratch_bytes(self) -> int:
        return scratch_floats(self.tiling, self.window.k_block(self.tiling)) * 4

    def emit(self, f: Frame) -> None:
        b, w, t = f.b, self.window, self.tiling
        geo = Geometry(b, f.size, w.rank)
        coords = None if w.is_pointwise or self.pieces else LaneCoords(b, geo, t.lanes, t.nv)
        kg = b.mul(geo.cin_g, i64(w.window))
        px0 = f.size["px0"] if self.pixel_range else None
        shape = GemmShape(geo.cout_g, f.size["pxn"] if self.pixel_range else geo.out_pixels,
                          kg, a_sm=kg, a_sk=i64(1), c_sm=geo.out_pixels)
        with for_range(b, geo.batch, "img") as img:
            with for_range(b, geo.groups, "grp") as grp:
                chan0 = b.add(b.mul(img, geo.cin), b.mul(grp, geo.cin_g))
                base = offset_ptr(b, f.lhs, F32, b.mul(chan0, geo.in_pixels))
                a = offset_ptr(b, f.rhs, F32, b.mul(grp, b.mul(geo.cout_g, kg)))
                ochan0 = b.add(b.mul(img, geo.cout), b.mul(grp, geo.cout_g))
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


def _pixel_vectors(b: ir.IRBuilder, geo: Geometry, coords: LaneCoords, state: list,
                   body) -> None:
    """``body(n0, valid, coords)`` for each vector of output pixels from n0 (``valid``:
    the real lanes of the last, partial vector, else None); ``state`` holds the running
    coordinates (allocas), so no division runs per vector."""
    lanes = coords.lanes
    p = geo.out_pixels
    for s, d in zip(state, coords.digits[0]):
        b.store(d, s)

    def one(n0, valid):
        here = [b.load(s, typ=vec_type(I32, lanes)) for s in state]
        body(n0, valid, here)
        for s, c in zip(state, coords.advance(b, here)):
            b.store(c, s)

    full = b.sub(p, b.urem(p, i64(lanes)))
    with for_range(b, full, "px", step=lanes) as n0:
        one(n0, None)
    rem = b.sub(p, full)
    with b.if_then(b.icmp_signed(">", rem, i64(0))):
        one(full, first_lanes(b, lanes, 0, rem))


def _store_pixels(b: ir.IRBuilder, value: ir.Value, ptr: ir.Value, valid) -> None:
    if valid is None:
        store_vec(b, value, ptr)
    else:
        masked_store(b, value, ptr, valid)


@dataclass(frozen=True)
class Depthwise(EpilogueOperands):
    """Direct convolution, one input channel per group, vectorized over output pixels."""
    window: ConvWindow
    lanes: int
    epilogue: Epilogue = NO_EPILOGUE

    @property
    def params(self) -> tuple[str, ...]:
        return _size_params(self.window.rank)

    scratch_bytes = 0

    def emit(self, f: Frame) -> None:
        b, w, lanes = f.b, self.window, self.lanes
        geo = Geometry(b, f.size, w.rank)
        coords = LaneCoords(b, geo, lanes, 1)
        vty = vec_type(F32, lanes)
        p = geo.out_pixels
        state = [alloca_once(b, vec_type(I32, lanes), f"coord{i}") for i in range(w.rank)]
        with for_range(b, geo.batch, "img") as img:
            with for_range(b, geo.cout, "oc") as oc:
                ic = b.add(b.mul(img, geo.cin), b.udiv(oc, geo.cout_g))
                chan = offset_ptr(b, f.lhs, F32, b.mul(ic, geo.in_pixels))
                dst_start = b.mul(b.add(b.mul(img, geo.cout), oc), p)
                dst = offset_ptr(b, f.out, F32, dst_start)
                wrow = offset_ptr(b, f.rhs, F32, b.mul(oc, i64(w.window)))
                ws = [splat(b, b.load(offset_ptr(b, wrow, F32, r), typ=F32), lanes)
                      for r in range(w.window)]
                values = self.epilogue.values(b, f.extra, oc, lanes)
                extra = self.epilogue.moved(b, f.extra, dst_start)

                def pixels(n0, valid, here):
                    px = PixelLanes(b, w, geo, here, n0, lanes, valid)
                    acc = zeros(vty)
                    for r, kpos in enumerate(w.positions):
                        acc = fma(b, ws[r], px.load(b, chan, kpos), acc)
                    acc = self.epilogue.apply(
                        b, acc, values | self.epilogue.full(b, extra, n0, valid, lanes))
                    _store_pixels(b, acc, offset_ptr(b, dst, F32, n0), valid)

                _pixel_vectors(b, geo, coords, state, pixels)


def _inside(b: ir.IRBuilder, pad: int, stride: int, dil: int, k: int, n_in: ir.Value,
            n_out: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Output positions [lo, hi) along one dim whose whole window lies in the image
    (0 <= lo <= hi <= n_out): from the first with o * stride >= pad to the last with
    o * stride - pad + (k - 1) * dil <= n_in - 1."""
    lo = imin(b, i64(max(0, -(-pad // stride))), n_out)
    last = b.sub(n_in, i64(1 - pad + (k - 1) * dil))
    hi = b.select(b.icmp_signed("<", last, i64(0)), i64(0),
                  b.add(b.sdiv(last, i64(stride)), i64(1)))
    hi = imin(b, hi, n_out)
    return lo, b.select(b.icmp_signed("<", hi, lo), lo, hi)


def _row_interior(b: ir.IRBuilder, w: ConvWindow, geo: Geometry, lanes: int, unroll: int):
    """The interior of a 2-D window over rows of ``lanes``-wide vectors of output
    columns: output rows [lo, hi) whose windows lie inside the image, and the vector
    bounds (v_lo, v_hi, v_unrolled, nv): vectors [0, v_lo) and [v_hi, nv) are masked,
    [v_lo, v_hi) read the interior, [v_lo, v_unrolled) in steps of ``unroll``."""
    (ih, iw), (oh, ow) = geo.in_sp, geo.out_sp
    (sh, sw), (ph, pw), (dh, dw) = w.stride, w.pad_low, w.dil
    rows_lo, rows_hi = _inside(b, ph, sh, dh, w.size[0], ih, oh)
    cols_lo, cols_hi = _inside(b, pw, sw, dw, w.size[1], iw, ow)
    nv = b.udiv(b.add(ow, i64(lanes - 1)), i64(lanes))
    v_lo = b.udiv(b.add(cols_lo, i64(lanes - 1)), i64(lanes))
    v_hi = b.udiv(cols_hi, i64(lanes))
    v_hi = b.select(b.icmp_signed("<", v_hi, v_lo), v_lo, v_hi)
    v_unrolled = b.add(v_lo, b.mul(b.udiv(b.sub(v_hi, v_lo), i64(unroll)), i64(unroll)))
    return rows_lo, rows_hi, (v_lo, v_hi, v_unrolled, nv)


@dataclass(frozen=True)
class DepthwiseRows(EpilogueOperands):
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

    Taken for column strides 2 to 4 (DEPTHWISE_MAX_STRIDE), where it runs 2 to 3 times
    as fast as Depthwise's gathers on MobileNetV2's layers, and at stride 1 where an
    output row fills a vector (kernel time against Depthwise, one Zen 5 core, AVX-512:
    112x112 0.77, 28x28 0.90, 14x14 0.64, 12x12 0.80, 48x48 0.64; 56x56 equal). On
    narrower maps (7x7, 6x6, 25x5) Depthwise's flat vectors of pixels, which run across
    rows, waste fewer lanes (1.06 to 1.45 times faster there).
    """
    window: ConvWindow
    lanes: int
    block: int = 1      # interior output rows per step
    unroll: int = 4     # interior vectors of columns per step
    epilogue: Epilogue = NO_EPILOGUE

    @property
    def params(self) -> tuple[str, ...]:
        return _size_params(2)

    scratch_bytes = 0

    def emit(self, f: Frame) -> None:
        b, w, lanes = f.b, self.window, self.lanes
        geo = Geometry(b, f.size, 2)
        oh = geo.out_sp[0]
        rows_lo, rows_hi, (v_lo, v_hi, v_unrolled, nv) = _row_interior(b, w, geo, lanes,
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
                ic = b.add(b.mul(img, geo.cin), b.udiv(oc, geo.cout_g))
                chan = offset_ptr(b, f.lhs, F32, b.mul(ic, geo.in_pixels))
                dst_start = b.mul(b.add(b.mul(img, geo.cout), oc), geo.out_pixels)
                dst = offset_ptr(b, f.out, F32, dst_start)
                wrow = offset_ptr(b, f.rhs, F32, b.mul(oc, i64(w.window)))
                ws = [splat(b, b.load(offset_ptr(b, wrow, F32, r), typ=F32), lanes)
                      for r in range(w.window)]
                values = self.epilogue.values(b, f.extra, oc, lanes)
                extra = self.epilogue.moved(b, f.extra, dst_start)
                row = _DepthwiseRow(self, b, geo, chan, dst, ws, values, extra)
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
                        loaded[j, kx, u] = _row_vector(b, w, lanes, self.geo, self.rows[j],
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


def _row_vector(b: ir.IRBuilder, w: ConvWindow, lanes: int, geo: Geometry, row, valid,
                kx: int, x0, masked: bool) -> ir.Value:
    """The input of row ``row`` (a pointer to its column 0; ``valid``: whether the row
    lies in the image, None when it does) under window column ``kx`` for output columns
    x0 .. x0 + lanes: a contiguous read of stride * lanes columns, every stride-th kept
    (a shuffle); ``masked``: some of them may lie outside the image or past the last
    output column (the border vectors)."""
    (_, sw), (_, pw), (_, dw) = w.stride, w.pad_low, w.dil
    col0 = b.add(b.mul(x0, i64(sw)), i64(kx * dw - pw))
    ptr = offset_ptr(b, row, F32, col0)
    span = sw * lanes
    wide = vec_type(F32, span)
    if masked:
        # Element e of the wide read is column col0 + e, used by lane e / sw if
        # e % sw == 0; read it iff that lane is real and the column is in the image.
        cols = b.add(splat(b, b.trunc(col0, I32), span), const_vec(I32, range(span)))
        mask = b.icmp_unsigned("<", cols, splat_i32(b, geo.in_sp[1], span))
        lane_of = const_vec(I32, [e // sw for e in range(span)])
        mask = b.and_(mask, b.icmp_signed("<", lane_of,
                                          splat_i32(b, b.sub(geo.out_sp[1], x0), span)))
        if sw > 1:
            mask = b.and_(mask, const_vec(I1, [int(e % sw == 0) for e in range(span)]))
        if valid is not None:
            mask = b.and_(mask, splat(b, valid, span))
        x = masked_load(b, ptr, wide, mask)
    else:
        # The last column read is col0 + sw * (lanes - 1): past it, nothing is read.
        x = (load_vec(b, ptr, wide) if sw == 1
             else masked_load(b, ptr, wide, lane_mask(span, span - sw + 1)))
        if valid is not None:
            x = b.select(valid, x, zeros(wide))
    if sw > 1:
        x = b.shuffle_vector(x, x, const_vec(I32, range(0, span, sw)))
    return x


@dataclass(frozen=True)
class RowConv(EpilogueOperands):
    """Direct 2-D convolution of few input and output channels per group (stems such as
    MobileNetV1's 3->8 3x3/2 on a 96x96 image), vectorized along output rows as
    DepthwiseRows is: a tile of ``mr`` output channels by ``unroll`` vectors of ``lanes``
    consecutive output columns of one row, summed over the group's input channels (a
    run-time loop) and the window positions (unrolled). Each input vector is read once
    per tile (``_row_vector``: plain loads at stride 1, wide loads and a shuffle at 2 to
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

    @property
    def params(self) -> tuple[str, ...]:
        return _size_params(2)

    scratch_bytes = 0

    def emit(self, f: Frame) -> None:
        b, w, lanes, mr = f.b, self.window, self.lanes, self.mr
        geo = Geometry(b, f.size, 2)
        oh = geo.out_sp[0]
        rows_lo, rows_hi, (v_lo, v_hi, v_unrolled, nv) = _row_interior(b, w, geo, lanes,
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
                xs = [_row_vector(b, w, lanes, geo, rows[ky], self.valid[ky], kx, x0, masked)
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


@dataclass(frozen=True)
class DirectConv(EpilogueOperands):
    """Direct convolution for any channels, with no scratch: an MR x NV tile (MR output
    channels by NV vectors of output pixels) in registers, as in the GEMM's micro-kernel,
    summed over the group's input channels and the window positions, the input read in
    place under each position (PixelLanes) instead of from a packed sliver.

    Pixels are the outer loop, so the input under a pixel tile stays in L1 while every
    channel tile reads it. It needs no scratch memory; on stride-1 windows that keep
    the map's size it takes 0.56 to 1.0 of the implicit GEMM's time with few output
    channels (fewer channel tiles to read the input again), about as long with many,
    but about four times as long on strided ones (each channel tile gathers the input
    again, where the GEMM gathers once per sliver). So it is the fast path only of the
    3x3 stride-1 windows with few output channels (``_direct_pays``: ResNet-8's
    16-channel layers), and elsewhere the lean variant the memory planner picks for
    convolutions whose scratch would raise the arena's peak.
    """
    window: ConvWindow
    tiling: Tiling
    epilogue: Epilogue = NO_EPILOGUE

    @property
    def params(self) -> tuple[str, ...]:
        return _size_params(self.window.rank)

    scratch_bytes = 0

    def emit(self, f: Frame) -> None:
        b, w, t = f.b, self.window, self.tiling
        lanes, mr, nv = t.lanes, t.mr, t.nv
        geo = Geometry(b, f.size, w.rank)
        coords = LaneCoords(b, geo, lanes, nv)
        vty = vec_type(F32, lanes)
        p = geo.out_pixels
        kg = b.mul(geo.cin_g, i64(w.window))
        acc = [[alloca_once(b, vty, f"acc{i}.{v}") for v in range(nv)] for i in range(mr)]
        last = b.sub(geo.cout_g, i64(1))
        with for_range(b, geo.batch, "img") as img:
            with for_range(b, geo.groups, "grp") as grp:
                chan0 = b.add(b.mul(img, geo.cin), b.mul(grp, geo.cin_g))
                base = offset_ptr(b, f.lhs, F32, b.mul(chan0, geo.in_pixels))
                wgrp = offset_ptr(b, f.rhs, F32, b.mul(grp, b.mul(geo.cout_g, kg)))
                ochan0 = b.add(b.mul(img, geo.cout), b.mul(grp, geo.cout_g))
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
                            _store_pixels(b, value, ptr, real[v])

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


@dataclass(frozen=True)
class ChannelConv(EpilogueOperands):
    """Direct 2-D convolution vectorized over output channels, for stems (few input
    channels: the implicit GEMM's im2col gathers cost as much as its FMAs), windows on
    small maps (7x7 or 14x14 pixels fill vectors of pixels badly: 49 = 3 x 16 + 1) and
    strided windows (broadcasts cost the same at any stride).

    A tile is ``rows`` x ``cols`` output pixels (one accumulator per pixel and vector)
    by ``vectors`` vectors of ``lanes`` output channels: per input channel and window
    position, ``vectors`` loads of the weights and one broadcast of the input under each
    pixel, which feeds ``vectors`` FMAs. The weights are constants, packed at compile
    time (``pack_weights``) in the kernel's order: per group, panels of ``vectors`` x
    ``lanes`` output channels (the last one narrower), each K x its width contiguous (K
    = Cin_g x window, OIHW's K order), so a panel starts where its first channel does
    in OIHW. The window positions are a run-time loop over a table of their offsets
    (unrolled, LLVM keeps the broadcasts that neighbouring pixels of a stride-1 window
    share in registers, and spills). The tiles at the right edge are shifted back inside
    the image (they recompute a few pixels, bit for bit the same); the last rows take a
    shorter compile-time variant. The results are transposed in registers (channels x
    pixels to pixels x channels) and stored ``cols`` pixels at a time, the epilogue
    applied with the lanes as channels (``Epilogue.lane_values``). Taken only with SIMD
    (4 lanes or more).

    The input is read where it lies, so the kernel needs no scratch and is its own lean
    variant. With padding, a tile leaves out the products of the reads outside the image
    (they would be zeros): per window position, a branch per row of the tile where rows
    may leave it, and per column at the edges (``_edges``: a compile-time variant of the
    tiles at the edges), well predicted. Measured against a padded copy of
    the input in the scratch with K in blocks of 512 rows (partial sums in the scratch
    between blocks), kernel time on one Zen 5 core, AVX-512: 3x3/2 256->512 @14 0.84 to
    0.87, 3x3 256->256 @14 0.84 to 0.94, 512->512 @7 0.82 to 0.90, 300->64 @10 0.83,
    7x7/2 3->64 @224 0.94; 1x1 320->1280 and 960->320 @7 0.98 and 1.0 with the weights
    in cache (the blocks of weights gained nothing over reading a panel's K from L2;
    with the weights from memory, as in a model, what counts is the prefetch of the
    next panel's weights, ``_Stream``).

    ``row_range`` (the parallel entry's split hook, parallel.py): the call computes only
    output rows ``oy0`` .. ``oy0 + oyn`` (two more size arguments), so a stem of one
    panel (32 channels) splits too.
    """
    window: ConvWindow
    lanes: int
    vectors: int        # of output channels per tile: a panel is vectors x lanes wide
    rows: int
    cols: int
    epilogue: Epilogue = NO_EPILOGUE
    row_range: bool = False

    scratch_bytes = 0

    @property
    def params(self) -> tuple[str, ...]:
        return _size_params(2) + (("oy0", "oyn") if self.row_range else ())

    @property
    def panel(self) -> int:
        return self.vectors * self.lanes

    def pack_weights(self, weights: np.ndarray, sizes: dict[str, int]) -> np.ndarray:
        """OIHW weights in the kernel's order (class docstring); same size."""
        groups, cout_g = sizes["groups"], sizes["cout_g"]
        w = np.asarray(weights, np.float32).reshape(groups, cout_g, -1)
        panels = [w[:, c:c + self.panel].transpose(0, 2, 1)
                  for c in range(0, cout_g, self.panel)]
        return np.concatenate([p.reshape(groups, -1) for p in panels], axis=1)

    def emit(self, f: Frame) -> None:
        b, w, lanes = f.b, self.window, self.lanes
        geo = Geometry(b, f.size, 2)
        oh, iw = geo.out_sp[0], geo.in_sp[1]
        kg = b.mul(geo.cin_g, i64(w.window))
        oy0, oy_end = (i64(0), oh) if not self.row_range else \
            (f.size["oy0"], b.add(f.size["oy0"], f.size["oyn"]))
        taps = alloca_once(b, I64, "taps", size=i64(w.window))
        for r, (ky, kx) in enumerate(w.positions):
            b.store(b.add(b.mul(i64(ky * w.dil[0]), iw), i64(kx * w.dil[1])),
                    offset_ptr(b, taps, I64, i64(r)))
        checked = any(w.pad_low) or any(w.pad_high)
        col_tiles = b.udiv(b.add(geo.out_sp[1], i64(self.cols - 1)), i64(self.cols))
        with for_range(b, geo.batch, "img") as img:
            with for_range(b, geo.groups, "grp") as grp:
                chan0 = b.add(b.mul(img, geo.cin), b.mul(grp, geo.cin_g))
                # Where row y, column c of the padded image would lie: y * iw + c elements
                # on (read only inside the image).
                x = offset_ptr(b, f.lhs, F32, b.sub(b.mul(chan0, geo.in_pixels),
                                                    b.add(b.mul(i64(w.pad_low[0]), iw),
                                                          i64(w.pad_low[1]))))
                ochan0 = b.add(b.mul(img, geo.cout), b.mul(grp, geo.cout_g))
                chan_of_group = b.mul(grp, geo.cout_g)
                with for_range(b, geo.cout_g, "oc", step=self.panel) as oc0:
                    panel = offset_ptr(b, f.rhs, F32,
                                       b.mul(b.add(chan_of_group, oc0), kg))
                    dst = offset_ptr(b, f.out, F32,
                                     b.mul(b.add(ochan0, oc0), geo.out_pixels))
                    channel0 = b.add(chan_of_group, oc0)
                    extra = self.epilogue.moved(
                        b, f.extra, b.mul(b.add(ochan0, oc0), geo.out_pixels))

                    def panel_of(vectors, panel=panel, dst=dst, channel0=channel0,
                                 extra=extra):
                        values = ([self.epilogue.lane_values(
                            b, f.extra, b.add(channel0, i64(v * lanes)), lanes)
                            for v in range(vectors)], extra, channel0)
                        row_tiles = b.udiv(b.add(b.sub(oy_end, oy0), i64(self.rows - 1)),
                                           i64(self.rows))
                        stream = _Stream.of(b, panel, kg, vectors * lanes,
                                            b.mul(row_tiles, col_tiles))
                        with for_range(b, oy_end, "oy", start=oy0, step=self.rows) as oy:
                            def tile(ct, ox, rows, check=None):
                                order = b.add(b.mul(b.udiv(b.sub(oy, oy0), i64(self.rows)),
                                                    col_tiles), ct)
                                self._tile(b, geo, x, taps, panel, dst, values, oy, ox,
                                           rows, vectors, stream.at(b, order), check)
                            _down_to(b, b.sub(oy_end, oy), self.rows, 1,
                                     lambda rows: self._col_tiles(b, geo, col_tiles, rows,
                                                                  tile, checked))
                    # The last panel of a group may be narrower (fewer vectors).
                    _down_to(b, b.udiv(b.sub(geo.cout_g, oc0), i64(lanes)), self.vectors,
                             1, panel_of)

    def _edges(self) -> tuple[int, int]:
        """Output columns at the left and at the right edge whose windows leave the image
        (their reads are checked): the first ceil(pad_low / stride); the last
        ceil((pad_high - slack) / stride) (``ConvWindow.may_leave``)."""
        w = self.window
        return (max(0, -(-w.pad_low[1] // w.stride[1])),
                max(0, -(-(w.pad_high[1] - w.slack[1]) // w.stride[1])))

    def _col_tiles(self, b, geo: Geometry, col_tiles, rows: int, tile,
                   checked: bool) -> None:
        """A row of ``col_tiles`` tiles (``tile(ct, ox, rows, check)``), the last shifted
        back to end at the last column. ``checked`` (padding): each tile checks the input
        rows it reads, and a tile covering columns of ``_edges`` checks those of both
        edges (one variant for the edges and one for the interior keep the code small: a
        7 x 7 map is one tile, at both edges)."""
        cols, ow = self.cols, geo.out_sp[1]
        left, right = (min(e, cols) for e in self._edges())
        with for_range(b, col_tiles, "ct") as ct:
            ox = imin(b, b.mul(ct, i64(cols)), b.sub(ow, i64(cols)))
            if not checked:
                tile(ct, ox, rows)
                return
            edges = frozenset(range(left)) | frozenset(range(cols - right, cols))
            if not edges:
                tile(ct, ox, rows, check=edges)
                return
            at_edge = b.or_(b.icmp_signed("<", ox, i64(left)),
                            b.icmp_signed(">", b.add(ox, i64(cols)), b.sub(ow, i64(right))))
            with b.if_else(at_edge) as (edge, interior):
                with edge:
                    tile(ct, ox, rows, check=edges)
                with interior:
                    tile(ct, ox, rows, check=frozenset())

    def _tile(self, b, geo: Geometry, x, taps, panel, dst, values, oy, ox, rows: int,
              vectors: int, fetch, check=None) -> None:
        """Output pixels (oy .. oy + rows) x (ox .. ox + cols) of the panel's channels
        (``vectors`` x lanes of them). ``fetch``: where this tile prefetches its share of
        the next panel's weights (``_Stream``), one address per K row. ``check``
        (padding): the tile's columns whose reads may leave the image; its rows', and
        those columns', reads outside it are left out (they would read zeros)."""
        w, lanes, cols = self.window, self.lanes, self.cols
        sh, sw = w.stride
        vty = vec_type(F32, lanes)
        width = vectors * lanes
        iw = geo.in_sp[1]
        starts = [offset_ptr(b, x, F32, b.add(b.mul(b.add(oy, i64(r)), b.mul(iw, i64(sh))),
                                              b.mul(ox, i64(sw))))
                  for r in range(rows)]
        acc = [[[alloca_once(b, vty, f"cacc{r}.{c}.{v}") for v in range(vectors)]
                for c in range(cols)] for r in range(rows)]
        for a in (a for row in acc for pixel in row for a in pixel):
            b.store(zeros(vty), a)
        with for_range(b, geo.cin_g, "ic") as c:
            chan = b.mul(c, geo.in_pixels)
            wk = offset_ptr(b, panel, F32, b.mul(c, i64(w.window * width)))
            # The window positions are a run-time loop over a table of their offsets:
            # unrolled, LLVM would keep the broadcasts that neighbouring pixels share
            # under a stride-1 window in registers across positions, and spill.
            with for_range(b, i64(w.window), "tap") as r:
                row_w = b.mul(r, i64(width))
                fetch(b, b.add(b.mul(c, i64(w.window)), r))
                wv = [load_vec(b, offset_ptr(b, wk, F32, b.add(row_w, i64(v * lanes))), vty)
                      for v in range(vectors)]
                tap = b.load(offset_ptr(b, taps, I64, r), typ=I64)
                at = b.add(chan, tap)
                rows_in, cols_in = self._inside_tile(b, geo, r, oy, ox, rows, check)
                for start, row, row_in in zip(starts, acc, rows_in):
                    # A read outside the image is a zero: its products are left out.
                    with _when(b, row_in):
                        for cc, pixel in enumerate(row):
                            with _when(b, cols_in.get(cc)):
                                ptr = offset_ptr(b, start, F32, b.add(at, i64(cc * sw)))
                                s = splat(b, b.load(ptr, typ=F32), lanes)
                                for wvv, a in zip(wv, pixel):
                                    b.store(fma(b, s, wvv, b.load(a, typ=vty)), a)
        self._store(b, geo, acc, values, dst, oy, ox, vectors)

    def _inside_tile(self, b, geo: Geometry, r, oy, ox, rows: int, check):
        """For window position ``r`` of a tile (``check``: the columns to check, None
        without padding), whether each of its rows (where rows may leave the image), and
        each checked column, reads inside it: ([i1 or None per row], {column: i1})."""
        if check is None:
            return [None] * rows, {}
        w = self.window
        (sh, sw), (ph, pw), (dh, dw) = w.stride, w.pad_low, w.dil
        rows_in = [None] * rows
        if ph > 0 or w.pad_high[0] > w.slack[0]:
            dy = b.mul(b.udiv(r, i64(w.size[1])), i64(dh))
            iy0 = b.add(b.mul(oy, i64(sh)), b.sub(dy, i64(ph)))
            rows_in = [b.icmp_unsigned("<", b.add(iy0, i64(i * sh)), geo.in_sp[0])
                       for i in range(rows)]
        dx = b.mul(b.urem(r, i64(w.size[1])), i64(dw))
        ix0 = b.add(b.mul(ox, i64(sw)), b.sub(dx, i64(pw)))
        return rows_in, {c: b.icmp_unsigned("<", b.add(ix0, i64(c * sw)), geo.in_sp[1])
                         for c in sorted(check)}

    def _store(self, b, geo: Geometry, acc, values, dst, oy, ox, vectors: int) -> None:
        """The tile's results, with the epilogue, transposed to rows of pixels. ``values``:
        the per-vector operands of the lanes' channels, the epilogue's operands (full-size
        ones moved to the panel) and the panel's first channel. An epilogue reading a
        full-size operand (a residual, whose elements lie along pixels) is applied after
        the transposition, per output channel."""
        values, extra, channel0 = values
        epilogue, lanes, cols = self.epilogue, self.lanes, self.cols
        vty = vec_type(F32, lanes)
        p = geo.out_pixels
        mask = lane_mask(lanes, cols)
        after = bool(epilogue.full_operands)
        for r, row in enumerate(acc):
            out0 = b.add(b.mul(b.add(oy, i64(r)), geo.out_sp[1]), ox)
            for v in range(vectors):
                vals = [b.load(pixel[v], typ=vty) if after else
                        epilogue.apply(b, b.load(pixel[v], typ=vty), values[v])
                        for pixel in row]
                vals += [zeros(vty)] * (lanes - cols)
                for j, out in enumerate(transpose_square(b, vals)):
                    at = b.add(b.mul(i64(v * lanes + j), p), out0)
                    if after:
                        operands = epilogue.values(b, extra, b.add(channel0, i64(v * lanes + j)),
                                                   lanes)
                        operands.update(epilogue.full(b, extra, at, None if cols == lanes
                                                      else mask, lanes))
                        out = epilogue.apply(b, out, operands)
                    ptr = offset_ptr(b, dst, F32, at)
                    if cols == lanes:
                        store_vec(b, out, ptr)
                    else:
                        masked_store(b, out, ptr, mask)


@dataclass(frozen=True)
class _Stream:
    """ChannelConv's weights are read in the order they lie (panel after panel, each
    K x its width), and a panel's weights are read from cache by all of its tiles after
    the first brought them in: without help the first tile waits on memory while the
    rest compute. So the tiles of one panel prefetch the next panel's weights (the bytes
    after the panel's, as many), spread evenly: tile ``t`` of ``T``, at its K row ``s``,
    the ``step`` bytes from ``end + (t x rows + s) x step``, ``step`` = ceil(row bytes /
    T): one cache line, or on maps of one or two tiles (step over a line) each line of
    them. Inside a model the weights come from memory (MobileNetV2's 14 MB do not stay
    in the shared L3 between calls): kernel time of its 1x1 layers on 7x7 maps, the
    caches flushed before each call but for the input and output, one Zen 5 core, K in
    blocks of 512 rows, each block prefetching the next: 320->1280 286 -> 189 us (175
    with the weights in cache), 960->320 225 -> 151 (135), 160->960 100 -> 75 (67); the
    cache level of the prefetch made no difference."""
    end: ir.Value       # the first byte after the panel
    rows: ir.Value      # K rows of the panel
    step: ir.Value      # bytes per K row and tile
    lines: int          # the most cache lines a step spans (a row's)

    @staticmethod
    def of(b: ir.IRBuilder, panel, rows, width: int, tiles) -> "_Stream":
        """The stream of a panel at ``panel`` of ``rows`` K rows of ``width`` floats,
        computed in ``tiles`` tiles."""
        end = offset_ptr(b, panel, F32, b.mul(rows, i64(width)))
        step = b.udiv(b.add(i64(4 * width - 1), tiles), tiles)
        return _Stream(end, rows, step, -(-4 * width // CACHE_LINE))

    def at(self, b: ir.IRBuilder, tile):
        """The fetch of tile ``tile``: ``fetch(b, s)`` at its K row ``s``."""
        base = offset_ptr(b, self.end, I8, b.mul(b.mul(tile, self.rows), self.step))
        # Lines j x hop on from each step's start: each line of a step over a line; on
        # the next steps' lines otherwise (prefetched twice, which costs a load slot).
        # No branch: a block in the inner loop changed how LLVM contracted its FMAs in
        # the parallel entry's variant, whose results then differed from NAME_run's.
        hop = imin(b, self.step, i64(CACHE_LINE))

        def fetch(b: ir.IRBuilder, s) -> None:
            at = offset_ptr(b, base, I8, b.mul(s, self.step))
            for j in range(self.lines):
                prefetch(b, offset_ptr(b, at, I8, b.mul(hop, i64(j))) if j else at)
        return fetch


# Bytes of a cache line (x86's and most Arm cores'; elsewhere the prefetches only cover
# less or more).
CACHE_LINE = 64


@contextmanager
def _when(b: ir.IRBuilder, cond):
    """The body under ``cond`` (i1), or always where it is None."""
    if cond is None:
        yield
        return
    with b.if_then(cond, likely=True):
        yield


def _down_to(b: ir.IRBuilder, have: ir.Value, most: int, least: int, body) -> None:
    """``body(n)`` for n = min(have, most) (compile-time variants ``most`` down to
    ``least``; ``have`` >= ``least`` at run time)."""
    if most == least:
        body(most)
        return
    with b.if_else(b.icmp_signed(">=", have, i64(most))) as (full, short):
        with full:
            body(most)
        with short:
            _down_to(b, have, most - 1, least, body)


@dataclass(frozen=True)
class NaiveConv:
    """Any dimension numbers, groups and element type, compiled for these exact shapes."""
    x: Shape
    k: Shape
    out: Shape
    dn: ConvDimensionNumbers
    window: Window
    feature_groups: int
    batch_groups: int

    params = ()
    scratch_bytes = 0
    extra_operands = 0

    def emit(self, f: Frame) -> None:
        emit_naive_conv(f.b, self, f.out, f.lhs, f.rhs)


# --- path selection -------------------------------------------------------------------

def has_fast_path(instr: Instruction) -> bool:
    """An f32 convolution over N C spatial... tensors (ONNX's layout), no base dilation,
    no batch groups and not empty: what the fast kernels run (anything else is
    NaiveConv's)."""
    if instr.opcode is not Opcode.CONVOLUTION or instr.shape.dtype != dtypes.F32:
        return False
    dn, w = instr.attrs["dimension_numbers"], instr.attrs["window"]
    return (instr.attrs.get("batch_group_count", 1) == 1
            and dn == ConvDimensionNumbers.nchw(w.rank) and all(d == 1 for d in w.lhs_dilation)
            and instr.shape.num_elements > 0)


def _path(instr: Instruction, t: Tiling, constant_weights: bool) -> str:
    if not has_fast_path(instr):
        return "naive"
    w = instr.attrs["window"]
    sizes = _sizes_of(instr)
    pixels = prod(instr.shape.dims[2:])
    if sizes["cin_g"] == 1 and sizes["cout_g"] < t.mr:
        # Rows at stride 1 only where a row fills more than half a vector: narrower maps
        # (7x7, 25x5) fill Depthwise's flat vectors of pixels better.
        rows = w.rank == 2 and (2 <= w.stride[1] <= DEPTHWISE_MAX_STRIDE
                                or w.stride[1] == 1 and 2 * instr.shape.dims[-1] > t.lanes)
        return "depthwise_rows" if rows and prod(w.size) <= DIRECT_MAX_POSITIONS else "depthwise"
    if _winograd_pays(instr, w, sizes, t):
        return "winograd"
    if _direct_pays(instr, w, sizes, t):
        return "direct"
    if (constant_weights and w.rank == 2 and t.lanes >= 4 and sizes["cout_g"] % t.lanes == 0
            and prod(w.size) <= DIRECT_MAX_POSITIONS
            and (sizes["cin_g"] <= CHANNELS_MAX_CIN
                 or prod(w.size) > 1 and (pixels <= CHANNELS_MAX_PIXELS or max(w.stride) > 1)
                 or pixels < CHANNELS_MAX_STRIDED_POINTWISE_PIXELS
                 or pixels <= CHANNELS_MAX_POINTWISE_PIXELS and all(s == 1 for s in w.stride)
                 and (sizes["cout_g"] % _channel_panel(instr, sizes, t) == 0
                      or sizes["cin_g"] >= CHANNELS_MIN_POINTWISE_CIN))):
        return "channels"
    if (w.rank == 2 and t.lanes >= 4 and sizes["cin_g"] <= CHANNELS_MAX_CIN
            and sizes["cout_g"] <= ROWS_MAX_COUT and w.stride[1] <= DEPTHWISE_MAX_STRIDE
            and 2 * instr.shape.dims[-1] > t.lanes and prod(w.size) <= DIRECT_MAX_POSITIONS):
        return "rows"
    if (w.rank == 2 and t.lanes >= SUBSAMPLE_MIN_LANES and all(k == 1 for k in w.size)
            and not any(w.pad_low) and not any(w.pad_high) and any(v > 1 for v in w.stride)
            and w.stride[1] <= SUBSAMPLE_MAX_STRIDE
            and subsample_pieces(instr.shape.dims[-1], t.lanes) <= SUBSAMPLE_MAX_PIECES):
        return "gemm_subsample"
    return "gemm"


def _winograd_pays(instr: Instruction, w: Window, sizes: dict[str, int], t: Tiling) -> bool:
    """3x3, stride 1, dilation 1, one group, with SIMD (winograd.py), where it measured
    faster than the implicit GEMM and ChannelConv: channels to fill its GEMMs' rows and
    K, and a map large enough to pay for transforming every channel pair's weights at
    each call (Cin x Cout per output pixel bounded)."""
    if not (w.rank == 2 and tuple(w.size) == (3, 3) and tuple(w.stride) == (1, 1)
            and tuple(w.rhs_dilation) == (1, 1) and sizes["groups"] == 1 and t.lanes >= 4):
        return False
    cin, cout = sizes["cin_g"], sizes["cout_g"]
    pixels = prod(instr.shape.dims[2:])
    return (min(cin, cout) >= WINOGRAD_MIN_CHANNELS and cin <= WINOGRAD_MAX_CIN
            and pixels >= WINOGRAD_MIN_PIXELS
            and cin * cout <= WINOGRAD_MAX_PAIRS_PER_PIXEL * pixels)


def _direct_pays(instr: Instruction, w: Window, sizes: dict[str, int], t: Tiling) -> bool:
    """3x3 windows at stride 1 that keep the map's size (``ConvWindow.contiguous``: each
    window position reads the input as it lies, vector loads masked at the borders),
    with SIMD, few output channels per group and maps of DIRECT_MIN_PIXELS or more: where
    DirectConv, which reads the input in place for every tile of MR channels, beats the
    implicit GEMM, whose im2col slivers are packed for only a few such tiles, and
    ChannelConv, whose vectors of channels few channels leave half empty."""
    if not (w.rank == 2 and tuple(w.size) == (3, 3) and tuple(w.rhs_dilation) == (1, 1)
            and t.lanes >= 4 and sizes["cout_g"] <= DIRECT_MAX_COUT
            and prod(instr.shape.dims[2:]) >= DIRECT_MIN_PIXELS):
        return False
    return ConvWindow.of(w, instr.operands[0].shape.dims[2:]).contiguous


# Kernel time against the implicit GEMM (benchmarks/kernels.py's timing, one Zen 5
# core, AVX-512), 3x3 pad 1 stride 1: 16->16 @32 (ResNet-8's) 0.79, 16->8 0.64, 16->32
# 0.90, 16->48 0.92, 64->16 0.81, 128->16 0.84, 24->24 @64 0.89, 16->16 @56 0.80, @112
# 0.56; even or slower from 64 output channels (16->64 0.97, 8->64 0.98, 16->96 1.04)
# and on 5x5 windows (1.4). Against ChannelConv: stems 3->16 @32 (ResNet-8's) 0.69, 3->32
# @32 0.27, 3->16 @64 0.60; 16->16 @16 0.75, 32->16 @14 0.86, 32->32 @8 0.89; slower on
# 7x7 maps (64->32, 128->32: 1.14, 1.18), whose vectors of pixels go partly empty.
DIRECT_MAX_COUT = 32
DIRECT_MIN_PIXELS = 64


# Measured against the implicit GEMM / ChannelConv (benchmarks/kernels.py, one Zen 5
# core, F(2x2)): 64->64 @56 0.65x, 128->128 @28 0.78x, 64->64 @28 0.72x, 32->32 @16
# 0.78x, 128->128 @14 0.86x, 256->256 @56 0.82x; even or slower with 16 channels
# (16->16 @32 1.03x), many channel pairs per pixel (256->256 @14 1.02x, 512->512 @7
# 2.3x: the weights' transform) or maps below 10 x 10 (64->64 @8 1.1x against
# ChannelConv: half the GEMM columns of its 4 x 5 tiles are padding).
WINOGRAD_MIN_CHANNELS = 32
WINOGRAD_MAX_PAIRS_PER_PIXEL = 128
WINOGRAD_MIN_PIXELS = 100
# Its scratch holds the transformed input of a block of tiles for all input channels (2
# KiB per channel at AVX-512): at most 256 of them keep it within about a MiB.
WINOGRAD_MAX_CIN = 256


# DirectConv unrolls the window positions into straight-line code: beyond this many
# (an STFT's 512-tap window in a speech front end) LLVM takes minutes over the unrolled
# body, so wide windows keep the GEMM and its scratch.
DIRECT_MAX_POSITIONS = 64
# DepthwiseRows reads stride * lanes columns per window position and keeps every
# stride-th; wider strides keep Depthwise's gathers.
DEPTHWISE_MAX_STRIDE = 4
# ChannelConv (constant weights, output channels a multiple of the lanes) for stems,
# whose few input channels make the implicit GEMM's K short and its im2col gathers as
# costly as its FMAs, and for windows on small maps, where vectors of pixels go partly
# empty (7 x 7 = 3 x 16 + 1). Measured against the implicit GEMM (benchmarks/
# kernels.py, one Zen 5 core): ResNet-18's 7x7/2 stem 0.71 of its time, 3x3 layers on
# 14x14 and 7x7 maps 0.74 to 0.92. 1x1 layers (a GEMM over the input as it lies, no
# gathers) with their own tile (_channel_tile): at stride 1 on maps of up to 14 x 14
# (inside MobileNetV2, one Zen 5 core, AVX-512: 96->576 and 576->96 @14x14 take 0.88 of
# the GEMM's kernel time, 64->384 and 384->64 @14x14 0.91 to 0.95; larger maps with few
# input channels are the GEMM's: 64->256 @20x20 1.2, 32->192 @28x28 1.3). From 64
# pixels up, only where the output channels fill the tile's panels (_channel_panel) or
# K is long (CHANNELS_MIN_POINTWISE_CIN): at AVX-512 64 channels are a panel of 3
# vectors and one of 1, whose broadcasts feed one FMA each (kernel time against the
# GEMM, weights in cache: 64->64 @25x5 (DS-CNN) 1.21, 32->64 and 64->64 @12x12
# (MobileNetV1-0.25) 1.47 and 1.14; in MobileNetV2 384->64 @14x14 0.95). Strided ones
# only on maps below 64 pixels (above, the GEMM packs them from input rows,
# SubsamplePacker; not measured against the 3-vector tile).
CHANNELS_MAX_CIN = 4
CHANNELS_MAX_PIXELS = 256
# Strided windows take ChannelConv on larger maps too: it reads the input by broadcasts,
# which cost the same at any stride, where the implicit GEMM gathers its im2col slivers
# (a stride-2 row is no contiguous load). Kernel time against the GEMM, one Zen 5 core,
# AVX-512 (benchmarks/kernels.py' cases, the lower of three runs on a loaded machine):
# 3x3/2 64->128 @56 (ResNet-18) 0.79, 128->128 @56 (ResNet-50) 0.80, 32->64 @112 0.67,
# 16->32 @224 0.48; 256->256 @56 about even (a panel's K of 2304 rows read from L2 at
# each tile). Strided 1x1 windows keep the GEMM (0.8x to 1.3x on ResNet-18's shortcuts,
# 0.35x on a 112 x 112 map).
# RowConv for the stems ChannelConv does not take (output channels not a multiple of
# the lanes, or weights computed at run time) of up to 32 output channels, on maps at
# least half a vector wide, in place of the GEMM. Kernel time inside a model (one Zen 5
# core, AVX-512): 3x3/2 3->8 @96 (MobileNetV1's) 4.8 against the GEMM's 18.5 us, 3->12
# @96 9.5 against 37, 3->20 14 against 55, 7x7/2 3->8 @96 31 against 93. Where ChannelConv
# applies it stays: MobileNetV2's 3x3/2 3->32 @224 takes 150 us there, 185 as RowConv.
# ROWS_MR channels per tile: each input vector feeds that many FMAs.
ROWS_MAX_COUT = 32
ROWS_MR = 8
CHANNELS_MAX_POINTWISE_PIXELS = 196
CHANNELS_MIN_POINTWISE_CIN = 128     # a long K: 1x1 layers from 64 pixels up (above)
CHANNELS_MAX_STRIDED_POINTWISE_PIXELS = 64
# Strided 1x1 windows (ResNet's downsampling shortcuts) take the implicit GEMM with B
# packed from input rows by wide reads and a shuffle (SubsamplePacker) in place of
# im2col's gathers. Kernel time against the gathers (one Zen 5 core, AVX-512, two runs):
# ResNet's 64->128 @56 0.86-0.91, 128->256 @28 0.97-1.0, 256->512 @56 0.93, 512->1024
# @28 0.97-1.0; 64->16 @56 0.63-0.73, 32->64 @112 0.84 (the fewer output channels, the
# more the packing counts). What is left against the stride-1 GEMM of the same size (48
# against 54 us at 64->128 @56) is reading whole input rows for every other column, twice
# the bytes. Column strides up to 4 (a read of stride x lanes columns per piece) and
# vectors on up to 4 rows (maps at least 5 wide at 16 lanes). Its reads are masked at
# run time: 8 lanes or more (AVX's and AVX-512's masked loads; 16-byte vectors, SSE and
# NEON, have none, and LLVM would load each element behind a branch).
SUBSAMPLE_MAX_STRIDE = 4
SUBSAMPLE_MAX_PIECES = 4
SUBSAMPLE_MIN_LANES = 8
# Its tile: pixels by CHANNELS_VECTORS vectors of output channels (each broadcast of an
# input value feeds that many FMAs: at one, the broadcasts, not the FMAs, set the pace),
# at most CHANNELS_COLS pixels along a row, as many accumulators as the registers left
# by the weights' vectors and a broadcast allow.
CHANNELS_VECTORS = 2
CHANNELS_COLS = 14
# 1x1 windows with 32 registers: POINTWISE_VECTORS vectors by up to
# POINTWISE_ACCUMULATORS / POINTWISE_VECTORS pixels (7 on 7- and 14-wide maps). Two
# vectors by 2 x 7 pixels (28 accumulators) left LLVM too few registers for the
# broadcasts it keeps in flight: it spilled three accumulators in the inner loop and
# moved others around. Kernel time, weights in cache, one Zen 5 core, as fractions of
# peak (2 vectors by 2 x 7 pixels -> 3 by 7): 320->1280 @7x7 0.83 -> 0.95, 960->320
# 0.77 -> 0.97, 160->960 0.78 -> 0.92 (K in blocks of 128 to 512 rows then; their
# size made no difference).
POINTWISE_VECTORS = 3
POINTWISE_ACCUMULATORS = 24


def _channel_tile(window: ConvWindow, sizes: dict[str, int], t: Tiling) -> tuple[int, int, int]:
    """ChannelConv's tile: (vectors, rows, cols)."""
    registers = 32 if t.lanes >= 16 else 16      # as tiling_for counts them
    # A map that one tile of 2 vectors covers and one of 3 does not (3 x 3 pixels) takes
    # 2: a panel's weights, from memory in a model, are then read once (MobileNetV1-
    # 0.25's 256->256 @3x3 in the model 6.6 -> 5.2 us).
    pixels = sizes["out0"] * sizes["out1"]
    if (window.window == 1 and registers >= POINTWISE_ACCUMULATORS + POINTWISE_VECTORS + 2
            and not POINTWISE_ACCUMULATORS // POINTWISE_VECTORS < pixels
            <= (registers - CHANNELS_VECTORS - 2) // CHANNELS_VECTORS):
        vectors, accumulators = POINTWISE_VECTORS, POINTWISE_ACCUMULATORS
        cols = _channel_cols(sizes["out1"], min(t.lanes, accumulators // vectors))
    else:
        # One vector where the group has only that many output channels (a 16-channel
        # stem at AVX-512), so its accumulators are sized for the vectors it runs.
        vectors = min(CHANNELS_VECTORS, sizes["cout_g"] // t.lanes)
        accumulators = registers - vectors - 2
        cols = _channel_cols(sizes["out1"],
                             min(CHANNELS_COLS, t.lanes, accumulators // vectors))
    return vectors, max(1, accumulators // (vectors * cols)), cols


def _channel_panel(instr: Instruction, sizes: dict[str, int], t: Tiling) -> int:
    """Output channels per panel of ChannelConv's tile for ``instr``."""
    window = ConvWindow.of(instr.attrs["window"], instr.operands[0].shape.dims[2:])
    return _channel_tile(window, sizes, t)[0] * t.lanes


def _channel_cols(width: int, most: int) -> int:
    """ChannelConv's pixels per tile along a row of ``width``, at most ``most``: the
    fewest columns computed per row (the last tile of a row is shifted back inside it
    and recomputes what it overlaps), then the widest tile, among tiles at least half
    as wide as they may be (narrower ones leave most accumulators idle and transpose
    more per pixel). A 16-wide map takes tiles of 8, not 14 and 14 shifted back by 12
    (ResNet-8's 3x3/2 16->32 @32, kernel time on one Zen 5 core: 17.6 -> 12.0 us), a
    32-wide one 4 x 8, not 3 x 14."""
    most = min(width, most)
    return min(range(-(-most // 2), most + 1), key=lambda c: (-(-width // c) * c, -c))


def plan_conv(instr: Instruction, target, lean: bool = False,
              constant_weights: bool | None = None) -> KernelPlan:
    """``lean``: a variant with no scratch where the fast path needs some (DirectConv),
    for windows of at most DIRECT_MAX_POSITIONS positions; ChannelConv needs none.
    ``constant_weights``: the weights are known at compile time (default: the kernel
    operand is a constant), so a kernel may take them packed in its own order
    (``spec.pack_weights``)."""
    t = tiling_for(target)
    if constant_weights is None:
        constant_weights = instr.operands[1].opcode is Opcode.CONSTANT
    path = _path(instr, t, constant_weights)
    window = ConvWindow.of(instr.attrs["window"], instr.operands[0].shape.dims[2:])
    if path == "channels":
        sizes = _sizes_of(instr)
        vectors, rows, cols = _channel_tile(window, sizes, t)
        return KernelPlan(ChannelConv(window, t.lanes, vectors, rows, cols), sizes)
    if path == "winograd":
        if lean:
            return KernelPlan(DirectConv(window, t), _sizes_of(instr))
        spec = WinogradConv(window, t, 2)
        sizes = _sizes_of(instr)
        return KernelPlan(spec, sizes, spec.scratch_floats(sizes) * 4)
    if path == "direct" or (path in ("gemm", "gemm_subsample") and lean
                            and len(window.positions) <= DIRECT_MAX_POSITIONS):
        return KernelPlan(DirectConv(window, t), _sizes_of(instr))
    if path == "gemm":
        return KernelPlan(ConvGemm(window, t), _sizes_of(instr))
    if path == "gemm_subsample":
        pieces = subsample_pieces(instr.shape.dims[-1], t.lanes)
        return KernelPlan(ConvGemm(window, t, pieces=pieces), _sizes_of(instr))
    if path == "rows":
        sizes = _sizes_of(instr)
        mr = min(sizes["cout_g"], ROWS_MR)
        registers = 32 if t.lanes >= 16 else 16      # as tiling_for counts them
        return KernelPlan(RowConv(window, t.lanes, mr, max(1, registers // 2 // mr)), sizes)
    if path == "depthwise_rows":
        # Narrow images take half vectors: a 7-wide row fills 7 of 8 lanes, not of 16.
        lanes = t.lanes if 2 * instr.shape.dims[3] > t.lanes or t.lanes <= 4 else t.lanes // 2
        # 32 registers: 4 rows by 2 vectors of accumulators beside the 9 weights of a
        # 3x3 window (kernel time against one row of 4 vectors, one Zen 5 core, stride 1:
        # 144 channels @56x56 0.42, 32 @112x112 0.7, 192 @28x28 0.5, 576 @14x14 0.68;
        # stride 2, 96 @112x112: 0.88); 16 keep one row.
        block, unroll = (4, 2) if t.lanes >= 16 else (1, 4)
        return KernelPlan(DepthwiseRows(window, lanes, block, unroll), _sizes_of(instr))
    if path == "depthwise":
        return KernelPlan(Depthwise(window, t.lanes), _sizes_of(instr))
    a = instr.attrs
    x, k = (o.shape for o in instr.operands)
    return KernelPlan(NaiveConv(x, k, instr.shape, a["dimension_numbers"], a["window"],
                                a.get("feature_group_count", 1), a.get("batch_group_count", 1)),
                      {})


def plan_conv_fusion(instr: Instruction, target, lean: bool = False) -> KernelPlan | None:
    """The kernel of an output fusion around an f32 convolution whose epilogue its fast
    kernel applies (plan_epilogue), else None."""
    fused = instr.called[0]
    core = output_fusion_core(fused)
    if core.opcode is not Opcode.CONVOLUTION or core.shape.dtype != dtypes.F32:
        return None
    epilogue = plan_epilogue(instr)
    plan = plan_conv(core, target, lean, instr.operands[1].opcode is Opcode.CONSTANT)
    if epilogue is None or isinstance(plan.spec, NaiveConv):
        return None
    return KernelPlan(replace(plan.spec, epilogue=epilogue), plan.sizes, plan.scratch)


# --- reference loop nest ----------------------------------------------------------------

def emit_naive_conv(b: ir.IRBuilder, spec: NaiveConv, out, x, k) -> None:
    """Any dimension numbers, window, feature / batch groups and element type (XLA's
    semantics: output feature f uses feature group f // (Cout/fg) and batch group
    f // (Cout/bg); batch group j reads input images j*(N/bg) ...)."""
    xs, ks, os_ = spec.x, spec.k, spec.out
    dn, w = spec.dn, spec.window
    fg, bg = spec.feature_groups, spec.batch_groups
    dtype = os_.dtype
    ety, aty = llvm_type(dtype), scalar.acc_type(dtype)
    sx, sk = row_major_strides(xs.dims), row_major_strides(ks.dims)
    cout, cin_g, nsp = os_.dims[dn.output_feature], ks.dims[dn.kernel_input], w.rank
    acc = alloca_once(b, aty, "acc")
    with for_range(b, os_.num_elements, "o") as flat:
        coord, rem = [None] * os_.rank, flat
        for d in reversed(range(os_.rank)):
            coord[d] = b.urem(rem, i64(os_.dims[d]))
            rem = b.udiv(rem, i64(os_.dims[d]))
        of = coord[dn.output_feature]
        fgrp = b.udiv(of, i64(cout // fg))
        bgrp = b.udiv(of, i64(cout // bg))
        image = b.add(b.mul(bgrp, i64(os_.dims[dn.output_batch])), coord[dn.output_batch])
        x_base = b.add(b.mul(image, i64(sx[dn.input_batch])),
                       b.mul(fgrp, i64(cin_g * sx[dn.input_feature])))
        k_base = b.mul(of, i64(sk[dn.kernel_output]))
        b.store(scalar.zero(dtype), acc)
        with for_range(b, cin_g, "ci") as ci:
            xo = b.add(x_base, b.mul(ci, i64(sx[dn.input_feature])))
            ko = b.add(k_base, b.mul(ci, i64(sk[dn.kernel_input])))
            _window(b, spec, 0, [coord[dn.output_spatial[i]] for i in range(nsp)], xo, ko,
                    ir.Constant(ir.IntType(1), 1), x, k, acc, sx, sk, aty)
        b.store(scalar.narrow(b, b.load(acc, typ=aty), dtype),
                b.gep(out, [flat], source_etype=ety, inbounds=True))


def _window(b, spec: NaiveConv, i, out_pos, xo, ko, inside, x, k, acc, sx, sk, aty):
    """Loop over window dim i; at the innermost level accumulate when all dims are inside."""
    dn, w = spec.dn, spec.window
    dtype = spec.out.dtype
    if i == w.rank:
        with b.if_then(inside):
            xt, kt = spec.x.dtype, spec.k.dtype
            xty, kty = llvm_type(xt), llvm_type(kt)
            xv = b.load(b.gep(x, [xo], source_etype=xty, inbounds=True), typ=xty)
            kv = b.load(b.gep(k, [ko], source_etype=kty, inbounds=True), typ=kty)
            b.store(scalar.mul_add(b, b.load(acc, typ=aty), xv, kv, dtype, xt, kt), acc)
        return
    extent = spec.x.dims[dn.input_spatial[i]]
    dilated = (extent - 1) * w.lhs_dilation[i] + 1
    with for_range(b, w.size[i], f"w{i}") as kk:
        # position in the (base-dilated, padded) input
        pos = b.sub(b.add(b.mul(out_pos[i], i64(w.stride[i])), b.mul(kk, i64(w.rhs_dilation[i]))),
                    i64(w.pad_low[i]))
        ok = b.and_(b.icmp_signed(">=", pos, i64(0)), b.icmp_signed("<", pos, i64(dilated)))
        if w.lhs_dilation[i] > 1:
            ok = b.and_(ok, b.icmp_signed("==", b.srem(pos, i64(w.lhs_dilation[i])), i64(0)))
            pos = b.sdiv(pos, i64(w.lhs_dilation[i]))
        _window(b, spec, i + 1, out_pos, b.add(xo, b.mul(pos, i64(sx[dn.input_spatial[i]]))),
                b.add(ko, b.mul(kk, i64(sk[dn.kernel_spatial[i]]))), b.and_(inside, ok),
                x, k, acc, sx, sk, aty)
