"""Multi-dimensional indices as lists of i64 values: linearize and delinearize.

A layout is XLA's minor_to_major permutation; ``None`` means row-major (C order),
the logical order reshape is defined in.
"""
from __future__ import annotations

from llvmlite import ir

from .irutil import i64

_NO_WRAP = ("nuw", "nsw")   # indices are in range: lets LLVM vectorize and fold


def _minor_to_major(dims, layout) -> tuple[int, ...]:
    return tuple(layout) if layout is not None else tuple(range(len(dims) - 1, -1, -1))


def linearize(b: ir.IRBuilder, index, dims, layout=None) -> ir.Value:
    """Offset in elements of ``index`` in an array of ``dims`` stored in ``layout``."""
    linear, stride = i64(0), 1
    for d in _minor_to_major(dims, layout):
        if dims[d] != 1:
            term = index[d] if stride == 1 else b.mul(index[d], i64(stride), flags=_NO_WRAP)
            linear = term if stride == 1 else b.add(linear, term, flags=_NO_WRAP)
        stride *= dims[d]
    return linear


def delinearize(b: ir.IRBuilder, linear: ir.Value, dims, layout=None) -> list[ir.Value]:
    """The index of element ``linear`` of an array of ``dims`` stored in ``layout``."""
    index: list[ir.Value] = [i64(0)] * len(dims)
    stride = 1
    for d in _minor_to_major(dims, layout):
        if dims[d] != 1:
            q = linear if stride == 1 else b.udiv(linear, i64(stride))
            index[d] = b.urem(q, i64(dims[d]))
        stride *= dims[d]
    return index


def reshape_index(b: ir.IRBuilder, index, out_dims, in_dims) -> list[ir.Value]:
    """Operand index of a row-major reshape ``in_dims -> out_dims``.

    Trailing dimensions the two shapes share map one to one (the inner loop keeps its
    unit stride); only the leading rest goes through linearize/delinearize."""
    k = 0
    while (k < min(len(out_dims), len(in_dims))
           and out_dims[len(out_dims) - 1 - k] == in_dims[len(in_dims) - 1 - k]):
        k += 1
    head_out, head_in = out_dims[:len(out_dims) - k], in_dims[:len(in_dims) - k]
    tail = list(index[len(out_dims) - k:])
    if not head_in:
        return tail
    linear = linearize(b, index[:len(head_out)], head_out)
    return delinearize(b, linear, head_in) + tail
