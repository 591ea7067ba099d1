"""TopK, lowered as jax.lax.top_k lowers it: XLA's topk op over the last dim (the
axis moved there and back by transposes), whose indices are widened to int64.

The k best come in order, equal values ranked by the lower index, as ONNX requires;
NaN ranks above every number (first for the largest, last for the smallest), as
numpy and onnxruntime order it.
"""
from __future__ import annotations

from ...hlo import dtypes
from .context import normalize_axis
from .registry import register


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
    last = r - 1
    perm = list(range(r))
    perm[axis], perm[last] = last, axis           # a swap: its own inverse
    t = b.topk(b.transpose(x, perm), k, largest=bool(largest))
    values, indices = b.get_tuple_element(t, 0), b.get_tuple_element(t, 1)
    return [b.transpose(values, perm), b.transpose(b.convert(indices, dtypes.S64), perm)]


@register("TopK", since=1)
def top_k_v1(ctx, node):
    return _top_k(ctx, node, int(ctx.attr(node, "k")))


@register("TopK", since=10)
def top_k_v10(ctx, node):
    k = ctx.const_input(node, 1, "k").reshape(-1)
    if k.size != 1:
        raise ctx.error(node, f"K must hold one value, got {k.tolist()}")
    return _top_k(ctx, node, int(k[0]))
