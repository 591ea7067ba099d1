"""Direct 2-D convolution vectorized over output channels (``ChannelConv``), and the
choice of its tile."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from ...irutil import I8, I64, alloca_once, for_range, i64
from ..epilogue import NO_EPILOGUE, Epilogue
from ..function import Frame
from ..gemm import Tiling
from ..sizes import imin
from ..vec import (F32, fma, lane_mask, load_vec, masked_store, offset_ptr, prefetch, splat,
                   store_vec, transpose_square, vec_type, zeros)
from .geometry import ConvKernel, ConvSizes, ConvWindow, Geometry
from .tuning import ConvTuning


@dataclass(frozen=True)
class ChannelConv(ConvKernel):
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
    tiles at the edges), well predicted: faster than a padded copy of the input in the
    scratch (benchmarks/conv_tuning.md).

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

    @property
    def panel(self) -> int:
        return self.vectors * self.lanes

    def pack_weights(self, weights: np.ndarray, sizes: ConvSizes) -> np.ndarray:
        """OIHW weights in the kernel's order (class docstring); same size."""
        groups, cout_g = sizes.groups, sizes.cout_g
        w = np.asarray(weights, np.float32).reshape(groups, cout_g, -1)
        panels = [w[:, c:c + self.panel].transpose(0, 2, 1)
                  for c in range(0, cout_g, self.panel)]
        return np.concatenate([p.reshape(groups, -1) for p in panels], axis=1)

    def emit(self, f: Frame) -> None:
        b, w, lanes = f.b, self.window, self.lanes
        geo = Geometry(b, f.size)
        oh, iw = geo.out_sp[0], geo.in_sp[1]
        kg = b.mul(geo.cin_g, i64(w.window))
        oy0, oy_end = (i64(0), oh) if not self.row_range else \
            (f.size.rows[0], b.add(*f.size.rows))
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
    in the shared L3 between calls), and the prefetch takes a third off its 1x1 layers
    on 7x7 maps (benchmarks/conv_tuning.md)."""
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


def channel_tile(window: ConvWindow, sizes: ConvSizes, t: Tiling,
                 tuning: ConvTuning) -> tuple[int, int, int]:
    """ChannelConv's tile: (vectors, rows, cols)."""
    registers = t.registers
    # A map that one tile of 2 vectors covers and one of 3 does not (3 x 3 pixels) takes
    # 2: a panel's weights, from memory in a model, are then read once.
    pixels = sizes.out_pixels
    if (window.window == 1
            and registers >= tuning.pointwise_accumulators + tuning.pointwise_vectors + 2
            and not tuning.pointwise_accumulators // tuning.pointwise_vectors < pixels
            <= (registers - tuning.channels_vectors - 2) // tuning.channels_vectors):
        vectors, accumulators = tuning.pointwise_vectors, tuning.pointwise_accumulators
        cols = channel_cols(sizes.out_sp[1], min(t.lanes, accumulators // vectors))
    else:
        # One vector where the group has only that many output channels (a 16-channel
        # stem at AVX-512), so its accumulators are sized for the vectors it runs.
        vectors = min(tuning.channels_vectors, sizes.cout_g // t.lanes)
        accumulators = registers - vectors - 2
        cols = channel_cols(sizes.out_sp[1],
                            min(tuning.channels_cols, t.lanes, accumulators // vectors))
    # No more rows than the map has: taller tiles would only add compile-time variants
    # (a squeeze-excitation's 1x1 map needs one row, not three).
    return vectors, max(1, min(sizes.out_sp[0], accumulators // (vectors * cols))), cols


def channel_cols(width: int, most: int) -> int:
    """ChannelConv's pixels per tile along a row of ``width``, at most ``most``: the
    fewest columns computed per row (the last tile of a row is shifted back inside it
    and recomputes what it overlaps), then the widest tile, among tiles at least half
    as wide as they may be (narrower ones leave most accumulators idle and transpose
    more per pixel). A 16-wide map takes tiles of 8, not 14 and 14 shifted back by 12,
    a 32-wide one 4 x 8, not 3 x 14."""
    most = min(width, most)
    return min(range(-(-most // 2), most + 1), key=lambda c: (-(-width // c) * c, -c))

