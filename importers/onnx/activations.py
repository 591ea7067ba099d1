"""Activation functions, each lowered to element-wise HLO, with onnxruntime's contrib
GELUs (com.microsoft Gelu, BiasGelu, FastGelu, QuickGelu).

Every formula is the ONNX definition, arranged not to overflow: exp only of
non-positive arguments (Softplus, Mish), expm1 where the result is near zero (Elu,
Selu, Celu). The element type is the input's (floats narrower than f32 compute each op
in f32, as everywhere).
"""
from __future__ import annotations

import math

from ...hlo import Opcode
from .registry import MS, register

LEGACY = ("consumed_inputs",)


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


def _prelu(ctx, x, slope):
    # x >= 0 ? x : slope * x, slope already of x's shape
    neg = ctx.b.op(Opcode.MULTIPLY, x, slope)
    return ctx.b.op(Opcode.SELECT, _compare_const(ctx, x, "GE", 0), x, neg)


@register("PRelu", since=1, ignore=LEGACY)
def prelu_v1(ctx, node):
    # Before opset 7 the slope is Caffe2's: one value, or one per channel (dim 1).
    x, slope = ctx.input(node, 0), ctx.input(node, 1)
    dims = x.shape.dims
    if slope.shape.num_elements == 1:
        slope = ctx.b.broadcast(ctx.b.reshape(slope, ()), dims, ())
    elif slope.shape.rank == 1 and len(dims) >= 2 and slope.shape.dims[0] == dims[1]:
        slope = ctx.b.broadcast(slope, dims, (1,))
    else:
        raise ctx.error(node, f"slope {slope.shape} is neither one value nor one per "
                              f"channel of {x.shape}")
    return [_prelu(ctx, x, slope)]


@register("PRelu", since=7)
def prelu(ctx, node):
    # slope broadcast to x (unidirectional)
    x, slope = ctx.input(node, 0), ctx.input(node, 1)
    return [_prelu(ctx, x, ctx.broadcast_to(slope, x.shape.dims))]


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


def _hard_sigmoid(ctx, x, alpha, beta):
    # clamp(alpha * x + beta, 0, 1)
    y = ctx.b.op(Opcode.ADD, _mul(ctx, x, alpha), _const_like(ctx, x, beta))
    dt = x.shape.dtype
    return ctx.b.op(Opcode.CLAMP, ctx.scalar(0, dt), y, ctx.scalar(1, dt))


@register("HardSigmoid", since=1, ignore=LEGACY)
def hard_sigmoid(ctx, node):
    x = ctx.input(node, 0)
    return [_hard_sigmoid(ctx, x, ctx.attr(node, "alpha", 0.2), ctx.attr(node, "beta", 0.5))]


@register("Softplus", since=1)
def softplus(ctx, node):
    # log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), which cannot overflow
    return [_softplus(ctx, ctx.input(node, 0))]


def _softplus(ctx, x):
    b = ctx.b
    pos = b.op(Opcode.MAXIMUM, x, _const_like(ctx, x, 0))
    tail = b.op(Opcode.LOG1P, b.op(Opcode.EXP, b.op(Opcode.NEGATE, b.op(Opcode.ABS, x))))
    return b.op(Opcode.ADD, pos, tail)


@register("Celu", since=12)
def celu(ctx, node):
    # max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
    x = ctx.input(node, 0)
    alpha = ctx.attr(node, "alpha", 1.0)
    neg = _mul(ctx, ctx.b.op(Opcode.EXPM1, _mul(ctx, x, 1 / alpha)), alpha)
    return [ctx.b.op(Opcode.SELECT, _compare_const(ctx, x, "GE", 0), x, neg)]


@register("Gelu", since=20)
def gelu(ctx, node):
    approximate = ctx.attr(node, "approximate", "none")
    if approximate not in ("none", "tanh"):
        raise ctx.error(node, f"approximate must be 'none' or 'tanh', got '{approximate}'")
    return [gelu_of(ctx, ctx.input(node, 0), approximate == "tanh")]


def gelu_of(ctx, x, tanh):
    """x/2 (1 + erf(x / sqrt 2)), or with ``tanh``:
    x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    b = ctx.b
    if tanh:
        cube = b.op(Opcode.MULTIPLY, b.op(Opcode.MULTIPLY, x, x), x)
        arg = b.op(Opcode.ADD, x, _mul(ctx, cube, 0.044715))
        inner = b.op(Opcode.TANH, _mul(ctx, arg, math.sqrt(2 / math.pi)))
    else:
        inner = b.op(Opcode.ERF, _mul(ctx, x, 1 / math.sqrt(2)))
    one_plus = b.op(Opcode.ADD, inner, _const_like(ctx, x, 1))
    return b.op(Opcode.MULTIPLY, _mul(ctx, x, 0.5), one_plus)


@register("HardSwish", since=14)
def hard_swish(ctx, node):
    # x * max(0, min(1, x/6 + 1/2))
    x = ctx.input(node, 0)
    return [ctx.b.op(Opcode.MULTIPLY, x, _hard_sigmoid(ctx, x, 1 / 6, 0.5))]


@register("Mish", since=18)
def mish(ctx, node):
    # x * tanh(softplus(x))
    x = ctx.input(node, 0)
    return [ctx.b.op(Opcode.MULTIPLY, x, ctx.b.op(Opcode.TANH, _softplus(ctx, x)))]


@register("Softsign", since=1)
def softsign(ctx, node):
    # x / (1 + |x|)
    x = ctx.input(node, 0)
    b = ctx.b
    return [b.op(Opcode.DIVIDE, x, b.op(Opcode.ADD, b.op(Opcode.ABS, x),
                                         _const_like(ctx, x, 1)))]


@register("ThresholdedRelu", since=10)
def thresholded_relu(ctx, node):
    # x > alpha ? x : 0
    x = ctx.input(node, 0)
    alpha = ctx.attr(node, "alpha", 1.0)
    return [ctx.b.op(Opcode.SELECT, _compare_const(ctx, x, "GT", alpha), x,
                     _const_like(ctx, x, 0))]


@register("Shrink", since=9)
def shrink(ctx, node):
    # x < -lambd ? x + bias : (x > lambd ? x - bias : 0)
    x = ctx.input(node, 0)
    lambd, bias = ctx.attr(node, "lambd", 0.5), ctx.attr(node, "bias", 0.0)
    b = ctx.b
    above = b.op(Opcode.SELECT, _compare_const(ctx, x, "GT", lambd),
                 b.op(Opcode.SUBTRACT, x, _const_like(ctx, x, bias)), _const_like(ctx, x, 0))
    return [b.op(Opcode.SELECT, _compare_const(ctx, x, "LT", -lambd),
                 b.op(Opcode.ADD, x, _const_like(ctx, x, bias)), above)]


@register("Swish", since=24)
def swish(ctx, node):
    return [swish_of(ctx, ctx.input(node, 0), ctx.attr(node, "alpha", 1.0))]


def swish_of(ctx, x, alpha=1.0):
    """x * sigmoid(alpha * x)."""
    z = x if alpha == 1.0 else _mul(ctx, x, alpha)
    return ctx.b.op(Opcode.MULTIPLY, x, ctx.b.op(Opcode.LOGISTIC, z))


# -- onnxruntime's contrib activations (com.microsoft) ----------------------------------

def _biased(ctx, node, x, bias):
    """x + bias, a bias over x's last dim (onnxruntime's kernels take no other)."""
    if bias is None:
        return x
    if bias.shape.dims != x.shape.dims[-1:]:
        raise ctx.error(node, f"bias {bias.shape} must be 1-D over the last dim of {x.shape}")
    return ctx.binary(node, Opcode.ADD, x, bias)


@register("Gelu", since=1, domain=MS)
def ms_gelu(ctx, node):
    return [gelu_of(ctx, ctx.input(node, 0), tanh=False)]


@register("BiasGelu", since=1, domain=MS)
def bias_gelu(ctx, node):
    x = _biased(ctx, node, ctx.input(node, 0), ctx.input(node, 1))
    return [gelu_of(ctx, x, tanh=False)]


@register("FastGelu", since=1, domain=MS)
def fast_gelu(ctx, node):
    x = _biased(ctx, node, ctx.input(node, 0), ctx.input(node, 1))
    return [gelu_of(ctx, x, tanh=True)]


@register("QuickGelu", since=1, domain=MS)
def quick_gelu(ctx, node):
    return [swish_of(ctx, ctx.input(node, 0), ctx.attr(node, "alpha", 1.702))]


# onnxruntime's fused activations (FusedConv's ``activation`` with its
# ``activation_params``, MLAS's kinds): name -> (parameter count, lowering).
_FUSED = {
    "Relu": (0, lambda ctx, y: ctx.b.op(Opcode.MAXIMUM, y, _const_like(ctx, y, 0))),
    "Tanh": (0, lambda ctx, y: ctx.b.op(Opcode.TANH, y)),
    "Sigmoid": (0, lambda ctx, y: ctx.b.op(Opcode.LOGISTIC, y)),
    "LeakyRelu": (1, lambda ctx, y, alpha: ctx.b.op(
        Opcode.SELECT, _compare_const(ctx, y, "GE", 0), y, _mul(ctx, y, alpha))),
    "Clip": (2, lambda ctx, y, lo, hi: ctx.b.op(
        Opcode.CLAMP, ctx.scalar(lo, y.shape.dtype), y, ctx.scalar(hi, y.shape.dtype))),
    "HardSigmoid": (2, _hard_sigmoid),
}


def fused_activation(ctx, node, y):
    """``y`` through the node's ``activation`` (none when absent)."""
    name = ctx.attr(node, "activation", None)
    params = tuple(ctx.attr(node, "activation_params", ()))
    if name is None:
        if params:
            raise ctx.error(node, "activation_params without an activation")
        return y
    if name not in _FUSED:
        raise ctx.error(node, f"unsupported activation '{name}' (supported: "
                              f"{', '.join(_FUSED)})")
    count, lower = _FUSED[name]
    if len(params) != count:
        raise ctx.error(node, f"activation {name} takes {count} activation_params, got "
                              f"{len(params)}")
    return lower(ctx, y, *params)
