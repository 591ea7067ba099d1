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

then stores its micro-tile, guarded at the matrix edges. The loop (``TileLoop``) takes
what it reads and writes as pieces: the A-tile loader, the B-tile loader and the store.
A dot's read its operands through strides (``MatrixTile``) and write C
(``MatrixStore``); a convolution (conv.py) gathers its B tile from the input (im2col
on the fly), and an output fusion's store applies its epilogue (epilogue.py) to each
element before writing it. The threads form a 16 x 16
grid (BM/TM rows of threads by BN/TN columns), thread t at row t / 16, column t % 16.
Tiles: 64 x 64 with 4 x 4 per thread for large matrices; 32 x 32 with 2 x 2 where
64 x 64 tiles would leave the GPU with few blocks; 16 x 64 (1 x 4) and 64 x 16 (4 x 1)
where M or N is at most 16 (a GEMV-like M = 1 wastes 15/16 of its rows, not 63/64).

No dynamic shared memory: the two tiles are static arrays (at most 2 * 16 * 68 floats,
8.5 KiB). Accumulation is in f32 with llvm.fmuladd, in the order of k, so the result
differs from a plain loop only by the rounding that fusing a multiply-add saves.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Sequence

from llvmlite import ir

from ...hlo import Instruction, Opcode, Shape
from ...hlo.dtypes import F32
from ..loops import PointerArg
from ..irutil import I32, I64, i64
from ..intrinsics import call_intrinsic
from .epilogue import unpack
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
    (0 when there is none: K = 1). K may also run over several dims (a convolution's
    input channels and window), flattened row-major: ``k_dims`` and their ``k_strides``
    (``k_stride`` then unused)."""
    batch_strides: tuple[int, ...]
    row_dims: tuple[int, ...]
    row_strides: tuple[int, ...]
    k_stride: int
    k_dims: tuple[int, ...] = ()
    k_strides: tuple[int, ...] = ()

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
        k_stride = self.k_stride
        if self.k_dims:
            k_stride = [s for d, s in zip(self.k_dims, self.k_strides) if d != 1][-1]
        return not inner or k_stride <= min(inner)

    def k_offset(self, b: ir.IRBuilder, gk: ir.Value) -> ir.Value:
        """Element offset of contracting position ``gk``."""
        if self.k_dims:
            return row_offset(b, gk, self.k_dims, self.k_strides)
        return b.mul(gk, i64(self.k_stride))


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
    layouts), or of an output fusion of one (its store applies the epilogue); None for
    anything else, which the element loop computes."""
    dot, epilogue = unpack(instr)
    if dot is None or dot.opcode is not Opcode.DOT or len(dot.operands) != 2 or \
            dot.shape.is_tuple:
        return None
    lhs, rhs = (o.shape for o in dot.operands)
    if any(s.is_tuple or s.dtype != F32 for s in (lhs, rhs)) or dot.shape.dtype != F32:
        return None
    dn = dot.attrs["dimension_numbers"]
    if len(dn.lhs_contracting) > 1 or len(dn.rhs_contracting) != len(dn.lhs_contracting):
        return None
    a = _matrix(lhs, dn.lhs_batch, dn.lhs_contracting)
    b = _matrix(rhs, dn.rhs_batch, dn.rhs_contracting)
    # The result is written in the layout of what the kernel stores (the fusion's root;
    # a reshape keeping the columns keeps the default layout and every element's place).
    out = dot.shape
    if instr.shape.dims == out.dims:
        out = Shape.array(out.dtype, out.dims, instr.shape.layout)
    nb, nm = len(dn.lhs_batch), len(a.row_dims)
    strides = _strides(out)
    # The result's dims: the batch dims, the lhs free dims, the rhs free dims.
    c = _Matrix(tuple(strides[:nb]), tuple(out.dims[nb:nb + nm]),
                tuple(strides[nb:nb + nm]), 0)
    c_cols = (tuple(out.dims[nb + nm:]), tuple(strides[nb + nm:]))
    k = lhs.dims[dn.lhs_contracting[0]] if dn.lhs_contracting else 1
    batch_dims = tuple(out.dims[:nb])
    index = ResultIndex(out.rank, batch_dims, tuple((d, 1) for d in range(nb)),
                        tuple((d, 1) for d in range(nb, nb + nm)),
                        tuple((d, 1) for d in range(nb + nm, out.rank)))
    plan = DotPlan(batch_dims, a.rows, b.rows, k, a, b, c, c_cols,
                   choose_tile(prod(batch_dims), a.rows, b.rows), index, epilogue)
    # The grid is 1-D: at most 2^31 - 1 blocks.
    return plan if plan.blocks < 2 ** 31 else None


@dataclass(frozen=True)
class ResultIndex:
    """How a store makes the index of an element of the core's result (for an
    epilogue): from the digits of the block's batch element (row-major over
    ``batch_dims``), of the element's row (over C's row dims) and of its column (over
    its columns' dims), each ``(dim, scale)``: the digit times scale adds to that dim
    of the index (a convolution's group and row both make its output channel)."""
    rank: int
    batch_dims: tuple[int, ...]
    batch: tuple[tuple[int, int], ...]
    rows: tuple[tuple[int, int], ...]
    cols: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class DotPlan:
    """One dot as ``prod(batch_dims)`` products of an M x K A and a K x N B, how each
    operand and the result are addressed, and the tile; for an output fusion, the
    epilogue its store applies."""
    batch_dims: tuple[int, ...]
    m: int
    n: int
    k: int
    a: _Matrix
    b: _Matrix
    c: _Matrix                                  # its rows: M; k_stride unused
    c_cols: tuple[tuple[int, ...], tuple[int, ...]]   # N: dims, strides
    tile: Tile
    index: ResultIndex | None = field(default=None, compare=False)
    epilogue: object = field(default=None, compare=False)   # a StoreEpilogue

    @property
    def blocks(self) -> int:
        return prod(self.batch_dims) * _cdiv(self.m, self.tile.bm) * _cdiv(self.n, self.tile.bn)

    def emit(self, module: ir.Module, instr: Instruction, name: str, hooks, blob: WeightsBlob,
             out: PointerArg, operands: Sequence[PointerArg]):
        """``name(out, lhs, rhs, [epilogue operand...,] weights)``; returns it, the blocks
        and the threads per block of its launch."""
        params = 2 + len(operands)
        # noalias where the launch's pointers are apart (program.py): with the readonly
        # LLVM infers for the operands, their loads go through the read-only data cache.
        fn, b = new_kernel(module, name, params, hooks, [out, *operands])
        out_align, lhs_align, rhs_align = (min(a.align, 4) for a in (out, *operands[:2]))
        loop = TileLoop(b, hooks, self.tile, self.m, self.n, self.k)
        offsets = []            # A's, B's and C's element offsets of the block's batch element

        def begin(loop: TileLoop) -> None:
            offsets.extend(batch_offsets(b, self.batch_dims, (self.a, self.b, self.c),
                                         loop.batch))
        apply = None if self.epilogue is None else \
            self.epilogue.bind(b, fn, blob, operands)
        loop.emit(begin,
                  MatrixTile(fn.args[1], lhs_align, self.a, self.m, lambda: offsets[0]),
                  MatrixTile(fn.args[2], rhs_align, self.b, self.n, lambda: offsets[1]),
                  MatrixStore(fn.args[0], out_align, self.c, self.c_cols, self.m, self.n,
                              lambda: offsets[2], self.index, apply))
        b.ret_void()
        finish_kernel(module, fn, hooks, params)
        return fn, self.blocks, THREADS


def finish_kernel(module: ir.Module, fn: ir.Function, hooks, params: int) -> None:
    """Annotate a tiled kernel of THREADS threads per block and finish it."""
    if isinstance(hooks, NvptxHooks):
        # .maxntid 256: ptxas knows the block size it budgets registers for.
        module.add_named_metadata("nvvm.annotations",
                                  [fn, ir.MetaDataString(module, "maxntidx"),
                                   ir.Constant(I32, THREADS)])
    hooks.finish(module, fn, params)


# -- the tile loop and its pieces ---------------------------------------------------------
#
# ``TileLoop.emit(begin, load_a, load_b, store)`` emits a block's walk over K; what it
# reads and writes is up to its pieces:
#
#   begin(loop)                     once the block knows its batch element (loop.batch):
#                                   per-block values the pieces share
#   load_a(loop, row0, rows, tile)  -> load(k0): this thread's share of copying the
#   load_b(loop, row0, rows, tile)     rows x BK panel at (row0, k0) into the shared
#                                   ``tile`` (k-major, rows of ``rows + PAD`` floats),
#                                   zeros outside the operand (A: rows of M, B: of N)
#   store(loop, acc, row, col)      the thread's TM x TN accumulators at (row, col) of C
#
# A dot's pieces read matrices through strides (MatrixTile) and write one (MatrixStore);
# a convolution's B tile gathers its input (conv.py).


class TileLoop:
    """One block of the tiled SGEMM: C[m0:m0+BM, n0:n0+BN] of batch element ``batch``
    (``batch`` products of an M x K A and a K x N B), emitted at ``b``."""

    def __init__(self, b: ir.IRBuilder, hooks, tile: Tile, m: int, n: int, k: int,
                 prefix: str = "dot"):
        self.b, self.hooks, self.tile = b, hooks, tile
        self.m, self.n, self.k = m, n, k
        self.prefix = prefix            # of the shared tiles' names: PREFIX_a_tile, ..._b_tile

    def emit(self, begin, load_a, load_b, store) -> None:
        b, tile = self.b, self.tile
        self.t = t = b.zext(self.hooks.thread(b), I64)
        block = b.zext(self.hooks.block(b), I64)
        # Block -> (batch element, tile row, tile column), the column fastest.
        tiles_n, tiles_m = _cdiv(self.n, tile.bn), _cdiv(self.m, tile.bm)
        tn = b.urem(block, i64(tiles_n))
        rest = b.udiv(block, i64(tiles_n))
        tm = b.urem(rest, i64(tiles_m))
        self.batch = b.udiv(rest, i64(tiles_m))
        m0 = b.mul(tm, i64(tile.bm))
        n0 = b.mul(tn, i64(tile.bn))
        begin(self)

        a_tile = self._shared(f"{self.prefix}_a_tile", BK * (tile.bm + PAD))
        b_tile = self._shared(f"{self.prefix}_b_tile", BK * (tile.bn + PAD))
        fill_a = load_a(self, m0, tile.bm, a_tile)
        fill_b = load_b(self, n0, tile.bn, b_tile)

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
        b.cbranch(b.icmp_unsigned("<", k0, i64(self.k)), body, done)

        b.position_at_end(body)
        fill_a(k0)
        fill_b(k0)
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
        store(self, acc, b.add(m0, row), b.add(n0, col))

    def _shared(self, name: str, floats: int) -> ir.Value:
        return self.hooks.shared(self.b, name, ir.ArrayType(F32_TY, floats))

    def _read(self, tile, row_start: int, at, count: int) -> list:
        """``count`` consecutive floats of ``tile`` from ``row_start + at``: one vector
        load (ld.shared.v4 / .v2), the micro-tile's offsets being multiples of it."""
        b = self.b
        ptr = b.gep(tile, [b.add(at, i64(row_start))], source_etype=F32_TY, inbounds=True)
        if count == 1:
            return [b.load(ptr, typ=F32_TY, align=4)]
        vec = b.load(ptr, typ=ir.VectorType(F32_TY, count), align=4 * count)
        return [b.extract_element(vec, ir.Constant(I32, i)) for i in range(count)]


# -- addresses --

def batch_offsets(b: ir.IRBuilder, batch_dims, matrices, batch: ir.Value) -> list:
    """Element offsets of batch element ``batch`` (flat, row-major over ``batch_dims``)
    in each of ``matrices`` (their ``batch_strides``)."""
    offsets = [i64(0)] * len(matrices)
    rest = batch
    live = [n for n, d in enumerate(batch_dims) if d != 1]
    for n in reversed(live):
        # The most major dim takes what is left: no remainder needed.
        digit = rest if n == live[0] else b.urem(rest, i64(batch_dims[n]))
        if n != live[0]:
            rest = b.udiv(rest, i64(batch_dims[n]))
        for i, m in enumerate(matrices):
            if m.batch_strides[n]:
                offsets[i] = b.add(offsets[i], b.mul(digit, i64(m.batch_strides[n])))
    return offsets


def row_offset(b: ir.IRBuilder, g: ir.Value, dims, strides) -> ir.Value:
    """Element offset of row ``g`` (flat, row-major over ``dims``) given the dims'
    ``strides``."""
    offset = i64(0)
    rest = g
    live = [n for n, d in enumerate(dims) if d != 1]
    for n in reversed(live):
        digit = rest if n == live[0] else b.urem(rest, i64(dims[n]))
        if n != live[0]:
            rest = b.udiv(rest, i64(dims[n]))
        offset = b.add(offset, b.mul(digit, i64(strides[n])))
    return offset


def digits(b: ir.IRBuilder, g: ir.Value, dims) -> list:
    """The index of flat position ``g`` (row-major) in ``dims``: one value per dim."""
    out: list = [i64(0)] * len(dims)
    rest = g
    live = [n for n, d in enumerate(dims) if d != 1]
    for n in reversed(live):
        out[n] = rest if n == live[0] else b.urem(rest, i64(dims[n]))
        if n != live[0]:
            rest = b.udiv(rest, i64(dims[n]))
    return out


# -- the pieces of a dot --

class MatrixTile:
    """The loader of a tile of an operand read as a (batch, rows, K) matrix (``_Matrix``)
    at the offset ``batch_offset()`` of the block's batch element."""

    def __init__(self, ptr: ir.Value, align: int, matrix: _Matrix, rows: int, batch_offset):
        self.ptr, self.align, self.matrix, self.rows = ptr, align, matrix, rows
        self.batch_offset = batch_offset

    def __call__(self, loop: TileLoop, row0, tile_rows: int, tile):
        """A function ``load(k0)`` that emits this thread's share of copying the
        ``tile_rows`` x BK panel of the matrix at (row0, k0) into ``tile`` (k-major,
        rows of tile_rows + PAD floats), zeros outside the matrix."""
        b, k, t, matrix, rows = loop.b, loop.k, loop.t, self.matrix, self.rows
        ptr, align = self.ptr, self.align
        per_thread = tile_rows * BK // THREADS
        k_fastest = matrix.k_fastest(k)
        # Element t + 256 j of the panel, numbered along its contiguous dim first; 256 is
        # a multiple of the run length, so t's position in its run is the same for all j.
        run = BK if k_fastest else tile_rows
        fast = b.urem(t, i64(run))
        slow = b.udiv(t, i64(run))
        row_guard = rows % tile_rows != 0
        k_guard = k % BK != 0
        batch_offset = self.batch_offset()
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
            offset = b.add(batch_offset, row_offset(b, g, matrix.row_dims,
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
                where = b.add(offset, matrix.k_offset(b, gk))
                v = b.load(b.gep(ptr, [where], source_etype=F32_TY, inbounds=True),
                           typ=F32_TY, align=align)
                if ok is not None:
                    v = b.select(ok, v, ir.Constant(F32_TY, 0.0))
                values.append((at, v))
            # All loads first, then the stores: the loads are in flight together.
            for at, v in values:
                b.store(v, b.gep(tile, [at], source_etype=F32_TY, inbounds=True), align=4)
        return load


class MatrixStore:
    """The store of a thread's micro-tile into C, read as a (batch, rows, columns) matrix:
    ``c`` its batch and row dims (``c.k_stride`` unused), ``cols`` (dims, strides) its
    columns, at ``batch_offset()`` of the block's batch element; the elements outside
    the M x N result left out. With ``apply`` (an output fusion's epilogue, bound:
    epilogue.py) each element stored is ``apply(index, acc)``, the element's index in
    the core's result made as ``index`` (a ResultIndex) says."""

    def __init__(self, ptr: ir.Value, align: int, c: _Matrix, cols, m: int, n: int,
                 batch_offset, index: "ResultIndex | None" = None, apply=None):
        self.ptr, self.align, self.c, self.cols = ptr, align, c, cols
        self.m, self.n, self.batch_offset = m, n, batch_offset
        self.index, self.apply = index, apply

    def __call__(self, loop: TileLoop, acc: list, row, col) -> None:
        """The micro-tile at (row, col) of C."""
        if self.apply is not None:
            self._store_applied(loop, acc, row, col)
            return
        b, tile, c = loop.b, loop.tile, self.c
        cols_dims, cols_strides = self.cols
        c_batch = self.batch_offset()
        rows, cols = [], []
        for i in range(tile.tm):
            g = b.add(row, i64(i)) if i else row
            inside = b.icmp_unsigned("<", g, i64(self.m)) if self.m % tile.bm else None
            rows.append((b.add(c_batch, row_offset(b, g, c.row_dims, c.row_strides)),
                         inside))
        for j in range(tile.tn):
            g = b.add(col, i64(j)) if j else col
            inside = b.icmp_unsigned("<", g, i64(self.n)) if self.n % tile.bn else None
            cols.append((row_offset(b, g, cols_dims, cols_strides), inside))
        for i, (row_off, row_in) in enumerate(rows):
            for j, (col_off, col_in) in enumerate(cols):
                guards = [x for x in (row_in, col_in) if x is not None]
                ptr = b.gep(self.ptr, [b.add(row_off, col_off)], source_etype=F32_TY,
                            inbounds=True)
                value = acc[i * tile.tn + j]
                if not guards:
                    b.store(value, ptr, align=self.align)
                    continue
                inside = guards[0] if len(guards) == 1 else b.and_(*guards)
                with b.if_then(inside):
                    b.store(value, ptr, align=self.align)

    def _store_applied(self, loop: TileLoop, acc: list, row, col) -> None:
        """As the plain store, each value the epilogue's of the accumulator; the rows and
        columns outside the result are clamped to the last inside (the epilogue reads
        its operands there, in bounds) and their stores left out."""
        b, tile, c, ix = loop.b, loop.tile, self.c, self.index
        cols_dims, cols_strides = self.cols
        c_batch = self.batch_offset()
        rank = ix.rank

        def terms(values, mapping) -> list:
            return [(d, v if scale == 1 else b.mul(v, i64(scale)))
                    for v, (d, scale) in zip(values, mapping)]

        def clamped(g, limit: int, tile_size: int):
            if limit % tile_size == 0:
                return g, None
            inside = b.icmp_unsigned("<", g, i64(limit))
            return b.select(inside, g, i64(limit - 1)), inside

        batch_terms = terms(digits(b, loop.batch, ix.batch_dims), ix.batch)
        rows, cols = [], []
        for i in range(tile.tm):
            g, inside = clamped(b.add(row, i64(i)) if i else row, self.m, tile.bm)
            rows.append((b.add(c_batch, row_offset(b, g, c.row_dims, c.row_strides)), inside,
                         terms(digits(b, g, c.row_dims), ix.rows)))
        for j in range(tile.tn):
            g, inside = clamped(b.add(col, i64(j)) if j else col, self.n, tile.bn)
            cols.append((row_offset(b, g, cols_dims, cols_strides), inside,
                         terms(digits(b, g, cols_dims), ix.cols)))
        # Every value first, then the stores: one basic block for the epilogue, so LLVM
        # shares what elements have in common (a row's bias).
        stores = []
        for i, (row_off, row_in, row_terms) in enumerate(rows):
            for j, (col_off, col_in, col_terms) in enumerate(cols):
                index: list = [None] * rank
                for d, v in batch_terms + row_terms + col_terms:
                    index[d] = v if index[d] is None else b.add(index[d], v)
                index = [i64(0) if v is None else v for v in index]
                value = self.apply(index, acc[i * tile.tn + j])
                guards = [x for x in (row_in, col_in) if x is not None]
                stores.append((b.add(row_off, col_off), value, guards))
        for offset, value, guards in stores:
            ptr = b.gep(self.ptr, [offset], source_etype=F32_TY, inbounds=True)
            if not guards:
                b.store(value, ptr, align=self.align)
                continue
            inside = guards[0] if len(guards) == 1 else b.and_(*guards)
            with b.if_then(inside):
                b.store(value, ptr, align=self.align)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)
