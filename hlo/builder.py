"""A small builder over Computation: creates instructions with inferred shapes.

    b = Builder("main")
    x = b.parameter(0, Shape.array(F32, (2, 3)), "x")
    y = b.op(Opcode.EXP, x)
    b.build(root=y)              # -> Computation
"""
from __future__ import annotations

import numpy as np

from . import dtypes
from .attributes import (ConvDimensionNumbers, DotDimensionNumbers, GatherDimensionNumbers,
                         PaddingConfig, ScatterDimensionNumbers, SliceSpec, Window)
from .ir import Computation, Instruction
from .opcodes import Opcode
from .shape import Shape
from .shape_inference import infer_shape


class Builder:
    def __init__(self, name: str):
        self.computation = Computation(name)

    @classmethod
    def on(cls, computation: Computation) -> "Builder":
        """A builder adding to ``computation``, already under construction elsewhere."""
        b = cls.__new__(cls)
        b.computation = computation
        return b

    def build(self, root: Instruction) -> Computation:
        self.computation.root = root
        return self.computation

    # -- generic --
    def op(self, opcode: Opcode, *operands: Instruction, shape: Shape | None = None,
           called=(), name: str | None = None, **attrs) -> Instruction:
        """Add an instruction; its shape is inferred (``shape`` is the declared result
        for ops that need one: convert, reshape, broadcast, iota...)."""
        s = infer_shape(opcode, [o.shape for o in operands], attrs, called, shape)
        return self.computation.add(Instruction(opcode, s, operands, attrs, called, name=name))

    # -- sources --
    def parameter(self, number: int, shape: Shape, name: str | None = None) -> Instruction:
        return self.op(Opcode.PARAMETER, shape=shape, name=name or f"p{number}", number=number)

    def constant(self, value, dtype: dtypes.DType | None = None,
                 name: str | None = None) -> Instruction:
        arr = np.asarray(value, dtype=dtype.np if dtype else None)
        if dtype is None and arr.dtype == np.float64 and not isinstance(value, np.ndarray):
            arr = arr.astype(np.float32)     # Python floats default to f32, as in jnp
        arr = np.array(arr, order="C", copy=True)   # ascontiguousarray would make 0-d 1-d
        shape = Shape.array(dtypes.from_numpy(arr.dtype), arr.shape)
        instr = Instruction(Opcode.CONSTANT, shape, literal=arr, name=name)
        return self.computation.add(instr)

    def iota(self, shape: Shape, dimension: int) -> Instruction:
        return self.op(Opcode.IOTA, shape=shape, iota_dimension=dimension)

    # -- element-wise --
    def convert(self, x: Instruction, dtype: dtypes.DType) -> Instruction:
        if x.shape.dtype == dtype:
            return x
        return self.op(Opcode.CONVERT, x, shape=x.shape.with_dtype(dtype))

    def compare(self, a: Instruction, b: Instruction, direction: str) -> Instruction:
        return self.op(Opcode.COMPARE, a, b, direction=direction)

    # -- movement --
    def reshape(self, x: Instruction, dims) -> Instruction:
        if tuple(dims) == x.shape.dims:
            return x
        return self.op(Opcode.RESHAPE, x, shape=x.shape.with_dims(dims))

    def broadcast(self, x: Instruction, dims, dimensions) -> Instruction:
        """broadcast_in_dim: operand dim i maps to result dim dimensions[i]."""
        if tuple(dims) == x.shape.dims and tuple(dimensions) == tuple(range(x.shape.rank)):
            return x
        return self.op(Opcode.BROADCAST, x, shape=x.shape.with_dims(dims),
                       dimensions=tuple(dimensions))

    def transpose(self, x: Instruction, perm) -> Instruction:
        if tuple(perm) == tuple(range(x.shape.rank)):
            return x
        return self.op(Opcode.TRANSPOSE, x, dimensions=tuple(perm))

    def slice(self, x: Instruction, starts, limits, strides=None) -> Instruction:
        strides = strides or (1,) * len(starts)
        return self.op(Opcode.SLICE, x, slice=SliceSpec(starts, limits, strides))

    def concatenate(self, xs, dimension: int) -> Instruction:
        if len(xs) == 1:
            return xs[0]
        return self.op(Opcode.CONCATENATE, *xs, dimension=dimension)

    def pad(self, x: Instruction, value: Instruction, low, high, interior=None) -> Instruction:
        interior = interior or (0,) * len(low)
        return self.op(Opcode.PAD, x, value, padding=PaddingConfig(low, high, interior))

    def reverse(self, x: Instruction, dimensions) -> Instruction:
        return self.op(Opcode.REVERSE, x, dimensions=tuple(dimensions))

    def gather(self, x: Instruction, indices: Instruction, dn: GatherDimensionNumbers,
               slice_sizes) -> Instruction:
        return self.op(Opcode.GATHER, x, indices, dimension_numbers=dn,
                       slice_sizes=tuple(slice_sizes))

    def scatter(self, x: Instruction, indices: Instruction, updates: Instruction,
                dn: ScatterDimensionNumbers, to_apply: Computation) -> Instruction:
        return self.op(Opcode.SCATTER, x, indices, updates, called=[to_apply],
                       dimension_numbers=dn)

    # -- compute --
    # ``preferred``: the result element type where it differs from the operands' (XLA's
    # preferred_element_type): integer operands accumulating in s32.
    def dot(self, a: Instruction, b: Instruction, dn: DotDimensionNumbers,
            preferred: dtypes.DType | None = None) -> Instruction:
        return self.op(Opcode.DOT, a, b, shape=_preferred(preferred), dimension_numbers=dn)

    def convolution(self, x: Instruction, k: Instruction, window: Window,
                    dn: ConvDimensionNumbers, feature_group_count: int = 1,
                    batch_group_count: int = 1,
                    preferred: dtypes.DType | None = None) -> Instruction:
        return self.op(Opcode.CONVOLUTION, x, k, shape=_preferred(preferred), window=window,
                       dimension_numbers=dn, feature_group_count=feature_group_count,
                       batch_group_count=batch_group_count)

    def reduce(self, x: Instruction, init: Instruction, dimensions,
               to_apply: Computation) -> Instruction:
        return self.op(Opcode.REDUCE, x, init, called=[to_apply],
                       dimensions=tuple(sorted(dimensions)))

    def reduce_window(self, x: Instruction, init: Instruction, window: Window,
                      to_apply: Computation) -> Instruction:
        return self.op(Opcode.REDUCE_WINDOW, x, init, called=[to_apply], window=window)

    def sort(self, operands, dimension: int, comparator: Computation,
             is_stable: bool = False) -> Instruction:
        """Sort ``operands`` together along ``dimension``; a tuple for several operands."""
        return self.op(Opcode.SORT, *operands, called=[comparator], dimension=dimension,
                       is_stable=is_stable)

    def topk(self, x: Instruction, k: int, largest: bool = True) -> Instruction:
        """(the k largest or smallest values along the last dim, their s32 indices)."""
        return self.op(Opcode.TOPK, x, k=k, largest=largest)

    # -- structure --
    def tuple(self, xs) -> Instruction:
        return self.op(Opcode.TUPLE, *xs)

    def get_tuple_element(self, t: Instruction, index: int) -> Instruction:
        return self.op(Opcode.GET_TUPLE_ELEMENT, t, index=index)


def _preferred(dtype: dtypes.DType | None) -> Shape | None:
    """A declared result carrying only the element type (the shape rule derives the dims)."""
    return None if dtype is None else Shape.array(dtype, ())


def scalar_computation(name: str, opcode: Opcode, dtype: dtypes.DType) -> Computation:
    """The binary reducer ``(a, b) -> opcode(a, b)`` over scalars, e.g. add for sums."""
    b = Builder(name)
    s = Shape.array(dtype, ())
    x, y = b.parameter(0, s, "x"), b.parameter(1, s, "y")
    return b.build(b.op(opcode, x, y))
