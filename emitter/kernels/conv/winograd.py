"""Winograd's minimal filtering for 3x3 stride-1 convolutions: F(m x m, 3 x 3).

Lavin & Gray (2015): an output tile of m x m pixels of one channel pair is
``A^T [(G g G^T) . (B^T d B)] A``, g the 3x3 filter, d the (m + 2)^2 input tile under
it and ``.`` the element-wise product: (m + 2)^2 multiplies where the direct
convolution does 9 m^2. Summed over the input channels, the element-wise products
become (m + 2)^2 independent GEMMs, one per position xi of the transformed tile:

    M_xi (Cout x tiles) = U_xi (Cout x Cin) * V_xi (Cin x tiles)
    U_xi = (G g G^T)_xi per channel pair    (weights, transformed at run time)
    V_xi = (B^T d B)_xi per channel and tile (input)

and each output tile is ``A^T M A`` with the fused epilogue (bias, ReLU/clip, residual
add) applied before the store.

The weights stay 3x3 in the object (transformed they would take (m + 2)^2 / 9 times
the bytes): each call transforms them into its scratch, a block of output channels at
a time. Blocking keeps the scratch bounded whatever the layer:

    for each block of OB output channels (U: (m+2)^2 x OB x Cin floats):
      transform its weights into U
      for each image, each block of NT tiles (NT = the GEMM's sliver width, NR):
        transform the input under them into V ((m+2)^2 x Cin x NT)
        the (m+2)^2 GEMMs (gemm.emit_gemm, V read in place as the packed sliver:
          it is one, NT columns wide) into M ((m+2)^2 x OB x NT)
        transform M into the output tiles, apply the epilogue, store

OB is chosen at run time (``out_block``) so that U stays within U_FLOATS; the input
transform runs once per block of output channels. The scratch (``scratch_floats``) is
about 512 KiB + 2.1 KiB per input channel at AVX-512 (1.1 MiB at 256 input channels,
the most path.py gives it). Vectors run over NT tiles, in the order of a tile grid
one column wider than the tiles: the vertical half of the input transform runs along
input rows with plain (edge-masked) loads and leaves its rows split into m phases of
columns, so that the horizontal half reads the m + 2 columns of a vector of tiles, m
apart, as m + 2 plain loads (``_phases``); the output tiles go the opposite way, their
phases interleaved into rows of output pixels (``_outputs``). Every output element is
computed by the same instructions whatever the blocks, so splitting the output
channels between threads (parallel.py) gives NAME_run's results bit for bit.

F(2x2, 3x3) only: F(4x4, 3x3) (36 GEMMs, 4x fewer multiplies than direct) was faster
only on 64 channels, slower from 128 (fewer output channels per block of U) and 15 times
less accurate (benchmarks/conv_tuning.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction as Fr

from llvmlite import ir

from ...irutil import I32, for_range, i64
from ..epilogue import NO_EPILOGUE, Epilogue
from ..function import Frame
from ..gemm import DirectRows, GemmShape, Tiling, emit_gemm
from ..sizes import ceil_div, first_lanes, imin, splat_i32
from ..vec import (F32, const_vec, load_vec, masked_gather, masked_load, masked_store,
                   offset_ptr, splat, store_vec, vec_type)
from .geometry import ConvKernel, ConvSizes, ConvWindow

# The transforms of Lavin & Gray for F(2x2, 3x3) (interpolation points 0, 1, -1 and
# infinity): B^T (input), G (filter), A^T (output). ``m`` names the one in use.
TRANSFORMS = {
    2: dict(
        bt=[[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        g=[[1, 0, 0], [Fr(1, 2), Fr(1, 2), Fr(1, 2)], [Fr(1, 2), Fr(-1, 2), Fr(1, 2)],
           [0, 0, 1]],
        at=[[1, 1, 1, 0], [0, 1, -1, -1]]),
}

# Floats of transformed weights per block of output channels (1 MiB with the V and M
# blocks below it at 256 input channels, F(2x2)): OB = U_FLOATS / ((m+2)^2 Cin) in
# multiples of MR, at least MR.
U_FLOATS = 1 << 17
# Floats between consecutive blocks xi of U, V and M beyond their size: the transforms
# read or write (m+2)^2 vectors one block apart, which with power-of-two channel counts
# would all fall in one set of the L1 cache (a multiple of 4 KiB apart).
SKEW = 16


@dataclass(frozen=True)
class WinogradConv(ConvKernel):
    """F(m x m, 3 x 3) for f32 NCHW convolutions of one group, stride 1, dilation 1,
    any padding (module docstring); ``window`` for the padding, ``tiling`` the GEMM's."""
    window: ConvWindow
    tiling: Tiling
    m: int
    epilogue: Epilogue = NO_EPILOGUE

    # The scratch grows with the channels: each plan states its own (scratch_floats).
    scratch_bytes = 64

    @property
    def alpha(self) -> int:
        return self.m + 2

    def out_block(self, cin: int, cout: int) -> int:
        """Output channels per block (``_out_block`` computes the same at run time)."""
        mr = self.tiling.mr
        ob = max(mr, U_FLOATS // (self.alpha ** 2 * cin) // mr * mr)
        return min(ob, cout)

    def scratch_floats(self, sizes: ConvSizes) -> int:
        """U, V and M (module docstring) of the largest block."""
        cin, a2, nt = sizes.cin_g, self.alpha ** 2, self.tiling.nr
        ob = self.out_block(cin, sizes.cout_g)
        phases = self.m * self.alpha * (nt + self.tiling.lanes)
        return a2 * (ob * cin + cin * nt + ob * nt + 3 * SKEW) + phases

    def _out_block(self, b: ir.IRBuilder, cin: ir.Value, cout: ir.Value) -> ir.Value:
        mr = i64(self.tiling.mr)
        ob = b.mul(b.udiv(b.udiv(i64(U_FLOATS), b.mul(cin, i64(self.alpha ** 2))), mr), mr)
        ob = b.select(b.icmp_signed("<", ob, mr), mr, ob)
        return imin(b, ob, cout)

    def emit(self, f: Frame) -> None:
        b, t = f.b, self.tiling
        a2, nt = self.alpha ** 2, t.nr
        size = f.size
        cin, cout = size.cin_g, size.cout_g
        in_px = b.mul(*size.in_sp)
        out_px = b.mul(*size.out_sp)
        # The tile grid has one column more than the tiles: grid column tx + 1 holds the
        # input columns a tile shares with the next (``_phases``); the last column's
        # tiles are computed and never stored.
        tiles_w = ceil_div(b, size.out_sp[1], self.m)
        grid_w = b.add(tiles_w, i64(1))
        tiles = b.mul(ceil_div(b, size.out_sp[0], self.m), grid_w)
        ob = self._out_block(b, cin, cout)
        # U_xi, V_xi, M_xi one after another, each SKEW floats further on.
        u_xi = b.add(b.mul(ob, cin), i64(SKEW))
        v_xi = b.add(b.mul(cin, i64(nt)), i64(SKEW))
        m_xi = b.add(b.mul(ob, i64(nt)), i64(SKEW))
        u = f.scratch
        v = offset_ptr(b, u, F32, b.mul(i64(a2), u_xi))
        mbuf = offset_ptr(b, v, F32, b.mul(i64(a2), v_xi))
        phases = offset_ptr(b, mbuf, F32, b.mul(i64(a2), m_xi))
        with for_range(b, ceil_div(b, cout, ob), "ob") as block:
            o0 = b.mul(block, ob)
            obn = imin(b, b.sub(cout, o0), ob)
            self._weights(b, f.rhs, u, u_xi, o0, obn, cin)      # once for all images
            with for_range(b, size.batch, "img") as img:
                x = offset_ptr(b, f.lhs, F32, b.mul(b.mul(img, cin), in_px))
                out0 = b.mul(b.add(b.mul(img, cout), o0), out_px)
                extra = self.epilogue.moved(b, f.extra, out0)
                with for_range(b, tiles, "tb", step=nt) as t0:
                    ntn = imin(b, b.sub(tiles, t0), nt)
                    self._inputs(b, x, v, v_xi, phases, t0, grid_w, tiles, cin, size, in_px)
                    with for_range(b, i64(a2), "xi") as xi:
                        shape = GemmShape(obn, ntn, cin, a_sm=cin, a_sk=i64(1), c_sm=i64(nt))
                        a = offset_ptr(b, u, F32, b.mul(xi, u_xi))
                        c = offset_ptr(b, mbuf, F32, b.mul(xi, m_xi))
                        rows = DirectRows(offset_ptr(b, v, F32, b.mul(xi, v_xi)), i64(nt),
                                          t.kc, padded=True)
                        emit_gemm(b, shape, a, c, rows, None, t)
                    self._outputs(b, f, mbuf, m_xi, phases, obn, o0, t0, grid_w, tiles, size,
                                  out_px, extra, offset_ptr(b, f.out, F32, out0))

    # --- the three transforms ---------------------------------------------------------

    def _weights(self, b, w, u, stride, o0, obn, cin) -> None:
        """U_xi[o][c] = (G g G^T)_xi of the filters of output channels o0 .. o0 + obn,
        vectors over input channels (a vector's 9 taps split from 9 contiguous vectors;
        the last, partial vector gathers them)."""
        lanes = self.tiling.lanes
        g = TRANSFORMS[self.m]["g"]
        taps = [const_vec(I32, [j * 9 + k for j in range(lanes)]) for k in range(9)]
        with for_range(b, obn, "wo") as o:
            row = offset_ptr(b, w, F32, b.mul(b.add(o0, o), b.mul(cin, i64(9))))
            whole = b.sub(cin, b.urem(cin, i64(lanes)))

            def channels(c0, mask):
                base = offset_ptr(b, row, F32, b.mul(c0, i64(9)))
                if mask is None:
                    # 9 x lanes contiguous floats, split into their 9 taps by shuffles
                    # (gathers 9 floats apart measured 1.7x slower).
                    flat = _split_taps(b, [load_vec(b, offset_ptr(b, base, F32, s * lanes),
                                                    vec_type(F32, lanes)) for s in range(9)])
                else:
                    flat = [masked_gather(b, base, F32, taps[k], mask) for k in range(9)]
                out = _sandwich(b, g, [flat[3 * i:3 * i + 3] for i in range(3)], g)
                dst = offset_ptr(b, u, F32, b.add(b.mul(o, cin), c0))
                for xi, value in enumerate(x for r in out for x in r):
                    ptr = offset_ptr(b, dst, F32, b.mul(i64(xi), stride))
                    if mask is None:
                        store_vec(b, value, ptr)
                    else:
                        masked_store(b, value, ptr, mask)

            with for_range(b, whole, "wc", step=lanes) as c0:
                channels(c0, None)
            with b.if_then(b.icmp_signed("<", whole, cin)):
                channels(whole, first_lanes(b, lanes, 0, b.sub(cin, whole)))

    def _inputs(self, b, x, v, stride, p, t0, grid_w, tiles, cin, size, in_px) -> None:
        """V_xi[c][t] = (B^T d B)_xi of tiles t0 .. t0 + NT of the grid (``_phases``
        first, per channel, then the horizontal transform from plain loads of them)."""
        t, m, alpha = self.tiling, self.m, self.alpha
        lanes, pw_ = t.lanes, t.nr + t.lanes
        bt = TRANSFORMS[m]["bt"]
        vty = vec_type(F32, lanes)
        with for_range(b, cin, "ic") as c:
            chan = offset_ptr(b, x, F32, b.mul(c, in_px))
            self._phases(b, chan, p, t0, grid_w, tiles, size)
            dst = offset_ptr(b, v, F32, b.mul(c, i64(t.nr)))
            for vec in range(t.nv):
                # d[i][j] = input column m * tx + j - pad of vertical row i: phase j % m
                # of grid column tx + j // m.
                d = [[load_vec(b, offset_ptr(b, p, F32, ((j % m) * alpha + i) * pw_
                                             + vec * lanes + j // m), vty)
                      for j in range(alpha)] for i in range(alpha)]
                rows = [[_combine(b, brow, d[i]) for brow in bt] for i in range(alpha)]
                for xi, value in enumerate(x for r in rows for x in r):
                    store_vec(b, value, offset_ptr(b, dst, F32,
                                                   b.add(b.mul(i64(xi), stride),
                                                         i64(vec * lanes))))

    def _phases(self, b, chan, p, t0, grid_w, tiles, size) -> None:
        """The vertical transform (B^T d) of one channel under grid columns t0 .. t0 + NT
        + 1, split into the m phases of the input columns: P[r][i][q - t0] is row i of
        the transform at input column m * qx + r - pad of grid row qy (q = qy * grid_w +
        qx), so that the tiles of a vector, m columns apart, read each phase with one
        plain load, across grid rows too. Vectors run along grid rows."""
        t, m, alpha = self.tiling, self.m, self.alpha
        lanes, pw_ = t.lanes, t.nr + t.lanes
        bt = TRANSFORMS[m]["bt"]
        (ph, pw) = self.window.pad_low[:2]
        h, w = size.in_sp
        end = imin(b, b.add(t0, i64(t.nr + 1)), tiles)
        row_lo = b.udiv(t0, grid_w)
        row_hi = ceil_div(b, end, grid_w)
        vty = vec_type(F32, lanes)
        with for_range(b, row_hi, "qy", start=row_lo) as qy:
            row0 = b.mul(qy, grid_w)
            lo = b.sub(t0, row0)
            lo = b.select(b.icmp_signed("<", lo, i64(0)), i64(0), lo)
            hi = imin(b, b.sub(end, row0), grid_w)
            iy0 = b.sub(b.mul(qy, i64(m)), i64(ph))
            rows, ok = [], []
            for k in range(alpha):
                iy = b.add(iy0, i64(k))
                inside = b.icmp_unsigned("<", iy, h)
                ok.append(splat(b, inside, lanes))
                rows.append(offset_ptr(b, chan, F32, b.mul(b.select(inside, iy, i64(0)), w)))
            with for_range(b, hi, "qx", start=lo, step=lanes) as qx:
                # Lanes qx .. qx + lanes of this grid row (masked past hi); their input
                # columns m * qx - pad ..., m vectors of them, masked outside the image.
                x0 = b.sub(b.mul(qx, i64(m)), i64(pw))
                cols = [b.icmp_unsigned("<", b.add(splat_i32(b, x0, lanes),
                                                   const_vec(I32, range(s * lanes,
                                                                        (s + 1) * lanes))),
                                        splat_i32(b, w, lanes)) for s in range(m)]
                phases = []
                for k in range(alpha):
                    loaded = [masked_load(b, offset_ptr(b, rows[k], F32,
                                                        b.add(x0, i64(s * lanes))),
                                          vty, b.and_(cols[s], ok[k])) for s in range(m)]
                    phases.append(_deinterleave(b, loaded))
                real = first_lanes(b, lanes, 0, b.sub(hi, qx))
                at = b.sub(b.add(row0, qx), t0)
                for r in range(m):
                    for i, brow in enumerate(bt):
                        value = _combine(b, brow, [phases[k][r] for k in range(alpha)])
                        dst = offset_ptr(b, p, F32, b.add(at, i64((r * alpha + i) * pw_)))
                        masked_store(b, value, dst, real)
    def _outputs(self, b, f, mbuf, stride, q, obn, o0, t0, grid_w, tiles, size, out_px,
                 extra, out) -> None:
        """Output tiles t0 .. t0 + NT of channels o0 .. o0 + obn: per channel, A^T M A
        into Q, split by phases of output columns as ``_phases`` splits the input
        (Q[j][i][t - t0]: row i, column j of tile t), then rows of output pixels from
        plain loads of Q, interleaved, the epilogue applied, stored (masked past the
        output's edge and the block's tiles)."""
        t, m, alpha = self.tiling, self.m, self.alpha
        lanes, pw_ = t.lanes, t.nr + t.lanes
        at = TRANSFORMS[m]["at"]
        vty = vec_type(F32, lanes)
        epilogue = self.epilogue
        oh, ow = size.out_sp
        end = imin(b, b.add(t0, i64(t.nr)), tiles)
        row_lo = b.udiv(t0, grid_w)
        row_hi = ceil_div(b, end, grid_w)
        with for_range(b, obn, "oo") as o:
            src = offset_ptr(b, mbuf, F32, b.mul(o, i64(t.nr)))
            for vec in range(t.nv):
                mv = [load_vec(b, offset_ptr(b, src, F32, b.add(b.mul(i64(xi), stride),
                                                                i64(vec * lanes))), vty)
                      for xi in range(alpha * alpha)]
                y = _sandwich(b, at, [mv[i * alpha:(i + 1) * alpha] for i in range(alpha)], at)
                for i in range(m):
                    for j in range(m):
                        store_vec(b, y[i][j], offset_ptr(b, q, F32,
                                                         (j * m + i) * pw_ + vec * lanes))
            values = epilogue.values(b, f.extra, b.add(o0, o), lanes)
            plane = b.mul(o, out_px)
            with for_range(b, row_hi, "ry", start=row_lo) as qy:
                row0 = b.mul(qy, grid_w)
                lo = b.sub(t0, row0)
                lo = b.select(b.icmp_signed("<", lo, i64(0)), i64(0), lo)
                hi = imin(b, b.sub(end, row0), grid_w)
                with for_range(b, hi, "rx", start=lo, step=lanes) as qx:
                    at_q = b.sub(b.add(row0, qx), t0)
                    x0 = b.mul(qx, i64(m))
                    # output column x0 + e is real iff inside the map and its tile is one
                    # of the block's (e < m * (hi - qx))
                    limit = imin(b, b.sub(ow, x0), b.mul(b.sub(hi, qx), i64(m)))
                    masks = [first_lanes(b, lanes, s * lanes, limit) for s in range(m)]
                    for i in range(m):
                        oy = b.add(b.mul(qy, i64(m)), i64(i))
                        with b.if_then(b.icmp_signed("<", oy, oh)):
                            phases = [load_vec(b, offset_ptr(b, q, F32, b.add(
                                at_q, i64((j * m + i) * pw_))), vty) for j in range(m)]
                            row = b.add(plane, b.add(b.mul(oy, ow), x0))
                            for s, value in enumerate(_interleave(b, phases)):
                                index = b.add(row, i64(s * lanes))
                                full = epilogue.full(b, extra, index, masks[s], lanes)
                                value = epilogue.apply(b, value, values | full)
                                masked_store(b, value, offset_ptr(b, out, F32, index), masks[s])


def _combine(b: ir.IRBuilder, coeffs, xs):
    """sum(c * x) over the nonzero constant coefficients, in order (+-1 as add/sub)."""
    acc = None
    for c, x in zip(coeffs, xs):
        if c == 0:
            continue
        if c in (1, -1):
            term = x
        else:
            term = b.fmul(x, const_vec(F32, [float(c)] * x.type.count))
        if acc is None:
            acc = term if c != -1 else b.fneg(term)
        elif c == -1:
            acc = b.fsub(acc, term)
        else:
            acc = b.fadd(acc, term)
    return acc


def _sandwich(b: ir.IRBuilder, left, x, right):
    """``left @ x @ right^T`` for constant matrices and a matrix of vectors."""
    rows = [[_combine(b, lrow, [x[k][j] for k in range(len(x))]) for j in range(len(x[0]))]
            for lrow in left]
    return [[_combine(b, rrow, row) for rrow in right] for row in rows]


def _split_taps(b: ir.IRBuilder, vectors: list, taps: int = 9) -> list:
    """``taps`` vectors of consecutive floats (lanes filters of ``taps`` taps each) ->
    one vector per tap: lane l of vector k is element taps * l + k, collected by a chain
    of two-source shuffles, each taking the lanes that lie in the next vector."""
    lanes = vectors[0].type.count
    out = []
    for k in range(taps):
        source = [(taps * l + k) // lanes for l in range(lanes)]
        first = source[0]
        acc = vectors[first]
        mask = [(taps * l + k) % lanes if source[l] == first else l for l in range(lanes)]
        for s in sorted(set(source) - {first}):
            mask = [lanes + (taps * l + k) % lanes if source[l] == s else mask[l]
                    for l in range(lanes)]
            acc = b.shuffle_vector(acc, vectors[s], const_vec(I32, mask))
            mask = list(range(lanes))
        if len(set(source)) == 1:
            acc = b.shuffle_vector(acc, acc, const_vec(I32, mask))
        out.append(acc)
    return out


def _deinterleave(b: ir.IRBuilder, vectors: list) -> list:
    """m vectors of consecutive elements -> m vectors: r holds elements r, r + m, r + 2m...
    (m a power of two: halves of even and odd elements, recursively)."""
    m = len(vectors)
    if m == 1:
        return vectors
    lanes = vectors[0].type.count
    even = const_vec(I32, range(0, 2 * lanes, 2))
    odd = const_vec(I32, range(1, 2 * lanes, 2))
    pairs = [(vectors[s], vectors[s + 1]) for s in range(0, m, 2)]
    evens = _deinterleave(b, [b.shuffle_vector(x, y, even) for x, y in pairs])
    odds = _deinterleave(b, [b.shuffle_vector(x, y, odd) for x, y in pairs])
    return [v for pair in zip(evens, odds) for v in pair]


def _interleave(b: ir.IRBuilder, phases: list) -> list:
    """The inverse of ``_deinterleave``: m vectors, r holding elements r, r + m, ... ->
    m vectors of consecutive elements."""
    m = len(phases)
    if m == 1:
        return phases
    lanes = phases[0].type.count
    half = lanes // 2
    evens, odds = _interleave(b, phases[0::2]), _interleave(b, phases[1::2])
    out = []
    for e, o in zip(evens, odds):
        for h in range(2):
            out.append(b.shuffle_vector(e, o, const_vec(I32, [x for l in range(half)
                                                             for x in (h * half + l,
                                                                       lanes + h * half + l)])))
    return out
