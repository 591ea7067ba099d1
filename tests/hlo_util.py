"""Small helpers for tests that build HLO modules with xlac.hlo.Builder."""
from __future__ import annotations

from xlac.hlo import Module


def module_with(b, root, *callees) -> Module:
    """A module named 'm' whose entry is ``b`` built with ``root``; ``callees`` (reducers,
    fused computations) are added before it."""
    m = Module("m")
    for c in callees:
        m.add_computation(c)
    m.add_computation(b.build(root), entry=True)
    return m
