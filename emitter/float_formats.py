"""Floats narrower than f32 as bit patterns: decoding to f32 and rounding f32 / f64 to
them, in integer IR (no libcalls, branch free, so loops over them vectorize).

One ``Format`` per type describes the bits; the special values follow ml_dtypes (the
numpy types the evaluator uses, which XLA and ONNX's reference share):

    kind      types                     largest finite   overflow   NaN
    ieee      bf16, f16, f8e5m2          exp 11..10, m 1s  inf        exp 1s, m != 0
    fn        f8e4m3fn                   s.1111.110       NaN        s.1111.111
    fnuz      f8e4m3fnuz, f8e5m2fnuz     all but sign     NaN        1000 0000 (no -0)
    finite    f4e2m1fn                   s.11.1           largest    none (NaN -> -+0)
    e8m0      f8e8m0fnu                  2**127           NaN        1111 1111

f8e8m0fnu is an unsigned exponent: 2**(e - 127), no zero. Rounding is to nearest, ties
to even (e8m0: ties up, as ml_dtypes), and conversions do not saturate (XLA's convert);
ONNX's saturating Cast clamps before converting.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

F32 = ir.FloatType()
F64 = ir.DoubleType()
I32 = ir.IntType(32)
I64 = ir.IntType(64)


@dataclass(frozen=True)
class Format:
    exp: int         # exponent bits
    mant: int        # stored mantissa bits
    bias: int
    kind: str        # ieee | fn | fnuz | finite | e8m0

    @property
    def bits(self) -> int:
        return self.exp + self.mant + (0 if self.kind == "e8m0" else 1)

    @property
    def max_code(self) -> int:
        """The magnitude bits of the largest finite value."""
        top = (1 << (self.exp + self.mant)) - 1
        return {"ieee": top - (1 << self.mant), "fn": top - 1}.get(self.kind, top)


FORMATS = {
    "f16": Format(5, 10, 15, "ieee"),
    "bf16": Format(8, 7, 127, "ieee"),
    "f8e4m3fn": Format(4, 3, 7, "fn"),
    "f8e4m3fnuz": Format(4, 3, 8, "fnuz"),
    "f8e5m2": Format(5, 2, 15, "ieee"),
    "f8e5m2fnuz": Format(5, 2, 16, "fnuz"),
    "f4e2m1fn": Format(2, 1, 1, "finite"),
    "f8e8m0fnu": Format(8, 0, 127, "e8m0"),
}


@dataclass(frozen=True)
class _Source:
    """f32 or f64, the types values are rounded from."""
    ty: ir.Type
    ity: ir.IntType
    mant: int
    bias: int


_SOURCES = {32: _Source(F32, I32, 23, 127), 64: _Source(F64, I64, 52, 1023)}


def _source(ty: ir.Type) -> _Source:
    return _SOURCES[64 if isinstance(ty, ir.DoubleType) else 32]


def _pow2(ty: ir.Type, k: int) -> ir.Constant:
    return ir.Constant(ty, 2.0 ** k)


def decode(b: ir.IRBuilder, v: ir.Value, fmt: Format) -> ir.Value:
    """The f32 value of the bits ``v`` (an integer of any width; bits above the format's
    width are ignored, so a 4-bit value may sit in a byte with anything above it)."""
    c = lambda n: ir.Constant(I32, n)   # noqa: E731
    bits = b.and_(b.zext(v, I32), c((1 << fmt.bits) - 1))
    if fmt.kind == "e8m0":
        # 2**(e - 127): the exponent field of an f32; e = 0 is the f32 subnormal 2**-127.
        f = b.select(b.icmp_unsigned("==", bits, c(0)), c(1 << 22), b.shl(bits, c(23)))
        f = b.select(b.icmp_unsigned("==", bits, c(0xFF)), c(0x7FC00000), f)
        return b.bitcast(f, F32)
    m, e = fmt.mant, fmt.exp
    mag = b.and_(bits, c((1 << (e + m)) - 1))
    sign = b.shl(b.lshr(bits, c(e + m)), c(31))
    # Normal numbers: the fields move into place and the exponent is rebiased.
    f = b.add(b.shl(mag, c(23 - m)), c((127 - fmt.bias) << 23))
    if fmt.bias != 127:
        # Subnormals: mantissa * 2**(1 - bias - m), exact in f32.
        sub = b.fmul(b.sitofp(mag, F32), _pow2(F32, 1 - fmt.bias - m))
        f = b.select(b.icmp_unsigned("<", mag, c(1 << m)), b.bitcast(sub, I32), f)
        if fmt.kind == "ieee":
            top = b.icmp_unsigned(">=", mag, c(((1 << e) - 1) << m))
            f = b.select(top, b.or_(b.shl(mag, c(23 - m)), c(0x7F800000)), f)
    nan = None
    if fmt.kind == "fn":
        nan = b.icmp_unsigned("==", mag, c((1 << (e + m)) - 1))
    elif fmt.kind == "fnuz":
        nan = b.icmp_unsigned("==", bits, c(1 << (e + m)))
    if nan is not None:
        f = b.select(nan, c(0x7FC00000), f)
    return b.bitcast(b.or_(f, sign), F32)


def encode(b: ir.IRBuilder, x: ir.Value, fmt: Format, ty: ir.IntType) -> ir.Value:
    """``x`` (f32 or f64) rounded to ``fmt``, as bits in the integer type ``ty``."""
    src = _source(x.type)
    if fmt.kind == "e8m0":
        return b.trunc(_encode_e8m0(b, x, src), ty)
    c = lambda n: ir.Constant(src.ity, n)   # noqa: E731
    width = src.ity.width
    bits = b.bitcast(x, src.ity)
    sign = b.lshr(bits, c(width - 1))
    abs_bits = b.and_(bits, c((1 << (width - 1)) - 1))
    a = b.bitcast(abs_bits, src.ty)
    m = fmt.mant
    shift = src.mant - m
    # Round the mantissa to nearest even on the bits, then rebias the exponent field.
    lsb = b.and_(b.lshr(abs_bits, c(shift)), c(1))
    code = b.lshr(b.add(abs_bits, b.add(c((1 << (shift - 1)) - 1), lsb)), c(shift))
    rebias = src.bias - fmt.bias
    code = b.sub(code, c(rebias << m))
    over = ir.Constant(ir.IntType(1), 0)   # with the source's exponent range, inf is a carry
    if rebias:
        # Below the least normal: adding 2**k, whose ulp is the format's least subnormal,
        # lets the FPU round; the low bits of the sum are then the code (1 << m when it
        # rounds up to the least normal).
        magic = _pow2(src.ty, 1 - fmt.bias - m + src.mant)
        sub = b.sub(b.bitcast(b.fadd(a, magic), src.ity), b.bitcast(magic, src.ity))
        code = b.select(b.fcmp_ordered("<", a, _pow2(src.ty, 1 - fmt.bias)), sub, code)
        over = b.icmp_signed(">", code, c(fmt.max_code))
        code = b.select(over, c(_overflow_code(fmt)), code)
    is_nan = b.fcmp_unordered("uno", x, x)
    e = fmt.exp
    if fmt.kind == "fnuz":
        # No negative zero; NaN and overflow are the code of -0.
        negative = b.and_(b.icmp_unsigned("!=", sign, c(0)), b.icmp_unsigned("!=", code, c(0)))
        code = b.select(negative, b.or_(code, c(1 << (e + m))), code)
        return b.trunc(b.select(b.or_(is_nan, over), c(1 << (e + m)), code), ty)
    if fmt.kind == "finite":
        # No NaN: ml_dtypes gives the zero of the other sign.
        nan_code = b.shl(b.xor(sign, c(1)), c(e + m))
        code = b.or_(code, b.shl(sign, c(e + m)))
        return b.trunc(b.select(is_nan, nan_code, code), ty)
    nan_code = (1 << (e + m)) - 1 if fmt.kind == "fn" else ((1 << e) - 1) << m | 1 << (m - 1)
    code = b.select(is_nan, c(nan_code), code)
    return b.trunc(b.or_(code, b.shl(sign, c(e + m))), ty)


def _overflow_code(fmt: Format) -> int:
    """The magnitude bits a finite value too large for ``fmt`` (or an infinity) gets."""
    if fmt.kind == "ieee":
        return ((1 << fmt.exp) - 1) << fmt.mant
    if fmt.kind == "fn":
        return (1 << (fmt.exp + fmt.mant)) - 1
    return fmt.max_code      # finite; fnuz overflows to NaN, set apart


def _encode_e8m0(b: ir.IRBuilder, x: ir.Value, src: _Source) -> ir.Value:
    """2**round(log2 x) as ml_dtypes rounds it: the exponent, plus one when the mantissa
    is at least half; values in (2**-127, 2**-126) give 2**-126. NaN for NaN, infinities,
    zero, negative values and overflow."""
    c = lambda n: ir.Constant(src.ity, n)   # noqa: E731
    bits = b.bitcast(x, src.ity)
    exponent = b.sub(b.lshr(bits, c(src.mant)), c(src.bias - 127))
    half = b.icmp_unsigned(">=", b.and_(bits, c((1 << src.mant) - 1)), c(1 << (src.mant - 1)))
    code = b.add(exponent, b.zext(half, src.ity))
    tiny = b.zext(b.fcmp_ordered(">", x, _pow2(src.ty, -127)), src.ity)
    code = b.select(b.fcmp_ordered("<", x, _pow2(src.ty, -126)), tiny, code)
    bad = b.or_(b.fcmp_unordered("ule", x, ir.Constant(src.ty, 0.0)),
                b.icmp_signed(">", code, c(254)))
    return b.select(bad, c(0xFF), code)
