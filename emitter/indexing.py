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


def reshape_groups(out_dims, in_dims) -> list[tuple[int, int, int, int]]:
    """The smallest runs ``(a, b, c, d)`` with prod(out_dims[a:b]) == prod(in_dims[c:d])
    that tile both shapes in order: a row-major reshape only splits and merges within
    each run. Shapes with no elements form one run."""
    if 0 in out_dims or 0 in in_dims:
        return [(0, len(out_dims), 0, len(in_dims))]
    groups, a, c = [], 0, 0
    while a < len(out_dims) or c < len(in_dims):
        b, d, po, pi = a, c, 1, 1
        if b < len(out_dims):
            po, b = out_dims[b], b + 1
        if d < len(in_dims):
            pi, d = in_dims[d], d + 1
        while po != pi:
            if po < pi:
                po, b = po * out_dims[b], b + 1
            else:
                pi, d = pi * in_dims[d], d + 1
        groups.append((a, b, c, d))
        a, c = b, d
    return groups


def reshape_index(b: ir.IRBuilder, index, out_dims, in_dims) -> list[ir.Value]:
    """Operand index of a row-major reshape ``in_dims -> out_dims``.

    Each run of dims that splits or merges (``reshape_groups``) is linearized and
    delinearized on its own, so a dim the reshape keeps maps one to one (the inner loop
    keeps its unit stride) and a split costs a division by that run's extent only."""
    src: list[ir.Value] = []
    for a, bb, c, d in reshape_groups(tuple(out_dims), tuple(in_dims)):
        if bb - a == 1 and d - c == 1:
            src.append(index[a])
        elif d > c:
            linear = linearize(b, index[a:bb], out_dims[a:bb])
            src += delinearize(b, linear, in_dims[c:d])
    return src
