"""The batch norms: inference, training and the gradient, as XLA's BatchNormExpander."""
from __future__ import annotations

from math import prod

from ...hlo import Builder, Instruction, Opcode
from ...hlo.builder import scalar_computation
from .common import Where, full, scalar


# --- batch normalization --------------------------------------------------------------------

def _per_feature(b: Builder, v: Instruction, dims, feature: int) -> Instruction:
    return b.broadcast(v, tuple(dims), (feature,))


def _feature_mean(b: Builder, where: Where, x: Instruction, feature: int) -> Instruction:
    dims = x.shape.dims
    others = tuple(d for d in range(len(dims)) if d != feature)
    total = b.reduce(x, scalar(b, 0, x.shape.dtype), others, where.module.add_computation(
        scalar_computation(f"add_{x.shape.dtype}", Opcode.ADD, x.shape.dtype)))
    count = prod(dims) // dims[feature]
    return b.op(Opcode.DIVIDE, total, full(b, count, x.shape.dtype, (dims[feature],)))


def _normalize(b: Builder, x, scale, offset, mean, variance, epsilon: float, feature: int):
    dims, dt = x.shape.dims, x.shape.dtype
    inv = b.op(Opcode.RSQRT, b.op(Opcode.ADD, variance, full(b, epsilon, dt, variance.shape.dims)))
    factor = _per_feature(b, b.op(Opcode.MULTIPLY, scale, inv), dims, feature)
    centered = b.op(Opcode.SUBTRACT, x, _per_feature(b, mean, dims, feature))
    return b.op(Opcode.ADD, b.op(Opcode.MULTIPLY, centered, factor),
                _per_feature(b, offset, dims, feature))


def batch_norm_inference(where: Where, x, scale, offset, mean, variance, epsilon: float,
                         feature: int) -> Instruction:
    """(x - mean) * scale / sqrt(variance + epsilon) + offset, per feature."""
    return _normalize(where.b, x, scale, offset, mean, variance, epsilon, feature)


def batch_norm_training(where: Where, x, scale, offset, epsilon: float,
                        feature: int) -> list[Instruction]:
    """(x normalized with its own statistics, their mean, their (biased) variance)."""
    b = where.b
    mean = _feature_mean(b, where, x, feature)
    centered = b.op(Opcode.SUBTRACT, x, _per_feature(b, mean, x.shape.dims, feature))
    variance = _feature_mean(b, where, b.op(Opcode.MULTIPLY, centered, centered), feature)
    return [_normalize(b, x, scale, offset, mean, variance, epsilon, feature), mean, variance]


def batch_norm_grad(where: Where, x, scale, mean, variance, grad_out, epsilon: float,
                    feature: int) -> list[Instruction]:
    """(d x, d scale, d offset) of batch_norm_training, as XLA's BatchNormExpander:
    d offset = sum dy, d scale = sum dy (x - mean) / sqrt(var + eps), d x = scale /
    sqrt(var + eps) (dy - mean(dy) - (x - mean) mean(dy (x - mean)) / (var + eps))."""
    b = where.b
    dims, dt = x.shape.dims, x.shape.dtype
    count = prod(dims) // dims[feature]
    fdims = (dims[feature],)
    centered = b.op(Opcode.SUBTRACT, x, _per_feature(b, mean, dims, feature))
    var_eps = b.op(Opcode.ADD, variance, full(b, epsilon, dt, fdims))
    inv = b.op(Opcode.RSQRT, var_eps)
    mean_dy = _feature_mean(b, where, grad_out, feature)
    mean_dy_c = _feature_mean(b, where, b.op(Opcode.MULTIPLY, grad_out, centered), feature)
    n = full(b, count, dt, fdims)
    grad_offset = b.op(Opcode.MULTIPLY, mean_dy, n)
    grad_scale = b.op(Opcode.MULTIPLY, b.op(Opcode.MULTIPLY, mean_dy_c, n), inv)
    coef = b.op(Opcode.DIVIDE, mean_dy_c, var_eps)
    inner = b.op(Opcode.SUBTRACT, b.op(Opcode.SUBTRACT, grad_out, _per_feature(
        b, mean_dy, dims, feature)), b.op(Opcode.MULTIPLY, centered, _per_feature(
            b, coef, dims, feature)))
    grad_x = b.op(Opcode.MULTIPLY, inner, _per_feature(
        b, b.op(Opcode.MULTIPLY, scale, inv), dims, feature))
    return [grad_x, grad_scale, grad_offset]
