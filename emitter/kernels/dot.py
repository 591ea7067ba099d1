"""Dot (XLA dot_general) kernels.

Any dimension numbers are first canonicalized into a batched matrix product
``C[batch] (M x N) = A[batch] (M x K) * B[batch] (K x N)`` with element
strides (``canonicalize``): size-1 dims are dropped, the free and contracting dims
are merged where their strides allow, and free dims that do not merge become extra
batch loops. The f32 product then takes one of three paths:

    M == 1 or N == 1, matrix contiguous along K  -> gemv.emit_row_dot
    M == 1 or N == 1, matrix contiguous along N  -> gemv.emit_row_stream
    M <= MR, B's columns contiguous               -> gemm.emit_gemm, B read in place
    otherwise                                     -> gemm.emit_gemm (packed B sliver;
                                                     constant B packed at compile time)

The fast paths (``FastDot``) take M, N, K, the strides and the batch loops as run-time
arguments: dots of one path and batch depth share one function. Other element types,
and contracting dims that cannot be merged into one stride, use a plain loop nest
(``NaiveDot``, compiled for the exact shapes) accumulating in the element type.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod

import numpy as np
from llvmlite import ir

from ...hlo import DotDimensionNumbers, Instruction, Opcode, Shape, dtypes
from ...hlo.fusion import output_fusion_core
from ..irutil import alloca_once, for_range, i64, llvm_type
from . import scalar
from .epilogue import NO_EPILOGUE, Epilogue, EpilogueOperands, plan_epilogue
from .function import Frame, KernelPlan
from .gemm import (DirectRows, GemmShape, MatrixPacker, PackedSlivers, Tiling, emit_gemm,
                   pack_slivers, scratch_floats, tiling_for)
from .gemv import emit_row_dot, emit_row_stream
from .sizes import Size
from .vec import F32, offset_ptr


@dataclass(frozen=True)
class Loop:
    """One batch loop: its extent and the element stride it adds to A, B and C."""
    extent: Size
    sa: Size
    sb: Size
    sc: Size


@dataclass(frozen=True)
class DotSizes:
    """The batched-matmul view of a dot (``canonicalize``), of which the fast path's i64
    arguments are made (``arguments``, named by ``params``): ints in a plan, the
    function's arguments in its frame."""
    batch: tuple[Loop, ...]
    m: Size
    n: Size
    k: Size
    a_sm: Size
    a_sk: Size
    b_sk: Size
    b_sn: Size
    c_sm: Size
    c_sn: Size

    @staticmethod
    def params(batch_loops: int) -> tuple[str, ...]:
        """The names of ``arguments``, in their order."""
        return tuple(f"batch{i}.{f}" for i in range(batch_loops)
                     for f in ("extent", "sa", "sb", "sc")) + _MATMUL_PARAMS

    def arguments(self) -> tuple[Size, ...]:
        return (tuple(v for loop in self.batch for v in (loop.extent, loop.sa, loop.sb, loop.sc))
                + (self.m, self.n, self.k, self.a_sm, self.a_sk, self.b_sk, self.b_sn,
                   self.c_sm, self.c_sn))

    @staticmethod
    def from_arguments(values, batch_loops: int) -> "DotSizes":
        """The sizes whose ``arguments`` are ``values``."""
        v = list(values)
        loops = tuple(Loop(*v[4 * i:4 * i + 4]) for i in range(batch_loops))
        return DotSizes(loops, *v[4 * batch_loops:])


_MATMUL_PARAMS = ("m", "n", "k", "a_sm", "a_sk", "b_sk", "b_sn", "c_sm", "c_sn")


def row_major_strides(dims) -> list[int]:
    strides, acc = [], 1
    for d in reversed(dims):
        strides.append(acc)
        acc *= d
    return strides[::-1]


def _merge(extents, *strides):
    """Merge dims (outermost first) into one (extent, strides) from the innermost outwards.

    Returns (leftover outer dims as (extent, strides) lists, merged extent, merged strides);
    a dim merges into the inner run when, for every array, its stride = inner stride * extent.
    """
    ext, st = 1, [0] * len(strides)
    cut = len(extents)
    for d in range(len(extents) - 1, -1, -1):
        if ext == 1:
            ext, st = extents[d], [s[d] for s in strides]
        elif all(s[d] == si * ext for s, si in zip(strides, st)):
            ext *= extents[d]
        else:
            break
        cut = d
    rest = [(extents[d], [s[d] for s in strides]) for d in range(cut)]
    return rest, ext, st


def canonicalize(instr: Instruction) -> DotSizes | None:
    """The batched-matmul view of a dot, or None if the contracting dims do not merge."""
    lhs, rhs = (o.shape for o in instr.operands)
    dn = instr.attrs["dimension_numbers"]
    sa, sb = row_major_strides(lhs.dims), row_major_strides(rhs.dims)
    sc = row_major_strides(instr.shape.dims)
    nb = len(dn.lhs_batch)
    lhs_free = [d for d in range(lhs.rank) if d not in dn.lhs_batch + dn.lhs_contracting]
    rhs_free = [d for d in range(rhs.rank) if d not in dn.rhs_batch + dn.rhs_contracting]
    batch = [Loop(lhs.dims[la], sa[la], sb[rb], sc[i])
             for i, (la, rb) in enumerate(zip(dn.lhs_batch, dn.rhs_batch))]
    # Output dims: batch, lhs free, rhs free. Size-1 dims carry no index.
    mdims = [(lhs.dims[d], sa[d], sc[nb + i]) for i, d in enumerate(lhs_free) if lhs.dims[d] > 1]
    ndims = [(rhs.dims[d], sb[d], sc[nb + len(lhs_free) + i])
             for i, d in enumerate(rhs_free) if rhs.dims[d] > 1]
    kdims = [(lhs.dims[la], sa[la], sb[rb])
             for la, rb in zip(dn.lhs_contracting, dn.rhs_contracting) if lhs.dims[la] > 1]
    kdims.sort(key=lambda t: -t[1])      # contracting order is free: follow A's memory order
    rest, m, (a_sm, c_sm) = _merge([e for e, _, _ in mdims], [s for _, s, _ in mdims],
                                   [s for _, _, s in mdims])
    batch += [Loop(e, s_a, 0, s_c) for e, (s_a, s_c) in rest]
    rest, n, (b_sn, c_sn) = _merge([e for e, _, _ in ndims], [s for _, s, _ in ndims],
                                   [s for _, _, s in ndims])
    batch += [Loop(e, 0, s_b, s_c) for e, (s_b, s_c) in rest]
    rest, k, (a_sk, b_sk) = _merge([e for e, _, _ in kdims], [s for _, s, _ in kdims],
                                   [s for _, _, s in kdims])
    if rest:
        return None
    return DotSizes(tuple(b for b in batch if b.extent > 1), m, n, k, a_sm, a_sk, b_sk, b_sn,
                    c_sm, c_sn)


# --- path selection ---------------------------------------------------------------

def _gemv(plan: DotSizes):
    """(rows, mat_sr, mat_sk, vec_s, out_s) for a matrix-vector product, else None."""
    if plan.m == 1:         # out row = B^T a
        return plan.n, plan.b_sn, plan.b_sk, plan.a_sk, plan.c_sn
    if plan.n == 1:         # out column = A b
        return plan.m, plan.a_sm, plan.a_sk, plan.b_sk, plan.c_sm
    return None


def _path(instr: Instruction, plan: DotSizes | None, tiling: Tiling) -> str:
    if instr.shape.dtype != dtypes.F32 or plan is None or plan.k == 0 or plan.m * plan.n == 0:
        return "naive"
    g = _gemv(plan)
    if g is not None:
        rows, sr, sk, sv, so = g
        if sk == 1 and sv == 1:
            return "row_dot"
        if sr == 1 and so == 1:
            return "row_stream"
    if plan.m <= tiling.mr and plan.b_sn == 1:
        return "gemm_direct"          # one row of tiles: each B element is read once
    return "gemm"


@dataclass(frozen=True)
class FastDot(EpilogueOperands):
    """An f32 dot on the gemm / gemv paths; every size and stride is a run-time argument,
    so dots that differ only in sizes share it. ``epilogue``: an output fusion's steps
    (epilogue.py), output channel n being column n of C (``plan_dot_fusion``)."""
    path: str               # "gemm" | "gemm_direct" | "row_dot" | "row_stream"
    batch_loops: int
    vector_lhs: bool        # gemv: A is the vector (M == 1), else B is (N == 1)
    unit_bn: bool           # gemm: B's columns are contiguous, packed with vector loads
    tiling: Tiling
    unit_bk: bool = False   # gemm: B's rows are contiguous (B transposed), packed by columns
    epilogue: Epilogue = NO_EPILOGUE

    @property
    def params(self) -> tuple[str, ...]:
        return DotSizes.params(self.batch_loops)

    def sizes_of(self, values) -> DotSizes:
        return DotSizes.from_arguments(values, self.batch_loops)

    @property
    def scratch_bytes(self) -> int:
        return scratch_floats(self.tiling, self.tiling.kc) * 4 if self.path == "gemm" else 0

    def emit(self, f: Frame) -> None:
        b, s = f.b, f.size
        _batch_loops(b, s.batch, f.lhs, f.rhs, f.out, i64(0),
                     lambda a, bb, c, at: self._emit_one(b, s, a, bb, c, f.scratch,
                                                         self.epilogue.moved(b, f.extra, at)))

    def _emit_one(self, b, s, a, bb, c, scratch, extra):
        """One matrix product; ``extra``: the epilogue's operands, the full-size ones
        moved where ``c`` starts."""
        t, epilogue = self.tiling, self.epilogue
        if self.path in ("gemm", "gemm_direct"):
            g = GemmShape(s.m, s.n, s.k, s.a_sm, s.a_sk, s.c_sm)
            emit_gemm(b, g, a, c, self._packer(s, bb), scratch, t,
                      epilogue.per_column(extra, s.c_sm, t.lanes))
            return
        if self.vector_lhs:     # out row = B^T a
            rows, sr, sk, sv, so, mat, vec = s.n, s.b_sn, s.b_sk, s.a_sk, s.c_sn, bb, a
        else:                   # out column = A b
            rows, sr, sk, sv, so, mat, vec = s.m, s.a_sm, s.a_sk, s.b_sk, s.c_sm, a, bb
        # Out element r is output channel r where A is the vector (the columns of C),
        # else channel 0 (an N == 1 product's per-channel operands are scalars).
        if self.path == "row_dot":
            emit_row_dot(b, t.lanes, rows, s.k, mat, sr, vec, c, so,
                         epilogue.per_element(extra, so) if epilogue.steps else None)
        else:
            emit_row_stream(b, t.lanes, rows, s.k, mat, sk, vec, sv, c,
                            epilogue.per_column(extra, i64(0), t.lanes))

    def _packer(self, s, bb):
        t = self.tiling
        if self.path == "gemm":
            return MatrixPacker(bb, s.b_sk, s.b_sn, self.unit_bn, t, t.kc, self.unit_bk)
        return DirectRows(bb, s.b_sk, t.kc)


@dataclass(frozen=True)
class PackedWeightsDot(FastDot):
    """The gemm path with constant weights (B): packed at compile time into the slivers
    the micro-kernel reads (``pack_weights``), so that no call packs them and the
    kernel needs no scratch; a sliver's padding columns are zeros."""

    @property
    def scratch_bytes(self) -> int:
        return 0

    def pack_weights(self, weights: np.ndarray, sizes: DotSizes) -> np.ndarray:
        k, n = np.arange(sizes.k)[:, None], np.arange(sizes.n)[None, :]
        matrix = np.asarray(weights, np.float32).reshape(-1)[k * sizes.b_sk + n * sizes.b_sn]
        return pack_slivers(matrix, self.tiling)

    def _packer(self, s, bb):
        return PackedSlivers(bb, s.k, self.tiling)


@dataclass(frozen=True)
class NaiveDot:
    """Any element type and dimension numbers, compiled for these exact shapes."""
    lhs: Shape
    rhs: Shape
    out: Shape
    dn: DotDimensionNumbers

    params = ()
    scratch_bytes = 0
    extra_operands = 0
    constant_operands = ()

    def emit(self, f: Frame) -> None:
        emit_naive_dot(f.b, self, f.out, f.lhs, f.rhs)


# Packed weights take whole slivers: the last one's zero columns may add at most this
# share to the constant (a narrow product, N = 10 against NR = 32, packs B per call).
PACKED_PADDING = 0.25


def _pads_little(n: int, t: Tiling) -> bool:
    return -(-n // t.nr) * t.nr <= n * (1 + PACKED_PADDING)


def plan_dot(instr: Instruction, target, lean: bool = False,
             weights: Instruction | None = None) -> KernelPlan:
    """``weights``: what the kernel's rhs is (the dot's own operand by default; an output
    fusion's operand for its core dot): a constant is packed at compile time where the
    product packs B. ``lean`` changes nothing: dots have no other variant without
    scratch."""
    weights = instr.operands[1] if weights is None else weights
    sizes = canonicalize(instr)
    tiling = tiling_for(target)
    path = _path(instr, sizes, tiling)
    if path == "naive":
        lhs, rhs = (o.shape for o in instr.operands)
        return KernelPlan(NaiveDot(lhs, rhs, instr.shape, instr.attrs["dimension_numbers"]))
    if path == "gemm" and not sizes.batch and weights is not None \
            and weights.opcode is Opcode.CONSTANT and _pads_little(sizes.n, tiling):
        return KernelPlan(PackedWeightsDot(path, batch_loops=0, vector_lhs=False,
                                           unit_bn=False, tiling=tiling), sizes)
    spec = FastDot(path, len(sizes.batch), vector_lhs=path in ("row_dot", "row_stream")
                   and sizes.m == 1,
                   unit_bn=path == "gemm" and sizes.b_sn == 1, tiling=tiling,
                   unit_bk=path == "gemm" and sizes.b_sn != 1 and sizes.b_sk == 1)
    # The packed sliver holds at most K rows: a short K (an RNN's input projection, K =
    # its features) needs a fraction of the KC-row scratch the shared code allows for.
    scratch = scratch_floats(tiling, min(sizes.k, tiling.kc)) * 4 if path == "gemm" else None
    return KernelPlan(spec, sizes, scratch)


def columns_are_channels(instr: Instruction) -> bool:
    """An f32 dot whose output channels (its last dim, ``output_channel_dim``) are the
    columns of the matrix product the kernel computes: the last dim is the rhs's only
    free dim of more than one element (``canonicalize`` merges the others into it), so
    an epilogue's per-channel values follow the columns."""
    if instr.opcode is not Opcode.DOT or instr.shape.dtype != dtypes.F32 \
            or instr.shape.is_tuple or instr.shape.num_elements == 0:
        return False
    dn, rhs = instr.attrs["dimension_numbers"], instr.operands[1].shape
    free = [d for d in range(rhs.rank) if d not in dn.rhs_batch + dn.rhs_contracting]
    return bool(free) and all(rhs.dims[d] == 1 for d in free[:-1])


def plan_dot_fusion(instr: Instruction, target) -> KernelPlan | None:
    """The kernel of an output fusion around an f32 dot whose epilogue its fast path
    applies (epilogue.plan_epilogue), else None. Per-channel operands vary along the
    output's last dim, which must be C's columns: N is that dim alone, contiguous."""
    core = output_fusion_core(instr.called[0])
    if core.opcode is not Opcode.DOT or core.shape.dtype != dtypes.F32:
        return None
    epilogue = plan_epilogue(instr)
    rhs = core.operands[1]
    weights = instr.operands[1] if rhs.opcode is Opcode.PARAMETER \
        and rhs.attrs["number"] == 1 else None
    plan = plan_dot(core, target, weights=rhs if weights is None else weights)
    if epilogue is None or not isinstance(plan.spec, FastDot):
        return None
    s = plan.sizes
    columns = s.n == core.shape.dims[-1] and s.c_sn == 1
    gemv_by_rows = plan.spec.path in ("row_dot", "row_stream") and not plan.spec.vector_lhs
    if epilogue.channel_operands and (not columns or gemv_by_rows):
        return None
    return KernelPlan(replace(plan.spec, epilogue=epilogue), plan.sizes, plan.scratch)


def _batch_loops(b, loops, a, bb, c, at, body):
    """``body(a, bb, c, at)`` per batch element; ``at``: c's element offset from the
    output's start."""
    if not loops:
        body(a, bb, c, at)
        return
    loop, rest = loops[0], loops[1:]
    with for_range(b, loop.extent, "batch") as i:
        _batch_loops(b, rest, offset_ptr(b, a, F32, b.mul(i, loop.sa)),
                     offset_ptr(b, bb, F32, b.mul(i, loop.sb)),
                     offset_ptr(b, c, F32, b.mul(i, loop.sc)), b.add(at, b.mul(i, loop.sc)),
                     body)


# --- reference loop nest ------------------------------------------------------------

def emit_naive_dot(b: ir.IRBuilder, spec: NaiveDot, out, lhs, rhs) -> None:
    """One loop over the output elements, one loop per contracting dim; any element type."""
    a_shape, b_shape, dn = spec.lhs, spec.rhs, spec.dn
    dtype = spec.out.dtype
    ety = llvm_type(dtype)
    sa, sb = row_major_strides(a_shape.dims), row_major_strides(b_shape.dims)
    lhs_free = [d for d in range(a_shape.rank) if d not in dn.lhs_batch + dn.lhs_contracting]
    rhs_free = [d for d in range(b_shape.rank) if d not in dn.rhs_batch + dn.rhs_contracting]
    # (extent, A stride, B stride) of each output dim, then of each contracting dim.
    out_dims = ([(a_shape.dims[la], sa[la], sb[rb]) for la, rb in zip(dn.lhs_batch, dn.rhs_batch)]
                + [(a_shape.dims[d], sa[d], 0) for d in lhs_free]
                + [(b_shape.dims[d], 0, sb[d]) for d in rhs_free])
    k_dims = [(a_shape.dims[la], sa[la], sb[rb])
              for la, rb in zip(dn.lhs_contracting, dn.rhs_contracting)]
    acc = alloca_once(b, scalar.acc_type(dtype), "acc")
    with for_range(b, prod(spec.out.dims), "o") as flat:
        a_off, b_off, rem = i64(0), i64(0), flat
        for ext, s_a, s_b in reversed(out_dims):
            idx = b.urem(rem, i64(ext))
            rem = b.udiv(rem, i64(ext))
            a_off = b.add(a_off, b.mul(idx, i64(s_a)))
            b_off = b.add(b_off, b.mul(idx, i64(s_b)))
        b.store(scalar.zero(dtype), acc)
        _contract(b, k_dims, lhs, rhs, a_off, b_off, acc, spec)
        b.store(scalar.narrow(b, b.load(acc, typ=scalar.acc_type(dtype)), dtype),
                b.gep(out, [flat], source_etype=ety, inbounds=True))


def _contract(b, k_dims, lhs, rhs, a_off, b_off, acc, spec: NaiveDot):
    if not k_dims:
        xt, yt, dtype = spec.lhs.dtype, spec.rhs.dtype, spec.out.dtype
        xty, yty = llvm_type(xt), llvm_type(yt)
        x = b.load(b.gep(lhs, [a_off], source_etype=xty, inbounds=True), typ=xty)
        y = b.load(b.gep(rhs, [b_off], source_etype=yty, inbounds=True), typ=yty)
        old = b.load(acc, typ=scalar.acc_type(dtype))
        b.store(scalar.mul_add(b, old, x, y, dtype, xt, yt), acc)
        return
    (ext, s_a, s_b), rest = k_dims[0], k_dims[1:]
    with for_range(b, ext, "kk") as k:
        _contract(b, rest, lhs, rhs, b.add(a_off, b.mul(k, i64(s_a))),
                  b.add(b_off, b.mul(k, i64(s_b))), acc, spec)
