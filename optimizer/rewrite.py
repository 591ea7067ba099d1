"""Batched graph rewriting shared by the passes.

``Computation.replace_instruction`` re-sorts the computation on every call,
which is quadratic for a pass that rewrites hundreds of instructions of a
large model. Passes instead collect ``old -> new`` replacements in one walk and
apply them here at once.
"""
from __future__ import annotations

from ..hlo import Computation, Instruction


def apply_replacements(comp: Computation, replaced: dict[Instruction, Instruction]) -> None:
    """Redirect every use of each key to its value, drop the keys, and restore
    def-before-use order once. Values must not themselves be keys, and new values
    must already be in ``comp`` (``comp.add``). A value without metadata takes its
    key's: it computes what the key did."""
    for old, new in replaced.items():
        if new.metadata is None:
            new.metadata = old.metadata
    for instr in comp.instructions:
        instr.operands = [replaced.get(o, o) for o in instr.operands]
    comp.root = replaced.get(comp.root, comp.root)
    comp.instructions = [i for i in comp.instructions if i not in replaced]
    comp.sort()
