"""The memory model of one computation (the entry, or a while body or condition or
a conditional branch, each planned on its own): logical buffers, and how a
schedule turns them into alloc/free events.

A *logical buffer* is storage some owners share for good (aliasing.py): one
owner alone, or a concatenation together with the producers written into its
slices (``concat_slots``). It is allocated when the first of its definers runs
and freed after the last instruction that reads any of its bytes (through views
and tuples); a model output that is copied out at the end stays live to the
end. Owners written straight into the caller's outputs are placed there, not in
the arena. For a loop body or a branch the "outputs" are the places of the loop
state's elements or of the conditional's result (aliasing.output_slots), and the
parameter's elements are the caller's bytes, as the entry's inputs are.

A while or conditional runs its called computations at its step: their own arena
(planned first, on its own) is that step's scratch, so its bytes may overlap any
buffer not live across the step.

In-place writes depend on the order, so ``MemoryModel.events(order)`` decides
them as XLA's heap simulator shares buffers: an instruction that may overwrite
an operand (``aliasing.in_place_operands``) takes over that operand's storage
when it is the storage's last reader, instead of allocating its own.

Events at step t (instruction ``order[t]``): alloc the storage it defines (if
not shared), alloc then free its kernel's scratch, then free every storage whose
last reader is t. A result is allocated before its operands are freed because
kernels read operands while writing the result.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Hashable

from ..hlo import Computation, Instruction, Module, Opcode
from .aliasing import (buffer_size, buffers_of, concat_slots, in_place_operands,
                       loop_state_owners, output_slots, owns_buffer)
from .control_flow import caller_of

ScratchFn = Callable[[Instruction], int]


@dataclass(frozen=True)
class Scratch:
    """Heap key of the temporary memory of one instruction's kernel."""
    instr: Instruction


@dataclass(frozen=True)
class Event:
    kind: str            # 'alloc' | 'free'
    buffer: Hashable     # a LogicalBuffer (the storage), or Scratch(instr)
    size: int


@dataclass(eq=False)
class LogicalBuffer:
    root: Instruction                    # the owner whose storage it is
    size: int
    definers: list[Instruction]          # owners writing into it (the root included)
    readers: set[Instruction] = field(default_factory=set)
    live_out: bool = False               # copied into an output at the end
    output: int | None = None            # in the caller's output buffer k, not the arena

    def __repr__(self) -> str:
        return f"LogicalBuffer(%{self.root.name}, {self.size})"


@dataclass
class Simulation:
    """What ``MemoryModel.events`` made of one order."""
    events: list[Event]
    storage: dict[LogicalBuffer, LogicalBuffer]   # arena buffer -> the storage it ended up in
    in_place: dict[Instruction, Instruction]      # instruction -> operand owner it overwrote
    # arena buffer -> (step of its first definer, step of its last reader; len(order) when
    # it is copied out at the end): its own live range, within its storage's.
    ranges: dict[LogicalBuffer, tuple[int, int]] = field(default_factory=dict)


class MemoryModel:
    """Logical buffers of one computation of ``module`` (the entry unless
    ``computation`` is given) and the in-place options of each instruction."""

    def __init__(self, module: Module, alignment: int = 1, scratch: ScratchFn | None = None,
                 concat_in_place: bool = True, computation: Computation | None = None):
        comp = computation or module.entry
        self.module = module
        self.comp = comp
        self.alignment = alignment
        caller = None if comp is module.entry else caller_of(module, comp)
        # A while condition's result (the pred) has no place of its own outside.
        condition = caller is not None and caller.opcode is Opcode.WHILE \
            and comp is caller.called[0]
        slots = {} if condition else output_slots(
            comp, loop_body=caller is not None and caller.opcode is Opcode.WHILE)
        outputs = comp.outputs
        # Owners of an output's chain that the next one overwrites there, in any order.
        overwritten = {q for q in slots if not any(q in buffers_of(out) for out in outputs)}
        # A loop overwrites its state where the init's elements are: they take no slot
        # of a concatenation, whose other readers would see the loop's writes.
        self.concat_slots = (concat_slots(comp, excluded=set(slots) | loop_state_owners(comp),
                                          overwritten=overwritten)
                             if concat_in_place else {})
        # owner -> (logical buffer, byte offset in it), for computed owners.
        self.placement: dict[Instruction, tuple[LogicalBuffer, int]] = {}
        self.buffers: list[LogicalBuffer] = []
        for i in reversed(comp.instructions):       # a concat before its operands
            if not owns_buffer(i) or i.opcode in (Opcode.PARAMETER, Opcode.CONSTANT):
                continue
            if i in self.concat_slots:
                concat, off = self.concat_slots[i]
                buf, base = self.placement[concat]
                buf.definers.append(i)
                self.placement[i] = (buf, base + off)
            else:
                buf = LogicalBuffer(i, buffer_size(i.shape, alignment), [i], output=slots.get(i))
                self.buffers.append(buf)
                self.placement[i] = (buf, 0)
        for i in comp.instructions:
            for o in i.operands:
                for owner in buffers_of(o):
                    if owner in self.placement:
                        self.placement[owner][0].readers.add(i)
        for out in outputs:
            for owner in buffers_of(out):
                if owner in self.placement:
                    buf = self.placement[owner][0]
                    buf.live_out |= buf.output is None
        self.arena = [b for b in self.buffers if b.output is None and b.size > 0]
        # Instruction -> the arena buffers it may overwrite when it is their last reader.
        self.in_place: dict[Instruction, list[LogicalBuffer]] = {}
        for i in comp.instructions:
            own = self.placement.get(i)
            if own is None or own[0].root is not i or len(own[0].definers) != 1 \
                    or own[0].output is not None:
                continue
            options = []
            eligible = in_place_operands(i)
            for k in eligible:
                (owner,) = buffers_of(i.operands[k])
                buf, off = self.placement.get(owner, (None, 0))
                if (buf is not None and buf.output is None and not buf.live_out and off == 0
                        and buf.size == own[0].size and buf not in options
                        and self._read_only_element_wise(i, buf, eligible)):
                    options.append(buf)
            if options:
                self.in_place[i] = options
        # Overwrites fixed by the slots: an instruction -> the operand it overwrites there.
        users = comp.users()
        self.slot_in_place = {users[q][0]: q for q, (c, _) in self.concat_slots.items()
                              if q not in c.operands}
        self.slot_in_place.update((users[q][0], q) for q in overwritten)
        self.scratch = {i: scratch(i) for i in comp.instructions} if scratch else {}

    def _read_only_element_wise(self, i: Instruction, buf: LogicalBuffer,
                                eligible: list[int]) -> bool:
        """Whether every operand of ``i`` that reads bytes of ``buf`` reads it element by
        element (one of ``eligible``): overwriting element j could otherwise clobber an
        element another operand still reads (a sibling slice of a concatenation)."""
        return all(k in eligible for k, o in enumerate(i.operands)
                   for owner in buffers_of(o)
                   if self.placement.get(owner, (None, 0))[0] is buf)

    def events(self, order: list[Instruction]) -> Simulation:
        """Replay ``order`` (every instruction of the computation once, operands first)."""
        end = len(order)
        pos = {i: t for t, i in enumerate(order)}
        first = {b: min(pos[d] for d in b.definers) for b in self.arena}
        last = {b: end if b.live_out else max((pos[r] for r in b.readers), default=first[b])
                for b in self.arena}
        storage = {b: b for b in self.arena}
        storage_end = dict(last)                     # per storage: its last reader
        in_place: dict[Instruction, Instruction] = dict(self.slot_in_place)
        for t, i in enumerate(order):
            for victim in self.in_place.get(i, ()):
                s = storage[victim]
                if last[victim] == t and storage_end[s] == t:
                    mine = self.placement[i][0]
                    storage[mine] = s
                    storage_end[s] = last[mine]
                    in_place[i] = victim.root
                    break
        allocs: dict[int, list[LogicalBuffer]] = {}
        frees: dict[int, list[LogicalBuffer]] = {}
        for b, s in storage.items():
            if s is b:
                allocs.setdefault(first[b], []).append(b)
                frees.setdefault(storage_end[b], []).append(b)
        events: list[Event] = []
        for t, instr in enumerate(order):
            events += [Event("alloc", b, b.size) for b in allocs.get(t, ())]
            extra = self.scratch.get(instr, 0)
            if extra > 0:
                events += [Event("alloc", Scratch(instr), extra),
                           Event("free", Scratch(instr), extra)]
            events += [Event("free", b, b.size) for b in frees.get(t, ())]
        events += [Event("free", b, b.size) for b in frees.get(end, ())]
        ranges = {b: (first[b], last[b]) for b in self.arena}
        return Simulation(events, storage, in_place, ranges)
