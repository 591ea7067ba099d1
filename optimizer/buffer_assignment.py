"""Buffer assignment: where every value of the entry computation lives.

Contract with the emitter (xlac.emitter):
  - ``BufferAssignment.order`` is the schedule: every entry instruction once,
    operands before users. The emitter emits code in this order.
  - ``location(instr)`` says where an array value lives:
      space 'input'    -> inputs[index] + offset   (entry parameters)
      space 'output'   -> outputs[index] + offset  (written straight into the caller's buffer)
      space 'arena'    -> arena + offset
      space 'constant' -> the read-only global the emitter makes for that constant
      space 'none'     -> no storage (tuples)
    Views (reshape, bitcast) and get-tuple-element share their operand's location.
  - Model output k is ``module.output_instructions[k]``; if its location is not
    ('output', k, 0) the emitter copies it there at the end (a parameter or a
    constant returned directly, or one value returned twice).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..hlo import Instruction, Module, Opcode

VIEW_OPCODES = frozenset({Opcode.RESHAPE, Opcode.BITCAST})


@dataclass(frozen=True)
class BufferLocation:
    space: str        # 'input' | 'output' | 'arena' | 'constant' | 'none'
    index: int = 0    # input / output number
    offset: int = 0   # bytes: into the arena, or into the input / output buffer


@dataclass
class BufferAssignment:
    order: list[Instruction]
    locations: dict[Instruction, BufferLocation]
    arena_size: int
    alignment: int
    naive_bytes: int = 0          # sum of all arena-resident buffers, no reuse
    lower_bound: int = 0          # max bytes live at once for ``order``
    stats: dict = field(default_factory=dict)

    def location(self, instr: Instruction) -> BufferLocation:
        return self.locations[instr]


def align_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def root_of_view(instr: Instruction) -> Instruction:
    while instr.opcode in VIEW_OPCODES:
        instr = instr.operands[0]
    return instr


def assign_buffers(module: Module, order: list[Instruction] | None = None,
                   alignment: int = 64) -> BufferAssignment:
    """Place every value; arena buffers get their own slot (no reuse yet)."""
    comp = module.entry
    order = list(order or comp.instructions)
    outputs = module.output_instructions
    out_slot: dict[Instruction, int] = {}
    for k, o in enumerate(outputs):
        r = root_of_view(o)
        if r.opcode not in (Opcode.PARAMETER, Opcode.CONSTANT) and r not in out_slot:
            out_slot[r] = k
    locs: dict[Instruction, BufferLocation] = {}
    arena = 0
    naive = 0
    for i in order:
        if i.opcode is Opcode.PARAMETER:
            locs[i] = BufferLocation("input", i.number)
        elif i.opcode is Opcode.CONSTANT:
            locs[i] = BufferLocation("constant")
        elif i.opcode is Opcode.TUPLE:
            locs[i] = BufferLocation("none")
        elif i.opcode in VIEW_OPCODES:
            locs[i] = locs[i.operands[0]]
        elif i in out_slot:
            locs[i] = BufferLocation("output", out_slot[i])
        else:
            locs[i] = BufferLocation("arena", arena)
            arena = align_up(arena + i.shape.byte_size, alignment)
            naive += i.shape.byte_size
    return BufferAssignment(order, locs, arena, alignment, naive, naive)
