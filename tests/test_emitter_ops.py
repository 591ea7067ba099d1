"""Per-opcode numeric checks of the emitted code against the numpy evaluator.

One table: each case builds a tiny module with the Builder, the emitter compiles it
for the host, all cases are linked into one shared library (emit_util), and each
case's outputs must match ``xlac.hlo.evaluator`` on the same inputs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pytest

from emit_util import compile_modules
from xlac.hlo import (Builder, ConvDimensionNumbers, DotDimensionNumbers, GatherDimensionNumbers,
                      Module, Opcode, ScatterDimensionNumbers, Shape, Window, dtypes,
                      scalar_computation)
from xlac.hlo.evaluator import evaluate
from xlac.emitter.pooling import plan_pool_rows

rng = np.random.default_rng(0)

F32, F64, S32, S64, U8, U32, PRED = (dtypes.F32, dtypes.F64, dtypes.S32, dtypes.S64, dtypes.U8,
                                     dtypes.U32, dtypes.PRED)


def f32(*dims, lo=-4.0, hi=4.0):
    return rng.uniform(lo, hi, dims).astype(np.float32)


def s32(*dims, lo=-20, hi=20):
    return rng.integers(lo, hi, dims, dtype=np.int32)


def i8(*dims, unsigned=False):
    """Full-range 8-bit integers (products of two reach 2**14; 40 of them 2**19)."""
    info = np.iinfo(np.uint8 if unsigned else np.int8)
    return rng.integers(info.min, info.max, dims, endpoint=True).astype(info.dtype)


SPECIALS = np.array([0.0, -0.0, 1.5, -2.5, 0.5, -0.5, np.nan, np.inf, -np.inf, 3.0, 1e30, -7.25],
                    dtype=np.float32)
NARROW_FLOATS = [d for d in dtypes.ALL if d.is_narrow_float]


def every_code(dtype) -> np.ndarray:
    """Every bit pattern of a narrow type, as an array of that type."""
    return np.arange(1 << dtype.bits, dtype=f"u{dtype.itemsize}").view(dtype.np)


def rounding_probes(dtype, source=np.float32) -> np.ndarray:
    """Values of ``source`` around every rounding decision of ``dtype``: each finite value,
    each midpoint between neighbours, one ulp either side of both, past the largest
    value, the source's subnormals and the special values."""
    with np.errstate(invalid="ignore"):
        v = np.unique(every_code(dtype).astype(np.float64))
    v = v[np.isfinite(v)]
    mids = (v[:-1] + v[1:]) / 2
    top = v[-1] * np.array([1.0625, 1.125, 1.5, 2, 4])
    with np.errstate(over="ignore"):
        points = np.concatenate([v, mids, top, -top]).astype(source)
    fi = np.finfo(source)
    points = np.concatenate([points, np.nextafter(points, np.inf), np.nextafter(points, -np.inf),
                             [0, -0.0, np.inf, -np.inf, np.nan, -np.nan, fi.max, -fi.max,
                              fi.tiny, fi.smallest_subnormal, -fi.smallest_subnormal * 3]])
    return points.astype(source)
INT_EDGES = np.array([0, 7, -7, 2**31 - 1, -2**31, -1, 5, 13], dtype=np.int32)


@dataclass
class Case:
    name: str
    inputs: list
    build: Callable            # build(builder, *parameters) -> root
    tol: float = 0.0           # relative and absolute
    zero_sign: bool = True     # exact cases also compare the sign of zero


def _module(case: Case) -> Module:
    b = Builder(case.name)
    params = [b.parameter(k, Shape.array(dtypes.from_numpy(a.dtype), a.shape), f"in{k}")
              for k, a in enumerate(case.inputs)]
    comp = b.build(case.build(b, *params))
    m = Module(case.name)
    for called in _called(comp):
        m.add_computation(called)
    m.add_computation(comp, entry=True)
    return m


def _called(comp):
    seen = []
    for i in comp.instructions:
        for c in i.called:
            for sub in _called(c) + [c]:
                if sub not in seen:
                    seen.append(sub)
    return seen


def unary(op, x, tol=0.0):
    return Case(f"{op.text}_{x.dtype}".replace("-", "_"), [x], lambda b, p: b.op(op, p), tol)


def binary(op, x, y, name=None, tol=0.0):
    return Case(name or f"{op.text}_{x.dtype}".replace("-", "_"), [x, y],
                lambda b, p, q: b.op(op, p, q), tol)


def convert(x, dtype, name=None):
    return Case(name or f"convert_{x.dtype}_{dtype.name}", [x],
                lambda b, p: b.op(Opcode.CONVERT, p, shape=p.shape.with_dtype(dtype)))


def compare(direction, x, y):
    return Case(f"compare_{direction}_{x.dtype}", [x, y],
                lambda b, p, q: b.compare(p, q, direction))


def _fused_axpy(b, x, y):
    """fusion(x, y) = x * 2 - y, with a broadcast constant inside."""
    fb = Builder("fused_axpy")
    px = fb.parameter(0, x.shape, "x")
    py = fb.parameter(1, y.shape, "y")
    two = fb.broadcast(fb.constant(np.float32(2.0)), x.shape.dims, ())
    fused = fb.build(fb.op(Opcode.ADD, fb.op(Opcode.MULTIPLY, px, two),
                           fb.op(Opcode.NEGATE, py)))
    return b.op(Opcode.FUSION, x, y, called=[fused], kind="kLoop")


def _argmax(b, x):
    """Variadic reduce over axis 1 giving (max value, its index); returns the index."""
    rb = Builder("argmax")
    s, i = Shape.array(F32, ()), Shape.array(S32, ())
    av, ai, bv, bi = (rb.parameter(0, s, "av"), rb.parameter(1, i, "ai"),
                      rb.parameter(2, s, "bv"), rb.parameter(3, i, "bi"))
    take_a = rb.compare(av, bv, "GE")
    reducer = rb.build(rb.tuple([rb.op(Opcode.SELECT, take_a, av, bv),
                                 rb.op(Opcode.SELECT, take_a, ai, bi)]))
    idx = b.iota(Shape.array(S32, x.shape.dims), 1)
    r = b.op(Opcode.REDUCE, x, idx, b.constant(np.float32(-np.inf)), b.constant(np.int32(0)),
             called=[reducer], dimensions=(1,))
    return b.tuple([b.get_tuple_element(r, 0), b.get_tuple_element(r, 1)])


def _comparator(types, direction, key=0):
    """Comparator over operands of ``types``: operand ``key`` compared by ``direction``."""
    cb = Builder(f"compare_{direction}")
    params = [cb.parameter(k, Shape.array(t, ()), f"p{k}")
              for k, t in enumerate(t for t in types for _ in range(2))]
    return cb.build(cb.compare(params[2 * key], params[2 * key + 1], direction))


def _sort(direction, dim, key=0, with_index=True):
    """Sort the parameters (and an s32 iota along ``dim``, which shows stability)."""
    def build(b, *xs):
        xs = list(xs)
        if with_index:
            xs.append(b.iota(Shape.array(S32, xs[0].shape.dims), dim))
        cmp = _comparator([x.shape.dtype for x in xs], direction, key)
        r = b.sort(xs, dim, cmp, is_stable=True)
        if len(xs) == 1:
            return r
        return b.tuple([b.get_tuple_element(r, k) for k in range(len(xs))])
    return build


def _tuple_of(b, t):
    return b.tuple([b.get_tuple_element(t, k) for k in range(len(t.shape.tuple_shapes))])


def _ties(*dims):
    return rng.integers(-3, 4, dims).astype(np.float32)


def _replace(dtype):
    """(old, new) -> new."""
    b = Builder(f"replace_{dtype.name}")
    s = Shape.array(dtype, ())
    b.parameter(0, s, "old")
    return b.build(b.parameter(1, s, "new"))


def _max_via_select():
    b = Builder("max_select")
    s = Shape.array(F32, ())
    x, y = b.parameter(0, s, "x"), b.parameter(1, s, "y")
    return b.build(b.op(Opcode.SELECT, b.compare(x, y, "GT"), x, y))


_ROWS = ScatterDimensionNumbers((1,), (0,), (0,), 1)
# ScatterElements along axis 1 of a rank-2 operand: rows are batching dims.
_ELEMENTS_AXIS1 = ScatterDimensionNumbers((), (1,), (1,), 2, (0,), (0,))

_ADD_F32 = scalar_computation("add_f32", Opcode.ADD, F32)
_MAX_F32 = scalar_computation("max_f32", Opcode.MAXIMUM, F32)

_MAX_S8 = scalar_computation("max_s8", Opcode.MAXIMUM, dtypes.S8)


def _pool(size, stride, pad_low, pad_high, rhs_dilation, reducer):
    """A 2-d pooling window (over the last two dims of NCHW) with ``reducer``:
    "max" (f32, init -inf), "sum" (f32, init 0: average pooling's numerator) or "max_s8"."""
    init, comp = {"max": (np.float32(-np.inf), _MAX_F32), "sum": (np.float32(0), _ADD_F32),
                  "max_s8": (np.int8(-128), _MAX_S8)}[reducer]
    window = Window.make((1, 1, *size), (1, 1, *stride), (0, 0, *pad_low), (0, 0, *pad_high),
                         None, (1, 1, *rhs_dilation))
    return lambda b, p: b.reduce_window(p, b.constant(init), window, comp)


# Unrolled windows with the minor loop split into border and interior: window sizes
# 1-7, strides 1-4, asymmetric and SAME-style padding, dilations, odd sizes; maps wide
# enough for a vectorized interior.
_POOLING_SWEEP = [
    Case(f"pool_{r}_k{k[0]}x{k[1]}_s{s[0]}x{s[1]}_p{pl[0]}{pl[1]}{ph[0]}{ph[1]}_d{d[0]}{d[1]}",
         [i8(1, 2, 13, 37) if r == "max_s8" else f32(1, 2, 13, 37)], _pool(k, s, pl, ph, d, r),
         tol=1e-5 if r == "sum" else 0)
    for r, k, s, pl, ph, d in [
        ("max", (1, 1), (1, 1), (0, 0), (0, 0), (1, 1)),
        ("max", (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
        ("max", (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
        ("max", (2, 2), (2, 2), (0, 0), (1, 1), (1, 1)),
        ("max", (5, 4), (3, 4), (2, 1), (0, 3), (1, 1)),
        ("max", (7, 7), (4, 3), (3, 3), (3, 2), (1, 1)),
        ("max", (3, 3), (2, 3), (2, 2), (2, 2), (2, 2)),
        ("max", (6, 5), (1, 2), (0, 4), (5, 0), (1, 3)),
        ("sum", (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
        ("sum", (4, 7), (4, 1), (1, 3), (2, 3), (1, 1)),
        ("sum", (2, 3), (3, 2), (0, 2), (1, 0), (2, 2)),
        ("max_s8", (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
        ("max_s8", (2, 5), (2, 3), (1, 2), (0, 2), (1, 1)),
        ("sum", (9, 9), (2, 3), (4, 4), (4, 3), (1, 1)),   # over 64 positions: the loop
    ]]


_MIN_F32 = scalar_computation("min_f32", Opcode.MINIMUM, F32)
_MIN_U8 = scalar_computation("min_u8", Opcode.MINIMUM, U8)
_MAX_S32 = scalar_computation("max_s32", Opcode.MAXIMUM, S32)


def _with_specials(x, every=7):
    """``x`` with NaN, +-inf and signed zeros at every ``every``-th element."""
    flat = x.reshape(-1).copy()
    flat[::every] = np.resize(SPECIALS, flat[::every].size)
    return flat.reshape(x.shape)


def _fused_pool(size, stride, pad, init, comp):
    """A loop fusion whose root is a 2-d reduce-window over its parameter (the pooling
    rows read the fusion's operand)."""
    def build(b, p):
        fb = Builder("fused_pool")
        x = fb.parameter(0, p.shape, "x")
        window = Window.make((1, 1, *size), (1, 1, *stride), (0, 0, *pad), (0, 0, *pad))
        fused = fb.build(fb.reduce_window(x, fb.constant(init), window, comp))
        return b.op(Opcode.FUSION, p, called=[fused], kind="kLoop")
    return build


_ADD_S32 = scalar_computation("add_s32", Opcode.ADD, S32)


def _exact(x):
    """``x`` rounded to integers, -0.0 for the zeros: the sums of a window of them (and of
    SPECIALS every 7 elements) are exact in any order, so the pooling rows, which sum in
    another order than the evaluator, agree with it bit for bit, sign of zero included."""
    x = np.round(x)
    return np.where(x == 0, np.float32(-0.0), x).astype(np.float32)


def _average_pool(size, stride, pad_low, pad_high, divisor=None):
    """Average pooling as fusion.py leaves it: a loop fusion whose root divides the window
    sums of its operand 0 by the constant ``divisor`` or, where None, by its operand 1:
    one count per output row and column, which every plane shares."""
    window = Window.make((1, 1, *size), (1, 1, *stride), (0, 0, *pad_low), (0, 0, *pad_high))

    def build(b, p, *counts):
        fb = Builder("average_pool")
        total = fb.reduce_window(fb.parameter(0, p.shape, "x"), fb.constant(np.float32(0)),
                                 window, _ADD_F32)
        dims = total.shape.dims
        if divisor is None:
            c = fb.parameter(1, counts[0].shape, "counts")
            d = fb.broadcast(fb.reshape(c, dims[-2:]), dims, (len(dims) - 2, len(dims) - 1))
        else:
            d = fb.broadcast(fb.constant(np.float32(divisor)), dims, ())
        fused = fb.build(fb.op(Opcode.DIVIDE, total, d))
        return b.op(Opcode.FUSION, p, *counts, called=[fused], kind="kLoop")
    return build


# Max / min pooling rows (emitter/pooling.py): NaN and infinities in the windows, padding
# at init, a finite init that joins every window, min, 8-bit lanes, a 1-d pool, rows
# narrower than a vector (lanes halved), a row of one vector plus one element, a loop
# fusion's root; odd sizes throughout.
_POOL_ROWS = [
    Case("pool_rows_max_specials", [_with_specials(f32(2, 3, 17, 45))],
         _pool((3, 3), (2, 2), (1, 1), (1, 1), (1, 1), "max")),
    Case("pool_rows_max_specials_dilated", [_with_specials(f32(1, 2, 19, 41), 5)],
         _pool((3, 2), (1, 3), (2, 1), (0, 2), (2, 3), "max")),
    Case("pool_rows_max_finite_init", [f32(1, 2, 11, 23)],
         lambda b, p: b.reduce_window(p, b.constant(np.float32(0.25)),
                                      Window.make((1, 1, 3, 3), (1, 1, 2, 2), (0, 0, 1, 1),
                                                  (0, 0, 1, 1)), _MAX_F32)),
    Case("pool_rows_min_specials", [_with_specials(f32(1, 3, 9, 33), 4)],
         lambda b, p: b.reduce_window(p, b.constant(np.float32(np.inf)),
                                      Window.make((1, 1, 2, 4), (1, 1, 1, 4), (0, 0, 1, 0),
                                                  (0, 0, 0, 3)), _MIN_F32)),
    Case("pool_rows_min_u8_finite_init", [i8(1, 2, 7, 70, unsigned=True)],
         lambda b, p: b.reduce_window(p, b.constant(np.uint8(200)),
                                      Window.make((1, 1, 3, 3), (1, 1, 2, 2), (0, 0, 1, 1),
                                                  (0, 0, 1, 1)), _MIN_U8)),
    Case("pool_rows_max_s32_edges", [np.resize(INT_EDGES, (1, 2, 9, 40))],
         lambda b, p: b.reduce_window(p, b.constant(np.int32(-2**31)),
                                      Window.make((1, 1, 3, 2), (1, 1, 2, 2), (0, 0, 1, 0),
                                                  (0, 0, 1, 1)), _MAX_S32)),
    Case("pool_rows_1d", [_with_specials(f32(2, 5, 51), 9)],
         lambda b, p: b.reduce_window(p, b.constant(np.float32(-np.inf)),
                                      Window.make((1, 1, 5), (1, 1, 2), (0, 0, 2), (0, 0, 2)),
                                      _MAX_F32)),
    Case("pool_rows_narrow", [f32(1, 3, 7, 5)],
         _pool((3, 3), (2, 2), (1, 1), (1, 1), (1, 1), "max")),
    Case("pool_rows_one_vector_and_one", [f32(1, 2, 6, 34)],
         _pool((2, 2), (2, 2), (0, 0), (0, 0), (1, 1), "max")),
    Case("pool_rows_fused", [_with_specials(f32(1, 4, 15, 29), 6)],
         _fused_pool((3, 3), (2, 2), (1, 1), np.float32(-np.inf), _MAX_F32)),
    # sums: a finite init joins once and once per padded position; -0.0, the identity,
    # not at all (+0.0 would turn a window of -0.0 into +0.0); integers wrap
    Case("pool_rows_sum_finite_init", [_exact(_with_specials(f32(1, 3, 11, 31)))],
         lambda b, p: b.reduce_window(p, b.constant(np.float32(0.5)),
                                      Window.make((1, 1, 3, 3), (1, 1, 2, 2), (0, 0, 1, 1),
                                                  (0, 0, 1, 1)), _ADD_F32)),
    Case("pool_rows_sum_negative_zero_init", [_exact(f32(1, 2, 9, 37, lo=-0.6, hi=0.6))],
         lambda b, p: b.reduce_window(p, b.constant(np.float32(-0.0)),
                                      Window.make((1, 1, 2, 3), (1, 1, 1, 2), (0, 0, 1, 1),
                                                  (0, 0, 0, 1)), _ADD_F32)),
    Case("pool_rows_sum_s32_wraps", [np.resize(INT_EDGES, (1, 2, 9, 40))],
         lambda b, p: b.reduce_window(p, b.constant(np.int32(3)),
                                      Window.make((1, 1, 3, 2), (1, 1, 2, 2), (0, 0, 1, 0),
                                                  (0, 0, 1, 1)), _ADD_S32)),
    # average pooling: the divide on the row vectors, by the counts with padding (ONNX's
    # count_include_pad either way gives other counts), by 9 (no exact reciprocal), by 4
    # (LLVM multiplies by 0.25, the same bits); ceil mode pads the high side only
    Case("pool_rows_average_counts",
         [_exact(_with_specials(f32(2, 3, 13, 29))),
          np.round(f32(1, 1, 7, 15, lo=1, hi=9))], _average_pool((3, 3), (2, 2), (1, 1), (1, 1))),
    Case("pool_rows_average_ceil_mode", [_exact(_with_specials(f32(1, 3, 12, 30), 5))],
         _average_pool((3, 3), (2, 2), (0, 0), (1, 1), divisor=9)),
    Case("pool_rows_average_2x2", [_exact(_with_specials(f32(1, 5, 14, 34), 4))],
         _average_pool((2, 2), (2, 2), (0, 0), (0, 0), divisor=4)),
    Case("pool_rows_average_narrow_counts", [_exact(f32(1, 2, 7, 7)),
                                             np.round(f32(1, 1, 7, 7, lo=1, hi=9))],
         _average_pool((3, 3), (1, 1), (1, 1), (1, 1))),
]


CASES = [
    # element-wise binary
    binary(Opcode.ADD, f32(3, 5), f32(3, 5)),
    binary(Opcode.SUBTRACT, s32(17), s32(17)),
    binary(Opcode.MULTIPLY, f32(2, 3, 4), f32(2, 3, 4)),
    binary(Opcode.DIVIDE, f32(33), f32(33, lo=0.5, hi=3.0)),
    binary(Opcode.DIVIDE, INT_EDGES, np.array([2, 0, 2, -1, -1, 3, -2, 5], np.int32)),
    binary(Opcode.DIVIDE, np.array([7, 9, 200, 0], np.uint8), np.array([2, 0, 7, 0], np.uint8)),
    binary(Opcode.REMAINDER, INT_EDGES, np.array([2, 0, 3, -1, -1, 3, -2, 5], np.int32)),
    binary(Opcode.REMAINDER, f32(12), np.array([1.5, -2, 3, 0.7] * 3, np.float32)),
    binary(Opcode.MAXIMUM, SPECIALS, SPECIALS[::-1].copy()),
    binary(Opcode.MINIMUM, SPECIALS, SPECIALS[::-1].copy()),
    binary(Opcode.MAXIMUM, s32(9), s32(9)),
    binary(Opcode.MINIMUM, np.array([0, 200, 3], np.uint8), np.array([255, 100, 4], np.uint8)),
    binary(Opcode.POWER, s32(10, lo=-3, hi=4), s32(10, lo=-2, hi=6)),
    binary(Opcode.AND, s32(8), s32(8)),
    binary(Opcode.OR, np.array([True, False, True, False]), np.array([True, True, False, False])),
    binary(Opcode.XOR, s32(8), s32(8)),
    binary(Opcode.SHIFT_LEFT, s32(8), np.array([0, 1, 31, 32, 33, -1, 5, 100], np.int32)),
    binary(Opcode.SHIFT_RIGHT_ARITHMETIC, INT_EDGES, np.array([0, 1, 31, 32, 40, -1, 2, 3],
                                                              np.int32)),
    binary(Opcode.SHIFT_RIGHT_LOGICAL, INT_EDGES, np.array([0, 1, 31, 32, 40, -1, 2, 3],
                                                           np.int32)),
    *[compare(d, SPECIALS, np.roll(SPECIALS, 3)) for d in ("EQ", "NE", "LT", "LE", "GT", "GE")],
    compare("LT", s32(10), s32(10)),
    compare("LT", np.array([0, 1 << 31, 5], np.uint32), np.array([1, 3, 5], np.uint32)),
    # element-wise unary
    unary(Opcode.ABS, SPECIALS),
    unary(Opcode.ABS, INT_EDGES),
    unary(Opcode.NEGATE, SPECIALS),
    unary(Opcode.NEGATE, s32(6)),
    # XLA: sign(-0) = -0; the evaluator's np.sign gives +0, so zero signs are not compared.
    Case("sign_f32", [SPECIALS], lambda b, p: b.op(Opcode.SIGN, p), zero_sign=False),
    unary(Opcode.SIGN, INT_EDGES),
    unary(Opcode.NOT, np.array([True, False])),
    unary(Opcode.NOT, s32(5)),
    unary(Opcode.FLOOR, SPECIALS),
    unary(Opcode.CEIL, SPECIALS),
    # round(-0) is -0 (C round, XLA); the evaluator gives +0: zero signs not compared.
    Case("round_nearest_afz_f32", [SPECIALS], lambda b, p: b.op(Opcode.ROUND_NEAREST_AFZ, p),
         zero_sign=False),
    unary(Opcode.ROUND_NEAREST_EVEN, SPECIALS),
    unary(Opcode.SQRT, f32(20, lo=0, hi=9)),
    unary(Opcode.RSQRT, f32(20, lo=0.1, hi=9), tol=1e-6),
    unary(Opcode.IS_FINITE, SPECIALS),
    *[unary(op, f32(40, lo=lo, hi=hi), tol=2e-6)
      for op, lo, hi in ((Opcode.EXP, -20, 20), (Opcode.LOG, 0.01, 50), (Opcode.TANH, -6, 6),
                         (Opcode.LOGISTIC, -10, 10), (Opcode.SINE, -6, 6),
                         (Opcode.COSINE, -6, 6), (Opcode.ERF, -3, 3), (Opcode.ATAN, -9, 9),
                         (Opcode.ASIN, -1, 1), (Opcode.ACOS, -1, 1), (Opcode.SINH, -9, 9),
                         (Opcode.COSH, -9, 9), (Opcode.ASINH, -9, 9), (Opcode.ACOSH, 1, 9),
                         (Opcode.ATANH, -0.99, 0.99))],
    binary(Opcode.POWER, f32(16, lo=0.1, hi=3), f32(16, lo=-2, hi=2), name="power_f32",
           tol=1e-5),
    # convert
    convert(np.array([1.5, -2.7, 3e9, -3e9, np.nan, 0.0], np.float32), S32),
    convert(np.array([1.5, -2.7, 300.0, -1.0, np.nan], np.float32), U8),
    convert(s32(7), F32),
    convert(np.array([1.0, 1.00390625, 1.01171875, -3.3e38, np.nan, 1e-40], np.float32),
            dtypes.BF16),
    convert(f32(9).astype(dtypes.BF16.np), F32),
    convert(np.array([1.0, 65504.0, 1e6, -2.5e-8, 0.1], np.float32), dtypes.F16),
    convert(f32(9).astype(np.float16), F32),
    convert(SPECIALS, PRED),
    convert(np.array([True, False, True]), F32),
    convert(np.array([300, -129, 5], np.int64), dtypes.S8),
    convert(np.array([-1, 5], np.int8), U32),
    convert(np.array([200, 5], np.uint8), S32),
    convert(f32(5), F64),
    # every narrow float: each code decoded; rounding at each decision from f32 and f64
    *[convert(every_code(d), F32, f"decode_{d.name}") for d in NARROW_FLOATS],
    *[convert(every_code(d), F64) for d in NARROW_FLOATS if d.bits == 8],
    *[convert(rounding_probes(d), d, f"round_f32_to_{d.name}") for d in NARROW_FLOATS],
    *[convert(rounding_probes(d, np.float64), d, f"round_f64_to_{d.name}")
      for d in NARROW_FLOATS],
    convert(every_code(dtypes.F8E4M3FN), dtypes.F8E5M2FNUZ),
    convert(every_code(dtypes.F8E5M2), dtypes.F16),
    convert(np.array([-9.5, -8.0, 7.9, 300.0, np.nan, 2.5], np.float32), dtypes.S4),
    convert(np.array([-1.0, 15.9, 16.0, 3.5], np.float32), dtypes.U4),
    convert(np.array([-3, -2, 1, 2, 300], np.int32), dtypes.S2),
    convert(np.arange(16, dtype=np.uint8).view(dtypes.S4.np), S32),
    convert(np.arange(4, dtype=np.uint8).view(dtypes.U2.np), F32),
    convert(np.array([7, -8, 0], dtypes.S4.np), dtypes.F8E4M3FN),
    convert(np.array([[1, -200, 3]], np.int64), dtypes.F8E8M0FNU),
    Case("add_bf16", [f32(6).astype(dtypes.BF16.np)] * 2, lambda b, p, q: b.op(Opcode.ADD, p, q)),
    Case("multiply_f16", [f32(6).astype(np.float16), f32(6).astype(np.float16)],
         lambda b, p, q: b.op(Opcode.MULTIPLY, p, q)),
    Case("multiply_f8e4m3fn", [rounding_probes(dtypes.F8E4M3FN).astype(dtypes.F8E4M3FN.np)] * 2,
         lambda b, p, q: b.op(Opcode.MULTIPLY, p, q)),
    Case("add_f4e2m1fn", [every_code(dtypes.F4E2M1FN), every_code(dtypes.F4E2M1FN)[::-1].copy()],
         lambda b, p, q: b.op(Opcode.ADD, p, q)),
    Case("add_s4", [every_code(dtypes.S4), every_code(dtypes.S4)[::-1].copy()],
         lambda b, p, q: b.op(Opcode.ADD, p, q)),
    *[binary(op, every_code(dt), (np.arange(16) % (1 << dt.bits)).astype(np.uint8)
             .view(dt.np)[:1 << dt.bits], name=f"{op.text}_{dt.name}".replace("-", "_"))
      for op in (Opcode.SHIFT_LEFT, Opcode.SHIFT_RIGHT_LOGICAL, Opcode.SHIFT_RIGHT_ARITHMETIC)
      for dt in (dtypes.S4, dtypes.U2)],
    binary(Opcode.DIVIDE, every_code(dtypes.S4), np.roll(every_code(dtypes.S4), 5),
           name="divide_s4"),
    compare("LT", every_code(dtypes.S4), np.roll(every_code(dtypes.S4), 3)),
    compare("GE", every_code(dtypes.F8E5M2FNUZ), np.roll(every_code(dtypes.F8E5M2FNUZ), 7)),
    unary(Opcode.NEGATE, every_code(dtypes.F8E4M3FNUZ)),
    unary(Opcode.NOT, every_code(dtypes.U4)),
    unary(Opcode.ABS, every_code(dtypes.S2)),
    Case("bitcast_convert_f32_s32", [SPECIALS],
         lambda b, p: b.op(Opcode.BITCAST_CONVERT, p, shape=p.shape.with_dtype(S32))),
    Case("bitcast_convert_s4_f4e2m1fn", [every_code(dtypes.S4)],
         lambda b, p: b.op(Opcode.BITCAST_CONVERT, p, shape=p.shape.with_dtype(dtypes.F4E2M1FN))),
    Case("bitcast_convert_pred_u8", [np.array([True, False, True])],
         lambda b, p: b.op(Opcode.BITCAST_CONVERT, p, shape=p.shape.with_dtype(U8))),
    # ternary and sources
    Case("select", [np.array([True, False, True]), f32(3), f32(3)],
         lambda b, c, p, q: b.op(Opcode.SELECT, c, p, q)),
    Case("clamp_scalar_bounds", [SPECIALS],
         lambda b, p: b.op(Opcode.CLAMP, b.constant(np.float32(-1)), p,
                           b.constant(np.float32(2)))),
    Case("clamp_s32", [s32(6), s32(6), s32(6, lo=20, hi=30)],
         lambda b, lo, p, hi: b.op(Opcode.CLAMP, lo, p, hi)),
    Case("iota_f32", [], lambda b: b.iota(Shape.array(F32, (3, 4)), 1)),
    Case("constant_table", [f32(2, 3)],
         lambda b, p: b.op(Opcode.ADD, p, b.constant(f32(2, 3)))),
    # movement
    Case("broadcast", [f32(3)], lambda b, p: b.broadcast(p, (2, 3, 4), (1,))),
    Case("broadcast_degenerate", [f32(1, 4)], lambda b, p: b.broadcast(p, (3, 4), (0, 1))),
    Case("reshape", [f32(2, 3, 4)], lambda b, p: b.op(Opcode.NEGATE,
                                                       b.reshape(p, (4, 6)))),
    # a run that splits (12 -> 3x4) beside one that merges (2x5 -> 10) and unit dims
    Case("reshape_split_and_merge_runs", [f32(12, 1, 2, 5)],
         lambda b, p: b.op(Opcode.NEGATE, b.reshape(p, (3, 4, 10, 1)))),
    Case("reshape_materialized", [f32(6, 4)],
         lambda b, p: b.tuple([b.reshape(p, (2, 12)), b.op(Opcode.NEGATE, p)])),
    Case("bitcast", [f32(4, 6)],
         lambda b, p: b.op(Opcode.BITCAST, p, shape=Shape.array(F32, (24,)))),
    Case("transpose", [f32(2, 3, 4)], lambda b, p: b.transpose(p, (2, 0, 1))),
    Case("slice", [f32(10, 9)], lambda b, p: b.slice(p, (1, 2), (9, 9), (3, 2))),
    Case("reverse", [f32(3, 5)], lambda b, p: b.reverse(p, (1,))),
    Case("pad", [f32(3, 4)],
         lambda b, p: b.pad(p, b.constant(np.float32(9)), (2, -1), (1, 2), (1, 2))),
    Case("concatenate", [f32(2, 3), f32(2, 1), f32(2, 4)],
         lambda b, p, q, r: b.concatenate([p, q, r], 1)),
    Case("copy", [s32(4, 4)], lambda b, p: b.op(Opcode.COPY, p)),
    Case("gather_rows", [f32(5, 3), np.array([[4], [0], [7], [-2]], np.int32)],
         lambda b, t, i: b.gather(t, i, GatherDimensionNumbers((1,), (0,), (0,), 1), (1, 3))),
    Case("gather_batching_dims", [f32(3, 5, 2), np.array([[4, 0], [1, 9], [-1, 2]], np.int64)],
         lambda b, t, i: b.gather(t, i, GatherDimensionNumbers((2,), (1,), (1,), 2, (0,), (0,)),
                                  (1, 1, 2))),
    Case("gather_u8_indices", [f32(300), np.array([[255], [0], [3]], np.uint8)],
         lambda b, t, i: b.gather(t, i, GatherDimensionNumbers((), (0,), (0,), 1), (1,))),
    # scatter: duplicates accumulate, windows that do not fit are skipped
    Case("scatter_add_rows", [f32(6, 3), np.array([[5], [0], [5], [6], [-1]], np.int32),
                              f32(5, 3)],
         lambda b, x, i, u: b.scatter(x, i, u, _ROWS, _ADD_F32), tol=1e-6),
    Case("scatter_replace_elements", [s32(4, 5), np.array([[0, 4], [3, 3], [1, 2], [9, 0]]),
                                      s32(4, 2)],
         lambda b, x, i, u: b.scatter(x, i, u, _ELEMENTS_AXIS1, _replace(S32))),
    Case("scatter_select_body_in_place", [f32(4, 5), np.array([[1, 1], [0, 4], [2, 2], [3, 0]]),
                                          f32(4, 2)],
         lambda b, x, i, u: b.scatter(b.op(Opcode.NEGATE, x), i, u, _ELEMENTS_AXIS1,
                                      _max_via_select())),
    Case("scatter_into_constant", [np.array([[2], [0]], np.int64), f32(2, 3)],
         lambda b, i, u: b.scatter(b.constant(f32(4, 3)), i, u, _ROWS, _ADD_F32), tol=1e-6),
    # reductions
    Case("reduce_sum", [f32(3, 4, 5)],
         lambda b, p: b.reduce(p, b.constant(np.float32(0)), (0, 2), _ADD_F32), tol=1e-6),
    Case("reduce_max_all", [f32(7, 3)],
         lambda b, p: b.reduce(p, b.constant(np.float32(-np.inf)), (0, 1), _MAX_F32)),
    Case("reduce_argmax", [f32(4, 6)], _argmax),
    # A long innermost dim folds into lanes (37 = 4 x 8 + a tail of 5); a NaN anywhere
    # still wins the max; an init that is no identity keeps the sum in one lane.
    Case("reduce_sum_lanes_with_tail", [f32(3, 37)],
         lambda b, p: b.reduce(p, b.constant(np.float32(0)), (1,), _ADD_F32), tol=1e-5),
    Case("reduce_max_lanes_nan", [np.where(np.arange(80).reshape(2, 40) == 53, np.nan,
                                           f32(2, 40)).astype(np.float32)],
         lambda b, p: b.reduce(p, b.constant(np.float32(-np.inf)), (1,), _MAX_F32)),
    Case("reduce_sum_lanes_outer_dims", [f32(2, 3, 20)],
         lambda b, p: b.reduce(p, b.constant(np.float32(0)), (0, 2), _ADD_F32), tol=1e-5),
    Case("reduce_sum_init_once", [f32(2, 33)],
         lambda b, p: b.reduce(p, b.constant(np.float32(0.5)), (1,), _ADD_F32), tol=1e-6),
    Case("reduce_window_maxpool", [f32(1, 1, 5, 6)],
         lambda b, p: b.reduce_window(p, b.constant(np.float32(-np.inf)),
                                      Window.make((1, 1, 2, 2), (1, 1, 2, 2), (0, 0, 0, 1),
                                                  (0, 0, 1, 0)), _MAX_F32)),
    Case("reduce_window_overlapping_unpadded", [f32(1, 3, 11, 37)],
         lambda b, p: b.reduce_window(p, b.constant(np.float32(-np.inf)),
                                      Window.make((1, 1, 3, 3), (1, 1, 2, 2)), _MAX_F32)),
    Case("reduce_window_dilated_sum", [f32(7, 6)],
         lambda b, p: b.reduce_window(p, b.constant(np.float32(0)),
                                      Window.make((2, 3), (2, 1), (1, 0), (0, 1), (2, 1),
                                                  (1, 2)), _ADD_F32), tol=1e-6),
    # XLA pads with the init value: a non-identity init counts once per padded position
    Case("reduce_window_padded_sum_nonzero_init", [f32(5, 6)],
         lambda b, p: b.reduce_window(p, b.constant(np.float32(0.5)),
                                      Window.make((3, 2), (2, 1), (1, 0), (2, 1), (2, 1),
                                                  (1, 1)), _ADD_F32), tol=1e-6),
    *_POOLING_SWEEP,
    *_POOL_ROWS,
    # sort: rows of at most 16 (insertion only), and longer rows with an even and an odd
    # number of merge passes, along the last and a strided dim; ties show stability
    Case("sort_short_rows", [_ties(5, 7)], _sort("LT", 1)),
    Case("sort_even_passes", [_ties(3, 50)], _sort("GT", 1)),
    Case("sort_odd_passes_strided", [s32(70, 3, lo=-5, hi=5)], _sort("LT", 0)),
    Case("sort_one_operand", [f32(2, 129)], _sort("GT", 1, with_index=False)),
    Case("sort_by_second_operand", [f32(4, 33), s32(4, 33, lo=0, hi=4)], _sort("GT", 1, key=1)),
    Case("sort_constant_operand", [f32(21)],
         lambda b, p: _sort("LT", 0)(b, b.constant(_ties(21)), p)),
    # topk: heaps of k = 1, 5 and the whole row; ties, NaN and -0 show the total order
    Case("topk_largest_ties", [_ties(6, 50)],
         lambda b, p: _tuple_of(b, b.topk(p, 5, largest=True))),
    Case("topk_smallest_specials", [np.tile(SPECIALS, (3, 2))],
         lambda b, p: _tuple_of(b, b.topk(p, 7, largest=False))),
    Case("topk_whole_row_s32", [s32(4, 9, lo=-3, hi=3)],
         lambda b, p: _tuple_of(b, b.topk(p, 9, largest=True))),
    Case("topk_k1_u8_constant", [],
         lambda b: _tuple_of(b, b.topk(b.constant(rng.integers(0, 255, (3, 40)).astype(
             np.uint8)), 1, largest=True))),
    Case("topk_3d_f16", [f32(2, 3, 17).astype(np.float16)],
         lambda b, p: _tuple_of(b, b.topk(p, 4, largest=True))),
    # dynamic slices: starts clamped into range; an update in place writes only its window
    Case("dynamic_slice", [f32(5, 6), np.array(3, np.int32), np.array(-2, np.int32)],
         lambda b, x, i, j: b.op(Opcode.DYNAMIC_SLICE, x, i, j, dynamic_slice_sizes=(3, 4))),
    Case("dynamic_slice_u8_index", [f32(4, 6), np.array(200, np.uint8), np.array(1, np.uint8)],
         lambda b, x, i, j: b.op(Opcode.DYNAMIC_SLICE, x, i, j, dynamic_slice_sizes=(2, 2))),
    Case("dynamic_update_slice", [f32(5, 6), f32(2, 3), np.array(4, np.int32),
                                  np.array(1, np.int32)],
         lambda b, x, u, i, j: b.op(Opcode.DYNAMIC_UPDATE_SLICE, x, u, i, j)),
    Case("dynamic_update_slice_in_place", [f32(5, 6), f32(1, 6), np.array(2, np.int64)],
         lambda b, x, u, i: b.op(Opcode.DYNAMIC_UPDATE_SLICE, b.op(Opcode.NEGATE, x), u, i,
                                 b.constant(np.int64(0)))),
    # fusion and the kernels behind dot / convolution
    Case("fusion", [f32(4, 8), f32(4, 8)], _fused_axpy),
    Case("dot", [f32(5, 7), f32(7, 3)],
         lambda b, p, q: b.dot(p, q, DotDimensionNumbers((), (1,), (), (0,))), tol=1e-5),
    Case("convolution", [f32(1, 2, 5, 5), f32(3, 2, 3, 3)],
         lambda b, x, k: b.convolution(x, k, Window.make((3, 3), pad_low=(1, 1),
                                                         pad_high=(1, 1)),
                                       ConvDimensionNumbers.nchw(2)), tol=1e-5),
    # quantized arithmetic: u8 x s8 operands accumulate in s32 (XLA's preferred type)
    Case("dot_u8_s8_to_s32", [i8(5, 40, unsigned=True), i8(40, 3)],
         lambda b, p, q: b.op(Opcode.DOT, p, q, shape=Shape.array(S32, (5, 3)),
                              dimension_numbers=DotDimensionNumbers((), (1,), (), (0,)))),
    Case("convolution_s8_s8_to_s32", [i8(1, 2, 5, 5), i8(3, 2, 3, 3)],
         lambda b, x, k: b.op(Opcode.CONVOLUTION, x, k, shape=Shape.array(S32, (1, 3, 5, 5)),
                              window=Window.make((3, 3), pad_low=(1, 1), pad_high=(1, 1)),
                              dimension_numbers=ConvDimensionNumbers.nchw(2),
                              feature_group_count=1, batch_group_count=1)),
    # outputs: a parameter returned directly and one value returned twice are copied
    Case("outputs_copied", [f32(3)],
         lambda b, p: (lambda n: b.tuple([n, p, n]))(b.op(Opcode.NEGATE, p))),
]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    modules = {c.name: _module(c) for c in CASES}
    return compile_modules(modules, tmp_path_factory.mktemp("ops"))


@pytest.mark.parametrize("case", _POOL_ROWS, ids=lambda c: c.name)
def test_pool_rows_cases_take_the_pooling_rows(case):
    """The cases above test emitter/pooling.py only if it takes them (AVX-512 or not)."""
    for vector_bytes in (16, 32, 64):
        assert plan_pool_rows(_module(case).entry.root, vector_bytes) is not None


def test_pool_rows_do_not_take_a_fusion_writing_another_layout():
    """A loop fusion stores in its own layout (here channels-minor, as quantized maps
    are), which its reduce-window body does not show: the element loop computes it."""
    case = _POOL_ROWS[-1]
    root = _module(case).entry.root
    assert plan_pool_rows(root, 64) is not None
    root.shape = Shape.array(root.shape.dtype, root.shape.dims, (1, 3, 2, 0))
    assert plan_pool_rows(root, 64) is None


def test_pool_rows_do_not_take_an_average_by_values_of_each_plane():
    """A divisor that varies along the planes is no count the rows read per row."""
    case = next(c for c in _POOL_ROWS if c.name == "pool_rows_average_counts")
    root = _module(case).entry.root
    assert plan_pool_rows(root, 64).counts == 1
    fused = root.called[0]
    d = fused.root.operands[1]
    d.attrs["dimensions"] = (1, 3)          # counts[0, 0, i, j] read at channel i, column j
    d.operands[0].shape = d.operands[0].shape.__class__.array(F32, (3, 15))
    assert plan_pool_rows(root, 64) is None


def test_case_names_are_unique():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_op_matches_evaluator(case, compiled):
    model = compiled[case.name]
    got = model(*case.inputs)
    want = evaluate(model.module, case.inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if dtypes.from_numpy(g.dtype).is_float:
            with np.errstate(invalid="ignore"):       # NaNs of the narrow types
                g, w = g.astype(np.float64), w.astype(np.float64)
            np.testing.assert_allclose(g, w, rtol=case.tol, atol=case.tol, equal_nan=True)
            if case.tol == 0 and case.zero_sign:
                number = ~np.isnan(w)          # a NaN's sign means nothing
                assert np.array_equal(np.signbit(g)[number], np.signbit(w)[number])
        else:
            np.testing.assert_array_equal(g, w)
