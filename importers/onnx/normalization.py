"""Normalization ONNX ops: LayerNormalization, RMSNormalization, GroupNormalization,
InstanceNormalization, LpNormalization, MeanVarianceNormalization; onnxruntime's
SimplifiedLayerNormalization (which it defines in the ONNX domain) and com.microsoft's
SkipLayerNormalization, SkipSimplifiedLayerNormalization and EmbedLayerNormalization.

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

from ...hlo import Opcode, Shape, dtypes
from .context import normalize_axis
from .indexing import take
from .registry import MS, register
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
    y, _, _ = _rms_from_axis(ctx, node, x)
    return [ctx.binary(node, Opcode.MULTIPLY, ctx.b.convert(y, scale.shape.dtype), scale)]


def _rms_from_axis(ctx, node, x):
    """_rms of x in the node's stash_type over its dims from ``axis`` on (epsilon
    attribute), with that axis."""
    r = x.shape.rank
    axis = normalize_axis(ctx, node, ctx.attr(node, "axis", -1), r)
    y, inv = _rms(ctx, ctx.b.convert(x, _stash_type(ctx, node)), tuple(range(axis, r)),
                  ctx.attr(node, "epsilon", 1e-5))
    return y, inv, axis


def _rms(ctx, x, dims, epsilon):
    """(x * inv, inv), inv = 1 / sqrt(mean(x^2) + epsilon) over ``dims``, the trailing dims
    of x, reduced to the kept ones."""
    b = ctx.b
    ms = _mean(ctx, b.op(Opcode.MULTIPLY, x, x), dims)
    dt = ms.shape.dtype
    inv = b.op(Opcode.RSQRT, b.op(Opcode.ADD, ms, ctx.full(epsilon, dt, ms.shape.dims)))
    kept = tuple(range(x.shape.rank - len(dims)))
    return b.op(Opcode.MULTIPLY, x, b.broadcast(inv, x.shape.dims, kept)), inv


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


# -- onnxruntime's contrib normalizations ---------------------------------------------------
# Their CPU kernels compute in f32 (f64 for f64) and round once, after the affine stage.

def _affine(ctx, y, gamma, beta, dtype):
    """y * gamma (+ beta) over y's last dim, in y's type, rounded to ``dtype``."""
    b = ctx.b
    last = (y.shape.rank - 1,)
    y = b.op(Opcode.MULTIPLY, y, b.broadcast(b.convert(gamma, y.shape.dtype), y.shape.dims, last))
    if beta is not None:
        y = b.op(Opcode.ADD, y, b.broadcast(b.convert(beta, y.shape.dtype), y.shape.dims, last))
    return b.convert(y, dtype)


def _check_hidden(ctx, node, hidden, **vectors):
    for what, v in vectors.items():
        if v is not None:
            _check_vector(ctx, node, what, v, hidden)


@register("SimplifiedLayerNormalization", since=1)
def simplified_layer_normalization(ctx, node):
    # RMSNormalization as onnxruntime defines it: Y = X / sqrt(mean(X^2) + epsilon) * scale,
    # and inv_std_var (X's dims, 1 from axis on) in stash_type.
    x, scale = ctx.input(node, 0), ctx.input(node, 1)
    y, inv, axis = _rms_from_axis(ctx, node, x)
    y = ctx.binary(node, Opcode.MULTIPLY, y, ctx.b.convert(scale, y.shape.dtype))
    return [ctx.b.convert(y, x.shape.dtype),
            ctx.b.reshape(inv, x.shape.dims[:axis] + (1,) * (x.shape.rank - axis))]


def _skip_layer_normalization(simplified):
    def lower(ctx, node):
        # sum = input + skip (+ bias), skip broadcast over the batch; then LayerNorm (or
        # RMSNorm) over the last dim. Outputs: y, the mean (not of RMSNorm, for which
        # onnxruntime writes zeros) and inv_std_var (dims of sum, the last 1; in f32 or
        # f64), sum.
        b = ctx.b
        x, skip, gamma = (ctx.input(node, i) for i in range(3))
        beta = None if simplified else ctx.input(node, 3)
        bias = ctx.input(node, 3 if simplified else 4)
        if x.shape.rank not in (2, 3) or skip.shape.dims != x.shape.dims[-skip.shape.rank:] \
                and skip.shape.dims != (1,) + x.shape.dims[1:]:
            raise ctx.error(node, f"input {x.shape} must be 2-D or 3-D and skip {skip.shape} "
                                  f"its shape, or its shape without the batch dim")
        _check_hidden(ctx, node, x.shape.dims[-1], gamma=gamma, beta=beta, bias=bias)
        total = b.op(Opcode.ADD, x, ctx.broadcast_to(skip, x.shape.dims))
        if bias is not None:
            total = ctx.binary(node, Opcode.ADD, total, bias)
        wide = b.convert(total, _at_least_f32(x.shape.dtype))
        last = (x.shape.rank - 1,)
        eps = ctx.attr(node, "epsilon", 1e-12)
        stats = x.shape.dims[:-1] + (1,)
        if simplified:
            (y, inv), mean = _rms(ctx, wide, last, eps), None
        else:
            y, mean, inv = _standardize(ctx, wide, last, eps)
            mean = b.reshape(mean, stats)
        return [_affine(ctx, y, gamma, beta, x.shape.dtype), mean, b.reshape(inv, stats), total]
    return lower


register("SkipLayerNormalization", since=1, domain=MS)(_skip_layer_normalization(False))
register("SkipSimplifiedLayerNormalization", since=1, domain=MS)(
    _skip_layer_normalization(True))


@register("EmbedLayerNormalization", since=1, domain=MS, ignore=("mask_index_type",))
def embed_layer_normalization(ctx, node):
    # LayerNorm(word[input_ids] + position[position_ids] (+ segment[segment_ids])) over the
    # hidden dim; position_ids default to 0..S-1 and may be (1, S). mask_index: per batch,
    # the count of mask values equal to 1 (zeros without a mask); embedding_sum: the sum.
    # (mask_index_type only guides onnxruntime's shape inference.) Ids out of range, an
    # error in onnxruntime, read the nearest row.
    b = ctx.b
    ids, seg_ids, word, pos, seg, gamma, beta, mask, pos_ids = \
        (ctx.input(node, i) for i in range(9))
    if ids.shape.rank != 2 or word.shape.rank != 2 or pos.shape.rank != 2:
        raise ctx.error(node, f"input_ids {ids.shape} and the embeddings {word.shape}, "
                              f"{pos.shape} must be 2-D")
    if (seg_ids is None) != (seg is None):
        raise ctx.error(node, "segment_ids and segment_embedding must be given together")
    batch, seq = ids.shape.dims
    hidden = word.shape.dims[1]
    _check_hidden(ctx, node, hidden, gamma=gamma, beta=beta)
    for what, t in (("position_embedding", pos), ("segment_embedding", seg)):
        if t is not None and (t.shape.rank != 2 or t.shape.dims[1] != hidden):
            raise ctx.error(node, f"{what} {t.shape} must be (rows, {hidden})")
    if pos_ids is None:
        pos_ids = b.iota(Shape.array(dtypes.S32, (1, seq)), 1)
    if pos_ids.shape.dims not in ((batch, seq), (1, seq)):
        raise ctx.error(node, f"position_ids {pos_ids.shape} must be ({batch}, {seq}) or "
                              f"(1, {seq})")
    total = b.op(Opcode.ADD, take(ctx, word, ids, 0),
                 ctx.broadcast_to(take(ctx, pos, pos_ids, 0), (batch, seq, hidden)))
    if seg is not None:
        total = b.op(Opcode.ADD, total, take(ctx, seg, seg_ids, 0))
    y, _, _ = _standardize(ctx, b.convert(total, _at_least_f32(word.shape.dtype)), (2,),
                           ctx.attr(node, "epsilon", 1e-12))
    if mask is None:
        mask_index = ctx.full(0, dtypes.S32, (batch,))
    else:
        ones = b.convert(b.compare(mask, ctx.full(1, mask.shape.dtype, mask.shape.dims), "EQ"),
                         dtypes.S32)
        mask_index = ctx.reduce(ones, (1,), Opcode.ADD, 0)
    return [_affine(ctx, y, gamma, beta, word.shape.dtype), mask_index, total]
