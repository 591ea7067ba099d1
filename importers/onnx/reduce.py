"""Reduce* ONNX ops, lowered to HLO reduce.

``axes`` is an attribute up to opset 12 (ReduceSum) or 17 (the others) and an
optional input from then on, together with ``noop_with_empty_axes``. No axes
means all axes. ``keepdims`` (default 1) keeps reduced dims as size 1.
"""
from __future__ import annotations

from math import prod

from ...hlo import Opcode
from .context import highest, lowest, normalize_axis
from .registry import register


def _sum(ctx, x, dims):
    return ctx.reduce(x, dims, Opcode.ADD, 0)


def _mean(ctx, x, dims):
    s = _sum(ctx, x, dims)
    count = prod(x.shape.dims[d] for d in dims)
    return ctx.b.op(Opcode.DIVIDE, s, ctx.full(count, s.shape.dtype, s.shape.dims))


def _max(ctx, x, dims):
    return ctx.reduce(x, dims, Opcode.MAXIMUM, lowest(x.shape.dtype))


def _min(ctx, x, dims):
    return ctx.reduce(x, dims, Opcode.MINIMUM, highest(x.shape.dtype))


def _prod(ctx, x, dims):
    return ctx.reduce(x, dims, Opcode.MULTIPLY, 1)


def _sum_square(ctx, x, dims):
    return _sum(ctx, ctx.b.op(Opcode.MULTIPLY, x, x), dims)


def _l1(ctx, x, dims):
    return _sum(ctx, ctx.b.op(Opcode.ABS, x), dims)


def _l2(ctx, x, dims):
    return ctx.b.op(Opcode.SQRT, _sum_square(ctx, x, dims))


def _log_sum(ctx, x, dims):
    return ctx.b.op(Opcode.LOG, _sum(ctx, x, dims))


def _log_sum_exp(ctx, x, dims):
    # max + log(sum(exp(x - max))): exp never overflows
    m = _max(ctx, x, dims)
    kept = [d for d in range(x.shape.rank) if d not in dims]
    shifted = ctx.b.op(Opcode.SUBTRACT, x, ctx.b.broadcast(m, x.shape.dims, kept))
    return ctx.b.op(Opcode.ADD, m, _log_sum(ctx, ctx.b.op(Opcode.EXP, shifted), dims))


# op type -> (first opset with axes as an input, reduction over dims without keepdims)
_REDUCE = {
    "ReduceSum": (13, _sum),
    "ReduceMean": (18, _mean),
    "ReduceMax": (18, _max),
    "ReduceMin": (18, _min),
    "ReduceProd": (18, _prod),
    "ReduceSumSquare": (18, _sum_square),
    "ReduceL1": (18, _l1),
    "ReduceL2": (18, _l2),
    "ReduceLogSum": (18, _log_sum),
    "ReduceLogSumExp": (18, _log_sum_exp),
}


def _reduce(ctx, node, fn, x, axes):
    r = x.shape.rank
    dims = sorted(set(range(r) if axes is None else
                      (normalize_axis(ctx, node, int(a), r) for a in axes)))
    y = fn(ctx, x, dims)
    if ctx.attr(node, "keepdims", 1):
        y = ctx.b.reshape(y, [1 if d in dims else n for d, n in enumerate(x.shape.dims)])
    return [y]


def _axes_attribute(fn):
    def lower(ctx, node):
        axes = ctx.attr(node, "axes", None)
        return _reduce(ctx, node, fn, ctx.input(node, 0), axes or None)
    return lower


def _axes_input(fn):
    def lower(ctx, node):
        x = ctx.input(node, 0)
        axes = ctx.const_input(node, 1, "axes", None)
        axes = None if axes is None or axes.size == 0 else axes.reshape(-1).tolist()
        noop = ctx.attr(node, "noop_with_empty_axes", 0)
        if axes is None and noop:
            ctx.attr(node, "keepdims", 1)      # no reduction: keepdims has nothing to keep
            return [x]
        return _reduce(ctx, node, fn, x, axes)
    return lower


for _op, (_since, _fn) in _REDUCE.items():
    register(_op, since=1)(_axes_attribute(_fn))
    register(_op, since=_since)(_axes_input(_fn))
