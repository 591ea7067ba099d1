"""Common subexpression elimination.

Two instructions are the same value when they have the same opcode, shape
(layout included), operands, attributes and called computations, or, for
constants, the same literal. Constants are keyed by a hash of their bytes and
confirmed by a byte comparison, so weights are hashed once and never compared
element by element. Parameters are never merged (each is a distinct input).
"""
from __future__ import annotations

from ..hlo import Computation, Instruction, Module, Opcode


class CommonSubexpressionElimination:
    name = "cse"

    def run(self, module: Module) -> bool:
        changed = False
        for comp in module.computations:
            changed |= _cse_computation(comp)
        return changed


def _key(instr: Instruction) -> tuple:
    if instr.opcode is Opcode.CONSTANT:
        data = instr.literal.tobytes()
        return (Opcode.CONSTANT, instr.shape, hash(data))
    return (instr.opcode, instr.shape, tuple(id(o) for o in instr.operands),
            tuple(sorted(instr.attrs.items())), tuple(id(c) for c in instr.called))


def _same_literal(a: Instruction, b: Instruction) -> bool:
    return a.literal.tobytes() == b.literal.tobytes()


def _cse_computation(comp: Computation) -> bool:
    replaced: dict[Instruction, Instruction] = {}
    seen: dict[tuple, list[Instruction]] = {}
    # One walk in def-before-use order: operands are rewritten to their
    # representatives before an instruction is keyed, so chains merge in one pass.
    for instr in comp.instructions:
        instr.operands = [replaced.get(o, o) for o in instr.operands]
        if instr.opcode is Opcode.PARAMETER:
            continue
        candidates = seen.setdefault(_key(instr), [])
        same = next((c for c in candidates if instr.opcode is not Opcode.CONSTANT
                     or _same_literal(c, instr)), None)
        if same is None:
            candidates.append(instr)
        else:
            replaced[instr] = same
    if not replaced:
        return False
    comp.instructions = [i for i in comp.instructions if i not in replaced]
    comp.root = replaced.get(comp.root, comp.root)
    return True
