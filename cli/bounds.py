"""Bounded batch (``--bound SYMBOL=LIMIT``): one object for every batch of 1 to LIMIT.

Every input's leading dimension is SYMBOL: the model's own ``dim_param``, or a name
written in ``--input-shape`` (``x=Nx3x224x224``). The model is imported at two samples
and proved batch-separable (optimizer/batch_dims.py: each output sample depends on its
own input sample alone), and the import at three samples must be the same graph but for
the batch: the same instructions, shapes that differ only in the batch, the same
constants (a graph that computes with the batch size itself, ``x / Shape(x)[0]``,
differs there). Two and three, not one and two: an importer may specialize a dimension
of one (broadcasting drops it), which changes the graph's form, not what it computes.
Then the one-sample module is compiled, and the object runs it once per sample
(emitter/entry.py): the time grows with the real batch, not the bound, and the arena is
one sample's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import onnx

from .hlo import Module, Opcode, Shape, XlacError
from .hlo.opcodes import ELEMENTWISE
from .importers.onnx.model_file import graph_inputs
from .optimizer.batch_dims import Batched, check_batch_separable
from .optimizer.dce import DeadCodeElimination

_SYMBOL = r"[A-Za-z_][A-Za-z0-9_]*"
_WHY = "--bound applies to a leading batch dimension"


def parse_bound(text: str) -> tuple[str, int]:
    """``"N=8"`` -> ``("N", 8)``."""
    m = re.fullmatch(rf"({_SYMBOL})=(\d+)", text)
    if m is None or int(m.group(2)) < 1:
        raise XlacError(f"bad --bound '{text}': expected SYMBOL=LIMIT with LIMIT >= 1, "
                        "e.g. --bound N=8 (N: the batch dimension's name in the model or "
                        "in --input-shape)")
    return m.group(1), int(m.group(2))


@dataclass(frozen=True)
class BatchBound:
    symbol: str
    limit: int
    rest: dict[str, tuple[int, ...]]    # each batched input's dims after the batch
    pinned: dict                        # the other --input-shape entries, as given

    def input_shapes(self, samples: int) -> dict:
        """--input-shape for an import at ``samples``."""
        return {**self.pinned, **{n: (samples, *r) for n, r in self.rest.items()}}


def batch_bound(model: onnx.ModelProto, bounds: dict[str, int], input_shapes: dict,
                const_inputs: dict, absent_inputs) -> BatchBound:
    """Which inputs the bound's symbol leads, from --input-shape or the model's dims;
    one-line errors where it is not every input's leading dimension alone."""
    if len(bounds) != 1:
        raise XlacError(f"one --bound per model, on its batch dimension; got "
                        f"{', '.join(sorted(bounds))}")
    (symbol, limit), = bounds.items()
    left_out = set(const_inputs) | set(absent_inputs or ())
    rest, pinned = {}, {}
    for vi in graph_inputs(model.graph):
        name = vi.name
        if name in left_out:
            continue
        if name in input_shapes:
            dims = input_shapes[name]
            if isinstance(dims, list):
                raise XlacError(f"{_WHY}: input '{name}' is a sequence")
        else:
            if not vi.type.HasField("tensor_type"):
                raise XlacError(f"{_WHY}: input '{name}' is not a tensor")
            dims = tuple(d.dim_value if d.HasField("dim_value") else
                         d.dim_param if d.HasField("dim_param") else None
                         for d in vi.type.tensor_type.shape.dim)
        shown = "x".join(str(d) if d is not None else "?" for d in dims)
        if not dims or dims[0] != symbol:
            raise XlacError(f"{_WHY}: input '{name}' ({shown}) does not lead with "
                            f"{symbol}; every input's first dimension must be the batch "
                            f"(e.g. --input-shape {name}={symbol}x...)")
        for d in dims[1:]:
            if not isinstance(d, int):
                what = f"{symbol} again" if d == symbol else f"the dynamic dimension {d or '?'}"
                raise XlacError(f"{_WHY}: input '{name}' ({shown}) has {what} after the "
                                f"batch; pin it with --input-shape {name}={symbol}x...")
        rest[name] = tuple(dims[1:])
    for name, dims in input_shapes.items():
        if name not in rest:
            pinned[name] = dims
    return BatchBound(symbol, limit, rest, pinned)


def check_separable(two: Module, three: Module) -> None:
    """Raise XlacError unless ``two`` (imported at two samples) keeps samples apart and
    ``three`` (at three) is the same graph but for the batch. Both lose their dead code
    first: a Shape that only gives a Reshape its target leaves a dead constant."""
    for m in (two, three):
        DeadCodeElimination().run(m)
    values = check_batch_separable(two, 2)
    # Sizes computed from the batch (a slice to Shape(x)[0] on another dim) change shapes
    # beyond the batch dim: every instruction must match but for the batch. A value that
    # depends on no input may grow with the batch (a bias broadcast to the activations)
    # along dims it is constant on, but nothing may read it along them by their extent
    # (a sum over a ConstantOfShape(Shape(x)) counts the samples).
    twos, threes = two.entry.instructions, three.entry.instructions
    if len(twos) != len(threes):
        raise XlacError("bounded batch: the model's graph differs between batches of 2 and "
                        "3 samples; compile one object per batch size (--input-shape)")
    for x, y in zip(twos, threes):
        why = None
        if x.opcode is not y.opcode or not _same_but_batch(x.shape, y.shape, values[x], True):
            why = f"is {y.shape} at 3 samples but {x.shape} at 2"
        elif x.opcode not in _ELEMENT_BY_ELEMENT:
            why = next((f"reads %{a.name}, {b.shape} at 3 samples but {a.shape} at 2"
                        for a, b in zip(x.operands, y.operands)
                        if not _same_but_batch(a.shape, b.shape, values[a], False)), None)
        if why is not None:
            where = f" (ONNX node {x.metadata})" if x.metadata else ""
            raise XlacError(f"bounded batch: {x.opcode.text} '{x.name}'{where} {why}: the "
                            "model computes with the batch size; compile one object per "
                            "batch size (--input-shape)")
    a, b = _constants(two), _constants(three)
    if len(a) != len(b):
        raise XlacError("bounded batch: the model's graph differs between batches of 2 and "
                        "3 samples; compile one object per batch size (--input-shape)")
    for x, y in zip(a, b):
        same = (x.literal.shape == y.literal.shape
                and np.array_equal(x.literal, y.literal, equal_nan=x.literal.dtype.kind == "f")
                ) or (_splat(x.literal) is not None and _splat(x.literal) == _splat(y.literal))
        if not same:
            where = f" (ONNX node {y.metadata})" if y.metadata else ""
            raise XlacError(f"bounded batch: constant '{y.name}'{where} differs between "
                            "batches of 2 and 3 samples: the model computes with the batch "
                            "size; compile one object per batch size (--input-shape)")


# Ops whose every result element reads operand elements at its own index (or an index
# remapped without regard to extent): a uniform operand that grows along a dim it is
# constant on gives them the same values.
_ELEMENT_BY_ELEMENT = ELEMENTWISE | {Opcode.BROADCAST, Opcode.RESHAPE, Opcode.BITCAST,
                                     Opcode.TRANSPOSE, Opcode.COPY, Opcode.TUPLE,
                                     Opcode.GET_TUPLE_ELEMENT}


def _same_but_batch(two: Shape, three: Shape, value, grows: bool) -> bool:
    """Whether ``three`` (at three samples) is ``two`` (at two, whose analysis gave
    ``value``) with the batch grown by half; with ``grows``, a uniform value may also grow
    by half along the dims it is constant on."""
    if two.is_tuple or three.is_tuple:
        return (two.is_tuple and three.is_tuple
                and len(two.tuple_shapes) == len(three.tuple_shapes) == len(value)
                and all(_same_but_batch(a, b, v, grows)
                        for a, b, v in zip(two.tuple_shapes, three.tuple_shapes, value)))
    if two.dtype != three.dtype or len(two.dims) != len(three.dims):
        return False
    if isinstance(value, Batched):
        return all((a, b) == (2 * value.block, 3 * value.block) if j == value.dim else a == b
                   for j, (a, b) in enumerate(zip(two.dims, three.dims)))
    return all(a == b or (grows and j in value.replicated and 2 * b == 3 * a)
               for j, (a, b) in enumerate(zip(two.dims, three.dims)))


def _constants(module: Module) -> list:
    return [i for c in module.computations for i in c.instructions
            if i.opcode is Opcode.CONSTANT]


def _splat(literal: np.ndarray):
    """The one value every element holds, else None."""
    flat = literal.reshape(-1)
    if flat.size == 0 or not np.all(flat == flat[0]):
        return None
    return flat[0].item()
