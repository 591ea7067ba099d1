"""What the convolution kernels share: the window they are compiled from, the sizes of a
call, and the coordinates of vectors of output pixels or columns.

Batch, groups, channels and image sizes are run-time arguments (``ConvSizes``), so every
layer with one window and path shares a kernel. The coordinates of a vector of output
pixels come from one scalar division of its first pixel plus the precomputed
mixed-radix digits of the lane offsets (``LaneCoords``), so no vector division runs in
the inner loops.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import product
from math import prod

from llvmlite import ir

from ....hlo import Instruction, Window
from ...irutil import I1, I32, for_range, i64
from ..epilogue import EpilogueOperands
from ..gemm import Tiling
from ..sizes import Size, first_lanes, imin, product as size_product, splat_i32
from ..vec import (F32, const_vec, lane_mask, load_vec, masked_gather, masked_load,
                   masked_store, offset_ptr, splat, store_vec, vec_type, zeros)


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



@dataclass(frozen=True)
class ConvSizes:
    """The sizes of one call, which its i64 arguments are made of (``arguments``, named
    by ``params``): ints in a plan, the function's arguments in its frame."""
    batch: Size
    groups: Size
    cin_g: Size                 # input channels per group
    cout_g: Size                # output channels per group
    in_sp: tuple[Size, ...]     # input spatial dims
    out_sp: tuple[Size, ...]
    # The part of the output a call computes, (first, count), where its spec takes one
    # (parallel.py's split hooks): output pixels (ConvGemm.pixel_range) or output rows
    # (ChannelConv.row_range); None: all of it.
    pixels: tuple[Size, Size] | None = None
    rows: tuple[Size, Size] | None = None

    @staticmethod
    def of(instr: Instruction) -> "ConvSizes":
        x, k = (o.shape for o in instr.operands)
        groups = instr.attrs["feature_group_count"]
        return ConvSizes(x.dims[0], groups, x.dims[1] // groups, k.dims[0] // groups,
                         tuple(x.dims[2:]), tuple(instr.shape.dims[2:]))

    @staticmethod
    def params(rank: int, pixels: bool = False, rows: bool = False) -> tuple[str, ...]:
        """The names of ``arguments``, in their order."""
        return (("batch", "groups", "cin_g", "cout_g") + tuple(f"in{i}" for i in range(rank))
                + tuple(f"out{i}" for i in range(rank)) + (("px0", "pxn") if pixels else ())
                + (("oy0", "oyn") if rows else ()))

    def arguments(self) -> tuple[Size, ...]:
        return (self.batch, self.groups, self.cin_g, self.cout_g, *self.in_sp, *self.out_sp,
                *(self.pixels or ()), *(self.rows or ()))

    @staticmethod
    def from_arguments(values, rank: int, pixels: bool = False,
                       rows: bool = False) -> "ConvSizes":
        """The sizes whose ``arguments`` are ``values``."""
        v = list(values)
        part = tuple(v[4 + 2 * rank:])
        return ConvSizes(*v[:4], tuple(v[4:4 + rank]), tuple(v[4 + rank:4 + 2 * rank]),
                         part if pixels else None, part if rows else None)

    @property
    def out_pixels(self) -> int:
        return prod(self.out_sp)


class ConvKernel(EpilogueOperands):
    """The fast kernels' specs: their sizes are ConvSizes; ``pixel_range`` and
    ``row_range`` are the split hooks of those that have them, ``scratch_bytes`` is
    nonzero for those that need scratch."""
    pixel_range = False
    row_range = False
    scratch_bytes = 0

    @property
    def params(self) -> tuple[str, ...]:
        return ConvSizes.params(self.window.rank, self.pixel_range, self.row_range)

    def sizes_of(self, values) -> ConvSizes:
        return ConvSizes.from_arguments(values, self.window.rank, self.pixel_range,
                                        self.row_range)


class Geometry:
    """The run-time sizes of one call, and the products the loops need."""

    def __init__(self, b: ir.IRBuilder, size: ConvSizes):
        rank = len(size.in_sp)
        self.batch, self.groups = size.batch, size.groups
        self.cin_g, self.cout_g = size.cin_g, size.cout_g
        self.in_sp, self.out_sp = list(size.in_sp), list(size.out_sp)
        self.cin = b.mul(self.cin_g, self.groups)
        self.cout = b.mul(self.cout_g, self.groups)
        self.in_pixels = size_product(b, self.in_sp)
        self.out_pixels = size_product(b, self.out_sp)
        self.in_strides = [size_product(b, self.in_sp[i + 1:]) for i in range(rank)]

    def group(self, b: ir.IRBuilder, lhs, rhs, img, grp, kg) -> tuple:
        """Of image ``img`` and group ``grp``: the group's first input channel, its
        weights (``kg`` per output channel) and the index of its first output channel."""
        chan0 = b.add(b.mul(img, self.cin), b.mul(grp, self.cin_g))
        base = offset_ptr(b, lhs, F32, b.mul(chan0, self.in_pixels))
        weights = offset_ptr(b, rhs, F32, b.mul(grp, b.mul(self.cout_g, kg)))
        return base, weights, b.add(b.mul(img, self.cout), b.mul(grp, self.cout_g))


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

    def load(self, b: ir.IRBuilder, chan: ir.Value, kpos: tuple) -> ir.Value:
        """in[pixel * stride + kpos * dil - pad] for each lane, 0 outside the image.
        ``kpos``: the window position, ints, or i64 values (a run-time window loop:
        every dim some position of which may leave the image is checked)."""
        w, lanes = self.w, self.lanes
        known = all(isinstance(k, int) for k in kpos)
        # k * dil per dim: a constant, or a run-time value.
        kd = [k * d if known else b.mul(k, i64(d)) for k, d in zip(kpos, w.dil)]
        mask = self.valid
        for i, k in enumerate(kpos):
            if not (w.may_leave(i, k) if known
                    else any(w.may_leave(i, j) for j in range(w.size[i]))):
                continue
            inside = b.icmp_unsigned("<", b.add(self.pos[i], splat_i32(b, kd[i], lanes)),
                                     self.in_sp[i])
            mask = inside if mask is None else b.and_(mask, inside)
        vty = vec_type(F32, lanes)
        strides = self.geo.in_strides
        if self.offsets is None:
            # Contiguous: lane j reads element n0 + j + sum((k_i*dil_i - pad_i) * stride_i).
            start = self.n0
            for k, p, s in zip(kd, w.pad_low, strides):
                if not known:
                    start = b.add(start, b.mul(b.sub(k, i64(p)), s))
                elif k - p:
                    start = b.add(start, b.mul(i64(k - p), s))
            ptr = offset_ptr(b, chan, F32, start)
            return load_vec(b, ptr, vty) if mask is None else masked_load(b, ptr, vty, mask)
        shift = _ivec(0, lanes)
        for k, s in zip(kd, strides):
            if not known:
                shift = b.add(shift, splat_i32(b, b.mul(k, s), lanes))
            elif k:
                shift = b.add(shift, b.mul(_ivec(k, lanes), splat_i32(b, s, lanes)))
        all_lanes = lane_mask(lanes, lanes)
        return masked_gather(b, chan, F32, b.add(self.offsets, shift),
                             all_lanes if mask is None else mask)


def _ivec(v: int, lanes: int) -> ir.Constant:
    return const_vec(I32, [v] * lanes)




def pixel_vectors(b: ir.IRBuilder, geo: Geometry, coords: LaneCoords, state: list,
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


def store_pixels(b: ir.IRBuilder, value: ir.Value, ptr: ir.Value, valid) -> None:
    if valid is None:
        store_vec(b, value, ptr)
    else:
        masked_store(b, value, ptr, valid)



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


def row_interior(b: ir.IRBuilder, w: ConvWindow, geo: Geometry, lanes: int, unroll: int):
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



def row_vector(b: ir.IRBuilder, w: ConvWindow, lanes: int, geo: Geometry, row, valid,
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

