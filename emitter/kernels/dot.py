"""Dot (XLA dot_general) kernels.

Any dimension numbers are first canonicalized into a batched matrix product
``C[batch] (M x N) = A[batch] (M x K) * B[batch] (K x N)`` with static element
strides (``canonicalize``): size-1 dims are dropped, the free and contracting dims
are merged where their strides allow, and free dims that do not merge become extra
batch loops. The f32 product then takes one of three paths:

    M == 1 or N == 1, matrix contiguous along K  -> gemv.emit_row_dot
    M == 1 or N == 1, matrix contiguous along N  -> gemv.emit_row_stream
    otherwise                                     -> gemm.emit_gemm (packed B sliver)

Other element types, and contracting dims that cannot be merged into one stride,
use a plain loop nest (``emit_naive_dot``) accumulating in the element type.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from llvmlite import ir

from ...hlo import Instruction, dtypes
from ..irutil import alloca_once, for_range, i64, llvm_type
from . import scalar
from .function import kernel_function
from .gemm import GemmShape, MatrixPacker, Tiling, emit_gemm, scratch_floats, tiling_for
from .gemv import emit_row_dot, emit_row_stream
from .vec import F32, offset_ptr


@dataclass(frozen=True)
class Loop:
    """One batch loop: its extent and the element stride it adds to A, B and C."""
    extent: int
    sa: int
    sb: int
    sc: int


@dataclass(frozen=True)
class DotPlan:
    batch: tuple[Loop, ...]
    m: int
    n: int
    k: int
    a_sm: int
    a_sk: int
    b_sk: int
    b_sn: int
    c_sm: int
    c_sn: int


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


def canonicalize(instr: Instruction) -> DotPlan | None:
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
    return DotPlan(tuple(b for b in batch if b.extent > 1), m, n, k, a_sm, a_sk, b_sk, b_sn,
                   c_sm, c_sn)


# --- path selection ---------------------------------------------------------------

def _gemv(plan: DotPlan):
    """(rows, mat_sr, mat_sk, vec_s, out_s) for a matrix-vector product, else None."""
    if plan.m == 1:         # out row = B^T a
        return plan.n, plan.b_sn, plan.b_sk, plan.a_sk, plan.c_sn
    if plan.n == 1:         # out column = A b
        return plan.m, plan.a_sm, plan.a_sk, plan.b_sk, plan.c_sm
    return None


def _path(instr: Instruction, plan: DotPlan | None) -> str:
    if instr.shape.dtype != dtypes.F32 or plan is None or plan.k == 0 or plan.m * plan.n == 0:
        return "naive"
    g = _gemv(plan)
    if g is not None:
        rows, sr, sk, sv, so = g
        if sk == 1 and sv == 1:
            return "row_dot"
        if sr == 1 and so == 1:
            return "row_stream"
    return "gemm"


def dot_scratch_bytes(instr: Instruction, target) -> int:
    plan = canonicalize(instr)
    if _path(instr, plan) != "gemm":
        return 0
    t = tiling_for(target)
    return scratch_floats(t, t.kc) * 4


def emit_dot(module: ir.Module, instr: Instruction, name: str, target) -> ir.Function:
    plan = canonicalize(instr)
    path = _path(instr, plan)
    fn, b = kernel_function(module, name, with_scratch=path == "gemm")
    out, lhs, rhs = fn.args[:3]
    if path == "naive":
        emit_naive_dot(b, instr, out, lhs, rhs)
    else:
        t = tiling_for(target)
        scratch = fn.args[3] if path == "gemm" else None
        _batch_loops(b, plan.batch, lhs, rhs, out,
                     lambda a, bb, c: _emit_one(b, path, plan, t, a, bb, c, scratch))
    b.ret_void()
    return fn


def _batch_loops(b, loops, a, bb, c, body):
    if not loops:
        body(a, bb, c)
        return
    first, rest = loops[0], loops[1:]
    with for_range(b, first.extent, "batch") as i:
        _batch_loops(b, rest, offset_ptr(b, a, F32, b.mul(i, i64(first.sa))),
                     offset_ptr(b, bb, F32, b.mul(i, i64(first.sb))),
                     offset_ptr(b, c, F32, b.mul(i, i64(first.sc))), body)


def _emit_one(b, path, plan: DotPlan, t: Tiling, a, bb, c, scratch):
    if path == "gemm":
        g = GemmShape(plan.m, plan.n, plan.k, plan.a_sm, plan.a_sk, plan.c_sm)
        emit_gemm(b, g, a, c, MatrixPacker(bb, plan.b_sk, plan.b_sn, t, t.kc), scratch, t)
        return
    rows, sr, sk, sv, so = _gemv(plan)
    mat, vec = (bb, a) if plan.m == 1 else (a, bb)
    if path == "row_dot":
        emit_row_dot(b, t.lanes, rows, plan.k, mat, sr, vec, c, so)
    else:
        emit_row_stream(b, t.lanes, rows, plan.k, mat, sk, vec, sv, c)


# --- reference loop nest ------------------------------------------------------------

def emit_naive_dot(b: ir.IRBuilder, instr: Instruction, out, lhs, rhs) -> None:
    """One loop over the output elements, one loop per contracting dim; any element type."""
    a_shape, b_shape = (o.shape for o in instr.operands)
    dn = instr.attrs["dimension_numbers"]
    dtype = instr.shape.dtype
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
    with for_range(b, prod(instr.shape.dims), "o") as flat:
        a_off, b_off, rem = i64(0), i64(0), flat
        for ext, s_a, s_b in reversed(out_dims):
            idx = b.urem(rem, i64(ext))
            rem = b.udiv(rem, i64(ext))
            a_off = b.add(a_off, b.mul(idx, i64(s_a)))
            b_off = b.add(b_off, b.mul(idx, i64(s_b)))
        b.store(scalar.zero(dtype), acc)
        _contract(b, k_dims, lhs, rhs, a_off, b_off, acc, ety, dtype)
        b.store(scalar.narrow(b, b.load(acc, typ=scalar.acc_type(dtype)), dtype),
                b.gep(out, [flat], source_etype=ety, inbounds=True))


def _contract(b, k_dims, lhs, rhs, a_off, b_off, acc, ety, dtype):
    if not k_dims:
        x = b.load(b.gep(lhs, [a_off], source_etype=ety, inbounds=True), typ=ety)
        y = b.load(b.gep(rhs, [b_off], source_etype=ety, inbounds=True), typ=ety)
        old = b.load(acc, typ=scalar.acc_type(dtype))
        b.store(scalar.mul_add(b, old, x, y, dtype), acc)
        return
    (ext, s_a, s_b), rest = k_dims[0], k_dims[1:]
    with for_range(b, ext, "kk") as k:
        _contract(b, rest, lhs, rhs, b.add(a_off, b.mul(k, i64(s_a))),
                  b.add(b_off, b.mul(k, i64(s_b))), acc, ety, dtype)
