"""Tensor-manipulation ONNX ops: shapes, data movement, splits, pads and crops, block
rearrangements, constants and generated tensors (Trilu, EyeLike, Range).

Shape-like operands (Reshape's shape, Slice's starts, Unsqueeze's axes...) must
be known at compile time (``ctx.const_input``); the data itself always moves
through HLO instructions.
"""
from __future__ import annotations

from math import prod

import numpy as np

from ...hlo import Opcode, Shape, dtypes
from .context import normalize_axis
from .indexing import take_constant
from .registry import register
from .types import hlo_dtype


def _axes(ctx, node, axes, rank):
    out = [normalize_axis(ctx, node, int(a), rank) for a in axes]
    if len(set(out)) != len(out):
        raise ctx.error(node, f"repeated axes {list(axes)}")
    return out


@register("Identity", since=1)
def identity(ctx, node):
    # A sequence (opset 14) or an optional (opset 16) passes through as a tensor does.
    return [ctx.any_input(node, 0)]


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
    if ctx.value_of(ctx.input(node, 1)) is None:
        window = _run_time_window(ctx, node)
        if window is not None:
            return [window]
    return [_slice(ctx, node, ctx.input(node, 0), vec(1, "starts"), vec(2, "ends"),
                   vec(3, "axes"), vec(4, "steps"))]


def _run_time_window(ctx, node):
    """A slice whose starts are computed at run time (a loop's step) but whose ends are
    the starts plus constants, in steps of 1: a window of static size at a run-time
    position, a dynamic-slice. Negative starts count from the end as in ONNX; a window
    running past the end is moved back inside (XLA's clamping), since the size must stay
    static. None where the pattern does not hold."""
    x, starts, ends = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    axes = ctx.const_input(node, 3, "axes", None)
    steps = ctx.const_input(node, 4, "steps", None)
    if steps is not None and any(int(v) != 1 for v in steps.reshape(-1)):
        return None
    sizes = _extent(ctx, starts, ends)
    r = x.shape.rank
    if sizes is None:
        return None
    axes = list(range(len(sizes))) if axes is None else \
        _axes(ctx, node, axes.reshape(-1).tolist(), r)
    if len(axes) != len(sizes) or any(not 0 <= n <= x.shape.dims[a]
                                      for a, n in zip(axes, sizes)):
        return None
    b = ctx.b
    flat = b.convert(b.reshape(starts, (len(sizes),)), dtypes.S64)
    index = [b.constant(np.int64(0))] * r
    window = list(x.shape.dims)
    for k, (a, n) in enumerate(zip(axes, sizes)):
        start = b.reshape(b.slice(flat, (k,), (k + 1,)), ())
        dim = b.constant(np.int64(x.shape.dims[a]))
        negative = b.compare(start, b.constant(np.int64(0)), "LT")
        index[a] = b.op(Opcode.SELECT, negative, b.op(Opcode.ADD, start, dim), start)
        window[a] = n
    return b.op(Opcode.DYNAMIC_SLICE, x, *index, dynamic_slice_sizes=tuple(window))


def _extent(ctx, starts, ends):
    """ends - starts when that is known at compile time although both are not: ends is
    starts plus a constant, through reshapes and conversions. None otherwise."""
    def strip(v):
        while v.opcode in (Opcode.RESHAPE, Opcode.BITCAST, Opcode.CONVERT):
            v = v.operands[0]
        return v
    base, end = strip(starts), strip(ends)
    if end.opcode is not Opcode.ADD:
        return None
    for a, c in (end.operands, end.operands[::-1]):
        value = ctx.value_of(c)
        if strip(a) is base and value is not None:
            sizes = np.broadcast_to(value, starts.shape.dims).reshape(-1)
            return [int(v) for v in sizes]
    return None


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


# -- splits, pads and crops ---------------------------------------------------------------

def _split(ctx, node, x, axis, sizes, num_outputs=None):
    """Slices of ``x`` along ``axis``: ``sizes`` given, else ``num_outputs`` (or one per
    output) parts of ceil(n / parts) elements, the last one smaller (opset 18; before it
    the parts must be equal)."""
    axis = normalize_axis(ctx, node, axis, x.shape.rank)
    n = x.shape.dims[axis]
    if sizes is None:
        parts = num_outputs or len(node.output)
        chunk = -(-n // parts) if parts else 0
        if num_outputs is None and chunk * parts != n:
            raise ctx.error(node, f"cannot split {n} into {parts} equal parts")
        sizes = [min(chunk, max(n - chunk * k, 0)) for k in range(parts)]
    sizes = [int(s) for s in sizes]
    if len(sizes) != len(node.output) or any(s < 0 for s in sizes) or sum(sizes) != n:
        raise ctx.error(node, f"split {sizes} does not cut {n} into {len(node.output)} parts")
    outs, start = [], 0
    for s in sizes:
        lo, hi = [0] * x.shape.rank, list(x.shape.dims)
        lo[axis], hi[axis] = start, start + s
        outs.append(ctx.b.slice(x, lo, hi))
        start += s
    return outs


@register("Split", since=1)
def split_v1(ctx, node):
    sizes = ctx.attr(node, "split", None)
    given = ctx.const_input(node, 1, "split", None)
    if given is not None:
        sizes = given.reshape(-1).tolist()
    return _split(ctx, node, ctx.input(node, 0), ctx.attr(node, "axis", 0), sizes)


@register("Split", since=2)
def split_v2(ctx, node):
    return _split(ctx, node, ctx.input(node, 0), ctx.attr(node, "axis", 0),
                  ctx.attr(node, "split", None))


@register("Split", since=13)
def split_v13(ctx, node):
    sizes = ctx.const_input(node, 1, "split", None)
    return _split(ctx, node, ctx.input(node, 0), ctx.attr(node, "axis", 0),
                  None if sizes is None else sizes.reshape(-1).tolist())


@register("Split", since=18)
def split_v18(ctx, node):
    sizes = ctx.const_input(node, 1, "split", None)
    num_outputs = ctx.attr(node, "num_outputs", None)
    if (sizes is None) == (num_outputs is None):
        raise ctx.error(node, "give exactly one of the 'split' input and 'num_outputs'")
    if num_outputs is not None and num_outputs != len(node.output):
        raise ctx.error(node, f"num_outputs={num_outputs} but the node has "
                              f"{len(node.output)} outputs")
    return _split(ctx, node, ctx.input(node, 0), ctx.attr(node, "axis", 0),
                  None if sizes is None else sizes.reshape(-1).tolist(), num_outputs)


# numpy.pad's name of each ONNX mode but 'constant'
_INDEX_PAD_MODES = {"reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def _pad(ctx, node, x, pads, mode, value, axes=None):
    """ONNX Pad: ``pads`` holds the begin pads of ``axes`` then their end pads; negative
    pads crop. 'constant' is an HLO pad; 'reflect', 'edge' and 'wrap' read each padded
    axis through a small constant index vector (numpy.pad of an iota), gathers that fuse
    into one loop."""
    r = x.shape.rank
    axes = list(range(r)) if axes is None else _axes(ctx, node, axes, r)
    pads = [int(p) for p in pads]
    if len(pads) != 2 * len(axes):
        raise ctx.error(node, f"pads {pads} do not fit {len(axes)} axes")
    low, high = [0] * r, [0] * r
    for k, a in enumerate(axes):
        low[a], high[a] = pads[k], pads[len(axes) + k]
    if any(n + lo + hi < 0 for n, lo, hi in zip(x.shape.dims, low, high)):
        raise ctx.error(node, f"pads {pads} crop more than {x.shape}")
    if mode == "constant":
        return ctx.b.pad(x, value, low, high)
    if mode not in _INDEX_PAD_MODES:
        raise ctx.error(node, f"unknown mode '{mode}'")
    for a, (n, lo, hi) in enumerate(zip(x.shape.dims, low, high)):
        if lo == hi == 0:
            continue
        if n == 0:
            raise ctx.error(node, f"cannot {mode}-pad an empty axis {a}")
        index = np.pad(np.arange(n), (max(lo, 0), max(hi, 0)), _INDEX_PAD_MODES[mode])
        x = take_constant(ctx, x, index[max(-lo, 0):len(index) - max(-hi, 0)], a)
    return x


@register("Pad", since=1)
def pad_v1(ctx, node):
    x = ctx.input(node, 0)
    return [_pad(ctx, node, x, ctx.attr(node, "paddings"), ctx.attr(node, "mode", "constant"),
                 ctx.scalar(ctx.attr(node, "value", 0.0), x.shape.dtype))]


@register("Pad", since=2)
def pad_v2(ctx, node):
    x = ctx.input(node, 0)
    return [_pad(ctx, node, x, ctx.attr(node, "pads"), ctx.attr(node, "mode", "constant"),
                 ctx.scalar(ctx.attr(node, "value", 0.0), x.shape.dtype))]


@register("Pad", since=11)
def pad_v11(ctx, node):
    x = ctx.input(node, 0)
    pads = ctx.const_input(node, 1, "pads").reshape(-1)
    value = ctx.input(node, 2)
    value = ctx.scalar(0, x.shape.dtype) if value is None else ctx.b.reshape(value, ())
    axes = ctx.const_input(node, 3, "axes", None)
    return [_pad(ctx, node, x, pads, ctx.attr(node, "mode", "constant"), value,
                 None if axes is None else axes.reshape(-1).tolist())]


@register("CenterCropPad", since=18)
def center_crop_pad(ctx, node):
    """Crop or zero-pad ``axes`` to ``shape`` around the center (the odd element at the
    end): one HLO pad whose negative amounts crop."""
    x = ctx.input(node, 0)
    shape = [int(s) for s in ctx.const_input(node, 1, "shape").reshape(-1)]
    r = x.shape.rank
    axes = _axes(ctx, node, ctx.attr(node, "axes", tuple(range(r))), r)
    if len(shape) != len(axes) or any(s < 0 for s in shape):
        raise ctx.error(node, f"shape {shape} does not fit axes {axes}")
    low, high = [0] * r, [0] * r
    for a, s in zip(axes, shape):
        d = s - x.shape.dims[a]
        low[a] = d // 2 if d >= 0 else -(-d // 2)
        high[a] = d - low[a]
    return [ctx.b.pad(x, ctx.scalar(0, x.shape.dtype), low, high)]


# -- rearrangements -----------------------------------------------------------------------

def _blocksize(ctx, node, x):
    if x.shape.rank != 4:
        raise ctx.error(node, f"needs a 4-D input, got {x.shape}")
    bs = ctx.attr(node, "blocksize")
    if bs < 1:
        raise ctx.error(node, f"blocksize must be positive, got {bs}")
    return bs


@register("DepthToSpace", since=1)
def depth_to_space(ctx, node):
    """DCR: channels are (by, bx, c); CRD: (c, by, bx). A reshape, a transpose, a reshape."""
    x = ctx.input(node, 0)
    bs = _blocksize(ctx, node, x)
    mode = ctx.attr(node, "mode", "DCR")
    n, c, h, w = x.shape.dims
    if c % (bs * bs):
        raise ctx.error(node, f"{c} channels do not divide into {bs}x{bs} blocks")
    c2 = c // (bs * bs)
    if mode == "DCR":
        y = ctx.b.transpose(ctx.b.reshape(x, (n, bs, bs, c2, h, w)), (0, 3, 4, 1, 5, 2))
    elif mode == "CRD":
        y = ctx.b.transpose(ctx.b.reshape(x, (n, c2, bs, bs, h, w)), (0, 1, 4, 2, 5, 3))
    else:
        raise ctx.error(node, f"unknown mode '{mode}'")
    return [ctx.b.reshape(y, (n, c2, h * bs, w * bs))]


@register("SpaceToDepth", since=1)
def space_to_depth(ctx, node):
    """The inverse of DepthToSpace in the same mode (DCR before opset 28)."""
    x = ctx.input(node, 0)
    bs = _blocksize(ctx, node, x)
    mode = ctx.attr(node, "mode", "DCR")
    n, c, h, w = x.shape.dims
    if h % bs or w % bs:
        raise ctx.error(node, f"{h}x{w} does not divide into {bs}x{bs} blocks")
    y = ctx.b.reshape(x, (n, c, h // bs, bs, w // bs, bs))
    if mode == "DCR":
        y = ctx.b.transpose(y, (0, 3, 5, 1, 2, 4))
    elif mode == "CRD":
        y = ctx.b.transpose(y, (0, 1, 3, 5, 2, 4))
    else:
        raise ctx.error(node, f"unknown mode '{mode}'")
    return [ctx.b.reshape(y, (n, c * bs * bs, h // bs, w // bs))]


# -- generated tensors --------------------------------------------------------------------

def _diagonal_offset(ctx, dims):
    """column - row over the last two of ``dims`` (s64), broadcast to all of them."""
    b = ctx.b
    plane = Shape.array(dtypes.S64, dims[-2:])
    offset = b.op(Opcode.SUBTRACT, b.iota(plane, 1), b.iota(plane, 0))
    return b.broadcast(offset, dims, (len(dims) - 2, len(dims) - 1))


@register("Trilu", since=14)
def trilu(ctx, node):
    """Keep the elements with column - row >= k (upper) or <= k (lower), zero the rest."""
    x = ctx.input(node, 0)
    if x.shape.rank < 2:
        raise ctx.error(node, f"needs rank >= 2, got {x.shape}")
    k = ctx.const_input(node, 1, "k", np.zeros(1, np.int64)).reshape(-1)
    if k.size != 1:
        raise ctx.error(node, f"k must be one value, got {k.tolist()}")
    dims = x.shape.dims
    keep = ctx.b.compare(_diagonal_offset(ctx, dims), ctx.full(int(k[0]), dtypes.S64, dims),
                         "GE" if ctx.attr(node, "upper", 1) else "LE")
    return [ctx.b.op(Opcode.SELECT, keep, x, ctx.full(0, x.shape.dtype, dims))]


@register("EyeLike", since=9)
def eye_like(ctx, node):
    """Ones where column - row == k, in ``dtype`` (default: the input's)."""
    x = ctx.input(node, 0)
    if x.shape.rank != 2:
        raise ctx.error(node, f"needs a 2-D input, got {x.shape}")
    dt = ctx.attr(node, "dtype", None)
    dt = x.shape.dtype if dt is None else hlo_dtype(dt, "the dtype attribute")
    dims = x.shape.dims
    on = ctx.b.compare(_diagonal_offset(ctx, dims),
                       ctx.full(ctx.attr(node, "k", 0), dtypes.S64, dims), "EQ")
    return [ctx.b.op(Opcode.SELECT, on, ctx.full(1, dt, dims), ctx.full(0, dt, dims))]


def _range(ctx, node, compute_dtype=None):
    """start + i * delta for i < max(ceil((limit - start) / delta), 0); the count needs the
    three values at compile time. Narrow floats are computed in ``compute_dtype``."""
    start, limit, delta = (ctx.const_input(node, i, what).reshape(-1)
                           for i, what in enumerate(("start", "limit", "delta")))
    if not start.size == limit.size == delta.size == 1 or delta[0] == 0:
        raise ctx.error(node, "start, limit and delta must be scalars, delta not 0")
    dt = ctx.input(node, 0).shape.dtype
    span, d = limit.item() - start.item(), delta.item()
    # integers count exactly (int64 limits lose digits as floats)
    n = max(-(-span // d) if isinstance(span, int) else int(np.ceil(span / d)), 0)
    wide = compute_dtype or dt
    b = ctx.b
    i = b.iota(Shape.array(wide, (n,)), 0)
    y = b.op(Opcode.ADD, b.op(Opcode.MULTIPLY, i, ctx.full(delta[0], wide, (n,))),
             ctx.full(start[0], wide, (n,)))
    return [b.convert(y, dt)]


@register("Range", since=11)
def range_v11(ctx, node):
    narrow = ctx.input(node, 0).shape.dtype in (dtypes.F16, dtypes.BF16)
    return _range(ctx, node, dtypes.F32 if narrow else None)


@register("Range", since=27)
def range_v27(ctx, node):
    from onnx import TensorProto
    stash = ctx.attr(node, "stash_type", TensorProto.FLOAT)
    wide = {TensorProto.FLOAT: dtypes.F32, TensorProto.DOUBLE: dtypes.F64}.get(stash)
    if wide is None:
        raise ctx.error(node, f"stash_type {stash} is neither FLOAT nor DOUBLE")
    narrow = ctx.input(node, 0).shape.dtype in (dtypes.F16, dtypes.BF16)
    return _range(ctx, node, wide if narrow else None)
