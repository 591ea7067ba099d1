"""Vector IR idioms for the kernels: splats, masked memory access, gathers, sums.

Masked loads/stores and gathers go through LLVM's target-independent intrinsics
(``llvm.masked.*``); the backend lowers them to vmaskmov/vgather where the target
has them and to scalar code elsewhere, so the object never needs a library.
"""
from __future__ import annotations

from llvmlite import ir

from ..intrinsics import declare_intrinsic
from ..irutil import I1, I32, I64, PTR

F32 = ir.FloatType()
CONTRACT = ("contract",)     # lets the backend fuse fmul+fadd into an FMA where it has one


def vec_type(elem: ir.Type, lanes: int) -> ir.VectorType:
    return ir.VectorType(elem, lanes)


def splat(b: ir.IRBuilder, scalar: ir.Value, lanes: int) -> ir.Value:
    vty = vec_type(scalar.type, lanes)
    one = b.insert_element(ir.Constant(vty, None), scalar, ir.Constant(I32, 0))
    return b.shuffle_vector(one, ir.Constant(vty, None), ir.Constant(vec_type(I32, lanes), None))


def const_vec(elem: ir.Type, values) -> ir.Constant:
    values = list(values)
    return ir.Constant(vec_type(elem, len(values)), [ir.Constant(elem, v) for v in values])


def zeros(vty: ir.VectorType) -> ir.Constant:
    zero = 0.0 if isinstance(vty.element, (ir.FloatType, ir.DoubleType)) else 0
    return ir.Constant(vty, [ir.Constant(vty.element, zero)] * vty.count)


def lane_mask(lanes: int, valid: int) -> ir.Constant:
    """<lanes x i1> with the first ``valid`` lanes set."""
    return const_vec(I1, [1 if j < valid else 0 for j in range(lanes)])


def fma(b: ir.IRBuilder, x: ir.Value, y: ir.Value, acc: ir.Value) -> ir.Value:
    return b.fadd(b.fmul(x, y, flags=CONTRACT), acc, flags=CONTRACT)


def load_vec(b: ir.IRBuilder, ptr: ir.Value, vty: ir.VectorType) -> ir.Value:
    return b.load(ptr, typ=vty, align=4)


def store_vec(b: ir.IRBuilder, value: ir.Value, ptr: ir.Value) -> None:
    b.store(value, ptr, align=4)


def masked_load(b: ir.IRBuilder, ptr: ir.Value, vty: ir.VectorType, mask: ir.Value,
                align: int = 4, passthrough: ir.Value | None = None) -> ir.Value:
    """Load the lanes of ``mask``; the others read as ``passthrough`` (default 0) and
    touch no memory."""
    fn = declare_intrinsic(b.module, "llvm.masked.load", vty,
                           [PTR, I32, vec_type(I1, vty.count), vty], [vty, PTR])
    return b.call(fn, [ptr, ir.Constant(I32, align), mask,
                       zeros(vty) if passthrough is None else passthrough])


def masked_store(b: ir.IRBuilder, value: ir.Value, ptr: ir.Value, mask: ir.Value,
                 align: int = 4) -> None:
    vty = value.type
    fn = declare_intrinsic(b.module, "llvm.masked.store", ir.VoidType(),
                           [vty, PTR, I32, vec_type(I1, vty.count)], [vty, PTR])
    b.call(fn, [value, ptr, ir.Constant(I32, align), mask])


def masked_gather(b: ir.IRBuilder, base: ir.Value, elem: ir.Type, offsets: ir.Value,
                  mask: ir.Value) -> ir.Value:
    """``base[offsets[j]]`` for the lanes of ``mask``, 0 elsewhere (offsets: <n x i32>)."""
    lanes = offsets.type.count
    ptrs = b.gep(base, [offsets], source_etype=elem)
    ptrs.type = vec_type(PTR, lanes)   # llvmlite types a vector-index gep as a scalar ptr
    vty = vec_type(elem, lanes)
    fn = declare_intrinsic(b.module, "llvm.masked.gather", vty,
                           [vec_type(PTR, lanes), I32, vec_type(I1, lanes), vty],
                           [vty, vec_type(PTR, lanes)])
    return b.call(fn, [ptrs, ir.Constant(I32, 4), mask, zeros(vty)])


def hsum(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """Sum of the lanes by halving (lanes a power of two)."""
    n = v.type.count
    while n > 1:
        n //= 2
        lo = b.shuffle_vector(v, v, const_vec(I32, range(n)))
        hi = b.shuffle_vector(v, v, const_vec(I32, range(n, 2 * n)))
        v = b.fadd(lo, hi)
    return b.extract_element(v, ir.Constant(I32, 0))


def prefetch(b: ir.IRBuilder, ptr: ir.Value, locality: int = 3) -> None:
    """A read prefetch of the cache line at ``ptr`` (any address: it never faults);
    ``locality`` 3 keeps it in every level, lower ones in fewer."""
    fn = declare_intrinsic(b.module, "llvm.prefetch", ir.VoidType(), [PTR, I32, I32, I32],
                           [PTR])
    b.call(fn, [ptr, ir.Constant(I32, 0), ir.Constant(I32, locality), ir.Constant(I32, 1)])


def offset_ptr(b: ir.IRBuilder, base: ir.Value, elem: ir.Type, index) -> ir.Value:
    """``base + index`` elements; no ``inbounds``: im2col rows may start before the array."""
    idx = ir.Constant(I64, index) if isinstance(index, int) else index
    return b.gep(base, [idx], source_etype=elem)


def transpose_square(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The transpose of a square of vectors (rows[i][j] -> out[j][i]), ``len(rows)`` a
    power of two equal to the lanes: one two-input shuffle per vector and stage, each
    stage swapping one bit of the row index with that bit of the lane index."""
    n = len(rows)
    rows = list(rows)
    d = 1
    while d < n:
        lo = const_vec(I32, [n + c - d if c & d else c for c in range(n)])
        hi = const_vec(I32, [n + c if c & d else c + d for c in range(n)])
        for i in range(n):
            if not i & d:
                x, y = rows[i], rows[i + d]
                rows[i], rows[i + d] = b.shuffle_vector(x, y, lo), b.shuffle_vector(x, y, hi)
        d <<= 1
    return rows
