"""Structural keys: equal for instructions that compute the same function of their
operands, whatever their names.

    structural_key(a) == structural_key(b)

holds when ``a`` and ``b`` have the same opcode, shapes (layouts included), attributes
and called computations up to renaming, and read the same constants (by identity) and
non-constant operands of the same shapes. The emitter compiles one function for steps
with equal keys and equal arguments' properties: the bands of a streamed chain
(optimizer/row_streaming.py) repeat the same layer many times.
"""
from __future__ import annotations

import numpy as np

from .ir import Computation, Instruction
from .opcodes import Opcode


def structural_key(instr: Instruction) -> tuple:
    operands = tuple(("constant", id(o)) if o.opcode is Opcode.CONSTANT else o.shape
                     for o in instr.operands)
    return (instr.opcode, instr.shape, operands, _attrs(instr),
            tuple(computation_key(c) for c in instr.called))


def computation_key(comp: Computation) -> tuple:
    """The computation's instructions in order, each by opcode, shape, attributes, the
    positions of its operands and its called computations' keys; constants by value."""
    position = {id(i): n for n, i in enumerate(comp.instructions)}
    rows = []
    for i in comp.instructions:
        literal = None
        if i.opcode is Opcode.CONSTANT:
            literal = np.ascontiguousarray(i.literal).tobytes()
        rows.append((i.opcode, i.shape, _attrs(i), tuple(position[id(o)] for o in i.operands),
                     tuple(computation_key(c) for c in i.called), literal,
                     i is comp.root))
    return tuple(rows)


def _attrs(instr: Instruction) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in instr.attrs.items()))
