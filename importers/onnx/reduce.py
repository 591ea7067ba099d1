"""Reduce* ONNX ops, lowered to HLO reduce; ArgMax and ArgMin (a variadic reduce);
CumSum and CumProd (a reduce-window, or a while over a long axis).

``axes`` is an attribute up to opset 12 (ReduceSum) or 17 (the others) and an
optional input from then on, together with ``noop_with_empty_axes``. No axes
means all axes. ``keepdims`` (default 1) keeps reduced dims as size 1.
"""
from __future__ import annotations

from math import prod

import numpy as np

from ...hlo import Builder, Opcode, Shape, Window, dtypes
from ...hlo.while_loop import WhileLoop
from .context import highest, lowest, node_label, normalize_axis
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
    # m + log(sum(exp(x - m))) with m the max where it is finite, else 0 (jax's
    # logsumexp): exp never overflows, and rows of -inf (or inf) give -inf (inf), not NaN
    b = ctx.b
    m = _max(ctx, x, dims)
    if x.shape.dtype.is_float:
        m = b.op(Opcode.SELECT, b.op(Opcode.IS_FINITE, m), m, ctx.full(0, m.shape.dtype,
                                                                       m.shape.dims))
    kept = [d for d in range(x.shape.rank) if d not in dims]
    shifted = b.op(Opcode.SUBTRACT, x, b.broadcast(m, x.shape.dims, kept))
    return b.op(Opcode.ADD, m, _log_sum(ctx, b.op(Opcode.EXP, shifted), dims))


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


# -- ArgMax / ArgMin: a variadic reduce over (values, indices), as XLA lowers argmax ----

def _goes_first(b, pv, pi, qv, qi, largest: bool, last: bool):
    """Whether (value, index) p beats q: a larger (smaller) value, NaN beating every
    number (numpy's and onnxruntime's argmax/argmin), equal values by the lower (higher)
    index. A total order, so the reduction may combine elements in any order."""
    wins = b.compare(pv, qv, "GT" if largest else "LT")
    tie = b.compare(pv, qv, "EQ")
    if pv.shape.dtype.is_float:
        p_nan, q_nan = b.compare(pv, pv, "NE"), b.compare(qv, qv, "NE")
        wins = b.op(Opcode.OR, wins, b.op(Opcode.AND, p_nan, b.op(Opcode.NOT, q_nan)))
        tie = b.op(Opcode.OR, tie, b.op(Opcode.AND, p_nan, q_nan))
    earlier = b.compare(pi, qi, "GT" if last else "LT")
    return b.op(Opcode.OR, wins, b.op(Opcode.AND, tie, earlier))


def arg_reducer(ctx, dtype: dtypes.DType, largest: bool, last: bool):
    """to_apply of the argmax (argmin) reduce: (acc value, acc index, value, index)."""
    def make():
        b = Builder(f"arg{'max' if largest else 'min'}{'_last' if last else ''}_{dtype.name}")
        v, i = Shape.array(dtype, ()), Shape.array(dtypes.S64, ())
        av, ai, xv, xi = (b.parameter(0, v, "acc_value"), b.parameter(1, i, "acc_index"),
                          b.parameter(2, v, "value"), b.parameter(3, i, "index"))
        take = _goes_first(b, xv, xi, av, ai, largest, last)
        return b.build(b.tuple([b.op(Opcode.SELECT, take, xv, av),
                                b.op(Opcode.SELECT, take, xi, ai)]))
    return ctx.computation(("arg", dtype, largest, last), make)


def arg_inits(ctx, dtype: dtypes.DType, largest: bool, last: bool):
    """The init (value, index) of the argmax (argmin) reduce: any element beats it."""
    value = lowest(dtype) if largest else highest(dtype)
    index = -1 if last else np.iinfo(np.int64).max
    return ctx.scalar(value, dtype), ctx.scalar(index, dtypes.S64)


def _arg_extreme(largest: bool):
    def lower(ctx, node):
        x = ctx.input(node, 0)
        r = x.shape.rank
        axis = normalize_axis(ctx, node, ctx.attr(node, "axis", 0), r)
        last = bool(ctx.attr(node, "select_last_index", 0)) if ctx.opset(node) >= 12 else False
        dt = x.shape.dtype
        if x.shape.dims[axis] == 0:
            raise ctx.error(node, f"cannot take the index of an extreme over the empty "
                                  f"axis {axis} of {x.shape}")
        index = ctx.b.iota(Shape.array(dtypes.S64, x.shape.dims), axis)
        reduced = ctx.b.op(Opcode.REDUCE, x, index, *arg_inits(ctx, dt, largest, last),
                           called=[arg_reducer(ctx, dt, largest, last)], dimensions=(axis,))
        y = ctx.b.get_tuple_element(reduced, 1)
        if ctx.attr(node, "keepdims", 1):
            y = ctx.b.reshape(y, [1 if d == axis else n for d, n in enumerate(x.shape.dims)])
        return [y]
    return lower


for _op, _largest in (("ArgMax", True), ("ArgMin", False)):
    register(_op, since=1)(_arg_extreme(_largest))


# -- CumSum / CumProd ----------------------------------------------------------------------

# Axes up to this long are one reduce-window (n reads per element, no arena); longer ones
# a while over the axis (one row per step, the running row in the arena). Measured on f32
# against the while: up to 16 the window is about as fast (16: 0.3 against 0.4 us, 64x16
# over axis 1: 0.5 against 1.3 us, 16x64 over axis 0: 0.7 against 0.4 us) and needs no
# arena; at 32 it is 10x slower (64x32: 24 against 2 us), at 4,096 500x (9.3 ms against
# 19 us). A log-step scan (log2 n passes of shifted ops) was slower than the window: loop
# fusion merges its passes into one loop that reads each element 2^passes times.
MAX_WINDOW_SCAN = 16


def _cumulative(opcode: Opcode, identity):
    def lower(ctx, node):
        x = ctx.input(node, 0)
        axis = ctx.const_input(node, 1, "axis").reshape(-1)
        if axis.size != 1:
            raise ctx.error(node, f"axis must hold one value, got {axis.tolist()}")
        d = normalize_axis(ctx, node, int(axis[0]), x.shape.rank)
        exclusive, reverse = ctx.attr(node, "exclusive", 0), ctx.attr(node, "reverse", 0)
        scan = _scan_window if x.shape.dims[d] <= MAX_WINDOW_SCAN else _scan_while
        return [scan(ctx, node, x, d, opcode, identity, bool(exclusive), bool(reverse))]
    return lower


def _scan_window(ctx, node, x, d, opcode, identity, exclusive, reverse):
    """A reduce-window whose window spans the whole axis (XLA's cumsum)."""
    r, n = x.shape.rank, x.shape.dims[d]
    # Output i folds the n-wide window ending at i (starting at i when reversed),
    # moved one further along for an exclusive scan; padding holds the identity.
    before, after = (n - 1 + int(exclusive), -int(exclusive))
    if reverse:
        before, after = after, before
    low, high = [0] * r, [0] * r
    low[d], high[d] = before, after
    window = Window.make(tuple(n if k == d else 1 for k in range(r)),
                         pad_low=low, pad_high=high)
    dt = x.shape.dtype
    return ctx.b.reduce_window(x, ctx.scalar(identity, dt), window, ctx.reducer(opcode, dt))


def _scan_while(ctx, node, x, d, opcode, identity, exclusive, reverse):
    """A while over the axis carrying the running fold (reverse: from the end); step t
    writes row t of the output, the fold before or after adding row t (exclusive or not)."""
    s64, dt, dims = dtypes.S64, x.shape.dtype, x.shape.dims
    n = dims[d]
    row = dims[:d] + (1,) + dims[d + 1:]
    lp = WhileLoop(ctx, node_label(node), [ctx.scalar(0, s64), ctx.full(identity, dt, row),
                                           ctx.full(identity, dt, dims)])
    t, acc, y = lp.body_elements
    b = lp.body
    xb = lp.capture(x)[1]
    at = b.op(Opcode.SUBTRACT, b.constant(n - 1, s64), t) if reverse else t
    zero = b.constant(0, s64)
    starts = [zero] * len(dims)
    starts[d] = at
    new = b.op(opcode, acc, b.op(Opcode.DYNAMIC_SLICE, xb, *starts, dynamic_slice_sizes=row))
    y = b.op(Opcode.DYNAMIC_UPDATE_SLICE, y, acc if exclusive else new, *starts)
    cond = lp.cond.compare(lp.cond_elements[0], lp.cond.constant(n, s64), "LT")
    return lp.finish(cond, [b.op(Opcode.ADD, t, b.constant(1, s64)), new, y])[2]


register("CumSum", since=11)(_cumulative(Opcode.ADD, 0))
register("CumProd", since=26)(_cumulative(Opcode.MULTIPLY, 1))
