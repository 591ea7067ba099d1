"""onnxruntime's quantized contrib ops (com.microsoft), as its CPU kernels compute them.

Its session optimizer fuses what ``quantize_dynamic`` writes (DynamicQuantizeLinear,
MatMulInteger, Cast, Mul) into MatMulIntegerToFloat and DynamicQuantizeMatMul: both are
lowered as MatMulInteger is (an s32 dot of ``s32(x) - zero_point`` operands, which the
optimizer's quantization pass runs as an 8-bit integer kernel), then
``f32(acc) * (a_scale * b_scale) + bias``, onnxruntime's output processor.

``MatMulNBitsQuantizer`` writes MatMulNBits (blocked 2-, 4- or 8-bit weights of a MatMul)
and GatherBlockQuantized (of an embedding table). Their weights stay packed in the
object: a u8 constant of packed values, unpacked with shifts and masks and dequantized
per block, ``f32(q - zero_point) * scale``, by the loop that reads them (the gather's),
or into the arena on each call for the dot kernel (the constant folder keeps weights
that unpack to more than four times their bytes packed: 4-bit and 2-bit ones).
"""
from __future__ import annotations

from math import ceil, prod

import numpy as np

from ...hlo import DotDimensionNumbers, Opcode, dtypes
from .context import normalize_axis
from .indexing import take, wrap_negative
from .quantization import dequantize, dynamic_quantized, integer_matmul, scaled_product
from .registry import MS, register

F32 = dtypes.F32


# -- MatMulIntegerToFloat, DynamicQuantizeMatMul -----------------------------------------

@register("MatMulIntegerToFloat", since=1, domain=MS)
def matmul_integer_to_float(ctx, node):
    a, b_, a_scale, b_scale, a_zp, b_zp, bias = (ctx.input(node, i) for i in range(7))
    acc = integer_matmul(ctx, node, a, b_, a_zp, b_zp)
    return [scaled_product(ctx, node, acc, a_scale, b_scale, bias, a_scale.shape.dtype)]


@register("DynamicQuantizeMatMul", since=1, domain=MS)
def dynamic_quantize_matmul(ctx, node):
    # A quantized to u8 as DynamicQuantizeLinear does (onnxruntime's kernel computes the
    # same range, scale and zero point), then MatMulIntegerToFloat.
    a, b_, b_scale, b_zp, bias = (ctx.input(node, i) for i in range(5))
    if not a.shape.dtype.is_float:
        raise ctx.error(node, f"A must be a float tensor, got {a.shape.dtype}")
    qa, a_scale, a_zp = dynamic_quantized(ctx, a)
    acc = integer_matmul(ctx, node, qa, b_, a_zp, b_zp)
    return [scaled_product(ctx, node, acc, a_scale, b_scale, bias, a.shape.dtype)]


# -- packed weights ------------------------------------------------------------------------

def unpacked(ctx, packed, bits: int, count: int):
    """The first ``count`` ``bits``-bit values along the last dim of u8 ``packed``, lowest
    bits first (onnxruntime's order), as u8: each byte broadcast to its values, shifted
    and masked, which fuses into the loop that reads them. (Every step is larger than
    the packed constant, so the constant folder keeps it packed.)"""
    b = ctx.b
    dims = packed.shape.dims
    if bits == 8:
        return _first(ctx, packed, count)
    per = 8 // bits
    wide = dims + (per,)
    shifts = b.broadcast(b.constant(np.arange(0, 8, bits, dtype=np.uint8), dtypes.U8), wide,
                         (len(dims),))
    values = b.op(Opcode.AND, b.op(Opcode.SHIFT_RIGHT_LOGICAL,
                                   b.broadcast(packed, wide, tuple(range(len(dims)))), shifts),
                  ctx.full((1 << bits) - 1, dtypes.U8, wide))
    return _first(ctx, b.reshape(values, dims[:-1] + (dims[-1] * per,)), count)


def _first(ctx, x, count: int):
    """The first ``count`` elements along x's last dim."""
    dims = x.shape.dims
    if dims[-1] == count:
        return x
    return ctx.b.slice(x, (0,) * len(dims), dims[:-1] + (count,))


def _repacked(ctx, x):
    """A 4-bit constant (xlac holds one value a byte) as u8 nibbles packed two a byte
    along its last dim, unpacked where it is read; other values as they are."""
    value = ctx.value_of(x) if x.shape.dtype.is_sub_byte and x.shape.dtype.bits == 4 else None
    if value is None:
        return x
    nibbles = value.astype(np.int8).view(np.uint8) & 0xF
    if nibbles.shape[-1] % 2:
        nibbles = np.concatenate([nibbles, np.zeros(nibbles.shape[:-1] + (1,), np.uint8)], -1)
    packed = ctx.b.constant(nibbles[..., 0::2] | (nibbles[..., 1::2] << 4), dtypes.U8)
    u = unpacked(ctx, packed, 4, x.shape.dims[-1])
    return ctx.b.convert(u, dtypes.U4) if x.shape.dtype == dtypes.U4 else _signed4(ctx, u)


def _signed4(ctx, u):
    """u8 nibbles as s4 values: (n ^ 8) - 8 in s8."""
    b, dims = ctx.b, u.shape.dims
    flipped = b.convert(b.op(Opcode.XOR, u, ctx.full(8, dtypes.U8, dims)), dtypes.S8)
    return b.convert(b.op(Opcode.SUBTRACT, flipped, ctx.full(8, dtypes.S8, dims)), dtypes.S4)


# -- MatMulNBits -----------------------------------------------------------------------------

@register("MatMulNBits", since=1, domain=MS)
def matmul_nbits(ctx, node):
    # Y = A . dequantize(B)^T + bias, B (N, K) in blocks of block_size along K, packed
    # (N, k_blocks, block_size * bits / 8), lowest bits first. Scales are (N, k_blocks);
    # zero points u8 packed as B is (N, ceil(k_blocks * bits / 8)), or in the scales' type
    # (not rounded: HQQ), or absent (2**(bits - 1)). accuracy_level lets onnxruntime
    # quantize A to int8 per block (level 4); xlac computes in f32, level 1's accuracy.
    a, packed, scales, zp, g_idx, bias = (ctx.input(node, i) for i in range(6))
    k, n = ctx.attr(node, "K"), ctx.attr(node, "N")
    bits, block = ctx.attr(node, "bits", 4), ctx.attr(node, "block_size")
    level = ctx.attr(node, "accuracy_level", 0)
    if bits not in (2, 4, 8) or block < 16 or block & (block - 1) or level not in range(5):
        raise ctx.error(node, f"unsupported bits={bits}, block_size={block} or "
                              f"accuracy_level={level}")
    blocks = ceil(k / block)
    if packed.shape.dtype != dtypes.U8 or packed.shape.dims != (n, blocks, block * bits // 8):
        raise ctx.error(node, f"B {packed.shape} is not u8 ({n}, {blocks}, "
                              f"{block * bits // 8}) for N={n}, K={k}")
    if a.shape.dims[-1] != k:
        raise ctx.error(node, f"A {a.shape} does not have K={k} columns")
    _default_blocks(ctx, node, g_idx, k, block)
    q = unpacked(ctx, ctx.b.reshape(packed, (n, blocks * block * bits // 8)), bits, k)
    w = dequantize(ctx, q, ctx.b.reshape(scales, (n, blocks)),
                   _zero_points(ctx, node, zp, n, blocks, bits), a.shape.dtype, node, 1, block)
    y = _product_transposed(ctx, a, w)
    if bias is not None:
        y = ctx.b.op(Opcode.ADD, y, ctx.b.broadcast(bias, y.shape.dims, (y.shape.rank - 1,)))
    return [y]


def _default_blocks(ctx, node, g_idx, k: int, block: int) -> None:
    """Refuse a g_idx (GPTQ's act order) that is not the plain k // block_size."""
    if g_idx is None:
        return
    value = ctx.value_of(g_idx)
    if value is None or not np.array_equal(value.reshape(-1), np.arange(k) // block):
        raise ctx.error(node, "g_idx other than k // block_size is not supported")


def _zero_points(ctx, node, zp, n: int, blocks: int, bits: int):
    """MatMulNBits' zero points as (n, blocks): u8 unpacked, a float as given."""
    b = ctx.b
    if zp is None:
        return ctx.full(1 << (bits - 1), dtypes.U8, (n, blocks))
    if zp.shape.dtype.is_float:
        return b.reshape(zp, (n, blocks))
    per_row = ceil(blocks * bits / 8)
    if zp.shape.dtype != dtypes.U8 or zp.shape.num_elements != n * per_row:
        raise ctx.error(node, f"zero_points {zp.shape} is neither u8 ({n * per_row}) nor the "
                              f"scales' type")
    return unpacked(ctx, b.reshape(zp, (n, per_row)), bits, blocks)


def _product_transposed(ctx, a, w):
    """A (..., K) . W^T with W (N, K), one 2-D dot over A's rows."""
    b = ctx.b
    rows, (n, k) = prod(a.shape.dims[:-1]), w.shape.dims
    y = b.dot(b.reshape(a, (rows, k)), w, DotDimensionNumbers((), (1,), (), (1,)))
    return b.reshape(y, a.shape.dims[:-1] + (n,))


# -- GatherBlockQuantized --------------------------------------------------------------------

@register("GatherBlockQuantized", since=1, domain=MS)
def gather_block_quantized(ctx, node):
    # Gather of data dequantized in blocks along quantize_axis. int4/uint4 data: zero
    # point 0 where absent. u8 data: ``bits``-bit values packed along the last axis
    # (the quantize axis), zero points packed alike, 2**(bits - 1) where absent.
    data, idx, scales, zp = (ctx.input(node, i) for i in range(4))
    rank = data.shape.rank
    g_axis = normalize_axis(ctx, node, ctx.attr(node, "gather_axis", 0), rank)
    q_axis = normalize_axis(ctx, node, ctx.attr(node, "quantize_axis", 1), rank)
    block, bits = ctx.attr(node, "block_size", 128), ctx.attr(node, "bits", 4)
    if block < 16 or block & (block - 1) or g_axis == q_axis:
        raise ctx.error(node, f"unsupported block_size={block}, gather_axis={g_axis}, "
                              f"quantize_axis={q_axis}")
    dt = data.shape.dtype
    if dt == dtypes.U8:
        if bits not in (2, 4, 8) or q_axis != rank - 1:
            raise ctx.error(node, f"u8 data needs bits 2, 4 or 8 packed along the last "
                                  f"axis, got bits={bits}, quantize_axis={q_axis}")
        count = data.shape.dims[-1] * 8 // bits
        q = unpacked(ctx, data, bits, count)
        blocks = scales.shape.dims[-1]
        zp = ctx.full(1 << (bits - 1), dtypes.U8, scales.shape.dims) if zp is None \
            else unpacked(ctx, zp, bits, blocks)
    elif dt in (dtypes.S4, dtypes.U4) and bits == 4:
        q = _repacked(ctx, data)
        zp = None if zp is None else _repacked(ctx, zp)
    else:
        raise ctx.error(node, f"data must be 4-bit int4 or uint4, or uint8, got {dt} with "
                              f"bits={bits}")
    w = dequantize(ctx, q, scales, zp, scales.shape.dtype, node, q_axis, block)
    return [take(ctx, w, wrap_negative(ctx, idx, w.shape.dims[g_axis]), g_axis)]
