"""Scalar multiply-accumulate for the reference loop nests, in any element type.

Floats narrower than f32 accumulate in f32 (as XLA's CPU backend does) and are
rounded once at the end; the conversions are the elemental emitter's (scalar.py).
Integers wrap; pred is or-of-and. Integer operands of a wider integer result (u8 x s8 ->
s32) are sign- or zero-extended to it first.
"""
from __future__ import annotations

from llvmlite import ir

from ...hlo import DType
from ..scalar import compute_type, convert, from_compute, to_compute


def acc_type(dtype: DType) -> ir.Type:
    return compute_type(dtype)


def zero(dtype: DType) -> ir.Constant:
    return ir.Constant(acc_type(dtype), 0.0 if dtype.is_float else 0)


def widen(b: ir.IRBuilder, v: ir.Value, dtype: DType, src: DType | None = None) -> ir.Value:
    """An element of type ``src`` (default ``dtype``) as loaded from memory -> the
    accumulator type of ``dtype``."""
    if src is not None and src != dtype:
        return convert(b, v, src, dtype)
    return to_compute(b, v, dtype)


def narrow(b: ir.IRBuilder, v: ir.Value, dtype: DType) -> ir.Value:
    """The accumulator -> the element type (rounded to nearest even)."""
    return from_compute(b, v, dtype)


def mul_add(b: ir.IRBuilder, acc: ir.Value, x: ir.Value, y: ir.Value, dtype: DType,
            x_dtype: DType | None = None, y_dtype: DType | None = None) -> ir.Value:
    """acc + x * y with x, y as loaded from memory (of types ``x_dtype``, ``y_dtype``,
    default ``dtype``)."""
    x, y = widen(b, x, dtype, x_dtype), widen(b, y, dtype, y_dtype)
    if dtype.is_float:
        return b.fadd(acc, b.fmul(x, y))
    if dtype.is_pred:
        return b.or_(acc, b.and_(x, y))
    return b.add(acc, b.mul(x, y))
