"""Gemm, MatMul and onnxruntime's FusedMatMul (com.microsoft), lowered to HLO dot."""
from __future__ import annotations

from math import prod

import numpy as np

from ...hlo import DotDimensionNumbers, Opcode
from .registry import MS, register


def _scaled(ctx, x, k):
    if k == 1.0:
        return x
    return ctx.b.op(Opcode.MULTIPLY, x, ctx.full(k, x.shape.dtype, x.shape.dims))


@register("Gemm", since=1)
def gemm(ctx, node):
    # Y = alpha * op(A) . op(B) + beta * C, op = transpose when transA/transB;
    # C broadcasts to (M, N). Before opset 7, C broadcasts only with broadcast=1.
    a, b, c = ctx.input(node, 0), ctx.input(node, 1), ctx.input(node, 2)
    if a.shape.rank != 2 or b.shape.rank != 2:
        raise ctx.error(node, f"A and B must be matrices, got {a.shape} and {b.shape}")
    trans_a, trans_b = ctx.attr(node, "transA", 0), ctx.attr(node, "transB", 0)
    alpha, beta = ctx.attr(node, "alpha", 1.0), ctx.attr(node, "beta", 1.0)
    if ctx.opset(node) < 7:
        ctx.attr(node, "broadcast", 0)   # the numpy rule below covers both settings
    dn = DotDimensionNumbers((), (0,) if trans_a else (1,), (), (1,) if trans_b else (0,))
    y = _scaled(ctx, ctx.b.dot(a, b, dn), alpha)
    if c is not None and beta != 0.0:
        c = _scaled(ctx, ctx.broadcast_to(c, y.shape.dims), beta)
        y = ctx.b.op(Opcode.ADD, y, c)
    return [y]


@register("MatMul", since=1)
def matmul(ctx, node):
    return [matmul_of(ctx, node, ctx.input(node, 0), ctx.input(node, 1))]


@register("FusedMatMul", since=1, domain=MS)
def fused_matmul(ctx, node):
    # alpha * op(A) . op(B): transBatch moves dim 0 of a 3-D or larger operand to just before
    # its two matrix dims, then trans swaps those (onnxruntime's MatMulComputeHelper).
    a, b = ctx.input(node, 0), ctx.input(node, 1)
    ops = [_fused_operand(ctx, node, x, side) for x, side in ((a, "A"), (b, "B"))]
    return [_scaled(ctx, matmul_of(ctx, node, *ops), ctx.attr(node, "alpha", 1.0))]


def _fused_operand(ctx, node, x, side):
    r = x.shape.rank
    batch, trans = ctx.attr(node, f"transBatch{side}", 0), ctx.attr(node, f"trans{side}", 0)
    if (batch and r < 3) or (trans and r < 2):
        raise ctx.error(node, f"trans{'Batch' if batch else ''}{side} needs {side} of rank "
                              f"{3 if batch else 2} or more, got {x.shape}")
    perm = list(range(r))
    if batch:
        perm = perm[1:r - 1] + [0, r - 1]
    if trans:
        perm[-2:] = perm[-1], perm[-2]
    return ctx.b.transpose(x, perm) if perm != list(range(r)) else x


def matmul_of(ctx, node, a, b, preferred=None):
    """numpy.matmul of ``a`` and ``b``: 1-D operands gain (then lose) a unit dim; batch dims
    broadcast. ``preferred``: the result type of integer operands (MatMulInteger)."""
    if a.shape.rank == 0 or b.shape.rank == 0:
        raise ctx.error(node, "MatMul operands must have rank >= 1")
    a_vec, b_vec = a.shape.rank == 1, b.shape.rank == 1
    if a_vec:
        a = ctx.b.reshape(a, (1,) + a.shape.dims)
    if b_vec:
        b = ctx.b.reshape(b, b.shape.dims + (1,))
    (m, k), (k2, n) = a.shape.dims[-2:], b.shape.dims[-2:]
    if k != k2:
        raise ctx.error(node, f"inner dimensions differ: {a.shape} x {b.shape}")
    if b.shape.rank == 2:
        # (..., M, K) x (K, N): one 2-D dot over the flattened rows of A.
        batch = a.shape.dims[:-2]
        rows = ctx.b.reshape(a, (prod(batch) * m, k))
        y = ctx.b.dot(rows, b, DotDimensionNumbers((), (1,), (), (0,)), preferred)
        y = ctx.b.reshape(y, batch + (m, n))
    else:
        try:
            batch = tuple(np.broadcast_shapes(a.shape.dims[:-2], b.shape.dims[:-2]))
        except ValueError:
            raise ctx.error(node, f"batch dimensions do not broadcast: {a.shape} x {b.shape}") \
                from None
        a = ctx.broadcast_to(a, batch + (m, k))
        b = ctx.broadcast_to(b, batch + (k, n))
        nb = len(batch)
        dn = DotDimensionNumbers(tuple(range(nb)), (nb + 1,), tuple(range(nb)), (nb,))
        y = ctx.b.dot(a, b, dn, preferred)
    dims = y.shape.dims
    if a_vec:
        dims = dims[:-2] + dims[-1:]
    if b_vec:
        dims = dims[:-1]
    return ctx.b.reshape(y, dims)
