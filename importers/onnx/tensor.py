"""Tensor-manipulation ONNX ops: shapes, data movement, constants, indexing.

Shape-like operands (Reshape's shape, Slice's starts, Unsqueeze's axes...) must
be known at compile time (``ctx.const_input``); the data itself always moves
through HLO instructions.
"""
from __future__ import annotations

from math import prod

import numpy as np

from ...hlo import GatherDimensionNumbers, Opcode, Shape, dtypes
from .context import normalize_axis
from .registry import register


def _axes(ctx, node, axes, rank):
    out = [normalize_axis(ctx, node, int(a), rank) for a in axes]
    if len(set(out)) != len(out):
        raise ctx.error(node, f"repeated axes {list(axes)}")
    return out


@register("Identity", since=1)
def identity(ctx, node):
    return [ctx.input(node, 0)]


# -- reshapes -------------------------------------------------------------------------

def _reshape(ctx, node, x, shape, allowzero):
    """ONNX Reshape: 0 copies the input dim (unless allowzero), -1 is inferred."""
    dims = []
    for i, d in enumerate(int(v) for v in shape):
        if d == 0 and not allowzero:
            if i >= x.shape.rank:
                raise ctx.error(node, f"shape {list(shape)} copies dim {i} of {x.shape}")
            d = x.shape.dims[i]
        elif d < -1:
            raise ctx.error(node, f"invalid dimension {d} in shape {list(shape)}")
        dims.append(d)
    if dims.count(-1) > 1:
        raise ctx.error(node, f"shape {list(shape)} has more than one -1")
    total = x.shape.num_elements
    if -1 in dims:
        known = prod(d for d in dims if d != -1)
        if known == 0 or total % known:
            raise ctx.error(node, f"cannot reshape {x.shape} to {list(shape)}")
        dims[dims.index(-1)] = total // known
    if prod(dims) != total:
        raise ctx.error(node, f"cannot reshape {x.shape} to {list(shape)}")
    return ctx.b.reshape(x, dims)


@register("Reshape", since=1, ignore=("consumed_inputs",))
def reshape_v1(ctx, node):
    return [_reshape(ctx, node, ctx.input(node, 0), ctx.attr(node, "shape"), False)]


@register("Reshape", since=5)
def reshape_v5(ctx, node):
    x = ctx.input(node, 0)
    shape = ctx.const_input(node, 1, "shape")
    return [_reshape(ctx, node, x, shape.reshape(-1), ctx.attr(node, "allowzero", 0))]


@register("Flatten", since=1)
def flatten(ctx, node):
    x = ctx.input(node, 0)
    r = x.shape.rank
    axis = ctx.attr(node, "axis", 1)
    if not -r <= axis <= r:
        raise ctx.error(node, f"axis {axis} is out of range for rank {r}")
    axis = axis + r if axis < 0 else axis
    return [ctx.b.reshape(x, (prod(x.shape.dims[:axis]), prod(x.shape.dims[axis:])))]


def _squeeze(ctx, node, x, axes):
    if axes is None:
        axes = [i for i, n in enumerate(x.shape.dims) if n == 1]
    axes = _axes(ctx, node, axes, x.shape.rank)
    for a in axes:
        if x.shape.dims[a] != 1:
            raise ctx.error(node, f"cannot squeeze axis {a} of size {x.shape.dims[a]}")
    return ctx.b.reshape(x, [n for i, n in enumerate(x.shape.dims) if i not in axes])


def _unsqueeze(ctx, node, x, axes):
    axes = _axes(ctx, node, axes, x.shape.rank + len(axes))
    dims = iter(x.shape.dims)
    return ctx.b.reshape(x, [1 if i in axes else next(dims)
                             for i in range(x.shape.rank + len(axes))])


@register("Squeeze", since=1)
def squeeze_v1(ctx, node):
    return [_squeeze(ctx, node, ctx.input(node, 0), ctx.attr(node, "axes", None))]


@register("Squeeze", since=13)
def squeeze_v13(ctx, node):
    axes = ctx.const_input(node, 1, "axes", None)
    return [_squeeze(ctx, node, ctx.input(node, 0), None if axes is None else axes.reshape(-1))]


@register("Unsqueeze", since=1)
def unsqueeze_v1(ctx, node):
    return [_unsqueeze(ctx, node, ctx.input(node, 0), ctx.attr(node, "axes"))]


@register("Unsqueeze", since=13)
def unsqueeze_v13(ctx, node):
    axes = ctx.const_input(node, 1, "axes")
    return [_unsqueeze(ctx, node, ctx.input(node, 0), axes.reshape(-1))]


# -- movement -------------------------------------------------------------------------

@register("Transpose", since=1)
def transpose(ctx, node):
    x = ctx.input(node, 0)
    perm = ctx.attr(node, "perm", tuple(reversed(range(x.shape.rank))))
    if sorted(perm) != list(range(x.shape.rank)):
        raise ctx.error(node, f"perm {list(perm)} is not a permutation of rank "
                              f"{x.shape.rank}")
    return [ctx.b.transpose(x, perm)]


@register("Concat", since=1)
def concat(ctx, node):
    xs = ctx.inputs(node)
    # opset 1 defaults axis to 1; from opset 4 it is required
    axis = ctx.attr(node, "axis", 1) if ctx.opset(node) < 4 else ctx.attr(node, "axis")
    axis = normalize_axis(ctx, node, axis, xs[0].shape.rank)
    return [ctx.b.concatenate(xs, axis)]


@register("Expand", since=8)
def expand(ctx, node):
    x = ctx.input(node, 0)
    shape = tuple(int(d) for d in ctx.const_input(node, 1, "shape").reshape(-1))
    try:
        dims = np.broadcast_shapes(x.shape.dims, shape)
    except ValueError:
        raise ctx.error(node, f"cannot expand {x.shape} to {list(shape)}") from None
    return [ctx.broadcast_to(x, dims)]


@register("Tile", since=6)
def tile(ctx, node):
    # Broadcast x (d0, d1, ...) to (r0, d0, r1, d1, ...), then merge each pair.
    x = ctx.input(node, 0)
    repeats = [int(r) for r in ctx.const_input(node, 1, "repeats").reshape(-1)]
    if len(repeats) != x.shape.rank or any(r < 0 for r in repeats):
        raise ctx.error(node, f"repeats {repeats} do not fit {x.shape}")
    pairs = [v for r, d in zip(repeats, x.shape.dims) for v in (r, d)]
    y = ctx.b.broadcast(x, pairs, [2 * i + 1 for i in range(x.shape.rank)])
    return [ctx.b.reshape(y, [r * d for r, d in zip(repeats, x.shape.dims)])]


def _slice_axis(dim, start, end, step):
    """ONNX's clamping of one axis' start/end; returns (start, end) for that step sign."""
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return min(max(start, 0), dim), min(max(end, 0), dim)
    return min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)


def _slice(ctx, node, x, starts, ends, axes, steps):
    r = x.shape.rank
    axes = list(range(len(starts))) if axes is None else _axes(ctx, node, axes, r)
    steps = [1] * len(starts) if steps is None else [int(s) for s in steps]
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.error(node, "starts, ends, axes and steps differ in length")
    lo, hi, stride = [0] * r, list(x.shape.dims), [1] * r
    reversed_axes = []
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            raise ctx.error(node, "slice step cannot be 0")
        n = x.shape.dims[a]
        s, e = _slice_axis(n, int(s), int(e), st)
        if st < 0:
            # x[s:e:st] == reverse(x)[n-1-s : n-1-e : -st]
            reversed_axes.append(a)
            s, e, st = n - 1 - s, n - 1 - e, -st
        lo[a], hi[a], stride[a] = s, max(s, e), st
    if reversed_axes:
        x = ctx.b.reverse(x, sorted(reversed_axes))
    return ctx.b.slice(x, lo, hi, stride)


@register("Slice", since=1)
def slice_v1(ctx, node):
    return [_slice(ctx, node, ctx.input(node, 0), ctx.attr(node, "starts"),
                   ctx.attr(node, "ends"), ctx.attr(node, "axes", None), None)]


@register("Slice", since=10)
def slice_v10(ctx, node):
    def vec(i, what):
        v = ctx.const_input(node, i, what, None)
        return None if v is None else v.reshape(-1).tolist()
    return [_slice(ctx, node, ctx.input(node, 0), vec(1, "starts"), vec(2, "ends"),
                   vec(3, "axes"), vec(4, "steps"))]


@register("Gather", since=1)
def gather(ctx, node):
    """out = x.take(indices, axis); negative indices (opset 11) wrap around."""
    x, idx = ctx.input(node, 0), ctx.input(node, 1)
    r, q = x.shape.rank, idx.shape.rank
    axis = normalize_axis(ctx, node, ctx.attr(node, "axis", 0), r)
    n = x.shape.dims[axis]
    b = ctx.b
    zero, size = ctx.full(0, idx.shape.dtype, idx.shape.dims), \
        ctx.full(n, idx.shape.dtype, idx.shape.dims)
    idx = b.op(Opcode.SELECT, b.compare(idx, zero, "LT"), b.op(Opcode.ADD, idx, size), idx)
    # Output dims: x.dims[:axis] + indices.dims + x.dims[axis+1:]. The indices'
    # dims are the gather's batch dims, placed at axis..axis+q-1.
    offset_dims = tuple(range(axis)) + tuple(range(axis + q, r - 1 + q))
    dn = GatherDimensionNumbers(offset_dims, (axis,), (axis,), q)
    sizes = x.shape.dims[:axis] + (1,) + x.shape.dims[axis + 1:]
    return [b.gather(x, idx, dn, sizes)]


# -- constants and shapes ---------------------------------------------------------------

@register("Shape", since=1)
def shape(ctx, node):
    # Shapes are static, so Shape is a constant; start/end (opset 15) slice it
    # with Python's clamping, which is ONNX's.
    dims = ctx.input(node, 0).shape.dims
    start, end = ctx.attr(node, "start", 0), ctx.attr(node, "end", None)
    return [ctx.b.constant(np.array(dims[start:end], dtype=np.int64))]


@register("Size", since=1)
def size(ctx, node):
    return [ctx.b.constant(np.array(ctx.input(node, 0).shape.num_elements, dtype=np.int64))]


# attribute -> numpy dtype of the value it holds (opset 11 adds sparse_value, opset 12
# the scalar and list forms)
_CONSTANT_ATTRS = {
    "value": None,
    "sparse_value": None,
    "value_float": np.float32,
    "value_floats": np.float32,
    "value_int": np.int64,
    "value_ints": np.int64,
}


@register("Constant", since=1)
def constant(ctx, node):
    for key, dtype in _CONSTANT_ATTRS.items():
        if ctx.has_attr(node, key):
            return [ctx.b.constant(np.asarray(ctx.attr(node, key), dtype=dtype))]
    raise ctx.error(node, "has no value xlac supports (strings, value_string(s), are not "
                          "supported)")


@register("ConstantOfShape", since=9)
def constant_of_shape(ctx, node):
    dims = [int(d) for d in ctx.const_input(node, 0, "shape").reshape(-1)]
    value = ctx.attr(node, "value", np.zeros(1, np.float32))
    if value.size != 1:
        raise ctx.error(node, f"value must hold one element, got shape {value.shape}")
    return [ctx.full(value.reshape(()), dtypes.from_numpy(value.dtype), dims)]


@register("Range", since=11)
def range_(ctx, node):
    # The length depends on the values of start, limit and delta, so they must be known
    # at compile time (exporters compute them from shapes, which pinning makes
    # constant); the elements are start + i * delta, as ONNX defines them.
    start, limit, delta = (ctx.const_input(node, i, what)
                           for i, what in enumerate(("start", "limit", "delta")))
    if any(v.size != 1 for v in (start, limit, delta)):
        raise ctx.error(node, "start, limit and delta must be scalars")
    if delta.item() == 0:          # onnxruntime refuses it too
        raise ctx.error(node, "delta is 0")
    span, d = limit.item() - start.item(), delta.item()
    n = max(-(-span // d) if isinstance(span, int) else int(np.ceil(span / d)), 0)
    dt = dtypes.from_numpy(start.dtype)
    b = ctx.b
    iota = b.iota(Shape.array(dt, (n,)), 0)
    step = b.op(Opcode.MULTIPLY, iota, ctx.full(delta.item(), dt, (n,)))
    return [b.op(Opcode.ADD, step, ctx.full(start.item(), dt, (n,)))]
