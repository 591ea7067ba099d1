"""Element-wise ONNX ops: unary math, binary arithmetic, comparisons, logic and bitwise
ops with numpy broadcasting, Mod, BitShift, variadic Max/Min/Sum/Mean, Clip, Where,
IsNaN, IsInf, and onnxruntime's BiasAdd (com.microsoft). (Activations: activations.py;
Cast: cast.py.)

Opset notes: before opset 7 binary ops broadcast only with ``broadcast=1``,
aligning B at ``axis`` of A; from 7 on they broadcast like numpy. Opset 1's
``consumed_inputs`` was a memory hint with no effect on results.
"""
from __future__ import annotations

from ...hlo import Opcode, dtypes
from .context import highest, lowest
from .registry import MS, register

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
    "Acos": (Opcode.ACOS, 7),
    "Asin": (Opcode.ASIN, 7),
    "Atan": (Opcode.ATAN, 7),
    "Acosh": (Opcode.ACOSH, 9),
    "Asinh": (Opcode.ASINH, 9),
    "Atanh": (Opcode.ATANH, 9),
    "Cosh": (Opcode.COSH, 9),
    "Sinh": (Opcode.SINH, 9),
    "BitwiseNot": (Opcode.NOT, 18),
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
    "BitwiseAnd": (Opcode.AND, None),
    "BitwiseOr": (Opcode.OR, None),
    "BitwiseXor": (Opcode.XOR, None),
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
    register(_op, since=18 if _op.startswith("Bitwise") else 1,
             ignore=LEGACY)(_binary(_opcode, _direction))


@register("BitShift", since=11)
def bit_shift(ctx, node):
    # Amounts past the width give 0 (or the sign fill): HLO's shifts read the amount as
    # unsigned, so a negative one is past the width too. RIGHT is arithmetic on the
    # signed types (opset 28 allows them).
    a, b = binary_operands(ctx, node)
    direction = ctx.attr(node, "direction")
    if direction == "LEFT":
        opcode = Opcode.SHIFT_LEFT
    elif direction == "RIGHT":
        opcode = (Opcode.SHIFT_RIGHT_ARITHMETIC if a.shape.dtype.kind == "s"
                  else Opcode.SHIFT_RIGHT_LOGICAL)
    else:
        raise ctx.error(node, f"direction must be LEFT or RIGHT, got '{direction}'")
    return [ctx.b.op(opcode, a, b)]


@register("Mod", since=10)
def mod(ctx, node):
    # fmod=1: C's fmod, the sign of the dividend (HLO remainder). fmod=0: the sign of the
    # divisor (Python's %): r + y where r and y differ in sign, and floats take the
    # divisor's sign for a zero result.
    x, y = binary_operands(ctx, node)
    b = ctx.b
    r = b.op(Opcode.REMAINDER, x, y)
    dt = x.shape.dtype
    if ctx.attr(node, "fmod", 0) or dt.kind in ("u", "pred"):
        return [r]
    zero = _const_like(ctx, x, 0)
    differ = b.op(Opcode.XOR, b.compare(r, zero, "LT"), b.compare(y, zero, "LT"))
    fix = b.op(Opcode.AND, b.compare(r, zero, "NE"), differ)
    r = b.op(Opcode.SELECT, fix, b.op(Opcode.ADD, r, y), r)
    if dt.is_float:
        signed_zero = b.op(Opcode.SELECT, b.compare(y, zero, "LT"), _const_like(ctx, x, -0.0),
                           zero)
        r = b.op(Opcode.SELECT, b.compare(r, zero, "EQ"), signed_zero, r)
    return [r]


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


def _const_like(ctx, x, value):
    return ctx.full(value, x.shape.dtype, x.shape.dims)


@register("Reciprocal", since=1, ignore=LEGACY)
def reciprocal(ctx, node):
    x = ctx.input(node, 0)
    return [ctx.b.op(Opcode.DIVIDE, _const_like(ctx, x, 1), x)]


# -- Clip, Where --------------------------------------------------------------------

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


@register("IsNaN", since=9)
def is_nan(ctx, node):
    x = ctx.input(node, 0)
    return [ctx.b.compare(x, x, "NE")]


@register("IsInf", since=10)
def is_inf(ctx, node):
    x = ctx.input(node, 0)
    found = [ctx.b.compare(x, _const_like(ctx, x, sign * float("inf")), "EQ")
             for sign, attr in ((1, "detect_positive"), (-1, "detect_negative"))
             if ctx.attr(node, attr, 1)]
    if not found:
        return [ctx.full(False, dtypes.PRED, x.shape.dims)]
    return [found[0] if len(found) == 1 else ctx.b.op(Opcode.OR, *found)]


@register("BiasAdd", since=1, domain=MS)
def bias_add(ctx, node):
    # X (N, S, C) + bias (C) + skip (N, S, C), onnxruntime's residual add.
    x, bias, skip = (ctx.input(node, i) for i in range(3))
    if x.shape.rank != 3 or bias.shape.dims != x.shape.dims[2:] or skip.shape != x.shape:
        raise ctx.error(node, f"X {x.shape} must be (N, S, C), bias (C) and skip X's shape, "
                              f"got {bias.shape}, {skip.shape}")
    b = ctx.b
    return [b.op(Opcode.ADD, b.op(Opcode.ADD, x, b.broadcast(bias, x.shape.dims, (2,))), skip)]
