"""Dead code elimination: instructions the root does not need, computations nobody calls.

Parameters always stay: an entry parameter is part of the model's signature, and
a called computation's parameters must match its caller's operands.
"""
from __future__ import annotations

from ..hlo import Computation, Module
from .pipeline import ComputationPass


class DeadCodeElimination(ComputationPass):
    name = "dce"

    def run_on_computation(self, comp: Computation) -> bool:
        return remove_dead_instructions(comp)

    def run(self, module: Module) -> bool:
        changed = super().run(module)
        return remove_dead_computations(module) or changed


def remove_dead_instructions(comp: Computation) -> bool:
    live = comp.reachable()
    if len(live) == len(comp.instructions):
        return False
    comp.instructions = live
    return True


def remove_dead_computations(module: Module) -> bool:
    called: set[int] = {id(module.entry)}
    # Computations are stored callees first, so one walk from the entry (last) back
    # to the front sees every caller before its callees.
    for comp in reversed(module.computations):
        if id(comp) in called:
            for instr in comp.instructions:
                called.update(id(c) for c in instr.called)
    dead = [c for c in module.computations if id(c) not in called]
    for comp in dead:
        module.remove_computation(comp)
    return bool(dead)
