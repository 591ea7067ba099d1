"""Arithmetic on run-time sizes: i64 values that are kernel arguments, or Python ints.

Kernels shared between layers see their sizes only at run time; these helpers keep the
code that computes block bounds and tail masks readable.
"""
from __future__ import annotations

from llvmlite import ir

from ..irutil import I32, i64
from .vec import const_vec, splat

Size = ir.Value | int


def val(x: Size) -> ir.Value:
    return i64(x) if isinstance(x, int) else x


def imin(b: ir.IRBuilder, x: Size, y: Size) -> ir.Value:
    x, y = val(x), val(y)
    return b.select(b.icmp_signed("<", x, y), x, y)


def ceil_div(b: ir.IRBuilder, x: Size, d: Size) -> ir.Value:
    return b.udiv(b.add(val(x), b.sub(val(d), i64(1))), val(d))


def product(b: ir.IRBuilder, values) -> ir.Value:
    acc = i64(1)
    for v in values:
        acc = b.mul(acc, val(v))
    return acc


def splat_i32(b: ir.IRBuilder, x: Size, lanes: int) -> ir.Value:
    """``<lanes x i32>`` of a size (sizes of one image fit in 32 bits)."""
    if isinstance(x, int):
        return const_vec(I32, [x] * lanes)
    return splat(b, b.trunc(x, I32), lanes)


def first_lanes(b: ir.IRBuilder, lanes: int, start: int, valid: ir.Value) -> ir.Value:
    """``<lanes x i1>``: lane j is set iff ``start + j < valid`` (a run-time tail mask)."""
    return b.icmp_signed("<", const_vec(I32, range(start, start + lanes)),
                         splat_i32(b, valid, lanes))
