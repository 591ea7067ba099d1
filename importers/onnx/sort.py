"""TopK, lowered as XLA lowers it: a stable sort of (values, indices) along the axis,
then the first k of each.

The sort is stable and the indices start in order, so equal values keep the lower
index first, as ONNX requires. NaN sorts above every number (first for the largest,
last for the smallest), as numpy and onnxruntime order it.
"""
from __future__ import annotations

from ...hlo import Builder, Opcode, Shape, dtypes
from .context import normalize_axis
from .registry import register


def _comparator(ctx, dtype: dtypes.DType, largest: bool):
    """(value, value, index, index) -> whether the first value goes first."""
    def make():
        b = Builder(f"{'greater' if largest else 'less'}_{dtype.name}")
        v, i = Shape.array(dtype, ()), Shape.array(dtypes.S64, ())
        x, y = b.parameter(0, v, "x"), b.parameter(1, v, "y")
        b.parameter(2, i, "i"), b.parameter(3, i, "j")
        first = b.compare(x, y, "GT" if largest else "LT")
        if dtype.is_float:
            nan_first, number = (x, y) if largest else (y, x)
            is_nan = b.compare(nan_first, nan_first, "NE")
            other_is_number = b.compare(number, number, "EQ")
            first = b.op(Opcode.OR, first, b.op(Opcode.AND, is_nan, other_is_number))
        return b.build(first)
    return ctx.computation(("topk", dtype, largest), make)


def _top_k(ctx, node, k: int):
    x = ctx.input(node, 0)
    r = x.shape.rank
    axis = normalize_axis(ctx, node, ctx.attr(node, "axis", -1), r)
    largest = 1
    if ctx.opset(node) >= 11:
        largest = ctx.attr(node, "largest", 1)
        ctx.attr(node, "sorted", 1)     # the top k always come sorted, which 0 allows
    n = x.shape.dims[axis]
    if not 0 <= k <= n:
        raise ctx.error(node, f"k = {k} is outside [0, {n}] (axis {axis} of {x.shape})")
    b = ctx.b
    index = b.iota(Shape.array(dtypes.S64, x.shape.dims), axis)
    s = b.sort([x, index], axis, _comparator(ctx, x.shape.dtype, bool(largest)),
               is_stable=True)
    limits = tuple(k if d == axis else size for d, size in enumerate(x.shape.dims))
    outs = []
    for t in range(2):
        y = b.get_tuple_element(s, t)
        if k != n:
            y = b.slice(y, (0,) * r, limits)
        outs.append(y)
    return outs


@register("TopK", since=1)
def top_k_v1(ctx, node):
    return _top_k(ctx, node, int(ctx.attr(node, "k")))


@register("TopK", since=10)
def top_k_v10(ctx, node):
    k = ctx.const_input(node, 1, "k").reshape(-1)
    if k.size != 1:
        raise ctx.error(node, f"K must hold one value, got {k.tolist()}")
    return _top_k(ctx, node, int(k[0]))
