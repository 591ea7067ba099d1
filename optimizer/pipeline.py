"""Passes and pipelines.

A pass is any object with a ``name`` and ``run(module) -> bool`` (True when it
changed the module). A ``Pipeline`` is itself a pass: it runs its passes in
order, optionally to a fixed point, and after every pass that changed the
module it can run the verifier and call a ``dump(name, module)`` hook with
``name`` = "pipeline/pass" (the CLI uses it to print the module after each pass).
"""
from __future__ import annotations

from typing import Callable, Protocol, Sequence

from ..hlo import Module
from ..hlo.verifier import verify

DumpHook = Callable[[str, Module], None]


class Pass(Protocol):
    name: str

    def run(self, module: Module) -> bool: ...


class ComputationPass:
    """A pass that rewrites every computation on its own: subclasses define
    ``run_on_computation(comp) -> bool``."""
    name: str

    def run(self, module: Module) -> bool:
        changed = False
        for comp in module.computations:
            changed |= self.run_on_computation(comp)
        return changed


class Pipeline:
    # A fixed-point pipeline that still changes the module after this many rounds
    # has two rules undoing each other; stop rather than loop forever.
    MAX_ROUNDS = 32

    def __init__(self, name: str, passes: Sequence[Pass], fixed_point: bool = False,
                 verify: bool = False, dump: DumpHook | None = None):
        self.name = name
        self.passes = list(passes)
        self.fixed_point = fixed_point
        self.verify = verify
        self.dump = dump

    def run(self, module: Module) -> bool:
        changed_any = False
        for _ in range(self.MAX_ROUNDS if self.fixed_point else 1):
            changed = False
            for p in self.passes:
                if p.run(module):
                    changed = True
                    # A nested pipeline already verified and dumped after its own passes.
                    if not isinstance(p, Pipeline):
                        self._after(p.name, module)
            changed_any |= changed
            if not changed:
                break
        return changed_any

    def _after(self, pass_name: str, module: Module) -> None:
        if self.verify:
            verify(module)
        if self.dump is not None:
            self.dump(f"{self.name}/{pass_name}", module)
