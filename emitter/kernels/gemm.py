"""The f32 GEMM core: ``C (M x N) = A (M x K) * B (K x N)``, sizes and strides at run time.

Blocking (GotoBLAS, shrunk so the scratch stays small):

    for m0 in 0..M step MC:                 A block MC x KC stays in L2
      for k0 in 0..K step KC:
        for n0 in 0..N step NR:             one B sliver, packed: KC x NR, in L1
          pack B[k0:k0+kc, n0:n0+NR]        (zeros past N)
          for m in m0..m0+MC step MR:       micro-kernel: MR x NR accumulators in registers
            C[m:m+MR, n0:n0+NR] (+)= A[m:m+MR, k0:k0+kc] * Bsliver

Only one sliver is packed at a time, so the scratch is KC x NR floats (16 KiB for
AVX2) whatever the problem size. The packer is a parameter: a strided matrix here, an
on-the-fly im2col in conv/implicit_gemm.py, ``DirectRows``: B's rows read where they
are (their columns contiguous), no scratch, which is what a product of at most MR rows
wants anyway (each B element is read once, so packing would only copy it), or
``PackedSlivers``: constant weights packed at compile time, read in place.
A's elements are broadcast straight from memory (any strides).

M, N, K and the strides are run-time values, so one function serves every layer with
the same tiling. Remainders are handled at run time: the last rows of M take the
shortest tile height that covers them (``tile_heights``), with rows past M clamped to
row M-1 (their duplicate results are stored first, then overwritten by the real row);
the last sliver of N is zero-padded by the packer, computed one vector wide when it is
that narrow, and stored through run-time lane masks (full slivers keep plain stores).

``row_epilogue(b, value, row, column, mask)``, where given, maps each vector of C at
(``row``, ``column``) (``mask``: its real lanes, None for all) as the last K block
stores it: a convolution's or dot's fused bias, activation and residual, applied in
registers (epilogue.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
from llvmlite import ir

from ..irutil import alloca_once, for_range, i64
from .sizes import ceil_div, first_lanes, imin
from .vec import (F32, fma, load_vec, masked_load, masked_store, offset_ptr, splat, store_vec,
                  transpose_square, vec_type, zeros)


@dataclass(frozen=True)
class Tiling:
    lanes: int      # f32 lanes of one vector register
    nv: int         # vectors per micro-tile row (NR = lanes * nv)
    mr: int         # micro-tile rows
    kc: int         # K block
    mc: int         # largest M block: MC x KC floats of A stay in L2
    registers: int  # vector registers the tiles are sized for (the target's)

    @property
    def nr(self) -> int:
        return self.lanes * self.nv


def tiling_for(target) -> Tiling:
    """Micro-tile sized to the register file (``target.registers``): MR*NV accumulators +
    NV B vectors + 1 splat; 6 x 16 with AVX2's 16 registers (the classic Haswell kernel).
    """
    lanes = 1 << max(0, (target.vector_bytes // 4).bit_length() - 1)   # a power of two
    regs = target.registers
    nv = 2
    mr = min(8, (regs - nv - 1) // nv)
    return Tiling(lanes=lanes, nv=nv, mr=mr, kc=256, mc=256, registers=regs)


class Packer(Protocol):
    """Writes rows ``k0 .. k0+kc`` of columns ``n0 .. n0+NR`` of B as kc rows of NR
    contiguous floats at ``dst``. ``valid`` (run time): the columns left from n0, fewer
    than NR in the last sliver; the columns past them may hold any finite values (their
    results are never stored) but must not be read from past the end of B."""

    k_block: int    # rows per K block (the packer may need whole groups of rows)

    def pack(self, b: ir.IRBuilder, dst: ir.Value, k0: ir.Value, kc: ir.Value, n0: ir.Value,
             valid: ir.Value) -> None: ...


def whole_or_tail(b: ir.IRBuilder, valid: ir.Value, t: Tiling, pack_columns) -> None:
    """``pack_columns(None)`` for full slivers, ``pack_columns(valid)`` for the last one:
    the full ones keep unmasked loads."""
    with b.if_else(b.icmp_signed(">=", valid, i64(t.nr))) as (whole, tail):
        with whole:
            pack_columns(None)
        with tail:
            pack_columns(valid)


@dataclass(frozen=True)
class MatrixPacker:
    """Packs a strided matrix B: element (k, n) at ``base[k*sk + n*sn]``; ``unit_n``
    (compile time) says sn == 1, which allows vector loads; ``unit_k`` says sk == 1 (a
    transposed B, such as K^T in attention): each column is a run of floats, copied
    down the sliver (``_pack_columns``)."""
    base: ir.Value
    sk: ir.Value
    sn: ir.Value
    unit_n: bool
    tiling: Tiling
    k_block: int
    unit_k: bool = False

    def pack(self, b, dst, k0, kc, n0, valid):
        if self.unit_k and not self.unit_n:
            self._pack_columns(b, dst, k0, kc, n0, valid)
            return
        whole_or_tail(b, valid, self.tiling, lambda v: self._pack(b, dst, k0, kc, n0, v))

    def _pack_columns(self, b, dst, k0, kc, n0, valid):
        """Column j of the sliver (kc contiguous floats of B) into place j of each packed
        row; columns past ``valid`` are zeros (their reads stay in column n0). Groups of
        ``lanes`` real columns go as squares of vectors transposed in registers, down to
        the last multiple of ``lanes`` rows; the rest one float at a time."""
        t = self.tiling
        nr, lanes = t.nr, t.lanes
        vty = vec_type(F32, lanes)
        whole = b.mul(b.sdiv(kc, i64(lanes)), i64(lanes)) if lanes >= 4 else i64(0)
        if lanes >= 4:
            for g in range(t.nv):
                with b.if_then(b.icmp_signed(">=", valid, i64((g + 1) * lanes))):
                    cols = [b.mul(b.add(n0, i64(g * lanes + j)), self.sn)
                            for j in range(lanes)]
                    with for_range(b, whole, "pk", step=lanes) as k:
                        at = b.add(k0, k)
                        rows = transpose_square(b, [
                            load_vec(b, offset_ptr(b, self.base, F32, b.add(c, at)), vty)
                            for c in cols])
                        for i, row in enumerate(rows):
                            store_vec(b, row, offset_ptr(b, dst, F32, b.add(
                                b.mul(b.add(k, i64(i)), i64(nr)), i64(g * lanes))))
        with for_range(b, i64(nr), "pj") as j:
            real = b.icmp_signed("<", j, valid)
            group_real = b.icmp_signed("<=", b.add(b.sub(j, b.srem(j, i64(lanes))),
                                                   i64(lanes)), valid)
            start = b.select(group_real, whole, i64(0))
            src = b.add(k0, b.mul(b.select(real, b.add(n0, j), n0), self.sn))
            with for_range(b, kc, "pk", start=start) as k:
                val = b.load(offset_ptr(b, self.base, F32, b.add(src, k)), typ=F32)
                b.store(b.select(real, val, ir.Constant(F32, 0.0)),
                        offset_ptr(b, dst, F32, b.add(b.mul(k, i64(nr)), j)))

    def _pack(self, b, dst, k0, kc, n0, valid):
        """``valid`` None: all NR columns; else columns past it are written as zeros."""
        t = self.tiling
        vty = vec_type(F32, t.lanes)
        masks = [None if valid is None else first_lanes(b, t.lanes, v * t.lanes, valid)
                 for v in range(t.nv)]
        with for_range(b, kc, "pk") as k:
            row = b.mul(b.add(k0, k), self.sk)
            src = b.add(row, b.mul(n0, self.sn))
            out = b.mul(k, i64(t.nr))
            for v in range(t.nv):
                start = b.add(src, b.mul(i64(v * t.lanes), self.sn))
                val = self._load(b, start, vty, masks[v])
                store_vec(b, val, offset_ptr(b, dst, F32, b.add(out, i64(v * t.lanes))))

    def _load(self, b, index, vty, mask):
        if self.unit_n:
            ptr = offset_ptr(b, self.base, F32, index)
            return load_vec(b, ptr, vty) if mask is None else masked_load(b, ptr, vty, mask)
        val = zeros(vty)
        for j in range(vty.count):
            # columns past N read column 0 of this row (in bounds), then are masked to 0
            col = i64(j) if mask is None else b.select(b.extract_element(mask, i64(j)),
                                                       i64(j), i64(0))
            ptr = offset_ptr(b, self.base, F32, b.add(index, b.mul(col, self.sn)))
            val = b.insert_element(val, b.load(ptr, typ=F32), i64(j))
        return val if mask is None else b.select(mask, val, zeros(vty))


@dataclass(frozen=True)
class DirectRows:
    """B (columns contiguous, rows ``sk`` apart) read in place instead of packed: the
    sliver at (k0, n0) is B itself there; lanes past N are masked off on load, unless
    ``padded``: B's rows hold finite values up to the end of N's last sliver (a
    Winograd kernel's transformed tiles), read with plain loads."""
    base: ir.Value
    sk: ir.Value
    k_block: int
    padded: bool = False

    def sliver(self, b: ir.IRBuilder, k0: ir.Value, n0: ir.Value) -> ir.Value:
        return offset_ptr(b, self.base, F32, b.add(b.mul(k0, self.sk), n0))


@dataclass(frozen=True)
class PackedSlivers:
    """B packed before the call (a constant, at compile time: ``pack_slivers``): sliver
    j of NR columns holds K rows of NR floats, so the sliver at (k0, n0) is read in
    place at n0 * K + k0 * NR, and its padding columns are zeros."""
    base: ir.Value
    k: ir.Value
    t: Tiling
    padded = True

    @property
    def k_block(self) -> int:
        return self.t.kc

    @property
    def sk(self) -> ir.Value:
        return i64(self.t.nr)

    def sliver(self, b: ir.IRBuilder, k0: ir.Value, n0: ir.Value) -> ir.Value:
        return offset_ptr(b, self.base, F32, b.add(b.mul(n0, self.k), b.mul(k0, self.sk)))


def pack_slivers(matrix: np.ndarray, t: Tiling) -> np.ndarray:
    """A K x N matrix in ``PackedSlivers``' order: ceil(N / NR) slivers of K x NR floats,
    the last one's missing columns zero."""
    k, n = matrix.shape
    slivers = -(-n // t.nr)
    padded = np.zeros((k, slivers * t.nr), np.float32)
    padded[:, :n] = matrix
    return np.ascontiguousarray(padded.reshape(k, slivers, t.nr).transpose(1, 0, 2))


@dataclass(frozen=True)
class GemmShape:
    """Run-time sizes: A element (m, k) at a[m*a_sm + k*a_sk], C element (m, n) at
    c[m*c_sm + n] (columns contiguous)."""
    m: ir.Value
    n: ir.Value
    k: ir.Value
    a_sm: ir.Value
    a_sk: ir.Value
    c_sm: ir.Value


def scratch_floats(tiling: Tiling, k_block: int) -> int:
    return k_block * tiling.nr


def emit_gemm(b: ir.IRBuilder, g: GemmShape, a: ir.Value, c: ir.Value,
              packer: Packer | DirectRows | PackedSlivers, scratch: ir.Value | None,
              t: Tiling, row_epilogue=None) -> None:
    """Emit ``C = A * B`` at the builder's position (B comes through ``packer``, into
    ``scratch``, or is read in place), then ``row_epilogue`` (module docstring)."""
    # Equal M blocks, a multiple of MR each: a 4-row leftover block would repack every
    # B sliver for a quarter-empty micro-kernel.
    blocks = ceil_div(b, g.m, t.mc)
    mc = b.mul(ceil_div(b, ceil_div(b, g.m, blocks), t.mr), i64(t.mr))
    kb = packer.k_block
    with for_range(b, blocks, "mb") as block:
        m0 = b.mul(block, mc)
        m_hi = imin(b, b.add(m0, mc), g.m)
        with for_range(b, g.k, "k0", step=kb) as k0:
            kc = imin(b, b.sub(g.k, k0), kb)
            first = b.icmp_signed("==", k0, i64(0))
            with for_range(b, g.n, "n0", step=t.nr) as n0:
                valid = b.sub(g.n, n0)
                full = b.icmp_signed(">=", valid, i64(t.nr))
                if isinstance(packer, (DirectRows, PackedSlivers)):
                    bp, row, masked = packer.sliver(b, k0, n0), packer.sk, not packer.padded
                else:
                    packer.pack(b, scratch, k0, kc, n0, valid)
                    bp, row, masked = scratch, i64(t.nr), False
                sliver = _Sliver(b, g, t, a, c, bp, row, masked, n0, k0, kc, first, valid,
                                 row_epilogue)
                # A tail of at most one vector of columns gets one-vector tiles: half the
                # work where N is small (7x7 = 3 x 16 + 1 pixels).
                with b.if_else(b.icmp_signed(">", valid, i64(t.lanes))) as (wide, thin):
                    with wide:
                        sliver.tiles(m0, m_hi, t.nv, full)
                    with thin:
                        sliver.tiles(m0, m_hi, 1, None)


def tile_heights(t: Tiling) -> tuple[int, ...]:
    """Micro-tile heights, tallest first: MR, then the powers of two below it (down to 2)
    for the last rows of M. Channel counts are mostly multiples of 8, which leave 2 or 4
    rows after MR = 6; a full-height tile there would do up to 3x the work."""
    shorter = [1 << j for j in range((t.mr - 1).bit_length() - 1, 0, -1)]
    return (t.mr, *shorter)


@dataclass(frozen=True)
class _Sliver:
    """The micro-tiles over one packed sliver (columns n0 .. n0+NR, K block k0 .. k0+kc)."""
    b: ir.IRBuilder
    g: GemmShape
    t: Tiling
    a: ir.Value
    c: ir.Value
    bp: ir.Value            # the packed sliver (or B in place)
    b_row: ir.Value         # elements from one of its rows to the next: NR packed
    b_masked: bool          # B in place: lanes past N must not be read
    n0: ir.Value
    k0: ir.Value
    kc: ir.Value
    first: ir.Value         # first K block: C starts at zero
    valid: ir.Value         # columns of C left from n0 (>= NR when the sliver is full)
    row_epilogue: object = None

    def tiles(self, m0, m_hi, nvec: int, full: ir.Value | None) -> None:
        """Rows m0 .. m_hi in tiles ``nvec`` vectors wide; ``full`` (run time) says that
        all their columns are real, None that the last ones are masked."""
        with for_range(self.b, m_hi, "m", start=m0, step=self.t.mr) as m:
            self._tile(m, self.b.sub(m_hi, m), tile_heights(self.t), nvec, full)

    def _tile(self, m, left, heights, nvec, full):
        """The shortest tile of ``heights`` covering ``left`` rows (at most MR of them)."""
        b = self.b
        if len(heights) == 1:
            self._micro(m, heights[0], nvec, full)
            return
        with b.if_else(b.icmp_signed(">", left, i64(heights[1]))) as (tall, short):
            with tall:
                self._micro(m, heights[0], nvec, full)
            with short:
                self._tile(m, left, heights[1:], nvec, full)

    def _micro(self, m, height: int, nvec: int, full):
        """The ``height`` x ``nvec`` vectors tile of C at (m, n0) (+)= A rows . packed
        sliver; rows past M are clamped to M-1."""
        b, g, t = self.b, self.g, self.t
        vty = vec_type(F32, t.lanes)
        last_row = b.sub(g.m, i64(1))
        rows = [imin(b, b.add(m, i64(i)), last_row) if i else m for i in range(height)]
        c_ptr = [[offset_ptr(b, self.c, F32, b.add(b.add(b.mul(r, g.c_sm), self.n0),
                                                   i64(v * t.lanes)))
                  for v in range(nvec)] for r in rows]
        acc = [[alloca_once(b, vty, f"acc{i}.{v}") for v in range(nvec)]
               for i in range(height)]

        def masked(each):
            masks = [first_lanes(b, t.lanes, v * t.lanes, self.valid) for v in range(nvec)]
            for i in range(height):
                for v in range(nvec):
                    each(i, v, masks[v])

        def over_c(each):
            """``each(i, v, mask)`` for every vector of the tile, masks only in the tail."""
            if full is None:
                masked(each)
                return
            with b.if_else(full) as (whole, tail):
                with whole:
                    for i in range(height):
                        for v in range(nvec):
                            each(i, v, None)
                with tail:
                    masked(each)

        def load_c(i, v, mask):
            ptr = c_ptr[i][v]
            b.store(load_vec(b, ptr, vty) if mask is None else masked_load(b, ptr, vty, mask),
                    acc[i][v])

        with b.if_else(self.first) as (zero, keep):
            with zero:
                for i in range(height):
                    for v in range(nvec):
                        b.store(zeros(vty), acc[i][v])
            with keep:
                over_c(load_c)
        a_start = b.mul(self.k0, g.a_sk)
        a_rows = [offset_ptr(b, self.a, F32, b.add(b.mul(r, g.a_sm), a_start)) for r in rows]
        b_masks = [first_lanes(b, t.lanes, v * t.lanes, self.valid) if self.b_masked
                   else None for v in range(nvec)]
        with for_range(b, self.kc, "k") as k:
            bk = b.mul(k, self.b_row)
            bptr = [offset_ptr(b, self.bp, F32, b.add(bk, i64(v * t.lanes)))
                    for v in range(nvec)]
            bvec = [load_vec(b, p, vty) if mask is None else masked_load(b, p, vty, mask)
                    for p, mask in zip(bptr, b_masks)]
            ak = b.mul(k, g.a_sk)
            for i in range(height):
                s = splat(b, b.load(offset_ptr(b, a_rows[i], F32, ak), typ=F32), t.lanes)
                for v in range(nvec):
                    b.store(fma(b, s, bvec[v], b.load(acc[i][v], typ=vty)), acc[i][v])

        def store_c(i, v, mask, epilogue=None):
            # Rows in reverse: clamped duplicates of row M-1 are overwritten by the real one.
            i = height - 1 - i
            val = b.load(acc[i][v], typ=vty)
            if epilogue is not None:
                val = epilogue(b, val, rows[i], b.add(self.n0, i64(v * t.lanes)), mask)
            if mask is None:
                store_vec(b, val, c_ptr[i][v])
            else:
                masked_store(b, val, c_ptr[i][v], mask)

        if self.row_epilogue is None:
            over_c(store_c)
            return
        last = b.icmp_signed(">=", b.add(self.k0, self.kc), g.k)
        with b.if_else(last) as (final, partial):
            with final:
                over_c(lambda i, v, mask: store_c(i, v, mask, self.row_epilogue))
            with partial:
                over_c(store_c)
