"""A tiled shared-memory matrix multiply (SGEMM) for the f32 dots of the CUDA backend.

    plan = plan_dot(instr)          # None: not a dot this kernel takes (a loop runs it)
    fn, blocks, threads = plan.emit(module, instr, name, hooks, blob, out, operands)

The dot is read as ``batch`` independent products C[m, n] = sum_k A[m, k] * B[k, n]:
the batch dims flattened (in the result's order), M the lhs free dims flattened, N the
rhs free dims, K the one contracting dim. Every element address comes from the shapes'
layouts and the dimension numbers, so any operand layout works (B stored N x K, the K^T
of attention, reads as well as K x N) and the result is written in its own layout.

Tiling (the classic SGEMM). A 1-D block of 256 threads computes one BM x BN tile of C
of one batch element; the grid has one block per (batch element, tile row, tile column),
the tile column varying fastest so that neighbouring blocks share their A panel in L2.
The block walks K in steps of BK = 16:

    1. the threads copy A[m0:m0+BM, k0:k0+BK] and B[k0:k0+BK, n0:n0+BN] from global
       memory into shared memory, both stored k-major (tile[k][row]), zeros outside
       the matrices;
    2. barrier: the tiles are complete;
    3. each thread multiplies out its TM x TN micro-tile of C, held in registers: for
       every k of the step, TM values of the A tile times TN of the B tile;
    4. barrier: nobody still reads the tiles the next step overwrites.

then stores its micro-tile, guarded at the matrix edges. The threads form a 16 x 16
grid (BM/TM rows of threads by BN/TN columns), thread t at row t / 16, column t % 16.
Tiles: 64 x 64 with 4 x 4 per thread for large matrices; 32 x 32 with 2 x 2 where
64 x 64 tiles would leave the GPU with few blocks; 16 x 64 (1 x 4) and 64 x 16 (4 x 1)
where M or N is at most 16 (a GEMV-like M = 1 wastes 15/16 of its rows, not 63/64).

No dynamic shared memory: the two tiles are static arrays (at most 2 * 16 * 68 floats,
8.5 KiB). Accumulation is in f32 with llvm.fmuladd, in the order of k, so the result
differs from a plain loop only by the rounding that fusing a multiply-add saves.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Sequence

from llvmlite import ir

from ...hlo import Instruction, Opcode
from ...hlo.dtypes import F32
from ..loops import PointerArg
from ..irutil import I32, I64, i64
from ..intrinsics import call_intrinsic
from .kernels import NvptxHooks, WeightsBlob, new_kernel

THREADS = 256               # per block, one dimension
BK = 16                     # the K step: rows of the shared tiles
# Floats added to each row of a shared tile: a tile loaded k-fastest (A row-major) has
# 16 consecutive threads write one column, which with rows of 64 floats would all fall
# into one bank; rows of 68 spread them over 8 banks, and keep the rows 16-byte
# aligned for the micro-tile's vector reads.
PAD = 4
# Below this many blocks of 64 x 64 tiles, 32 x 32 tiles keep more of the GPU busy
# (an H100 has 132 multiprocessors, each holding several of these blocks).
MIN_BLOCKS = 128

F32_TY = ir.FloatType()


@dataclass(frozen=True)
class Tile:
    """A block's BM x BN tile of C, each thread's TM x TN micro-tile of it."""
    bm: int
    bn: int
    tm: int
    tn: int

    def __post_init__(self):
        assert (self.bm // self.tm) * (self.bn // self.tn) == THREADS
        # Every thread loads whole elements of both tiles.
        assert self.bm * BK % THREADS == 0 and self.bn * BK % THREADS == 0

    @property
    def threads_n(self) -> int:
        return self.bn // self.tn


LARGE = Tile(64, 64, 4, 4)
SMALL = Tile(32, 32, 2, 2)
SHORT = Tile(16, 64, 1, 4)      # M <= 16: a few rows (GEMV-like)
NARROW = Tile(64, 16, 4, 1)     # N <= 16: a few columns


def choose_tile(batch: int, m: int, n: int) -> Tile:
    if m <= 16 < n:
        return SHORT
    if n <= 16 < m:
        return NARROW
    if m >= 64 and n >= 64 and batch * _cdiv(m, 64) * _cdiv(n, 64) >= MIN_BLOCKS:
        return LARGE
    return SMALL


@dataclass(frozen=True)
class _Matrix:
    """How one operand is read as a (batch, rows, K) matrix: element strides of its
    batch dims (in the result's batch order), its free dims (the rows, flattened
    row-major in dimension order) with their strides, and the contracting dim's stride
    (0 when there is none: K = 1)."""
    batch_strides: tuple[int, ...]
    row_dims: tuple[int, ...]
    row_strides: tuple[int, ...]
    k_stride: int

    @property
    def rows(self) -> int:
        return prod(self.row_dims)

    def k_fastest(self, k: int) -> bool:
        """Whether consecutive threads should load consecutive k (K is the contiguous
        dim, as A of a row-major A x B) rather than consecutive rows (B of A x B), so
        that a warp's loads coalesce."""
        if k == 1:
            return False
        inner = [s for d, s in zip(self.row_dims, self.row_strides) if d != 1]
        return not inner or self.k_stride <= min(inner)


def _strides(shape) -> list[int]:
    """Element strides of each dim of ``shape`` in its layout (minor_to_major)."""
    strides, step = [0] * shape.rank, 1
    for d in shape.layout:
        strides[d] = step
        step *= shape.dims[d]
    return strides


def _matrix(shape, batch: Sequence[int], contracting: Sequence[int]) -> _Matrix:
    strides = _strides(shape)
    free = [d for d in range(shape.rank) if d not in batch and d not in contracting]
    return _Matrix(tuple(strides[d] for d in batch), tuple(shape.dims[d] for d in free),
                   tuple(strides[d] for d in free),
                   strides[contracting[0]] if contracting else 0)


def plan_dot(instr: Instruction) -> "DotPlan | None":
    """The plan of an f32 dot with at most one contracting dim (any batch dims, any
    layouts); None for anything else, which the element loop computes."""
    if instr.opcode is not Opcode.DOT or len(instr.operands) != 2 or instr.shape.is_tuple:
        return None
    lhs, rhs = (o.shape for o in instr.operands)
    if any(s.is_tuple or s.dtype != F32 for s in (lhs, rhs)) or instr.shape.dtype != F32:
        return None
    dn = instr.attrs["dimension_numbers"]
    if len(dn.lhs_contracting) > 1 or len(dn.rhs_contracting) != len(dn.lhs_contracting):
        return None
    a = _matrix(lhs, dn.lhs_batch, dn.lhs_contracting)
    b = _matrix(rhs, dn.rhs_batch, dn.rhs_contracting)
    out = instr.shape
    nb, nm = len(dn.lhs_batch), len(a.row_dims)
    strides = _strides(out)
    # The result's dims: the batch dims, the lhs free dims, the rhs free dims.
    c = _Matrix(tuple(strides[:nb]), tuple(out.dims[nb:nb + nm]),
                tuple(strides[nb:nb + nm]), 0)
    c_cols = (tuple(out.dims[nb + nm:]), tuple(strides[nb + nm:]))
    k = lhs.dims[dn.lhs_contracting[0]] if dn.lhs_contracting else 1
    batch_dims = tuple(out.dims[:nb])
    plan = DotPlan(batch_dims, a.rows, b.rows, k, a, b, c, c_cols,
                   choose_tile(prod(batch_dims), a.rows, b.rows))
    # The grid is 1-D: at most 2^31 - 1 blocks.
    return plan if plan.blocks < 2 ** 31 else None


@dataclass(frozen=True)
class DotPlan:
    """One dot as ``prod(batch_dims)`` products of an M x K A and a K x N B, how each
    operand and the result are addressed, and the tile."""
    batch_dims: tuple[int, ...]
    m: int
    n: int
    k: int
    a: _Matrix
    b: _Matrix
    c: _Matrix                                  # its rows: M; k_stride unused
    c_cols: tuple[tuple[int, ...], tuple[int, ...]]   # N: dims, strides
    tile: Tile

    @property
    def blocks(self) -> int:
        return prod(self.batch_dims) * _cdiv(self.m, self.tile.bm) * _cdiv(self.n, self.tile.bn)

    def emit(self, module: ir.Module, instr: Instruction, name: str, hooks, blob: WeightsBlob,
             out: PointerArg, operands: Sequence[PointerArg]):
        """``name(out, lhs, rhs, weights)``; returns it, the blocks and the threads per
        block of its launch."""
        fn, b = new_kernel(module, name, 4, hooks)
        # The result never shares bytes with an operand (only element-wise ops run in
        # place): noalias, with the readonly LLVM infers for the operands, lets their
        # loads go through the read-only data cache (ld.global.nc).
        if not any(o.is_output for o in operands):
            for arg in fn.args[:3]:
                arg.add_attribute("noalias")
        _Sgemm(self, b, hooks, fn.args[0], fn.args[1], fn.args[2],
               [min(a.align, 4) for a in (out, *operands)]).emit()
        b.ret_void()
        if isinstance(hooks, NvptxHooks):
            # .maxntid 256: ptxas knows the block size it budgets registers for.
            module.add_named_metadata("nvvm.annotations",
                                      [fn, ir.MetaDataString(module, "maxntidx"),
                                       ir.Constant(I32, THREADS)])
        hooks.finish(module, fn, 4)
        return fn, self.blocks, THREADS


class _Sgemm:
    """The kernel's body, emitted at ``b``."""

    def __init__(self, plan: DotPlan, b: ir.IRBuilder, hooks, out, lhs, rhs,
                 aligns: list[int]):
        self.p, self.b, self.hooks = plan, b, hooks
        self.out, self.lhs, self.rhs = out, lhs, rhs
        self.out_align, self.lhs_align, self.rhs_align = aligns

    def emit(self) -> None:
        p, b, tile = self.p, self.b, self.p.tile
        t = b.zext(self.hooks.thread(b), I64)
        block = b.zext(self.hooks.block(b), I64)
        # Block -> (batch element, tile row, tile column), the column fastest.
        tiles_n, tiles_m = _cdiv(p.n, tile.bn), _cdiv(p.m, tile.bm)
        tn = b.urem(block, i64(tiles_n))
        rest = b.udiv(block, i64(tiles_n))
        tm = b.urem(rest, i64(tiles_m))
        batch = b.udiv(rest, i64(tiles_m))
        m0 = b.mul(tm, i64(tile.bm))
        n0 = b.mul(tn, i64(tile.bn))
        a_batch, b_batch, c_batch = self._batch_offsets(batch)

        a_tile = self._shared("dot_a_tile", BK * (tile.bm + PAD))
        b_tile = self._shared("dot_b_tile", BK * (tile.bn + PAD))
        load_a = self._tile_loader(self.lhs, self.lhs_align, p.a, p.m, m0, tile.bm, t,
                                   a_batch, a_tile)
        load_b = self._tile_loader(self.rhs, self.rhs_align, p.b, p.n, n0, tile.bn, t,
                                   b_batch, b_tile)

        # This thread's micro-tile: rows ty*TM.., columns tx*TN.. of the block's tile.
        tx = b.urem(t, i64(tile.threads_n))
        ty = b.udiv(t, i64(tile.threads_n))
        row = b.mul(ty, i64(tile.tm))
        col = b.mul(tx, i64(tile.tn))

        # for (k0 = 0; k0 < K; k0 += BK), the accumulators carried in phis (registers).
        fn = b.function
        pre = b.block
        head = fn.append_basic_block("k.head")
        body = fn.append_basic_block("k.body")
        done = fn.append_basic_block("k.end")
        b.branch(head)
        b.position_at_end(head)
        k0 = b.phi(I64, name="k0")
        k0.add_incoming(i64(0), pre)
        acc = []
        for n in range(tile.tm * tile.tn):
            phi = b.phi(F32_TY, name=f"acc{n}")
            phi.add_incoming(ir.Constant(F32_TY, 0.0), pre)
            acc.append(phi)
        b.cbranch(b.icmp_unsigned("<", k0, i64(p.k)), body, done)

        b.position_at_end(body)
        load_a(k0)
        load_b(k0)
        self.hooks.barrier(b)           # the tiles are complete before anyone reads them

        def fmuladd(x, y, z):       # an FMA where the target has one
            return call_intrinsic(b, "llvm.fmuladd", [x, y, z])
        new = list(acc)
        for kk in range(BK):            # unrolled: the micro-tile stays in registers
            a_vals = self._read(a_tile, kk * (tile.bm + PAD), row, tile.tm)
            b_vals = self._read(b_tile, kk * (tile.bn + PAD), col, tile.tn)
            new = [fmuladd(a_vals[i], b_vals[j], new[i * tile.tn + j])
                   for i in range(tile.tm) for j in range(tile.tn)]
        self.hooks.barrier(b)           # all have read the tiles the next step overwrites
        k0.add_incoming(b.add(k0, i64(BK), flags=["nuw"]), b.block)
        for phi, value in zip(acc, new):
            phi.add_incoming(value, b.block)
        b.branch(head)

        b.position_at_end(done)
        self._store(acc, b.add(m0, row), b.add(n0, col), c_batch)

    def _shared(self, name: str, floats: int) -> ir.Value:
        return self.hooks.shared(self.b, name, ir.ArrayType(F32_TY, floats))

    # -- addresses --

    def _batch_offsets(self, batch: ir.Value) -> tuple:
        """Element offsets of batch element ``batch`` (flat, row-major over the batch
        dims) in A, B and C."""
        b, p = self.b, self.p
        offsets = [i64(0)] * 3
        rest = batch
        live = [n for n, d in enumerate(p.batch_dims) if d != 1]
        for n in reversed(live):
            # The most major dim takes what is left: no remainder needed.
            digit = rest if n == live[0] else b.urem(rest, i64(p.batch_dims[n]))
            if n != live[0]:
                rest = b.udiv(rest, i64(p.batch_dims[n]))
            for i, m in enumerate((p.a, p.b, p.c)):
                if m.batch_strides[n]:
                    offsets[i] = b.add(offsets[i], b.mul(digit, i64(m.batch_strides[n])))
        return tuple(offsets)

    def _row_offset(self, g: ir.Value, dims, strides) -> ir.Value:
        """Element offset of row ``g`` (flat, row-major over ``dims``) given the dims'
        ``strides``."""
        b = self.b
        offset = i64(0)
        rest = g
        live = [n for n, d in enumerate(dims) if d != 1]
        for n in reversed(live):
            digit = rest if n == live[0] else b.urem(rest, i64(dims[n]))
            if n != live[0]:
                rest = b.udiv(rest, i64(dims[n]))
            offset = b.add(offset, b.mul(digit, i64(strides[n])))
        return offset

    # -- the K loop --

    def _tile_loader(self, ptr, align: int, matrix: _Matrix, rows: int, row0, tile_rows: int,
                     t, batch_offset, tile):
        """A function ``load(k0)`` that emits this thread's share of copying the
        ``tile_rows`` x BK panel of ``matrix`` at (row0, k0) into ``tile`` (k-major,
        rows of tile_rows + PAD floats), zeros outside the matrix."""
        b, k = self.b, self.p.k
        per_thread = tile_rows * BK // THREADS
        k_fastest = matrix.k_fastest(k)
        # Element t + 256 j of the panel, numbered along its contiguous dim first; 256 is
        # a multiple of the run length, so t's position in its run is the same for all j.
        run = BK if k_fastest else tile_rows
        fast = b.urem(t, i64(run))
        slow = b.udiv(t, i64(run))
        row_guard = rows % tile_rows != 0
        k_guard = k % BK != 0
        slots = []
        # The row of each element this thread loads is the same at every k0: its
        # offset and whether it is inside are worked out once, here.
        for j in range(per_thread):
            step = b.add(slow, i64(j * THREADS // run)) if j else slow
            r, kk = (step, fast) if k_fastest else (fast, step)
            g = b.add(row0, r)
            inside = None
            if row_guard:
                inside = b.icmp_unsigned("<", g, i64(rows))
                g = b.select(inside, g, i64(rows - 1))     # a valid address to load from
            offset = b.add(batch_offset, self._row_offset(g, matrix.row_dims,
                                                          matrix.row_strides))
            at = b.add(b.mul(kk, i64(tile_rows + PAD)), r)
            slots.append((offset, inside, kk, at))

        def load(k0):
            values = []
            for offset, inside, kk, at in slots:
                gk = b.add(k0, kk)
                ok = inside
                if k_guard:
                    k_in = b.icmp_unsigned("<", gk, i64(k))
                    gk = b.select(k_in, gk, i64(k - 1))
                    ok = k_in if ok is None else b.and_(ok, k_in)
                where = b.add(offset, b.mul(gk, i64(matrix.k_stride)))
                v = b.load(b.gep(ptr, [where], source_etype=F32_TY, inbounds=True),
                           typ=F32_TY, align=align)
                if ok is not None:
                    v = b.select(ok, v, ir.Constant(F32_TY, 0.0))
                values.append((at, v))
            # All loads first, then the stores: the loads are in flight together.
            for at, v in values:
                b.store(v, b.gep(tile, [at], source_etype=F32_TY, inbounds=True), align=4)
        return load

    def _read(self, tile, row_start: int, at, count: int) -> list:
        """``count`` consecutive floats of ``tile`` from ``row_start + at``: one vector
        load (ld.shared.v4 / .v2), the micro-tile's offsets being multiples of it."""
        b = self.b
        ptr = b.gep(tile, [b.add(at, i64(row_start))], source_etype=F32_TY, inbounds=True)
        if count == 1:
            return [b.load(ptr, typ=F32_TY, align=4)]
        vec = b.load(ptr, typ=ir.VectorType(F32_TY, count), align=4 * count)
        return [b.extract_element(vec, ir.Constant(I32, i)) for i in range(count)]

    def _store(self, acc: list, row, col, c_batch) -> None:
        """The micro-tile at (row, col) of C, the elements outside the result left out."""
        b, p, tile = self.b, self.p, self.p.tile
        cols_dims, cols_strides = p.c_cols
        rows, cols = [], []
        for i in range(tile.tm):
            g = b.add(row, i64(i)) if i else row
            inside = b.icmp_unsigned("<", g, i64(p.m)) if p.m % tile.bm else None
            rows.append((b.add(c_batch, self._row_offset(g, p.c.row_dims, p.c.row_strides)),
                         inside))
        for j in range(tile.tn):
            g = b.add(col, i64(j)) if j else col
            inside = b.icmp_unsigned("<", g, i64(p.n)) if p.n % tile.bn else None
            cols.append((self._row_offset(g, cols_dims, cols_strides), inside))
        for i, (row_offset, row_in) in enumerate(rows):
            for j, (col_offset, col_in) in enumerate(cols):
                guards = [c for c in (row_in, col_in) if c is not None]
                ptr = b.gep(self.out, [b.add(row_offset, col_offset)], source_etype=F32_TY,
                            inbounds=True)
                value = acc[i * tile.tn + j]
                if not guards:
                    b.store(value, ptr, align=self.out_align)
                    continue
                inside = guards[0] if len(guards) == 1 else b.and_(*guards)
                with b.if_then(inside):
                    b.store(value, ptr, align=self.out_align)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)
