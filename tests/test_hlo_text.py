"""HLO text: print(parse(t)) == t over a table of snippets, literals, parse errors."""
import textwrap

import numpy as np
import pytest

from xlac.hlo import (ConvDimensionNumbers, DotDimensionNumbers, Module, Opcode, Shape,
                      Window, XlacError, dtypes, scalar_computation)
from xlac.hlo.builder import Builder
from xlac.hlo import literal_text
from xlac.hlo.literal_text import format_literal, parse_literal
from xlac.hlo.text import HloParseError, parse_module, print_computation, print_module


def hlo(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


SNIPPETS = {
    "unary": """
        HloModule unary

        ENTRY %main (a: f32[4]{0}) -> (f32[4]{0}, pred[4]{0}, s32[4]{0}) {
          %a = f32[4]{0} parameter(0)
          %abs = f32[4]{0} abs(f32[4]{0} %a)
          %cbrt = f32[4]{0} cbrt(f32[4]{0} %abs)
          %ceil = f32[4]{0} ceil(f32[4]{0} %cbrt)
          %cosine = f32[4]{0} cosine(f32[4]{0} %ceil)
          %erf = f32[4]{0} erf(f32[4]{0} %cosine)
          %exponential = f32[4]{0} exponential(f32[4]{0} %erf)
          %exponential-minus-one = f32[4]{0} exponential-minus-one(f32[4]{0} %exponential)
          %floor = f32[4]{0} floor(f32[4]{0} %exponential-minus-one)
          %log = f32[4]{0} log(f32[4]{0} %floor)
          %log-plus-one = f32[4]{0} log-plus-one(f32[4]{0} %log)
          %logistic = f32[4]{0} logistic(f32[4]{0} %log-plus-one)
          %negate = f32[4]{0} negate(f32[4]{0} %logistic)
          %round-nearest-afz = f32[4]{0} round-nearest-afz(f32[4]{0} %negate)
          %round-nearest-even = f32[4]{0} round-nearest-even(f32[4]{0} %round-nearest-afz)
          %rsqrt = f32[4]{0} rsqrt(f32[4]{0} %round-nearest-even)
          %sign = f32[4]{0} sign(f32[4]{0} %rsqrt)
          %sine = f32[4]{0} sine(f32[4]{0} %sign)
          %sqrt = f32[4]{0} sqrt(f32[4]{0} %sine)
          %tan = f32[4]{0} tan(f32[4]{0} %sqrt)
          %tanh = f32[4]{0} tanh(f32[4]{0} %tan)
          %is-finite = pred[4]{0} is-finite(f32[4]{0} %tanh)
          %not = pred[4]{0} not(pred[4]{0} %is-finite)
          %convert = s32[4]{0} convert(f32[4]{0} %tanh)
          ROOT %tuple = (f32[4]{0}, pred[4]{0}, s32[4]{0}) tuple(f32[4]{0} %tanh, pred[4]{0} %not, s32[4]{0} %convert)
        }
    """,
    "unary_inverse_hyperbolic_and_narrow_types": """
        HloModule unary_inverse_hyperbolic_and_narrow_types

        ENTRY %main (a: f32[4]{0}, b: s4[4]{0}) -> (f32[4]{0}, u4[4]{0}, f8e4m3fn[4]{0}, f8e5m2fnuz[4]{0}, s32[4]{0}) {
          %a = f32[4]{0} parameter(0)
          %b = s4[4]{0} parameter(1)
          %acos = f32[4]{0} acos(f32[4]{0} %a)
          %acosh = f32[4]{0} acosh(f32[4]{0} %acos)
          %asin = f32[4]{0} asin(f32[4]{0} %acosh)
          %asinh = f32[4]{0} asinh(f32[4]{0} %asin)
          %atan = f32[4]{0} atan(f32[4]{0} %asinh)
          %atanh = f32[4]{0} atanh(f32[4]{0} %atan)
          %cosh = f32[4]{0} cosh(f32[4]{0} %atanh)
          %sinh = f32[4]{0} sinh(f32[4]{0} %cosh)
          %bitcast-convert = u4[4]{0} bitcast-convert(s4[4]{0} %b)
          %convert = f8e4m3fn[4]{0} convert(f32[4]{0} %sinh)
          %constant = f8e5m2fnuz[4]{0} constant({0.5, -3, 60000, nan})
          %bitcast-convert.1 = s32[4]{0} bitcast-convert(f32[4]{0} %sinh)
          ROOT %tuple = (f32[4]{0}, u4[4]{0}, f8e4m3fn[4]{0}, f8e5m2fnuz[4]{0}, s32[4]{0}) tuple(f32[4]{0} %sinh, u4[4]{0} %bitcast-convert, f8e4m3fn[4]{0} %convert, f8e5m2fnuz[4]{0} %constant, s32[4]{0} %bitcast-convert.1)
        }
    """,
    "binary": """
        HloModule binary

        ENTRY %main (a: f32[4]{0}, b: f32[4]{0}, i: s32[4]{0}, j: s32[4]{0}) -> (f32[4]{0}, s32[4]{0}, pred[4]{0}) {
          %a = f32[4]{0} parameter(0)
          %b = f32[4]{0} parameter(1)
          %i = s32[4]{0} parameter(2)
          %j = s32[4]{0} parameter(3)
          %add = f32[4]{0} add(f32[4]{0} %a, f32[4]{0} %b)
          %atan2 = f32[4]{0} atan2(f32[4]{0} %add, f32[4]{0} %b)
          %divide = f32[4]{0} divide(f32[4]{0} %atan2, f32[4]{0} %b)
          %maximum = f32[4]{0} maximum(f32[4]{0} %divide, f32[4]{0} %b)
          %minimum = f32[4]{0} minimum(f32[4]{0} %maximum, f32[4]{0} %b)
          %multiply = f32[4]{0} multiply(f32[4]{0} %minimum, f32[4]{0} %b)
          %power = f32[4]{0} power(f32[4]{0} %multiply, f32[4]{0} %b)
          %remainder = f32[4]{0} remainder(f32[4]{0} %power, f32[4]{0} %b)
          %subtract = f32[4]{0} subtract(f32[4]{0} %remainder, f32[4]{0} %b)
          %and = s32[4]{0} and(s32[4]{0} %i, s32[4]{0} %j)
          %or = s32[4]{0} or(s32[4]{0} %and, s32[4]{0} %j)
          %xor = s32[4]{0} xor(s32[4]{0} %or, s32[4]{0} %j)
          %shift-left = s32[4]{0} shift-left(s32[4]{0} %xor, s32[4]{0} %j)
          %shift-right-arithmetic = s32[4]{0} shift-right-arithmetic(s32[4]{0} %shift-left, s32[4]{0} %j)
          %shift-right-logical = s32[4]{0} shift-right-logical(s32[4]{0} %shift-right-arithmetic, s32[4]{0} %j)
          %compare = pred[4]{0} compare(f32[4]{0} %subtract, f32[4]{0} %b), direction=GT
          ROOT %tuple = (f32[4]{0}, s32[4]{0}, pred[4]{0}) tuple(f32[4]{0} %subtract, s32[4]{0} %shift-right-logical, pred[4]{0} %compare)
        }
    """,
    "ternary": """
        HloModule ternary

        ENTRY %main (p: pred[4]{0}, a: f32[4]{0}, lo: f32[]{}, hi: f32[]{}) -> f32[4]{0} {
          %p = pred[4]{0} parameter(0)
          %a = f32[4]{0} parameter(1)
          %lo = f32[]{} parameter(2)
          %hi = f32[]{} parameter(3)
          %clamp = f32[4]{0} clamp(f32[]{} %lo, f32[4]{0} %a, f32[]{} %hi)
          ROOT %select = f32[4]{0} select(pred[4]{0} %p, f32[4]{0} %clamp, f32[4]{0} %a)
        }
    """,
    "movement": """
        HloModule movement

        ENTRY %main (x: f32[2,3]{1,0}, v: f32[3]{0}) -> (f32[6]{0}, f32[3,2]{0,1}, f32[2,5]{1,0}, f32[2,3]{0,1}, f32[3,5]{1,0}, f32[5,3]{1,0}, f32[2,3]{1,0}, f32[1,2]{1,0}) {
          %x = f32[2,3]{1,0} parameter(0)
          %v = f32[3]{0} parameter(1)
          %reshape = f32[6]{0} reshape(f32[2,3]{1,0} %x)
          %bitcast = f32[3,2]{0,1} bitcast(f32[2,3]{1,0} %x)
          %broadcast = f32[2,3]{1,0} broadcast(f32[3]{0} %v), dimensions={1}
          %transpose = f32[3,2]{1,0} transpose(f32[2,3]{1,0} %broadcast), dimensions={1,0}
          %slice = f32[2,2]{1,0} slice(f32[3,2]{1,0} %transpose), slice={[1:3], [0:2]}
          %concatenate = f32[2,5]{1,0} concatenate(f32[2,3]{1,0} %x, f32[2,2]{1,0} %slice), dimensions={1}
          %copy = f32[2,3]{0,1} copy(f32[2,3]{1,0} %x)
          %zero = f32[]{} constant(0)
          %pad = f32[3,5]{1,0} pad(f32[2,3]{1,0} %x, f32[]{} %zero), padding=0_1x1_1
          %pad.1 = f32[5,3]{1,0} pad(f32[2,3]{1,0} %x, f32[]{} %zero), padding=1_1_1x-1_1_0
          %reverse = f32[2,3]{1,0} reverse(f32[2,3]{1,0} %x), dimensions={0,1}
          %slice.1 = f32[1,2]{1,0} slice(f32[2,3]{1,0} %reverse), slice={[0:2:2], [0:3:2]}
          ROOT %tuple = (f32[6]{0}, f32[3,2]{0,1}, f32[2,5]{1,0}, f32[2,3]{0,1}, f32[3,5]{1,0}, f32[5,3]{1,0}, f32[2,3]{1,0}, f32[1,2]{1,0}) tuple(f32[6]{0} %reshape, f32[3,2]{0,1} %bitcast, f32[2,5]{1,0} %concatenate, f32[2,3]{0,1} %copy, f32[3,5]{1,0} %pad, f32[5,3]{1,0} %pad.1, f32[2,3]{1,0} %reverse, f32[1,2]{1,0} %slice.1)
        }
    """,
    "gather": """
        HloModule gather

        ENTRY %main (x: f32[5,3]{1,0}, i: s32[2,1]{1,0}) -> f32[2,3]{1,0} {
          %x = f32[5,3]{1,0} parameter(0)
          %i = s32[2,1]{1,0} parameter(1)
          ROOT %gather = f32[2,3]{1,0} gather(f32[5,3]{1,0} %x, s32[2,1]{1,0} %i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,3}
        }
    """,
    "gather_batching_dims": """
        HloModule gather_batching_dims

        ENTRY %main (x: f32[4,5,3]{2,1,0}, i: s64[4,2]{1,0}) -> f32[4,2,3]{2,1,0} {
          %x = f32[4,5,3]{2,1,0} parameter(0)
          %i = s64[4,2]{1,0} parameter(1)
          ROOT %gather = f32[4,2,3]{2,1,0} gather(f32[4,5,3]{2,1,0} %x, s64[4,2]{1,0} %i), offset_dims={2}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1,3}
        }
    """,
    "scatter": """
        HloModule scatter

        %add (x: f32[]{}, y: f32[]{}) -> f32[]{} {
          %x = f32[]{} parameter(0)
          %y = f32[]{} parameter(1)
          ROOT %add = f32[]{} add(f32[]{} %x, f32[]{} %y)
        }

        %replace (old: f32[]{}, new: f32[]{}) -> f32[]{} {
          %old = f32[]{} parameter(0)
          ROOT %new = f32[]{} parameter(1)
        }

        ENTRY %main (x: f32[5,3]{1,0}, i: s32[2,1]{1,0}, u: f32[2,3]{1,0}, j: s64[5,2]{1,0}, v: f32[5,2]{1,0}) -> (f32[5,3]{1,0}, f32[5,3]{1,0}) {
          %x = f32[5,3]{1,0} parameter(0)
          %i = s32[2,1]{1,0} parameter(1)
          %u = f32[2,3]{1,0} parameter(2)
          %j = s64[5,2]{1,0} parameter(3)
          %v = f32[5,2]{1,0} parameter(4)
          %scatter = f32[5,3]{1,0} scatter(f32[5,3]{1,0} %x, s32[2,1]{1,0} %i, f32[2,3]{1,0} %u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
          %scatter.1 = f32[5,3]{1,0} scatter(f32[5,3]{1,0} %x, s64[5,2]{1,0} %j, f32[5,2]{1,0} %v), update_window_dims={}, inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, input_batching_dims={0}, scatter_indices_batching_dims={0}, index_vector_dim=2, to_apply=%replace
          ROOT %tuple = (f32[5,3]{1,0}, f32[5,3]{1,0}) tuple(f32[5,3]{1,0} %scatter, f32[5,3]{1,0} %scatter.1)
        }
    """,
    "convolution": """
        HloModule convolution

        ENTRY %main (x: f32[2,4,5,5]{3,2,1,0}, k: f32[4,2,3,3]{3,2,1,0}) -> (f32[2,4,3,3]{3,2,1,0}, f32[2,4,7,7]{3,2,1,0}, f32[1,4,3,3]{3,2,1,0}) {
          %x = f32[2,4,5,5]{3,2,1,0} parameter(0)
          %k = f32[4,2,3,3]{3,2,1,0} parameter(1)
          %convolution = f32[2,4,3,3]{3,2,1,0} convolution(f32[2,4,5,5]{3,2,1,0} %x, f32[4,2,3,3]{3,2,1,0} %k), window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01, feature_group_count=2
          %convolution.1 = f32[2,4,7,7]{3,2,1,0} convolution(f32[2,4,5,5]{3,2,1,0} %x, f32[4,2,3,3]{3,2,1,0} %k), window={size=3x3 pad=1_1x1_1 lhs_dilate=2x2 rhs_dilate=2x2}, dim_labels=bf01_oi01->bf01, feature_group_count=2
          %slice = f32[2,2,5,5]{3,2,1,0} slice(f32[2,4,5,5]{3,2,1,0} %x), slice={[0:2], [0:2], [0:5], [0:5]}
          %convolution.2 = f32[1,4,3,3]{3,2,1,0} convolution(f32[2,2,5,5]{3,2,1,0} %slice, f32[4,2,3,3]{3,2,1,0} %k), window={size=3x3}, dim_labels=bf01_oi01->bf01, batch_group_count=2
          ROOT %tuple = (f32[2,4,3,3]{3,2,1,0}, f32[2,4,7,7]{3,2,1,0}, f32[1,4,3,3]{3,2,1,0}) tuple(f32[2,4,3,3]{3,2,1,0} %convolution, f32[2,4,7,7]{3,2,1,0} %convolution.1, f32[1,4,3,3]{3,2,1,0} %convolution.2)
        }
    """,
    "convolution_nhwc": """
        HloModule convolution_nhwc

        ENTRY %main (x: f32[1,5,5,2]{3,2,1,0}, k: f32[3,3,2,4]{3,2,1,0}) -> f32[1,5,5,4]{3,2,1,0} {
          %x = f32[1,5,5,2]{3,2,1,0} parameter(0)
          %k = f32[3,3,2,4]{3,2,1,0} parameter(1)
          ROOT %convolution = f32[1,5,5,4]{3,2,1,0} convolution(f32[1,5,5,2]{3,2,1,0} %x, f32[3,3,2,4]{3,2,1,0} %k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
        }
    """,
    "dot": """
        HloModule dot

        ENTRY %main (a: f32[2,3,4]{2,1,0}, b: f32[2,4,5]{2,1,0}, m: f32[3,4]{1,0}) -> (f32[2,3,5]{2,1,0}, f32[3,2,5]{2,1,0}, f32[3,4]{1,0}) {
          %a = f32[2,3,4]{2,1,0} parameter(0)
          %b = f32[2,4,5]{2,1,0} parameter(1)
          %m = f32[3,4]{1,0} parameter(2)
          %dot = f32[2,3,5]{2,1,0} dot(f32[2,3,4]{2,1,0} %a, f32[2,4,5]{2,1,0} %b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
          %dot.1 = f32[3,2,5]{2,1,0} dot(f32[3,4]{1,0} %m, f32[2,4,5]{2,1,0} %b), lhs_contracting_dims={1}, rhs_contracting_dims={1}
          %v = f32[4]{0} constant({1, 2, 3, 4})
          %w = f32[4]{0} constant({0.5, 0.25, 0.125, 0.0625})
          %outer = f32[4,4]{1,0} dot(f32[4]{0} %v, f32[4]{0} %w)
          %dot.2 = f32[3,4]{1,0} dot(f32[3,4]{1,0} %m, f32[4,4]{1,0} %outer), lhs_contracting_dims={1}, rhs_contracting_dims={0}
          ROOT %tuple = (f32[2,3,5]{2,1,0}, f32[3,2,5]{2,1,0}, f32[3,4]{1,0}) tuple(f32[2,3,5]{2,1,0} %dot, f32[3,2,5]{2,1,0} %dot.1, f32[3,4]{1,0} %dot.2)
        }
    """,
    "reduce": """
        HloModule reduce

        %add (x: f32[]{}, y: f32[]{}) -> f32[]{} {
          %x = f32[]{} parameter(0)
          %y = f32[]{} parameter(1)
          ROOT %add = f32[]{} add(f32[]{} %x, f32[]{} %y)
        }

        ENTRY %main (x: f32[4,6]{1,0}) -> (f32[4]{0}, f32[2,3]{1,0}, f32[]{}) {
          %x = f32[4,6]{1,0} parameter(0)
          %zero = f32[]{} constant(0)
          %reduce = f32[4]{0} reduce(f32[4,6]{1,0} %x, f32[]{} %zero), dimensions={1}, to_apply=%add
          %reduce-window = f32[2,3]{1,0} reduce-window(f32[4,6]{1,0} %x, f32[]{} %zero), window={size=2x2 stride=2x2}, to_apply=%add
          %reduce-window.1 = f32[]{} reduce-window(f32[]{} %zero, f32[]{} %zero), to_apply=%add
          ROOT %tuple = (f32[4]{0}, f32[2,3]{1,0}, f32[]{}) tuple(f32[4]{0} %reduce, f32[2,3]{1,0} %reduce-window, f32[]{} %reduce-window.1)
        }
    """,
    "variadic_reduce": """
        HloModule variadic_reduce

        %argmax (v0: f32[]{}, i0: s32[]{}, v1: f32[]{}, i1: s32[]{}) -> (f32[]{}, s32[]{}) {
          %v0 = f32[]{} parameter(0)
          %i0 = s32[]{} parameter(1)
          %v1 = f32[]{} parameter(2)
          %i1 = s32[]{} parameter(3)
          %compare = pred[]{} compare(f32[]{} %v0, f32[]{} %v1), direction=GE
          %select = f32[]{} select(pred[]{} %compare, f32[]{} %v0, f32[]{} %v1)
          %select.1 = s32[]{} select(pred[]{} %compare, s32[]{} %i0, s32[]{} %i1)
          ROOT %tuple = (f32[]{}, s32[]{}) tuple(f32[]{} %select, s32[]{} %select.1)
        }

        ENTRY %main (x: f32[4,6]{1,0}) -> s32[4]{0} {
          %x = f32[4,6]{1,0} parameter(0)
          %iota = s32[4,6]{1,0} iota(), iota_dimension=1
          %low = f32[]{} constant(-inf)
          %zero = s32[]{} constant(0)
          %reduce = (f32[4]{0}, s32[4]{0}) reduce(f32[4,6]{1,0} %x, s32[4,6]{1,0} %iota, f32[]{} %low, s32[]{} %zero), dimensions={1}, to_apply=%argmax
          ROOT %get-tuple-element = s32[4]{0} get-tuple-element((f32[4]{0}, s32[4]{0}) %reduce), index=1
        }
    """,
    "sort": """
        HloModule sort

        %greater (a: f32[]{}, b: f32[]{}, i: s32[]{}, j: s32[]{}) -> pred[]{} {
          %a = f32[]{} parameter(0)
          %b = f32[]{} parameter(1)
          %i = s32[]{} parameter(2)
          %j = s32[]{} parameter(3)
          ROOT %compare = pred[]{} compare(f32[]{} %a, f32[]{} %b), direction=GT
        }

        %less (x: f32[]{}, y: f32[]{}) -> pred[]{} {
          %x = f32[]{} parameter(0)
          %y = f32[]{} parameter(1)
          ROOT %compare = pred[]{} compare(f32[]{} %x, f32[]{} %y), direction=LT
        }

        ENTRY %main (x: f32[4,6]{1,0}) -> ((f32[4,6]{1,0}, s32[4,6]{1,0}), f32[4,6]{1,0}, (f32[4,2]{1,0}, s32[4,2]{1,0})) {
          %x = f32[4,6]{1,0} parameter(0)
          %iota = s32[4,6]{1,0} iota(), iota_dimension=1
          %sort = (f32[4,6]{1,0}, s32[4,6]{1,0}) sort(f32[4,6]{1,0} %x, s32[4,6]{1,0} %iota), dimensions={1}, is_stable=true, to_apply=%greater
          %sort.1 = f32[4,6]{1,0} sort(f32[4,6]{1,0} %x), dimensions={0}, to_apply=%less
          %topk = (f32[4,2]{1,0}, s32[4,2]{1,0}) topk(f32[4,6]{1,0} %x), k=2, largest=false
          ROOT %tuple = ((f32[4,6]{1,0}, s32[4,6]{1,0}), f32[4,6]{1,0}, (f32[4,2]{1,0}, s32[4,2]{1,0})) tuple((f32[4,6]{1,0}, s32[4,6]{1,0}) %sort, f32[4,6]{1,0} %sort.1, (f32[4,2]{1,0}, s32[4,2]{1,0}) %topk)
        }
    """,
    "fusion": """
        HloModule fusion

        %fused_computation (param_0: f32[4]{0}, param_1: f32[4]{0}) -> f32[4]{0} {
          %param_0 = f32[4]{0} parameter(0)
          %param_1 = f32[4]{0} parameter(1)
          %multiply = f32[4]{0} multiply(f32[4]{0} %param_0, f32[4]{0} %param_1)
          ROOT %exponential = f32[4]{0} exponential(f32[4]{0} %multiply)
        }

        ENTRY %main (a: f32[4]{0}, b: f32[4]{0}) -> f32[4]{0} {
          %a = f32[4]{0} parameter(0)
          %b = f32[4]{0} parameter(1)
          ROOT %fusion = f32[4]{0} fusion(f32[4]{0} %a, f32[4]{0} %b), kind=kLoop, calls=%fused_computation
        }
    """,
    "constants": """
        HloModule constants

        ENTRY %main () -> (f32[]{}, f32[3]{0}, s32[2,2]{1,0}, pred[2]{0}, bf16[2]{0}, f16[]{}, u8[0]{0}, f64[]{}, s64[]{}, u64[]{}, f32[2,0]{1,0}, f32[2,1,2]{2,1,0}, pred[]{}, f32[3]{0}) {
          %c0 = f32[]{} constant(1.5)
          %c1 = f32[3]{0} constant({1, -2.5, -inf})
          %c2 = s32[2,2]{1,0} constant({ {1, 2}, {3, -4} })
          %c3 = pred[2]{0} constant({true, false})
          %c4 = bf16[2]{0} constant({0.1, nan})
          %c5 = f16[]{} constant(65500)
          %c6 = u8[0]{0} constant({})
          %c7 = f64[]{} constant(0.1)
          %c8 = s64[]{} constant(-9223372036854775808)
          %c9 = u64[]{} constant(18446744073709551615)
          %c10 = f32[2,0]{1,0} constant({ {}, {} })
          %c11 = f32[2,1,2]{2,1,0} constant({ { {1e-07, 2} }, { {3e+30, -0} } })
          %c12 = pred[]{} constant(false)
          %c13 = f32[3]{0} constant({0.0001, 123456790, 1e+16})
          ROOT %tuple = (f32[]{}, f32[3]{0}, s32[2,2]{1,0}, pred[2]{0}, bf16[2]{0}, f16[]{}, u8[0]{0}, f64[]{}, s64[]{}, u64[]{}, f32[2,0]{1,0}, f32[2,1,2]{2,1,0}, pred[]{}, f32[3]{0}) tuple(f32[]{} %c0, f32[3]{0} %c1, s32[2,2]{1,0} %c2, pred[2]{0} %c3, bf16[2]{0} %c4, f16[]{} %c5, u8[0]{0} %c6, f64[]{} %c7, s64[]{} %c8, u64[]{} %c9, f32[2,0]{1,0} %c10, f32[2,1,2]{2,1,0} %c11, pred[]{} %c12, f32[3]{0} %c13)
        }
    """,
    "root_not_last": """
        HloModule root_not_last

        ENTRY %main (a: f32[4]{0}) -> f32[4]{0} {
          %a = f32[4]{0} parameter(0)
          ROOT %negate = f32[4]{0} negate(f32[4]{0} %a)
          %unused = f32[4]{0} exponential(f32[4]{0} %a)
        }
    """,
    "control_flow": """
        HloModule control_flow

        %cond (s: (s32[]{}, f32[4]{0})) -> pred[]{} {
          %s = (s32[]{}, f32[4]{0}) parameter(0)
          %i = s32[]{} get-tuple-element((s32[]{}, f32[4]{0}) %s), index=0
          %n = s32[]{} constant(5)
          ROOT %lt = pred[]{} compare(s32[]{} %i, s32[]{} %n), direction=LT
        }

        %body (s.1: (s32[]{}, f32[4]{0})) -> (s32[]{}, f32[4]{0}) {
          %s.1 = (s32[]{}, f32[4]{0}) parameter(0)
          %i.1 = s32[]{} get-tuple-element((s32[]{}, f32[4]{0}) %s.1), index=0
          %x = f32[4]{0} get-tuple-element((s32[]{}, f32[4]{0}) %s.1), index=1
          %one = s32[]{} constant(1)
          %next = s32[]{} add(s32[]{} %i.1, s32[]{} %one)
          %y = f32[4]{0} add(f32[4]{0} %x, f32[4]{0} %x)
          ROOT %t = (s32[]{}, f32[4]{0}) tuple(s32[]{} %next, f32[4]{0} %y)
        }

        %neg (a: f32[4]{0}) -> f32[4]{0} {
          %a = f32[4]{0} parameter(0)
          ROOT %n.1 = f32[4]{0} negate(f32[4]{0} %a)
        }

        %id (a.1: f32[4]{0}) -> f32[4]{0} {
          ROOT %a.1 = f32[4]{0} parameter(0)
        }

        ENTRY %main (x.1: f32[4]{0}, p: pred[]{}, k: s32[]{}) -> (f32[4]{0}, f32[4]{0}, f32[2]{0}) {
          %x.1 = f32[4]{0} parameter(0)
          %p = pred[]{} parameter(1)
          %k = s32[]{} parameter(2)
          %zero = s32[]{} constant(0)
          %init = (s32[]{}, f32[4]{0}) tuple(s32[]{} %zero, f32[4]{0} %x.1)
          %while = (s32[]{}, f32[4]{0}) while((s32[]{}, f32[4]{0}) %init), condition=%cond, body=%body
          %r = f32[4]{0} get-tuple-element((s32[]{}, f32[4]{0}) %while), index=1
          %c = f32[4]{0} conditional(pred[]{} %p, f32[4]{0} %r, f32[4]{0} %x.1), true_computation=%neg, false_computation=%id
          %c.1 = f32[4]{0} conditional(s32[]{} %k, f32[4]{0} %c, f32[4]{0} %x.1, f32[4]{0} %r), branch_computations={%neg, %id, %neg}
          %ds = f32[2]{0} dynamic-slice(f32[4]{0} %c.1, s32[]{} %k), dynamic_slice_sizes={2}
          %dus = f32[4]{0} dynamic-update-slice(f32[4]{0} %x.1, f32[2]{0} %ds, s32[]{} %zero)
          ROOT %out = (f32[4]{0}, f32[4]{0}, f32[2]{0}) tuple(f32[4]{0} %r, f32[4]{0} %dus, f32[2]{0} %ds)
        }
    """,
    "custom_call": """
        HloModule custom_call

        ENTRY %main (x: f32[4]{0}) -> (f32[4]{0}, s32[2]{0}) {
          %x = f32[4]{0} parameter(0)
          %c = f32[4]{0} custom-call(f32[4]{0} %x), custom_call_target="scale", backend_config="k=\\"2\\"\\n"
          ROOT %t = (f32[4]{0}, s32[2]{0}) custom-call(f32[4]{0} %c, f32[4]{0} %x), custom_call_target="split"
        }
    """,
}
SNIPPETS = {name: hlo(text) for name, text in SNIPPETS.items()}


@pytest.mark.parametrize("name", SNIPPETS)
def test_round_trip(name):
    text = SNIPPETS[name]
    assert print_module(parse_module(text)) == text


def test_every_opcode_appears_in_a_round_trip_snippet():
    seen = {i.opcode for text in SNIPPETS.values()
            for comp in parse_module(text).computations for i in comp.instructions}
    assert not set(Opcode) - seen, sorted(o.text for o in set(Opcode) - seen)


def test_parser_keeps_names_attributes_and_structure():
    m = parse_module(SNIPPETS["reduce"])
    assert [c.name for c in m.computations] == ["add", "main"]
    assert m.entry is m.computations[-1]
    reduce = m.entry.instructions[2]
    assert reduce.name == "reduce" and reduce.attrs == {"dimensions": (1,)}
    assert reduce.called == [m.computations[0]]
    window = m.entry.instructions[3].attrs["window"]
    assert window == Window.make((2, 2), stride=(2, 2))
    conv = parse_module(SNIPPETS["convolution_nhwc"]).entry.root
    assert conv.attrs["dimension_numbers"] == ConvDimensionNumbers(0, 3, (1, 2), 3, 2, (0, 1),
                                                                   0, 3, (1, 2))
    assert conv.attrs["feature_group_count"] == 1 and conv.attrs["batch_group_count"] == 1
    dot = parse_module(SNIPPETS["dot"]).entry.instructions[3]
    assert dot.attrs["dimension_numbers"] == DotDimensionNumbers((0,), (2,), (0,), (1,))


def test_print_computation_prints_one_computation():
    m = parse_module(SNIPPETS["fusion"])
    text = print_computation(m.computations[0])
    assert text.startswith("%fused_computation (param_0: f32[4]{0}, param_1: f32[4]{0})")
    assert "ENTRY" not in text and text.endswith("}\n")


# --- modules built in code -------------------------------------------------

def _built_module() -> Module:
    m = Module("built")
    add = m.add_computation(scalar_computation("add", Opcode.ADD, dtypes.F32))
    b = Builder("main")
    x = b.parameter(0, Shape.array(dtypes.F32, (1, 2, 6, 6)), "x")
    w = b.constant(np.arange(36, dtype=np.float32).reshape(2, 2, 3, 3) / 7, name="w")
    conv = b.convolution(x, w, Window.make((3, 3), (1, 1), (1, 1), (1, 1)),
                         ConvDimensionNumbers.nchw(2))
    pooled = b.reduce_window(conv, b.constant(0.0), Window.make((1, 1, 2, 2), (1, 1, 2, 2)),
                             add)
    flat = b.reshape(pooled, (1, 18))
    fc = b.constant(np.linspace(-1, 1, 18 * 4, dtype=np.float32).reshape(18, 4))
    y = b.dot(flat, fc, DotDimensionNumbers((), (1,), (), (0,)))
    s = b.reduce(y, b.constant(0.0), (1,), add)
    big = b.constant(np.float32(3.0e38))
    t = b.tuple([y, b.compare(s, b.broadcast(big, (1,), ()), "LT")])
    m.add_computation(b.build(t), entry=True)
    return m


def test_builder_module_round_trips():
    m = _built_module()
    text = print_module(m)
    again = parse_module(text)
    assert print_module(again) == text
    for c1, c2 in zip(m.computations, again.computations):
        for i1, i2 in zip(c1.instructions, c2.instructions):
            assert (i1.name, i1.opcode, str(i1.shape)) == (i2.name, i2.opcode, str(i2.shape))
            assert i1.attrs == i2.attrs
            if i1.literal is not None:
                assert np.array_equal(i1.literal, i2.literal)
                assert i1.literal.dtype == i2.literal.dtype


def test_large_constants_false_abbreviates_and_does_not_parse():
    m = _built_module()
    text = print_module(m, large_constants=False)
    assert "constant({...})" in text        # the 72 fc weights; w (36) is kept
    assert "constant({ { { {0, " in text
    with pytest.raises(HloParseError, match="large_constants=False"):
        parse_module(text)


# --- literals ----------------------------------------------------------------

@pytest.mark.parametrize("value, dtype, text", [
    (1.5, dtypes.F32, "1.5"),
    (0.1, dtypes.F32, "0.1"),
    (1.0, dtypes.F32, "1"),
    (-0.0, dtypes.F32, "-0"),
    (1e-7, dtypes.F32, "1e-07"),
    (3e38, dtypes.F32, "3e+38"),
    (123456789, dtypes.F32, "123456790"),
    (np.inf, dtypes.F32, "inf"),
    (-np.inf, dtypes.F16, "-inf"),
    (np.nan, dtypes.BF16, "nan"),
    (0.1, dtypes.BF16, "0.1"),
    (0.1, dtypes.F64, "0.1"),
    (1 / 3, dtypes.F64, "0.3333333333333333"),
    (True, dtypes.PRED, "true"),
    (-7, dtypes.S8, "-7"),
])
def test_scalar_literal_text(value, dtype, text):
    assert format_literal(np.array(value, dtype=dtype.np), dtype) == text


def test_array_literal_text():
    assert format_literal(np.array([1, 2, 3], np.int32), dtypes.S32) == "{1, 2, 3}"
    assert format_literal(np.array([[1, 2], [3, 4]], np.int32), dtypes.S32) == \
        "{ {1, 2}, {3, 4} }"
    assert format_literal(np.zeros((2, 0, 3), np.float32), dtypes.F32) == "{ {}, {} }"
    assert format_literal(np.array([[True], [False]]), dtypes.PRED) == "{ {true}, {false} }"


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def _assert_same_values(a: np.ndarray, b: np.ndarray) -> None:
    """Bit-identical, except that every NaN only needs to stay a NaN."""
    assert a.dtype == b.dtype and a.shape == b.shape
    with np.errstate(invalid="ignore"):
        nan_a, nan_b = np.isnan(a), np.isnan(b)
    assert np.array_equal(nan_a, nan_b)
    assert np.array_equal(_bits(a)[~nan_a], _bits(b)[~nan_b])


@pytest.mark.parametrize("dtype", [dtypes.F16, dtypes.BF16], ids=str)
def test_every_16_bit_float_round_trips(dtype):
    values = np.arange(1 << 16, dtype=np.uint16).view(dtype.np).reshape(256, 256)
    _assert_same_values(values, parse_literal(format_literal(values, dtype), values.shape,
                                              dtype))


def test_random_f32_and_f64_bit_patterns_round_trip():
    rng = np.random.default_rng(0)
    f32 = rng.integers(0, 1 << 32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    f64 = rng.integers(0, 1 << 63, 2000, dtype=np.uint64).view(np.float64)
    for values, dtype in ((f32, dtypes.F32), (f64, dtypes.F64)):
        _assert_same_values(values, parse_literal(format_literal(values, dtype),
                                                  values.shape, dtype))


def test_f32_digits_are_the_shortest():
    rng = np.random.default_rng(1)
    values = np.concatenate([
        rng.standard_normal(3000).astype(np.float32),
        np.float32(2.0) ** np.arange(-40, 40, dtype=np.float32),      # asymmetric gaps
        rng.integers(1, 1000, 500).astype(np.float32) / 100,
    ])
    texts = format_literal(values, dtypes.F32)[1:-1].split(", ")
    for v, text in zip(values, texts):
        ours = literal_text._digits_of(text.lstrip("-"))[0]
        best = literal_text._digits_of(np.format_float_scientific(abs(v), unique=True))[0]
        assert len(ours) == len(best), (v, text, best)


def test_vectorized_and_per_element_float_formatting_agree():
    rng = np.random.default_rng(2)
    values = (rng.standard_normal(2000) * 10.0 ** rng.integers(-12, 12, 2000)).astype(np.float32)
    texts = format_literal(values, dtypes.F32)[1:-1].split(", ")
    assert texts == [literal_text._format_float_one(v, dtypes.F32) for v in values]


def test_literals_longer_than_a_chunk_round_trip(monkeypatch):
    monkeypatch.setattr(literal_text, "_CHUNK", 7)
    values = np.random.default_rng(3).standard_normal((3, 5, 4)).astype(np.float32)
    text = format_literal(values, dtypes.F32)
    monkeypatch.undo()
    assert text == format_literal(values, dtypes.F32)
    _assert_same_values(values, parse_literal(text, values.shape, dtypes.F32))


@pytest.mark.parametrize("text, dims, dtype, message", [
    ("{1, 2 3}", (3,), dtypes.F32, "nesting"),
    ("{1,,2}", (3,), dtypes.F32, "one value in each"),
    ("{ {1, 2} }", (2,), dtypes.F32, "nesting"),
    ("{1, x}", (2,), dtypes.F32, "'x' is not a f32 value"),
    ("{1.5}", (1,), dtypes.S32, "'1.5' is not a s32 value"),
    ("300", (), dtypes.S8, "300 is out of range for s8"),
    ("1e39", (), dtypes.F32, "out of range for f32"),
    ("maybe", (), dtypes.PRED, "not a pred value"),
])
def test_bad_literals(text, dims, dtype, message):
    with pytest.raises(ValueError, match=message):
        parse_literal(text, dims, dtype)


# --- reading XLA's own forms ---------------------------------------------------

def test_reads_xla_dump_forms():
    xla = hlo("""
        HloModule jit_f, entry_computation_layout={(f32[2,3]{1,0})->f32[2,3]{1,0}}

        ENTRY %main.4 (Arg_0.1: f32[2,3]) -> f32[2,3] {
          %Arg_0.1 = f32[2,3]{1,0} parameter(0)
          %constant.2 = f32[2,3]{1,0} constant({ { /*i0=0*/ 1, 2, 3 }, { /*i0=1*/ 4, 5, 6 } })
          ROOT %add.3 = f32[2,3]{1,0} add(%Arg_0.1, f32[2,3] %constant.2), metadata={op_name="jit(f)/add" source_line=7}
        }
    """)
    m = parse_module(xla)
    assert m.name == "jit_f"
    assert m.entry.instructions[1].literal.tolist() == [[1, 2, 3], [4, 5, 6]]
    assert print_module(m).splitlines()[2] == \
        "ENTRY %main.4 (Arg_0.1: f32[2,3]{1,0}) -> f32[2,3]{1,0} {"


def test_reads_names_without_percent_and_computations_without_headers():
    # As JAX prints HLO now: bare names, no computation signatures, operands without
    # shapes, parameters where they are first used.
    m = parse_module(hlo("""
        HloModule jit_f, entry_computation_layout={(f32[3]{0}, f32[3]{0})->f32[]}

        region_0.1 {
          reduce.4 = f32[] parameter(0)
          reduce.5 = f32[] parameter(1)
          ROOT add.1 = f32[] add(reduce.4, reduce.5)
        }

        ENTRY main.2 {
          x.1 = f32[3]{0} parameter(0)
          constant.1 = f32[] constant(0)
          y.1 = f32[3]{0} parameter(1)
          f32.1 = f32[3]{0} multiply(x.1, f32[3] y.1)
          ROOT r.1 = f32[] reduce(f32.1, constant.1), dimensions={0}, to_apply=region_0.1
        }
    """))
    assert [p.name for p in m.entry.parameters] == ["x.1", "y.1"]
    assert m.entry.root.called == [m.computations[0]]
    assert parse_module(print_module(m)).entry.root.name == "r.1"


def test_skips_the_stack_frame_sections_of_xla_dumps():
    m = parse_module(hlo("""
        HloModule jit_f, entry_computation_layout={(f32[]{})->f32[]{}}

        FileNames
        1 "/tmp/f.py"

        FileLocations
        1 {file_name_id=1 function_name_id=1 line=5 end_line=5 column=0 end_column=68}

        StackFrames
        1 {file_location_id=1 parent_frame_id=1}

        ENTRY %main.2 (x.1: f32[]) -> f32[] {
          %x.1 = f32[] parameter(0), metadata={op_name="x" stack_frame_id=1}
          ROOT %n.1 = f32[] negate(%x.1), metadata={op_name="jit(f)/neg" stack_frame_id=1}
        }
    """))
    assert m.entry.root.opcode is Opcode.NEGATE


def test_last_computation_is_the_entry_without_entry_keyword():
    text = SNIPPETS["fusion"].replace("ENTRY ", "")
    assert print_module(parse_module(text)) == SNIPPETS["fusion"]


# --- parse errors ----------------------------------------------------------------

def _entry_with(line: str) -> str:
    return ("HloModule m\n\nENTRY %main (a: f32[4]{0}) -> f32[4]{0} {\n"
            "  %a = f32[4]{0} parameter(0)\n" + line + "\n}\n")


# (line 5 of the module, where the error is: line, column, message)
ERRORS = [
    ("  %b = f32[4]{0} frobnicate(f32[4]{0} %a)", 5, 18, "unknown opcode 'frobnicate'"),
    ("  %b = f32[5]{0} negate(f32[4]{0} %a)", 5, 18,
     "negate has shape f32[4]{0}, not the declared f32[5]{0}"),
    ("  %b = f32[4]{0} negate(f32[4]{0} %z)", 5, 35, "unknown operand %z"),
    ("  %b = f32[4]{0} negate(s32[4]{0} %a)", 5, 35, "operand %a is f32[4]{0}, not s32[4]{0}"),
    ("  %b = f32[4]{0} broadcast(f32[4]{0} %a)", 5, 18,
     "broadcast needs attribute 'dimensions'"),
    ("  %b = f32[4]{0} negate(f32[4]{0} %a), dimensions={0}", 5, 40,
     "unknown attribute 'dimensions' for negate"),
    ("  %a = f32[4]{0} negate(f32[4]{0} %a)", 5, 3, "duplicate instruction %a"),
    ("  %b = f32[2]{0} constant({1, 2, 3})", 5, 27, "bad f32[2]{0} constant: literal nesting"),
    ("  %b = f32[4]{0} negate(f32[4]{0} %a) $", 5, 39, "unexpected character '$'"),
    ("  %b = f32[4]{0} negate(f32[4]{0} %a", 6, 1, "expected ',', found '}'"),
    ("  %b = f32[4]{2} negate(f32[4]{0} %a)", 5, 8, "layout (2,) is not a permutation"),
    ("  %b = q32[4]{0} negate(f32[4]{0} %a)", 5, 8, "unknown element type 'q32'"),
    ("  %b = pred[4]{0} compare(f32[4]{0} %a, f32[4]{0} %a), direction=XX", 5, 66,
     "expected one of EQ, NE, LT, LE, GT, GE, found 'XX'"),
    ("  %b = f32[]{} reduce(f32[4]{0} %a, f32[4]{0} %a), dimensions={0}, to_apply=%nope",
     5, 77, "unknown computation %nope"),
    ("  %b = f32[4]{0} dot(f32[4]{0} %a, f32[4]{0} %a), lhs_contracting_dims={7}", 5, 18,
     "invalid dot"),
    ("  %b = f32[4]{0} parameter(0)", 3, 7, "has parameter numbers [0, 0], not 0..1"),
]


@pytest.mark.parametrize("line, row, column, message", ERRORS,
                         ids=[e[3][:40] for e in ERRORS])
def test_parse_errors_give_line_and_column(line, row, column, message):
    with pytest.raises(HloParseError) as info:
        parse_module(_entry_with(line))
    assert str(info.value).startswith(f"line {row}, column {column}: "), str(info.value)
    assert message in str(info.value)


def test_header_must_match_the_body():
    text = SNIPPETS["ternary"].replace("(p: pred[4]{0},", "(q: pred[4]{0},")
    with pytest.raises(HloParseError, match=r"line 3, column 14: header parameter q"):
        parse_module(text)
    text = SNIPPETS["ternary"].replace("-> f32[4]{0} {", "-> f32[3]{0} {")
    with pytest.raises(HloParseError, match="header result f32"):
        parse_module(text)


def test_parse_error_is_a_value_error_and_an_xlac_error():
    with pytest.raises(ValueError):
        parse_module("HloModule")
    with pytest.raises(XlacError, match="line 1, column 10: expected a module name, found "
                                        "end of input"):
        parse_module("HloModule")


# --- control flow ----------------------------------------------------------------

def test_control_flow_keeps_called_computations_in_order():
    m = parse_module(SNIPPETS["control_flow"])
    comps = {c.name: c for c in m.computations}
    ins = {i.name: i for i in m.entry.instructions}
    assert ins["while"].called == [comps["cond"], comps["body"]]
    assert ins["c"].called == [comps["neg"], comps["id"]]
    assert ins["c.1"].called == [comps["neg"], comps["id"], comps["neg"]]
    assert ins["ds"].attrs == {"dynamic_slice_sizes": (2,)}


def test_a_pred_conditional_may_list_its_branches():
    text = SNIPPETS["control_flow"].replace(
        "true_computation=%neg, false_computation=%id", "branch_computations={%neg, %id}")
    assert print_module(parse_module(text)) == SNIPPETS["control_flow"]


@pytest.mark.parametrize("old, new, message", [
    (", body=%body", "", "while needs body=%computation"),
    ("condition=%cond", "condition=%nowhere", "unknown computation %nowhere"),
    ("false_computation=%id", "false_computation=%id, branch_computations={%id, %neg}",
     "not both"),
    ("branch_computations={%neg, %id, %neg}", "branch_computations={%neg, %id}",
     "2 branches and 3 branch operands"),
    ("dynamic_slice_sizes={2}", "dynamic_slice_sizes={5}", "do not fit f32[4]{0}"),
    ("condition=%cond, body=%body", "condition=%body, body=%cond", r"must return pred\[\]"),
])
def test_control_flow_errors(old, new, message):
    with pytest.raises(HloParseError, match=message):
        parse_module(SNIPPETS["control_flow"].replace(old, new))
