"""Indexing ONNX ops: Gather, GatherElements, GatherND, Scatter, ScatterElements,
ScatterND, TensorScatter, Compress, OneHot, ReverseSequence, MaxUnpool and
ai.onnx.ml's ArrayFeatureExtractor.

Each lowers to one HLO gather or scatter (XLA semantics) whose indices are the
ONNX indices with negative values wrapped; where ONNX pairs an index with the
position of the element itself (GatherElements, ScatterElements, GatherND's
batch_dims), that pairing is a gather/scatter batching dimension, so no
coordinate tensor is built. A scatter starts from a copy of its data, which it
overwrites in place when nothing else reads it.
"""
from __future__ import annotations

from math import prod

import numpy as np

from ...hlo import GatherDimensionNumbers, Opcode, ScatterDimensionNumbers, Shape, dtypes
from .context import normalize_axis
from .registry import register

_REDUCTIONS = {"add": Opcode.ADD, "mul": Opcode.MULTIPLY, "max": Opcode.MAXIMUM,
               "min": Opcode.MINIMUM}


def wrap_negative(ctx, idx, sizes):
    """``idx`` with negative entries counted from the end: ``idx + size`` where
    ``idx < 0``. ``sizes`` is an int, or an array broadcast along the last dim of idx."""
    dt = idx.shape.dtype
    if not dt.is_signed:
        return idx
    b = ctx.b
    dims = idx.shape.dims
    if isinstance(sizes, int):
        size = ctx.full(sizes, dt, dims)
    else:
        size = b.broadcast(b.constant(np.asarray(sizes, dt.np)), dims, (len(dims) - 1,))
    negative = b.compare(idx, ctx.full(0, dt, dims), "LT")
    return b.op(Opcode.SELECT, negative, b.op(Opcode.ADD, idx, size), idx)


def take(ctx, x, idx, axis: int):
    """``np.take(x, idx, axis)`` without wrapping: the output dims are
    x.dims[:axis] + idx.dims + x.dims[axis+1:] (out-of-range indices clamp)."""
    r, q = x.shape.rank, idx.shape.rank
    offset_dims = tuple(range(axis)) + tuple(range(axis + q, r - 1 + q))
    dn = GatherDimensionNumbers(offset_dims, (axis,), (axis,), q)
    sizes = x.shape.dims[:axis] + (1,) + x.shape.dims[axis + 1:]
    return ctx.b.gather(x, idx, dn, sizes)


def take_constant(ctx, x, positions, axis: int):
    """``x`` at the compile-time ``positions`` along ``axis``; a gather of a small index
    vector that fuses into its consumer (nothing when positions are all of the axis)."""
    positions = np.asarray(positions, np.int64).reshape(-1)
    if np.array_equal(positions, np.arange(x.shape.dims[axis])):
        return x
    return take(ctx, x, ctx.b.constant(positions), axis)


def _update_computation(ctx, node, dtype):
    reduction = ctx.attr(node, "reduction", "none")
    if reduction == "none":
        return ctx.replacer(dtype)
    if reduction not in _REDUCTIONS:
        raise ctx.error(node, f"unknown reduction '{reduction}'")
    return ctx.reducer(_REDUCTIONS[reduction], dtype)


# -- gathers ------------------------------------------------------------------------------

@register("Gather", since=1)
def gather(ctx, node):
    """out = x.take(indices, axis); negative indices (opset 11) wrap around."""
    x, idx = ctx.input(node, 0), ctx.input(node, 1)
    axis = normalize_axis(ctx, node, ctx.attr(node, "axis", 0), x.shape.rank)
    return [take(ctx, x, wrap_negative(ctx, idx, x.shape.dims[axis]), axis)]


@register("GatherElements", since=11)
def gather_elements(ctx, node):
    """out[i][j] = x[idx[i][j]][j] (axis 0): the dims off the axis are batching dims."""
    x, idx = ctx.input(node, 0), ctx.input(node, 1)
    r = x.shape.rank
    axis = normalize_axis(ctx, node, ctx.attr(node, "axis", 0), r)
    if idx.shape.rank != r or any(idx.shape.dims[d] > x.shape.dims[d]
                                  for d in range(r) if d != axis):
        raise ctx.error(node, f"indices {idx.shape} do not fit data {x.shape}")
    idx = wrap_negative(ctx, idx, x.shape.dims[axis])
    # Only the indices' extent off the axis is read: a slice makes the batching dims equal.
    limits = [x.shape.dims[d] if d == axis else idx.shape.dims[d] for d in range(r)]
    if tuple(limits) != x.shape.dims:
        x = ctx.b.slice(x, [0] * r, limits)
    others = tuple(d for d in range(r) if d != axis)
    dn = GatherDimensionNumbers((), (axis,), (axis,), r, others, others)
    return [ctx.b.gather(x, idx, dn, (1,) * r)]


def _gather_nd(ctx, node, batch_dims):
    x, idx = ctx.input(node, 0), ctx.input(node, 1)
    r, q = x.shape.rank, idx.shape.rank
    b = batch_dims
    k = idx.shape.dims[-1] if q else 0
    if not (0 <= b < min(q, r)) or not 1 <= k <= r - b \
            or idx.shape.dims[:b] != x.shape.dims[:b]:
        raise ctx.error(node, f"indices {idx.shape} do not fit data {x.shape} with "
                              f"batch_dims={b}")
    idx = wrap_negative(ctx, idx, x.shape.dims[b:b + k])
    indexed = tuple(range(b, b + k))
    offset_dims = tuple(range(q - 1, q - 1 + r - b - k))
    dn = GatherDimensionNumbers(offset_dims, indexed, indexed, q - 1, tuple(range(b)),
                                tuple(range(b)))
    sizes = (1,) * (b + k) + x.shape.dims[b + k:]
    return [ctx.b.gather(x, idx, dn, sizes)]


@register("GatherND", since=11)
def gather_nd_v11(ctx, node):
    return _gather_nd(ctx, node, 0)


@register("GatherND", since=12)
def gather_nd_v12(ctx, node):
    return _gather_nd(ctx, node, ctx.attr(node, "batch_dims", 0))


@register("ArrayFeatureExtractor", since=1, domain="ai.onnx.ml")
def array_feature_extractor(ctx, node):
    """x[..., indices.ravel()]; a 1-D x gives one row (as onnxruntime)."""
    x, idx = ctx.input(node, 0), ctx.input(node, 1)
    if x.shape.rank == 1:
        x = ctx.b.reshape(x, (1,) + x.shape.dims)
    flat = ctx.b.reshape(idx, (idx.shape.num_elements,))
    return [take(ctx, x, flat, x.shape.rank - 1)]


@register("Compress", since=9)
def compress(ctx, node):
    """np.compress with a condition known at compile time: a gather of the kept positions
    (the output's size depends on the condition's values)."""
    x = ctx.input(node, 0)
    cond = ctx.const_input(node, 1, "condition: the output's size depends on its values")
    cond = cond.reshape(-1) != 0
    axis = ctx.attr(node, "axis", None)
    if axis is None:
        x = ctx.b.reshape(x, (x.shape.num_elements,))
        axis = 0
    axis = normalize_axis(ctx, node, axis, x.shape.rank)
    n = x.shape.dims[axis]
    if cond[n:].any():
        raise ctx.error(node, f"condition selects position {int(np.argmax(cond[n:])) + n} "
                              f"of an axis of size {n}")
    return [take_constant(ctx, x, np.nonzero(cond[:n])[0], axis)]


@register("ReverseSequence", since=10)
def reverse_sequence(ctx, node):
    """Row b reads time step len[b]-1-t for t < len[b] and t otherwise: a gather along
    the time axis with the batch axis as batching dim."""
    x, lens = ctx.input(node, 0), ctx.input(node, 1)
    r = x.shape.rank
    ta = normalize_axis(ctx, node, ctx.attr(node, "time_axis", 0), r)
    ba = normalize_axis(ctx, node, ctx.attr(node, "batch_axis", 1), r)
    if ta == ba or lens.shape.dims != (x.shape.dims[ba],):
        raise ctx.error(node, f"sequence_lens {lens.shape} or axes ({ta}, {ba}) do not fit "
                              f"{x.shape}")
    b = ctx.b
    # The index has the two axes in the data's order: it becomes the output's dims there.
    dims = tuple(x.shape.dims[a] for a in sorted((ta, ba)))
    t_dim, b_dim = (0, 1) if ta < ba else (1, 0)
    lens = b.convert(lens, dtypes.S64)
    t = b.iota(Shape.array(dtypes.S64, dims), t_dim)
    n = b.broadcast(lens, dims, (b_dim,))
    reversed_t = b.op(Opcode.SUBTRACT, b.op(Opcode.SUBTRACT, n, t), ctx.full(1, dtypes.S64, dims))
    idx = b.op(Opcode.SELECT, b.compare(t, n, "LT"), reversed_t, t)
    offset_dims = tuple(d for d in range(r) if d not in (ta, ba))
    dn = GatherDimensionNumbers(offset_dims, (ta,), (ta,), 2, (ba,), (b_dim,))
    sizes = tuple(1 if d in (ta, ba) else n_ for d, n_ in enumerate(x.shape.dims))
    return [b.gather(x, idx, dn, sizes)]


@register("OneHot", since=9)
def one_hot(ctx, node):
    """out = on where iota(axis) == indices (negative ones wrapped), else off. Compared in
    the indices' own type, as the reference does (a fractional index matches nothing)."""
    idx, values = ctx.input(node, 0), ctx.input(node, 2)
    depth = ctx.const_input(node, 1, "depth").reshape(-1)
    if depth.size != 1 or depth[0] < 1:
        raise ctx.error(node, f"depth must be one positive value, got {depth.tolist()}")
    depth = int(depth[0])
    if values.shape.num_elements != 2:
        raise ctx.error(node, f"values must hold [off, on], got {values.shape}")
    r = idx.shape.rank
    axis = ctx.attr(node, "axis", -1)
    if not -r - 1 <= axis <= r:
        raise ctx.error(node, f"axis {axis} is out of range for rank {r + 1}")
    axis = axis % (r + 1)
    b = ctx.b
    dims = idx.shape.dims[:axis] + (depth,) + idx.shape.dims[axis:]
    it = idx.shape.dtype
    idx = wrap_negative(ctx, idx, depth)
    spread = b.broadcast(idx, dims, tuple(d for d in range(r + 1) if d != axis))
    hot = b.compare(spread, b.iota(Shape.array(it, dims), axis), "EQ")
    values = b.reshape(values, (2,))

    def value(k):
        return b.broadcast(b.reshape(b.slice(values, [k], [k + 1]), ()), dims, ())
    return [b.op(Opcode.SELECT, hot, value(1), value(0))]


# -- scatters -----------------------------------------------------------------------------

def _scatter_elements(ctx, node, since_reduction: bool):
    x, idx, upd = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    r = x.shape.rank
    axis = normalize_axis(ctx, node, ctx.attr(node, "axis", 0), r)
    if idx.shape != upd.shape.with_dtype(idx.shape.dtype) or idx.shape.rank != r or any(
            idx.shape.dims[d] > x.shape.dims[d] for d in range(r) if d != axis):
        raise ctx.error(node, f"indices {idx.shape} and updates {upd.shape} do not fit data "
                              f"{x.shape}")
    comp = _update_computation(ctx, node, x.shape.dtype) if since_reduction \
        else ctx.replacer(x.shape.dtype)
    b = ctx.b
    idx = wrap_negative(ctx, idx, x.shape.dims[axis])
    others = tuple(d for d in range(r) if d != axis)
    if all(idx.shape.dims[d] == x.shape.dims[d] for d in others):
        # The update's own position off the axis: batching dims.
        dn = ScatterDimensionNumbers((), (axis,), (axis,), r, others, others)
    else:
        # Indices smaller than the data off the axis: full coordinates, the update's own
        # position (an iota) beside the index.
        s64 = idx.shape.with_dtype(dtypes.S64)
        column = idx.shape.dims + (1,)
        coords = [b.reshape(b.convert(idx, dtypes.S64) if d == axis else b.iota(s64, d), column)
                  for d in range(r)]
        idx = b.concatenate(coords, r)
        dn = ScatterDimensionNumbers((), tuple(range(r)), tuple(range(r)), r)
    return [b.scatter(x, idx, upd, dn, comp)]


@register("Scatter", since=9)
def scatter(ctx, node):
    return _scatter_elements(ctx, node, False)


@register("ScatterElements", since=11)
def scatter_elements_v11(ctx, node):
    return _scatter_elements(ctx, node, False)


@register("ScatterElements", since=16)
def scatter_elements_v16(ctx, node):
    return _scatter_elements(ctx, node, True)


def _scatter_nd(ctx, node, since_reduction: bool):
    """data[indices[i]] = updates[i] where indices[i] addresses the first k dims of data
    (a slice of the rest): k inserted window dims, the trailing dims a window."""
    x, idx, upd = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    r, q = x.shape.rank, idx.shape.rank
    k = idx.shape.dims[-1] if q else 0
    if not 1 <= k <= r or upd.shape.dims != idx.shape.dims[:-1] + x.shape.dims[k:]:
        raise ctx.error(node, f"indices {idx.shape} and updates {upd.shape} do not fit data "
                              f"{x.shape}")
    comp = _update_computation(ctx, node, x.shape.dtype) if since_reduction \
        else ctx.replacer(x.shape.dtype)
    idx = wrap_negative(ctx, idx, x.shape.dims[:k])
    dn = ScatterDimensionNumbers(tuple(range(q - 1, q - 1 + r - k)), tuple(range(k)),
                                 tuple(range(k)), q - 1)
    return [ctx.b.scatter(x, idx, upd, dn, comp)]


@register("ScatterND", since=11)
def scatter_nd_v11(ctx, node):
    return _scatter_nd(ctx, node, False)


@register("ScatterND", since=16)
def scatter_nd_v16(ctx, node):
    return _scatter_nd(ctx, node, True)


@register("TensorScatter", since=24)
def tensor_scatter(ctx, node):
    """A KV-cache write: update[b, ..., s, ...] goes to cache position write_indices[b] + s
    along ``axis`` (modulo its size in circular mode); dim 0 is the batch."""
    cache, upd, where = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    r = cache.shape.rank
    axis = normalize_axis(ctx, node, ctx.attr(node, "axis", -2), r)
    mode = ctx.attr(node, "mode", "linear")
    if mode not in ("linear", "circular"):
        raise ctx.error(node, f"unknown mode '{mode}'")
    n, s = cache.shape.dims[axis], upd.shape.dims[axis] if upd.shape.rank == r else -1
    if axis == 0 or s < 0 or s > n or any(upd.shape.dims[d] != cache.shape.dims[d]
                                           for d in range(r) if d != axis):
        raise ctx.error(node, f"update {upd.shape} does not fit cache {cache.shape} along "
                              f"axis {axis}")
    b = ctx.b
    batch = cache.shape.dims[0]
    dims = (batch, s)
    pos = b.iota(Shape.array(dtypes.S64, dims), 1)
    if where is not None:
        pos = b.op(Opcode.ADD, pos, b.broadcast(b.convert(where, dtypes.S64), dims, (0,)))
    if mode == "circular":
        # A floor modulo: non-negative for negative write indices too.
        size = ctx.full(n, dtypes.S64, dims)
        rem = b.op(Opcode.REMAINDER, pos, size)
        pos = b.op(Opcode.REMAINDER, b.op(Opcode.ADD, rem, size), size)
    window = tuple(d for d in range(r) if d not in (0, axis))
    dn = ScatterDimensionNumbers(window, (axis,), (axis,), 2, (0,), (0,))
    return [b.scatter(cache, pos, upd, dn, ctx.replacer(cache.shape.dtype))]


@register("MaxUnpool", since=9)
def max_unpool(ctx, node):
    """Each x goes to its flat index (MaxPool's, over the whole tensor) of a zero tensor of
    the unpooled shape; ``output_shape`` then pads (or crops) that at the end of each dim,
    as the reference does."""
    x, idx = ctx.input(node, 0), ctx.input(node, 1)
    kernel = ctx.attr(node, "kernel_shape")
    nsp = len(kernel)
    strides = ctx.attr(node, "strides", (1,) * nsp)
    pads = ctx.attr(node, "pads", (0,) * (2 * nsp))
    if x.shape.rank != nsp + 2 or idx.shape.dims != x.shape.dims or len(strides) != nsp \
            or len(pads) != 2 * nsp:
        raise ctx.error(node, f"x {x.shape}, indices {idx.shape} and the attributes disagree")
    dims = x.shape.dims[:2] + tuple(
        (n - 1) * s - (pads[i] + pads[nsp + i]) + k
        for i, (n, s, k) in enumerate(zip(x.shape.dims[2:], strides, kernel)))
    b = ctx.b
    m = x.shape.num_elements
    flat = b.scatter(ctx.full(0, x.shape.dtype, (prod(dims),)), b.reshape(idx, (m, 1)),
                     b.reshape(x, (m,)), ScatterDimensionNumbers((), (0,), (0,), 1),
                     ctx.replacer(x.shape.dtype))
    y = b.reshape(flat, dims)
    out = ctx.const_input(node, 2, "output_shape", None)
    if out is None:
        return [y]
    out = [int(d) for d in out.reshape(-1)]
    if len(out) != len(dims) or out[:2] != list(dims[:2]):
        raise ctx.error(node, f"output_shape {out} does not fit {x.shape}")
    high = [o - d for o, d in zip(out, dims)]
    return [b.pad(y, ctx.scalar(0, x.shape.dtype), [0] * len(dims), high)]
