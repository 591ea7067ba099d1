"""Helpers for tests written as HLO text, as XLA writes its pass tests: parse a small
module, run a pass, compare the printed result with the expected text.

Snippets may use XLA's short form (``add(%x, %y)``, default layouts left out); ``short``
prints a module that way, and ``assert_hlo`` compares both sides in it, so that an
expected text reads like the input and still names every instruction, shape and
attribute of the result.
"""
from __future__ import annotations

import re

import numpy as np

from xlac.backends import make_backend
from xlac.hlo import Module
from xlac.hlo.evaluator import evaluate
from xlac.hlo.text import parse_module, print_module
from xlac.hlo.verifier import verify

_SHAPE_LAYOUT = re.compile(r"\[([0-9,]*)\]\{([0-9,]*)\}")
# An operand's shape before its name: "f32[2,3] %x", "f32[2,3]{0,1} %x" or
# "(f32[2], s32[2]) %t"; the operand's own definition shows it.
_ARRAY = r"[a-z][a-z0-9]*\[[0-9,]*\](?:\{[0-9,]*\})?"
_OPERAND_SHAPE = re.compile(rf"(?:\((?:{_ARRAY}(?:, )?)+\)|{_ARRAY}) (?=%)")


# The CPU backend of an explicit target, for the passes' questions (which kernels take
# which epilogues, which layouts they want): the answers do not depend on the machine
# the tests run on.
CPU = make_backend("x86_64-unknown-linux-gnu", "x86-64-v3")


class ScratchPolicy:
    """A memory planner's backend (optimizer/policy.py's MemoryPolicy) with the given
    alignment and kernel scratch: ``scratch(instr)`` bytes, ``lean(instr)`` for the
    kernel's lean variant (default: the same)."""

    def __init__(self, alignment: int = 64, scratch=lambda i: 0, lean=None):
        self.alignment = alignment
        self._scratch, self._lean = scratch, lean or scratch

    def scratch_bytes(self, instr, lean: bool = False) -> int:
        return (self._lean if lean else self._scratch)(instr)


def module_with(b, root, *callees) -> Module:
    """A module named 'm' whose entry is ``b`` built with ``root``; ``callees`` (reducers,
    fused computations) are added before it. For generated graphs; write fixed ones as
    text."""
    m = Module("m")
    for c in callees:
        m.add_computation(c)
    m.add_computation(b.build(root), entry=True)
    return m


def _with_header(text: str) -> str:
    text = text.strip() + "\n"
    return text if text.startswith("HloModule") else "HloModule m\n\n" + text


def parse(text: str) -> Module:
    """The module of ``text``, which may leave out the ``HloModule m`` line."""
    return parse_module(_with_header(text))


def _drop_default_layout(m: re.Match) -> str:
    rank = len(m.group(1).split(",")) if m.group(1) else 0
    default = ",".join(str(d) for d in reversed(range(rank)))
    return f"[{m.group(1)}]" if m.group(2) == default else m.group(0)


def _shorten(text: str) -> str:
    return _OPERAND_SHAPE.sub("", _SHAPE_LAYOUT.sub(_drop_default_layout, text))


def short(module: Module, large_constants: bool = True) -> str:
    """The module's text without operand shapes and default (major-to-minor) layouts;
    with ``large_constants=False``, constants over 64 elements read ``{...}``."""
    return _shorten(print_module(module, large_constants))


def assert_hlo(module: Module, expected: str) -> None:
    """``module`` prints as ``expected``. An expected text that leaves large constants out
    (``{...}``) cannot be parsed: it is compared as written, in the short form."""
    if "{...}" in expected:
        assert short(module, large_constants=False) == _shorten(_with_header(expected))
    else:
        assert short(module) == short(parse(expected))


def named(module: Module, name: str):
    """The entry instruction called %``name``."""
    return next(i for i in module.entry.instructions if i.name == name)


def run_pass(passes, text: str, verify_after: bool = True) -> tuple[bool, Module]:
    """Parse ``text`` and run ``passes`` (one pass or a list) on it in order; whether the
    first changed the module, and the module."""
    m = parse(text)
    passes = passes if isinstance(passes, (list, tuple)) else [passes]
    changed = passes[0].run(m)
    for p in passes[1:]:
        p.run(m)
    if verify_after:
        verify(m)
    return changed, m


def args_for(module: Module, seed: int = 0) -> list[np.ndarray]:
    """Deterministic arguments for the entry's parameters: small integers (exact in any
    type) shifted to include negatives."""
    rng = np.random.default_rng(seed)
    return [rng.integers(-4, 5, p.shape.dims).astype(p.shape.dtype.np)
            for p in module.entry.parameters]


def assert_same_values(before: Module, after: Module, rtol: float = 0.0) -> None:
    """``after`` computes what ``before`` computes, on the same arguments."""
    args = args_for(before)
    for a, b in zip(evaluate(before, args), evaluate(after, args), strict=True):
        np.testing.assert_allclose(b, a, rtol=rtol)
