"""ConvTranspose and DeformConv (below).

ConvTranspose is lowered as XLA lowers a transposed convolution (the gradient of a
convolution with respect to its input): a convolution over the input dilated by the
strides (lhs dilation), with the kernel's spatial dims reversed and its input and
output features swapped, padded by (k - 1) * dilation - pads. The optimizer's
conv_phase_split pass then turns it into one dense convolution per output phase, so
no multiply is spent on the dilation's zeros.
"""
from __future__ import annotations

from ...hlo import (ConvDimensionNumbers, DotDimensionNumbers, GatherDimensionNumbers, Opcode,
                    Shape, Window, dtypes)
from .nn import ints_attr, kernel_of
from .registry import register


def _conv_transpose_padding(ctx, node, in_sp, kernel, strides, dilations, out_pad):
    """(pads_begin, pads_end, output extents) per spatial dim, as the spec says: an
    output_shape, or auto_pad SAME_* (output = input * stride), sets the pads (and
    overrides ``pads``), the odd one going at the end for SAME_UPPER only."""
    n = len(kernel)
    auto_pad = ctx.attr(node, "auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise ctx.error(node, f"unsupported auto_pad '{auto_pad}'")
    pads = ints_attr(ctx, node, "pads", 2 * n, 0)
    if any(p < 0 for p in pads):
        raise ctx.error(node, f"negative pads {pads}")
    output_shape = ctx.attr(node, "output_shape", None)
    if output_shape is not None:
        output_shape = tuple(output_shape)[-n:]
        if len(output_shape) != n:
            raise ctx.error(node, f"output_shape {output_shape} does not have {n} dims")
    full = [s * (i - 1) + op + (k - 1) * d + 1
            for i, k, s, d, op in zip(in_sp, kernel, strides, dilations, out_pad)]
    if output_shape is None and auto_pad in ("NOTSET", "VALID"):
        begin, end = (pads[:n], pads[n:]) if auto_pad == "NOTSET" else ((0,) * n, (0,) * n)
        return begin, end, tuple(f - b - e for f, b, e in zip(full, begin, end))
    out = output_shape or tuple(i * s for i, s in zip(in_sp, strides))
    begin, end = [], []
    for f, o in zip(full, out):
        total = f - o
        small, big = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else big)
        end.append(big if auto_pad == "SAME_UPPER" else small)
    return tuple(begin), tuple(end), out


@register("ConvTranspose", since=1)
def conv_transpose(ctx, node):
    x, w, bias = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    nsp = x.shape.rank - 2
    kernel = kernel_of(ctx, node, x, w)
    groups = ctx.attr(node, "group", 1)
    cin, cout_g = w.shape.dims[:2]
    if x.shape.dims[1] != cin or cin % groups:
        raise ctx.error(node, f"W {w.shape} does not fit X {x.shape} with group={groups}")
    strides = ints_attr(ctx, node, "strides", nsp, 1)
    dilations = ints_attr(ctx, node, "dilations", nsp, 1)
    out_pad = ints_attr(ctx, node, "output_padding", nsp, 0)
    begin, end, out = _conv_transpose_padding(ctx, node, x.shape.dims[2:], kernel, strides,
                                              dilations, out_pad)
    if any(o <= 0 for o in out):
        raise ctx.error(node, f"the output would have spatial dims {tuple(out)}")
    b = ctx.b
    # W (Cin, Cout/g, k...) -> (Cout, Cin/g, k...) reversed in space: per group, the
    # input and output features swap.
    spatial = tuple(range(2, 2 + nsp))
    k = b.reshape(w, (groups, cin // groups, cout_g) + kernel)
    k = b.transpose(k, (0, 2, 1) + tuple(range(3, 3 + nsp)))
    k = b.reshape(k, (groups * cout_g, cin // groups) + kernel)
    k = b.reverse(k, spatial)
    low = [(kk - 1) * d - p for kk, d, p in zip(kernel, dilations, begin)]
    high = [o + (kk - 1) * d - (i - 1) * s - 1 - lo
            for o, kk, d, i, s, lo in zip(out, kernel, dilations, x.shape.dims[2:], strides, low)]
    window = Window(kernel, (1,) * nsp, low, high, strides, dilations)
    y = b.convolution(x, k, window, ConvDimensionNumbers.nchw(nsp), feature_group_count=groups)
    if bias is not None:
        y = b.op(Opcode.ADD, y, b.broadcast(bias, y.shape.dims, (1,)))
    return [y]


@register("DeformConv", since=19)
def deform_conv(ctx, node):
    """Deformable convolution (2-D): each window position samples X at its place plus a
    learned offset, bilinearly (zero outside the image, GridSample's align_corners=1),
    weighted by the optional mask; the samples then meet the kernel in one dot.

    The four corners of every sample are one gather each (indices n, offset group,
    row, column; XLA's gather clamps them, and corners outside the image get weight 0),
    so the work is that of the im2col matrix, never a per-tap loop."""
    x, w, offset, bias, mask = (ctx.input(node, i) for i in range(5))
    if x.shape.rank != 4 or w.shape.rank != 4:
        raise ctx.error(node, f"only 2-D deformable convolutions are supported, got X "
                              f"{x.shape}, W {w.shape}")
    b = ctx.b
    dt = x.shape.dtype
    n, c, h, wd = x.shape.dims
    oc, cpg, kh, kw = w.shape.dims
    kernel = tuple(ctx.attr(node, "kernel_shape", (kh, kw)))
    if kernel != (kh, kw):
        raise ctx.error(node, f"kernel_shape {kernel} does not match W {w.shape}")
    groups, offset_groups = ctx.attr(node, "group", 1), ctx.attr(node, "offset_group", 1)
    strides = ints_attr(ctx, node, "strides", 2, 1)
    dilations = ints_attr(ctx, node, "dilations", 2, 1)
    pads = ints_attr(ctx, node, "pads", 4, 0)
    oh, ow = offset.shape.dims[2:]
    want_out = tuple((size + lo + hi - (k - 1) * d - 1) // s + 1 for size, lo, hi, k, d, s in
                     zip((h, wd), pads[:2], pads[2:], kernel, dilations, strides))
    if (cpg * groups != c or oc % groups or c % offset_groups
            or offset.shape.dims != (n, offset_groups * 2 * kh * kw, oh, ow)
            or (oh, ow) != want_out
            or (mask is not None and mask.shape.dims != (n, offset_groups * kh * kw, oh, ow))):
        raise ctx.error(node, f"inconsistent shapes: X {x.shape}, W {w.shape}, offset "
                              f"{offset.shape}, mask {mask.shape if mask else None}, "
                              f"group {groups}, offset_group {offset_groups}")
    g, cg = offset_groups, c // offset_groups
    grid = (n, g, kh, kw, oh, ow)
    s64 = dtypes.S64
    off = b.reshape(offset, (n, g, kh, kw, 2, oh, ow))

    def coordinate(axis: int):
        """Sample positions along spatial dim ``axis`` (0 rows, 1 columns)."""
        out_pos = b.iota(Shape.array(dt, grid), 4 + axis)
        tap = b.iota(Shape.array(dt, grid), 2 + axis)
        base = b.op(Opcode.ADD, b.op(Opcode.MULTIPLY, out_pos, ctx.full(strides[axis], dt, grid)),
                    b.op(Opcode.MULTIPLY, tap, ctx.full(dilations[axis], dt, grid)))
        base = b.op(Opcode.SUBTRACT, base, ctx.full(pads[axis], dt, grid))
        shift = b.slice(off, (0, 0, 0, 0, axis, 0, 0), (n, g, kh, kw, axis + 1, oh, ow))
        return b.op(Opcode.ADD, base, b.reshape(shift, grid))

    rows, cols = coordinate(0), coordinate(1)
    row0, col0 = b.op(Opcode.FLOOR, rows), b.op(Opcode.FLOOR, cols)
    frac_r, frac_c = b.op(Opcode.SUBTRACT, rows, row0), b.op(Opcode.SUBTRACT, cols, col0)
    row0, col0 = b.convert(row0, s64), b.convert(col0, s64)
    ones = ctx.full(1, dt, grid)
    weight_mask = b.reshape(mask, grid) if mask is not None else None
    image = b.reshape(x, (n, g, cg, h, wd))
    batch_index = [b.iota(Shape.array(s64, grid), d) for d in (0, 1)]
    sampled = None
    for dr, dc in ((0, 0), (0, 1), (1, 0), (1, 1)):
        r = b.op(Opcode.ADD, row0, ctx.full(dr, s64, grid)) if dr else row0
        q = b.op(Opcode.ADD, col0, ctx.full(dc, s64, grid)) if dc else col0
        weight = b.op(Opcode.MULTIPLY,
                      frac_r if dr else b.op(Opcode.SUBTRACT, ones, frac_r),
                      frac_c if dc else b.op(Opcode.SUBTRACT, ones, frac_c))
        inside = b.op(Opcode.AND,
                      b.op(Opcode.AND, b.compare(r, ctx.full(0, s64, grid), "GE"),
                           b.compare(r, ctx.full(h, s64, grid), "LT")),
                      b.op(Opcode.AND, b.compare(q, ctx.full(0, s64, grid), "GE"),
                           b.compare(q, ctx.full(wd, s64, grid), "LT")))
        weight = b.op(Opcode.SELECT, inside, weight, ctx.full(0, dt, grid))
        if weight_mask is not None:
            weight = b.op(Opcode.MULTIPLY, weight, weight_mask)
        index = b.concatenate([b.reshape(v, grid + (1,)) for v in batch_index + [r, q]], 6)
        corner = b.gather(image, index, GatherDimensionNumbers((6,), (0, 1, 3, 4), (0, 1, 3, 4), 6),
                          (1, 1, cg, 1, 1))                 # (n, g, kh, kw, oh, ow, cg)
        term = b.op(Opcode.MULTIPLY, corner, b.broadcast(weight, corner.shape.dims, range(6)))
        sampled = term if sampled is None else b.op(Opcode.ADD, sampled, term)
    # (n, g, kh, kw, oh, ow, cg) -> (n, groups, c / groups, kh, kw, oh, ow)
    sampled = b.transpose(sampled, (0, 1, 6, 2, 3, 4, 5))
    sampled = b.reshape(sampled, (n, groups, cpg, kh, kw, oh, ow))
    kernel_w = b.reshape(w, (groups, oc // groups, cpg, kh, kw))
    y = b.dot(kernel_w, sampled, DotDimensionNumbers((0,), (2, 3, 4), (1,), (2, 3, 4)))
    y = b.reshape(b.transpose(y, (2, 0, 1, 3, 4)), (n, oc, oh, ow))   # (groups, ocg, n, ..)
    if bias is not None:
        y = b.op(Opcode.ADD, y, b.broadcast(bias, y.shape.dims, (1,)))
    return [y]
