"""Constant folding: replace values computable at compile time by constants.

The rule for what to fold. An instruction is *known* when it is a constant, or
a non-tuple op with no parameter dependence (all operands known; iota has
none). Only known values that something unknown consumes (or the root) are
candidates, since the ones in between die after folding. A candidate V is
materialized as a constant when

  1. it is tiny: at most ``SMALL_BYTES`` (1 KiB), so shape arithmetic, masks and
     small tables fold however they were computed; or
  2. it is an operand of a kernel that reads its operands from memory
     (``BackendPolicy.kernel_reads_operands``: a dot or convolution), so a
     ConstantOfShape-style weight (a broadcast scalar) must be a real constant anyway,
     unless it would take more than ``UNPACKED_RATIO`` times the bytes of a constant
     of more than ``SMALL_BYTES`` it is computed from: weights stored packed (4-bit
     MatMulNBits) stay packed, unpacked into the arena on each call; or
  3. it is no larger than the largest constant it is computed from: folding
     ``add(W, 1)`` or ``transpose(W)`` trades W for a value of the same size.

Otherwise (a broadcast or iota that would blow a few bytes up into kilobytes or
megabytes of read-only data that fusion generates for free: a bias broadcast to a
feature map) V stays, and its known operands become
candidates themselves, so ``broadcast(add(c1, c2))`` still folds the add.
Values are evaluated with the reference evaluator, on demand and memoized, so
an unmaterialized broadcast that a materialized value reads is computed
transiently and never stored in the module.
"""
from __future__ import annotations

import numpy as np

from ..hlo import Computation, Instruction, Opcode
from ..hlo.evaluator import evaluate_instruction
from .pipeline import ComputationPass
from .policy import BackendPolicy
from .rewrite import apply_replacements

SMALL_BYTES = 1024
# int8 weights dequantized to f32 (4x) still fold; 4-bit ones (8x) do not.
UNPACKED_RATIO = 4
# Control flow is not evaluated at compile time: a loop may run for long; a custom call
# is code only the linked program has.
_NEVER_FOLDED = (Opcode.PARAMETER, Opcode.CONSTANT, Opcode.TUPLE, Opcode.GET_TUPLE_ELEMENT,
                 Opcode.WHILE, Opcode.CONDITIONAL, Opcode.CUSTOM_CALL)


class ConstantFolding(ComputationPass):
    name = "constant-folding"

    def __init__(self, policy: BackendPolicy):
        self.policy = policy

    def run_on_computation(self, comp: Computation) -> bool:
        return _fold_computation(comp, self.policy)


def _fold_computation(comp: Computation, policy: BackendPolicy) -> bool:
    known: set[Instruction] = set()
    largest_source: dict[Instruction, int] = {}   # bytes of the largest constant feeding it
    for instr in comp.instructions:
        if instr.opcode is Opcode.CONSTANT:
            known.add(instr)
            largest_source[instr] = instr.shape.byte_size
        elif (instr.opcode not in _NEVER_FOLDED and not instr.shape.is_tuple
              and all(o in known for o in instr.operands)):
            known.add(instr)
            largest_source[instr] = max((largest_source[o] for o in instr.operands), default=0)

    users = comp.users()
    candidates = [i for i in comp.instructions
                  if i in known and i.opcode is not Opcode.CONSTANT
                  and (i is comp.root or any(u not in known for u in users[i]))]
    chosen: list[Instruction] = []
    seen = set(candidates)
    while candidates:
        v = candidates.pop()
        source = largest_source[v]
        packed = source > SMALL_BYTES and v.shape.byte_size > UNPACKED_RATIO * source
        if (v.shape.byte_size <= SMALL_BYTES
                or (any(policy.kernel_reads_operands(u) for u in users[v]) and not packed)
                or v.shape.byte_size <= source):
            chosen.append(v)
            continue
        for o in v.operands:
            if o.opcode is not Opcode.CONSTANT and o not in seen:
                seen.add(o)
                candidates.append(o)
    if not chosen:
        return False

    # Evaluate what the chosen values need, operands first (the computation's order).
    needed: set[Instruction] = set()
    stack = list(chosen)
    while stack:
        i = stack.pop()
        if i not in needed and i.opcode is not Opcode.CONSTANT:
            needed.add(i)
            stack.extend(i.operands)
    values: dict[Instruction, np.ndarray] = {}
    for instr in comp.instructions:
        if instr in needed:
            args = [o.literal if o.opcode is Opcode.CONSTANT else values[o]
                    for o in instr.operands]
            values[instr] = evaluate_instruction(instr, args)
    replaced: dict[Instruction, Instruction] = {}
    for v in chosen:
        # A copy: evaluated values may be views of operands (transpose), in any order.
        literal = np.array(values[v], dtype=v.shape.dtype.np, order="C").reshape(v.shape.dims)
        replaced[v] = comp.add(Instruction(Opcode.CONSTANT, v.shape, literal=literal,
                                           name=v.name))
    apply_replacements(comp, replaced)
    return True
