"""Quantization ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, the integer
ops MatMulInteger and ConvInteger, and the QOperator ops QLinearConv and QLinearMatMul
with com.microsoft's QGemm, QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu,
QLinearAveragePool, QLinearGlobalAveragePool, QLinearSoftmax and QLinearConcat.

Each is lowered to plain HLO in the form of its definition, nothing fused:

    dequantize(x) = (f32(x) - f32(zero_point)) * scale
    quantize(y)   = T(clamp(qmin, round_even(y / scale) + zero_point, qmax))
    integer ops   = dot / convolution of s32(x) - zero_point, accumulated in s32
    QLinearConv, QLinearMatMul, QGemm: requantize(acc) = quantize(f32(acc) * multiplier),
                    multiplier = x_scale * w_scale / y_scale, onnxruntime's float formula

(the rounding, clamping and zero point steps are in float: exact for the 8- and 16-bit
types, and no step can overflow). The optimizer's quantization pass
(optimizer/quantization.py) turns these forms into arithmetic on the narrow types; the
importer only states what they mean. The com.microsoft ops are defined as their
dequantize -> float op -> quantize (onnxruntime's contrib op documentation), but for
QLinearSoftmax with constant scales: onnxruntime's table arithmetic, which the pass also
gives a QDQ softmax.
"""
from __future__ import annotations

from math import ceil

import numpy as np

from ...hlo import DotDimensionNumbers, Opcode, dtypes
from ...hlo.qlinear import qlinear_softmax as qlinear_softmax_of
from .cast import cast
from .context import normalize_axis
from .math import matmul_of
from .nn import average_pool_of, convolution_of, softmax
from .registry import MS, register
from .types import hlo_dtype

_FLOAT8 = frozenset({dtypes.F8E4M3FN, dtypes.F8E4M3FNUZ, dtypes.F8E5M2, dtypes.F8E5M2FNUZ})
_QUANTIZED = frozenset({dtypes.S8, dtypes.U8, dtypes.S16, dtypes.U16, dtypes.S4, dtypes.U4,
                        dtypes.S2, dtypes.U2, dtypes.F4E2M1FN}) | _FLOAT8


# -- scales and zero points -------------------------------------------------------------

def quant_param(ctx, node, v, dims, axis: int, block_size: int, what: str):
    """A scale or zero point broadcast to ``dims``: a scalar or one element (per tensor),
    a 1-D tensor of dims[axis] elements (per axis), or with ``block_size``, ``dims`` with
    dims[axis] cut into blocks of that many elements (blocked). ``axis`` may be negative;
    it matters only for the last two."""
    b = ctx.b
    if v.shape.rank == 0 or (v.shape.rank == 1 and v.shape.dims[0] == 1 and not block_size):
        return b.broadcast(b.reshape(v, ()), dims, ())
    axis = normalize_axis(ctx, node, axis, len(dims))
    if not block_size:
        if v.shape.rank != 1 or v.shape.dims[0] != dims[axis]:
            raise ctx.error(node, f"{what} {v.shape} is neither a scalar nor one value per "
                                  f"element of axis {axis} of {list(dims)}")
        return b.broadcast(v, dims, (axis,))
    blocks = ceil(dims[axis] / block_size)
    want = tuple(blocks if d == axis else n for d, n in enumerate(dims))
    if block_size < 0 or v.shape.dims != want:
        raise ctx.error(node, f"{what} {v.shape} does not give blocks of {block_size} along "
                              f"axis {axis} of {list(dims)}: expected dims {list(want)}")
    # (.., blocks, ..) -> (.., blocks, block_size, ..) -> (.., blocks * block_size, ..)
    spread = dims[:axis] + (blocks, block_size) + dims[axis + 1:]
    mapped = tuple(d if d <= axis else d + 1 for d in range(len(dims)))
    full = b.reshape(b.broadcast(v, spread, mapped),
                     dims[:axis] + (blocks * block_size,) + dims[axis + 1:])
    if blocks * block_size != dims[axis]:
        full = b.slice(full, (0,) * len(dims), dims)
    return full


def _float_type(*types) -> dtypes.DType:
    """The type numpy computes ``a / b`` or ``a * b`` in for these operand types, as ONNX's
    reference does: f64 once an operand is a 32-bit integer, else the widest float."""
    if any(t.is_integer and t.bits >= 32 for t in types):
        return dtypes.F64
    floats = [t for t in types if t.is_float]
    if all(t == floats[0] for t in floats):
        return floats[0]
    return dtypes.F64 if dtypes.F64 in floats else dtypes.F32


# -- the two directions -----------------------------------------------------------------

def dequantize(ctx, x, scale, zero_point, out: dtypes.DType, node=None, axis: int = 1,
               block_size: int = 0):
    """(x - zero_point) * scale in f32 (f64 for 32-bit integers with a zero point), rounded
    to ``out``; float8 and float4 values have no zero point."""
    b, dims = ctx.b, x.shape.dims
    xt = x.shape.dtype
    ct = dtypes.F64 if xt.is_integer and xt.bits >= 32 and zero_point is not None \
        else dtypes.F32
    y = b.convert(x, ct)
    if zero_point is not None and xt.is_integer:
        y = b.op(Opcode.SUBTRACT, y, quant_param(ctx, node, b.convert(zero_point, ct), dims,
                                                 axis, block_size, "the zero point"))
    s = quant_param(ctx, node, b.convert(scale, ct), dims, axis, block_size, "the scale")
    return b.convert(b.op(Opcode.MULTIPLY, y, s), out)


def to_integer(ctx, y, zero_point, out: dtypes.DType):
    """``out``(clamp(qmin, round_even(y) + zero_point, qmax)), computed in y's float type
    (f32 for the narrow floats, whose spacing near 2**16 is too coarse for 16-bit zero
    points); ``zero_point`` is None or already in that type and broadcast to y."""
    b = ctx.b
    r = b.op(Opcode.ROUND_NEAREST_EVEN, y)
    ft = r.shape.dtype
    if ft.is_narrow_float:
        ft = dtypes.F32
        r = b.convert(r, ft)
    if zero_point is not None:
        r = b.op(Opcode.ADD, r, zero_point)
    info = out.info
    r = b.op(Opcode.CLAMP, ctx.scalar(info.min, ft), r, ctx.scalar(info.max, ft))
    return b.convert(r, out)


def _rounded_type(ct: dtypes.DType) -> dtypes.DType:
    """The type to_integer adds the zero point in after rounding in ``ct``."""
    return dtypes.F32 if ct.is_narrow_float else ct


def quantize(ctx, node, x, scale, zero_point, out: dtypes.DType, axis: int = 1,
             block_size: int = 0, precision: dtypes.DType | None = None):
    """QuantizeLinear: x / scale in ``precision`` (default: as numpy divides the two types),
    then to an integer type (rounded to nearest even, the zero point added, saturated), to
    a float8 type (``cast``: ONNX's saturate; no zero point) or to float4 (the zero point
    added in float)."""
    b, dims = ctx.b, x.shape.dims
    ct = precision or _float_type(x.shape.dtype, scale.shape.dtype)
    s = quant_param(ctx, node, b.convert(scale, ct), dims, axis, block_size, "the scale")
    y = b.op(Opcode.DIVIDE, b.convert(x, ct), s)
    if out in _FLOAT8:
        return cast(ctx, node, y, out)
    ft = _rounded_type(ct) if out.is_integer else dtypes.F32
    zp = None if zero_point is None else quant_param(ctx, node, b.convert(zero_point, ft),
                                                     dims, axis, block_size, "the zero point")
    if out.is_integer:
        return to_integer(ctx, y, zp, out)
    if zp is not None:
        y = b.op(Opcode.ADD, b.convert(y, ft), zp)
    return b.convert(y, out)


def requantize(ctx, acc, multiplier, zero_point, out: dtypes.DType):
    """onnxruntime's requantization of an integer accumulator: quantize(f32(acc) *
    multiplier) with ``multiplier`` and ``zero_point`` (f32) broadcast to acc, or no zero
    point (None)."""
    y = ctx.b.op(Opcode.MULTIPLY, ctx.b.convert(acc, dtypes.F32), multiplier)
    return to_integer(ctx, y, zero_point, out)


def _widened(ctx, node, x, zero_point, dims_axis: int | None, what: str):
    """s32(x) - s32(zero_point): a scalar zero point, or one per element of ``dims_axis``."""
    b = ctx.b
    y = b.convert(x, dtypes.S32)
    if zero_point is None:
        return y
    if zero_point.shape.dtype != x.shape.dtype:
        raise ctx.error(node, f"{what} zero point is {zero_point.shape.dtype}, its tensor "
                              f"{x.shape.dtype}")
    z = quant_param(ctx, node, b.convert(zero_point, dtypes.S32), x.shape.dims,
                    0 if dims_axis is None else dims_axis, 0, f"the {what} zero point")
    return b.op(Opcode.SUBTRACT, y, z)


def _integer_type(ctx, node, x, what: str) -> None:
    if x.shape.dtype not in (dtypes.S8, dtypes.U8):
        raise ctx.error(node, f"{what} must be int8 or uint8, got {x.shape.dtype}")


def _per_tensor(ctx, node, v, what: str):
    """A scale or zero point that must be one value: as a scalar."""
    if v is None:
        return None
    if v.shape.num_elements != 1:
        raise ctx.error(node, f"{what} must be a scalar, got {v.shape}")
    return ctx.b.reshape(v, ())


# -- ONNX ---------------------------------------------------------------------------------

@register("QuantizeLinear", since=10)
def quantize_linear(ctx, node):
    x, scale, zp = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    block_size = ctx.attr(node, "block_size", 0)
    output_dtype = ctx.attr(node, "output_dtype", 0)
    precision = ctx.attr(node, "precision", 0)
    ctx.attr(node, "saturate", 1)             # read by cast() for the float8 types
    if zp is not None:
        out = zp.shape.dtype
        if output_dtype and hlo_dtype(output_dtype, "output_dtype") != out:
            raise ctx.error(node, f"output_dtype {hlo_dtype(output_dtype, 'output_dtype')} "
                                  f"differs from the zero point's type {out}")
    else:
        out = hlo_dtype(output_dtype, "output_dtype") if output_dtype else dtypes.U8
    if out not in _QUANTIZED:
        raise ctx.error(node, f"{out} is not a quantized type")
    prec = hlo_dtype(precision, "precision") if precision else None
    return [quantize(ctx, node, x, scale, zp, out, ctx.attr(node, "axis", 1), block_size,
                     prec)]


@register("DequantizeLinear", since=10)
def dequantize_linear(ctx, node):
    x, scale, zp = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    block_size = ctx.attr(node, "block_size", 0)
    output_dtype = ctx.attr(node, "output_dtype", 0)
    out = hlo_dtype(output_dtype, "output_dtype") if output_dtype else scale.shape.dtype
    if out == dtypes.F8E8M0FNU:
        out = dtypes.F32        # an E8M0 scale: the output type must be given; f32 as numpy
    xt = x.shape.dtype
    if zp is not None and xt.is_integer and zp.shape.dtype != xt:
        raise ctx.error(node, f"the zero point is {zp.shape.dtype}, x is {xt}")
    return [dequantize(ctx, x, scale, zp, out, node, ctx.attr(node, "axis", 1), block_size)]


@register("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(ctx, node):
    x = ctx.input(node, 0)
    if not x.shape.dtype.is_float:
        raise ctx.error(node, f"x must be a float tensor, got {x.shape.dtype}")
    y, scale, zp = dynamic_quantized(ctx, x)
    return [y, ctx.b.convert(scale, x.shape.dtype), zp]


def dynamic_quantized(ctx, x):
    """ONNX's DynamicQuantizeLinear of float ``x``: (u8 y, f32 scale, u8 zero point).

    The range [min(0, min x), max(0, max x)] onto [0, 255]: scale = (hi - lo) / 255, zero
    point = rint(clamp(-lo / scale)). Where hi == lo (x all 0) the spec divides by 0: the
    scale is 1, as onnxruntime makes it (the onnx package's reference gives 1 / 255); y
    and the zero point are 0 either way."""
    b, f = ctx.b, dtypes.F32
    xf = b.convert(x, f)
    every = tuple(range(x.shape.rank))
    hi = b.op(Opcode.MAXIMUM, ctx.reduce(xf, every, Opcode.MAXIMUM, -np.inf), ctx.scalar(0, f))
    lo = b.op(Opcode.MINIMUM, ctx.reduce(xf, every, Opcode.MINIMUM, np.inf), ctx.scalar(0, f))
    scale = b.op(Opcode.SELECT, b.compare(hi, lo, "EQ"), ctx.scalar(1, f),
                 b.op(Opcode.DIVIDE, b.op(Opcode.SUBTRACT, hi, lo), ctx.scalar(255, f)))
    initial = b.op(Opcode.SUBTRACT, ctx.scalar(0, f), b.op(Opcode.DIVIDE, lo, scale))
    zp = b.op(Opcode.ROUND_NEAREST_EVEN,
              b.op(Opcode.CLAMP, ctx.scalar(0, f), initial, ctx.scalar(255, f)))
    y = b.op(Opcode.DIVIDE, xf, b.broadcast(scale, x.shape.dims, ()))
    y = b.op(Opcode.ADD, b.op(Opcode.ROUND_NEAREST_EVEN, y), b.broadcast(zp, x.shape.dims, ()))
    y = b.op(Opcode.CLAMP, ctx.scalar(0, f), y, ctx.scalar(255, f))
    return b.convert(y, dtypes.U8), scale, b.convert(zp, dtypes.U8)


@register("MatMulInteger", since=10)
def matmul_integer(ctx, node):
    # (A - a_zero_point) . (B - b_zero_point) in s32; a zero point per row of A or per
    # column of B where it is 1-D.
    return [integer_matmul(ctx, node, ctx.input(node, 0), ctx.input(node, 1),
                           ctx.input(node, 2), ctx.input(node, 3))]


def integer_matmul(ctx, node, a, b_, a_zp, b_zp):
    """(A - a_zp) . (B - b_zp) in s32, A and B 8-bit; a zero point per row of A or per
    column of B where it is 1-D."""
    for v, what in ((a, "A"), (b_, "B")):
        _integer_type(ctx, node, v, what)
    a32 = _widened(ctx, node, a, a_zp, -2 if a.shape.rank > 1 else None, "A")
    b32 = _widened(ctx, node, b_, b_zp, -1, "B")
    return matmul_of(ctx, node, a32, b32, dtypes.S32)


def scaled_product(ctx, node, acc, a_scale, b_scale, bias, out):
    """onnxruntime's ``f32(acc) * (a_scale * b_scale) + bias`` (b_scale and bias per
    column where they are 1-D), in ``out``."""
    b, dims = ctx.b, acc.shape.dims
    col = len(dims) - 1

    def per_column(v, what):
        v = b.convert(v, dtypes.F32)
        if v.shape.num_elements == 1:
            return b.broadcast(b.reshape(v, ()), dims, ())
        if v.shape.dims != (dims[-1],):
            raise ctx.error(node, f"{what} {v.shape} is neither a scalar nor one per column "
                                  f"of {list(dims)}")
        return b.broadcast(v, dims, (col,))
    if a_scale.shape.num_elements != 1:
        raise ctx.error(node, f"a_scale must be a scalar, got {a_scale.shape}")
    scale = b.op(Opcode.MULTIPLY, per_column(a_scale, "a_scale"),
                 per_column(b_scale, "b_scale"))
    y = b.op(Opcode.MULTIPLY, b.convert(acc, dtypes.F32), scale)
    if bias is not None:
        y = b.op(Opcode.ADD, y, per_column(bias, "bias"))
    return b.convert(y, out)


@register("ConvInteger", since=10)
def conv_integer(ctx, node):
    # conv(X - x_zero_point, W - w_zero_point) in s32; w_zero_point may be per output channel.
    x, w = ctx.input(node, 0), ctx.input(node, 1)
    for v, what in ((x, "X"), (w, "W")):
        _integer_type(ctx, node, v, what)
    x32 = _widened(ctx, node, x, _per_tensor(ctx, node, ctx.input(node, 2), "x_zero_point"),
                   None, "X")
    w32 = _widened(ctx, node, w, ctx.input(node, 3), 0, "W")
    return [convolution_of(ctx, node, x32, w32, dtypes.S32)]


def _multiplier(ctx, x_scale, w_scale, y_scale, dims, w_axis: int | None):
    """onnxruntime's x_scale * w_scale / y_scale, in the scales' type then f32, broadcast to
    ``dims`` (w_scale per element of ``w_axis`` where it is 1-D)."""
    b = ctx.b
    st = x_scale.shape.dtype
    xs, ys = (b.reshape(v, ()) for v in (x_scale, y_scale))
    ws = w_scale if w_scale.shape.num_elements > 1 else b.reshape(w_scale, ())
    xs_w = b.broadcast(xs, ws.shape.dims, ())
    m = b.op(Opcode.MULTIPLY, xs_w, b.convert(ws, st))
    m = b.op(Opcode.DIVIDE, m, b.broadcast(b.convert(ys, st), m.shape.dims, ()))
    m = b.convert(m, dtypes.F32)
    return b.broadcast(m, dims, () if m.shape.rank == 0 else (w_axis,))


def _output_zero_point(ctx, node, zp, dims):
    zp = _per_tensor(ctx, node, zp, "y_zero_point")
    return None if zp is None else ctx.b.broadcast(ctx.b.convert(zp, dtypes.F32), dims, ())


@register("QLinearConv", since=10)
def qlinear_conv(ctx, node):
    x, x_scale, x_zp = (ctx.input(node, i) for i in range(3))
    w, w_scale, w_zp = (ctx.input(node, i) for i in range(3, 6))
    y_scale, y_zp, bias = (ctx.input(node, i) for i in range(6, 9))
    _integer_type(ctx, node, x, "x")
    _integer_type(ctx, node, w, "w")
    x32 = _widened(ctx, node, x, _per_tensor(ctx, node, x_zp, "x_zero_point"), None, "x")
    w32 = _widened(ctx, node, w, w_zp, 0, "w")
    acc = convolution_of(ctx, node, x32, w32, dtypes.S32)
    b, dims = ctx.b, acc.shape.dims
    if bias is not None:
        acc = b.op(Opcode.ADD, acc, b.broadcast(b.convert(bias, dtypes.S32), dims, (1,)))
    m = _multiplier(ctx, x_scale, w_scale, y_scale, dims, 1)
    out = y_zp.shape.dtype if y_zp is not None else x.shape.dtype
    return [requantize(ctx, acc, m, _output_zero_point(ctx, node, y_zp, dims), out)]


@register("QLinearMatMul", since=10)
def qlinear_matmul(ctx, node):
    # A's scale and zero point may be per row, B's per column (opset 21's definition).
    a, a_scale, a_zp = (ctx.input(node, i) for i in range(3))
    b_, b_scale, b_zp = (ctx.input(node, i) for i in range(3, 6))
    y_scale, y_zp = ctx.input(node, 6), ctx.input(node, 7)
    _integer_type(ctx, node, a, "a")
    _integer_type(ctx, node, b_, "b")
    a32 = _widened(ctx, node, a, a_zp, -2 if a.shape.rank > 1 else None, "a")
    b32 = _widened(ctx, node, b_, b_zp, -1, "b")
    acc = matmul_of(ctx, node, a32, b32, dtypes.S32)
    b, dims = ctx.b, acc.shape.dims
    rank = len(dims)
    # The scales: a per row (dim -2 of the result), b per column (its last dim).
    st = a_scale.shape.dtype

    def spread(v, axis):
        v = b.convert(v, st)
        if v.shape.num_elements == 1:
            return b.broadcast(b.reshape(v, ()), dims, ())
        return b.broadcast(v, dims, (axis % rank,))
    m = b.op(Opcode.MULTIPLY, spread(a_scale, -2), spread(b_scale, -1))
    m = b.convert(b.op(Opcode.DIVIDE, m, spread(y_scale, -2)), dtypes.F32)
    zp = None
    if y_zp is not None:
        zf = b.convert(y_zp, dtypes.F32)
        zp = b.broadcast(b.reshape(zf, ()), dims, ()) if y_zp.shape.num_elements == 1 \
            else b.broadcast(zf, dims, ((-2) % rank,))
    out = y_zp.shape.dtype if y_zp is not None else a.shape.dtype
    return [requantize(ctx, acc, m, zp, out)]


# -- com.microsoft ------------------------------------------------------------------------

def _dq(ctx, node, x, scale, zp):
    """Per-tensor dequantization to f32."""
    return dequantize(ctx, x, _per_tensor(ctx, node, scale, "a scale"),
                      _per_tensor(ctx, node, zp, "a zero point"), dtypes.F32, node, 0)


def _q(ctx, node, y, scale, zp, out: dtypes.DType):
    """Per-tensor quantization of f32 ``y`` to ``out``."""
    return quantize(ctx, node, y, _per_tensor(ctx, node, scale, "a scale"),
                    _per_tensor(ctx, node, zp, "a zero point"), out, 0)


def _binary(opcode: Opcode):
    def lower(ctx, node):
        a, b_ = ctx.input(node, 0), ctx.input(node, 3)
        _integer_type(ctx, node, a, "A")
        fa = _dq(ctx, node, a, ctx.input(node, 1), ctx.input(node, 2))
        fb = _dq(ctx, node, b_, ctx.input(node, 4), ctx.input(node, 5))
        y = ctx.binary(node, opcode, fa, fb)
        return [_q(ctx, node, y, ctx.input(node, 6), ctx.input(node, 7), a.shape.dtype)]
    return lower


register("QLinearAdd", since=1, domain=MS)(_binary(Opcode.ADD))
register("QLinearMul", since=1, domain=MS)(_binary(Opcode.MULTIPLY))


def _unary(fn):
    def lower(ctx, node):
        x = ctx.input(node, 0)
        _integer_type(ctx, node, x, "X")
        y = fn(ctx, node, _dq(ctx, node, x, ctx.input(node, 1), ctx.input(node, 2)))
        return [_q(ctx, node, y, ctx.input(node, 3), ctx.input(node, 4), x.shape.dtype)]
    return lower


@register("QLinearSigmoid", since=1, domain=MS)
def qlinear_sigmoid(ctx, node):
    return _unary(lambda ctx, node, y: ctx.b.op(Opcode.LOGISTIC, y))(ctx, node)


@register("QLinearLeakyRelu", since=1, domain=MS)
def qlinear_leaky_relu(ctx, node):
    def leaky(ctx, node, y):
        alpha = ctx.attr(node, "alpha", 0.01)
        b, dims = ctx.b, y.shape.dims
        neg = b.op(Opcode.MULTIPLY, y, ctx.full(alpha, dtypes.F32, dims))
        return b.op(Opcode.SELECT, b.compare(y, ctx.full(0, dtypes.F32, dims), "GE"), y, neg)
    return _unary(leaky)(ctx, node)


def _channels_first(ctx, node, x):
    """NHWC -> NCHW where ``channels_last`` says so; returns (x, back) with ``back``
    undoing it."""
    if not ctx.attr(node, "channels_last", 0):
        return x, lambda y: y
    rank = x.shape.rank
    to_first = (0, rank - 1) + tuple(range(1, rank - 1))
    to_last = (0,) + tuple(range(2, rank)) + (1,)
    return ctx.b.transpose(x, to_first), lambda y: ctx.b.transpose(y, to_last)


@register("QLinearAveragePool", since=1, domain=MS)
def qlinear_average_pool(ctx, node):
    def pool(ctx, node, y):
        y, back = _channels_first(ctx, node, y)
        return back(average_pool_of(ctx, node, y))
    return _unary(pool)(ctx, node)


@register("QLinearGlobalAveragePool", since=1, domain=MS)
def qlinear_global_average_pool(ctx, node):
    def pool(ctx, node, y):
        y, back = _channels_first(ctx, node, y)
        spatial = tuple(range(2, y.shape.rank))
        total = ctx.reduce(y, spatial, Opcode.ADD, 0)
        count = int(np.prod(y.shape.dims[2:]))
        mean = ctx.b.op(Opcode.DIVIDE, total, ctx.full(count, dtypes.F32, total.shape.dims))
        return back(ctx.b.reshape(mean, y.shape.dims[:2] + (1,) * len(spatial)))
    return _unary(pool)(ctx, node)


@register("QLinearSoftmax", since=1, domain=MS)
def qlinear_softmax(ctx, node):
    # ``opset``: the Softmax opset whose axis rule applies (coerced to 2-D before 13).
    x = ctx.input(node, 0)
    _integer_type(ctx, node, x, "X")
    rank = x.shape.rank
    if ctx.attr(node, "opset") < 13:
        axis = normalize_axis(ctx, node, ctx.attr(node, "axis", 1), rank)
        dims = tuple(range(axis, rank))
    else:
        dims = (normalize_axis(ctx, node, ctx.attr(node, "axis", -1), rank),)
    scales = [ctx.value_of(_per_tensor(ctx, node, ctx.input(node, i), "a scale"))
              for i in (1, 3)]
    ctx.input(node, 2)         # X's zero point: it cancels in x - max(x)
    zp = ctx.input(node, 4)
    zy = 0 if zp is None else ctx.value_of(_per_tensor(ctx, node, zp, "a zero point"))
    if x.shape.dtype in (dtypes.S8, dtypes.U8) and zy is not None \
            and all(s is not None and s > 0 for s in scales):
        # onnxruntime's arithmetic, a table of exponentials (hlo/qlinear.py)
        return [qlinear_softmax_of(ctx.b.op, lambda v, dt: ctx.b.constant(np.asarray(v, dt.np),
                                                                          dt),
                                   ctx.reducer, x, dims, *scales, int(zy))]
    return _unary(lambda ctx, node, y: softmax(ctx, y, dims, False))(ctx, node)


@register("QLinearConcat", since=1, domain=MS)
def qlinear_concat(ctx, node):
    # inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per tensor
    y_scale, y_zp = ctx.input(node, 0), ctx.input(node, 1)
    if (len(node.input) - 2) % 3 or len(node.input) < 5:
        raise ctx.error(node, "expected Y_scale, Y_zero_point and triples of X, X_scale, "
                              "X_zero_point")
    parts = [_dq(ctx, node, ctx.input(node, i), ctx.input(node, i + 1), ctx.input(node, i + 2))
             for i in range(2, len(node.input), 3)]
    axis = normalize_axis(ctx, node, ctx.attr(node, "axis"), parts[0].shape.rank)
    y = ctx.b.concatenate(parts, axis)
    return [_q(ctx, node, y, y_scale, y_zp, y_zp.shape.dtype)]


@register("QGemm", since=1, domain=MS)
def qgemm(ctx, node):
    # onnxruntime: acc = (A - a_zp) . (B - b_zp) + C in s32 (op() per transA/transB), then
    # requantized with alpha * a_scale * b_scale / y_scale, or without y_scale the f32
    # acc * alpha * a_scale * b_scale.
    a, a_scale, a_zp = (ctx.input(node, i) for i in range(3))
    b_, b_scale, b_zp = (ctx.input(node, i) for i in range(3, 6))
    c, y_scale, y_zp = (ctx.input(node, i) for i in range(6, 9))
    _integer_type(ctx, node, a, "A")
    _integer_type(ctx, node, b_, "B")
    trans_a, trans_b = ctx.attr(node, "transA", 0), ctx.attr(node, "transB", 0)
    alpha = ctx.attr(node, "alpha", 1.0)
    b = ctx.b
    a32 = _widened(ctx, node, a, _per_tensor(ctx, node, a_zp, "a_zero_point"), None, "A")
    b32 = _widened(ctx, node, b_, b_zp, 0 if trans_b else 1, "B")
    dn = DotDimensionNumbers((), (0,) if trans_a else (1,), (), (1,) if trans_b else (0,))
    acc = b.dot(a32, b32, dn, dtypes.S32)
    dims = acc.shape.dims
    if c is not None:
        acc = b.op(Opcode.ADD, acc, ctx.broadcast_to(b.convert(c, dtypes.S32), dims))
    f = dtypes.F32
    scale = b.op(Opcode.MULTIPLY, ctx.scalar(alpha, f),
                 b.convert(_per_tensor(ctx, node, a_scale, "a_scale"), f))
    bs = b.convert(b_scale, f)
    bs = b.reshape(bs, ()) if bs.shape.num_elements == 1 else bs
    m = b.op(Opcode.MULTIPLY, b.broadcast(scale, bs.shape.dims, ()), bs)
    if y_scale is not None:
        ys = b.convert(_per_tensor(ctx, node, y_scale, "y_scale"), f)
        m = b.op(Opcode.DIVIDE, m, b.broadcast(ys, m.shape.dims, ()))
    m = b.broadcast(m, dims, () if m.shape.rank == 0 else (1,))
    if y_scale is None:
        return [b.op(Opcode.MULTIPLY, b.convert(acc, f), m)]
    out = y_zp.shape.dtype if y_zp is not None else a.shape.dtype
    return [requantize(ctx, acc, m, _output_zero_point(ctx, node, y_zp, dims), out)]
