"""The step list: what the compiled code does, in order, with every buffer resolved.

    steps = build_steps(module, assignment, backend)
    print(format_steps(steps))          # xlac --emit steps

Built from the scheduled, buffer-assigned module and the backend's kernel choices,
before any code exists. A step is one of

    Loop         a loop nest over the result's elements, each computed by the element
                 generators of the instruction (a fusion's: of its fused computation)
    Kernel       a kernel of the backend's registry (a dot or convolution and its
                 epilogue, a quantized kernel, sort / topk / scatter) with its spec
    Copy         bytes from one buffer into another (a model output that lives
                 elsewhere, a concatenation's operand that could not be computed into
                 its slice, a loop body's output)
    While        the condition's steps, then, while its predicate holds, the body's
    Conditional  the steps of the branch its index picks

Each operand and result is a ``BufferSlice`` (optimizer/buffer_assignment.py): the
arena, a caller's input or output, or a constant. A renderer lowers the list: the CPU's
(entry.py) into LLVM functions; a second backend lowers the same list its own way.
Views, tuples, parameters and constants need no step: their slices are their
operands' bytes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from ..hlo import Computation, Instruction, Module, Opcode
from ..optimizer.buffer_assignment import BufferAssignment, BufferSlice

_NO_CODE = frozenset({Opcode.PARAMETER, Opcode.CONSTANT, Opcode.TUPLE,
                      Opcode.GET_TUPLE_ELEMENT})


@dataclass(frozen=True)
class Loop:
    instr: Instruction
    result: BufferSlice | tuple            # a tuple: one slice per element of the result
    operands: tuple[BufferSlice, ...]      # the operands read from memory (not constants)
    passed: tuple[int, ...]                # their operand numbers


@dataclass(frozen=True)
class Kernel:
    instr: Instruction
    kernel: object                         # the backend's choice: .name, .passed,
                                           # .scratch_bytes, and its spec
    result: BufferSlice | tuple
    operands: tuple[BufferSlice, ...]      # as the kernel takes them
    passed: tuple[int, ...]                # their operand numbers
    scratch: BufferSlice | None = None
    lean: bool = False                     # the variant with the least scratch


@dataclass(frozen=True)
class Copy:
    dst: BufferSlice
    src: BufferSlice
    instr: Instruction                     # the value copied


@dataclass(frozen=True)
class While:
    instr: Instruction
    condition: tuple                       # steps
    predicate: BufferSlice                 # the condition's result, read after its steps
    body: tuple                            # steps (its outputs' copies last)


@dataclass(frozen=True)
class Conditional:
    instr: Instruction
    index: BufferSlice                     # a pred (branch 0 when true) or an s32 index
    branches: tuple                        # steps per branch (the last one for any index
                                           # out of range)


Step = Union[Loop, Kernel, Copy, While, Conditional]


def build_steps(module: Module, assignment: BufferAssignment, backend) -> tuple:
    """The steps of the entry computation, then the copies of the model outputs that do
    not already live in the caller's output buffers. ``backend.kernel(instr, lean)``
    says which instructions run as kernels (None: a loop)."""
    outputs = tuple(BufferSlice("output", k, 0, o.shape.byte_size)
                    for k, o in enumerate(module.output_instructions))
    return _Builder(assignment, backend).steps(module.entry, assignment.order, outputs)


class _Builder:
    def __init__(self, assignment: BufferAssignment, backend):
        self.assignment = assignment
        self.backend = backend

    def steps(self, comp: Computation, order: list[Instruction], outputs: tuple | None) -> tuple:
        """``comp``'s steps in ``order``, then the copies of its outputs that do not
        already live in ``outputs`` (None: a loop condition, read where it is)."""
        out: list = []
        for instr in order:
            out.extend(self.instruction(instr))
        if outputs is not None:
            # A loop body's outputs live in its own buffers, never in another output's
            # place (control_flow.py copies rotated state elements), so the order of
            # these copies does not matter.
            for instr, target in zip(comp.outputs, outputs):
                here = self.assignment.slice(instr)
                if here.start != target.start and instr.shape.byte_size:
                    out.append(Copy(target, here, instr))
        return tuple(out)

    def callee(self, comp: Computation, outputs: tuple | None) -> tuple:
        return self.steps(comp, self.assignment.computations[comp].order, outputs)

    def instruction(self, instr: Instruction) -> list:
        a = self.assignment
        if instr.opcode in _NO_CODE or a.is_view(instr):
            return []
        if instr.opcode is Opcode.WHILE:
            cond, body = instr.called
            return [While(instr, self.callee(cond, None), a.slice(cond.root),
                          self.callee(body, a.leaves(instr)))]
        if instr.opcode is Opcode.CONDITIONAL:
            return [Conditional(instr, a.slice(instr.operands[0]),
                                tuple(self.callee(branch, a.leaves(instr))
                                      for branch in instr.called))]
        if instr.shape.num_elements == 0 and not instr.shape.is_tuple:
            return []
        if instr in a.concats_in_place:
            return self.concatenation(instr)
        lean = instr in a.lean_kernels
        kernel = self.backend.kernel(instr, lean)
        if kernel is None:
            passed = _not_constant(instr)
            return [Loop(instr, a.slice(instr), tuple(a.base(instr.operands[k]) for k in passed),
                         passed)]
        passed = kernel.passed
        scratch = (a.scratch_slice(instr, kernel.scratch_bytes) if kernel.scratch_bytes > 0
                   else None)
        return [Kernel(instr, kernel, a.slice(instr),
                       tuple(a.base(instr.operands[k]) for k in passed), passed, scratch, lean)]

    def concatenation(self, instr: Instruction) -> list:
        """A concatenation built in place: its operands' producers wrote into their
        slices; copy in only the operands that live elsewhere (inputs, constants, values
        that could not take a slot)."""
        out = self.assignment.slice(instr)
        copies, offset = [], 0
        for o in instr.operands:
            size = o.shape.byte_size
            slot = out.at(offset, size)
            here = self.assignment.slice(o)
            if size and here.start != slot.start:
                copies.append(Copy(slot, here, o))
            offset += size
        return copies


def _not_constant(instr: Instruction) -> tuple[int, ...]:
    """Operand numbers read from memory: all but constants, which the code embeds."""
    return tuple(k for k, o in enumerate(instr.operands) if o.opcode is not Opcode.CONSTANT)


def kernel_steps(steps) -> list[Kernel]:
    """Every Kernel step, inside loops and branches too."""
    found = []
    for s in steps:
        if isinstance(s, Kernel):
            found.append(s)
        elif isinstance(s, While):
            found += kernel_steps(s.condition) + kernel_steps(s.body)
        elif isinstance(s, Conditional):
            for branch in s.branches:
                found += kernel_steps(branch)
    return found


def format_steps(steps, indent: str = "") -> str:
    """The steps as text, one per line (``xlac --emit steps``)."""
    lines = []
    for s in steps:
        if isinstance(s, Loop):
            lines.append(f"{indent}loop %{s.instr.name} -> {_slices(s.result)}"
                         f"{_reads(s.operands)}")
        elif isinstance(s, Kernel):
            scratch = f" scratch {s.scratch}" if s.scratch is not None else ""
            lean = " (lean)" if s.lean else ""
            lines.append(f"{indent}kernel %{s.instr.name} {s.kernel.name}{lean} -> "
                         f"{_slices(s.result)}{_reads(s.operands)}{scratch}")
        elif isinstance(s, Copy):
            lines.append(f"{indent}copy %{s.instr.name} {s.src} -> {s.dst}")
        elif isinstance(s, While):
            lines.append(f"{indent}while %{s.instr.name} {{")
            lines.append(f"{indent}  condition:")
            lines.append(format_steps(s.condition, indent + "    "))
            lines.append(f"{indent}    predicate {s.predicate}")
            lines.append(f"{indent}  body:")
            lines.append(format_steps(s.body, indent + "    "))
            lines.append(f"{indent}}}")
        else:
            lines.append(f"{indent}conditional %{s.instr.name} on {s.index} {{")
            for k, branch in enumerate(s.branches):
                lines.append(f"{indent}  branch {k}:")
                lines.append(format_steps(branch, indent + "    "))
            lines.append(f"{indent}}}")
    return "\n".join(line for line in lines if line)


def _slices(s) -> str:
    return "(" + ", ".join(map(str, s)) + ")" if isinstance(s, tuple) else str(s)


def _reads(operands) -> str:
    return " reads " + ", ".join(map(str, operands)) if operands else ""

