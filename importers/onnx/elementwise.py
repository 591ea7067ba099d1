"""Element-wise ONNX ops: unary math, binary arithmetic and comparisons with
numpy broadcasting, variadic Max/Min/Sum/Mean, activations, Clip, Where, Cast, CastLike.

Opset notes: before opset 7 binary ops broadcast only with ``broadcast=1``,
aligning B at ``axis`` of A; from 7 on they broadcast like numpy. Opset 1's
``consumed_inputs`` was a memory hint with no effect on results.
"""
from __future__ import annotations

from ...hlo import Opcode
from .context import highest, lowest
from .registry import register
from .types import hlo_dtype

LEGACY = ("consumed_inputs",)

# op type -> (HLO opcode, first opset)
_UNARY = {
    "Abs": (Opcode.ABS, 1),
    "Neg": (Opcode.NEGATE, 1),
    "Sqrt": (Opcode.SQRT, 1),
    "Exp": (Opcode.EXP, 1),
    "Log": (Opcode.LOG, 1),
    "Sigmoid": (Opcode.LOGISTIC, 1),
    "Tanh": (Opcode.TANH, 1),
    "Floor": (Opcode.FLOOR, 1),
    "Ceil": (Opcode.CEIL, 1),
    "Not": (Opcode.NOT, 1),
    "Sin": (Opcode.SINE, 7),
    "Cos": (Opcode.COSINE, 7),
    "Tan": (Opcode.TAN, 7),
    "Erf": (Opcode.ERF, 9),
    "Sign": (Opcode.SIGN, 9),
    "Round": (Opcode.ROUND_NEAREST_EVEN, 11),   # ONNX rounds half to even
}

# op type -> (HLO opcode, compare direction or None)
_BINARY = {
    "Add": (Opcode.ADD, None),
    "Sub": (Opcode.SUBTRACT, None),
    "Mul": (Opcode.MULTIPLY, None),
    "Div": (Opcode.DIVIDE, None),
    "And": (Opcode.AND, None),
    "Or": (Opcode.OR, None),
    "Xor": (Opcode.XOR, None),
    "Equal": (Opcode.COMPARE, "EQ"),
    "Less": (Opcode.COMPARE, "LT"),
    "Greater": (Opcode.COMPARE, "GT"),
    "LessOrEqual": (Opcode.COMPARE, "LE"),
    "GreaterOrEqual": (Opcode.COMPARE, "GE"),
}

# variadic op type -> the HLO opcode that folds the operands
_VARIADIC = {
    "Max": Opcode.MAXIMUM,
    "Min": Opcode.MINIMUM,
    "Sum": Opcode.ADD,
    "Mean": Opcode.ADD,
}


def _unary(opcode):
    def lower(ctx, node):
        return [ctx.b.op(opcode, ctx.input(node, 0))]
    return lower


for _op, (_opcode, _since) in _UNARY.items():
    register(_op, since=_since, ignore=LEGACY)(_unary(_opcode))


def binary_operands(ctx, node):
    """Inputs 0 and 1 broadcast to one shape, with the pre-opset-7 rule where it applies."""
    a, b = ctx.input(node, 0), ctx.input(node, 1)
    if ctx.opset(node) < 7 and a.shape.dims != b.shape.dims:
        if not ctx.attr(node, "broadcast", 0):
            raise ctx.error(node, f"operand shapes differ ({a.shape} vs {b.shape}) "
                                  "and broadcast=0")
        axis = ctx.attr(node, "axis", a.shape.rank - b.shape.rank)
        axis = axis % a.shape.rank if a.shape.rank else 0
        trailing = a.shape.rank - axis - b.shape.rank
        if trailing < 0:
            raise ctx.error(node, f"cannot broadcast {b.shape} onto {a.shape} at axis {axis}")
        b = ctx.b.reshape(b, b.shape.dims + (1,) * trailing)
    elif ctx.opset(node) < 7:
        ctx.attr(node, "broadcast", 0)
        ctx.attr(node, "axis", 0)
    return ctx.broadcast_all([a, b], node)


def _binary(opcode, direction):
    def lower(ctx, node):
        a, b = binary_operands(ctx, node)
        attrs = {"direction": direction} if direction else {}
        return [ctx.b.op(opcode, a, b, **attrs)]
    return lower


for _op, (_opcode, _direction) in _BINARY.items():
    register(_op, since=1, ignore=LEGACY)(_binary(_opcode, _direction))


@register("Pow", since=1)
def pow_(ctx, node):
    # From opset 12 the exponent may have another type; HLO power takes one type.
    a, b = binary_operands(ctx, node)
    return [ctx.b.op(Opcode.POWER, a, ctx.b.convert(b, a.shape.dtype))]


def _variadic(opcode, op_type):
    def lower(ctx, node):
        xs = ctx.broadcast_all(ctx.inputs(node), node)
        out = xs[0]
        for x in xs[1:]:
            out = ctx.b.op(opcode, out, x)
        if op_type == "Mean":
            out = ctx.b.op(Opcode.DIVIDE, out, ctx.full(len(xs), out.shape.dtype,
                                                        out.shape.dims))
        return [out]
    return lower


for _op, _opcode in _VARIADIC.items():
    register(_op, since=1, ignore=LEGACY)(_variadic(_opcode, _op))


# -- activations ------------------------------------------------------------------

def _const_like(ctx, x, value):
    return ctx.full(value, x.shape.dtype, x.shape.dims)


def _mul(ctx, x, k):
    return ctx.b.op(Opcode.MULTIPLY, x, _const_like(ctx, x, k))


def _compare_const(ctx, x, direction, value):
    return ctx.b.compare(x, _const_like(ctx, x, value), direction)


@register("Relu", since=1, ignore=LEGACY)
def relu(ctx, node):
    x = ctx.input(node, 0)
    return [ctx.b.op(Opcode.MAXIMUM, x, _const_like(ctx, x, 0))]


@register("LeakyRelu", since=1, ignore=LEGACY)
def leaky_relu(ctx, node):
    # x >= 0 ? x : alpha * x
    x = ctx.input(node, 0)
    alpha = ctx.attr(node, "alpha", 0.01)
    return [ctx.b.op(Opcode.SELECT, _compare_const(ctx, x, "GE", 0), x, _mul(ctx, x, alpha))]


@register("PRelu", since=7)
def prelu(ctx, node):
    # x >= 0 ? x : slope * x, slope broadcast to x (unidirectional)
    x, slope = ctx.input(node, 0), ctx.input(node, 1)
    slope = ctx.broadcast_to(slope, x.shape.dims)
    neg = ctx.b.op(Opcode.MULTIPLY, x, slope)
    return [ctx.b.op(Opcode.SELECT, _compare_const(ctx, x, "GE", 0), x, neg)]


def _elu_negative(ctx, x, alpha):
    # alpha * (exp(x) - 1), with expm1 for accuracy near 0
    return _mul(ctx, ctx.b.op(Opcode.EXPM1, x), alpha)


@register("Elu", since=1, ignore=LEGACY)
def elu(ctx, node):
    x = ctx.input(node, 0)
    alpha = ctx.attr(node, "alpha", 1.0)
    return [ctx.b.op(Opcode.SELECT, _compare_const(ctx, x, "GE", 0), x,
                     _elu_negative(ctx, x, alpha))]


@register("Selu", since=1, ignore=LEGACY)
def selu(ctx, node):
    # gamma * (x > 0 ? x : alpha * (exp(x) - 1))
    x = ctx.input(node, 0)
    alpha = ctx.attr(node, "alpha", 1.67326319217681884765625)
    gamma = ctx.attr(node, "gamma", 1.05070102214813232421875)
    inner = ctx.b.op(Opcode.SELECT, _compare_const(ctx, x, "GT", 0), x,
                     _elu_negative(ctx, x, alpha))
    return [_mul(ctx, inner, gamma)]


@register("HardSigmoid", since=1, ignore=LEGACY)
def hard_sigmoid(ctx, node):
    # clamp(alpha * x + beta, 0, 1)
    x = ctx.input(node, 0)
    alpha, beta = ctx.attr(node, "alpha", 0.2), ctx.attr(node, "beta", 0.5)
    y = ctx.b.op(Opcode.ADD, _mul(ctx, x, alpha), _const_like(ctx, x, beta))
    dt = x.shape.dtype
    return [ctx.b.op(Opcode.CLAMP, ctx.scalar(0, dt), y, ctx.scalar(1, dt))]


@register("Softplus", since=1)
def softplus(ctx, node):
    # log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), which cannot overflow
    x = ctx.input(node, 0)
    b = ctx.b
    pos = b.op(Opcode.MAXIMUM, x, _const_like(ctx, x, 0))
    tail = b.op(Opcode.LOG1P, b.op(Opcode.EXP, b.op(Opcode.NEGATE, b.op(Opcode.ABS, x))))
    return [b.op(Opcode.ADD, pos, tail)]


@register("Reciprocal", since=1, ignore=LEGACY)
def reciprocal(ctx, node):
    x = ctx.input(node, 0)
    return [ctx.b.op(Opcode.DIVIDE, _const_like(ctx, x, 1), x)]


# -- Clip, Where, Cast --------------------------------------------------------------

def _clip(ctx, x, lo, hi):
    """min(max(x, lo), hi) with scalar bounds (instructions, or None for unbounded)."""
    dt = x.shape.dtype
    lo = lo if lo is not None else ctx.scalar(lowest(dt), dt)
    hi = hi if hi is not None else ctx.scalar(highest(dt), dt)
    return ctx.b.op(Opcode.CLAMP, lo, x, hi)


@register("Clip", since=1, ignore=LEGACY)
def clip_v1(ctx, node):
    x = ctx.input(node, 0)
    dt = x.shape.dtype
    lo, hi = ctx.attr(node, "min", None), ctx.attr(node, "max", None)
    return [_clip(ctx, x, None if lo is None else ctx.scalar(lo, dt),
                  None if hi is None else ctx.scalar(hi, dt))]


@register("Clip", since=11)
def clip_v11(ctx, node):
    x, lo, hi = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    for bound in (lo, hi):
        if bound is not None and bound.shape.num_elements != 1:
            raise ctx.error(node, f"min/max must be scalars, got {bound.shape}")
    lo = None if lo is None else ctx.b.reshape(lo, ())
    hi = None if hi is None else ctx.b.reshape(hi, ())
    return [_clip(ctx, x, lo, hi)]


@register("Where", since=9)
def where(ctx, node):
    c, x, y = ctx.broadcast_all([ctx.input(node, i) for i in range(3)], node)
    return [ctx.b.op(Opcode.SELECT, c, x, y)]


@register("Cast", since=6, ignore=("saturate",))   # saturate only concerns float8 targets
def cast(ctx, node):
    x = ctx.input(node, 0)
    to = hlo_dtype(ctx.attr(node, "to"), "the Cast target")
    return [ctx.b.convert(x, to)]


@register("CastLike", since=15, ignore=("saturate",))   # as Cast's
def cast_like(ctx, node):
    x, like = ctx.input(node, 0), ctx.input(node, 1)
    return [ctx.b.convert(x, like.shape.dtype)]


@register("IsNaN", since=9)
def is_nan(ctx, node):
    x = ctx.input(node, 0)
    return [ctx.b.compare(x, x, "NE")]

