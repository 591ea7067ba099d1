"""Image ONNX ops: Resize and Upsample; GridSample, AffineGrid, RoiAlign and MaxRoiPool;
Col2Im.

Resize with static shapes is separable and its sampling positions depend only on
shapes and attributes: per resized axis, a small table of source indices and
weights (``axis_taps``, computed as the ONNX reference computes them) is a
compile-time constant. The lowering reads the input through one gather per
resized axis, each with its (outputs, taps) index table; the gathers chain into
one tensor with a tap dim beside each resized axis, which is multiplied by the
weights and summed over the tap dims. Fusion makes that one loop: each output
element reads its taps straight from the input, so nothing of the output's
size but the output itself is ever stored (the arena stays at the ONNX-order
bound on a model that upsamples). Nearest neighbour has one tap per axis: a
chain of gathers and no sum.

GridSample and RoiAlign sample at positions computed at run time: the positions
and weights are element-wise arithmetic on the grid or the rois, and the
samples one gather with a batching dim (the image of each sample's batch
element), again with tap dims summed in one loop. MaxRoiPool's bins are masks over the
rows and columns of each roi's image.
"""
from __future__ import annotations

import math

import numpy as np

from ...hlo import GatherDimensionNumbers, Opcode, Shape, dtypes
from .context import lowest
from .indexing import take
from .registry import register

_COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                     "align_corners", "asymmetric", "tf_half_pixel_for_nn",
                     "tf_crop_and_resize")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")


# -- the per-axis tables -------------------------------------------------------------------

def _source_coordinates(mode, out_int, scale, n, roi):
    """Where output positions 0..out_int-1 sample the input (of n elements), and which of
    them lie outside it (tf_crop_and_resize only, else None)."""
    y = np.arange(out_int, dtype=np.float64)
    out = scale * n
    outside = None
    if mode == "align_corners":
        x = np.zeros(out_int) if out == 1 else y * (n - 1) / (out - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_half_pixel_for_nn":
        x = (y + 0.5) / scale
    elif mode == "tf_crop_and_resize":
        lo, hi = roi
        x = (np.full(out_int, (hi - lo) * (n - 1) / 2) if out == 1
             else y * (hi - lo) * (n - 1) / (out - 1)) + lo * (n - 1)
        outside = (x < 0) | (x > n - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(out_int, -0.5) if out == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    else:   # half_pixel_symmetric: the center of the input maps to the output's
        x = n / 2 * (1 - out_int / out) + (y + 0.5) / scale - 0.5
    return x, outside


def _nearest_coeffs(mode, scale):
    def coeffs(ratio):
        if ratio == 1:
            return np.array([0.0, 1.0])
        if mode == "simple":      # onnxruntime's opset-10 rule: down rounds up, up down
            take_right = scale < 1
        elif mode == "round_prefer_floor":
            take_right = ratio > 0.5
        elif mode == "round_prefer_ceil":
            take_right = ratio >= 0.5
        else:
            take_right = mode == "ceil"
        return np.array([0.0, 1.0]) if take_right else np.array([1.0, 0.0])
    return coeffs


def _linear_coeffs(scale, antialias):
    if not antialias or scale >= 1:
        return lambda ratio: np.array([1 - ratio, ratio])
    start = int(np.floor(-1 / scale) + 1)     # the triangle stretched by 1 / scale

    def coeffs(ratio):
        c = np.clip(1 - np.abs((np.arange(start, 2 - start) - ratio) * scale), 0, 1)
        return c / c.sum()
    return coeffs


def _cubic_coeffs(scale, antialias, a):
    def kernel(x):
        x = np.abs(x)
        return np.where(x <= 1, (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1,
                        np.where(x < 2, a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a, 0.0))
    s = min(scale, 1.0) if antialias else 1.0
    start = int(np.floor(-2 / s) + 1)

    def coeffs(ratio):
        c = kernel((np.arange(start, 2 - start) - ratio) * s)
        return c / c.sum() if antialias else c
    return coeffs


def axis_taps(n, out_int, scale, coeffs, coordinate_mode, roi=None, exclude_outside=False):
    """Source indices (out_int, taps), clamped into [0, n), their weights (out_int, taps)
    and the positions outside the input (or None), as the ONNX reference samples one
    axis: the taps nearest the source coordinate, ties to the left, edge-padded."""
    x, outside = _source_coordinates(coordinate_mode, out_int, scale, n, roi)
    base = np.floor(x)
    ratio = np.where(x == base, 1.0, x - base)      # (0, 1]: the left pixel is preferred
    w = np.stack([coeffs(float(r)) for r in ratio]) if out_int else np.zeros((0, 2))
    taps = w.shape[1]
    pad = -(-taps // 2)
    p = np.floor(x + pad)
    frac = x + pad - p
    if taps % 2 == 0:
        first = p + np.where(frac == 0, -(taps // 2), 1 - taps // 2)
    else:
        first = p + np.where(frac <= 0.5, -((taps - 1) // 2), 1 - (taps - 1) // 2)
    idx = first.astype(np.int64)[:, None] + np.arange(taps) - pad
    if exclude_outside:
        w = np.where((idx < 0) | (idx >= n), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, n - 1), w, outside


# -- the lowering -------------------------------------------------------------------------

def _nearest(ctx, x, idx, axis: int):
    """``x`` at positions ``idx`` along ``axis``: an integer upsampling (each position
    k times) is a broadcast, a strided run a slice, anything else a gather."""
    b = ctx.b
    n = x.shape.dims[axis]
    dims = list(x.shape.dims)
    k = len(idx) // n
    if k > 1 and np.array_equal(idx, np.repeat(np.arange(n), k)):
        split = dims[:axis + 1] + [1] + dims[axis + 1:]
        wide = dims[:axis + 1] + [k] + dims[axis + 1:]
        y = b.broadcast(b.reshape(x, split), wide, range(len(split)))
        return b.reshape(y, dims[:axis] + [n * k] + dims[axis + 1:])
    step = int(idx[1] - idx[0]) if len(idx) > 1 else 1
    if step > 0 and np.array_equal(idx, idx[0] + step * np.arange(len(idx))):
        lo, hi = [0] * len(dims), list(dims)
        lo[axis], hi[axis] = int(idx[0]), int(idx[-1]) + 1
        strides = [1] * len(dims)
        strides[axis] = step
        return b.slice(x, lo, hi, strides)
    return take(ctx, x, b.constant(idx), axis)


def _taps(idx, w, n: int):
    """The tap table without taps that never weigh anything; a table whose every row is
    one tap of weight 1 (nearest neighbour) as that tap alone, with no weights."""
    if w.shape[1] == 2:
        # Linear taps that the edge clamps onto one index, weighed as onnxruntime weighs
        # them (it clamps the coordinate into [0, n - 1]): at 0, that index alone; at
        # n - 1, the index twice at 0.5 each. The same value, in onnxruntime's roundings.
        w = w.copy()
        same = idx[:, 0] == idx[:, 1]
        low = same & (idx[:, 0] == 0) & (n > 1)
        w[low] = (1, 0)
        w[same & ~low] = (0.5, 0.5)
    if np.all((w == 0) | (w == 1)) and np.all(w.sum(axis=1) == 1):
        return idx[np.arange(len(idx)), np.argmax(w, axis=1)], None
    used = np.any(w != 0, axis=0)
    return idx[:, used], w[:, used]


def resample(ctx, node, x, plan, extrapolation=0.0):
    """``x`` resampled along the axes of ``plan`` ({axis: (idx, w, outside)}): gathers with
    a tap dim beside each axis, weights, one sum over the tap dims; positions outside the
    input (tf_crop_and_resize) take ``extrapolation``."""
    b = ctx.b
    dt = x.shape.dtype
    wide = dt if dt in (dtypes.F32, dtypes.F64) else dtypes.F32
    y = b.convert(x, wide)
    weighted = []      # (position of the axis in y, its weights): its taps follow it
    for a in sorted(plan):
        at = a + len(weighted)
        idx, w = _taps(*plan[a][:2], x.shape.dims[a])
        if w is None or w.shape[1] == 1:
            y = _nearest(ctx, y, idx.reshape(-1), at)
        else:
            y = take(ctx, y, b.constant(idx), at)
            weighted.append((at, w))
    if weighted:
        # onnxruntime's bilinear order: one weight per tap, the product of the axes'
        # weights (dx * dy), times the sample; the taps summed row-major
        weight = None
        for at, w in weighted:
            wb = b.broadcast(b.constant(w.astype(wide.np)), y.shape.dims, (at, at + 1))
            weight = wb if weight is None else b.op(Opcode.MULTIPLY, weight, wb)
        y = b.op(Opcode.MULTIPLY, weight, y)
        y = ctx.reduce(y, [at + 1 for at, _ in weighted], Opcode.ADD, 0)
    outside = [(a, o) for a, (_, _, o) in plan.items() if o is not None and o.any()]
    if outside:
        dims = y.shape.dims
        mask = None
        for a, o in outside:
            m = b.broadcast(b.constant(o), dims, (a,))
            mask = m if mask is None else b.op(Opcode.OR, mask, m)
        y = b.op(Opcode.SELECT, mask, ctx.full(extrapolation, wide, dims), y)
    if dt.is_integer:        # the reference rounds half to even and saturates
        info = np.iinfo(dt.np)
        y = b.op(Opcode.CLAMP, ctx.scalar(info.min, wide),
                 b.op(Opcode.ROUND_NEAREST_EVEN, y), ctx.scalar(info.max, wide))
    return b.convert(y, dt)


def _resize(ctx, node, x, scales, sizes, *, mode, coordinate_mode, nearest_mode="simple",
            roi=None, axes=None, policy="stretch", cubic_a=-0.75, exclude_outside=False,
            antialias=False, extrapolation=0.0):
    r = x.shape.rank
    dims = x.shape.dims
    if mode not in ("nearest", "linear", "cubic"):
        raise ctx.error(node, f"unknown mode '{mode}'")
    if coordinate_mode not in _COORDINATE_MODES:
        raise ctx.error(node, f"unknown coordinate_transformation_mode '{coordinate_mode}'")
    if nearest_mode not in _NEAREST_MODES:
        raise ctx.error(node, f"unknown nearest_mode '{nearest_mode}'")
    if mode == "nearest" and antialias:
        raise ctx.error(node, "antialias does not apply to mode 'nearest'")
    if axes is None:
        axes = list(range(r))
    else:
        axes = [int(a) + r if a < 0 else int(a) for a in axes]
        if sorted(set(axes)) != sorted(axes) or not all(0 <= a < r for a in axes):
            raise ctx.error(node, f"bad axes {list(axes)}")
    given = scales if scales is not None else sizes
    if (scales is None) == (sizes is None) or len(given) != len(axes):
        raise ctx.error(node, f"give one of scales and sizes, one value per axis of {axes}")
    full_roi = [(0.0, 1.0)] * r
    if coordinate_mode == "tf_crop_and_resize":
        if roi is None or len(roi) != 2 * len(axes):
            raise ctx.error(node, f"tf_crop_and_resize needs a roi of {2 * len(axes)} values")
        for k, a in enumerate(axes):
            full_roi[a] = (float(roi[k]), float(roi[len(axes) + k]))
    scale, out = [1.0] * r, list(dims)
    if scales is not None:
        for a, s in zip(axes, scales):
            if s <= 0:
                raise ctx.error(node, f"scales must be positive, got {list(scales)}")
            scale[a], out[a] = float(s), int(float(s) * dims[a])
    else:
        for a, s in zip(axes, sizes):
            scale[a], out[a] = int(s) / dims[a], int(s)
        if policy != "stretch":
            if policy not in ("not_larger", "not_smaller"):
                raise ctx.error(node, f"unknown keep_aspect_ratio_policy '{policy}'")
            pick = min if policy == "not_larger" else max
            s = pick(scale[a] for a in axes)
            for a in axes:
                scale[a], out[a] = s, int(s * dims[a] + 0.5)
    if mode == "nearest":
        make = lambda s: _nearest_coeffs(nearest_mode, s)  # noqa: E731
    elif mode == "linear":
        make = lambda s: _linear_coeffs(s, antialias)  # noqa: E731
    else:
        make = lambda s: _cubic_coeffs(s, antialias, cubic_a)  # noqa: E731
    plan = {}
    for a in axes:
        if math.isclose(scale[a], 1.0) and out[a] == dims[a] and full_roi[a] == (0.0, 1.0):
            continue            # an identity along this axis
        if dims[a] == 0:
            raise ctx.error(node, f"cannot resize the empty axis {a}")
        plan[a] = axis_taps(dims[a], out[a], scale[a], make(scale[a]), coordinate_mode,
                            full_roi[a], exclude_outside)
    if not plan:
        return x
    return resample(ctx, node, x, plan, extrapolation)


def _const_floats(ctx, node, i, what):
    v = ctx.const_input(node, i, what, None)
    return None if v is None or v.size == 0 else v.reshape(-1).astype(np.float64).tolist()


@register("Resize", since=10)
def resize_v10(ctx, node):
    x = ctx.input(node, 0)
    return [_resize(ctx, node, x, _const_floats(ctx, node, 1, "scales"), None,
                    mode=ctx.attr(node, "mode", "nearest"), coordinate_mode="asymmetric")]


@register("Resize", since=11)
def resize_v11(ctx, node):
    x = ctx.input(node, 0)
    opset18 = ctx.opset(node) >= 18
    sizes = ctx.const_input(node, 3, "sizes", None)
    return [_resize(
        ctx, node, x, _const_floats(ctx, node, 2, "scales"),
        None if sizes is None or sizes.size == 0 else sizes.reshape(-1).tolist(),
        mode=ctx.attr(node, "mode", "nearest"),
        coordinate_mode=ctx.attr(node, "coordinate_transformation_mode", "half_pixel"),
        nearest_mode=ctx.attr(node, "nearest_mode", "round_prefer_floor"),
        roi=_const_floats(ctx, node, 1, "roi"),
        axes=ctx.attr(node, "axes", None) if opset18 else None,
        policy=ctx.attr(node, "keep_aspect_ratio_policy", "stretch") if opset18 else "stretch",
        cubic_a=ctx.attr(node, "cubic_coeff_a", -0.75),
        exclude_outside=bool(ctx.attr(node, "exclude_outside", 0)),
        antialias=bool(ctx.attr(node, "antialias", 0)) if opset18 else False,
        extrapolation=ctx.attr(node, "extrapolation_value", 0.0))]


def _upsample(ctx, node, scales):
    mode = ctx.attr(node, "mode", "nearest")
    if mode == "bilinear":
        mode = "linear"
    return [_resize(ctx, node, ctx.input(node, 0), scales, None, mode=mode,
                    coordinate_mode="asymmetric")]


@register("Upsample", since=7)
def upsample_v7(ctx, node):
    return _upsample(ctx, node, list(ctx.attr(node, "scales")))


@register("Upsample", since=9)
def upsample_v9(ctx, node):
    return _upsample(ctx, node, _const_floats(ctx, node, 1, "scales"))


# -- sampling at run-time positions -------------------------------------------------------

class _Math:
    """Element-wise arithmetic on instructions of one shape and float type, with Python
    numbers as scalars (the sampling ops' coordinate formulas read like the spec)."""

    def __init__(self, ctx, dims, dtype):
        self.ctx, self.b, self.dims, self.dt = ctx, ctx.b, tuple(dims), dtype

    def c(self, v):
        return v if not isinstance(v, (int, float)) else self.ctx.full(v, self.dt, self.dims)

    def op(self, opcode, *xs):
        return self.b.op(opcode, *(self.c(x) for x in xs))

    def add(self, x, y):
        return self.op(Opcode.ADD, x, y)

    def sub(self, x, y):
        return self.op(Opcode.SUBTRACT, x, y)

    def mul(self, x, y):
        return self.op(Opcode.MULTIPLY, x, y)

    def div(self, x, y):
        return self.op(Opcode.DIVIDE, x, y)

    def floor(self, x):
        return self.op(Opcode.FLOOR, x)

    def cmp(self, x, y, direction):
        return self.b.compare(self.c(x), self.c(y), direction)

    def select(self, p, x, y):
        return self.op(Opcode.SELECT, p, x, y)

    def clamp(self, lo, x, hi):
        return self.op(Opcode.CLAMP, lo, x, hi)

    def reflect(self, v, lo: float, hi: float):
        """``v`` reflected off the borders ``lo`` and ``hi`` until inside (the ONNX
        reference's GridSample rule, as floats)."""
        span = hi - lo
        if span == 0:
            return self.c(lo)
        below, above = self.cmp(v, lo, "LT"), self.cmp(v, hi, "GT")
        dx = self.select(below, self.sub(lo, v), self.select(above, self.sub(v, hi), 0.0))
        n = self.floor(self.div(dx, span))
        r = self.sub(dx, self.mul(n, span))
        odd = self.cmp(self.sub(n, self.mul(self.floor(self.mul(n, 0.5)), 2.0)), 1.0, "EQ")
        from_lo = self.select(odd, self.sub(hi, r), self.add(lo, r))
        from_hi = self.select(odd, self.add(lo, r), self.sub(hi, r))
        return self.select(below, from_lo, self.select(above, from_hi, v))


def _keys_cubic(m: _Math, d, a: float):
    """Keys' cubic convolution kernel at distance ``d`` >= 0."""
    d2 = m.mul(d, d)
    d3 = m.mul(d2, d)
    near = m.add(m.sub(m.mul(d3, a + 2), m.mul(d2, a + 3)), 1.0)
    far = m.sub(m.add(m.sub(m.mul(d3, a), m.mul(d2, 5 * a)), m.mul(d, 8 * a)), 4 * a)
    return m.select(m.cmp(d, 1.0, "LE"), near, m.select(m.cmp(d, 2.0, "LT"), far, 0.0))


def _sample(ctx, x, coords, lows, highs, taps, weight, pixel_mode, batch, wide):
    """Interpolate ``x`` (batch dim 0, feature dim 1, then spatial dims) at run-time
    positions ``coords[i]`` (one per spatial dim, over ``batch`` dims starting with x's
    batch) with ``taps`` integer offsets per dim from the floor of each position (or from
    the position itself if ``weight`` is None). ``pixel_mode``: 'zeros' reads 0 outside
    x, 'border' the nearest edge, 'reflection' reflects the index off ``lows``/``highs``.
    Returns (x.dims[:2] + batch[1:]) values in ``wide``."""
    b = ctx.b
    k = len(coords)
    nb = len(batch)
    tapped = tuple(batch) + (len(taps),)
    offsets = b.broadcast(b.constant(np.asarray(taps, wide.np)), tapped, (nb,))
    total = tuple(batch) + (len(taps),) * k
    idx, w, valid = [], [], []
    for i, v in enumerate(coords):
        m = _Math(ctx, batch, wide)
        base = v if weight is None else m.floor(v)
        spread = lambda t: b.broadcast(t, tapped, tuple(range(nb)))  # noqa: E731
        t = _Math(ctx, tapped, wide)
        pos = t.add(spread(base), offsets)
        n = x.shape.dims[2 + i]
        if weight is not None:
            w.append(weight(t, t.op(Opcode.ABS, t.sub(spread(m.sub(v, base)), offsets))))
        if pixel_mode == "zeros":
            valid.append(b.op(Opcode.AND, t.cmp(pos, 0.0, "GE"), t.cmp(pos, n - 1.0, "LE")))
        elif pixel_mode == "reflection":
            pos = t.reflect(pos, lows[i], highs[i])
        at = b.reshape(b.convert(pos, dtypes.S64), tapped + (1,))
        spread_taps = tuple(range(nb)) + (nb + i, len(total))
        idx.append(b.broadcast(at, total + (1,), spread_taps))
    spatial = tuple(range(2, 2 + k))
    dn = GatherDimensionNumbers((1,), spatial, spatial, len(total), (0,), (0,))
    g = b.gather(b.convert(x, wide), b.concatenate(idx, len(total)), dn,
                 (1, x.shape.dims[1]) + (1,) * k)
    # g: (N, C, batch[1:]..., taps...); batch dim j > 0 of the coordinates is g's j + 1.
    dims = g.shape.dims
    to_g = (0,) + tuple(range(2, nb + 1))
    if valid:
        mask = None
        for i, ok in enumerate(valid):
            ok = b.broadcast(ok, dims, to_g + (nb + 1 + i,))
            mask = ok if mask is None else b.op(Opcode.AND, mask, ok)
        g = b.op(Opcode.SELECT, mask, g, ctx.full(0, wide, dims))
    out = dims[:nb + 1]
    if weight is None:
        return b.reshape(g, out)
    for i, wi in enumerate(w):
        g = b.op(Opcode.MULTIPLY, g, b.broadcast(wi, dims, to_g + (nb + 1 + i,)))
    return ctx.reduce(g, range(nb + 1, len(dims)), Opcode.ADD, 0)


_GRID_MODES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic",
               "nearest": "nearest"}


def _grid_sample(ctx, node, default_mode):
    """Y[n, c, o...] = X[n, c] interpolated at grid[n, o...] (x, y[, z]: the last spatial
    dim first), normalized to [-1, 1], as PyTorch's grid_sample."""
    x, grid = ctx.input(node, 0), ctx.input(node, 1)
    mode = _GRID_MODES.get(ctx.attr(node, "mode", default_mode))
    padding = ctx.attr(node, "padding_mode", "zeros")
    align = bool(ctx.attr(node, "align_corners", 0))
    k = x.shape.rank - 2
    if mode is None or padding not in ("zeros", "border", "reflection"):
        raise ctx.error(node, "unknown mode or padding_mode")
    if k < 1 or grid.shape.rank != k + 2 or grid.shape.dims[0] != x.shape.dims[0] \
            or grid.shape.dims[-1] != k:
        raise ctx.error(node, f"grid {grid.shape} does not fit X {x.shape}")
    wide = x.shape.dtype if x.shape.dtype == dtypes.F64 else dtypes.F32
    b = ctx.b
    g = b.convert(grid, wide)
    batch = grid.shape.dims[:-1]
    coords, lows, highs = [], [], []
    for i in range(k):
        n = x.shape.dims[2 + i]
        m = _Math(ctx, batch, wide)
        lo = [0] * (k + 2)
        lo[-1] = k - 1 - i
        hi = list(grid.shape.dims)
        hi[-1] = k - i
        v = b.reshape(b.slice(g, lo, hi), batch)
        if align:
            v = m.mul(m.add(v, 1.0), (n - 1) / 2)
        else:
            v = m.mul(m.sub(m.mul(m.add(v, 1.0), float(n)), 1.0), 0.5)
        if mode == "nearest":
            v = m.op(Opcode.ROUND_NEAREST_EVEN, v)
        low, high = (0.0, n - 1.0) if align else (-0.5, n - 0.5)
        if padding == "border":
            outside = b.op(Opcode.OR, m.cmp(v, low, "LT"), m.cmp(v, high, "GT"))
            v = m.select(outside, m.clamp(0.0, v, n - 1.0), v)
        elif padding == "reflection":
            v = m.reflect(v, low, high)
        coords.append(v)
        lows.append(low)
        highs.append(high)
    if mode == "nearest":
        taps, weight = (0,), None
    elif mode == "linear":
        taps, weight = (0, 1), lambda t, d: t.sub(1.0, d)
    else:
        taps, weight = (-1, 0, 1, 2), lambda t, d: _keys_cubic(t, d, -0.75)
    y = _sample(ctx, x, coords, lows, highs, taps, weight, padding, batch, wide)
    return [b.convert(y, x.shape.dtype)]


@register("GridSample", since=16)
def grid_sample_v16(ctx, node):
    return _grid_sample(ctx, node, "bilinear")


@register("GridSample", since=20)
def grid_sample_v20(ctx, node):
    return _grid_sample(ctx, node, "linear")


@register("AffineGrid", since=20)
def affine_grid(ctx, node):
    """grid[n, s..., c] = theta[n, c, :k] . (x, y[, z]) + theta[n, c, k] over the normalized
    coordinates of the output's spatial positions (the last spatial dim is x)."""
    theta = ctx.input(node, 0)
    size = [int(v) for v in ctx.const_input(node, 1, "size").reshape(-1)]
    align = bool(ctx.attr(node, "align_corners", 0))
    k = len(size) - 2
    if k not in (2, 3) or theta.shape.dims != (size[0], k, k + 1):
        raise ctx.error(node, f"theta {theta.shape} does not fit size {size}")
    b = ctx.b
    dt = theta.shape.dtype
    dims = (size[0],) + tuple(size[2:])
    m = _Math(ctx, dims, dt)

    def base(n):     # the normalized coordinates of n positions
        if align:
            return np.linspace(-1.0, 1.0, n) if n > 1 else np.full(n, -1.0)
        return (2 * np.arange(n) + 1) / n - 1

    def theta_at(c, j):
        t = b.reshape(b.slice(theta, (0, c, j), (size[0], c + 1, j + 1)), (size[0],))
        return b.broadcast(t, dims, (0,))

    parts = []
    for c in range(k):
        v = theta_at(c, k)
        for j in range(k):
            axis = 1 + (k - 1 - j)          # x runs along the last spatial dim
            coord = b.broadcast(b.constant(base(dims[axis]).astype(dt.np)), dims, (axis,))
            v = m.add(v, m.mul(theta_at(c, j), coord))
        parts.append(b.reshape(v, dims + (1,)))
    return [b.concatenate(parts, len(dims))]


@register("RoiAlign", since=10)
def roi_align(ctx, node):
    """Each output bin of each roi averages (or takes the max of) a grid of bilinear
    samples of X, as the ONNX reference does; the grid count per bin is sampling_ratio,
    or, for 0, ceil(roi extent / bins), which needs the rois at compile time."""
    x, rois, batch_idx = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    mode = ctx.attr(node, "mode", "avg")
    ph, pw = ctx.attr(node, "output_height", 1), ctx.attr(node, "output_width", 1)
    ratio = ctx.attr(node, "sampling_ratio", 0)
    scale = ctx.attr(node, "spatial_scale", 1.0)
    half_pixel = ctx.attr(node, "coordinate_transformation_mode",
                          "half_pixel" if ctx.opset(node) >= 16 else "output_half_pixel")
    if mode not in ("avg", "max") or half_pixel not in ("half_pixel", "output_half_pixel"):
        raise ctx.error(node, "unknown mode or coordinate_transformation_mode")
    half_pixel = half_pixel == "half_pixel"
    nr = rois.shape.dims[0]
    if x.shape.rank != 4 or rois.shape.dims != (nr, 4) or batch_idx.shape.dims != (nr,):
        raise ctx.error(node, f"X {x.shape}, rois {rois.shape} and batch_indices "
                              f"{batch_idx.shape} do not fit")
    b = ctx.b
    wide = x.shape.dtype if x.shape.dtype == dtypes.F64 else dtypes.F32
    r = b.convert(rois, wide)
    height, width = x.shape.dims[2:]
    shift = 0.5 if half_pixel else 0.0

    def roi_column(j):       # rois[:, j] scaled, (R,)
        col = b.reshape(b.slice(r, (0, j), (nr, j + 1)), (nr,))
        m = _Math(ctx, (nr,), wide)
        return m.sub(m.mul(col, scale), shift)

    if ratio > 0:
        grid = (ratio, ratio)
        counts = None
    else:
        fixed = ctx.const_input(node, 1, "rois: with sampling_ratio=0 they size each "
                                         "roi's sample grid").astype(np.float64) * scale - shift
        extent = fixed[:, 2:] - fixed[:, :2]
        if not half_pixel:
            extent = np.maximum(extent, 1.0)
        counts = np.ceil(extent / [pw, ph]).astype(np.int64)     # per roi: (w, h)
        grid = (max(int(counts[:, 1].max(initial=1)), 1), max(int(counts[:, 0].max(initial=1)), 1))

    def axis(j, n_bins, g, size, count):
        """Sample positions along one axis: (R, bins, g) coordinates, validity and the
        two tap indices and weights as (R, bins, g, 2)."""
        start, end = roi_column(j), roi_column(j + 2)
        m1 = _Math(ctx, (nr,), wide)
        extent = m1.sub(end, start)
        if not half_pixel:
            extent = m1.op(Opcode.MAXIMUM, extent, 1.0)
        bin_size = m1.div(extent, float(n_bins))
        dims = (nr, n_bins, g)
        m = _Math(ctx, dims, wide)
        per_roi = lambda v: b.broadcast(v, dims, (0,))  # noqa: E731
        gcount = float(g) if count is None else per_roi(b.constant(count.astype(wide.np)))
        step = m.div(per_roi(bin_size), gcount)
        pos = m.add(m.add(per_roi(start), m.mul(b.iota(Shape.array(wide, dims), 1),
                                                  per_roi(bin_size))),
                    m.mul(m.add(b.iota(Shape.array(wide, dims), 2), 0.5), step))
        # A sample off the map weighs 0; one past this roi's own grid is no sample.
        ok = b.op(Opcode.AND, m.cmp(pos, -1.0, "GE"), m.cmp(pos, float(size), "LE"))
        member = None if count is None else m.cmp(b.iota(Shape.array(wide, dims), 2), gcount,
                                                  "LT")
        pos = m.op(Opcode.MAXIMUM, pos, 0.0)
        low = m.floor(pos)
        last = m.cmp(low, size - 1.0, "GE")
        low = m.select(last, size - 1.0, low)
        pos = m.select(last, low, pos)
        high = m.select(last, low, m.add(low, 1.0))
        frac = m.sub(pos, low)
        tapped = dims + (2,)

        def pair(lo_v, hi_v):
            return b.concatenate([b.reshape(lo_v, dims + (1,)), b.reshape(hi_v, dims + (1,))],
                                 3)
        weights = pair(m.sub(1.0, frac), frac)
        valid = b.broadcast(ok, tapped, (0, 1, 2))
        weights = b.op(Opcode.SELECT, valid, weights, ctx.full(0, wide, tapped))
        return b.convert(pair(low, high), dtypes.S64), weights, member

    yi, yw, ym = axis(1, ph, grid[0], height, None if counts is None else counts[:, 1])
    xi, xw, xm = axis(0, pw, grid[1], width, None if counts is None else counts[:, 0])
    # Gather X[batch[r], :, y, x] over (R, ph, gy, 2, pw, gx, 2).
    total = (nr, ph, grid[0], 2, pw, grid[1], 2)
    column = total + (1,)
    parts = [b.broadcast(b.reshape(b.convert(batch_idx, dtypes.S64), (nr, 1)), column, (0, 7)),
             b.broadcast(b.reshape(yi, yi.shape.dims + (1,)), column, (0, 1, 2, 3, 7)),
             b.broadcast(b.reshape(xi, xi.shape.dims + (1,)), column, (0, 4, 5, 6, 7))]
    dn = GatherDimensionNumbers((1,), (0, 2, 3), (0, 2, 3), len(total))
    g = b.gather(b.convert(x, wide), b.concatenate(parts, len(total)), dn,
                 (1, x.shape.dims[1], 1, 1))
    dims = g.shape.dims            # (R, C, ph, gy, 2, pw, gx, 2)
    w = b.op(Opcode.MULTIPLY, b.broadcast(yw, dims, (0, 2, 3, 4)),
             b.broadcast(xw, dims, (0, 5, 6, 7)))
    g = b.op(Opcode.MULTIPLY, g, w)
    if counts is not None:
        member = b.op(Opcode.AND, b.broadcast(ym, dims, (0, 2, 3)), b.broadcast(xm, dims, (0, 5, 6)))
        none = ctx.full(-np.inf if mode == "max" else 0, wide, dims)
        g = b.op(Opcode.SELECT, member, g, none)
    if mode == "max":
        y = ctx.reduce(g, (3, 4, 6, 7), Opcode.MAXIMUM, -np.inf)
        if counts is not None and (counts == 0).any():     # no sample at all: 0
            empty = b.broadcast(b.constant((counts == 0).any(axis=1)), y.shape.dims, (0,))
            y = b.op(Opcode.SELECT, empty, ctx.full(0, wide, y.shape.dims), y)
    else:
        y = ctx.reduce(g, (3, 4, 6, 7), Opcode.ADD, 0)
        out = y.shape.dims
        if counts is None:
            count = ctx.full(float(grid[0] * grid[1]), wide, out)
        else:
            per_roi = np.maximum(counts[:, 0] * counts[:, 1], 1).astype(wide.np)
            count = b.broadcast(b.constant(per_roi), out, (0,))
        y = b.op(Opcode.DIVIDE, y, count)
    return [b.convert(y, x.shape.dtype)]


@register("MaxRoiPool", since=1)
def max_roi_pool(ctx, node):
    """Each bin of each roi takes the max of X over the positions its quantized bounds
    cover, as onnxruntime's roi_pool.cc does: the roi's corners rounded (half away from
    zero) after scaling, its extent at least 1, bin k covering [floor(k * size / bins),
    ceil((k + 1) * size / bins)) past the roi's start, clipped to the map; an empty bin is
    0. The rois are run-time data: the bins are masks over the rows and the columns of
    the roi's image (a gather), and the max, separable, is taken over columns then rows."""
    x, rois = ctx.input(node, 0), ctx.input(node, 1)
    ph, pw = ctx.attr(node, "pooled_shape")
    scale = ctx.attr(node, "spatial_scale", 1.0)
    nr = rois.shape.dims[0]
    if x.shape.rank != 4 or rois.shape.dims != (nr, 5) or not x.shape.dtype.is_float:
        raise ctx.error(node, f"X {x.shape} must be float [N, C, H, W] and rois {rois.shape} "
                              "[R, 5]")
    b = ctx.b
    wide = x.shape.dtype if x.shape.dtype == dtypes.F64 else dtypes.F32
    r = b.convert(rois, wide)
    n, channels, height, width = x.shape.dims

    def column(j):           # rois[:, j], (R,)
        return b.reshape(b.slice(r, (0, j), (nr, j + 1)), (nr,))

    def bins(j, n_bins, size):
        """(R, bins, size): whether each position along one axis is in each bin."""
        m1 = _Math(ctx, (nr,), wide)
        start = m1.op(Opcode.ROUND_NEAREST_AFZ, m1.mul(column(j), scale))
        end = m1.op(Opcode.ROUND_NEAREST_AFZ, m1.mul(column(j + 2), scale))
        extent = m1.op(Opcode.MAXIMUM, m1.add(m1.sub(end, start), 1.0), 1.0)
        dims = (nr, n_bins)
        m = _Math(ctx, dims, wide)
        per_roi = lambda v: b.broadcast(v, dims, (0,))  # noqa: E731
        k = b.iota(Shape.array(wide, dims), 1)
        size_per_bin = m.div(per_roi(extent), float(n_bins))
        lo = m.floor(m.mul(k, size_per_bin))
        hi = m.op(Opcode.CEIL, m.mul(m.add(k, 1.0), size_per_bin))

        def clip(v):
            return m.op(Opcode.MINIMUM, m.op(Opcode.MAXIMUM, m.add(v, per_roi(start)), 0.0),
                        float(size))
        lo, hi = clip(lo), clip(hi)
        cube = (nr, n_bins, size)
        pos = b.iota(Shape.array(wide, cube), 2)
        return b.op(Opcode.AND, b.compare(pos, b.broadcast(lo, cube, (0, 1)), "GE"),
                    b.compare(pos, b.broadcast(hi, cube, (0, 1)), "LT"))

    rows, cols = bins(2, ph, height), bins(1, pw, width)
    # X[batch[r]] for each roi (the batch index truncated, as onnxruntime casts it)
    batch = b.reshape(b.convert(column(0), dtypes.S64), (nr, 1))
    image = b.gather(b.convert(x, wide), batch, GatherDimensionNumbers((1, 2, 3), (0,), (0,), 1),
                     (1, channels, height, width))                      # (R, C, H, W)
    low = lowest(wide)
    cube = (nr, channels, height, pw, width)
    y = ctx.reduce(b.op(Opcode.SELECT, b.broadcast(cols, cube, (0, 3, 4)),
                        b.broadcast(image, cube, (0, 1, 2, 4)), ctx.full(low, wide, cube)),
                   (4,), Opcode.MAXIMUM, low)                           # (R, C, H, pw)
    cube = (nr, channels, height, ph, pw)
    y = ctx.reduce(b.op(Opcode.SELECT, b.broadcast(b.transpose(rows, (0, 2, 1)), cube, (0, 2, 3)),
                        b.broadcast(y, cube, (0, 1, 2, 4)), ctx.full(low, wide, cube)),
                   (2,), Opcode.MAXIMUM, low)                           # (R, C, ph, pw)
    # a bin that covers no position is 0
    out = y.shape.dims
    some_row = ctx.reduce(rows, (2,), Opcode.OR, False)                # (R, ph)
    some_col = ctx.reduce(cols, (2,), Opcode.OR, False)                # (R, pw)
    empty = b.op(Opcode.NOT, b.op(Opcode.AND, b.broadcast(some_row, out, (0, 2)),
                                  b.broadcast(some_col, out, (0, 3))))
    y = b.op(Opcode.SELECT, empty, ctx.full(0, wide, out), y)
    return [b.convert(y, x.shape.dtype)]


@register("Col2Im", since=18)
def col2im(ctx, node):
    """The sum of the column blocks put back in their image positions: per kernel
    offset, one HLO pad (interior padding for the stride, negative amounts crop) of
    that offset's block; the pads add up in one loop."""
    data = ctx.input(node, 0)
    image = [int(v) for v in ctx.const_input(node, 1, "image_shape").reshape(-1)]
    block = [int(v) for v in ctx.const_input(node, 2, "block_shape").reshape(-1)]
    k = len(image)
    dil = list(ctx.attr(node, "dilations", (1,) * k))
    pads = list(ctx.attr(node, "pads", (0,) * (2 * k)))
    strides = list(ctx.attr(node, "strides", (1,) * k))
    kernel = int(np.prod(block))
    cols = [(image[i] + pads[i] + pads[k + i] - (dil[i] * (block[i] - 1) + 1)) // strides[i] + 1
            for i in range(k)]
    n, ck, length = data.shape.dims if data.shape.rank == 3 else (0, 0, -1)
    if len(block) != k or len(dil) != k or len(strides) != k or len(pads) != 2 * k \
            or kernel == 0 or ck % kernel or length != int(np.prod(cols)) or min(cols) < 1:
        raise ctx.error(node, f"input {data.shape} does not fit image {image}, block {block}")
    c = ck // kernel
    b = ctx.b
    x = b.reshape(data, (n, c) + tuple(block) + tuple(cols))
    zero = ctx.scalar(0, data.shape.dtype)
    total = None
    for offset in np.ndindex(*block):
        lo = [0, 0] + list(offset) + [0] * k
        hi = [n, c] + [o + 1 for o in offset] + cols
        part = b.reshape(b.slice(x, lo, hi), (n, c) + tuple(cols))
        low = [offset[i] * dil[i] - pads[i] for i in range(k)]
        high = [image[i] - low[i] - (cols[i] - 1) * strides[i] - 1 for i in range(k)]
        part = b.pad(part, zero, [0, 0] + low, [0, 0] + high, [0, 0] + [s - 1 for s in strides])
        total = part if total is None else b.op(Opcode.ADD, total, part)
    return [total]
