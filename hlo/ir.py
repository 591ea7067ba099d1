"""Instructions, computations and modules.

A Computation holds its instructions in an order where every operand comes
before its users; ``root`` is its result. A Module holds the computations
(callees before callers) and the entry computation, plus the signature that
maps entry parameters / root to the source model's named inputs and outputs.
"""
from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from .dtypes import DType
from .opcodes import Opcode
from .shape import Shape


@dataclass(frozen=True)
class OpMetadata:
    """Which node of the source model an instruction comes from (XLA's OpMetadata):
    reports name it (``--report-memory``); nothing is compiled from it."""
    op_type: str        # "Conv"
    op_name: str        # the node's name, else its first output

    def __str__(self) -> str:
        return f"{self.op_type} '{self.op_name}'"


class Instruction:
    __slots__ = ("opcode", "shape", "operands", "attrs", "called", "literal", "name", "metadata")

    def __init__(self, opcode: Opcode, shape: Shape, operands: Iterable["Instruction"] = (),
                 attrs: dict | None = None, called: Iterable["Computation"] = (),
                 literal: np.ndarray | None = None, name: str | None = None,
                 metadata: OpMetadata | None = None):
        self.opcode = opcode
        self.shape = shape
        self.operands = list(operands)
        self.attrs = dict(attrs or {})
        self.called = list(called)
        self.literal = literal
        self.name = name
        self.metadata = metadata

    def __repr__(self) -> str:
        return f"%{self.name} = {self.shape} {self.opcode.text}(...)"

    @property
    def number(self) -> int:
        """The parameter number (parameters only)."""
        return self.attrs["number"]


class Computation:
    def __init__(self, name: str):
        self.name = name
        self.instructions: list[Instruction] = []
        self.root: Instruction | None = None
        self._names = _NameUniquer()

    # -- building --
    def add(self, instr: Instruction) -> Instruction:
        instr.name = self._names.unique(instr.name or instr.opcode.text)
        self.instructions.append(instr)
        return instr

    @property
    def parameters(self) -> list[Instruction]:
        ps = [i for i in self.instructions if i.opcode is Opcode.PARAMETER]
        return sorted(ps, key=lambda i: i.attrs["number"])

    @property
    def outputs(self) -> list[Instruction]:
        """The values the computation returns: the root's operands if it is a tuple."""
        if self.root.opcode is Opcode.TUPLE:
            return list(self.root.operands)
        return [self.root]

    def users(self) -> dict[Instruction, list[Instruction]]:
        """Users of every instruction (computed fresh: passes mutate the graph)."""
        out: dict[Instruction, list[Instruction]] = {i: [] for i in self.instructions}
        for i in self.instructions:
            for o in i.operands:
                if i not in out[o]:
                    out[o].append(i)
        return out

    # -- rewriting --
    def replace_all_uses(self, old: Instruction, new: Instruction) -> None:
        for i in self.instructions:
            i.operands = [new if o is old else o for o in i.operands]
        if self.root is old:
            self.root = new

    def replace_instruction(self, old: Instruction, new: Instruction) -> None:
        """Insert ``new`` (if not present) where ``old`` was, redirect uses, drop ``old``;
        ``new`` comes from ``old``'s source node unless it says otherwise."""
        if new.metadata is None:
            new.metadata = old.metadata
        if new not in self.instructions:
            new.name = self._names.unique(new.name or new.opcode.text)
            self.instructions.insert(self.instructions.index(old), new)
        self.replace_all_uses(old, new)
        self.instructions.remove(old)
        self.sort()

    def remove(self, instr: Instruction) -> None:
        self.instructions.remove(instr)

    def sort(self) -> None:
        """Restore def-before-use order, keeping the current order where it is valid."""
        position = {id(i): n for n, i in enumerate(self.instructions)}
        done: set[int] = set()
        order: list[Instruction] = []
        for start in self.instructions:
            stack = [(start, 0)]
            while stack:
                node, k = stack.pop()
                if id(node) in done:
                    continue
                if k < len(node.operands):
                    stack.append((node, k + 1))
                    op = node.operands[k]
                    if id(op) not in done:
                        if id(op) not in position:
                            raise ValueError(f"operand %{op.name} of %{node.name} is not in "
                                             f"computation {self.name}")
                        stack.append((op, 0))
                else:
                    done.add(id(node))
                    order.append(node)
        self.instructions = order

    def reachable(self) -> list[Instruction]:
        """Instructions the root depends on, in the current order (parameters always kept)."""
        live: set[int] = {id(self.root)}
        for i in reversed(self.instructions):
            if id(i) in live:
                live.update(id(o) for o in i.operands)
        return [i for i in self.instructions
                if id(i) in live or i.opcode is Opcode.PARAMETER]


@dataclass(frozen=True)
class TensorSpec:
    """A named input or output of the source model."""
    name: str
    dtype: DType
    dims: tuple[int, ...]
    # (scale, zero point) of an 8-bit port that holds a quantized tensor (int8_io)
    quantization: tuple[float, int] | None = None


@dataclass(frozen=True)
class ValueSpec:
    """A named input or output of the source model as the model declares it, over the
    flat tensors of the signature: a tensor (``count`` 1), a sequence (its elements, any
    number: each a tensor of its own shape) or an optional's content, which is nothing
    when it is compiled empty (``kind`` "absent", ``count`` 0). Its tensors are the next
    ``count`` entries of ``Signature.inputs`` / ``outputs``."""
    name: str
    kind: str                  # "tensor", "sequence" or "absent"
    count: int
    optional: bool = False     # the model declares it an optional

    KINDS = ("tensor", "sequence", "absent")


@dataclass
class Signature:
    inputs: list[TensorSpec] = field(default_factory=list)    # entry parameter i
    outputs: list[TensorSpec] = field(default_factory=list)   # root, or tuple element i
    # The model's own inputs and outputs over those tensors; empty: one tensor each.
    input_values: list[ValueSpec] = field(default_factory=list)
    output_values: list[ValueSpec] = field(default_factory=list)

    def values(self, which: str) -> list[ValueSpec]:
        """``input_values`` or ``output_values`` ("inputs" / "outputs"), or one tensor
        value per tensor where the front end gave none."""
        given = self.input_values if which == "inputs" else self.output_values
        tensors = self.inputs if which == "inputs" else self.outputs
        return list(given) or [ValueSpec(t.name, "tensor", 1) for t in tensors]


class Module:
    def __init__(self, name: str):
        self.name = name
        self.computations: list[Computation] = []   # callees before callers; entry last
        self.entry: Computation | None = None
        self.signature: Signature | None = None
        self.notes: list[str] = []     # what the front end did that the report should say
        # The most intermediate bytes live at once in the source model's own node order
        # (the ONNX file's), where the front end was asked for it: the report's bound.
        self.source_order_bound: int | None = None
        self._names = _NameUniquer()

    def add_computation(self, comp: Computation, entry: bool = False,
                        before: Computation | None = None) -> Computation:
        """Add ``comp`` (uniquely named): as the entry, last; else before ``before``
        (its caller) or the entry, so that callees stay before their callers."""
        comp.name = self._names.unique(comp.name)
        if entry:
            self.computations.append(comp)
            self.entry = comp
        elif before is not None:
            self.computations.insert(self.computations.index(before), comp)
        elif self.entry is not None:
            self.computations.insert(self.computations.index(self.entry), comp)
        else:
            self.computations.append(comp)
        return comp

    def remove_computation(self, comp: Computation) -> None:
        self.computations.remove(comp)

    def clone(self) -> "Module":
        """A copy to rewrite on its own: new computations and instructions (the constants'
        arrays shared: no pass writes into one), the same names, and name scopes that
        go on as this module's would."""
        out = Module(self.name)
        out.signature, out.notes = self.signature, list(self.notes)
        out.source_order_bound = self.source_order_bound
        out._names = self._names.copy()
        comps: dict[int, Computation] = {}
        for comp in self.computations:          # callees first: called ones are mapped
            c = Computation(comp.name)
            c._names = comp._names.copy()
            mapped: dict[int, Instruction] = {}
            for i in comp.instructions:
                mapped[id(i)] = Instruction(
                    i.opcode, i.shape, [mapped[id(o)] for o in i.operands], i.attrs,
                    [comps[id(x)] for x in i.called], i.literal, i.name, i.metadata)
                c.instructions.append(mapped[id(i)])
            c.root = mapped[id(comp.root)]
            comps[id(comp)] = c
            out.computations.append(c)
        out.entry = comps[id(self.entry)]
        return out

    @property
    def output_instructions(self) -> list[Instruction]:
        """The values of the model's outputs: the root's operands if it is a tuple."""
        return self.entry.outputs


class _NameUniquer:
    """Makes names unique within a scope, XLA-style: add, add.1, add.2..."""

    def __init__(self):
        self._used: set[str] = set()
        self._counter = itertools.count(1)

    def copy(self) -> "_NameUniquer":
        out = _NameUniquer()
        out._used = set(self._used)
        out._counter = copy.copy(self._counter)
        return out

    def unique(self, name: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_.\-]", "_", name) or "x"
        if base in self._used:
            base = re.sub(r"\.\d+$", "", base)
            cand = f"{base}.{next(self._counter)}"
            while cand in self._used:
                cand = f"{base}.{next(self._counter)}"
            base = cand
        self._used.add(base)
        return base
