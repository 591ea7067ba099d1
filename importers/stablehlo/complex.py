"""Complex numbers, which our IR does not have: each complex value is a pair of real
instructions (``Complex``), and each op on complex values has a rule here over the
pairs. Movement ops (reshape, slice, broadcast, ...) run their real rule on each part;
arithmetic follows the textbook formulas; ``fft`` is a mixed-radix Cooley-Tukey
transform: the last dimension of length n = n1 * n2 is split, a DFT of n1 points runs
as a product with an n1 x n1 matrix of constants, the twiddle factors multiply, then
the n2-point DFT, recursively while n has a factor, down to matrices of at most
``_DIRECT`` points (or a prime n). Complex values stay inside the program: its inputs
and outputs, and the state of loops and branches, are real.
"""
from __future__ import annotations

import math
from collections import ChainMap
from dataclasses import dataclass, replace

import numpy as np

from ...hlo import DotDimensionNumbers, Instruction, Opcode, Shape, SliceSpec
from ...hlo.builder import scalar_computation
from ...hlo.shape_inference import infer_shape
from .lowering import Context, shape_of
from .mlir import Operation

_DIRECT = 16       # DFTs of at most this many points are one matrix product


@dataclass(frozen=True)
class Complex:
    re: Instruction
    im: Instruction

    @property
    def shape(self) -> Shape:
        return self.re.shape


# Ops whose real rule passes complex values through as they are.
_PASS_THROUGH = frozenset({"func.call", "stablehlo.composite", "stablehlo.optimization_barrier"})


def is_complex_op(op: Operation, ctx: Context) -> bool:
    if op.name in _PASS_THROUGH:
        return False
    return any(t.complex for t in op.result_types + op.operand_types) or any(
        isinstance(ctx.values.get(v), Complex) for v in op.operands)


def lower_complex(op: Operation, ctx: Context, real_rules) -> list:
    rule = _RULES.get(op.name)
    if rule is None:
        if op.name in _PER_PART:
            return _per_part(op, ctx, real_rules)
        raise ctx.error("this op on complex numbers is not supported")
    return rule(op, ctx, real_rules)


# --- helpers ---------------------------------------------------------------------------

def _add(ctx: Context, opcode: Opcode, *operands, shape: Shape | None = None, **attrs):
    s = infer_shape(opcode, [o.shape for o in operands], attrs, (), shape)
    return ctx.add(Instruction(opcode, s, list(operands), attrs))


def _const(ctx: Context, values: np.ndarray, like: Shape) -> Instruction:
    arr = np.array(values, dtype=like.dtype.np, order="C")      # 0-d stays 0-d
    return ctx.add(Instruction(Opcode.CONSTANT, Shape.array(like.dtype, arr.shape),
                               literal=arr))


def _splat(ctx: Context, value: float, like: Shape) -> Instruction:
    c = _const(ctx, np.array(value), like)
    return _add(ctx, Opcode.BROADCAST, c, shape=Shape.array(like.dtype, like.dims),
                dimensions=())


def _parts(x) -> tuple[Instruction, Instruction | None]:
    """A value's real and imaginary parts (None: a real value's zero)."""
    return (x.re, x.im) if isinstance(x, Complex) else (x, None)


def _sub(ctx, a, b):
    return _add(ctx, Opcode.SUBTRACT, a, b)


def _sum(ctx, a, b):
    return _add(ctx, Opcode.ADD, a, b)


def _mul(ctx, a, b):
    return _add(ctx, Opcode.MULTIPLY, a, b)


def _zero_like(ctx, x: Instruction) -> Instruction:
    return _splat(ctx, 0.0, x.shape)


def _complex(ctx, x) -> Complex:
    re, im = _parts(x)
    return Complex(re, im if im is not None else _zero_like(ctx, re))


# --- rules -------------------------------------------------------------------------------

def _binary(combine):
    def rule(op, ctx, real_rules):
        a, b = ctx.operands(op)
        return [combine(ctx, _complex(ctx, a), _complex(ctx, b))]
    return rule


def _times(ctx, a: Complex, b: Complex) -> Complex:
    return Complex(_sub(ctx, _mul(ctx, a.re, b.re), _mul(ctx, a.im, b.im)),
                   _sum(ctx, _mul(ctx, a.re, b.im), _mul(ctx, a.im, b.re)))


def _over(ctx, a: Complex, b: Complex) -> Complex:
    """(a / b) = a conj(b) / |b|^2."""
    norm = _sum(ctx, _mul(ctx, b.re, b.re), _mul(ctx, b.im, b.im))
    re = _sum(ctx, _mul(ctx, a.re, b.re), _mul(ctx, a.im, b.im))
    im = _sub(ctx, _mul(ctx, a.im, b.re), _mul(ctx, a.re, b.im))
    return Complex(_add(ctx, Opcode.DIVIDE, re, norm), _add(ctx, Opcode.DIVIDE, im, norm))


def _negate(op, ctx, real_rules):
    (z,) = ctx.operands(op)
    z = _complex(ctx, z)
    return [Complex(_add(ctx, Opcode.NEGATE, z.re), _add(ctx, Opcode.NEGATE, z.im))]


def _square(op, ctx, real_rules):
    z = _complex(ctx, ctx.operands(op)[0])
    return [_times(ctx, z, z)]


def _conj(op, ctx, real_rules):
    z = _complex(ctx, ctx.operands(op)[0])
    return [Complex(z.re, _add(ctx, Opcode.NEGATE, z.im))]


def _make_complex(op, ctx, real_rules):
    re, im = ctx.operands(op)
    return [Complex(re, im)]


def _real(op, ctx, real_rules):
    (z,) = ctx.operands(op)
    return [_parts(z)[0]]


def _imag(op, ctx, real_rules):
    (z,) = ctx.operands(op)
    re, im = _parts(z)
    return [im if im is not None else _zero_like(ctx, re)]


def _abs(op, ctx, real_rules):
    """|z|, scaled by the larger part so that neither square overflows."""
    (z,) = ctx.operands(op)
    z = _complex(ctx, z)
    a, b = _add(ctx, Opcode.ABS, z.re), _add(ctx, Opcode.ABS, z.im)
    big = _add(ctx, Opcode.MAXIMUM, a, b)
    small = _add(ctx, Opcode.MINIMUM, a, b)
    zero = _zero_like(ctx, big)
    safe = _add(ctx, Opcode.SELECT, _add(ctx, Opcode.COMPARE, big, zero, direction="EQ"),
                _splat(ctx, 1.0, big.shape), big)
    ratio = _add(ctx, Opcode.DIVIDE, small, safe)
    root = _add(ctx, Opcode.SQRT, _sum(ctx, _splat(ctx, 1.0, big.shape), _mul(ctx, ratio, ratio)))
    return [_mul(ctx, big, root)]


def _exponential(op, ctx, real_rules):
    (z,) = ctx.operands(op)
    z = _complex(ctx, z)
    e = _add(ctx, Opcode.EXP, z.re)
    return [Complex(_mul(ctx, e, _add(ctx, Opcode.COSINE, z.im)),
                    _mul(ctx, e, _add(ctx, Opcode.SINE, z.im)))]


def _log(op, ctx, real_rules):
    (z,) = ctx.operands(op)
    z = _complex(ctx, z)
    (magnitude,) = _abs(op, _Bound(ctx, [z]), real_rules)
    return [Complex(_add(ctx, Opcode.LOG, magnitude), _add(ctx, Opcode.ATAN2, z.im, z.re))]


class _Bound:
    """A context whose ``operands`` are given values (for rules built from rules)."""

    def __init__(self, ctx: Context, values: list):
        self._ctx, self._values = ctx, values

    def operands(self, op):
        return self._values

    def __getattr__(self, name):
        return getattr(self._ctx, name)


def _convert(op, ctx, real_rules):
    (x,) = ctx.operands(op)
    out = op.result_types[0]
    re, im = _parts(x)
    part = shape_of(out.real)
    if re.shape.dtype != part.dtype:
        re = _add(ctx, Opcode.CONVERT, re, shape=re.shape.with_dtype(part.dtype))
        if im is not None:
            im = _add(ctx, Opcode.CONVERT, im, shape=im.shape.with_dtype(part.dtype))
    if not out.complex:
        return [re]                                # the imaginary part is dropped
    return [Complex(re, im if im is not None else _zero_like(ctx, re))]


def _compare(op, ctx, real_rules):
    a, b = (_complex(ctx, v) for v in ctx.operands(op))
    words = op.attributes.get("_words", [])
    direction = op.attributes.get("comparison_direction", words[0] if words else None)
    if direction not in ("EQ", "NE"):
        raise ctx.error(f"complex numbers compare EQ or NE only, not {direction}")
    re = _add(ctx, Opcode.COMPARE, a.re, b.re, direction=direction)
    im = _add(ctx, Opcode.COMPARE, a.im, b.im, direction=direction)
    return [_add(ctx, Opcode.AND if direction == "EQ" else Opcode.OR, re, im)]


def _select(op, ctx, real_rules):
    p, a, b = ctx.operands(op)
    a, b = _complex(ctx, a), _complex(ctx, b)
    return [Complex(_add(ctx, Opcode.SELECT, p, a.re, b.re),
                    _add(ctx, Opcode.SELECT, p, a.im, b.im))]


def _constant(op, ctx, real_rules):
    value = op.attributes["value"]
    like = shape_of(op.result_types[0].real)
    return [Complex(_const(ctx, value.real, like), _const(ctx, value.imag, like))]


# Ops whose real rule runs on each part alone (their other operands are real).
_PER_PART = {f"stablehlo.{name}" for name in (
    "broadcast_in_dim", "reshape", "transpose", "reverse", "slice", "concatenate", "pad",
    "dynamic_slice", "dynamic_update_slice", "gather")}


def _per_part(op: Operation, ctx: Context, real_rules) -> list:
    """The op's real rule on the real parts, then on the imaginary parts (a real
    operand's zero where the other operands are complex)."""
    complex_operands = {v for v in op.operands if isinstance(ctx.values.get(v), Complex)}
    real_op = replace(op, result_types=[t.real for t in op.result_types],
                      operand_types=[t.real for t in op.operand_types])
    outs = []
    saved = ctx.values
    for k in (0, 1):
        overlay = {v: _complex(ctx, saved[v]).re if k == 0 else _complex(ctx, saved[v]).im
                   for v in op.operands if v in complex_operands or (
                       k == 1 and _takes_complex(op, v, complex_operands))}
        ctx.values = ChainMap(overlay, saved)
        try:
            outs.append(real_rules[op.name](real_op, ctx))
        finally:
            ctx.values = saved
    return [Complex(re, im) for re, im in zip(*outs)]


def _takes_complex(op: Operation, value: str, complex_operands: set) -> bool:
    """A real operand that stands for a complex one (a concatenation of a real and a
    complex array: its imaginary part is zero) rather than an index or a size."""
    k = op.operands.index(value)
    return k < len(op.operand_types) and op.operand_types[k].complex


def _dot_general(op, ctx, real_rules):
    a, b = (_parts(v) for v in ctx.operands(op))
    real_op = replace(op, result_types=[t.real for t in op.result_types],
                      operand_types=[t.real for t in op.operand_types])

    def dot(x, y):
        return real_rules[op.name](real_op, _Bound(ctx, [x, y]))[0]
    re = dot(a[0], b[0])
    if a[1] is not None and b[1] is not None:
        re = _sub(ctx, re, dot(a[1], b[1]))
    terms = [dot(a[0], b[1]) if b[1] is not None else None,
             dot(a[1], b[0]) if a[1] is not None else None]
    terms = [t for t in terms if t is not None]
    im = terms[0] if len(terms) == 1 else _sum(ctx, *terms) if terms else _zero_like(ctx, re)
    return [Complex(re, im)]


def _reduce(op, ctx, real_rules):
    """A sum of complex numbers: each part summed (other reducers are refused)."""
    body = op.regions[0].operations
    if len(op.results) != 1 or [o.name for o in body[:1]] != ["stablehlo.add"]:
        raise ctx.error("a reduce of complex numbers must be a sum")
    x, init = (_complex(ctx, v) for v in ctx.operands(op))
    dims = tuple(int(d) for d in op.attributes["dimensions"])
    dt = x.re.shape.dtype
    adder = ctx.module.add_computation(scalar_computation(f"add_{dt}", Opcode.ADD, dt))
    shape = Shape.array(dt, tuple(d for i, d in enumerate(x.re.shape.dims) if i not in dims))
    return [Complex(*(ctx.add(Instruction(Opcode.REDUCE, shape, [part, start],
                                          {"dimensions": dims}, [adder]))
                      for part, start in ((x.re, init.re), (x.im, init.im))))]


# --- fft ----------------------------------------------------------------------------------

def _fft(op, ctx, real_rules):
    """XLA's fft over the last len(fft_length) dims: FFT and IFFT (complex to complex,
    IFFT divided by the point count), RFFT (real to the n/2 + 1 non-negative
    frequencies of the last dim), IRFFT (their inverse, real)."""
    (x,) = ctx.operands(op)
    kind = op.attributes.get("fft_type", op.attributes.get("type"))
    lengths = [int(n) for n in op.attributes.get("fft_length", op.attributes.get("length"))]
    rank = _parts(x)[0].shape.rank
    axes = list(range(rank - len(lengths), rank))
    if kind in ("FFT", "IFFT"):
        z = _complex(ctx, x)
        for axis in axes:
            z = _along(ctx, z, axis, kind == "IFFT")
        return [z]
    if kind == "RFFT":
        z = _complex(ctx, x)
        n = lengths[-1]
        z = _along(ctx, z, axes[-1], False)
        z = _slice_last(ctx, z, axes[-1], n // 2 + 1)
        for axis in axes[:-1]:
            z = _along(ctx, z, axis, False)
        return [z]
    if kind == "IRFFT":
        z = _complex(ctx, x)
        for axis in axes[:-1]:
            z = _along(ctx, z, axis, True)
        z = _hermitian(ctx, z, axes[-1], lengths[-1])
        return [_along(ctx, z, axes[-1], True).re]
    raise ctx.error(f"fft of type {kind}")


def _slice_last(ctx, z: Complex, axis: int, size: int) -> Complex:
    dims = z.shape.dims
    limits = tuple(size if d == axis else n for d, n in enumerate(dims))
    spec = SliceSpec((0,) * len(dims), limits, (1,) * len(dims))
    return Complex(_add(ctx, Opcode.SLICE, z.re, slice=spec),
                   _add(ctx, Opcode.SLICE, z.im, slice=spec))


def _hermitian(ctx, z: Complex, axis: int, n: int) -> Complex:
    """The n-point spectrum of a real signal from its n/2 + 1 first points: point k > n/2
    is the conjugate of point n - k."""
    have = z.shape.dims[axis]
    need = n - have
    if need <= 0:
        return _slice_last(ctx, z, axis, n)
    dims = z.shape.dims
    starts = tuple(1 if d == axis else 0 for d in range(len(dims)))
    limits = tuple(1 + need if d == axis else m for d, m in enumerate(dims))
    spec = SliceSpec(starts, limits, (1,) * len(dims))
    tail_re = _add(ctx, Opcode.REVERSE, _add(ctx, Opcode.SLICE, z.re, slice=spec),
                   dimensions=(axis,))
    tail_im = _add(ctx, Opcode.NEGATE, _add(ctx, Opcode.REVERSE, _add(
        ctx, Opcode.SLICE, z.im, slice=spec), dimensions=(axis,)))
    return Complex(_add(ctx, Opcode.CONCATENATE, z.re, tail_re, dimension=axis),
                   _add(ctx, Opcode.CONCATENATE, z.im, tail_im, dimension=axis))


def _along(ctx, z: Complex, axis: int, inverse: bool) -> Complex:
    rank = z.shape.rank
    perm = [d for d in range(rank) if d != axis] + [axis]
    back = [perm.index(d) for d in range(rank)]
    moved = _transpose(ctx, z, perm)
    n = moved.shape.dims[-1]
    out = _dft(ctx, moved, n, inverse)
    if inverse:
        scale = _splat(ctx, 1.0 / n, out.shape)
        out = Complex(_mul(ctx, out.re, scale), _mul(ctx, out.im, scale))
    return _transpose(ctx, out, back)


def _transpose(ctx, z: Complex, perm) -> Complex:
    if list(perm) == list(range(len(perm))):
        return z
    return Complex(*(_add(ctx, Opcode.TRANSPOSE, p, dimensions=tuple(perm))
                     for p in (z.re, z.im)))


def _reshape(ctx, z: Complex, dims) -> Complex:
    return Complex(*(_add(ctx, Opcode.RESHAPE, p, shape=p.shape.with_dims(tuple(dims)))
                     for p in (z.re, z.im)))


def _factor(n: int) -> int:
    """The largest factor of n at most sqrt(n) (1: n is prime)."""
    for f in range(int(math.isqrt(n)), 1, -1):
        if n % f == 0:
            return f
    return 1


def _dft(ctx, z: Complex, n: int, inverse: bool) -> Complex:
    """The unnormalized DFT of z along its last dim (n points)."""
    n1 = _factor(n)
    if n <= _DIRECT or n1 == 1:
        return _matrix_dft(ctx, z, n, inverse)
    n2 = n // n1
    lead = z.shape.dims[:-1]
    k = len(lead)
    # x[j1 * n2 + j2] -> [.., j1, j2]; the n1-point DFTs run over j1
    x = _transpose(ctx, _reshape(ctx, z, (*lead, n1, n2)), (*range(k), k + 1, k))
    x = _dft(ctx, x, n1, inverse)                                    # [.., j2, k1]
    sign = 1.0 if inverse else -1.0
    j2, k1 = np.meshgrid(np.arange(n2), np.arange(n1), indexing="ij")
    angle = sign * 2 * np.pi * (j2 * k1) / n
    w = Complex(*(_add(ctx, Opcode.BROADCAST, _const(ctx, part, x.re.shape), shape=x.re.shape,
                       dimensions=(k, k + 1)) for part in (np.cos(angle), np.sin(angle))))
    x = _times(ctx, x, w)
    x = _transpose(ctx, x, (*range(k), k + 1, k))                   # [.., k1, j2]
    x = _dft(ctx, x, n2, inverse)                                    # [.., k1, k2]
    # X[k1 + n1 * k2]: k2 major
    return _reshape(ctx, _transpose(ctx, x, (*range(k), k + 1, k)), (*lead, n))


def _matrix_dft(ctx, z: Complex, n: int, inverse: bool) -> Complex:
    j, kk = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    angle = (1.0 if inverse else -1.0) * 2 * np.pi * ((j * kk) % n) / n
    like = Shape.array(z.re.shape.dtype, (n, n))
    c, s = _const(ctx, np.cos(angle), like), _const(ctx, np.sin(angle), like)
    rank = z.shape.rank
    numbers = DotDimensionNumbers((), (rank - 1,), (), (0,))

    def dot(x, m):
        return _add(ctx, Opcode.DOT, x, m, dimension_numbers=numbers)
    # (a + ib)(c + is) = (ac - bs) + i(as + bc)
    return Complex(_sub(ctx, dot(z.re, c), dot(z.im, s)), _sum(ctx, dot(z.re, s), dot(z.im, c)))


_RULES = {
    "stablehlo.add": _binary(lambda ctx, a, b: Complex(_sum(ctx, a.re, b.re),
                                                       _sum(ctx, a.im, b.im))),
    "stablehlo.subtract": _binary(lambda ctx, a, b: Complex(_sub(ctx, a.re, b.re),
                                                            _sub(ctx, a.im, b.im))),
    "stablehlo.multiply": _binary(_times), "stablehlo.divide": _binary(_over),
    "stablehlo.negate": _negate, "stablehlo.complex": _make_complex,
    "stablehlo.real": _real, "stablehlo.imag": _imag, "stablehlo.abs": _abs,
    "stablehlo.exponential": _exponential, "stablehlo.log": _log,
    "stablehlo.convert": _convert, "stablehlo.compare": _compare,
    "stablehlo.select": _select, "stablehlo.constant": _constant,
    "stablehlo.dot_general": _dot_general, "stablehlo.reduce": _reduce,
    "stablehlo.fft": _fft,
    "chlo.square": _square, "chlo.conj": _conj,
}
