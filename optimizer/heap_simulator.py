"""Heap simulation: replay alloc/free events into a heap algorithm.

As in XLA, a schedule becomes a sequence of ``alloc(buffer, size)`` /
``free(buffer, size)`` events (``MemoryModel.events``, memory_model.py), and a
heap algorithm behind that interface decides what they cost. ``PeakHeap``
counts bytes live at once (what schedulers minimize, and the lower bound of any
packing); ``BestFitHeap`` places each buffer at a fixed offset, which is buffer
assignment's packing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Hashable, Protocol

import numpy as np

from ..hlo import Instruction, Module
from .aliasing import align_up
from .memory_model import Event, MemoryModel, ScratchFn


@dataclass
class HeapResult:
    size: int                                        # bytes the heap needs
    offsets: dict[Hashable, int] = field(default_factory=dict)


class HeapAlgorithm(Protocol):
    def alloc(self, buffer: Hashable, size: int) -> None: ...

    def free(self, buffer: Hashable, size: int) -> None: ...

    def finish(self) -> HeapResult: ...


def simulate(events: list[Event], heap: HeapAlgorithm) -> HeapResult:
    for e in events:
        (heap.alloc if e.kind == "alloc" else heap.free)(e.buffer, e.size)
    return heap.finish()


def simulate_peak(model: Module | MemoryModel, order: list[Instruction], alignment: int = 1,
                  scratch: ScratchFn | None = None) -> int:
    """The most arena bytes live at once when running ``order`` (in-place writes included)."""
    if not isinstance(model, MemoryModel):
        model = MemoryModel(model, alignment, scratch)
    return simulate(model.events(order).events, PeakHeap()).size


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
class Interval:
    buffer: Hashable
    size: int
    start: int           # event clock of its alloc
    end: int             # event clock of its free


class BestFitHeap:
    """Global best fit (XLA's GlobalDecreasingSizeBestFitHeap, generalized).

    Collects every buffer's live interval, then places buffers one at a time in
    the order given by ``sort_key`` (``place``).
    """

    def __init__(self, alignment: int, sort_key: Callable[[Interval], tuple]):
        self.alignment = alignment
        self.sort_key = sort_key
        self.clock = 0
        self.open: dict[Hashable, Interval] = {}
        self.closed: list[Interval] = []

    def alloc(self, buffer, size):
        self.open[buffer] = Interval(buffer, size, self.clock, -1)
        self.clock += 1

    def free(self, buffer, size):
        iv = self.open.pop(buffer)
        iv.end = self.clock
        self.clock += 1
        self.closed.append(iv)

    def finish(self) -> HeapResult:
        return place(sorted(self.closed, key=self.sort_key), self.alignment)


def intervals(events: list[Event]) -> list[Interval]:
    """Every buffer's live interval on the event clock."""
    heap = BestFitHeap(1, lambda iv: 0)
    simulate(events, heap)
    return heap.closed


def place(order: list[Interval], alignment: int) -> HeapResult:
    """Place buffers one at a time in ``order``: each goes into the smallest gap
    between the buffers already placed whose intervals overlap its own, or on top."""
    n = len(order)
    # Placed buffers as arrays, so the time-overlap test is one vector operation.
    starts, ends = np.empty(n, np.int64), np.empty(n, np.int64)
    lows, highs = np.empty(n, np.int64), np.empty(n, np.int64)
    offsets = {}
    for k, iv in enumerate(order):
        overlap = (starts[:k] < iv.end) & (iv.start < ends[:k])
        offset = _best_fit(lows[:k][overlap], highs[:k][overlap], iv.size, alignment)
        offsets[iv.buffer] = offset
        starts[k], ends[k] = iv.start, iv.end
        lows[k], highs[k] = offset, offset + iv.size
    size = int(highs.max()) if n else 0
    return HeapResult(align_up(size, alignment), offsets)


def _best_fit(lows: np.ndarray, highs: np.ndarray, size: int, a: int) -> int:
    """The lowest offset of the smallest gap of at least ``size`` bytes between the
    busy ranges [lows, highs), or the aligned top of them all."""
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
PACKING_ORDERS: dict[str, Callable[[Interval], tuple]] = {
    "size": lambda iv: (-iv.size, iv.start),
    "start": lambda iv: (iv.start, -iv.size),
    "area": lambda iv: (-iv.size * (iv.end - iv.start), iv.start),
}
