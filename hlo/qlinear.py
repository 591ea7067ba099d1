"""onnxruntime's quantized arithmetic written as HLO, for both sides that build it.

The importer lowers com.microsoft's QLinearSoftmax to it, and the optimizer rewrites the
QDQ form ``q(softmax(dq(x)))`` to it (optimizer/quantization.py, rule 4), as
onnxruntime's QDQ transformer does: one definition, so the two build the same
instructions. Like XLA's builder libraries, it composes ops through callbacks and holds
no state.
"""
from __future__ import annotations

import math

import numpy as np

from . import dtypes
from .attributes import GatherDimensionNumbers
from .ir import Instruction
from .opcodes import Opcode
from .shape import Shape


def qlinear_softmax(op, constant, reducer, x: Instruction, dims: tuple[int, ...], x_scale,
                    y_scale, y_zero_point) -> Instruction:
    """onnxruntime's QLinearSoftmax of the 8-bit ``x`` over ``dims``, its result in x's
    type; built with ``op(opcode, *operands, shape=, called=, **attrs)``,
    ``constant(value, dtype)`` and ``reducer(opcode, dtype)``."""
    t, shape = x.shape.dtype, x.shape.dims
    sx, sy = float(np.float32(x_scale)), np.float32(y_scale)
    kept = tuple(d for d in range(len(shape)) if d not in dims)
    count = int(np.prod([shape[d] for d in dims]))
    s32 = x.shape.with_dtype(dtypes.S32)

    def spread(value, dtype):
        return op(Opcode.BROADCAST, constant(value, dtype), shape=Shape.array(dtype, shape),
                  dimensions=())

    # onnxruntime's table: the shift in double from the f32 quotient, exp in double
    shift = max(0.0, math.log(float(np.finfo(np.float32).max / np.float32(count))) - 5.0) / sx
    table = np.array([math.exp((i - 255 + shift) * sx) for i in range(256)], np.float32)
    top = op(Opcode.REDUCE, x, constant(t.info.min, t), called=[reducer(Opcode.MAXIMUM, t)],
             dimensions=dims)
    top = op(Opcode.BROADCAST, op(Opcode.CONVERT, top, shape=top.shape.with_dtype(dtypes.S32)),
             shape=s32, dimensions=kept)
    at = op(Opcode.ADD, op(Opcode.SUBTRACT, op(Opcode.CONVERT, x, shape=s32), top),
            spread(255, dtypes.S32))
    e = op(Opcode.GATHER, constant(table, dtypes.F32), at, slice_sizes=(1,),
           dimension_numbers=GatherDimensionNumbers((), (0,), (0,), len(shape)))
    total = op(Opcode.REDUCE, e, constant(0, dtypes.F32), called=[reducer(Opcode.ADD, dtypes.F32)],
               dimensions=dims)
    total = op(Opcode.BROADCAST, total, shape=e.shape, dimensions=kept)
    f = op(Opcode.MULTIPLY, e, spread(np.floor(np.float32(1) / sy), dtypes.F32))
    r = op(Opcode.CONVERT, op(Opcode.ROUND_NEAREST_EVEN, op(Opcode.DIVIDE, f, total)), shape=s32)
    if y_zero_point:
        r = op(Opcode.ADD, r, spread(y_zero_point, dtypes.S32))
    # onnxruntime 1.32 saturates to the type's range (an s8 128 is 127, not -128)
    r = op(Opcode.MAXIMUM, op(Opcode.MINIMUM, r, spread(int(t.info.max), dtypes.S32)),
           spread(int(t.info.min), dtypes.S32))
    return op(Opcode.CONVERT, r, shape=x.shape)
