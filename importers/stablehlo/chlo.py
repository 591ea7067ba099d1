"""CHLO's ops, which JAX leaves in StableHLO and XLA expands before its HLO.

The inverse and hyperbolic functions and erf are opcodes of ours; square, next_after
and mulhi are a few integer or float ops. The others are expanded here into
element-wise ops, in f32 for 16-bit floats (XLA upcasts them too):
lgamma and digamma by Lanczos' approximation (g = 7, 9 terms) with the reflection
formula below 1/2, erf_inv by Giles' single-precision polynomials, erfc through f64
(1 - erf below 2, else exp(-x^2) times erfcx's continued fraction, so that the tail
keeps its relative precision), bessel_i1e through f64 by its power and asymptotic
series, zeta (Hurwitz) by Euler-Maclaurin summation, polygamma from zeta.
"""
from __future__ import annotations

import math

import numpy as np

from ...hlo import Instruction, Opcode, Shape, dtypes
from .lowering import Context
from .mlir import Operation

# CHLO's element-wise ops that are opcodes of ours.
_OPCODES = {
    "acos": Opcode.ACOS, "acosh": Opcode.ACOSH, "asin": Opcode.ASIN, "asinh": Opcode.ASINH,
    "atan": Opcode.ATAN, "atanh": Opcode.ATANH, "cosh": Opcode.COSH, "sinh": Opcode.SINH,
    "tan": Opcode.TAN, "erf": Opcode.ERF,
}


class _E:
    """An instruction with arithmetic operators, for writing formulas."""

    def __init__(self, ctx: Context, instr: Instruction):
        self.ctx, self.i = ctx, instr

    @property
    def shape(self) -> Shape:
        return self.i.shape

    def _lift(self, other) -> "_E":
        if isinstance(other, _E):
            return other
        c = self.ctx.add(Instruction(Opcode.CONSTANT, Shape.array(self.shape.dtype, ()),
                                     literal=np.array(other, self.shape.dtype.np)))
        return _E(self.ctx, self.ctx.add(Instruction(Opcode.BROADCAST, self.shape, [c],
                                                     {"dimensions": ()})))

    def _op(self, opcode: Opcode, *others, shape: Shape | None = None, **attrs) -> "_E":
        operands = [self.i] + [self._lift(o).i for o in others]
        return _E(self.ctx, self.ctx.add(Instruction(opcode, shape or self.shape, operands,
                                                     attrs)))

    def __add__(self, o): return self._op(Opcode.ADD, o)
    def __radd__(self, o): return self._lift(o)._op(Opcode.ADD, self)
    def __sub__(self, o): return self._op(Opcode.SUBTRACT, o)
    def __rsub__(self, o): return self._lift(o)._op(Opcode.SUBTRACT, self)
    def __mul__(self, o): return self._op(Opcode.MULTIPLY, o)
    def __rmul__(self, o): return self._lift(o)._op(Opcode.MULTIPLY, self)
    def __truediv__(self, o): return self._op(Opcode.DIVIDE, o)
    def __rtruediv__(self, o): return self._lift(o)._op(Opcode.DIVIDE, self)
    def __neg__(self): return self._op(Opcode.NEGATE)

    def apply(self, opcode: Opcode) -> "_E":
        return self._op(opcode)

    def compare(self, direction: str, o) -> "_E":
        return self._op(Opcode.COMPARE, o, shape=self.shape.with_dtype(dtypes.PRED),
                        direction=direction)

    def where(self, on_true, on_false) -> "_E":
        """self is a predicate."""
        t = on_true if isinstance(on_true, _E) else on_false._lift(on_true)
        f = on_false if isinstance(on_false, _E) else t._lift(on_false)
        return _E(self.ctx, self.ctx.add(Instruction(Opcode.SELECT, t.shape, [self.i, t.i, f.i])))

    def convert(self, dtype: dtypes.DType) -> "_E":
        if dtype == self.shape.dtype:
            return self
        return self._op(Opcode.CONVERT, shape=self.shape.with_dtype(dtype))


def _in(x: _E, dtype: dtypes.DType | None = None) -> _E:
    """x in the type the formula runs in: f32 for 16-bit floats, or ``dtype``."""
    return x.convert(dtype or (dtypes.F32 if x.shape.dtype.bits < 32 else x.shape.dtype))


def _horner(w: _E, coefficients) -> _E:
    p = w._lift(coefficients[0])
    for c in coefficients[1:]:
        p = p * w + c
    return p


# Giles, "Approximating the erfinv function" (GPU Gems, 2010), single precision.
_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                   0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
                0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def _erf_inv(x: _E) -> _E:
    w = -(((1.0 - x) * (1.0 + x)).apply(Opcode.LOG))
    central = _horner(w - 2.5, _ERFINV_CENTRAL)
    tail = _horner(w.apply(Opcode.SQRT) - 3.0, _ERFINV_TAIL)
    p = w.compare("LT", 5.0).where(central, tail)
    infinite = x * math.inf
    return x.apply(Opcode.ABS).compare("EQ", 1.0).where(infinite, p * x)


_LANCZOS_G = 7.0
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012,
            9.9843695780195716e-6, 1.5056327351493116e-7)


def _lanczos(z: _E) -> tuple[_E, _E, _E]:
    """For z >= 1/2: t = z - 1/2 + g, A(z) = p0 + sum p_k / (z - 1 + k), and
    sum p_k / (z - 1 + k)^2 (A's derivative, negated)."""
    zm1 = z - 1.0
    a, da = z._lift(_LANCZOS[0]), z._lift(0.0)
    for k, p in enumerate(_LANCZOS[1:], 1):
        term = p / (zm1 + float(k))
        a = a + term
        da = da + term / (zm1 + float(k))
    return zm1 + (_LANCZOS_G + 0.5), a, da


def _log_t(z: _E) -> _E:
    """log(t), t = z - 1/2 + g, as log(g + 1/2) + log1p((z - 1) / (g + 1/2)): exact
    near z = 1 and 2, where lgamma is 0."""
    return math.log(_LANCZOS_G + 0.5) + ((z - 1.0) / (_LANCZOS_G + 0.5)).apply(
        Opcode.LOG1P)


def _reflected(x: _E) -> tuple[_E, _E]:
    """(the predicate x < 1/2, the argument the approximation takes: x or 1 - x)."""
    small = x.compare("LT", 0.5)
    return small, small.where(1.0 - x, x)


def _sin_pi(x: _E) -> _E:
    """sin(pi x) with the argument reduced first: exact zeros at the integers."""
    frac = x - x.apply(Opcode.ROUND_NEAREST_EVEN)
    return (frac * math.pi).apply(Opcode.SINE)


def _lgamma(x: _E) -> _E:
    small, z = _reflected(x)
    t, a, _ = _lanczos(z)
    lg = (0.5 * math.log(2 * math.pi)) + (z - 0.5) * _log_t(z) - t + a.apply(Opcode.LOG)
    # lgamma(x) = log(pi) - log|sin(pi x)| - lgamma(1 - x)
    reflection = math.log(math.pi) - _sin_pi(x).apply(Opcode.ABS).apply(Opcode.LOG) - lg
    out = small.where(reflection, lg)
    infinite = x.apply(Opcode.ABS).compare("EQ", math.inf)
    return infinite.where(x._lift(math.inf), out)


def _digamma(x: _E) -> _E:
    small, z = _reflected(x)
    t, a, da = _lanczos(z)
    dg = _log_t(z) - _LANCZOS_G / t - da / a
    # digamma(x) = digamma(1 - x) - pi / tan(pi x); a pole at the non-positive integers
    s = _sin_pi(x)
    c = ((x - x.apply(Opcode.ROUND_NEAREST_EVEN)) * math.pi).apply(Opcode.COSINE)
    reflection = dg - math.pi * c / s
    out = small.where(reflection, dg)
    pole = x.compare("LE", 0.0)._op(Opcode.AND, x.apply(Opcode.FLOOR).compare("EQ", x))
    return pole.where(x._lift(math.nan), out)


def _erfc(x: _E) -> _E:
    """In f64: 1 - erf(x) for |x| < 2; beyond, exp(-x^2) erfcx(|x|) with erfcx by its
    continued fraction 1 / (sqrt(pi) (x + (1/2) / (x + 1 / (x + (3/2) / ...)))), and
    2 - erfc(|x|) for negative x."""
    ax = x.apply(Opcode.ABS)
    t = ax
    for k in range(40, 0, -1):
        t = ax + (k / 2.0) / t
    tail = (-(ax * ax)).apply(Opcode.EXP) / (math.sqrt(math.pi) * t)
    tail = x.compare("LT", 0.0).where(2.0 - tail, tail)
    near = 1.0 - x.apply(Opcode.ERF)
    return ax.compare("LT", 2.0).where(near, tail)


def _bessel_i1e(x: _E) -> _E:
    """exp(-|x|) I1(x), in f64: I1's power series sum (x/2)^(2k+1) / (k! (k+1)!) up to
    |x| = 30 (70 terms), beyond it the asymptotic series exp(|x|) / sqrt(2 pi |x|)
    sum_k (-1)^k a_k / |x|^k with a_k = prod_j (4 - (2j-1)^2) / (k! 8^k) (20 terms)."""
    ax = x.apply(Opcode.ABS)
    small = ax.compare("LE", 30.0).where(ax, 1.0)       # keeps the unused branch finite
    q = small * small / 4.0
    term = small / 2.0
    total = term
    for k in range(1, 70):
        term = term * q / float(k * (k + 1))
        total = total + term
    series = total * (-small).apply(Opcode.EXP)
    big = ax.compare("GT", 30.0).where(ax, 31.0)
    coefficient, power, tail = 1.0, big._lift(1.0), big._lift(1.0)
    for k in range(1, 21):
        coefficient *= -(4.0 - (2 * k - 1) ** 2) / (k * 8.0)
        power = power / big
        tail = tail + power * coefficient
    asymptotic = tail / (2 * math.pi * big).apply(Opcode.SQRT)
    magnitude = ax.compare("LE", 30.0).where(series, asymptotic)
    return x.compare("LT", 0.0).where(-magnitude, magnitude)


# B_2j / (2j)! for j = 1..12: the Euler-Maclaurin correction of the Hurwitz zeta function.
_BERNOULLI = [(1, 6), (-1, 30), (1, 42), (-1, 30), (5, 66), (-691, 2730), (7, 6),
              (-3617, 510), (43867, 798), (-174611, 330), (854513, 138), (-236364091, 2730)]
_ZETA_TERMS = 9


def _zeta(s: _E, q: _E) -> _E:
    """The Hurwitz zeta function sum_k (q + k)^-s by Euler-Maclaurin summation, as XLA
    expands it: nine terms, then the integral and twelve Bernoulli corrections; inf at
    s = 1 and at the non-positive integers q, NaN for s < 1 and where q <= 0 and s is
    not an integer."""
    total = (q.apply(Opcode.LOG) * -s).apply(Opcode.EXP)
    for k in range(1, _ZETA_TERMS):
        total = total + ((q + float(k)).apply(Opcode.LOG) * -s).apply(Opcode.EXP)
    a = q + float(_ZETA_TERMS)
    log_a = a.apply(Opcode.LOG)
    power = (log_a * -s).apply(Opcode.EXP)                          # a^-s
    total = total + power * a / (s - 1.0) + power / 2.0
    rising, term = s, power / a                                     # s (s+1)..., a^(-s-1)
    for j, (num, den) in enumerate(_BERNOULLI, 1):
        factorial = math.factorial(2 * j)
        total = total + term * rising * (num / den / factorial)
        rising = rising * (s + float(2 * j - 1)) * (s + float(2 * j))
        term = term / (a * a)
    pole_q = q.compare("LE", 0.0)._op(Opcode.AND, q.apply(Opcode.FLOOR).compare("EQ", q))
    bad_q = q.compare("LE", 0.0)._op(Opcode.AND, s.apply(Opcode.FLOOR).compare("NE", s))
    out = pole_q.where(s._lift(math.inf), bad_q.where(s._lift(math.nan), total))
    out = s.compare("LT", 1.0).where(s._lift(math.nan), out)
    return s.compare("EQ", 1.0).where(s._lift(math.inf), out)


def _polygamma(n: _E, x: _E) -> _E:
    """psi^(n)(x): digamma for n = 0, (-1)^(n+1) n! zeta(n + 1, x) for the positive
    integers n, NaN for any other n."""
    n1 = n + 1.0
    factorial = _lgamma(n1).apply(Opcode.EXP)                       # n!
    odd = (n - 2.0 * (n / 2.0).apply(Opcode.FLOOR)).compare("EQ", 1.0)
    out = odd.where(n._lift(1.0), n._lift(-1.0)) * factorial * _zeta(n1, x)
    out = n.compare("EQ", 0.0).where(_digamma(x), out)
    integer = n.apply(Opcode.FLOOR).compare("EQ", n)._op(Opcode.AND, n.compare("GE", 0.0))
    return integer.where(out, n._lift(math.nan))


def _formula2(fn):
    def rule(op: Operation, ctx: Context) -> list[Instruction]:
        a, b = ctx.operands(op)
        if a.shape.dtype.kind != "f":
            raise ctx.error(f"{op.name} of {a.shape.dtype.name}: it takes floats")
        out = fn(_in(_E(ctx, a)), _in(_E(ctx, b)))
        return [out.convert(a.shape.dtype).i]
    return rule


def _formula(fn, dtype: dtypes.DType | None = None):
    def rule(op: Operation, ctx: Context) -> list[Instruction]:
        (x,) = ctx.operands(op)
        if x.shape.dtype.kind != "f":
            raise ctx.error(f"{op.name} of {x.shape.dtype.name}: it takes floats")
        out = fn(_in(_E(ctx, x), dtype))
        return [out.convert(x.shape.dtype).i]
    return rule


def _is_inf(direction_value):
    def rule(op: Operation, ctx: Context) -> list[Instruction]:
        (x,) = ctx.operands(op)
        e = _E(ctx, x)
        if direction_value is None:
            return [e.apply(Opcode.ABS).compare("EQ", math.inf).i]
        return [e.compare("EQ", direction_value).i]
    return rule


def _square(op: Operation, ctx: Context) -> list[Instruction]:
    (x,) = ctx.operands(op)
    return [ctx.add(Instruction(Opcode.MULTIPLY, x.shape, [x, x]))]


def _identity(op: Operation, ctx: Context) -> list[Instruction]:
    """conj of a real value (complex.py takes complex ones)."""
    return ctx.operands(op)[:1]


def _next_after(op: Operation, ctx: Context) -> list[Instruction]:
    """The float next to x toward y: x's bits one up or down (away from zero when y lies
    beyond x on x's side), the smallest subnormal of y's sign from zero, y where they
    are equal, NaN where either is."""
    x, y = (_E(ctx, v) for v in ctx.operands(op))
    dt = x.shape.dtype
    if dt.kind != "f" or dt.bits not in (16, 32, 64):
        raise ctx.error(f"next_after of {dt.name}: it takes floats")
    u = {16: dtypes.U16, 32: dtypes.U32, 64: dtypes.U64}[dt.bits]
    bits = x._op(Opcode.BITCAST_CONVERT, shape=x.shape.with_dtype(u))
    ybits = y._op(Opcode.BITCAST_CONVERT, shape=y.shape.with_dtype(u))
    sign = 1 << (dt.bits - 1)
    away = x.compare("LT", y)._op(Opcode.XOR, x.compare("LT", 0.0))
    stepped = away.where(bits + 1, bits - 1)
    tiny = (ybits._op(Opcode.AND, sign))._op(Opcode.OR, 1)
    out = x.compare("EQ", 0.0).where(tiny, stepped)
    out = out._op(Opcode.BITCAST_CONVERT, shape=x.shape)
    out = x.compare("EQ", y).where(y, out)
    nan = x.compare("NE", x)._op(Opcode.OR, y.compare("NE", y))
    return [nan.where(x + y, out).i]


def _mulhi(op: Operation, ctx: Context) -> list[Instruction]:
    """The high half of the full product of 32-bit (or narrower) integers."""
    a, b = ctx.operands(op)
    dt = a.shape.dtype
    if not dt.is_integer or dt.bits > 32:
        raise ctx.error(f"mulhi of {dt.name}: 8 to 32-bit integers only")
    wide = dtypes.S64 if dt.kind == "s" else dtypes.U64
    product = _E(ctx, a).convert(wide) * _E(ctx, b).convert(wide)
    shift = Opcode.SHIFT_RIGHT_ARITHMETIC if dt.kind == "s" else Opcode.SHIFT_RIGHT_LOGICAL
    return [product._op(shift, dt.bits).convert(dt).i]


def _elementwise(opcode: Opcode):
    def rule(op: Operation, ctx: Context) -> list[Instruction]:
        (x,) = ctx.operands(op)
        return [ctx.add(Instruction(opcode, x.shape, [x]))]
    return rule


CHLO_RULES = {
    **{f"chlo.{name}": _elementwise(opcode) for name, opcode in _OPCODES.items()},
    "chlo.erf_inv": _formula(_erf_inv), "chlo.lgamma": _formula(_lgamma),
    "chlo.digamma": _formula(_digamma), "chlo.erfc": _formula(_erfc, dtypes.F64),
    "chlo.is_inf": _is_inf(None), "chlo.is_pos_inf": _is_inf(math.inf),
    "chlo.is_neg_inf": _is_inf(-math.inf), "chlo.square": _square, "chlo.conj": _identity,
    "chlo.next_after": _next_after, "chlo.mulhi": _mulhi,
    "chlo.bessel_i1e": _formula(_bessel_i1e, dtypes.F64), "chlo.zeta": _formula2(_zeta),
    "chlo.polygamma": _formula2(_polygamma),
}
