"""Normalization ONNX ops: LayerNormalization, RMSNormalization, GroupNormalization,
InstanceNormalization, LpNormalization, MeanVarianceNormalization.

Each lowers to HLO reductions over the normalized dims followed by one element-wise
expression, so fusion turns it into two or three loops and no intermediate as large
as X: the statistics are reduced from X itself (the variance as E[x^2] - E[x]^2, as
the ONNX function bodies and onnxruntime compute it), and the output loop reads X,
the per-row statistics and the affine parameters. Statistics are computed in
``stash_type`` (f32 by default) where the op has it, and in at least f32 otherwise:
the normalized value is cast back to the input type before the affine stage, as the
ONNX function bodies do.
"""
from __future__ import annotations

from math import prod

from ...hlo import Opcode, dtypes
from .context import normalize_axis
from .registry import register
from .types import hlo_dtype

LEGACY = ("consumed_inputs",)


def _stash_type(ctx, node):
    """The type of the first stage: ``stash_type`` (default float)."""
    stash = hlo_dtype(ctx.attr(node, "stash_type", 1), "stash_type")
    if not stash.is_float:
        raise ctx.error(node, f"stash_type {stash} is not a floating-point type")
    return stash


def _at_least_f32(dtype):
    return dtypes.F64 if dtype == dtypes.F64 else dtypes.F32


def _mean(ctx, x, dims):
    """The mean of ``x`` over ``dims`` (reduced away)."""
    s = ctx.reduce(x, dims, Opcode.ADD, 0)
    count = prod(x.shape.dims[d] for d in dims)
    return ctx.b.op(Opcode.DIVIDE, s, ctx.full(count, s.shape.dtype, s.shape.dims))


def _moments(ctx, x, dims):
    """(mean, variance) of ``x`` over ``dims``, both reduced straight from ``x``.

    var = max(E[x^2] - E[x]^2, 0): two reductions that each read x, so no centered
    copy of x is ever stored; the clamp keeps rounding from making it negative.
    """
    b = ctx.b
    mean = _mean(ctx, x, dims)
    mean_sq = _mean(ctx, b.op(Opcode.MULTIPLY, x, x), dims)
    var = b.op(Opcode.SUBTRACT, mean_sq, b.op(Opcode.MULTIPLY, mean, mean))
    var = b.op(Opcode.MAXIMUM, var, ctx.full(0, var.shape.dtype, var.shape.dims))
    return mean, var


def _standardize(ctx, x, dims, epsilon):
    """((x - mean) * inv_std_dev, mean, inv_std_dev) over ``dims`` of ``x``, in x's type.

    The statistics are reduced to the kept dims; inv_std_dev = 1 / sqrt(var + epsilon).
    """
    b = ctx.b
    mean, var = _moments(ctx, x, dims)
    dt = var.shape.dtype
    inv = b.op(Opcode.RSQRT, b.op(Opcode.ADD, var, ctx.full(epsilon, dt, var.shape.dims)))
    kept = [d for d in range(x.shape.rank) if d not in dims]

    def back(v):
        return b.broadcast(v, x.shape.dims, kept)

    y = b.op(Opcode.MULTIPLY, b.op(Opcode.SUBTRACT, x, back(mean)), back(inv))
    return y, mean, inv


# -- LayerNormalization, RMSNormalization -------------------------------------------------

@register("LayerNormalization", since=17)
def layer_normalization(ctx, node):
    # Normalizes over dims axis..rank-1; Mean and InvStdDev keep the reduced dims as 1s.
    x, scale, bias = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    r = x.shape.rank
    axis = normalize_axis(ctx, node, ctx.attr(node, "axis", -1), r)
    stash = _stash_type(ctx, node)
    dims = tuple(range(axis, r))
    y, mean, inv = _standardize(ctx, ctx.b.convert(x, stash), dims,
                               ctx.attr(node, "epsilon", 1e-5))
    y = ctx.binary(node, Opcode.MULTIPLY, ctx.b.convert(y, x.shape.dtype), scale)
    if bias is not None:
        y = ctx.binary(node, Opcode.ADD, y, bias)
    stats_dims = x.shape.dims[:axis] + (1,) * (r - axis)
    return [y, ctx.b.reshape(mean, stats_dims), ctx.b.reshape(inv, stats_dims)]


@register("RMSNormalization", since=23)
def rms_normalization(ctx, node):
    # Y = X / sqrt(mean(X^2) + epsilon) * scale over dims axis..rank-1; Y has scale's type.
    x, scale = ctx.input(node, 0), ctx.input(node, 1)
    r = x.shape.rank
    axis = normalize_axis(ctx, node, ctx.attr(node, "axis", -1), r)
    b = ctx.b
    xs = b.convert(x, _stash_type(ctx, node))
    dims = tuple(range(axis, r))
    ms = _mean(ctx, b.op(Opcode.MULTIPLY, xs, xs), dims)
    dt = ms.shape.dtype
    inv = b.op(Opcode.RSQRT, b.op(Opcode.ADD, ms, ctx.full(ctx.attr(node, "epsilon", 1e-5),
                                                           dt, ms.shape.dims)))
    y = b.op(Opcode.MULTIPLY, xs, b.broadcast(inv, x.shape.dims, tuple(range(axis))))
    return [ctx.binary(node, Opcode.MULTIPLY, b.convert(y, scale.shape.dtype), scale)]


# -- GroupNormalization, InstanceNormalization --------------------------------------------

def _channel_affine(ctx, y, scale, bias, channel_dim):
    """y * scale + bias with 1-D scale and bias along ``channel_dim`` of y."""
    b = ctx.b
    dims = y.shape.dims
    y = b.op(Opcode.MULTIPLY, y, b.broadcast(b.convert(scale, y.shape.dtype), dims,
                                             (channel_dim,)))
    return b.op(Opcode.ADD, y, b.broadcast(b.convert(bias, y.shape.dtype), dims, (channel_dim,)))


def _check_vector(ctx, node, what, v, n):
    if v.shape.dims != (n,):
        raise ctx.error(node, f"{what} must have shape ({n},), got {v.shape}")


@register("GroupNormalization", since=21)
def group_normalization(ctx, node):
    # Statistics per instance and group of C / num_groups channels, scale and bias per
    # channel. (Opset 18's per-group scale and bias is deprecated: the checker rejects it.)
    x, scale, bias = (ctx.input(node, i) for i in range(3))
    if x.shape.rank < 2:
        raise ctx.error(node, f"X must be N x C x ..., got {x.shape}")
    n, c = x.shape.dims[:2]
    groups = ctx.attr(node, "num_groups")
    if groups <= 0 or c % groups:
        raise ctx.error(node, f"num_groups {groups} does not divide the {c} channels")
    _check_vector(ctx, node, "scale", scale, c)
    _check_vector(ctx, node, "bias", bias, c)
    b = ctx.b
    spatial = prod(x.shape.dims[2:])
    grouped = b.reshape(b.convert(x, _stash_type(ctx, node)),
                        (n, groups, c // groups * spatial))
    y, _, _ = _standardize(ctx, grouped, (2,), ctx.attr(node, "epsilon", 1e-5))
    y = b.reshape(b.convert(y, x.shape.dtype), (n, c, spatial))
    return [b.reshape(_channel_affine(ctx, y, scale, bias, 1), x.shape.dims)]


@register("InstanceNormalization", since=1, ignore=LEGACY)
def instance_normalization(ctx, node):
    # Per instance and channel over the spatial dims: y = scale * (x - mean) / sqrt(var +
    # epsilon) + B. The statistics are computed in f32 even for f16/bf16 inputs.
    x, scale, bias = (ctx.input(node, i) for i in range(3))
    if x.shape.rank < 3:
        raise ctx.error(node, f"input must be N x C x spatial, got {x.shape}")
    c = x.shape.dims[1]
    _check_vector(ctx, node, "scale", scale, c)
    _check_vector(ctx, node, "B", bias, c)
    b = ctx.b
    xs = b.convert(x, _at_least_f32(x.shape.dtype))
    y, _, _ = _standardize(ctx, xs, tuple(range(2, x.shape.rank)),
                          ctx.attr(node, "epsilon", 1e-5))
    return [_channel_affine(ctx, b.convert(y, x.shape.dtype), scale, bias, 1)]


# -- LpNormalization, MeanVarianceNormalization -------------------------------------------

@register("LpNormalization", since=1)
def lp_normalization(ctx, node):
    # y = x / ||x||_p along axis; where the norm is 0 the output is 0 (opset 22's text).
    x = ctx.input(node, 0)
    axis = normalize_axis(ctx, node, ctx.attr(node, "axis", -1), x.shape.rank)
    p = ctx.attr(node, "p", 2)
    b, dt, dims = ctx.b, x.shape.dtype, x.shape.dims
    if p == 1:
        norm = ctx.reduce(b.op(Opcode.ABS, x), (axis,), Opcode.ADD, 0)
    elif p == 2:
        norm = b.op(Opcode.SQRT, ctx.reduce(b.op(Opcode.MULTIPLY, x, x), (axis,), Opcode.ADD, 0))
    else:
        raise ctx.error(node, f"p must be 1 or 2, got {p}")
    norm = b.broadcast(norm, dims, [d for d in range(x.shape.rank) if d != axis])
    zero = ctx.full(0, dt, dims)
    is_zero = b.compare(norm, zero, "EQ")
    return [b.op(Opcode.SELECT, is_zero, zero, b.op(Opcode.DIVIDE, x, norm))]


@register("MeanVarianceNormalization", since=9)
def mean_variance_normalization(ctx, node):
    # y = (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9) over ``axes`` (the function body).
    x = ctx.input(node, 0)
    axes = ctx.attr(node, "axes", (0, 2, 3))
    r = x.shape.rank
    dims = tuple(sorted({normalize_axis(ctx, node, a, r) for a in axes}))
    b = ctx.b
    xs = b.convert(x, _at_least_f32(x.shape.dtype))
    mean, var = _moments(ctx, xs, dims)
    dt = var.shape.dtype
    std = b.op(Opcode.ADD, b.op(Opcode.SQRT, var), ctx.full(1e-9, dt, var.shape.dims))
    kept = [d for d in range(r) if d not in dims]
    centered = b.op(Opcode.SUBTRACT, xs, b.broadcast(mean, x.shape.dims, kept))
    y = b.op(Opcode.DIVIDE, centered, b.broadcast(std, x.shape.dims, kept))
    return [b.convert(y, x.shape.dtype)]
