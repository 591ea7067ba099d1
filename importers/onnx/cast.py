"""Type conversions: Cast, CastLike, BitCast.

HLO's convert is XLA's (round to nearest even, no saturation, float -> int saturating);
ONNX's rules differ in three places, handled here:

- To a float8 type with ``saturate=1`` (the default), values past the largest finite
  value (infinities included) become it: a clamp, in f32 or f64, before converting.
- To FLOAT8E8M0, ``round_mode`` (up, down, nearest) and ``saturate`` act on the bits of
  the f32 value, exactly as ONNX's reference defines them.
- Float -> 4- and 2-bit integers truncate and wrap (ml_dtypes, which ONNX's reference
  uses, goes through a wide integer): through s32.
"""
from __future__ import annotations

from onnx import TensorProto

from ...hlo import Opcode, dtypes
from .registry import register
from .types import hlo_dtype

# The types ONNX's ``saturate`` applies to.
_SATURATING = frozenset({dtypes.F8E4M3FN, dtypes.F8E4M3FNUZ, dtypes.F8E5M2,
                         dtypes.F8E5M2FNUZ})


def cast(ctx, node, x, to):
    """x converted to ``to`` by ONNX's rules (reads ``saturate`` and ``round_mode``)."""
    saturate = ctx.attr(node, "saturate", 1)
    round_mode = ctx.attr(node, "round_mode", "up")
    src = x.shape.dtype
    if src == to:
        return x
    if to == dtypes.F8E8M0FNU:
        return _to_e8m0(ctx, node, x, saturate, round_mode)
    if to in _SATURATING and saturate and not src.is_pred:
        wide = x if src in (dtypes.F32, dtypes.F64) else ctx.b.convert(x, dtypes.F32)
        top = float(to.info.max)
        wt = wide.shape.dtype
        x = ctx.b.op(Opcode.CLAMP, ctx.scalar(-top, wt), wide, ctx.scalar(top, wt))
    elif to.is_sub_byte and src.is_float:
        x = ctx.b.convert(x, dtypes.S32)
    return ctx.b.convert(x, to)


def _to_e8m0(ctx, node, x, saturate, round_mode):
    """ONNX's reference (numpy_helper.to_float8e8m0): the exponent field of the f32,
    plus one where round_mode says so; NaN and infinities give NaN (0xFF); with
    saturate, 2**127 does not round up into NaN."""
    b = ctx.b
    u32 = dtypes.U32
    bits = b.op(Opcode.BITCAST_CONVERT, b.convert(x, dtypes.F32),
                shape=x.shape.with_dtype(u32))
    dims = x.shape.dims

    def k(v):
        return ctx.full(v, u32, dims)

    def field(mask):
        return b.op(Opcode.AND, bits, k(mask))

    exponent = field(0xFF << 23)
    exponent = b.op(Opcode.SHIFT_RIGHT_LOGICAL, exponent, k(23))
    if round_mode == "up":
        up = b.compare(field(0x7FFFFF), k(0), "NE")
    elif round_mode == "nearest":
        # The guard bit, and a round or sticky bit or (the reference's "lsb") an exponent
        # above zero.
        guard = b.compare(field(0x400000), k(0), "NE")
        rest = b.op(Opcode.OR, b.compare(field(0x3FFFFF), k(0), "NE"),
                    b.compare(exponent, k(0), "NE"))
        up = b.op(Opcode.AND, guard, rest)
    elif round_mode == "down":
        up = None
    else:
        raise ctx.error(node, f"unknown round_mode '{round_mode}' (up, down or nearest)")
    if up is not None:
        normal = b.compare(exponent, k(0xFF), "NE")
        up = b.op(Opcode.AND, up, normal)
        if saturate:
            up = b.op(Opcode.AND, up, b.compare(exponent, k(0xFE), "NE"))
        exponent = b.op(Opcode.ADD, exponent, b.convert(up, u32))
    code = b.convert(exponent, dtypes.U8)       # 0xFF + 1 wraps as in the reference
    return b.op(Opcode.BITCAST_CONVERT, code, shape=code.shape.with_dtype(dtypes.F8E8M0FNU))


@register("Cast", since=1)
def cast_op(ctx, node):
    to = ctx.attr(node, "to")
    if isinstance(to, str):                     # opset 1 names the type: "FLOAT"
        try:
            to = TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise ctx.error(node, f"unknown type '{to}'") from None
    return [cast(ctx, node, ctx.input(node, 0), hlo_dtype(to, "the Cast target"))]


@register("CastLike", since=15)
def cast_like(ctx, node):
    x, like = ctx.input(node, 0), ctx.input(node, 1)
    return [cast(ctx, node, x, like.shape.dtype)]


@register("BitCast", since=26)
def bitcast(ctx, node):
    x = ctx.input(node, 0)
    to = hlo_dtype(ctx.attr(node, "to"), "the BitCast target")
    if to.bits != x.shape.dtype.bits:
        raise ctx.error(node, f"cannot reinterpret {x.shape.dtype} as {to}: the bit widths "
                              f"differ")
    return [ctx.b.op(Opcode.BITCAST_CONVERT, x, shape=x.shape.with_dtype(to))]
