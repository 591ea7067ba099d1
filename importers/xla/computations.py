"""Ops that apply a called computation: select-and-scatter (max pooling's gradient) and
map."""
from __future__ import annotations

from math import prod

from ...hlo import (Builder, Computation, Instruction, Opcode, ScatterDimensionNumbers, Shape,
                    Window, XlacError)
from ...hlo.opcodes import BINARY_ELEMENTWISE, UNARY_ELEMENTWISE
from .common import PRED, S32, Where, choose, full, logical_and, scalar


# --- select-and-scatter ----------------------------------------------------------------

def select_and_scatter(where: Where, operand: Instruction, source: Instruction,
                       init: Instruction, select: Computation, scatter: Computation,
                       window: Window) -> Instruction:
    """Each window of ``operand`` (padding never chosen) picks one element: the first,
    then each next one that ``select(chosen, next)`` does not keep the chosen over.
    Its source value is combined into the result (``init`` everywhere) by ``scatter``.
    A variadic reduce-window over (valid, value, flat index) finds the elements; one
    scatter into the flat result combines them."""
    b = where.b
    dims, dt = operand.shape.dims, operand.shape.dtype
    count = prod(dims)
    flat = b.reshape(b.iota(Shape.array(S32, (count,)), 0), dims)
    valid = full(b, True, PRED, dims)
    chooser = where.module.add_computation(_chooser(select, dt))
    inits = [scalar(b, False, PRED), scalar(b, 0, dt), scalar(b, 0, S32)]
    chosen = b.op(Opcode.REDUCE_WINDOW, valid, operand, flat, *inits, called=[chooser],
                  window=window)
    ok, _, index = (b.get_tuple_element(chosen, k) for k in range(3))
    if ok.shape.dims != source.shape.dims:
        raise XlacError(f"select-and-scatter: source {source.shape} does not match the "
                        f"windows {ok.shape}")
    n = prod(ok.shape.dims)
    index = choose(b, ok, index, full(b, count, S32, ok.shape.dims))   # out of range: none
    out = b.broadcast(init, (count,), ())
    numbers = ScatterDimensionNumbers((), (0,), (0,), 1)
    out = b.scatter(out, b.reshape(index, (n, 1)), b.reshape(source, (n,)), numbers, scatter)
    return b.reshape(out, dims)


def _chooser(select: Computation, dtype) -> Computation:
    """(valid, value, index) x 2 -> the chosen triple: the first unless it is invalid or
    the second is valid and ``select(first, second)`` is false."""
    c = Builder(f"choose_{select.name}")
    v0, x0, i0, v1, x1, i1 = (c.parameter(k, Shape.array(t, ()), n) for k, (t, n) in enumerate(
        [(PRED, "valid0"), (dtype, "x0"), (S32, "i0"), (PRED, "valid1"), (dtype, "x1"),
         (S32, "i1")]))
    keeps = inline(c, select, [x0, x1])
    first = logical_and(c, v0, c.op(Opcode.OR, c.op(Opcode.NOT, v1), keeps))
    return c.build(c.tuple([c.op(Opcode.OR, v0, v1), choose(c, first, x0, x1),
                            choose(c, first, i0, i1)]))


def inline(b: Builder, comp: Computation, args: list[Instruction]) -> Instruction:
    """``comp``'s instructions added to ``b`` with its parameters replaced by ``args``;
    its root's value."""
    mapped = {id(p): a for p, a in zip(comp.parameters, args, strict=True)}
    for i in comp.instructions:
        if i.opcode is not Opcode.PARAMETER:
            mapped[id(i)] = b.computation.add(Instruction(
                i.opcode, i.shape, [mapped[id(o)] for o in i.operands], i.attrs, i.called,
                i.literal, i.name))
    return mapped[id(comp.root)]


# --- map -------------------------------------------------------------------------------

_MAPPABLE = frozenset(UNARY_ELEMENTWISE) | frozenset(BINARY_ELEMENTWISE) | {
    Opcode.SELECT, Opcode.CLAMP, Opcode.CONVERT, Opcode.BITCAST_CONVERT, Opcode.COMPARE}


def map_elementwise(b: Builder, operands: list[Instruction], comp: Computation) -> Instruction:
    """``comp`` (scalars -> scalar) applied element by element: its element-wise ops
    over the arrays, its constants broadcast."""
    dims = operands[0].shape.dims
    mapped = {id(p): a for p, a in zip(comp.parameters, operands, strict=True)}
    for i in comp.instructions:
        if i.opcode is Opcode.PARAMETER:
            continue
        if i.opcode is Opcode.CONSTANT:
            mapped[id(i)] = b.broadcast(b.computation.add(Instruction(
                Opcode.CONSTANT, i.shape, literal=i.literal)), dims, ())
        elif i.opcode in _MAPPABLE:
            mapped[id(i)] = b.computation.add(Instruction(
                i.opcode, Shape.array(i.shape.dtype, dims), [mapped[id(o)] for o in i.operands],
                i.attrs))
        else:
            raise XlacError(f"map applies %{comp.name}, which uses {i.opcode.text}: xlac maps "
                            "element-wise computations only")
    return mapped[id(comp.root)]
