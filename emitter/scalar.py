"""Scalar IR helpers of the elemental emitter: immediates, storage and compute types,
convert.

Element values travel in their storage type (``irutil.llvm_type``: pred is an i8 0/1,
bf16 an i16 holding the bits, the float8/float4 types an i8 holding the bits, s4/u4/
s2/u2 an i8 with the value in its low bits and zeros above). Arithmetic runs in the
compute type: f32 for the floats narrower than f32, the sign- or zero-extended i8 for
the sub-byte integers; ``to_compute`` and ``from_compute`` convert, and rounding to a
narrow type happens once, on the way back.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..hlo import DType
from .float_formats import FORMATS, decode, encode
from .intrinsics import call_intrinsic
from .irutil import I8, llvm_type

F32 = ir.FloatType()
I16 = ir.IntType(16)


def compute_type(dtype: DType) -> ir.Type:
    """The type arithmetic on ``dtype`` runs in: f32 for the floats narrower than f32."""
    if dtype.is_narrow_float:
        return F32
    return llvm_type(dtype)


def immediate(value, dtype: DType) -> ir.Constant:
    """An LLVM constant of ``dtype``'s storage type holding the scalar ``value``."""
    ty = llvm_type(dtype)
    if dtype.is_pred:
        return ir.Constant(I8, int(bool(value)))
    if dtype.is_narrow_float and dtype.name != "f16":      # the bits
        bits = np.asarray(value, dtype.np).reshape(1).view(f"u{dtype.itemsize}")[0]
        return ir.Constant(ty, int(bits))
    if dtype.is_float:
        return ir.Constant(ty, float(value))
    v = int(value) & ((1 << dtype.bits) - 1)     # two's complement in the value's bits
    if v >= 1 << (ty.width - 1):
        v -= 1 << ty.width
    return ir.Constant(ty, v)


def _sub_byte_mask(dtype: DType) -> ir.Constant:
    return ir.Constant(I8, (1 << dtype.bits) - 1)


def to_compute(b: ir.IRBuilder, v: ir.Value, dtype: DType) -> ir.Value:
    if dtype.name == "f16":
        return b.fpext(v, F32)
    if dtype.is_narrow_float:
        return decode(b, v, FORMATS[dtype.name])
    if dtype.is_sub_byte:
        if dtype.kind == "u":
            return b.and_(v, _sub_byte_mask(dtype))
        spare = ir.Constant(I8, 8 - dtype.bits)      # sign-extend from the value's bits
        return b.ashr(b.shl(v, spare), spare)
    return v


def from_compute(b: ir.IRBuilder, v: ir.Value, dtype: DType) -> ir.Value:
    if dtype.name == "f16" and isinstance(v.type, ir.FloatType):
        return b.fptrunc(v, ir.HalfType())
    if dtype.name == "f16":          # from f64: one rounding, no libcall
        return b.bitcast(encode(b, v, FORMATS["f16"], I16), ir.HalfType())
    if dtype.is_narrow_float:
        return encode(b, v, FORMATS[dtype.name], llvm_type(dtype))
    if dtype.is_sub_byte:
        return b.and_(v, _sub_byte_mask(dtype))
    return v


def pred_to_i1(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """A pred's storage (i8 0/1, or a vector of them: a kernel's epilogue) as i1."""
    return b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))


def i1_to_pred(b: ir.IRBuilder, c: ir.Value) -> ir.Value:
    """An i1 (or a vector of them) as a pred's storage; LLVM folds the pair away where a
    select reads the compare."""
    vector = isinstance(c.type, ir.VectorType)
    return b.zext(c, ir.VectorType(I8, c.type.count) if vector else I8)


def convert(b: ir.IRBuilder, x: ir.Value, src: DType, dst: DType,
            no_nans: bool = False) -> ir.Value:
    """XLA's convert: float -> int truncates and saturates to the target's range (NaN -> 0),
    int -> int wraps, anything -> pred is ``x != 0``, pred -> anything is 0/1, floats
    round to nearest even once (f64 -> bf16 directly, not through f32). ``no_nans``: the
    caller knows x is not NaN."""
    if src == dst:
        return x
    v = to_compute(b, x, src) if src.is_float or src.is_sub_byte else x
    if dst.is_pred:
        if src.is_float:
            return i1_to_pred(b, b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0)))
        return i1_to_pred(b, b.icmp_unsigned("!=", v, ir.Constant(v.type, 0)))
    ty = compute_type(dst)
    if src.is_float and dst.is_float:
        if dst.is_narrow_float:
            return from_compute(b, v, dst)
        if v.type != ty:
            v = b.fpext(v, ty) if isinstance(ty, ir.DoubleType) else b.fptrunc(v, ty)
        return v
    if src.is_float and dst.bits in (8, 16):
        # Saturating: clamp in float (NaN -> 0), then the plain conversion, which LLVM
        # vectorizes (it scalarizes fptosi.sat to i8: requantization ends in this).
        info = dst.info
        if not no_nans:
            v = b.select(b.fcmp_unordered("uno", v, v), ir.Constant(v.type, 0.0), v)
        lo, hi = ir.Constant(v.type, float(info.min)), ir.Constant(v.type, float(info.max))
        v = b.select(b.fcmp_ordered("<", v, lo), lo, v)
        v = b.select(b.fcmp_ordered(">", v, hi), hi, v)
        return b.fptosi(v, ty) if dst.kind == "s" else b.fptoui(v, ty)
    if src.is_float:
        # The saturating conversion to the value's own width, then into the i8 of s4/u4.
        width = ir.IntType(dst.bits)
        sat = "llvm.fptosi.sat" if dst.kind == "s" else "llvm.fptoui.sat"
        r = call_intrinsic(b, sat, [v], ret=width, overloads=[width, v.type])
        if width != ty:
            r = b.sext(r, ty) if dst.kind == "s" else b.zext(r, ty)
        return from_compute(b, r, dst)
    signed = src.kind == "s"
    if dst.is_float:
        f = b.sitofp(v, ty) if signed else b.uitofp(v, ty)
        return from_compute(b, f, dst)
    if ty.width < v.type.width:
        v = b.trunc(v, ty)
    elif ty.width > v.type.width:
        v = b.sext(v, ty) if signed else b.zext(v, ty)
    return from_compute(b, v, dst)


def is_unsigned_like(dtype: DType) -> bool:
    """Unsigned integers and pred compare and divide as unsigned."""
    return dtype.kind in ("u", "pred")
