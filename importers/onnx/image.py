"""Image ONNX ops: Resize and Upsample.

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
"""
from __future__ import annotations

import math

import numpy as np

from ...hlo import Opcode, dtypes
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

def resample(ctx, node, x, plan, extrapolation=0.0):
    """``x`` resampled along the axes of ``plan`` ({axis: (idx, w, outside)}): gathers with
    a tap dim beside each axis, weights, one sum over the tap dims; positions outside the
    input (tf_crop_and_resize) take ``extrapolation``."""
    b = ctx.b
    dt = x.shape.dtype
    wide = dt if dt in (dtypes.F32, dtypes.F64) else dtypes.F32
    y = b.convert(x, wide)
    pos = {}           # axis -> its position in y (taps follow an axis that has them)
    shift = 0
    for a in range(x.shape.rank):
        pos[a] = a + shift
        if a not in plan:
            continue
        idx, w, _ = plan[a]
        used = np.any(w != 0, axis=0)             # taps that never weigh anything go
        idx, w = idx[:, used], w[:, used]
        if w.shape[1] == 1:                       # one tap of weight 1: nearest
            plan[a] = (idx[:, 0], None, plan[a][2])
            y = take(ctx, y, b.constant(idx[:, 0]), pos[a])
        else:
            plan[a] = (idx, w, plan[a][2])
            y = take(ctx, y, b.constant(idx), pos[a])
            shift += 1
    tapped = [a for a in plan if plan[a][1] is not None]
    if tapped:
        for a in tapped:
            weights = b.constant(plan[a][1].astype(wide.np))
            y = b.op(Opcode.MULTIPLY, y, b.broadcast(weights, y.shape.dims,
                                                     (pos[a], pos[a] + 1)))
        y = ctx.reduce(y, [pos[a] + 1 for a in tapped], Opcode.ADD, 0)
    outside = [a for a in plan if plan[a][2] is not None and plan[a][2].any()]
    if outside:
        dims = y.shape.dims
        mask = None
        for a in outside:
            m = b.broadcast(b.constant(plan[a][2]), dims, (a,))
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
