"""The numpy reference evaluator: one table of hand-checked cases per opcode, plus
convolution, gather and reduce-window checked against naive loops written from the
XLA / StableHLO definitions."""
import itertools
import math
from typing import NamedTuple

import ml_dtypes
import numpy as np
import pytest

from xlac.hlo import (Builder, ConvDimensionNumbers, DotDimensionNumbers,
                      GatherDimensionNumbers, Module, Opcode, PaddingConfig,
                      ScatterDimensionNumbers, Shape, SliceSpec, Window, XlacError, dtypes,
                      scalar_computation)
from xlac.hlo.evaluator import RULES, evaluate, evaluate_computation, evaluate_instruction

f32, s32, u8, u32, s8, pred = (np.float32, np.int32, np.uint8, np.uint32, np.int8, np.bool_)
INT_MIN, INT_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max


def a(values, dtype=f32):
    return np.array(values, dtype=dtype)


def shape_of(x: np.ndarray, layout=None) -> Shape:
    return Shape.array(dtypes.from_numpy(x.dtype), x.shape, layout)


def module_of(b: Builder, root, called=()) -> Module:
    m = Module("test")
    for c in called:
        m.add_computation(c)
    m.add_computation(b.build(root), entry=True)
    return m


def run(opcode, *operands, shape=None, called=(), **attrs):
    """Evaluate main(p0, p1, ...) = opcode(p0, p1, ...) through ``evaluate``."""
    b = Builder("main")
    params = [b.parameter(i, shape_of(x)) for i, x in enumerate(operands)]
    root = b.op(opcode, *params, shape=shape, called=called, **attrs)
    out = evaluate(module_of(b, root, called), list(operands))
    return out if root.shape.is_tuple else out[0]


def reducer(opcode, dtype=dtypes.F32):
    return scalar_computation(opcode.text, opcode, dtype)


def max_via_select(dtype=dtypes.F32):
    """max(x, y) written as select(x > y, x, y): not a recognised reducer."""
    b = Builder("max_select")
    s = Shape.array(dtype, ())
    x, y = b.parameter(0, s), b.parameter(1, s)
    return b.build(b.op(Opcode.SELECT, b.compare(x, y, "GT"), x, y))


def add_through_reshapes():
    """x + y with x reshaped to [1] and back: a body the vectorised fold may not run."""
    b = Builder("add_reshaped")
    s = Shape.array(dtypes.F32, ())
    x, y = b.parameter(0, s), b.parameter(1, s)
    x = b.op(Opcode.RESHAPE, b.op(Opcode.RESHAPE, x, shape=s.with_dims((1,))), shape=s)
    return b.build(b.op(Opcode.ADD, x, y))


def argmax_reducer():
    """(value, index) pairs: keep the larger value, the first index on ties."""
    b = Builder("argmax")
    fs, is_ = Shape.array(dtypes.F32, ()), Shape.array(dtypes.S32, ())
    v0, i0 = b.parameter(0, fs), b.parameter(1, is_)
    v1, i1 = b.parameter(2, fs), b.parameter(3, is_)
    gt, eq = b.compare(v1, v0, "GT"), b.compare(v1, v0, "EQ")
    take = b.op(Opcode.OR, gt, b.op(Opcode.AND, eq, b.compare(i1, i0, "LT")))
    return b.build(b.tuple([b.op(Opcode.SELECT, take, v1, v0),
                            b.op(Opcode.SELECT, take, i1, i0)]))


def comparator(direction, types=(dtypes.F32,), key=0, reshaped=False):
    """A sort comparator: operand ``key`` of ``types`` compared by ``direction``;
    ``reshaped`` routes it through reshapes (a body the vectorised path may not run)."""
    b = Builder(f"compare_{direction}")
    ps = [b.parameter(k, Shape.array(t, ())) for k, t in enumerate(t for t in types
                                                                     for _ in range(2))]
    lhs, rhs = ps[2 * key], ps[2 * key + 1]
    if reshaped:
        lhs = b.reshape(b.reshape(lhs, (1,)), ())
    return b.build(b.compare(lhs, rhs, direction))


def replace_computation(dtype=dtypes.F32):
    """(old, new) -> new: a scatter that overwrites."""
    b = Builder("replace")
    s = Shape.array(dtype, ())
    b.parameter(0, s, "old")
    return b.build(b.parameter(1, s, "new"))


def fused_multiply_add():
    b = Builder("fused")
    s = Shape.array(dtypes.F32, (2,))
    x, y = b.parameter(0, s), b.parameter(1, s)
    return b.build(b.op(Opcode.ADD, b.op(Opcode.MULTIPLY, x, y), x))


def negate_computation(name):
    b = Builder(name)
    return b.build(b.op(Opcode.NEGATE, b.parameter(0, Shape.array(dtypes.F32, (2,)))))


class Case(NamedTuple):
    id: str
    opcode: Opcode
    operands: tuple
    expected: object
    attrs: dict = {}
    shape: Shape | None = None
    called: tuple = ()


def C(id, opcode, operands, expected, shape=None, called=(), **attrs):
    return Case(id, opcode, tuple(operands), expected, attrs, shape, tuple(called))


M = a([[1, 2, 3], [4, 5, 6]])
NAN, INF = float("nan"), float("inf")

CASES = [
    # element-wise unary
    C("abs", Opcode.ABS, [a([-1.5, 2])], a([1.5, 2])),
    C("abs_s32", Opcode.ABS, [a([-3, 4], s32)], a([3, 4], s32)),
    C("cbrt", Opcode.CBRT, [a([8, -27])], a([2, -3])),
    C("ceil", Opcode.CEIL, [a([1.2, -1.2])], a([2, -1])),
    C("cosine", Opcode.COSINE, [a([0, math.pi])], a([1, -1])),
    C("erf", Opcode.ERF, [a([0, 1, -2])], a([0, 0.8427007929, -0.9953222650])),
    C("exp", Opcode.EXP, [a([0, 1])], a([1, math.e])),
    C("expm1", Opcode.EXPM1, [a([0, 1e-10])], a([0, 1e-10])),
    C("floor", Opcode.FLOOR, [a([1.7, -1.2])], a([1, -2])),
    C("is_finite", Opcode.IS_FINITE, [a([1, INF, NAN])], a([True, False, False], pred)),
    C("log", Opcode.LOG, [a([1, math.e])], a([0, 1])),
    C("log1p", Opcode.LOG1P, [a([0, 1e-10])], a([0, 1e-10])),
    C("logistic", Opcode.LOGISTIC, [a([0, -100, 100])], a([0.5, 0, 1])),
    C("negate", Opcode.NEGATE, [a([1, -2])], a([-1, 2])),
    C("not_pred", Opcode.NOT, [a([True, False], pred)], a([False, True], pred)),
    C("not_s32", Opcode.NOT, [a([0, 5], s32)], a([-1, -6], s32)),
    C("round_afz", Opcode.ROUND_NEAREST_AFZ, [a([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, 2.4])],
      a([1, 2, 3, -1, -3, 0, 2])),
    C("round_even", Opcode.ROUND_NEAREST_EVEN, [a([0.5, 1.5, 2.5, -0.5, 2.6])],
      a([0, 2, 2, -0.0, 3])),
    C("rsqrt", Opcode.RSQRT, [a([4, 0.25])], a([0.5, 2])),
    C("sign", Opcode.SIGN, [a([-3, 0, 2])], a([-1, 0, 1])),
    C("sign_s32", Opcode.SIGN, [a([-3, 0, 2], s32)], a([-1, 0, 1], s32)),
    C("sine", Opcode.SINE, [a([0, math.pi / 2])], a([0, 1])),
    C("sqrt", Opcode.SQRT, [a([4, 9])], a([2, 3])),
    C("tan", Opcode.TAN, [a([0, math.pi / 4])], a([0, 1])),
    C("tanh", Opcode.TANH, [a([0, 100])], a([0, 1])),
    C("convert_f32_s32", Opcode.CONVERT, [a([1.9, -1.9, 3e9, -3e9])],
      a([1, -1, INT_MAX, INT_MIN], s32), shape=Shape.array(dtypes.S32, (4,))),
    C("convert_f32_u8", Opcode.CONVERT, [a([-3.7, 300, 7.9])], a([0, 255, 7], u8),
      shape=Shape.array(dtypes.U8, (3,))),
    C("convert_s32_u8_wraps", Opcode.CONVERT, [a([300, -1], s32)], a([44, 255], u8),
      shape=Shape.array(dtypes.U8, (2,))),
    C("convert_f32_pred", Opcode.CONVERT, [a([0, 0.5])], a([False, True], pred),
      shape=Shape.array(dtypes.PRED, (2,))),
    C("convert_s32_f32", Opcode.CONVERT, [a([-2, 7], s32)], a([-2, 7]),
      shape=Shape.array(dtypes.F32, (2,))),
    C("acos", Opcode.ACOS, [a([1, 0, -1])], a([0, math.pi / 2, math.pi])),
    C("acosh", Opcode.ACOSH, [a([1, math.cosh(2)])], a([0, 2])),
    C("asin", Opcode.ASIN, [a([0, 1, -0.5])], a([0, math.pi / 2, -math.pi / 6])),
    C("asinh", Opcode.ASINH, [a([0, math.sinh(-2)])], a([0, -2])),
    C("atan", Opcode.ATAN, [a([1, -INF])], a([math.pi / 4, -math.pi / 2])),
    C("atanh", Opcode.ATANH, [a([0, math.tanh(0.5)])], a([0, 0.5])),
    C("cosh", Opcode.COSH, [a([0, 1])], a([1, math.cosh(1)])),
    C("sinh", Opcode.SINH, [a([0, -1])], a([0, math.sinh(-1)])),
    C("bitcast_convert_f32_s32", Opcode.BITCAST_CONVERT, [a([1.0, -2.0])],
      a([0x3F800000, -0x40000000], s32), shape=Shape.array(dtypes.S32, (2,))),
    C("bitcast_convert_s4_u4", Opcode.BITCAST_CONVERT, [a([-1, 7, -8], ml_dtypes.int4)],
      a([15, 7, 8], ml_dtypes.uint4), shape=Shape.array(dtypes.U4, (3,))),
    # the narrow types: XLA's convert (ml_dtypes' rounding, no saturation)
    C("convert_f32_f8e4m3fn", Opcode.CONVERT, [a([0.47, 1e6, -INF, NAN, 1e-7, 450])],
      a([0.46875, NAN, NAN, NAN, 0, 448], ml_dtypes.float8_e4m3fn),
      shape=Shape.array(dtypes.F8E4M3FN, (6,))),
    C("convert_f32_f8e5m2fnuz", Opcode.CONVERT, [a([-0.0, -3, 1e6])],
      a([0, -3, NAN], ml_dtypes.float8_e5m2fnuz), shape=Shape.array(dtypes.F8E5M2FNUZ, (3,))),
    C("convert_f32_f4e2m1fn_saturates", Opcode.CONVERT, [a([0.25, 0.75, 5, 100])],
      a([0, 1, 4, 6], ml_dtypes.float4_e2m1fn), shape=Shape.array(dtypes.F4E2M1FN, (4,))),
    C("convert_f32_s4_saturates", Opcode.CONVERT, [a([-9.5, 7.9, 3.5])],
      a([-8, 7, 3], ml_dtypes.int4), shape=Shape.array(dtypes.S4, (3,))),
    C("convert_s32_u2_wraps", Opcode.CONVERT, [a([-1, 5, 2], s32)],
      a([3, 1, 2], ml_dtypes.uint2), shape=Shape.array(dtypes.U2, (3,))),
    C("convert_f8e8m0fnu_f32", Opcode.CONVERT,
      [a([1, 0.25, 2.0 ** -127], ml_dtypes.float8_e8m0fnu)], a([1, 0.25, 2.0 ** -127]), shape=Shape.array(dtypes.F32, (3,))),
    # element-wise binary
    C("add", Opcode.ADD, [a([1, 2]), a([3, 4])], a([4, 6])),
    C("add_s8_wraps", Opcode.ADD, [a([127], s8), a([1], s8)], a([-128], s8)),
    C("and_pred", Opcode.AND, [a([True, True], pred), a([True, False], pred)],
      a([True, False], pred)),
    C("and_s32", Opcode.AND, [a([12], s32), a([10], s32)], a([8], s32)),
    C("atan2", Opcode.ATAN2, [a([1, 0]), a([1, -1])], a([math.pi / 4, math.pi])),
    *[C(f"compare_{d}", Opcode.COMPARE, [a([1, 2, 3]), a([2, 2, 2])], a(e, pred), direction=d)
      for d, e in [("EQ", [0, 1, 0]), ("NE", [1, 0, 1]), ("LT", [1, 0, 0]),
                   ("LE", [1, 1, 0]), ("GT", [0, 0, 1]), ("GE", [0, 1, 1])]],
    C("divide", Opcode.DIVIDE, [a([1, -7]), a([4, 2])], a([0.25, -3.5])),
    C("divide_s32", Opcode.DIVIDE, [a([7, -7, 7, -7, 5, INT_MIN], s32),
                                    a([2, 2, -2, -2, 0, -1], s32)],
      a([3, -3, -3, 3, -1, INT_MIN], s32)),
    C("divide_u32_by_zero", Opcode.DIVIDE, [a([7, 7], u32), a([0, 2], u32)],
      a([0xFFFFFFFF, 3], u32)),
    C("maximum", Opcode.MAXIMUM, [a([1, NAN, 5]), a([2, 0, 3])], a([2, NAN, 5])),
    C("minimum", Opcode.MINIMUM, [a([1, NAN, 5]), a([2, 0, 3])], a([1, NAN, 3])),
    C("multiply", Opcode.MULTIPLY, [a([2, -3]), a([4, 5])], a([8, -15])),
    C("or", Opcode.OR, [a([12], s32), a([10], s32)], a([14], s32)),
    C("power", Opcode.POWER, [a([2, 9]), a([3, 0.5])], a([8, 3])),
    C("power_s32", Opcode.POWER, [a([2, 1, 2, -1, 3], s32), a([10, -3, -1, -1, 0], s32)],
      a([1024, 1, 0, 0, 1], s32)),
    C("remainder", Opcode.REMAINDER, [a([7, -7, 5.5]), a([3, 3, -2])], a([1, -1, 1.5])),
    C("remainder_s32", Opcode.REMAINDER, [a([7, -7, 7, -7, 5, INT_MIN], s32),
                                          a([3, 3, -3, -3, 0, -1], s32)],
      a([1, -1, 1, -1, 5, 0], s32)),
    C("shift_left", Opcode.SHIFT_LEFT, [a([1, 1, 1, -1], s32), a([3, 31, 32, -1], s32)],
      a([8, INT_MIN, 0, 0], s32)),
    C("shift_right_arithmetic", Opcode.SHIFT_RIGHT_ARITHMETIC,
      [a([-16, 16, -16, 16], s32), a([2, 2, 40, 40], s32)], a([-4, 4, -1, 0], s32)),
    C("shift_right_arithmetic_u8", Opcode.SHIFT_RIGHT_ARITHMETIC,
      [a([0x80, 0x40], u8), a([1, 1], u8)], a([0xC0, 0x20], u8)),
    C("shift_right_logical", Opcode.SHIFT_RIGHT_LOGICAL,
      [a([-16, 16, -1], s32), a([28, 2, 32], s32)], a([15, 4, 0], s32)),
    C("subtract", Opcode.SUBTRACT, [a([1, 2]), a([3, 5])], a([-2, -3])),
    C("xor", Opcode.XOR, [a([12], s32), a([10], s32)], a([6], s32)),
    # element-wise ternary
    C("clamp_scalar_bounds", Opcode.CLAMP, [a(0), a([-1, 0.5, 2]), a(1)], a([0, 0.5, 1])),
    C("clamp_full_bounds", Opcode.CLAMP, [a([0, 1, 2]), a([5, 5, -5]), a([1, 2, 3])],
      a([1, 2, 2])),
    C("select", Opcode.SELECT, [a([True, False], pred), a([1, 2]), a([3, 4])], a([1, 4])),
    # narrow floats: computed in f32, rounded to the element type after the op
    C("add_bf16_rounds", Opcode.ADD, [a([1, 256], ml_dtypes.bfloat16),
                                      a([2 ** -9, 1], ml_dtypes.bfloat16)],
      a([1, 256], ml_dtypes.bfloat16)),
    C("exp_f16", Opcode.EXP, [a([0, 1], np.float16)], a([1, math.e], np.float16)),
    C("multiply_f8e4m3fn_rounds", Opcode.MULTIPLY, [a([1.125, 3], ml_dtypes.float8_e4m3fn),
                                                    a([1.125, 200], ml_dtypes.float8_e4m3fn)],
      a([1.25, NAN], ml_dtypes.float8_e4m3fn)),
    # sub-byte integers: computed in 8 bits, wrapped to their width after the op
    C("add_s4_wraps", Opcode.ADD, [a([7, -8, 3], ml_dtypes.int4), a([1, -1, 2], ml_dtypes.int4)],
      a([-8, 7, 5], ml_dtypes.int4)),
    C("shift_right_logical_s4", Opcode.SHIFT_RIGHT_LOGICAL,
      [a([-1, -8, 6], ml_dtypes.int4), a([1, 3, 4], ml_dtypes.int4)],
      a([7, 1, 0], ml_dtypes.int4)),
    C("shift_right_arithmetic_u2", Opcode.SHIFT_RIGHT_ARITHMETIC,
      [a([2, 3, 1], ml_dtypes.uint2), a([1, 2, 1], ml_dtypes.uint2)],
      a([3, 3, 0], ml_dtypes.uint2)),
    # data movement
    C("bitcast", Opcode.BITCAST, [M], M.reshape(3, 2), shape=Shape.array(dtypes.F32, (3, 2))),
    C("broadcast", Opcode.BROADCAST, [a([1, 2, 3])], a([[1, 2, 3], [1, 2, 3]]),
      shape=Shape.array(dtypes.F32, (2, 3)), dimensions=(1,)),
    C("broadcast_column", Opcode.BROADCAST, [a([1, 2, 3])], a([[1, 1], [2, 2], [3, 3]]),
      shape=Shape.array(dtypes.F32, (3, 2)), dimensions=(0,)),
    C("broadcast_stretch_1", Opcode.BROADCAST, [a([[7], [8]])], a([[7, 7, 7], [8, 8, 8]]),
      shape=Shape.array(dtypes.F32, (2, 3)), dimensions=(0, 1)),
    C("concatenate", Opcode.CONCATENATE, [M, a([[7], [8]])],
      a([[1, 2, 3, 7], [4, 5, 6, 8]]), dimension=1),
    C("copy", Opcode.COPY, [M], M),
    C("gather_rows_clamped", Opcode.GATHER,
      [a([[1, 2], [3, 4], [5, 6]]), a([2, 0, 7, -1], s32)],
      a([[5, 6], [1, 2], [5, 6], [1, 2]]),
      dimension_numbers=GatherDimensionNumbers((1,), (0,), (0,), 1), slice_sizes=(1, 2)),
    C("gather_2d_windows", Opcode.GATHER,
      [a(np.arange(9).reshape(3, 3)), a([[0, 1], [1, 1]], s32)],
      a([[[1, 2], [4, 5]], [[4, 5], [7, 8]]]),
      dimension_numbers=GatherDimensionNumbers((1, 2), (), (0, 1), 1), slice_sizes=(2, 2)),
    C("gather_offset_dim_first", Opcode.GATHER, [a([[0, 1, 2], [3, 4, 5]]), a([2, 0], s32)],
      a([[2, 0], [5, 3]]),
      dimension_numbers=GatherDimensionNumbers((0,), (1,), (1,), 1), slice_sizes=(2, 1)),
    C("gather_index_vector_dim_0", Opcode.GATHER, [a([10, 20, 30]), a([[-5, 1]], s32)],
      a([[10, 20], [20, 30]]),
      dimension_numbers=GatherDimensionNumbers((1,), (), (0,), 0), slice_sizes=(2,)),
    C("gather_batching_dims", Opcode.GATHER,
      [a([[1, 2, 3], [4, 5, 6]]), a([[2, 0], [1, 1]], s32)], a([[3, 1], [5, 5]]),
      dimension_numbers=GatherDimensionNumbers((), (1,), (1,), 2, (0,), (0,)),
      slice_sizes=(1, 1)),
    C("scatter_add_rows_duplicates", Opcode.SCATTER,
      [a([[1, 2], [3, 4], [5, 6]]), a([[2], [0], [2]], s32), a([[10, 20], [30, 40], [1, 1]])],
      a([[31, 42], [3, 4], [16, 27]]), called=[reducer(Opcode.ADD)],
      dimension_numbers=ScatterDimensionNumbers((1,), (0,), (0,), 1)),
    # The last update of an element wins; a window that does not fit is skipped whole.
    C("scatter_replace_skips_out_of_range", Opcode.SCATTER,
      [a([1, 2, 3, 4, 5]), a([[1], [1], [4], [-1], [3]], s32),
       a([[7, 7], [8, 9], [6, 6], [5, 5], [0, 1]])],
      a([1, 8, 9, 0, 1]), called=[replace_computation()],
      dimension_numbers=ScatterDimensionNumbers((1,), (), (0,), 1)),
    C("scatter_batching_dims_max", Opcode.SCATTER,
      [a([[1, 2, 3], [4, 5, 6]]), a([[2, 2], [0, 1]], s32), a([[0, 9], [8, -1]])],
      a([[1, 2, 9], [8, 5, 6]]), called=[reducer(Opcode.MAXIMUM)],
      dimension_numbers=ScatterDimensionNumbers((), (1,), (1,), 2, (0,), (0,))),
    C("pad", Opcode.PAD, [a([[1, 2], [3, 4]]), a(0)],
      a([[0, 0, 0], [0, 2, 0], [0, 0, 0], [0, 4, 0]]),
      padding=PaddingConfig((1, -1), (0, 1), (1, 1))),
    C("pad_value_and_crop", Opcode.PAD, [a([1, 2, 3, 4]), a(9)], a([2, 3, 4, 9, 9]),
      padding=PaddingConfig((-1,), (2,), (0,))),
    C("reshape", Opcode.RESHAPE, [M], a([[1, 2], [3, 4], [5, 6]]),
      shape=Shape.array(dtypes.F32, (3, 2))),
    C("reverse", Opcode.REVERSE, [M], a([[6, 5, 4], [3, 2, 1]]), dimensions=(0, 1)),
    C("slice", Opcode.SLICE, [a(np.arange(10).reshape(2, 5))], a([[6, 8]]),
      slice=SliceSpec((1, 1), (2, 5), (1, 2))),
    C("transpose", Opcode.TRANSPOSE, [a(np.arange(6).reshape(1, 2, 3))],
      a(np.arange(6).reshape(1, 2, 3).transpose(2, 0, 1)), dimensions=(2, 0, 1)),
    # compute
    C("dot_matmul", Opcode.DOT, [M, a([[1, 0], [0, 1], [1, 1]])], a([[4, 5], [10, 11]]),
      dimension_numbers=DotDimensionNumbers((), (1,), (), (0,))),
    C("dot_vector", Opcode.DOT, [a([1, 2, 3]), a([4, 5, 6])], a(32),
      dimension_numbers=DotDimensionNumbers((), (0,), (), (0,))),
    C("convolution_1d", Opcode.CONVOLUTION, [a([[[1, 2, 3, 4]]]), a([[[1, -1]]])],
      a([[[-1, -1, -1]]]), window=Window.make((2,)),
      dimension_numbers=ConvDimensionNumbers.nchw(1)),
    C("reduce_sum_rows", Opcode.REDUCE, [M, a(10)], a([16, 25]),
      called=[reducer(Opcode.ADD)], dimensions=(1,)),
    C("reduce_window_sum", Opcode.REDUCE_WINDOW, [a([1, 2, 3, 4, 5]), a(0)], a([3, 7]),
      called=[reducer(Opcode.ADD)], window=Window.make((2,), (2,))),
    C("sort_descending_stable", Opcode.SORT, [a([[3, 1, 3, 2], [0, 5, 5, 5]]),
                                              a([[0, 1, 2, 3], [0, 1, 2, 3]], s32)],
      [a([[3, 3, 2, 1], [5, 5, 5, 0]]), a([[0, 2, 3, 1], [1, 2, 3, 0]], s32)],
      called=[comparator("GT", (dtypes.F32, dtypes.S32))], dimension=1, is_stable=True),
    C("topk_largest_nan_first_ties_by_index", Opcode.TOPK,
      [a([[3, NAN, 3, -INF, 5, 5]])], [a([[NAN, 5, 5, 3]]), a([[1, 4, 5, 0]], s32)],
      k=4, largest=True),
    C("topk_smallest_nan_last", Opcode.TOPK, [a([[NAN, 2, -0.0, 0.0]])],
      [a([[-0.0, 0.0, 2]]), a([[2, 3, 1]], s32)], k=3, largest=False),
    # sources and structure
    C("iota", Opcode.IOTA, [], a([[0, 1, 2], [0, 1, 2]], s32),
      shape=Shape.array(dtypes.S32, (2, 3)), iota_dimension=1),
    C("iota_f32", Opcode.IOTA, [], a([[0, 0], [1, 1]]),
      shape=Shape.array(dtypes.F32, (2, 2)), iota_dimension=0),
    C("fusion", Opcode.FUSION, [a([1, 2]), a([3, 4])], a([4, 10]),
      called=[fused_multiply_add()], kind="kLoop"),
    C("tuple", Opcode.TUPLE, [a([1, 2]), a(3, s32)], [a([1, 2]), a(3, s32)]),
    # dynamic slices: starts are clamped so that the slice stays inside the operand
    C("dynamic_slice", Opcode.DYNAMIC_SLICE, [M, a(1, s32), a(1, s32)], a([[5, 6]]),
      dynamic_slice_sizes=(1, 2)),
    C("dynamic_slice_clamped", Opcode.DYNAMIC_SLICE, [M, a(-3, s32), a(7, s32)], a([[2, 3]]),
      dynamic_slice_sizes=(1, 2)),
    C("dynamic_update_slice", Opcode.DYNAMIC_UPDATE_SLICE,
      [M, a([[9, 8]]), a(5, s32), a(0, s32)], a([[1, 2, 3], [9, 8, 6]])),
    # control flow: branch i takes operand i + 1; an s32 index out of range picks the last
    C("conditional_pred", Opcode.CONDITIONAL, [a(False, pred), a([1, 2]), a([3, 4])],
      a([-3, -4]), called=[negate_computation("t"), negate_computation("f")]),
    C("conditional_index_out_of_range", Opcode.CONDITIONAL,
      [a(-1, s32), a([1, 2]), a([3, 4])], a([-3, -4]),
      called=[negate_computation("b0"), negate_computation("b1")]),
]


def check(got, expected):
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if dtypes.from_numpy(expected.dtype).is_float:
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                                   rtol=1e-6, atol=1e-7)
        g, e = got.astype(np.float64), expected.astype(np.float64)
        number = ~np.isnan(e)          # a NaN's sign means nothing
        assert np.array_equal(np.signbit(g)[number], np.signbit(e)[number])
    else:
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_opcode_table(case):
    got = run(case.opcode, *case.operands, shape=case.shape, called=case.called, **case.attrs)
    if isinstance(case.expected, list):
        assert len(got) == len(case.expected)
        for g, e in zip(got, case.expected):
            check(g, e)
    else:
        check(got, case.expected)


# Sources and structure that a one-op module cannot hold (tested below), and the custom
# call, which only the linking program can run (tested below to refuse).
_TESTED_ELSEWHERE = {Opcode.PARAMETER, Opcode.CONSTANT, Opcode.GET_TUPLE_ELEMENT,
                     Opcode.WHILE, Opcode.CUSTOM_CALL}


def test_table_covers_every_opcode():
    missing = set(Opcode) - {c.opcode for c in CASES} - _TESTED_ELSEWHERE
    assert not missing, sorted(o.text for o in missing)


def test_every_opcode_has_a_rule():
    assert set(RULES) == set(Opcode)


def test_a_custom_call_is_not_evaluated():
    b = Builder("main")
    x = b.parameter(0, Shape.array(dtypes.F32, (2,)))
    call = b.op(Opcode.CUSTOM_CALL, x, shape=x.shape, custom_call_target="f", backend_config="")
    with pytest.raises(XlacError, match="calls f, which only the program that links"):
        evaluate(module_of(b, call), [np.zeros(2, np.float32)])


def test_constant_and_get_tuple_element():
    b = Builder("main")
    x = b.parameter(0, Shape.array(dtypes.F32, (2,)))
    c = b.constant(np.array([10, 20], np.float32))
    t = b.tuple([x, c])
    root = b.op(Opcode.ADD, b.get_tuple_element(t, 0), b.get_tuple_element(t, 1))
    (got,) = evaluate(module_of(b, root), [np.array([1, 2])])
    check(got, a([11, 22]))


def test_outputs_follow_the_root_tuple_and_do_not_alias():
    b = Builder("main")
    x = b.parameter(0, Shape.array(dtypes.F32, (2,)))
    c = b.constant(np.array([5, 6], np.float32))
    root = b.tuple([c, b.op(Opcode.NEGATE, x), x])
    arg = a([1, 2])
    out = evaluate(module_of(b, root), [arg])
    assert [o.tolist() for o in out] == [[5, 6], [-1, -2], [1, 2]]
    out[0][0] = 99
    out[2][0] = 99
    assert c.literal[0] == 5 and arg[0] == 1


def test_parameter_has_no_value_on_its_own():
    b = Builder("main")
    x = b.parameter(0, Shape.array(dtypes.F32, (2,)), "x")
    with pytest.raises(XlacError, match="parameter %x"):
        evaluate_instruction(x, [])


def test_bad_arguments_are_rejected():
    b = Builder("main")
    m = module_of(b, b.parameter(0, Shape.array(dtypes.F32, (2, 3)), "x"))
    with pytest.raises(XlacError, match="takes 1 arguments, got 0"):
        evaluate(m, [])
    with pytest.raises(XlacError, match=r"has shape \(3, 2\), expected \(2, 3\)"):
        evaluate(m, [np.zeros((3, 2))])


def test_evaluate_instruction_folds_one_op():
    b = Builder("main")
    c = b.constant(np.array([1.0, 4.0], np.float32))
    s = b.op(Opcode.SQRT, c)
    check(evaluate_instruction(s, [c.literal]), a([1, 2]))


def test_bitcast_follows_layouts():
    # A column-major f32[2,3]{0,1} read as a row-major f32[3,2] is its transpose.
    b = Builder("main")
    x = b.parameter(0, Shape.array(dtypes.F32, (2, 3), layout=(0, 1)))
    root = b.op(Opcode.BITCAST, x, shape=Shape.array(dtypes.F32, (3, 2)))
    (got,) = evaluate(module_of(b, root), [M])
    check(got, M.T)


# --- dot ---------------------------------------------------------------------------

def test_dot_general_batch_and_contracting_dims():
    rng = np.random.default_rng(0)
    lhs = rng.standard_normal((3, 4, 2, 5)).astype(f32)   # contract dims 1, 3; batch 2
    rhs = rng.standard_normal((5, 2, 6, 4)).astype(f32)   # contract dims 3, 0; batch 1
    dn = DotDimensionNumbers((2,), (1, 3), (1,), (3, 0))
    got = run(Opcode.DOT, lhs, rhs, dimension_numbers=dn)
    # Result: batch, lhs free, rhs free.
    np.testing.assert_allclose(got, np.einsum("akbc,cbdk->bad", lhs, rhs), rtol=1e-5)
    assert got.dtype == f32


def test_dot_bf16_is_rounded_to_bf16():
    lhs = a([[1, 2]], ml_dtypes.bfloat16)
    rhs = a([[3], [4]], ml_dtypes.bfloat16)
    got = run(Opcode.DOT, lhs, rhs, dimension_numbers=DotDimensionNumbers((), (1,), (), (0,)))
    check(got, a([[11]], ml_dtypes.bfloat16))


# --- convolution against a naive loop ------------------------------------------------

def naive_convolution(x, k, w: Window, dn: ConvDimensionNumbers, fg=1, bg=1):
    """Direct XLA definition, one output element at a time."""
    x = np.transpose(x, (dn.input_batch, dn.input_feature) + dn.input_spatial)
    k = np.transpose(k, (dn.kernel_output, dn.kernel_input) + dn.kernel_spatial)
    (n, c), (o, ci), spatial = x.shape[:2], k.shape[:2], x.shape[2:]
    dilated = [(s - 1) * ld + 1 for s, ld in zip(spatial, w.lhs_dilation)]
    extent = [(s - 1) * rd + 1 for s, rd in zip(w.size, w.rhs_dilation)]
    out_sp = [(d + lo + hi - e) // st + 1
              for d, lo, hi, e, st in zip(dilated, w.pad_low, w.pad_high, extent, w.stride)]
    out = np.zeros([n // bg, o] + out_sp, np.float64)
    for b, f, *pos in itertools.product(range(n // bg), range(o), *map(range, out_sp)):
        if bg > 1:      # batch group g = input batches [g * n/bg, (g+1) * n/bg)
            batch, channels = f // (o // bg) * (n // bg) + b, range(c)
        else:           # feature group g = input features [g * ci, (g+1) * ci)
            batch, channels = b, range(f // (o // fg) * ci, f // (o // fg) * ci + ci)
        acc = 0.0
        for j, ch in enumerate(channels):
            for kpos in itertools.product(*map(range, w.size)):
                idx = []
                for d in range(len(spatial)):
                    p = pos[d] * w.stride[d] + kpos[d] * w.rhs_dilation[d] - w.pad_low[d]
                    if p % w.lhs_dilation[d] or not 0 <= p // w.lhs_dilation[d] < spatial[d]:
                        break
                    idx.append(p // w.lhs_dilation[d])
                else:
                    acc += x[(batch, ch, *idx)] * k[(f, j, *kpos)]
        out[(b, f, *pos)] = acc
    order = (dn.output_batch, dn.output_feature) + dn.output_spatial
    return np.transpose(out, np.argsort(order))


NHWC_HWIO = ConvDimensionNumbers(0, 3, (1, 2), 3, 2, (0, 1), 0, 3, (1, 2))
# Output as (spatial1, feature, batch, spatial0) to exercise an arbitrary layout.
ODD_OUT = ConvDimensionNumbers(0, 1, (2, 3), 0, 1, (2, 3), 2, 1, (3, 0))

CONVS = {
    # name: (input dims, kernel dims, window, dimension numbers, fg, bg)
    "plain": ((2, 3, 5, 6), (4, 3, 3, 2), Window.make((3, 2)), ConvDimensionNumbers.nchw(2), 1, 1),
    "strided_padded_dilated": ((1, 2, 5, 6), (3, 2, 2, 3),
                               Window.make((2, 3), (2, 1), (1, 0), (2, 1), (2, 1), (1, 2)),
                               ConvDimensionNumbers.nchw(2), 1, 1),
    "negative_padding": ((1, 2, 6, 5), (2, 2, 2, 2), Window.make((2, 2), (1, 2), (-1, 1), (0, -1)),
                         ConvDimensionNumbers.nchw(2), 1, 1),
    "feature_groups": ((2, 4, 4, 4), (6, 2, 2, 2), Window.make((2, 2), pad_low=(1, 1)),
                       ConvDimensionNumbers.nchw(2), 2, 1),
    "depthwise": ((1, 4, 5, 5), (8, 1, 3, 3), Window.make((3, 3), (2, 2), (1, 1), (1, 1)),
                  ConvDimensionNumbers.nchw(2), 4, 1),
    "batch_groups": ((4, 3, 4, 3), (4, 3, 2, 2), Window.make((2, 2)),
                     ConvDimensionNumbers.nchw(2), 1, 2),
    "nhwc_hwio": ((2, 5, 4, 3), (3, 2, 3, 4), Window.make((3, 2), (1, 2), (1, 0), (1, 1)),
                  NHWC_HWIO, 1, 1),
    "odd_output_dims": ((2, 3, 4, 5), (2, 3, 2, 2), Window.make((2, 2)), ODD_OUT, 1, 1),
    "conv1d_dilated": ((2, 2, 9), (3, 2, 3), Window.make((3,), (2,), (2,), (1,), (1,), (2,)),
                       ConvDimensionNumbers.nchw(1), 1, 1),
    "conv3d": ((1, 2, 3, 4, 3), (2, 2, 2, 2, 2), Window.make((2, 2, 2), pad_high=(1, 0, 1)),
               ConvDimensionNumbers.nchw(3), 1, 1),
}


@pytest.mark.parametrize("name", list(CONVS))
def test_convolution_matches_naive_loop(name):
    xdims, kdims, w, dn, fg, bg = CONVS[name]
    rng = np.random.default_rng(len(name))
    x = rng.standard_normal(xdims).astype(f32)
    k = rng.standard_normal(kdims).astype(f32)
    got = run(Opcode.CONVOLUTION, x, k, window=w, dimension_numbers=dn,
              feature_group_count=fg, batch_group_count=bg)
    expected = naive_convolution(x, k, w, dn, fg, bg)
    assert got.dtype == f32 and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_convolution_with_empty_output():
    x, k = np.ones((1, 1, 2), f32), np.ones((1, 1, 3), f32)
    got = run(Opcode.CONVOLUTION, x, k, window=Window.make((3,)),
              dimension_numbers=ConvDimensionNumbers.nchw(1))
    assert got.shape == (1, 1, 0)


# --- gather against a naive loop -------------------------------------------------

def naive_gather(x, idx, dn: GatherDimensionNumbers, sizes, out_dims):
    """XLA's definition of gather, one output element at a time."""
    out = np.zeros(out_dims, x.dtype)
    at = dn.index_vector_dim
    for out_index in itertools.product(*map(range, out_dims)):
        batch = [i for d, i in enumerate(out_index) if d not in dn.offset_dims]
        offsets = iter(i for d, i in enumerate(out_index) if d in dn.offset_dims)
        if at == idx.ndim:
            vector = [idx[tuple(batch)]]
        else:
            vector = idx[tuple(batch[:at]) + (slice(None),) + tuple(batch[at:])]
        start = [0] * x.ndim
        for k, d in enumerate(dn.start_index_map):
            start[d] = min(max(int(vector[k]), 0), x.shape[d] - sizes[d])
        for od, sd in zip(dn.operand_batching_dims, dn.start_indices_batching_dims):
            start[od] = batch[sd if sd < at else sd - 1]
        full = [start[d] + (0 if d in dn.collapsed_slice_dims + dn.operand_batching_dims
                            else next(offsets)) for d in range(x.ndim)]
        out[out_index] = x[tuple(full)]
    return out


GATHERS = {
    "index_vector_last": ((4, 5, 6), (3, 2), GatherDimensionNumbers((1, 2), (0,), (2, 0), 1),
                          (1, 3, 2)),
    "index_vector_first_offsets_split": ((4, 5, 6), (2, 3, 2),
                                         GatherDimensionNumbers((0, 3), (1,), (1, 2), 0),
                                         (4, 1, 3)),
    "implicit_index_vector": ((7, 3), (2, 2), GatherDimensionNumbers((2,), (0,), (0,), 2),
                              (1, 3)),
    "batching_dims_swapped": ((3, 7, 4, 5), (5, 2, 3, 1),
                              GatherDimensionNumbers((3,), (1,), (1,), 3, (3, 0), (0, 2)),
                              (1, 1, 2, 1)),
    "batching_dim_after_index_vector": ((4, 6, 3), (1, 4),
                                        GatherDimensionNumbers((1,), (1,), (1,), 0, (0,), (1,)),
                                        (1, 1, 3)),
}


@pytest.mark.parametrize("name", list(GATHERS))
def test_gather_matches_naive_loop(name):
    xdims, idims, dn, sizes = GATHERS[name]
    rng = np.random.default_rng(len(name))
    x = rng.standard_normal(xdims).astype(f32)
    idx = rng.integers(-3, 9, idims).astype(np.int64)     # out-of-range starts are clamped
    got = run(Opcode.GATHER, x, idx, dimension_numbers=dn, slice_sizes=sizes)
    np.testing.assert_array_equal(got, naive_gather(x, idx, dn, sizes, got.shape))


# --- scatter against a naive loop ------------------------------------------------

def naive_scatter(x, idx, upd, dn: ScatterDimensionNumbers, combine):
    """StableHLO's definition of scatter, one update element at a time in row-major
    order; a window that does not fit inside the operand is skipped (XLA)."""
    out = x.copy()
    at = dn.index_vector_dim
    scatter_dims = [d for d in range(upd.ndim) if d not in dn.update_window_dims]
    window_dims = [d for d in range(x.ndim)
                   if d not in dn.inserted_window_dims + dn.input_batching_dims]
    for u in itertools.product(*map(range, upd.shape)):
        batch = [u[d] for d in scatter_dims]
        vector = ([idx[tuple(batch)]] if at == idx.ndim
                  else idx[tuple(batch[:at]) + (slice(None),) + tuple(batch[at:])])
        start, size = [0] * x.ndim, [1] * x.ndim
        for k, d in enumerate(dn.scatter_dims_to_operand_dims):
            start[d] = int(vector[k])
        for od, sd in zip(dn.input_batching_dims, dn.scatter_indices_batching_dims):
            start[od] = batch[sd if sd < at else sd - 1]
        full = list(start)
        for od, ud in zip(window_dims, dn.update_window_dims):
            size[od] = upd.shape[ud]
            full[od] += u[ud]
        if all(0 <= s <= n - z for s, n, z in zip(start, x.shape, size)):
            out[tuple(full)] = combine(out[tuple(full)], upd[u])
    return out


SCATTERS = {
    "rows_of_windows": ((6, 4), (5, 1), (5, 3), ScatterDimensionNumbers((1,), (0,), (0,), 1)),
    "index_vector_first": ((5, 4, 3), (2, 3, 2), (3, 2, 2, 2),
                           ScatterDimensionNumbers((1, 2), (0,), (1, 0), 0)),
    "elements_implicit_vector": ((5, 6), (4, 3), (4, 3),
                                 ScatterDimensionNumbers((), (0, 1), (1,), 2)),
    "batching_dims": ((3, 7, 4, 5), (4, 3, 1), (4, 3, 2),
                      ScatterDimensionNumbers((2,), (1,), (1,), 2, (2, 0), (0, 1))),
}


@pytest.mark.parametrize("combine", ["add", "max", "replace", "select_body"])
@pytest.mark.parametrize("name", list(SCATTERS))
def test_scatter_matches_naive_loop(name, combine):
    xdims, idims, udims, dn = SCATTERS[name]
    if name == "elements_implicit_vector":
        dn = ScatterDimensionNumbers((), (0,), (0,), 2, (1,), (1,))  # rows chosen per column
        idims, udims = (4, 6), (4, 6)
    rng = np.random.default_rng(len(name))
    x = rng.integers(-9, 9, xdims).astype(f32)
    upd = rng.integers(-9, 9, udims).astype(f32)
    idx = rng.integers(-1, 7, idims).astype(np.int32)    # some windows do not fit
    called, fn = {"add": (reducer(Opcode.ADD), np.add),
                  "max": (reducer(Opcode.MAXIMUM), np.maximum),
                  "replace": (replace_computation(), lambda old, new: new),
                  "select_body": (max_via_select(), np.maximum)}[combine]
    got = run(Opcode.SCATTER, x, idx, upd, called=[called], dimension_numbers=dn)
    np.testing.assert_array_equal(got, naive_scatter(x, idx, upd, dn, fn))


# --- reduce ----------------------------------------------------------------------

@pytest.mark.parametrize("op,np_fn,init", [
    (Opcode.ADD, np.sum, 0.0), (Opcode.MULTIPLY, np.prod, 1.0),
    (Opcode.MAXIMUM, np.max, -np.inf), (Opcode.MINIMUM, np.min, np.inf),
])
def test_reduce_with_recognised_reducers(op, np_fn, init):
    x = np.random.default_rng(1).standard_normal((3, 4, 5)).astype(f32)
    got = run(Opcode.REDUCE, x, a(init), called=[reducer(op)], dimensions=(0, 2))
    assert got.dtype == f32
    np.testing.assert_allclose(got, np_fn(x, axis=(0, 2)), rtol=1e-5)


def test_reduce_pred_and_integers():
    x = a([[True, False], [True, True]], pred)
    got = run(Opcode.REDUCE, x, a(True, pred), called=[reducer(Opcode.AND, dtypes.PRED)],
              dimensions=(1,))
    check(got, a([False, True], pred))
    # s8 sums wrap in s8 rather than widening as np.sum would.
    got = run(Opcode.REDUCE, a([100, 100], s8), a(0, s8),
              called=[reducer(Opcode.ADD, dtypes.S8)], dimensions=(0,))
    check(got, a(-56, s8))


def test_reduce_over_no_dimensions_applies_the_init():
    got = run(Opcode.REDUCE, a([1, 2]), a(10), called=[reducer(Opcode.ADD)], dimensions=())
    check(got, a([11, 12]))


@pytest.mark.parametrize("body", [max_via_select, add_through_reshapes],
                         ids=["vectorised", "scalar_loop"])
def test_reduce_with_a_generic_reducer(body):
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(f32)
    comp = body()
    init = a(-np.inf) if comp.name == "max_select" else a(0)
    got = run(Opcode.REDUCE, x, init, called=[comp], dimensions=(1,))
    expected = x.max(axis=1) if comp.name == "max_select" else x.sum(axis=1)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_variadic_reduce_argmax():
    x = a([[1, 7, 7, 2], [5, 1, 0, 5]])
    idx = np.broadcast_to(np.arange(4, dtype=s32), (2, 4)).copy()
    values, indices = run(Opcode.REDUCE, x, idx, a(-np.inf), a(0, s32),
                          called=[argmax_reducer()], dimensions=(1,))
    check(values, a([7, 5]))
    check(indices, a([1, 0], s32))


# --- sort -------------------------------------------------------------------------

# (row length, comparator through reshapes: run per element, slow, so on short rows)
@pytest.mark.parametrize("n, reshaped", [(1, False), (2, False), (7, False), (64, False),
                                         (100, False), (2, True), (7, True)])
def test_sort_is_numpys_stable_sort(n, reshaped):
    # few distinct keys: many ties, whose order shows stability
    x = np.random.default_rng(n).integers(0, 4, (3, n)).astype(f32)
    idx = np.broadcast_to(np.arange(n, dtype=s32), (3, n)).copy()
    keys, order = run(Opcode.SORT, x, idx, called=[comparator("LT", (dtypes.F32, dtypes.S32),
                                                              reshaped=reshaped)],
                      dimension=1, is_stable=True)
    want = np.argsort(x, axis=1, kind="stable").astype(s32)
    check(order, want)
    check(keys, np.take_along_axis(x, want, 1))


def test_sort_along_a_major_dimension_by_a_second_key():
    x = np.random.default_rng(5).standard_normal((9, 2, 3)).astype(f32)
    key = np.random.default_rng(6).integers(0, 3, (9, 2, 3)).astype(s32)
    values, keys = run(Opcode.SORT, x, key,
                       called=[comparator("GT", (dtypes.F32, dtypes.S32), key=1)],
                       dimension=0)
    want = np.argsort(-key, axis=0, kind="stable")
    check(keys, np.take_along_axis(key, want, 0))
    check(values, np.take_along_axis(x, want, 0))


# --- reduce-window against a naive loop ----------------------------------------------

def naive_reduce_window(x, init, w: Window, fn):
    """StableHLO's definition: pad and base-dilate with init, reduce each window from init."""
    dilated = [(s - 1) * ld + 1 for s, ld in zip(x.shape, w.lhs_dilation)]
    extent = [(s - 1) * rd + 1 for s, rd in zip(w.size, w.rhs_dilation)]
    out_dims = [(d + lo + hi - e) // st + 1
                for d, lo, hi, e, st in zip(dilated, w.pad_low, w.pad_high, extent, w.stride)]
    out = np.zeros(out_dims, x.dtype)
    for pos in itertools.product(*map(range, out_dims)):
        acc = init
        for kpos in itertools.product(*map(range, w.size)):
            value = init
            p = [pos[d] * w.stride[d] + kpos[d] * w.rhs_dilation[d] - w.pad_low[d]
                 for d in range(x.ndim)]
            if all(q % ld == 0 and 0 <= q // ld < n for q, ld, n in zip(p, w.lhs_dilation,
                                                                        x.shape)):
                value = x[tuple(q // ld for q, ld in zip(p, w.lhs_dilation))]
            acc = fn(acc, value)
        out[pos] = acc
    return out


REDUCE_WINDOWS = {
    "max_pool_3x3_s2_p1": (Opcode.MAXIMUM, -np.inf, (1, 2, 5, 6),
                           Window.make((1, 1, 3, 3), (1, 1, 2, 2), (0, 0, 1, 1), (0, 0, 1, 1))),
    "sum_base_and_window_dilation": (Opcode.ADD, 0.0, (4, 5),
                                     Window.make((2, 2), (1, 2), (1, 0), (0, 2), (2, 1), (1, 2))),
    "min_negative_padding": (Opcode.MINIMUM, np.inf, (6, 4),
                             Window.make((2, 1), (2, 1), (-1, 0), (1, -1))),
}


@pytest.mark.parametrize("name", list(REDUCE_WINDOWS))
def test_reduce_window_matches_naive_loop(name):
    op, init, dims, w = REDUCE_WINDOWS[name]
    x = np.random.default_rng(3).standard_normal(dims).astype(f32)
    got = run(Opcode.REDUCE_WINDOW, x, a(init), called=[reducer(op)], window=w)
    fn = {Opcode.MAXIMUM: max, Opcode.MINIMUM: min, Opcode.ADD: lambda p, q: p + q}[op]
    np.testing.assert_allclose(got, naive_reduce_window(x, f32(init), w, fn), rtol=1e-5)


def test_reduce_window_with_a_generic_reducer():
    x = np.random.default_rng(4).standard_normal((5, 4)).astype(f32)
    w = Window.make((2, 3), (1, 1), (1, 1), (0, 1))
    got = run(Opcode.REDUCE_WINDOW, x, a(-np.inf), called=[max_via_select()], window=w)
    np.testing.assert_allclose(got, naive_reduce_window(x, f32(-np.inf), w, max))


def test_evaluate_computation_returns_tuples():
    comp = argmax_reducer()
    v, i = evaluate_computation(comp, [a(1), a(0, s32), a(3), a(2, s32)])
    check(v, a(3))
    check(i, a(2, s32))


@pytest.mark.parametrize("opcode,x", [(Opcode.AND, a([1.5])), (Opcode.SHIFT_LEFT, a([1.5])),
                                      (Opcode.SUBTRACT, a([True], pred))])
def test_ops_undefined_for_the_element_type_raise_xlac_error(opcode, x):
    with pytest.raises(XlacError, match=f"{opcode.text} is not defined for"):
        run(opcode, x, x)


def test_reduce_over_an_empty_dimension_gives_the_init():
    got = run(Opcode.REDUCE, np.zeros((2, 0), f32), a(-np.inf), called=[reducer(Opcode.MAXIMUM)],
              dimensions=(1,))
    check(got, a([-np.inf, -np.inf]))


def test_while_runs_the_body_until_the_condition_fails():
    """Counts i to 5 doubling x each time; a state whose condition fails at once
    comes back unchanged."""
    from xlac.hlo.text import parse_module
    m = parse_module("""
HloModule w

%cond (s: (s32[], f32[2])) -> pred[] {
  %s = (s32[], f32[2]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(5)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (t: (s32[], f32[2])) -> (s32[], f32[2]) {
  %t = (s32[], f32[2]) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %x = f32[2] get-tuple-element(%t), index=1
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one)
  %y = f32[2] add(%x, %x)
  ROOT %r = (s32[], f32[2]) tuple(%next, %y)
}

ENTRY %main (i0: s32[], x: f32[2]) -> (s32[], f32[2]) {
  %i0 = s32[] parameter(0)
  %x = f32[2] parameter(1)
  %init = (s32[], f32[2]) tuple(%i0, %x)
  ROOT %w = (s32[], f32[2]) while(%init), condition=%cond, body=%body
}
""")
    i, x = evaluate(m, [a(0, s32), a([1, -2])])
    check(i, a(5, s32))
    check(x, a([32, -64]))
    i, x = evaluate(m, [a(9, s32), a([1, -2])])
    check(i, a(9, s32))
    check(x, a([1, -2]))
