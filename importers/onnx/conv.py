"""ConvTranspose and DeformConv.

ConvTranspose is lowered as XLA lowers a transposed convolution (the gradient of a
convolution with respect to its input): a convolution over the input dilated by the
strides (lhs dilation), with the kernel's spatial dims reversed and its input and
output features swapped, padded by (k - 1) * dilation - pads. The optimizer's
conv_phase_split pass then turns it into one dense convolution per output phase, so
no multiply is spent on the dilation's zeros.
"""
from __future__ import annotations

from ...hlo import ConvDimensionNumbers, Opcode, Window
from .nn import ints_attr
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
    if nsp < 1 or w.shape.rank != x.shape.rank:
        raise ctx.error(node, f"bad operand ranks: X {x.shape}, W {w.shape}")
    kernel = tuple(ctx.attr(node, "kernel_shape", w.shape.dims[2:]))
    if kernel != w.shape.dims[2:]:
        raise ctx.error(node, f"kernel_shape {kernel} does not match W {w.shape}")
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
