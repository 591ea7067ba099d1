"""Signal processing: DFT, STFT, the Hann, Hamming and Blackman windows and
MelWeightMatrix.

The DFT is a matrix product with the transform's cos and sin matrices: they are
computed in HLO from iotas (the angle 2 pi (k n mod N) / N formed exactly in
integers, then taken in f64) and, as operands of a dot, constant-folded. The work
is O(N^2) per transformed line, which suits the frame and feature sizes models use;
very long transforms would want an FFT. STFT is a strided convolution of the
signal with the windowed DFT basis as its kernel (the fast convolution kernels do
the framing and the products at once). Windows and the mel matrix are element-wise
functions of an iota, folded to constants.
"""
from __future__ import annotations

from math import pi

from ...hlo import ConvDimensionNumbers, DotDimensionNumbers, Opcode, Shape, Window, dtypes
from .context import normalize_axis
from .registry import register
from .types import hlo_dtype


def _basis(ctx, rows: int, cols: int, n: int, dtype, scale=None):
    """(cos, sin) of 2 pi (r * c mod n) / n over a rows x cols grid, times ``scale``
    (an f64 rows x cols value, or None), in ``dtype``."""
    b = ctx.b
    grid = Shape.array(dtypes.S64, (rows, cols))
    k = b.op(Opcode.MULTIPLY, b.iota(grid, 0), b.iota(grid, 1))
    k = b.op(Opcode.REMAINDER, k, ctx.full(n, dtypes.S64, (rows, cols)))
    angle = b.op(Opcode.MULTIPLY, b.convert(k, dtypes.F64),
                 ctx.full(2 * pi / n, dtypes.F64, (rows, cols)))
    out = []
    for op in (Opcode.COSINE, Opcode.SINE):
        v = b.op(op, angle)
        if scale is not None:
            v = b.op(Opcode.MULTIPLY, v, scale)
        out.append(b.convert(v, dtype))
    return out


def _divided(ctx, y, n: int):
    """y / n: the inverse transform's scaling, applied to the sums rather than folded
    into the basis, so that it rounds once (cos / n in f32 would put an ulp of error
    into every term: an f32 inverse of exact integer spectra came out 1 ulp off)."""
    return ctx.b.op(Opcode.DIVIDE, y, ctx.full(n, y.shape.dtype, y.shape.dims))


def _along(ctx, x, m, axis: int):
    """Contract ``x``'s ``axis`` with the columns of ``m`` (rows x cols); the rows take
    the axis' place."""
    b = ctx.b
    y = b.dot(x, m, DotDimensionNumbers((), (axis,), (), (1,)))
    rank = x.shape.rank
    perm = list(range(axis)) + [rank - 1] + list(range(axis, rank - 1))
    return b.transpose(y, perm)


def _complex_parts(ctx, node, x, axis: int, length: int):
    """The real and imaginary parts (None for a real signal) of x [..., 1 or 2], the
    last dim dropped, cut to ``length`` elements along ``axis``."""
    b = ctx.b
    dims = x.shape.dims
    if dims[-1] not in (1, 2):
        raise ctx.error(node, f"the last dim must be 1 (real) or 2 (complex), got {x.shape}")
    parts = []
    for c in range(dims[-1]):
        limits = list(dims)
        limits[-1], limits[axis] = c + 1, min(length, dims[axis])
        start = [0] * len(dims)
        start[-1] = c
        part = b.slice(x, start, limits)
        parts.append(b.reshape(part, part.shape.dims[:-1]))
    return parts[0], (parts[1] if len(parts) > 1 else None)


def _dft(ctx, node, x, axis: int, length: int | None, inverse: bool, onesided: bool):
    b = ctx.b
    rank = x.shape.rank
    if not 0 <= axis < rank - 1:
        raise ctx.error(node, f"axis {axis} is not a signal axis of {x.shape}")
    dt = x.shape.dtype
    size = x.shape.dims[axis]
    if inverse and onesided:
        # irfft: Hermitian one-sided input, real output of length n; the bins 1 ..
        # (n-1)/2 count twice, and the imaginary parts of DC and Nyquist drop out
        # (their sin row is 0)
        n = length or 2 * (size - 1)
        used = min(size, n // 2 + 1)
        re, im = _complex_parts(ctx, node, x, axis, used)
        grid = (n, used)
        k = b.iota(Shape.array(dtypes.S64, grid), 1)
        once = b.op(Opcode.OR, b.compare(k, ctx.full(0, dtypes.S64, grid), "EQ"),
                    b.compare(b.op(Opcode.MULTIPLY, k, ctx.full(2, dtypes.S64, grid)),
                              ctx.full(n, dtypes.S64, grid), "EQ"))
        weight = b.op(Opcode.SELECT, once, ctx.full(1.0, dtypes.F64, grid),
                      ctx.full(2.0, dtypes.F64, grid))
        cos, sin = _basis(ctx, n, used, n, dt, weight)
        y = _along(ctx, re, cos, axis)
        if im is not None:
            y = b.op(Opcode.SUBTRACT, y, _along(ctx, im, sin, axis))
        y = _divided(ctx, y, n)
        return b.reshape(y, y.shape.dims + (1,))
    n = length or size
    bins = n // 2 + 1 if onesided else n
    re, im = _complex_parts(ctx, node, x, axis, n)
    used = re.shape.dims[axis]
    cos, sin = _basis(ctx, bins, used, n, dt)
    # x e^(-+i t) = (re cos +- im sin) + i (im cos -+ re sin); inverse: + and / n
    if not inverse:
        sin = b.op(Opcode.NEGATE, sin)
    y_re, y_im = _along(ctx, re, cos, axis), _along(ctx, re, sin, axis)
    if im is not None:
        y_re = b.op(Opcode.SUBTRACT, y_re, _along(ctx, im, sin, axis))
        y_im = b.op(Opcode.ADD, y_im, _along(ctx, im, cos, axis))
    if inverse:
        y_re, y_im = _divided(ctx, y_re, n), _divided(ctx, y_im, n)
    parts = [b.reshape(v, v.shape.dims + (1,)) for v in (y_re, y_im)]
    return b.concatenate(parts, rank - 1)


def _length(ctx, node, i: int):
    v = ctx.const_input(node, i, "dft_length", None)
    if v is None:
        return None
    v = int(v.reshape(-1)[0])
    if v < 1:
        raise ctx.error(node, f"dft_length must be positive, got {v}")
    return v


@register("DFT", since=17)
def dft_v17(ctx, node):
    x = ctx.input(node, 0)
    axis = normalize_axis(ctx, node, ctx.attr(node, "axis", 1), x.shape.rank)
    return [_dft(ctx, node, x, axis, _length(ctx, node, 1), bool(ctx.attr(node, "inverse", 0)),
                 bool(ctx.attr(node, "onesided", 0)))]


@register("DFT", since=20)
def dft_v20(ctx, node):
    x = ctx.input(node, 0)
    axis = ctx.const_input(node, 2, "axis", None)
    axis = -2 if axis is None else int(axis.reshape(-1)[0])
    axis = normalize_axis(ctx, node, axis, x.shape.rank)
    return [_dft(ctx, node, x, axis, _length(ctx, node, 1), bool(ctx.attr(node, "inverse", 0)),
                 bool(ctx.attr(node, "onesided", 0)))]


@register("STFT", since=17)
def stft(ctx, node):
    """out[b, f, k] = sum_t x[b, f * step + t] w[t] e^(-2 pi i k t / n): a stride-step
    1-D convolution whose output channels are the real and imaginary basis rows."""
    b = ctx.b
    x = ctx.input(node, 0)
    if x.shape.rank != 3 or x.shape.dims[-1] not in (1, 2):
        raise ctx.error(node, f"signal must be [batch, length, 1 or 2], got {x.shape}")
    step = int(ctx.const_input(node, 1, "frame_step").reshape(-1)[0])
    window = ctx.input(node, 2)
    length = ctx.const_input(node, 3, "frame_length", None)
    if length is not None:
        n = int(length.reshape(-1)[0])
    else:
        n = window.shape.dims[0] if window is not None else x.shape.dims[1]
    if window is not None and window.shape.dims != (n,):
        raise ctx.error(node, f"window {window.shape} does not have frame_length {n}")
    if step < 1 or not 0 < n <= x.shape.dims[1]:
        raise ctx.error(node, f"frame_step {step} / frame_length {n} do not fit {x.shape}")
    bins = n // 2 + 1 if ctx.attr(node, "onesided", 1) else n
    dt = x.shape.dtype
    cos, sin = _basis(ctx, bins, n, n, dt)
    if window is not None:
        w = b.broadcast(b.convert(window, dt), (bins, n), (1,))
        cos, sin = b.op(Opcode.MULTIPLY, cos, w), b.op(Opcode.MULTIPLY, sin, w)
    neg_sin = b.op(Opcode.NEGATE, sin)
    # kernel (2 bins, channels, n): real rows then imaginary rows; a complex signal's
    # channels are (re, im): re' = re cos + im sin, im' = -re sin + im cos
    rows = [[cos], [neg_sin]] if x.shape.dims[-1] == 1 else [[cos, sin], [neg_sin, cos]]
    kernel = b.concatenate([b.concatenate([b.reshape(m, (bins, 1, n)) for m in r], 1)
                            for r in rows], 0)
    signal = b.transpose(x, (0, 2, 1))                    # [batch, channels, length]
    y = b.convolution(signal, kernel, Window.make((n,), (step,)), ConvDimensionNumbers.nchw(1))
    frames = y.shape.dims[2]
    y = b.reshape(y, (x.shape.dims[0], 2, bins, frames))
    return [b.transpose(y, (0, 3, 2, 1))]


# -- windows and the mel filter bank ---------------------------------------------------

def _output_type(ctx, node):
    return hlo_dtype(ctx.attr(node, "output_datatype", 1),
                     f"{node.op_type} node '{node.name or node.output[0]}': output_datatype")


def _cosine_window(coefficients):
    """w[i] = sum_j (-1)^j a_j cos(2 pi j i / N), N = size (periodic) or size - 1."""
    def lower(ctx, node):
        b = ctx.b
        size = int(ctx.const_input(node, 0, "size").reshape(-1)[0])
        if size < 1:
            raise ctx.error(node, f"size must be positive, got {size}")
        period = size if ctx.attr(node, "periodic", 1) else size - 1
        dims = (size,)
        i = b.convert(b.iota(Shape.array(dtypes.S64, dims), 0), dtypes.F64)
        w = ctx.full(coefficients[0], dtypes.F64, dims)
        for j, a in enumerate(coefficients[1:], start=1):
            angle = b.op(Opcode.MULTIPLY, i, ctx.full(2 * pi * j / max(period, 1), dtypes.F64,
                                                      dims))
            term = b.op(Opcode.MULTIPLY, b.op(Opcode.COSINE, angle),
                        ctx.full(a * (-1) ** j, dtypes.F64, dims))
            w = b.op(Opcode.ADD, w, term)
        return [b.convert(w, _output_type(ctx, node))]
    return lower


register("HannWindow", since=17)(_cosine_window((0.5, 0.5)))
register("HammingWindow", since=17)(_cosine_window((25 / 46, 21 / 46)))
register("BlackmanWindow", since=17)(_cosine_window((0.42, 0.5, 0.08)))


@register("MelWeightMatrix", since=17)
def mel_weight_matrix(ctx, node):
    """Triangular filters over the spectrogram bins, as the onnx reference builds them:
    M + 2 edges spaced evenly in mel between the edge frequencies, at bins
    floor((dft_length + 1) * hz / sample_rate); filter i rises from edge i to 1 at edge
    i + 1 and falls to edge i + 2."""
    b = ctx.b
    mels = int(ctx.const_input(node, 0, "num_mel_bins").reshape(-1)[0])
    dft_length = int(ctx.const_input(node, 1, "dft_length").reshape(-1)[0])
    rate, low, high = (ctx.input(node, i) for i in range(2, 5))
    if mels < 1 or dft_length < 1:
        raise ctx.error(node, f"num_mel_bins {mels} and dft_length {dft_length} must be > 0")
    f64, s64 = dtypes.F64, dtypes.S64
    log10 = 2.302585092994046

    def mel(hz):                       # 2595 log10(1 + hz / 700), log1p in hz's type
        scaled = b.op(Opcode.DIVIDE, hz, ctx.full(700, hz.shape.dtype, ()))
        m = b.convert(b.op(Opcode.LOG1P, scaled), f64)
        return b.op(Opcode.DIVIDE, b.op(Opcode.MULTIPLY, m, ctx.scalar(2595, f64)),
                    ctx.scalar(log10, f64))

    lo, hi = mel(b.reshape(low, ())), mel(b.reshape(high, ()))
    count = mels + 2
    step = b.op(Opcode.DIVIDE, b.op(Opcode.SUBTRACT, hi, lo), ctx.scalar(count, f64))
    edges = b.convert(b.iota(Shape.array(s64, (count,)), 0), f64)
    edges = b.op(Opcode.ADD, b.op(Opcode.MULTIPLY, edges, b.broadcast(step, (count,), ())),
                 b.broadcast(lo, (count,), ()))
    hz = b.op(Opcode.MULTIPLY, ctx.full(700, f64, (count,)), b.op(
        Opcode.EXPM1, b.op(Opcode.MULTIPLY, edges, ctx.full(log10 / 2595, f64, (count,)))))
    rate = b.broadcast(b.convert(b.reshape(rate, ()), f64), (count,), ())
    scaled = b.op(Opcode.MULTIPLY, hz, ctx.full(dft_length + 1, f64, (count,)))
    edge_bins = b.convert(b.op(Opcode.FLOOR, b.op(Opcode.DIVIDE, scaled, rate)), s64)
    spectrum = dft_length // 2 + 1
    dims = (spectrum, mels)

    def edge(k):
        return b.broadcast(b.slice(edge_bins, (k,), (k + mels,)), dims, (1,))

    left, center, right = edge(0), edge(1), edge(2)
    j = b.iota(Shape.array(s64, dims), 0)

    def ratio(num, den):
        return b.op(Opcode.DIVIDE, b.convert(num, f64), b.convert(den, f64))

    def between(x, lo_, hi_, hi_op):
        return b.op(Opcode.AND, b.compare(x, lo_, "GE"), b.compare(x, hi_, hi_op))

    zeros, ones = ctx.full(0, f64, dims), ctx.full(1, f64, dims)
    rise_width = b.op(Opcode.SUBTRACT, center, left)
    flat = b.compare(rise_width, ctx.full(0, s64, dims), "EQ")
    safe_rise = b.op(Opcode.SELECT, flat, ctx.full(1, s64, dims), rise_width)
    rising = b.op(Opcode.SELECT, between(j, left, center, "LE"),
                  ratio(b.op(Opcode.SUBTRACT, j, left), safe_rise), zeros)
    rising = b.op(Opcode.SELECT, flat, b.op(Opcode.SELECT, b.compare(j, center, "EQ"), ones,
                                            zeros), rising)
    fall_width = b.op(Opcode.SUBTRACT, right, center)
    falls = b.compare(fall_width, ctx.full(0, s64, dims), "GT")
    safe_fall = b.op(Opcode.SELECT, falls, fall_width, ctx.full(1, s64, dims))
    in_fall = b.op(Opcode.AND, falls, between(j, center, right, "LT"))
    out = b.op(Opcode.SELECT, in_fall, ratio(b.op(Opcode.SUBTRACT, right, j), safe_fall), rising)
    return [b.convert(out, _output_type(ctx, node))]
