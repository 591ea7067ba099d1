"""Scalar multiply-accumulate for the reference loop nests, in any element type.

Floats narrower than f32 accumulate in f32 (as XLA's CPU backend does) and are
rounded once at the end; bf16, stored as i16 (llvmlite has no bfloat), is widened
by shifting its bits into the top of an f32. Integers wrap; pred is or-of-and.
"""
from __future__ import annotations

from llvmlite import ir

from ...hlo import DType
from ..irutil import I32, llvm_type
from .vec import F32


def acc_type(dtype: DType) -> ir.Type:
    if dtype.is_float and dtype.bits < 32:
        return F32
    return llvm_type(dtype)


def zero(dtype: DType) -> ir.Constant:
    return ir.Constant(acc_type(dtype), 0.0 if dtype.is_float else 0)


def widen(b: ir.IRBuilder, v: ir.Value, dtype: DType) -> ir.Value:
    """An element as loaded from memory -> the accumulator type."""
    if dtype.name == "bf16":
        return b.bitcast(b.shl(b.zext(v, I32), ir.Constant(I32, 16)), F32)
    if dtype.name == "f16":
        return b.fpext(v, F32)
    return v


def narrow(b: ir.IRBuilder, v: ir.Value, dtype: DType) -> ir.Value:
    """The accumulator -> the element type (bf16: round to nearest even)."""
    if dtype.name == "bf16":
        bits = b.bitcast(v, I32)
        odd = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
        rounded = b.add(bits, b.add(ir.Constant(I32, 0x7FFF), odd))
        return b.trunc(b.lshr(rounded, ir.Constant(I32, 16)), llvm_type(dtype))
    if dtype.name == "f16":
        return b.fptrunc(v, llvm_type(dtype))
    return v


def mul_add(b: ir.IRBuilder, acc: ir.Value, x: ir.Value, y: ir.Value, dtype: DType) -> ir.Value:
    """acc + x * y with x, y as loaded from memory."""
    x, y = widen(b, x, dtype), widen(b, y, dtype)
    if dtype.is_float:
        return b.fadd(acc, b.fmul(x, y))
    if dtype.is_pred:
        return b.or_(acc, b.and_(x, y))
    return b.add(acc, b.mul(x, y))
