"""Scalar IR helpers of the elemental emitter: intrinsics, immediates, f16/bf16, convert.

Element values travel in their storage type (``irutil.llvm_type``: pred is an i8
0/1, bf16 an i16 holding the bits). f16 and bf16 arithmetic is done in f32.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..hlo import DType
from .irutil import I8, llvm_type

F32 = ir.FloatType()
F64 = ir.DoubleType()
I16 = ir.IntType(16)
I32 = ir.IntType(32)


def intrinsic(b: ir.IRBuilder, name: str, args, ret: ir.Type | None = None,
              overloads=None) -> ir.Value:
    """Call ``llvm.<name>`` overloaded on ``overloads`` (default: the first argument's type)."""
    overloads = overloads or [args[0].type]
    full = ".".join([f"llvm.{name}"] + [t.intrinsic_name for t in overloads])
    module = b.block.function.module
    fn = module.globals.get(full)
    if fn is None:
        fnty = ir.FunctionType(ret or args[0].type, [a.type for a in args])
        fn = ir.Function(module, fnty, full)
    return b.call(fn, list(args))


def compute_type(dtype: DType) -> ir.Type:
    """The type arithmetic on ``dtype`` runs in: f32 for the 16-bit floats."""
    if dtype.name in ("f16", "bf16"):
        return F32
    return llvm_type(dtype)


def immediate(value, dtype: DType) -> ir.Constant:
    """An LLVM constant of ``dtype``'s storage type holding the scalar ``value``."""
    ty = llvm_type(dtype)
    if dtype.is_pred:
        return ir.Constant(I8, int(bool(value)))
    if dtype.name == "bf16":
        return ir.Constant(I16, int(np.asarray(value, dtype.np).view(np.uint16)))
    if dtype.is_float:
        return ir.Constant(ty, float(value))
    v = int(value)
    if v >= 1 << (dtype.bits - 1):          # unsigned above the signed range: two's complement
        v -= 1 << dtype.bits
    return ir.Constant(ty, v)


def to_compute(b: ir.IRBuilder, v: ir.Value, dtype: DType) -> ir.Value:
    if dtype.name == "f16":
        return b.fpext(v, F32)
    if dtype.name == "bf16":       # bf16 is the top half of an f32
        return b.bitcast(b.shl(b.zext(v, I32), ir.Constant(I32, 16)), F32)
    return v


def from_compute(b: ir.IRBuilder, v: ir.Value, dtype: DType) -> ir.Value:
    if dtype.name == "f16":
        return b.fptrunc(v, ir.HalfType())
    if dtype.name == "bf16":
        return _f32_to_bf16(b, v)
    return v


def _f32_to_bf16(b: ir.IRBuilder, f: ir.Value) -> ir.Value:
    """Round to nearest even: add 0x7fff plus the lowest kept bit, keep the top 16 bits.
    NaN stays a (quiet) NaN instead of rounding into infinity."""
    c = lambda n: ir.Constant(I32, n)   # noqa: E731
    bits = b.bitcast(f, I32)
    top = b.lshr(bits, c(16))
    lsb = b.and_(top, c(1))
    rounded = b.lshr(b.add(bits, b.add(c(0x7FFF), lsb)), c(16))
    is_nan = b.fcmp_unordered("uno", f, f)
    return b.trunc(b.select(is_nan, b.or_(top, c(0x40)), rounded), I16)


def pred_to_i1(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    return b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))


def i1_to_pred(b: ir.IRBuilder, c: ir.Value) -> ir.Value:
    return b.zext(c, I8)


def convert(b: ir.IRBuilder, x: ir.Value, src: DType, dst: DType) -> ir.Value:
    """XLA's convert: float -> int saturates (NaN -> 0), anything -> pred is ``x != 0``,
    pred -> anything is 0/1. f64 -> f16/bf16 rounds through f32."""
    if src == dst:
        return x
    if dst.is_pred:
        if src.is_float:
            f = to_compute(b, x, src)
            return i1_to_pred(b, b.fcmp_unordered("!=", f, ir.Constant(f.type, 0.0)))
        return i1_to_pred(b, b.icmp_unsigned("!=", x, ir.Constant(x.type, 0)))
    ty = compute_type(dst)
    if src.is_float:
        f = to_compute(b, x, src)
        if dst.is_float:
            if f.type != ty:
                wider = isinstance(f.type, ir.FloatType) and isinstance(ty, ir.DoubleType)
                f = b.fpext(f, ty) if wider else b.fptrunc(f, ty)
            return from_compute(b, f, dst)
        sat = "fptosi.sat" if dst.kind == "s" else "fptoui.sat"
        return intrinsic(b, sat, [f], ret=ty, overloads=[ty, f.type])
    signed = src.kind == "s"
    if dst.is_float:
        f = b.sitofp(x, ty) if signed else b.uitofp(x, ty)
        return from_compute(b, f, dst)
    if dst.bits < src.bits:
        return b.trunc(x, ty)
    if dst.bits == src.bits:
        return x
    return b.sext(x, ty) if signed else b.zext(x, ty)


def is_unsigned_like(dtype: DType) -> bool:
    """Unsigned integers and pred compare and divide as unsigned."""
    return dtype.kind in ("u", "pred")

