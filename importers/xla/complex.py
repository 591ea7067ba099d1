"""Complex numbers, which our IR does not have: each complex value is a pair of real
instructions (``Complex``), and each op on complex values is built here from the
pairs, for both importers. Arithmetic follows the textbook formulas; ``fft`` is a
mixed-radix Cooley-Tukey transform: the last dimension of length n = n1 * n2 is
split, a DFT of n1 points runs as a product with an n1 x n1 matrix of constants, the
twiddle factors multiply, then the n2-point DFT, recursively while n has a factor,
down to matrices of at most ``_DIRECT`` points (or a prime n).

Each builder takes ``at``, where the instructions go: anything with ``add`` (an
instruction in, the added one out) and ``module`` (for called computations).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...hlo import DotDimensionNumbers, Instruction, Opcode, Shape, SliceSpec
from ...hlo.shape_inference import infer_shape

_DIRECT = 16       # DFTs of at most this many points are one matrix product


@dataclass(frozen=True)
class Complex:
    re: Instruction
    im: Instruction

    @property
    def shape(self) -> Shape:
        return self.re.shape


# --- helpers ---------------------------------------------------------------------------

def add(at, opcode: Opcode, *operands, shape: Shape | None = None, **attrs) -> Instruction:
    s = infer_shape(opcode, [o.shape for o in operands], attrs, (), shape)
    return at.add(Instruction(opcode, s, list(operands), attrs))


def _const(at, values: np.ndarray, like: Shape) -> Instruction:
    arr = np.array(values, dtype=like.dtype.np, order="C")      # 0-d stays 0-d
    return at.add(Instruction(Opcode.CONSTANT, Shape.array(like.dtype, arr.shape),
                              literal=arr))


def _splat(at, value: float, like: Shape) -> Instruction:
    c = _const(at, np.array(value), like)
    return add(at, Opcode.BROADCAST, c, shape=Shape.array(like.dtype, like.dims),
               dimensions=())


def parts(x) -> tuple[Instruction, Instruction | None]:
    """A value's real and imaginary parts (None: a real value's zero)."""
    return (x.re, x.im) if isinstance(x, Complex) else (x, None)


def _sub(at, a, b):
    return add(at, Opcode.SUBTRACT, a, b)


def _sum(at, a, b):
    return add(at, Opcode.ADD, a, b)


def _mul(at, a, b):
    return add(at, Opcode.MULTIPLY, a, b)


def zero_like(at, x: Instruction) -> Instruction:
    return _splat(at, 0.0, x.shape)


def as_complex(at, x) -> Complex:
    """``x`` as a complex value (a real one with a zero imaginary part)."""
    re, im = parts(x)
    return Complex(re, im if im is not None else zero_like(at, re))


def flatten(values: list) -> list[Instruction]:
    """The values with each complex one as its two parts."""
    return [p for v in values for p in ((v.re, v.im) if isinstance(v, Complex) else (v,))]


def regroup(flat: list[Instruction], kinds: list[bool]) -> list:
    """What ``flatten`` took apart: values, complex where ``kinds`` says so."""
    it = iter(flat)
    return [Complex(next(it), next(it)) if c else next(it) for c in kinds]


def constant(at, value: np.ndarray, part: Shape) -> Complex:
    """A complex array constant; ``part`` gives its parts' element type."""
    return Complex(_const(at, value.real, part), _const(at, value.imag, part))


# --- arithmetic ----------------------------------------------------------------------------

def plus(at, a: Complex, b: Complex) -> Complex:
    return Complex(_sum(at, a.re, b.re), _sum(at, a.im, b.im))


def minus(at, a: Complex, b: Complex) -> Complex:
    return Complex(_sub(at, a.re, b.re), _sub(at, a.im, b.im))


def times(at, a: Complex, b: Complex) -> Complex:
    return Complex(_sub(at, _mul(at, a.re, b.re), _mul(at, a.im, b.im)),
                   _sum(at, _mul(at, a.re, b.im), _mul(at, a.im, b.re)))


def over(at, a: Complex, b: Complex) -> Complex:
    """(a / b) = a conj(b) / |b|^2."""
    norm = _sum(at, _mul(at, b.re, b.re), _mul(at, b.im, b.im))
    re = _sum(at, _mul(at, a.re, b.re), _mul(at, a.im, b.im))
    im = _sub(at, _mul(at, a.im, b.re), _mul(at, a.re, b.im))
    return Complex(add(at, Opcode.DIVIDE, re, norm), add(at, Opcode.DIVIDE, im, norm))


def negate(at, z: Complex) -> Complex:
    return Complex(add(at, Opcode.NEGATE, z.re), add(at, Opcode.NEGATE, z.im))


def conjugate(at, z: Complex) -> Complex:
    return Complex(z.re, add(at, Opcode.NEGATE, z.im))


def magnitude(at, z: Complex) -> Instruction:
    """|z|, scaled by the larger part so that neither square overflows."""
    a, b = add(at, Opcode.ABS, z.re), add(at, Opcode.ABS, z.im)
    big = add(at, Opcode.MAXIMUM, a, b)
    small = add(at, Opcode.MINIMUM, a, b)
    safe = add(at, Opcode.SELECT,
               add(at, Opcode.COMPARE, big, zero_like(at, big), direction="EQ"),
               _splat(at, 1.0, big.shape), big)
    ratio = add(at, Opcode.DIVIDE, small, safe)
    root = add(at, Opcode.SQRT, _sum(at, _splat(at, 1.0, big.shape), _mul(at, ratio, ratio)))
    return _mul(at, big, root)


def exponential(at, z: Complex) -> Complex:
    e = add(at, Opcode.EXP, z.re)
    return Complex(_mul(at, e, add(at, Opcode.COSINE, z.im)),
                   _mul(at, e, add(at, Opcode.SINE, z.im)))


def log(at, z: Complex) -> Complex:
    return Complex(add(at, Opcode.LOG, magnitude(at, z)), add(at, Opcode.ATAN2, z.im, z.re))


def convert(at, x, part, to_complex: bool):
    """``x`` (real or complex) converted to parts of element type ``part``: complex when
    ``to_complex``, else its real part (XLA drops the imaginary one)."""
    re, im = parts(x)
    if re.shape.dtype != part:
        re = add(at, Opcode.CONVERT, re, shape=re.shape.with_dtype(part))
        if im is not None:
            im = add(at, Opcode.CONVERT, im, shape=im.shape.with_dtype(part))
    if not to_complex:
        return re
    return Complex(re, im if im is not None else zero_like(at, re))


def compare(at, a: Complex, b: Complex, direction: str) -> Instruction:
    """EQ or NE: both parts, or either (complex numbers have no order)."""
    if direction not in ("EQ", "NE"):
        raise ValueError(f"complex numbers compare EQ or NE only, not {direction}")
    re = add(at, Opcode.COMPARE, a.re, b.re, direction=direction)
    im = add(at, Opcode.COMPARE, a.im, b.im, direction=direction)
    return add(at, Opcode.AND if direction == "EQ" else Opcode.OR, re, im)


def dot(at, a, b, real_dot) -> Complex:
    """A product of real or complex operands from ``real_dot(x, y)``, the real product of
    two parts: the terms whose parts are zero are left out."""
    (a_re, a_im), (b_re, b_im) = parts(a), parts(b)
    re = real_dot(a_re, b_re)
    if a_im is not None and b_im is not None:
        re = _sub(at, re, real_dot(a_im, b_im))
    terms = [real_dot(a_re, b_im) if b_im is not None else None,
             real_dot(a_im, b_re) if a_im is not None else None]
    terms = [t for t in terms if t is not None]
    im = terms[0] if len(terms) == 1 else _sum(at, *terms) if terms else zero_like(at, re)
    return Complex(re, im)


# --- fft ----------------------------------------------------------------------------------

def fft(at, kind: str, lengths: list[int], x):
    """XLA's fft over the last len(lengths) dims of ``x``: FFT and IFFT (complex to
    complex, IFFT divided by the point count), RFFT (real to the n/2 + 1 non-negative
    frequencies of the last dim), IRFFT (their inverse, real)."""
    rank = parts(x)[0].shape.rank
    axes = list(range(rank - len(lengths), rank))
    z = as_complex(at, x)
    if kind in ("FFT", "IFFT"):
        for axis in axes:
            z = _along(at, z, axis, kind == "IFFT")
        return z
    if kind == "RFFT":
        z = _along(at, z, axes[-1], False)
        z = _slice_last(at, z, axes[-1], lengths[-1] // 2 + 1)
        for axis in axes[:-1]:
            z = _along(at, z, axis, False)
        return z
    if kind == "IRFFT":
        for axis in axes[:-1]:
            z = _along(at, z, axis, True)
        z = _hermitian(at, z, axes[-1], lengths[-1])
        return _along(at, z, axes[-1], True).re
    raise ValueError(f"fft of type {kind}")


def _slice_last(at, z: Complex, axis: int, size: int) -> Complex:
    dims = z.shape.dims
    limits = tuple(size if d == axis else n for d, n in enumerate(dims))
    spec = SliceSpec((0,) * len(dims), limits, (1,) * len(dims))
    return Complex(add(at, Opcode.SLICE, z.re, slice=spec),
                   add(at, Opcode.SLICE, z.im, slice=spec))


def _hermitian(at, z: Complex, axis: int, n: int) -> Complex:
    """The n-point spectrum of a real signal from its n/2 + 1 first points: point k > n/2
    is the conjugate of point n - k."""
    have = z.shape.dims[axis]
    need = n - have
    if need <= 0:
        return _slice_last(at, z, axis, n)
    dims = z.shape.dims
    starts = tuple(1 if d == axis else 0 for d in range(len(dims)))
    limits = tuple(1 + need if d == axis else m for d, m in enumerate(dims))
    spec = SliceSpec(starts, limits, (1,) * len(dims))
    tail_re = add(at, Opcode.REVERSE, add(at, Opcode.SLICE, z.re, slice=spec),
                  dimensions=(axis,))
    tail_im = add(at, Opcode.NEGATE, add(at, Opcode.REVERSE, add(
        at, Opcode.SLICE, z.im, slice=spec), dimensions=(axis,)))
    return Complex(add(at, Opcode.CONCATENATE, z.re, tail_re, dimension=axis),
                   add(at, Opcode.CONCATENATE, z.im, tail_im, dimension=axis))


def _along(at, z: Complex, axis: int, inverse: bool) -> Complex:
    rank = z.shape.rank
    perm = [d for d in range(rank) if d != axis] + [axis]
    back = [perm.index(d) for d in range(rank)]
    moved = _transpose(at, z, perm)
    n = moved.shape.dims[-1]
    out = _dft(at, moved, n, inverse)
    if inverse:
        scale = _splat(at, 1.0 / n, out.shape)
        out = Complex(_mul(at, out.re, scale), _mul(at, out.im, scale))
    return _transpose(at, out, back)


def _transpose(at, z: Complex, perm) -> Complex:
    if list(perm) == list(range(len(perm))):
        return z
    return Complex(*(add(at, Opcode.TRANSPOSE, p, dimensions=tuple(perm))
                     for p in (z.re, z.im)))


def _reshape(at, z: Complex, dims) -> Complex:
    return Complex(*(add(at, Opcode.RESHAPE, p, shape=p.shape.with_dims(tuple(dims)))
                     for p in (z.re, z.im)))


def _factor(n: int) -> int:
    """The largest factor of n at most sqrt(n) (1: n is prime)."""
    for f in range(int(math.isqrt(n)), 1, -1):
        if n % f == 0:
            return f
    return 1


def _dft(at, z: Complex, n: int, inverse: bool) -> Complex:
    """The unnormalized DFT of z along its last dim (n points)."""
    n1 = _factor(n)
    if n <= _DIRECT or n1 == 1:
        return _matrix_dft(at, z, n, inverse)
    n2 = n // n1
    lead = z.shape.dims[:-1]
    k = len(lead)
    # x[j1 * n2 + j2] -> [.., j1, j2]; the n1-point DFTs run over j1
    x = _transpose(at, _reshape(at, z, (*lead, n1, n2)), (*range(k), k + 1, k))
    x = _dft(at, x, n1, inverse)                                     # [.., j2, k1]
    sign = 1.0 if inverse else -1.0
    j2, k1 = np.meshgrid(np.arange(n2), np.arange(n1), indexing="ij")
    angle = sign * 2 * np.pi * (j2 * k1) / n
    w = Complex(*(add(at, Opcode.BROADCAST, _const(at, part, x.re.shape), shape=x.re.shape,
                      dimensions=(k, k + 1)) for part in (np.cos(angle), np.sin(angle))))
    x = times(at, x, w)
    x = _transpose(at, x, (*range(k), k + 1, k))                    # [.., k1, j2]
    x = _dft(at, x, n2, inverse)                                     # [.., k1, k2]
    # X[k1 + n1 * k2]: k2 major
    return _reshape(at, _transpose(at, x, (*range(k), k + 1, k)), (*lead, n))


def _matrix_dft(at, z: Complex, n: int, inverse: bool) -> Complex:
    j, kk = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    angle = (1.0 if inverse else -1.0) * 2 * np.pi * ((j * kk) % n) / n
    like = Shape.array(z.re.shape.dtype, (n, n))
    c, s = _const(at, np.cos(angle), like), _const(at, np.sin(angle), like)
    numbers = DotDimensionNumbers((), (z.shape.rank - 1,), (), (0,))

    def product(x, m):
        return add(at, Opcode.DOT, x, m, dimension_numbers=numbers)
    # (a + ib)(c + is) = (ac - bs) + i(as + bc)
    return Complex(_sub(at, product(z.re, c), product(z.im, s)),
                   _sum(at, product(z.re, s), product(z.im, c)))
