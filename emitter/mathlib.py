"""Transcendental functions emitted inline as straight-line LLVM IR (no libm).

``FUNCTIONS[name](builder, x[, y])`` returns the value of ``name`` at ``x`` (and ``y``),
where the operands are f32 or f64 scalars or LLVM vectors of them (all of one type).

Why not ``llvm.exp.f32``: LLVM lowers it to a call to libm's ``expf``, and a compiled
model may depend on nothing beyond memcpy/memset (``nm -u``). Emitting the math inline
also lets the loop vectorizer widen loops that use it, so the code is branch free: both
sides of every case are computed and picked with ``select``. It only uses instructions
and intrinsics that lower without library calls on x86-64, AArch64 and Cortex-M4
(tests/test_mathlib.py checks ``nm -u``):

- ``llvm.fmuladd``, never ``llvm.fma``: without FMA hardware (baseline x86-64) the latter
  is a call to ``fmaf``. The algorithms are therefore accurate with and without fusion;
  where an exact product matters it is built with Dekker's splitting.
- ``llvm.fabs`` and ``llvm.copysign`` (bit operations everywhere), ``llvm.sqrt`` (one
  instruction).
- Rounding to an integer adds and subtracts 1.5 * 2**mant instead of ``llvm.rint`` or
  ``llvm.floor`` (libcalls on Cortex-M4 and baseline x86-64); integer bits come from
  bitcasts, never ``fptosi`` (poison on NaN).

Methods (Cephes / fdlibm designs, coefficients derived below or fitted as noted):

- exp: x = k*ln2 + r (Cody-Waite, two-part ln2), Taylor polynomial in |r| <= ln2/2,
  scaled by 2**k in two exact steps (overflow gives inf, subnormals round once).
- expm1: the same reduction, 2**k * (1 + p) - 1 rearranged so k = 0 needs no subtraction.
- log: x = 2**k * (1+f), 1+f in [sqrt(1/2), sqrt(2)), log(1+f) = 2 atanh(f/(2+f)) in
  fdlibm's arrangement; log1p adds the part of x lost in rounding 1 + x.
- tanh = expm1(2|x|) / (expm1(2|x|) + 2) with the sign of x (no cancellation anywhere).
- logistic = (x >= 0 ? 1 : e) / (1 + e), e = exp(-|x|).
- erf: x * P(x^2) for |x| < 1, 1 - exp(Q(|x| - 1)) up to where erf rounds to 1.
- sin/cos/tan: Cody-Waite reduction by pi/2 in chunks of few bits, Taylor polynomials on
  |r| <= pi/4 and quadrant selection. Accurate for |x| < 1e5 (f32) / 1e9 (f64); beyond
  that the result stays finite and within [-1, 1] but is not accurate.
- atan2: atan on [0, 1] (reduced to |t| <= tan(pi/8)), octant fix-ups, C's special cases.
- atan(x) = atan2(x, 1); asin(x) = atan2(x, sqrt((1-x)(1+x))) and acos(x) =
  atan2(sqrt((1-x)(1+x)), x), whose factored 1 - x^2 is exact where it matters.
- sinh = (u + u/(u+1)) / 2 with u = expm1|x| (fdlibm), cosh = (e + 1/e) / 2 with
  e = exp|x|; near overflow both are (w/2) * w, w = exp(|x|/2), finite as long as the
  result is.
- asinh = log1p(|x| + x^2 / (1 + sqrt(1 + x^2))), acosh = log1p(t + sqrt(2t + t^2)) with
  t = x - 1, both log(|x|) + ln2 where x^2 would be past the precision;
  atanh = log1p(2|x| / (1 - |x|)) / 2; odd functions take the sign of x.
- pow: exp(y * log|x|) in double-word arithmetic, with the sign and special cases of C.
- cbrt: exponent-thirding bit trick, then Newton steps; subnormals are scaled first.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

from llvmlite import ir

from .intrinsics import call_intrinsic


@dataclass(frozen=True)
class _Format:
    """An IEEE binary format: ``mant`` stored fraction bits, exponent ``bias``."""
    name: str
    bits: int
    mant: int
    bias: int

    @property
    def precision(self) -> int:
        return self.mant + 1

    def bits_of(self, value: float) -> int:
        """The integer with the same bits as ``value`` rounded to this format."""
        code = {32: "f", 64: "d"}[self.bits]
        return int.from_bytes(struct.pack("<" + code, value), "little", signed=True)


F32 = _Format("f32", 32, 23, 127)
F64 = _Format("f64", 64, 52, 1023)

# More digits than any split below needs (pi/2 in f64 chunks uses about 125 bits).
_PI = Fraction("3.141592653589793238462643383279502884197169399375105820974944592")
_LN2 = Fraction("0.6931471805599453094172321214581765680755001343602552541206800094")
_INF = math.inf


def _split(value: Fraction, fmt: _Format, chunk_bits: int, count: int) -> tuple[float, ...]:
    """``value`` as ``count`` floats summing to it (Cody-Waite): all but the last have at
    most ``chunk_bits`` significant bits, so n * chunk is exact for integers
    |n| < 2**(precision - chunk_bits); the last carries the full precision."""
    chunks = []
    rest = value
    for i in range(count):
        bits = chunk_bits if i < count - 1 else fmt.precision
        exponent = math.frexp(float(rest))[1]          # |rest| < 2**exponent
        scale = Fraction(2) ** (bits - exponent)
        chunk = Fraction(round(rest * scale)) / scale
        chunks.append(float(chunk))
        rest -= chunk
    return tuple(chunks)


def _per_format(make: Callable[[_Format], object]) -> dict[_Format, object]:
    return {fmt: make(fmt) for fmt in (F32, F64)}


# ln2 with a head of few bits: k * head is exact for every exponent k we reduce by
# (|k| < 2**10 for f32 including pow's range, < 2**12 for f64).
_LN2_SPLIT = {F32: _split(_LN2, F32, 14, 2), F64: _split(_LN2, F64, 41, 2)}

# pi/2 in chunks for sin/cos/tan: q * chunk is exact for |q| < 2**16 (f32) / 2**30 (f64),
# i.e. |x| < 1e5 / 1e9; the chunks carry 64 / 122 bits of pi/2 in all.
_PIO2_CHUNKS = {F32: _split(_PI / 2, F32, 8, 6), F64: _split(_PI / 2, F64, 23, 4)}
_PIO2_SPLIT = _per_format(lambda fmt: _split(_PI / 2, fmt, fmt.precision, 2))
_PIO4_SPLIT = _per_format(lambda fmt: _split(_PI / 4, fmt, fmt.precision, 2))
_PI_SPLIT = _per_format(lambda fmt: _split(_PI, fmt, fmt.precision, 2))

# Taylor coefficients. Degrees keep the truncation error below 2**-(precision + 2)
# relative over the reduced ranges (|r| <= 0.35 for exp, |r| <= 0.85 for sin/cos).
# expm1(r) = r + r^2 * (1/2! + r/3! + ...), up to r^7 (f32) / r^13 (f64).
_EXPM1_TAIL = {F32: [1 / math.factorial(n) for n in range(2, 8)],
               F64: [1 / math.factorial(n) for n in range(2, 14)]}
# sin(r) = r + r * z * S(z) and cos(r) = 1 + z * C(z), z = r^2.
_SIN_TAIL = {F32: [(-1) ** k / math.factorial(2 * k + 1) for k in range(1, 5)],
             F64: [(-1) ** k / math.factorial(2 * k + 1) for k in range(1, 9)]}
_COS_TAIL = {F32: [(-1) ** k / math.factorial(2 * k) for k in range(1, 6)],
             F64: [(-1) ** k / math.factorial(2 * k) for k in range(1, 10)]}
# 2 atanh(s) = 2s + s * z * (2/3 + 2z/5 + 2z^2/7 + ...), z = s^2 <= 0.0295: the series is
# cut where the next term is below 2**-(precision + 8) relative, which pow needs.
_LOG_SERIES = {F32: [2 / (2 * k + 1) for k in range(1, 6)],
               F64: [2 / (2 * k + 1) for k in range(1, 12)]}

# Fitted coefficients (Chebyshev interpolants computed with mpmath at 50 digits, then
# rounded to the format; the error quoted is that of the interpolant):
# atan(t) = t + t * u * A(u), u = t^2 <= tan(pi/8)^2; max |error of A| 1.6e-8 / 8.7e-16.
_ATAN_TAIL = {
    F32: [-0.3333333134651184, 0.19999539852142334, -0.14263956248760223,
          0.10743731260299683, -0.06451927870512009],
    F64: [-0.3333333333333325, 0.19999999999898407, -0.1428571426609662,
          0.11111109636534361, -0.09090852557176049, 0.0769105515839315,
          -0.06649613695291669, 0.05736332165907643, -0.04483334622272886,
          0.02275052699336167],
}
# erf(x) = x * E(x^2) for |x| < 1; max |error of E| 1.2e-9 / 3.9e-16.
_ERF_SMALL = {
    F32: [1.1283791065216064, -0.3761262595653534, 0.11283594369888306,
          -0.02685421146452427, 0.005189087241888046, -0.000801686430349946,
          7.875874871388078e-05],
    F64: [1.1283791670955121, -0.376126389031744, 0.11283791670580423,
          -0.026866170586496874, 0.005223977154105304, -0.0008548304871782741,
          0.00012054681918310599, -1.4913300906316395e-05, 1.631035651387174e-06,
          -1.5188281247335167e-07, 9.428596956834164e-09],
}
# log(erfc(x)) = T(x - 1) on [1, ERF_ONE]; max |error of T| 1.2e-8 / 2.2e-15. Centred
# at 1 so that Horner's rule is exact-ish where erfc is large and errors matter most.
_ERFC_LOG = {
    F32: [-1.8496055603027344, -2.638967752456665, -0.84310382604599,
          -0.04157872125506401, 0.010082311928272247, -0.0020579311531037092,
          0.0003218394995201379, -3.332433334435336e-05, 1.6704327663319418e-06],
    F64: [-1.8496055099332505, -2.638967514234317, -0.8431072563752036,
          -0.04156109781207129, 0.010033823688935272, -0.001977895045633395,
          0.0002373003164518966, 2.6323174193586854e-05, -2.7225113902876197e-05,
          9.678032040881132e-06, -2.1109461380870477e-06, 1.677078782239839e-07,
          9.20971621641487e-08, -5.423920062458463e-08, 1.7544088360069447e-08,
          -4.1333853780023824e-09, 7.513189572694089e-10, -1.0625552955056022e-10,
          1.1531768782300016e-11, -9.2968263211222e-13, 5.2482078579229935e-14,
          -1.851460944061107e-15, 3.0711608343447995e-17],
}
# Beyond these erf(x) rounds to 1 (erfc(3.92) = 2.6e-8, erfc(6) = 2.2e-17).
_ERF_ONE = {F32: 3.92, F64: 6.0}


class _Ops:
    """IR shorthand for one float type (scalar or vector): splat constants, the integer
    view of the bits, and the operations the algorithms below are written in."""

    def __init__(self, b: ir.IRBuilder, ty: ir.Type):
        elem = ty.element if isinstance(ty, ir.VectorType) else ty
        if isinstance(elem, ir.FloatType):
            self.fmt = F32
        elif isinstance(elem, ir.DoubleType):
            self.fmt = F64
        else:
            raise TypeError(f"mathlib works on f32/f64 scalars and vectors, not {ty}")
        self.b, self.ty = b, ty
        ity = ir.IntType(self.fmt.bits)
        self.ity = ir.VectorType(ity, ty.count) if isinstance(ty, ir.VectorType) else ity

    # constants
    def _splat(self, ty: ir.Type, value) -> ir.Constant:
        if isinstance(ty, ir.VectorType):
            return ir.Constant(ty, [ir.Constant(ty.element, value)] * ty.count)
        return ir.Constant(ty, value)

    def f(self, value: float) -> ir.Constant:
        return self._splat(self.ty, value)

    def i(self, value: int) -> ir.Constant:
        return self._splat(self.ity, value)

    # float arithmetic (no fast-math flags: the error-free transformations need IEEE)
    def add(self, a, c):
        return self.b.fadd(a, c)

    def sub(self, a, c):
        return self.b.fsub(a, c)

    def mul(self, a, c):
        return self.b.fmul(a, c)

    def div(self, a, c):
        return self.b.fdiv(a, c)

    def neg(self, a):
        return self.b.fneg(a)

    def fma(self, a, c, d):
        """a * c + d, fused where the target has FMA (``llvm.fmuladd``)."""
        return self._intrinsic("fmuladd", a, c, d)

    def fabs(self, a):
        return self._intrinsic("fabs", a)

    def sqrt(self, a):
        """f32: the instruction (x86-64, AArch64 and Cortex-M4's FPU have it, correctly
        rounded). f64: Heron's iteration, since Cortex-M4 would call libm's sqrt."""
        if self.fmt is F32:
            return self._intrinsic("sqrt", a)
        return _sqrt_heron(self, a)

    def copysign(self, magnitude, sign):
        return self._intrinsic("copysign", magnitude, sign)

    def poly(self, x, coeffs) -> ir.Value:
        """coeffs[0] + coeffs[1] x + ... by Horner's rule."""
        acc = self.f(coeffs[-1])
        for c in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, self.f(c))
        return acc

    def _intrinsic(self, name: str, *args):
        return call_intrinsic(self.b, f"llvm.{name}", args)

    # comparisons and selection (ordered: false when an operand is NaN)
    def cmp(self, op: str, a, c):
        return self.b.fcmp_ordered(op, a, c)

    def isnan(self, a, c=None):
        """a or c is NaN."""
        return self.b.fcmp_unordered("uno", a, a if c is None else c)

    def sel(self, cond, a, c):
        return self.b.select(cond, a, c)

    def clamp(self, x, lo: float, hi: float):
        """min(max(x, lo), hi), keeping NaN."""
        x = self.sel(self.cmp("<", x, self.f(lo)), self.f(lo), x)
        return self.sel(self.cmp(">", x, self.f(hi)), self.f(hi), x)

    def signbit(self, a):
        return self.b.icmp_signed("<", self.bits(a), self.i(0))

    # integer view
    def bits(self, a):
        return self.b.bitcast(a, self.ity)

    def from_bits(self, n):
        return self.b.bitcast(n, self.ty)

    def iadd(self, n, m):
        return self.b.add(n, m)

    def isub(self, n, m):
        return self.b.sub(n, m)

    def icmp(self, op: str, n, m):
        return self.b.icmp_signed(op, n, m)


# --- building blocks ------------------------------------------------------------------

def _round_small(o: _Ops, v):
    """rint(v) as a float and as an integer, for |v| < 2**(mant-1): adding 1.5 * 2**mant
    rounds v to an integer held in the low bits of the sum."""
    magic = 1.5 * 2.0 ** o.fmt.mant
    t = o.add(v, o.f(magic))
    return o.sub(t, o.f(magic)), o.isub(o.bits(t), o.i(o.fmt.bits_of(magic)))


def _small_int_to_float(o: _Ops, n):
    """float(n) for |n| < 2**(mant-1), without sitofp (i64 -> f64 has no SIMD form on AVX2)."""
    magic = 1.5 * 2.0 ** o.fmt.mant
    return o.sub(o.from_bits(o.iadd(n, o.i(o.fmt.bits_of(magic)))), o.f(magic))


def _rint(o: _Ops, v):
    """Round to nearest even for any v: |v| >= 2**mant is already an integer."""
    big = 2.0 ** o.fmt.mant
    av = o.fabs(v)
    rounded = o.copysign(o.sub(o.add(av, o.f(big)), o.f(big)), v)
    return o.sel(o.cmp("<", av, o.f(big)), rounded, v)


def _pow2(o: _Ops, k):
    """2**k for integer k in the normal range, built from exponent bits."""
    return o.from_bits(o.b.shl(o.iadd(k, o.i(o.fmt.bias)), o.i(o.fmt.mant)))


def _ldexp(o: _Ops, p, k):
    """p * 2**k for |k| <= bias + 2 and p near 1, as two exact power-of-two products:
    results past the largest float become inf, subnormal results are rounded once."""
    half = o.b.ashr(k, o.i(1))
    return o.mul(o.mul(p, _pow2(o, half)), _pow2(o, o.isub(k, half)))


def _sqrt_heron(o: _Ops, a):
    """sqrt(a) to about 1 ulp: halving the bits halves the exponent (within 6%), then
    four steps y = (y + a/y) / 2 (the error squares: 6% -> 2e-3 -> 1e-6 -> 1e-12 -> 0).
    Subnormals are scaled by 2**(2n) first."""
    fmt = o.fmt
    n = (fmt.precision + 1) // 2
    subnormal = o.cmp("<", a, o.f(2.0 ** (1 - fmt.bias)))
    x = o.sel(subnormal, o.mul(a, o.f(2.0 ** (2 * n))), a)
    y = o.from_bits(o.iadd(o.b.lshr(o.bits(x), o.i(1)), o.i(fmt.bits_of(1.0) >> 1)))
    for _ in range(4):
        y = o.mul(o.f(0.5), o.add(y, o.div(x, y)))
    y = o.sel(subnormal, o.mul(y, o.f(2.0 ** -n)), y)
    y = o.sel(o.b.or_(o.cmp("==", a, o.f(0.0)), o.cmp("==", a, o.f(_INF))), a, y)
    return o.sel(o.b.fcmp_unordered("<", a, o.f(0.0)), o.f(math.nan), y)    # a < 0 or NaN


# --- double-word arithmetic (sin/cos reduction, pow) -----------------------------------

def _two_sum(o: _Ops, a, c):
    """(s, e) with s = fl(a + c) and a + c = s + e exactly (Knuth)."""
    s = o.add(a, c)
    cc = o.sub(s, a)
    return s, o.add(o.sub(a, o.sub(s, cc)), o.sub(c, cc))


def _fast_two_sum(o: _Ops, a, c):
    """_two_sum for |a| >= |c| (Dekker)."""
    s = o.add(a, c)
    return s, o.sub(c, o.sub(s, a))


def _split_half(o: _Ops, a):
    """a = hi + lo with each half of the significand (Veltkamp), so products are exact."""
    c = o.mul(a, o.f(2.0 ** ((o.fmt.precision + 1) // 2) + 1))
    hi = o.sub(c, o.sub(c, a))
    return hi, o.sub(a, hi)


def _two_prod(o: _Ops, a, c):
    """(p, e) with p = fl(a * c) and a * c = p + e exactly (Dekker; no FMA needed)."""
    p = o.mul(a, c)
    ah, al = _split_half(o, a)
    ch, cl = _split_half(o, c)
    e = o.add(o.add(o.add(o.sub(o.mul(ah, ch), p), o.mul(ah, cl)), o.mul(al, ch)), o.mul(al, cl))
    return p, e


def _reduce_ln2(o: _Ops, x):
    """x = k * ln2 + r with k = rint(x / ln2) (as float and integer), |r| <= ln2/2."""
    kf, k = _round_small(o, o.mul(x, o.f(float(1 / _LN2))))
    hi, lo = _LN2_SPLIT[o.fmt]
    r = o.fma(kf, o.f(-hi), x)                  # exact: k * hi has few bits
    return kf, k, o.fma(kf, o.f(-lo), r)


def _expm1_reduced(o: _Ops, r):
    """exp(r) - 1 for |r| <= ln2/2 (accurate relative to the result)."""
    return o.fma(o.mul(r, r), o.poly(r, _EXPM1_TAIL[o.fmt]), r)


def _exp_limits(fmt: _Format) -> tuple[float, float]:
    """x below lo gives 0 (under half the least subnormal), above hi gives inf; k stays
    within what _ldexp and _pow2 handle."""
    ln2 = float(_LN2)
    return -(fmt.bias + fmt.mant + 3) * ln2, (fmt.bias + 1.25) * ln2


def _log_reduce(o: _Ops, x):
    """x = 2**k * (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)), for finite x > 0; returns
    (k as float, f). Subnormal x is scaled by 2**precision first."""
    fmt = o.fmt
    subnormal = o.cmp("<", x, o.f(2.0 ** (1 - fmt.bias)))
    x = o.sel(subnormal, o.mul(x, o.f(2.0 ** fmt.precision)), x)
    # Offsetting the bits by those of sqrt(1/2) makes the exponent field k directly
    # (musl's trick): the mantissa is re-based into [sqrt(1/2), sqrt(2)).
    offset = fmt.bits_of(math.sqrt(0.5))
    n = o.isub(o.bits(x), o.i(offset))
    k = o.b.ashr(n, o.i(fmt.mant))
    m = o.from_bits(o.iadd(o.b.and_(n, o.i(2 ** fmt.mant - 1)), o.i(offset)))
    kf = o.sub(_small_int_to_float(o, k), o.sel(subnormal, o.f(fmt.precision), o.f(0.0)))
    return kf, o.sub(m, o.f(1.0))                  # exact (Sterbenz)


def _log1p_reduced(o: _Ops, f):
    """log(1 + f) for 1 + f in [sqrt(1/2), sqrt(2)): with s = f / (2 + f),
    log(1+f) = 2 atanh(s) = f - f^2/2 + s * (f^2/2 + R), R = 2z/3 + 2z^2/5 + ..., z = s^2
    (fdlibm's arrangement: f is exact and f^2/2 nearly so; the rounded rest is small)."""
    s = o.div(f, o.add(o.f(2.0), f))
    z = o.mul(s, s)
    hfsq = o.mul(o.f(0.5), o.mul(f, f))
    r = o.mul(z, o.poly(z, _LOG_SERIES[o.fmt]))
    return o.sub(f, o.sub(hfsq, o.mul(s, o.add(hfsq, r))))


def _add_k_ln2(o: _Ops, kf, y):
    """k * ln2 + y with the exact head of ln2 added last."""
    hi, lo = _LN2_SPLIT[o.fmt]
    return o.fma(kf, o.f(hi), o.fma(kf, o.f(lo), y))


def _sin_cos_reduced(o: _Ops, x):
    """(sin r, cos r, q) for x = q * pi/2 + r, |r| <= pi/4 (q an integer)."""
    fmt = o.fmt
    # Huge |x| would overflow below; past the accurate range any finite r will do.
    big = 2.0 ** (fmt.bias // 2)
    qf, q = _round_small(o, o.mul(o.clamp(x, -big, big), o.f(float(2 / _PI))))
    chunks = _PIO2_CHUNKS[fmt]
    # r = x - q*c0 - q*c1 - ...: every product is exact and the first difference too
    # (Sterbenz); the rounding errors of the others are summed apart, so r = hi + lo
    # stays accurate both when r is tiny (near a zero of sin or cos) and near pi/4.
    hi = o.fma(qf, o.f(-chunks[0]), x)
    lo = o.f(0.0)
    for chunk in chunks[1:]:
        hi, err = _two_sum(o, hi, o.mul(qf, o.f(-chunk)))
        lo = o.add(lo, err)
    hi, lo = _fast_two_sum(o, hi, lo)
    # Past the accurate range r is meaningless: clamping keeps sin and cos in [-1, 1]
    # (valid reductions stay below pi/4 plus a rounding margin).
    r = o.clamp(hi, -0.85, 0.85)
    lo = o.sel(o.cmp("==", r, hi), lo, o.f(0.0))
    z = o.mul(r, r)
    sin = o.fma(o.mul(r, z), o.poly(z, _SIN_TAIL[fmt]), r)
    cos = o.fma(z, o.poly(z, _COS_TAIL[fmt]), o.f(1.0))
    # sin(r + lo) = sin r + lo cos r, cos(r + lo) = cos r - lo sin r to first order
    return o.fma(lo, cos, sin), o.fma(o.neg(lo), sin, cos), q


def _sin_or_cos(o: _Ops, x, phase: int):
    """sin(x) for phase 0, cos(x) = sin(x + pi/2) for phase 1: quadrant q + phase picks
    sin r or cos r (bit 0) and the sign (bit 1)."""
    sin, cos, q = _sin_cos_reduced(o, x)
    q = o.iadd(q, o.i(phase))
    odd = o.icmp("!=", o.b.and_(q, o.i(1)), o.i(0))
    v = o.sel(odd, cos, sin)
    sign = o.b.shl(o.b.and_(q, o.i(2)), o.i(o.fmt.bits - 2))
    return _nan_at_inf(o, x, o.from_bits(o.b.xor(o.bits(v), sign)))


def _nan_at_inf(o: _Ops, x, y):
    """y, or NaN where x is infinite (sin, cos and tan of inf)."""
    return o.sel(o.cmp("==", o.fabs(x), o.f(_INF)), o.f(math.nan), y)


def _atan_unit(o: _Ops, t):
    """atan(t) for t in [0, 1]: above tan(pi/8), atan(t) = pi/4 + atan((t-1)/(t+1))."""
    upper = o.cmp(">", t, o.f(math.tan(math.pi / 8)))
    t = o.sel(upper, o.div(o.sub(t, o.f(1.0)), o.add(t, o.f(1.0))), t)
    hi, lo = _PIO4_SPLIT[o.fmt]
    u = o.mul(t, t)
    core = o.fma(o.mul(t, u), o.poly(u, _ATAN_TAIL[o.fmt]), o.sel(upper, o.f(lo), o.f(0.0)))
    return o.add(o.sel(upper, o.f(hi), o.f(0.0)), o.add(t, core))


def _log_dw(o: _Ops, x):
    """log(x) = hi + lo to about 2**-(precision + 7) relative, for finite x > 0."""
    kf, f = _log_reduce(o, x)
    # s = f / (2 + f) as sh + sl: d = 2 + f = dh + dl exactly, then one correction step.
    dh = o.add(o.f(2.0), f)
    dl = o.add(o.sub(o.f(2.0), dh), f)
    sh = o.div(f, dh)
    ph, pl = _two_prod(o, sh, dh)
    sl = o.div(o.sub(o.sub(o.sub(f, ph), pl), o.mul(sh, dl)), dh)
    # log(1 + f) = 2s + s * z * R(z): the tail is a few percent of 2s at most, so it is
    # evaluated in working precision from sh, plus its first-order term in sl (2 z sl).
    z = o.mul(sh, sh)
    tail = o.fma(o.mul(sh, z), o.poly(z, _LOG_SERIES[o.fmt]), o.mul(o.mul(o.f(2.0), z), sl))
    ln2_hi, ln2_lo = _LN2_SPLIT[o.fmt]
    head, err = _two_sum(o, o.mul(kf, o.f(ln2_hi)), o.mul(o.f(2.0), sh))
    rest = o.add(err, o.fma(kf, o.f(ln2_lo), o.fma(o.f(2.0), sl, tail)))
    return _fast_two_sum(o, head, rest)


def _exp_dw(o: _Ops, hi, lo):
    """exp(hi + lo) for |lo| <= ulp(hi): lo joins the reduced argument."""
    low, high = _exp_limits(o.fmt)
    clamped = o.clamp(hi, low, high)
    lo = o.sel(o.cmp("==", clamped, hi), lo, o.f(0.0))    # out of range: only hi counts
    hi = clamped
    kf, k = _round_small(o, o.mul(hi, o.f(float(1 / _LN2))))
    ln2_hi, ln2_lo = _LN2_SPLIT[o.fmt]
    r = o.fma(kf, o.f(-ln2_hi), hi)
    r = o.add(o.fma(kf, o.f(-ln2_lo), r), lo)
    return _ldexp(o, o.add(o.f(1.0), _expm1_reduced(o, r)), k)


# --- the functions ------------------------------------------------------------------------

def exp(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    o = _Ops(b, x.type)
    lo, hi = _exp_limits(o.fmt)
    _, k, r = _reduce_ln2(o, o.clamp(x, lo, hi))       # NaN flows through to the result
    return _ldexp(o, o.add(o.f(1.0), _expm1_reduced(o, r)), k)


def expm1(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    o = _Ops(b, x.type)
    fmt = o.fmt
    # Below -(precision + 2) ln2 the result rounds to -1.
    _, hi = _exp_limits(fmt)
    _, k, r = _reduce_ln2(o, o.clamp(x, -(fmt.precision + 2) * float(_LN2), hi))
    p = _expm1_reduced(o, r)
    # 2**k (1 + p) - 1 = 2 (s p + (s - 1/2)), s = 2**(k-1): s - 1/2 is exact while it
    # matters, and the final doubling overflows to inf where the result does.
    s = _pow2(o, o.isub(k, o.i(1)))
    y = o.mul(o.f(2.0), o.add(o.mul(s, p), o.sub(s, o.f(0.5))))
    y = o.sel(o.icmp("==", k, o.i(0)), p, y)             # exact for tiny and subnormal x
    return o.sel(o.cmp("==", x, o.f(0.0)), x, y)         # expm1(-0) = -0


def log(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    o = _Ops(b, x.type)
    kf, f = _log_reduce(o, x)
    y = _add_k_ln2(o, kf, _log1p_reduced(o, f))
    y = o.sel(o.cmp("==", x, o.f(_INF)), x, y)
    y = o.sel(o.cmp("==", x, o.f(0.0)), o.f(-_INF), y)
    return o.sel(o.b.fcmp_unordered("<", x, o.f(0.0)), o.f(math.nan), y)   # x < 0 or NaN


def log1p(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    o = _Ops(b, x.type)
    u = o.add(o.f(1.0), x)
    kf, f = _log_reduce(o, u)
    # log(1 + x) = log(u) + log(1 + d/u) ~ log(u) + d/u, d = x - (u - 1) the part of x
    # lost in rounding 1 + x (exact: u - 1 is exact where d matters).
    d = o.div(o.sub(x, o.sub(u, o.f(1.0))), u)
    y = _add_k_ln2(o, kf, o.add(_log1p_reduced(o, f), d))
    y = o.sel(o.cmp("==", x, o.f(_INF)), x, y)
    y = o.sel(o.cmp("==", x, o.f(-1.0)), o.f(-_INF), y)
    y = o.sel(o.b.fcmp_unordered("<", x, o.f(-1.0)), o.f(math.nan), y)     # x < -1 or NaN
    return o.sel(o.cmp("==", x, o.f(0.0)), x, y)                           # log1p(-0) = -0


def tanh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    o = _Ops(b, x.type)
    fmt = o.fmt
    # tanh |x| = e / (e + 2), e = expm1(2|x|): no cancellation at any size of x. Past
    # (precision + 4) ln2 / 2 tanh rounds to 1, so clamping there avoids inf / inf.
    ax = o.clamp(o.fabs(x), 0.0, (fmt.precision + 4) * float(_LN2) / 2)
    e = expm1(b, o.mul(o.f(2.0), ax))
    return o.copysign(o.div(e, o.add(e, o.f(2.0))), x)


def logistic(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    o = _Ops(b, x.type)
    # 1 / (1 + exp(-x)) for x >= 0 and exp(x) / (1 + exp(x)) below: exp never overflows,
    # and tiny results keep their relative accuracy.
    e = exp(b, o.neg(o.fabs(x)))
    num = o.sel(o.cmp(">=", x, o.f(0.0)), o.f(1.0), e)
    return o.div(num, o.add(o.f(1.0), e))


def _erfc_exp(b: ir.IRBuilder, o: _Ops, z):
    """exp(z) for erf's tail, z = log erfc(|x|) in [-17.6, -1.8] (f32): 2**k stays normal,
    so no clamp and one scaling, and 1 - exp(z) > 0.84 needs only 2**-21 of it relative:
    exp(r) is its Taylor polynomial of degree 6 (error 1.2e-7 at |r| = ln2/2). GELU's
    erf runs once per element of a transformer's widest layer. f64 takes ``exp``."""
    if o.fmt is not F32:
        return exp(b, z)
    kf, k, r = _reduce_ln2(o, z)
    return o.mul(o.poly(r, [1 / math.factorial(n) for n in range(7)]), _pow2(o, k))


def erf(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    o = _Ops(b, x.type)
    ax = o.clamp(o.fabs(x), 0.0, _ERF_ONE[o.fmt])
    small = o.mul(ax, o.poly(o.mul(ax, ax), _ERF_SMALL[o.fmt]))
    erfc = _erfc_exp(b, o, o.poly(o.sub(ax, o.f(1.0)), _ERFC_LOG[o.fmt]))
    y = o.sel(o.cmp("<", ax, o.f(1.0)), small, o.sub(o.f(1.0), erfc))
    return o.copysign(y, x)


def sin(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    o = _Ops(b, x.type)
    return o.sel(o.cmp("==", x, o.f(0.0)), x, _sin_or_cos(o, x, 0))    # sin(-0) = -0


def cos(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return _sin_or_cos(_Ops(b, x.type), x, 1)


def tan(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    o = _Ops(b, x.type)
    sin_r, cos_r, q = _sin_cos_reduced(o, x)
    # tan(r + pi/2) = -cos r / sin r
    odd = o.icmp("!=", o.b.and_(q, o.i(1)), o.i(0))
    num = o.sel(odd, o.neg(cos_r), sin_r)
    y = _nan_at_inf(o, x, o.div(num, o.sel(odd, sin_r, cos_r)))
    return o.sel(o.cmp("==", x, o.f(0.0)), x, y)                       # tan(-0) = -0


def atan2(b: ir.IRBuilder, y: ir.Value, x: ir.Value) -> ir.Value:
    """The angle of (x, y) in [-pi, pi], with C's signed zeros and infinities."""
    o = _Ops(b, y.type)
    ax, ay = o.fabs(x), o.fabs(y)
    steep = o.cmp(">", ay, ax)
    big, small = o.sel(steep, ay, ax), o.sel(steep, ax, ay)
    t = o.div(small, big)
    t = o.sel(o.cmp("==", big, o.f(0.0)), o.f(0.0), t)      # atan2(+-0, +-0)
    t = o.sel(o.cmp("==", small, o.f(_INF)), o.f(1.0), t)   # both infinite
    a = _atan_unit(o, t)
    pio2_hi, pio2_lo = _PIO2_SPLIT[o.fmt]
    a = o.sel(steep, o.add(o.sub(o.f(pio2_hi), a), o.f(pio2_lo)), a)
    pi_hi, pi_lo = _PI_SPLIT[o.fmt]
    a = o.sel(o.signbit(x), o.add(o.sub(o.f(pi_hi), a), o.f(pi_lo)), a)  # x < 0 or x = -0
    return o.sel(o.isnan(x, y), o.add(x, y), o.copysign(a, y))


def pow(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """x ** y with C99's special cases (pow(x, 0) = pow(1, y) = 1 even for NaN, odd
    integer y keeps the sign of x, negative x with non-integer y is NaN)."""
    o = _Ops(b, x.type)
    fmt = o.fmt
    one, zero, inf = o.f(1.0), o.f(0.0), o.f(_INF)
    ax = o.fabs(x)
    # |y| past 2**(precision + 11) overflows or underflows for every |x| != 1 (|log x| is
    # at least 2**-precision); capping keeps the splitting in range, and such y are even.
    cap = 2.0 ** (fmt.precision + 11)
    yc = o.sel(o.cmp(">", o.fabs(y), o.f(cap)), o.copysign(o.f(cap), y), y)
    lh, ll = _log_dw(o, ax)
    ph, pl = _two_prod(o, yc, lh)
    ph, pl = _fast_two_sum(o, ph, o.fma(yc, ll, pl))
    mag = _exp_dw(o, ph, pl)
    # C's special cases for the magnitude, then the sign.
    y_neg = o.cmp("<", y, zero)
    mag = o.sel(o.cmp("==", ax, zero), o.sel(y_neg, inf, zero), mag)
    mag = o.sel(o.cmp("==", ax, inf), o.sel(y_neg, zero, inf), mag)
    toward_inf = o.b.icmp_unsigned("==", o.cmp("<", ax, one), y_neg)  # (|x| < 1) == (y < 0)
    mag = o.sel(o.cmp("==", o.fabs(y), inf), o.sel(toward_inf, inf, zero), mag)
    mag = o.sel(o.cmp("==", ax, one), one, mag)                       # (-1) ** +-inf = 1
    y_int = o.cmp("==", _rint(o, y), y)
    half = o.mul(y, o.f(0.5))
    y_odd = o.b.and_(y_int, o.cmp("!=", _rint(o, half), half))
    result = o.sel(o.b.and_(o.signbit(x), y_odd), o.neg(mag), mag)
    negative_finite = o.b.and_(o.cmp("<", x, zero), o.cmp("!=", ax, inf))
    result = o.sel(o.b.and_(negative_finite, o.b.not_(y_int)), o.f(math.nan), result)
    result = o.sel(o.isnan(x, y), o.add(x, y), result)
    result = o.sel(o.cmp("==", y, zero), one, result)              # even x = NaN
    return o.sel(o.cmp("==", x, one), one, result)                 # even y = NaN


def cbrt(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    o = _Ops(b, x.type)
    fmt = o.fmt
    ax = o.fabs(x)
    # Subnormals: scale by 2**(3n) first, the root by 2**-n after.
    n = -(-fmt.precision // 3)
    subnormal = o.cmp("<", ax, o.f(2.0 ** (1 - fmt.bias)))
    a = o.sel(subnormal, o.mul(ax, o.f(2.0 ** (3 * n))), ax)
    # Dividing the bits by 3 divides the exponent by 3 (and roughly the mantissa's log):
    # bits(a)/3 + 2/3 bits(1.0) is within 4% of cbrt(a) and exact at 1.
    one = fmt.bits_of(1.0)
    r = o.from_bits(o.iadd(o.b.udiv(o.bits(a), o.i(3)), o.i(one - one // 3)))
    for _ in range({F32: 3, F64: 4}[fmt]):        # Newton: r -= (r - a / r^2) / 3
        r = o.sub(r, o.mul(o.sub(r, o.div(a, o.mul(r, r))), o.f(1 / 3)))
    r = o.sel(subnormal, o.mul(r, o.f(2.0 ** -n)), r)
    finite_nonzero = o.b.and_(o.cmp("!=", ax, o.f(0.0)), o.cmp("!=", ax, o.f(_INF)))
    return o.sel(finite_nonzero, o.copysign(r, x), x)   # +-0, +-inf and NaN map to x


def atan(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return atan2(b, x, _Ops(b, x.type).f(1.0))


def _one_minus_square_root(o: _Ops, x):
    """sqrt(1 - x^2), NaN for |x| > 1: (1 - x)(1 + x) is exact-ish where x^2 is near 1."""
    return o.sqrt(o.mul(o.sub(o.f(1.0), x), o.add(o.f(1.0), x)))


def asin(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return atan2(b, x, _one_minus_square_root(_Ops(b, x.type), x))


def acos(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return atan2(b, _one_minus_square_root(_Ops(b, x.type), x), x)


def _hyperbolic_limit(fmt: _Format) -> float:
    """Below this |x|, exp|x| and expm1|x| are finite."""
    return (fmt.bias - 1) * float(_LN2)


def _half_exp_squared(b: ir.IRBuilder, o: _Ops, ax):
    """exp(|x|) / 2 as (w / 2) * w, w = exp(|x| / 2): finite wherever the result is."""
    w = exp(b, o.mul(ax, o.f(0.5)))
    return o.mul(o.mul(w, o.f(0.5)), w)


def sinh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    o = _Ops(b, x.type)
    ax = o.fabs(x)
    u = expm1(b, ax)
    y = o.mul(o.f(0.5), o.add(u, o.div(u, o.add(u, o.f(1.0)))))
    y = o.sel(o.cmp(">", ax, o.f(_hyperbolic_limit(o.fmt))), _half_exp_squared(b, o, ax), y)
    return o.copysign(y, x)


def cosh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    o = _Ops(b, x.type)
    ax = o.fabs(x)
    e = exp(b, ax)
    y = o.mul(o.f(0.5), o.add(e, o.div(o.f(1.0), e)))
    return o.sel(o.cmp(">", ax, o.f(_hyperbolic_limit(o.fmt))), _half_exp_squared(b, o, ax), y)


def _log_twice(b: ir.IRBuilder, o: _Ops, ax):
    """log(2|x|) for large |x|, without overflowing 2|x|."""
    hi, lo = _LN2_SPLIT[o.fmt]
    return o.add(o.add(log(b, ax), o.f(lo)), o.f(hi))


def _large(o: _Ops, ax):
    """|x| past which asinh and acosh are log(2|x|) to within a fraction of an ulp:
    1 / (4 x^2) is then below 2**-(precision + 3)."""
    return o.cmp(">", ax, o.f(2.0 ** ((o.fmt.precision + 3) // 2)))


def asinh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    o = _Ops(b, x.type)
    ax = o.fabs(x)
    sq = o.mul(ax, ax)
    y = log1p(b, o.add(ax, o.div(sq, o.add(o.f(1.0), o.sqrt(o.add(o.f(1.0), sq))))))
    y = o.sel(_large(o, ax), _log_twice(b, o, ax), y)
    return o.copysign(y, x)


def acosh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    o = _Ops(b, x.type)
    t = o.sub(x, o.f(1.0))
    y = log1p(b, o.add(t, o.sqrt(o.fma(t, t, o.mul(o.f(2.0), t)))))
    y = o.sel(_large(o, x), _log_twice(b, o, x), y)
    return o.sel(o.b.fcmp_unordered("<", x, o.f(1.0)), o.f(math.nan), y)   # x < 1 or NaN


def atanh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    o = _Ops(b, x.type)
    ax = o.fabs(x)
    y = o.mul(o.f(0.5), log1p(b, o.div(o.add(ax, ax), o.sub(o.f(1.0), ax))))
    return o.copysign(y, x)


FUNCTIONS: dict[str, Callable[..., ir.Value]] = {
    "exp": exp, "expm1": expm1, "log": log, "log1p": log1p, "tanh": tanh,
    "logistic": logistic, "erf": erf, "sin": sin, "cos": cos, "tan": tan,
    "atan2": atan2, "pow": pow, "cbrt": cbrt, "atan": atan, "asin": asin, "acos": acos,
    "sinh": sinh, "cosh": cosh, "asinh": asinh, "acosh": acosh, "atanh": atanh,
}
