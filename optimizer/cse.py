"""Common subexpression elimination.

Two instructions are the same value when they have the same opcode, shape
(layout included), operands, attributes and called computations, or, for
constants, the same bytes. Constants are keyed by a hash of a sample of their
bytes and confirmed by a full byte comparison only when the keys match, so
large weights are neither copied nor hashed whole. Parameters are never merged
(each is a distinct input).
"""
from __future__ import annotations

import numpy as np

from ..hlo import Computation, Instruction, Opcode
from .pipeline import ComputationPass


class CommonSubexpressionElimination(ComputationPass):
    name = "cse"

    def run_on_computation(self, comp: Computation) -> bool:
        return _cse_computation(comp)


def _key(instr: Instruction) -> tuple:
    if instr.opcode is Opcode.CONSTANT:
        return (Opcode.CONSTANT, instr.shape, _fingerprint(instr.literal))
    return (instr.opcode, instr.shape, tuple(id(o) for o in instr.operands),
            tuple(sorted(instr.attrs.items())), tuple(id(c) for c in instr.called))


_SAMPLE = 4096     # bytes of a literal that go into its hash key


def _bytes_of(literal: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(literal).reshape(-1).view(np.uint8)


def _fingerprint(literal: np.ndarray) -> int:
    """A hash of an evenly spaced sample of the literal's bytes: weights of hundreds of
    MB are keyed without copying them; equal keys are confirmed by ``_same_literal``."""
    data = _bytes_of(literal)
    step = max(1, data.size // _SAMPLE)
    return hash(data[::step].tobytes())


def _same_literal(a: Instruction, b: Instruction) -> bool:
    return np.array_equal(_bytes_of(a.literal), _bytes_of(b.literal))


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
