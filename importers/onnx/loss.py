"""Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (a log-softmax over the
classes, then the same negative log-likelihood), every reduction.

With input (N, C, d...) and integer targets (N, d...), element (n, d...) of the loss is
-input[n, target, d...] * weight[target], and 0 where target == ignore_index. The
input element is picked by a one-hot compare of the class index with the target and a
sum over C (it reads the input once, fuses, and needs no bounds: an out-of-range
ignore_index picks nothing); the weight is a gather, whose clamped index is what
ONNX's reference takes. ``mean`` divides by the sum of the weights applied (the count
of targets not ignored without weights).
"""
from __future__ import annotations

from ...hlo import GatherDimensionNumbers, Opcode, Shape, dtypes
from .nn import softmax
from .registry import register

_REDUCTIONS = ("none", "sum", "mean")


def _negative_log_likelihood(ctx, node, x, target, weight):
    b = ctx.b
    if x.shape.rank < 2:
        raise ctx.error(node, f"input must be N x C x ..., got {x.shape}")
    want = x.shape.dims[:1] + x.shape.dims[2:]
    if target.shape.dims != want or not target.shape.dtype.is_integer:
        raise ctx.error(node, f"target must be integers of dims {want}, got {target.shape}")
    reduction = ctx.attr(node, "reduction", "mean")
    if reduction not in _REDUCTIONS:
        raise ctx.error(node, f"unknown reduction '{reduction}'")
    ignore = ctx.attr(node, "ignore_index", None)
    dt, dims = x.shape.dtype, x.shape.dims
    target = b.convert(target, dtypes.S64)
    kept = (0,) + tuple(range(2, x.shape.rank))
    classes = b.iota(Shape.array(dtypes.S64, dims), 1)
    one_hot = b.compare(classes, b.broadcast(target, dims, kept), "EQ")
    picked = ctx.reduce(b.op(Opcode.SELECT, one_hot, x, ctx.full(0, dt, dims)), (1,),
                        Opcode.ADD, 0)
    loss = b.op(Opcode.NEGATE, picked)
    w = None
    if weight is not None:
        if weight.shape.dims != (dims[1],):
            raise ctx.error(node, f"weight must have C = {dims[1]} elements, got {weight.shape}")
        w = b.gather(weight, target, GatherDimensionNumbers((), (0,), (0,), target.shape.rank),
                     (1,))
    if ignore is not None:
        valid = b.compare(target, ctx.full(ignore, dtypes.S64, want), "NE")
        w = b.op(Opcode.SELECT, valid, w if w is not None else ctx.full(1, dt, want),
                 ctx.full(0, dt, want))
    if w is not None:
        loss = b.op(Opcode.MULTIPLY, loss, w)
    if reduction == "none":
        return loss
    everything = tuple(range(len(want)))
    total = ctx.reduce(loss, everything, Opcode.ADD, 0)
    if reduction == "sum":
        return total
    count = ctx.reduce(w, everything, Opcode.ADD, 0) if w is not None else \
        ctx.scalar(target.shape.num_elements, dt)
    return b.op(Opcode.DIVIDE, total, count)


@register("NegativeLogLikelihoodLoss", since=12)
def negative_log_likelihood_loss(ctx, node):
    x, target, weight = (ctx.input(node, i) for i in range(3))
    return [_negative_log_likelihood(ctx, node, x, target, weight)]


@register("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy_loss(ctx, node):
    x, target, weight = (ctx.input(node, i) for i in range(3))
    if x.shape.rank < 2:
        raise ctx.error(node, f"scores must be N x C x ..., got {x.shape}")
    log_prob = softmax(ctx, x, (1,), log=True)
    loss = _negative_log_likelihood(ctx, node, log_prob, target, weight)
    return [loss, log_prob] if len(node.output) > 1 and node.output[1] else [loss]
