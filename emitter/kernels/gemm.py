"""The f32 GEMM core: ``C (M x N) = A (M x K) * B (K x N)`` with static strides.

Blocking (GotoBLAS, shrunk so the scratch stays small):

    for m0 in 0..M step MC:                 A block MC x KC stays in L2
      for k0 in 0..K step KC:
        for n0 in 0..N step NR:             one B sliver, packed: KC x NR, in L1
          pack B[k0:k0+kc, n0:n0+NR]        (zeros past N)
          for m in m0..m0+MC step MR:       micro-kernel: MR x NR accumulators in registers
            C[m:m+MR, n0:n0+NR] (+)= A[m:m+MR, k0:k0+kc] * Bsliver

Only one sliver is packed at a time, so the scratch is KC x NR floats (16 KiB for
AVX2) whatever the problem size. The packer is a parameter: a strided matrix here,
an on-the-fly im2col in conv.py. A's elements are broadcast straight from memory
(any strides). M, N, K are compile-time constants, so remainder tiles are separate
straight-line variants chosen in Python rather than run-time masks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from llvmlite import ir

from ..irutil import alloca_once, for_range, i64
from .vec import (F32, fma, lane_mask, load_vec, masked_load, masked_store, offset_ptr,
                  splat, store_vec, vec_type, zeros)


@dataclass(frozen=True)
class Tiling:
    lanes: int      # f32 lanes of one vector register
    nv: int         # vectors per micro-tile row (NR = lanes * nv)
    mr: int         # micro-tile rows
    kc: int         # K block
    mc: int         # largest M block: MC x KC floats of A stay in L2

    @property
    def nr(self) -> int:
        return self.lanes * self.nv


def tiling_for(target) -> Tiling:
    """Micro-tile sized to the register file: MR*NV accumulators + NV B vectors + 1 splat.

    16 vector registers below AVX-512 (6 x 16 on AVX2, the classic Haswell kernel), 32 with it.
    """
    lanes = 1 << max(0, (target.vector_bytes // 4).bit_length() - 1)   # a power of two
    regs = 32 if target.vector_bytes >= 64 else 16
    nv = 2
    mr = min(8, (regs - nv - 1) // nv)
    return Tiling(lanes=lanes, nv=nv, mr=mr, kc=256, mc=256)


class Packer(Protocol):
    """Writes rows ``k0 .. k0+kc`` of columns ``n0 .. n0+valid`` of B as kc rows of NR
    contiguous floats at ``dst`` (columns past ``valid`` are zeros)."""

    k_block: int    # rows per K block (the packer may need whole groups of rows)

    def pack(self, b: ir.IRBuilder, dst: ir.Value, k0: ir.Value, kc: ir.Value, n0: ir.Value,
             valid: int) -> None: ...


@dataclass(frozen=True)
class MatrixPacker:
    """Packs a strided matrix B: element (k, n) at ``base[k*sk + n*sn]``."""
    base: ir.Value
    sk: int
    sn: int
    tiling: Tiling
    k_block: int

    def pack(self, b, dst, k0, kc, n0, valid):
        t = self.tiling
        vty = vec_type(F32, t.lanes)
        with for_range(b, kc, "pk") as k:
            row = b.mul(b.add(k0, k), i64(self.sk))
            src = b.add(row, b.mul(n0, i64(self.sn)))
            out = b.mul(k, i64(t.nr))
            for v in range(t.nv):
                lanes = min(t.lanes, valid - v * t.lanes)
                val = self._load(b, b.add(src, i64(v * t.lanes * self.sn)), lanes, vty)
                store_vec(b, val, offset_ptr(b, dst, F32, b.add(out, i64(v * t.lanes))))

    def _load(self, b, index, lanes, vty):
        if lanes <= 0:
            return zeros(vty)
        if self.sn == 1:
            ptr = offset_ptr(b, self.base, F32, index)
            if lanes == vty.count:
                return load_vec(b, ptr, vty)
            return masked_load(b, ptr, vty, lane_mask(vty.count, lanes))
        val = zeros(vty)
        for j in range(lanes):
            ptr = offset_ptr(b, self.base, F32, b.add(index, i64(j * self.sn)))
            val = b.insert_element(val, b.load(ptr, typ=F32), i64(j))
        return val


@dataclass(frozen=True)
class GemmShape:
    m: int
    n: int
    k: int
    a_sm: int       # A element (m, k) at a[m*a_sm + k*a_sk]
    a_sk: int
    c_sm: int       # C element (m, n) at c[m*c_sm + n] (columns contiguous)


def scratch_floats(tiling: Tiling, k_block: int) -> int:
    return k_block * tiling.nr


def emit_gemm(b: ir.IRBuilder, g: GemmShape, a: ir.Value, c: ir.Value, packer: Packer,
              scratch: ir.Value, t: Tiling) -> None:
    """Emit ``C = A * B`` at the builder's position (B comes through ``packer``)."""
    m_full = g.m - g.m % t.mr
    # Equal M blocks, a multiple of MR each: a 4-row leftover block would repack every
    # B sliver for a quarter-empty micro-kernel.
    blocks = -(-g.m // t.mc)
    rows_per_block = -(-g.m // blocks)
    mc = -(-rows_per_block // t.mr) * t.mr
    n_full = g.n - g.n % t.nr
    kb = packer.k_block
    with for_range(b, g.m, "m0", step=mc) as m0:
        m_hi = b.add(m0, i64(mc))
        m_hi = b.select(b.icmp_signed("<", m_hi, i64(m_full)), m_hi, i64(m_full))
        last_block = b.icmp_signed(">=", b.add(m0, i64(mc)), i64(g.m))
        with for_range(b, g.k, "k0", step=kb) as k0:
            left = b.sub(i64(g.k), k0)
            kc = b.select(b.icmp_signed("<", left, i64(kb)), left, i64(kb))
            first = b.icmp_signed("==", k0, i64(0))

            def sliver(n0, valid):
                packer.pack(b, scratch, k0, kc, n0, valid)
                with for_range(b, m_hi, "m", start=m0, step=t.mr) as m:
                    _micro(b, g, t, a, c, scratch, m, n0, k0, kc, first, t.mr, valid)
                if g.m % t.mr:
                    with b.if_then(last_block):
                        _micro(b, g, t, a, c, scratch, i64(m_full), n0, k0, kc, first,
                               g.m % t.mr, valid)

            with for_range(b, n_full, "n0", step=t.nr) as n0:
                sliver(n0, t.nr)
            if g.n % t.nr:
                sliver(i64(n_full), g.n % t.nr)


def _micro(b, g: GemmShape, t: Tiling, a, c, bp, m, n0, k0, kc, first, rows: int, valid: int):
    """``rows`` x ``valid`` tile of C at (m, n0) (+)= A rows . packed sliver."""
    vty = vec_type(F32, t.lanes)
    nvec = -(-valid // t.lanes)
    tail = valid - (nvec - 1) * t.lanes      # lanes of the last vector
    tail_mask = lane_mask(t.lanes, tail)
    c_rows = [offset_ptr(b, c, F32, b.add(b.mul(b.add(m, i64(i)), i64(g.c_sm)), n0))
              for i in range(rows)]
    c_ptr = [[offset_ptr(b, row, F32, v * t.lanes) for v in range(nvec)] for row in c_rows]
    acc = [[alloca_once(b, vty, f"acc{i}.{v}") for v in range(nvec)] for i in range(rows)]
    with b.if_else(first) as (zero, keep):
        with zero:
            for i in range(rows):
                for v in range(nvec):
                    b.store(zeros(vty), acc[i][v])
        with keep:
            for i in range(rows):
                for v in range(nvec):
                    part = v == nvec - 1 and tail < t.lanes
                    val = (masked_load(b, c_ptr[i][v], vty, tail_mask) if part
                           else load_vec(b, c_ptr[i][v], vty))
                    b.store(val, acc[i][v])
    a_start = b.mul(k0, i64(g.a_sk))
    a_rows = [offset_ptr(b, a, F32, b.add(b.mul(b.add(m, i64(i)), i64(g.a_sm)), a_start))
              for i in range(rows)]
    with for_range(b, kc, "k") as k:
        bk = b.mul(k, i64(t.nr))
        bvec = [load_vec(b, offset_ptr(b, bp, F32, b.add(bk, i64(v * t.lanes))), vty)
                for v in range(nvec)]
        ak = b.mul(k, i64(g.a_sk))
        for i in range(rows):
            s = splat(b, b.load(offset_ptr(b, a_rows[i], F32, ak), typ=F32), t.lanes)
            for v in range(nvec):
                b.store(fma(b, s, bvec[v], b.load(acc[i][v], typ=vty)), acc[i][v])
    for i in range(rows):
        for v in range(nvec):
            val = b.load(acc[i][v], typ=vty)
            if v == nvec - 1 and tail < t.lanes:
                masked_store(b, val, c_ptr[i][v], tail_mask)
            else:
                store_vec(b, val, c_ptr[i][v])
