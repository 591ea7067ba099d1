"""Neural-network ONNX ops: Conv, pools, BatchNormalization (and its training mode),
LRN, Softmax, LogSoftmax, Hardmax, Dropout; onnxruntime's FusedConv, NhwcConv and
BiasSoftmax (com.microsoft).

Spatial ops share ``window_padding`` (pads / auto_pad) and map ONNX's NC<spatial>
layout straight onto HLO convolution and reduce-window windows.
"""
from __future__ import annotations

from math import ceil, prod

import numpy as np

from ...hlo import ConvDimensionNumbers, Opcode, Shape, Window, dtypes
from . import scope
from .context import lowest, normalize_axis
from .activations import fused_activation
from .registry import MS, register

LEGACY = ("consumed_inputs",)


def ints_attr(ctx, node, name, n, default):
    v = tuple(ctx.attr(node, name, (default,) * n))
    if len(v) != n:
        raise ctx.error(node, f"'{name}' has {len(v)} values, expected {n}")
    return v


def window_padding(ctx, node, in_dims, kernel, strides, dilations):
    """(pad_low, pad_high) per spatial dim from ``pads`` or ``auto_pad``."""
    n = len(kernel)
    auto_pad = ctx.attr(node, "auto_pad", "NOTSET")
    if auto_pad == "NOTSET":
        pads = ints_attr(ctx, node, "pads", 2 * n, 0)
        if any(p < 0 for p in pads):
            raise ctx.error(node, f"negative pads {pads}")
        return pads[:n], pads[n:]
    if ctx.has_attr(node, "pads"):
        raise ctx.error(node, f"'pads' cannot be combined with auto_pad={auto_pad}")
    if auto_pad == "VALID":
        return (0,) * n, (0,) * n
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.error(node, f"unsupported auto_pad '{auto_pad}'")
    low, high = [], []
    for size, k, s, d in zip(in_dims, kernel, strides, dilations):
        # output = ceil(in / stride); the odd pad goes last (UPPER) or first (LOWER)
        total = max(0, (ceil(size / s) - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        low.append(small if auto_pad == "SAME_UPPER" else big)
        high.append(big if auto_pad == "SAME_UPPER" else small)
    return tuple(low), tuple(high)


def _spatial_attrs(ctx, node, x, kernel):
    nsp = x.shape.rank - 2
    strides = ints_attr(ctx, node, "strides", nsp, 1)
    dilations = ints_attr(ctx, node, "dilations", nsp, 1)
    low, high = window_padding(ctx, node, x.shape.dims[2:], kernel, strides, dilations)
    return strides, dilations, low, high


@register("Conv", since=1)
def conv(ctx, node):
    return [_biased_conv(ctx, node, *(ctx.input(node, i) for i in range(3)))]


@register("FusedConv", since=1, domain=MS)
def fused_conv(ctx, node):
    # onnxruntime's Conv (+ bias) + Z, then its activation.
    x, w, bias, z = (ctx.input(node, i) for i in range(4))
    y = _biased_conv(ctx, node, x, w, bias)
    if z is not None:
        if z.shape.dims != y.shape.dims:
            raise ctx.error(node, f"Z {z.shape} must have the output's shape {y.shape}")
        y = ctx.b.op(Opcode.ADD, y, z)
    return [fused_activation(ctx, node, y)]


@register("NhwcConv", since=1, domain=MS)
def nhwc_conv(ctx, node):
    # Conv on channels-last X (N, spatial..., C) and W (M, kernel..., C / group), giving
    # (N, spatial..., M): transposed to Conv's layouts and back (the layout pass keeps what
    # the kernels want).
    x, w, bias = (ctx.input(node, i) for i in range(3))
    if x.shape.rank < 3 or w.shape.rank != x.shape.rank:
        raise ctx.error(node, f"bad operand ranks: X {x.shape}, W {w.shape}")
    r = x.shape.rank
    to_first = (0, r - 1) + tuple(range(1, r - 1))
    b = ctx.b
    y = _biased_conv(ctx, node, b.transpose(x, to_first), b.transpose(w, to_first), bias)
    return [b.transpose(y, (0,) + tuple(range(2, r)) + (1,))]


def _biased_conv(ctx, node, x, w, bias):
    y = convolution_of(ctx, node, x, w)
    if bias is not None:
        y = ctx.b.op(Opcode.ADD, y, ctx.b.broadcast(bias, y.shape.dims, (1,)))
    return y


def kernel_of(ctx, node, x, w) -> tuple[int, ...]:
    """The spatial kernel of Conv or ConvTranspose: W's trailing dims, which
    kernel_shape (optional) must repeat; X and W of one rank with a spatial dim."""
    if x.shape.rank < 3 or w.shape.rank != x.shape.rank:
        raise ctx.error(node, f"bad operand ranks: X {x.shape}, W {w.shape}")
    kernel = tuple(ctx.attr(node, "kernel_shape", w.shape.dims[2:]))
    if kernel != w.shape.dims[2:]:
        raise ctx.error(node, f"kernel_shape {kernel} does not match W {w.shape}")
    return kernel


def convolution_of(ctx, node, x, w, preferred=None):
    """The convolution of Conv's attributes (kernel_shape, strides, dilations, pads,
    auto_pad, group) over ``x`` and ``w``, without bias. ``preferred``: the result type
    of integer operands (ConvInteger, QLinearConv)."""
    nsp = x.shape.rank - 2
    kernel = kernel_of(ctx, node, x, w)
    strides, dilations, low, high = _spatial_attrs(ctx, node, x, kernel)
    window = Window(kernel, strides, low, high, (1,) * nsp, dilations)
    return ctx.b.convolution(x, w, window, ConvDimensionNumbers.nchw(nsp),
                             feature_group_count=ctx.attr(node, "group", 1),
                             preferred=preferred)


# -- pools ----------------------------------------------------------------------------

def _pool_window(ctx, node, x):
    """The reduce-window over NC<spatial> and the pads before ceil_mode's extra."""
    if x.shape.rank < 3:
        raise ctx.error(node, f"input must be N x C x spatial, got {x.shape}")
    nsp = x.shape.rank - 2
    kernel = tuple(ctx.attr(node, "kernel_shape"))
    if len(kernel) != nsp:
        raise ctx.error(node, f"kernel_shape {kernel} does not fit {x.shape}")
    strides, dilations, low, high = _spatial_attrs(ctx, node, x, kernel)
    padded_high = list(high)
    if ctx.attr(node, "ceil_mode", 0):
        for i, (n, k, s, d) in enumerate(zip(x.shape.dims[2:], kernel, strides, dilations)):
            span = n + low[i] + high[i] - ((k - 1) * d + 1)
            out = -(-span // s) + 1
            if (out - 1) * s >= n + low[i]:
                # A window may not start in the end padding (the ONNX spec text,
                # onnxruntime and PyTorch; onnx 1.23's shape inference omits it).
                out -= 1
            padded_high[i] += max(0, (out - 1) * s - span)
    unit = (1, 1)      # the N and C dims: windows of one element, no padding
    window = Window(unit + kernel, unit + strides, (0, 0) + low, (0, 0) + tuple(padded_high),
                    (1,) * (nsp + 2), unit + dilations)
    return window, low, high


@register("MaxPool", since=1)
def max_pool(ctx, node):
    x = ctx.input(node, 0)
    window, _, _ = _pool_window(ctx, node, x)
    dt = x.shape.dtype
    storage_order = ctx.attr(node, "storage_order", 0)
    if len(node.output) < 2 or not node.output[1]:
        # reduce-window pads with its init value, so padding never wins the max
        return [ctx.b.reduce_window(x, ctx.scalar(lowest(dt), dt), window,
                                    ctx.reducer(Opcode.MAXIMUM, dt))]
    return list(_max_pool_with_indices(ctx, x, window, storage_order))


def _max_pool_with_indices(ctx, x, window, storage_order):
    """MaxPool's Indices output: an argmax reduce-window over (x, the row-major flat index
    of each element in x). The first maximum in the window wins, as in onnxruntime;
    storage_order=1 then renumbers the spatial part column-major."""
    from .reduce import arg_inits, arg_reducer
    b, dt, dims = ctx.b, x.shape.dtype, x.shape.dims
    flat = b.reshape(b.iota(Shape.array(dtypes.S64, (prod(dims),)), 0), dims)
    r = b.op(Opcode.REDUCE_WINDOW, x, flat, *arg_inits(ctx, dt, True, False),
             called=[arg_reducer(ctx, dt, True, False)], window=window)
    values, index = b.get_tuple_element(r, 0), b.get_tuple_element(r, 1)
    if storage_order:
        # index = nc * S + row-major spatial offset; the offset's digits, reversed in
        # significance, give the column-major offset.
        spatial = dims[2:]
        out = index.shape.dims

        def const(v):
            return ctx.full(v, dtypes.S64, out)

        size = prod(spatial)
        rest = b.op(Opcode.REMAINDER, index, const(size))
        column = b.op(Opcode.SUBTRACT, index, rest)
        weight = 1
        for n in reversed(spatial):
            digit = b.op(Opcode.REMAINDER, rest, const(n))
            rest = b.op(Opcode.DIVIDE, rest, const(n))
            column = b.op(Opcode.ADD, column, b.op(Opcode.MULTIPLY, digit,
                                                   const(size // n // weight)))
            weight *= n
        index = column
    return values, index


@register("AveragePool", since=1)
def average_pool(ctx, node):
    return [average_pool_of(ctx, node, ctx.input(node, 0))]


def average_pool_of(ctx, node, x):
    """AveragePool of ``x`` by the node's attributes (kernel_shape, strides, pads, auto_pad,
    dilations, ceil_mode, count_include_pad)."""
    window, low, high = _pool_window(ctx, node, x)
    include_pad = ctx.attr(node, "count_include_pad", 0)
    dt = x.shape.dtype
    add = ctx.reducer(Opcode.ADD, dt)
    total = ctx.b.reduce_window(x, ctx.scalar(0, dt), window, add)
    if not any(window.pad_low + window.pad_high):
        count = ctx.full(prod(window.size), dt, total.shape.dims)
    else:
        # Count the window positions that hold real (or, with count_include_pad,
        # user-padded) elements: a reduce-window over ones, folded at compile time.
        spatial = x.shape.dims[2:]
        if include_pad:
            spatial = tuple(n + lo + hi for n, lo, hi in zip(spatial, low, high))
            extra = tuple(ph - hi for ph, hi in zip(window.pad_high[2:], high))
            window_ones = Window(window.size, window.stride, (0,) * len(window.size),
                                 (0, 0) + extra, window.lhs_dilation, window.rhs_dilation)
        else:
            window_ones = window
        ones = ctx.full(1, dt, (1, 1) + spatial)
        count = ctx.b.reduce_window(ones, ctx.scalar(0, dt), window_ones, add)
        count = ctx.broadcast_to(count, total.shape.dims)
    return ctx.b.op(Opcode.DIVIDE, total, count)


def _abs_power(ctx, x, p):
    """|x| ^ p, with the common exponents as cheaper ops."""
    b = ctx.b
    if p == 1:
        return b.op(Opcode.ABS, x)
    if p == 2:
        return b.op(Opcode.MULTIPLY, x, x)
    return b.op(Opcode.POWER, b.op(Opcode.ABS, x), ctx.full(p, x.shape.dtype, x.shape.dims))


def _root(ctx, x, p):
    """x ^ (1 / p)."""
    if p == 1:
        return x
    if p == 2:
        return ctx.b.op(Opcode.SQRT, x)
    return ctx.b.op(Opcode.POWER, x, ctx.full(1 / p, x.shape.dtype, x.shape.dims))


@register("LpPool", since=1)
def lp_pool(ctx, node):
    # (sum of |x|^p over the window) ^ (1/p); padding adds nothing.
    x = ctx.input(node, 0)
    p = ctx.attr(node, "p", 2)
    if p <= 0:
        raise ctx.error(node, f"p must be positive, got {p}")
    window, _, _ = _pool_window(ctx, node, x)
    dt = x.shape.dtype
    total = ctx.b.reduce_window(_abs_power(ctx, x, p), ctx.scalar(0, dt), window,
                                ctx.reducer(Opcode.ADD, dt))
    return [_root(ctx, total, p)]


def _global_pool(ctx, node, opcode, init, average):
    x = ctx.input(node, 0)
    if x.shape.rank < 3:
        raise ctx.error(node, f"input must be N x C x spatial, got {x.shape}")
    spatial = tuple(range(2, x.shape.rank))
    y = ctx.reduce(x, spatial, opcode, init)
    if average:
        y = ctx.b.op(Opcode.DIVIDE, y, ctx.full(prod(x.shape.dims[2:]), y.shape.dtype,
                                               y.shape.dims))
    return [ctx.b.reshape(y, x.shape.dims[:2] + (1,) * len(spatial))]


@register("GlobalLpPool", since=1)
def global_lp_pool(ctx, node):
    x = ctx.input(node, 0)
    if x.shape.rank < 3:
        raise ctx.error(node, f"input must be N x C x spatial, got {x.shape}")
    p = ctx.attr(node, "p", 2)
    if p <= 0:
        raise ctx.error(node, f"p must be positive, got {p}")
    spatial = tuple(range(2, x.shape.rank))
    total = ctx.reduce(_abs_power(ctx, x, p), spatial, Opcode.ADD, 0)
    return [ctx.b.reshape(_root(ctx, total, p), x.shape.dims[:2] + (1,) * len(spatial))]


@register("GlobalAveragePool", since=1)
def global_average_pool(ctx, node):
    return _global_pool(ctx, node, Opcode.ADD, 0, average=True)


@register("GlobalMaxPool", since=1)
def global_max_pool(ctx, node):
    x = ctx.input(node, 0)
    return _global_pool(ctx, node, Opcode.MAXIMUM, lowest(x.shape.dtype), average=False)


# -- normalization --------------------------------------------------------------------

@register("BatchNormalization", since=1, ignore=LEGACY + ("momentum", "spatial"))
def batch_normalization(ctx, node):
    # y = (x - mean) / sqrt(var + eps) * scale + B, computed as x * k + (B - mean * k)
    # with k = scale / sqrt(var + eps), whose parameter-sized half folds to constants.
    # Parameters of rank r (r > 1 only with spatial=0) cover dims 1..r of x.
    x = ctx.input(node, 0)
    scale, bias, mean, var = (ctx.input(node, i) for i in range(1, 5))
    eps = ctx.attr(node, "epsilon", 1e-5)
    if _training_mode(ctx, node):
        return _batch_norm_training(ctx, node, x, scale, bias, mean, var, eps)
    b = ctx.b
    dt = x.shape.dtype
    scale, bias, mean, var = (b.convert(v, dt) for v in (scale, bias, mean, var))
    k = b.op(Opcode.DIVIDE, scale, b.op(Opcode.SQRT, b.op(Opcode.ADD, var,
                                                          ctx.full(eps, dt, var.shape.dims))))
    shift = b.op(Opcode.SUBTRACT, bias, b.op(Opcode.MULTIPLY, mean, k))
    dims = tuple(range(1, 1 + k.shape.rank))
    y = b.op(Opcode.MULTIPLY, x, b.broadcast(k, x.shape.dims, dims))
    return [b.op(Opcode.ADD, y, b.broadcast(shift, x.shape.dims, dims))]


def _training_mode(ctx, node) -> bool:
    """Whether the node normalizes by the batch's own statistics, as onnxruntime runs it:
    from opset 14 when training_mode=1; before, when it lists the running and saved
    statistics as outputs (the spec's training-mode output case), unless is_test=1
    (opset < 7) says otherwise. Old exporters left such outputs on inference graphs."""
    if ctx.opset(node) >= 14:
        return bool(ctx.attr(node, "training_mode", 0))
    if ctx.attr(node, "is_test", 0):
        return False
    return any(node.output[1:])


def _batch_norm_training(ctx, node, x, scale, bias, mean, var, eps):
    """Training mode: normalized by the batch's own mean and (biased) variance over
    every dim but the channels; the running mean and variance outputs move toward them
    by 1 - momentum; before opset 14 the saved mean and inverse standard deviation
    follow (what onnxruntime writes there)."""
    b, dt = ctx.b, x.shape.dtype
    if x.shape.rank < 2 or scale.shape.rank != 1:
        raise ctx.error(node, f"training mode needs X of N x C x ... and 1-D parameters, got "
                              f"{x.shape} and {scale.shape}")
    momentum = ctx.attr(node, "momentum", 0.9)
    dims = (0,) + tuple(range(2, x.shape.rank))
    count = x.shape.num_elements // x.shape.dims[1]

    def per_channel(v):
        return b.broadcast(v, x.shape.dims, (1,))

    def average(v):
        total = ctx.reduce(v, dims, Opcode.ADD, 0)
        return b.op(Opcode.DIVIDE, total, ctx.full(count, dt, total.shape.dims))

    batch_mean = average(x)
    centered = b.op(Opcode.SUBTRACT, x, per_channel(batch_mean))
    batch_var = average(b.op(Opcode.MULTIPLY, centered, centered))
    std = b.op(Opcode.SQRT, b.op(Opcode.ADD, batch_var,
                                 ctx.full(eps, dt, batch_var.shape.dims)))
    k = b.op(Opcode.DIVIDE, b.convert(scale, dt), std)
    y = b.op(Opcode.ADD, b.op(Opcode.MULTIPLY, centered, per_channel(k)),
             per_channel(b.convert(bias, dt)))

    def running(old, batch):
        odt = old.shape.dtype
        kept = b.op(Opcode.MULTIPLY, old, ctx.full(momentum, odt, old.shape.dims))
        new = b.op(Opcode.MULTIPLY, b.convert(batch, odt),
                   ctx.full(1 - momentum, odt, old.shape.dims))
        return b.op(Opcode.ADD, kept, new)

    outs = [y, running(mean, batch_mean), running(var, batch_var)]
    if ctx.opset(node) < 14:
        outs += [batch_mean, b.op(Opcode.DIVIDE, ctx.full(1, dt, std.shape.dims), std)]
    return outs


@register("LRN", since=1)
def lrn(ctx, node):
    # y = x / (bias + alpha / size * sum of x^2 over a channel window) ^ beta;
    # the window spans channels c - floor((size-1)/2) .. c + ceil((size-1)/2).
    x = ctx.input(node, 0)
    size = ctx.attr(node, "size")
    alpha, beta = ctx.attr(node, "alpha", 1e-4), ctx.attr(node, "beta", 0.75)
    bias = ctx.attr(node, "bias", 1.0)
    b, dt, dims = ctx.b, x.shape.dtype, x.shape.dims
    rank = x.shape.rank
    before = (size - 1) // 2
    window = Window.make((1, size) + (1,) * (rank - 2),
                         pad_low=(0, before) + (0,) * (rank - 2),
                         pad_high=(0, size - 1 - before) + (0,) * (rank - 2))
    square_sum = b.reduce_window(b.op(Opcode.MULTIPLY, x, x), ctx.scalar(0, dt), window,
                                 ctx.reducer(Opcode.ADD, dt))
    base = b.op(Opcode.ADD, ctx.full(bias, dt, dims),
                b.op(Opcode.MULTIPLY, ctx.full(alpha / size, dt, dims), square_sum))
    return [b.op(Opcode.DIVIDE, x, b.op(Opcode.POWER, base, ctx.full(beta, dt, dims)))]


# -- softmax --------------------------------------------------------------------------

def softmax(ctx, x, dims, log):
    """softmax over ``dims`` of x, stable: exp(x - max) / sum(exp(x - max))."""
    b = ctx.b
    kept = [d for d in range(x.shape.rank) if d not in dims]

    def back(v):
        return b.broadcast(v, x.shape.dims, kept)

    shifted = b.op(Opcode.SUBTRACT, x, back(ctx.reduce(x, dims, Opcode.MAXIMUM,
                                                       lowest(x.shape.dtype))))
    e = b.op(Opcode.EXP, shifted)
    # f16 sums accumulate in f32, as numpy's (the reference's) do: one rounding, not one
    # per element
    wide = dtypes.F32 if x.shape.dtype == dtypes.F16 else x.shape.dtype
    total = b.convert(ctx.reduce(b.convert(e, wide), dims, Opcode.ADD, 0), x.shape.dtype)
    if log:
        return b.op(Opcode.SUBTRACT, shifted, back(b.op(Opcode.LOG, total)))
    return b.op(Opcode.DIVIDE, e, back(total))


def _softmax_v1(log):
    # Before opset 13: x is coerced to 2-D at `axis` (default 1), i.e. the
    # softmax runs over all dims from `axis` on together.
    def lower(ctx, node):
        x = ctx.input(node, 0)
        axis = normalize_axis(ctx, node, ctx.attr(node, "axis", 1), x.shape.rank)
        return [softmax(ctx, x, tuple(range(axis, x.shape.rank)), log)]
    return lower


def _softmax_v13(log):
    def lower(ctx, node):
        x = ctx.input(node, 0)
        axis = normalize_axis(ctx, node, ctx.attr(node, "axis", -1), x.shape.rank)
        return [softmax(ctx, x, (axis,), log)]
    return lower


for _op, _log in (("Softmax", False), ("LogSoftmax", True)):
    register(_op, since=1)(_softmax_v1(_log))
    register(_op, since=13)(_softmax_v13(_log))


@register("BiasSoftmax", since=1, domain=MS)
def bias_softmax(ctx, node):
    # softmax(data + bias) over the dims from axis on. The bias has data's dims there and
    # is broadcast over the dims just before axis (is_inner_broadcast: bias (B, 1.., S..)
    # for data (B, N.., S..)) or over the leading dims (bias (N.., S..) or (1.., N.., S..)).
    x, bias = ctx.input(node, 0), ctx.input(node, 1)
    r = x.shape.rank
    axis = normalize_axis(ctx, node, ctx.attr(node, "axis", 1), r)
    inner = ctx.attr(node, "is_inner_broadcast")
    dims, bd = x.shape.dims, bias.shape.dims
    ok = len(bd) <= r and not (inner and len(bd) < r)
    if ok:
        full = (1,) * (r - len(bd)) + bd
        same = [full[i] == dims[i] for i in range(r)]
        ones = [n == 1 for n in full]
        # inner: equal on [0, k), 1 on [k, axis); outer: 1 on [0, k), equal on [k, axis)
        first, then = (same, ones) if inner else (ones, same)
        ok = all(same[axis:]) and any(all(first[:k]) and all(then[k:axis])
                                      for k in range(axis + 1))
    if not ok:
        raise ctx.error(node, f"bias {bias.shape} does not broadcast to data {x.shape} "
                              f"{'inside' if inner else 'outside'} the dims before axis {axis} "
                              f"(is_inner_broadcast={inner})")
    return [softmax(ctx, ctx.binary(node, Opcode.ADD, x, bias), tuple(range(axis, r)), False)]


@register("Dropout", since=1, ignore=LEGACY + ("ratio", "seed", "is_test"))
def dropout(ctx, node):
    # Inference: the identity, and a mask of all true (before opset 10 in the input's
    # type). Training (opset 12+) with ratio 0 is the same; any other ratio draws a
    # random mask, and random ops are out of scope.
    x = ctx.input(node, 0)
    training = ctx.const_input(node, 2, "training_mode", None)
    if training is not None and training.any():
        ratio = ctx.const_input(node, 1, "ratio", np.float32(0.5))
        if ratio.any():
            raise ctx.out_of_scope(node, f"training_mode=1 with ratio {float(ratio):g} "
                                   + scope.RANDOM_MASK)
    else:
        ctx.input(node, 1)     # ratio: unused at inference
    outs = [x]
    if len(node.output) > 1 and node.output[1]:
        dt = dtypes.PRED if ctx.opset(node) >= 10 else x.shape.dtype
        outs.append(ctx.full(1, dt, x.shape.dims))
    return outs


def _hardmax(ctx, x, axis):
    """1 at the first largest element along ``axis``, 0 elsewhere."""
    b = ctx.b
    n = x.shape.dims[axis]
    kept = [d for d in range(x.shape.rank) if d != axis]

    def back(v):
        return b.broadcast(v, x.shape.dims, kept)

    top = back(ctx.reduce(x, (axis,), Opcode.MAXIMUM, lowest(x.shape.dtype)))
    index = b.iota(Shape.array(dtypes.S32, x.shape.dims), axis)
    candidates = b.op(Opcode.SELECT, b.compare(x, top, "EQ"), index,
                      ctx.full(n, dtypes.S32, x.shape.dims))
    first = back(ctx.reduce(candidates, (axis,), Opcode.MINIMUM, n))
    return b.convert(b.compare(index, first, "EQ"), x.shape.dtype)


@register("Hardmax", since=1)
def hardmax_v1(ctx, node):
    # Before opset 13, x is coerced to 2-D at `axis` (default 1).
    x = ctx.input(node, 0)
    axis = normalize_axis(ctx, node, ctx.attr(node, "axis", 1), x.shape.rank)
    flat = ctx.b.reshape(x, (prod(x.shape.dims[:axis]), prod(x.shape.dims[axis:])))
    return [ctx.b.reshape(_hardmax(ctx, flat, 1), x.shape.dims)]


@register("Hardmax", since=13)
def hardmax_v13(ctx, node):
    x = ctx.input(node, 0)
    return [_hardmax(ctx, x, normalize_axis(ctx, node, ctx.attr(node, "axis", -1),
                                            x.shape.rank))]
