"""What the expansions share: where they build (``Where``) and small builders."""
from __future__ import annotations

import numpy as np

from ...hlo import (Builder, Computation, DotDimensionNumbers, Instruction, Module, Opcode,
                    XlacError, dtypes)
from ...hlo.builder import scalar_computation
from ...hlo.while_loop import WhileLoop

S32, PRED = dtypes.S32, dtypes.PRED


class Where:
    """A computation under construction: what WhileLoop and the expanders build in."""

    def __init__(self, module: Module, computation: Computation):
        self.module = module
        self.b = Builder.on(computation)


# --- small builders --------------------------------------------------------------------

def scalar(b: Builder, value, dtype) -> Instruction:
    return b.constant(np.array(value, dtype.np), dtype)


def full(b: Builder, value, dtype, dims) -> Instruction:
    return b.broadcast(scalar(b, value, dtype), tuple(dims), ())


def spread(b: Builder, x: Instruction, dims, kept) -> Instruction:
    """x broadcast to ``dims``, its dimensions going to ``kept``."""
    return b.broadcast(x, tuple(dims), tuple(kept))


def choose(b: Builder, p, x, y) -> Instruction:
    return b.op(Opcode.SELECT, p, x, y)


def logical_and(b: Builder, x, y) -> Instruction:
    return b.op(Opcode.AND, x, y)


def swap_last(b: Builder, x: Instruction) -> Instruction:
    perm = list(range(x.shape.rank))
    perm[-2:] = perm[-1], perm[-2]
    return b.transpose(x, perm)


def slice_at(b: Builder, x: Instruction, starts, sizes, dims) -> Instruction:
    """dynamic-slice of x at ``starts`` (scalar instructions) reshaped to ``dims``."""
    s = b.op(Opcode.DYNAMIC_SLICE, x, *starts, dynamic_slice_sizes=tuple(sizes))
    return b.reshape(s, tuple(dims))


def update_at(b: Builder, x: Instruction, update: Instruction, starts, sizes) -> Instruction:
    return b.op(Opcode.DYNAMIC_UPDATE_SLICE, x, b.reshape(update, tuple(sizes)), *starts)


def matrix_batch(x: Instruction, what: str) -> tuple[list[int], int, int]:
    if x.shape.rank < 2:
        raise XlacError(f"{what} takes matrices (rank 2 and more), got {x.shape}")
    *batch, m, n = x.shape.dims
    return batch, m, n


def counter_below(loop: WhileLoop, limit: int) -> Instruction:
    """The condition ``state[0] < limit``."""
    c = loop.cond
    return c.compare(loop.cond_elements[0], scalar(c, limit, S32), "LT")


def batch_dot(b: Builder, x, y, x_contracting: int, y_contracting: int, nb: int):
    dims = tuple(range(nb))
    return b.dot(x, y, DotDimensionNumbers(dims, (x_contracting,), dims, (y_contracting,)))


def reduce_along(where: Where, b: Builder, x: Instruction, opcode: Opcode, init,
            dim: int) -> Instruction:
    dt = x.shape.dtype
    return b.reduce(x, scalar(b, init, dt), (dim,), where.module.add_computation(
        scalar_computation(f"{opcode.text}_{dt}", opcode, dt)))
