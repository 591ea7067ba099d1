"""Ops on the bits of numbers: reduce-precision and bitcast-convert between widths."""
from __future__ import annotations

from ...hlo import Builder, Instruction, Opcode, Shape, XlacError, dtypes
from .common import choose, full


# --- reduce-precision ------------------------------------------------------------------

_BITS = {16: dtypes.U16, 32: dtypes.U32, 64: dtypes.U64}
_FORMAT = {dtypes.F16: (5, 10), dtypes.BF16: (8, 7), dtypes.F32: (8, 23), dtypes.F64: (11, 52)}


def reduce_precision(b: Builder, x: Instruction, exponent_bits: int,
                     mantissa_bits: int) -> Instruction:
    """x rounded to a float of ``exponent_bits`` and ``mantissa_bits`` and back, as XLA
    does on the bits: the mantissa rounded to nearest even, then exponents past the
    new range to infinity or (below it) to zero of the same sign; NaNs stay NaN."""
    dt = x.shape.dtype
    if dt not in _FORMAT:
        raise XlacError(f"reduce-precision of {dt.name}: it takes floats")
    src_exp, src_man = _FORMAT[dt]
    u = _BITS[dt.bits]
    dims = x.shape.dims
    bits = b.op(Opcode.BITCAST_CONVERT, x, shape=x.shape.with_dtype(u))

    def k(value):
        return full(b, value, u, dims)

    def op(opcode, *xs):
        return b.op(opcode, *xs)
    if mantissa_bits < src_man:
        drop = src_man - mantissa_bits
        last = 1 << drop
        odd = op(Opcode.SHIFT_RIGHT_LOGICAL, op(Opcode.AND, bits, k(last)), k(drop))
        bias = op(Opcode.ADD, odd, k((last >> 1) - 1))
        mask = ((1 << dt.bits) - 1) ^ (last - 1)
        bits = op(Opcode.AND, op(Opcode.ADD, bits, bias), k(mask))
    if exponent_bits < src_exp:
        sign_mask = 1 << (dt.bits - 1)
        exp_mask = ((1 << src_exp) - 1) << src_man
        src_bias = (1 << (src_exp - 1)) - 1
        new_bias = (1 << (exponent_bits - 1)) - 1
        exponent = op(Opcode.AND, bits, k(exp_mask))
        overflows = b.compare(exponent, k((src_bias + new_bias) << src_man), "GT")
        underflows = b.compare(exponent, k((src_bias - new_bias) << src_man), "LE")
        signed_zero = op(Opcode.AND, bits, k(sign_mask))
        signed_inf = op(Opcode.OR, signed_zero, k(exp_mask))
        bits = choose(b, overflows, signed_inf, choose(b, underflows, signed_zero, bits))
    out = b.op(Opcode.BITCAST_CONVERT, bits, shape=x.shape)
    return choose(b, b.compare(x, x, "NE"), x, out)


# --- bitcast-convert between widths ---------------------------------------------------------

_UNSIGNED = {8: dtypes.U8, 16: dtypes.U16, 32: dtypes.U32, 64: dtypes.U64}


def bitcast_convert(b: Builder, x: Instruction, out: Shape) -> Instruction:
    """x's bits as ``out``'s element type. Between widths, r narrow elements (the last
    dimension, of size r) make one wide element, the first the least significant, as
    in memory on a little-endian machine: XLA's CPU result."""
    src, dst = x.shape.dtype, out.dtype
    if src.bits == dst.bits:
        return b.op(Opcode.BITCAST_CONVERT, x, shape=out)
    if src.bits not in _UNSIGNED or dst.bits not in _UNSIGNED:
        raise XlacError(f"bitcast-convert from {src.name} to {dst.name}: widths of 8 to 64 "
                        "bits only")
    if src.bits < dst.bits:
        r = dst.bits // src.bits
        if x.shape.dims[-1:] != (r,) or x.shape.dims[:-1] != out.dims:
            raise XlacError(f"bitcast-convert {x.shape} -> {out}: the last dimension must "
                            f"hold the {r} parts")
        parts = _as_unsigned(b, x)
        wide = _UNSIGNED[dst.bits]
        acc = None
        for k in range(r):
            part = b.reshape(b.slice(parts, (0,) * (x.shape.rank - 1) + (k,),
                                     x.shape.dims[:-1] + (k + 1,)), out.dims)
            part = b.convert(part, wide)
            if k:
                part = b.op(Opcode.SHIFT_LEFT, part, full(b, k * src.bits, wide, out.dims))
            acc = part if acc is None else b.op(Opcode.OR, acc, part)
        return b.op(Opcode.BITCAST_CONVERT, acc, shape=out) if dst != wide else acc
    r = src.bits // dst.bits
    if out.dims != x.shape.dims + (r,):
        raise XlacError(f"bitcast-convert {x.shape} -> {out}: the result must add a last "
                        f"dimension of the {r} parts")
    u = _as_unsigned(b, x)
    narrow = _UNSIGNED[dst.bits]
    parts = []
    for k in range(r):
        part = b.op(Opcode.SHIFT_RIGHT_LOGICAL, u, full(b, k * dst.bits, u.shape.dtype,
                                                         x.shape.dims)) if k else u
        parts.append(b.reshape(b.convert(part, narrow), x.shape.dims + (1,)))
    joined = b.concatenate(parts, x.shape.rank)
    return b.op(Opcode.BITCAST_CONVERT, joined, shape=out) if dst != narrow else joined


def _as_unsigned(b: Builder, x: Instruction) -> Instruction:
    u = _UNSIGNED[x.shape.dtype.bits]
    if x.shape.dtype == u:
        return x
    return b.op(Opcode.BITCAST_CONVERT, x, shape=x.shape.with_dtype(u))
