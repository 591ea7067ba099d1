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

import numpy as np

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
        intervals = sorted(self.closed, key=self.sort_key)
        n = len(intervals)
        # Placed buffers as arrays, so the time-overlap test is one vector operation.
        starts, ends = np.empty(n, np.int64), np.empty(n, np.int64)
        lows, highs = np.empty(n, np.int64), np.empty(n, np.int64)
        for k, iv in enumerate(intervals):
            overlap = (starts[:k] < iv.end) & (iv.start < ends[:k])
            iv.offset = self._best_fit(lows[:k][overlap], highs[:k][overlap], iv.size)
            starts[k], ends[k] = iv.start, iv.end
            lows[k], highs[k] = iv.offset, iv.offset + iv.size
        size = int(highs.max()) if n else 0
        return HeapResult(align_up(size, self.alignment),
                          {iv.buffer: iv.offset for iv in intervals})

    def _best_fit(self, lows: np.ndarray, highs: np.ndarray, size: int) -> int:
        """The lowest offset of the smallest gap of at least ``size`` bytes between the
        busy ranges [lows, highs), or the aligned top of them all."""
        a = self.alignment
        if lows.size == 0:
            return 0
        by_low = np.argsort(lows, kind="stable")
        lows, highs = lows[by_low], highs[by_low]
        # A gap ends at each busy range's low and starts above every range below it.
        below = np.concatenate(([0], np.maximum.accumulate(highs)[:-1]))
        gap_starts = (below + a - 1) // a * a
        gaps = lows - gap_starts
        fits = gaps >= size
        if fits.any():
            return int(gap_starts[np.argmin(np.where(fits, gaps, np.iinfo(np.int64).max))])
        return align_up(int(highs.max()), a)


# Orders in which BestFitHeap places buffers; buffer assignment keeps the best.
PACKING_ORDERS: dict[str, Callable[[_Interval], tuple]] = {
    "size": lambda iv: (-iv.size, iv.start),
    "start": lambda iv: (iv.start, -iv.size),
    "area": lambda iv: (-iv.size * (iv.end - iv.start), iv.start),
}
