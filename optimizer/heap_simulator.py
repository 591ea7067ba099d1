"""Heap simulation: replay a schedule as alloc/free events into a heap algorithm.

As in XLA, the simulator turns an order of the entry computation into a
sequence of ``alloc(buffer, size)`` / ``free(buffer, size)`` calls, and a heap
algorithm behind that interface decides what the events cost. ``PeakHeap``
counts bytes live at once (what schedulers minimize, and the lower bound of
any packing); ``BestFitHeap`` places each buffer at a fixed offset, which is
buffer assignment's packing.

Events at step t (instruction ``order[t]``): alloc its arena buffer, alloc
then free its scratch, then free every buffer whose last use is t. A result is
allocated before its operands are freed because kernels read operands while
writing the result. A buffer is used by every instruction that reads it,
through views and tuples; model outputs not written into the caller's buffers
stay live to the end (the emitter copies them out last).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Hashable, Protocol

from ..hlo import Instruction, Module
from .aliasing import align_up, arena_buffers, buffers_of

ScratchFn = Callable[[Instruction], int]


@dataclass(frozen=True)
class Scratch:
    """Heap key of the temporary memory of one instruction's kernel."""
    instr: Instruction


@dataclass(frozen=True)
class Event:
    kind: str            # 'alloc' | 'free'
    buffer: Hashable     # an owning Instruction, or Scratch(instr)
    size: int


@dataclass
class HeapResult:
    size: int                                        # bytes the heap needs
    offsets: dict[Hashable, int] = field(default_factory=dict)


class HeapAlgorithm(Protocol):
    def alloc(self, buffer: Hashable, size: int) -> None: ...

    def free(self, buffer: Hashable, size: int) -> None: ...

    def finish(self) -> HeapResult: ...


def heap_events(module: Module, order: list[Instruction], alignment: int = 1,
                scratch: ScratchFn | None = None) -> list[Event]:
    sizes = arena_buffers(module, alignment)
    end = len(order)
    last_use: dict[Instruction, int] = {}
    for t, instr in enumerate(order):
        if instr in sizes:
            last_use.setdefault(instr, t)
        for o in instr.operands:
            for b in buffers_of(o):
                if b in sizes:
                    last_use[b] = t
    for out in module.output_instructions:
        for b in buffers_of(out):
            if b in sizes:
                last_use[b] = end
    frees: dict[int, list[Instruction]] = {}
    for b, t in last_use.items():
        frees.setdefault(t, []).append(b)

    events: list[Event] = []
    for t, instr in enumerate(order):
        if instr in sizes and sizes[instr] > 0:
            events.append(Event("alloc", instr, sizes[instr]))
        extra = scratch(instr) if scratch is not None else 0
        if extra > 0:
            events += [Event("alloc", Scratch(instr), extra), Event("free", Scratch(instr), extra)]
        events += [Event("free", b, sizes[b]) for b in frees.get(t, ()) if sizes[b] > 0]
    events += [Event("free", b, sizes[b]) for b in frees.get(end, ()) if sizes[b] > 0]
    return events


def simulate(events: list[Event], heap: HeapAlgorithm) -> HeapResult:
    for e in events:
        (heap.alloc if e.kind == "alloc" else heap.free)(e.buffer, e.size)
    return heap.finish()


def simulate_peak(module: Module, order: list[Instruction], alignment: int = 1,
                  scratch: ScratchFn | None = None) -> int:
    """The most arena bytes live at once when running ``order``."""
    return simulate(heap_events(module, order, alignment, scratch), PeakHeap()).size


class PeakHeap:
    """No fragmentation: the cost is the peak of the bytes live at once."""

    def __init__(self):
        self.live = 0
        self.peak = 0

    def alloc(self, buffer, size):
        self.live += size
        self.peak = max(self.peak, self.live)

    def free(self, buffer, size):
        self.live -= size

    def finish(self) -> HeapResult:
        return HeapResult(self.peak)


@dataclass
class _Interval:
    buffer: Hashable
    size: int
    start: int           # event clock of its alloc
    end: int             # event clock of its free
    offset: int = -1


class BestFitHeap:
    """Global best fit (XLA's GlobalDecreasingSizeBestFitHeap, generalized).

    Collects every buffer's live interval, then places buffers one at a time in
    the order given by ``sort_key``: each goes into the smallest gap between
    buffers already placed whose intervals overlap its own, or on top of them.
    """

    def __init__(self, alignment: int, sort_key: Callable[[_Interval], tuple]):
        self.alignment = alignment
        self.sort_key = sort_key
        self.clock = 0
        self.open: dict[Hashable, _Interval] = {}
        self.closed: list[_Interval] = []

    def alloc(self, buffer, size):
        self.open[buffer] = _Interval(buffer, size, self.clock, -1)
        self.clock += 1

    def free(self, buffer, size):
        iv = self.open.pop(buffer)
        iv.end = self.clock
        self.clock += 1
        self.closed.append(iv)

    def finish(self) -> HeapResult:
        placed: list[_Interval] = []
        for iv in sorted(self.closed, key=self.sort_key):
            busy = sorted((p.offset, p.offset + p.size) for p in placed
                          if p.start < iv.end and iv.start < p.end)
            iv.offset = self._best_fit(busy, iv.size)
            placed.append(iv)
        size = max((iv.offset + iv.size for iv in placed), default=0)
        return HeapResult(align_up(size, self.alignment),
                          {iv.buffer: iv.offset for iv in placed})

    def _best_fit(self, busy: list[tuple[int, int]], size: int) -> int:
        best: tuple[int, int] | None = None          # (gap length, offset)
        top = 0
        for lo, hi in busy:
            start = align_up(top, self.alignment)
            if lo - start >= size and (best is None or lo - start < best[0]):
                best = (lo - start, start)
            top = max(top, hi)
        return best[1] if best is not None else align_up(top, self.alignment)


# Orders in which BestFitHeap places buffers; buffer assignment keeps the best.
PACKING_ORDERS: dict[str, Callable[[_Interval], tuple]] = {
    "size": lambda iv: (-iv.size, iv.start),
    "start": lambda iv: (iv.start, -iv.size),
    "area": lambda iv: (-iv.size * (iv.end - iv.start), iv.start),
}
