"""Alias analysis: which values own storage and which only name someone else's.

A value *owns a buffer* unless it is a view (reshape, bitcast: same bytes, new
shape), a get-tuple-element (an element of its operand's storage) or a tuple
(no storage: its elements live where they are). Owned buffers live in one of
four places: the caller's input buffers (entry parameters), read-only data
(constants), the caller's output buffers (model outputs, see
``output_slots``), or the arena. A tuple-shaped value computed by one op (a
multi-output reduce) owns one buffer holding its elements one after another,
each starting at a multiple of the alignment (``tuple_element_offset``).
"""
from __future__ import annotations

from ..hlo import Instruction, Module, Opcode, Shape

VIEW_OPCODES = frozenset({Opcode.RESHAPE, Opcode.BITCAST})
_ALIASING = VIEW_OPCODES | {Opcode.GET_TUPLE_ELEMENT, Opcode.TUPLE}


def align_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def root_of_view(instr: Instruction) -> Instruction:
    while instr.opcode in VIEW_OPCODES:
        instr = instr.operands[0]
    return instr


def owns_buffer(instr: Instruction) -> bool:
    return instr.opcode not in _ALIASING


def buffers_of(instr: Instruction) -> list[Instruction]:
    """The owners of the storage that reading ``instr`` reads (several for a tuple)."""
    out: list[Instruction] = []
    stack = [instr]
    while stack:
        i = stack.pop()
        if i.opcode in VIEW_OPCODES:
            stack.append(i.operands[0])
        elif i.opcode is Opcode.GET_TUPLE_ELEMENT:
            t = i.operands[0]
            stack.append(t.operands[i.attrs["index"]] if t.opcode is Opcode.TUPLE else t)
        elif i.opcode is Opcode.TUPLE:
            stack.extend(i.operands)
        elif i not in out:
            out.append(i)
    return out


def buffer_size(shape: Shape, alignment: int) -> int:
    """Bytes of the buffer holding a value of ``shape`` (tuple elements aligned)."""
    if not shape.is_tuple:
        return shape.byte_size
    return sum(align_up(buffer_size(s, alignment), alignment) for s in shape.tuple_shapes)


def tuple_element_offset(shape: Shape, index: int, alignment: int) -> int:
    """Byte offset of element ``index`` inside the buffer of a tuple-shaped value."""
    return sum(align_up(buffer_size(s, alignment), alignment)
               for s in shape.tuple_shapes[:index])


def output_slots(module: Module) -> dict[Instruction, int]:
    """Owners computed straight into the caller's output buffer k.

    Output k gets the owner of its value when that owner is computed by the
    model (not a parameter or constant), is an array, and has not already been
    given an earlier output (one value returned twice is copied by the emitter).
    """
    slots: dict[Instruction, int] = {}
    for k, out in enumerate(module.output_instructions):
        owners = buffers_of(out)
        if len(owners) != 1:
            continue
        owner = owners[0]
        if (owner.opcode in (Opcode.PARAMETER, Opcode.CONSTANT) or owner.shape.is_tuple
                or owner.shape.byte_size != out.shape.byte_size or owner in slots):
            continue
        slots[owner] = k
    return slots


def arena_buffers(module: Module, alignment: int) -> dict[Instruction, int]:
    """Owners of arena storage in the entry computation, with their sizes in bytes."""
    slots = output_slots(module)
    return {i: buffer_size(i.shape, alignment) for i in module.entry.instructions
            if owns_buffer(i) and i not in slots
            and i.opcode not in (Opcode.PARAMETER, Opcode.CONSTANT)}
