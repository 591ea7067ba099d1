"""Local search over the order in which best fit places buffers.

Best fit under a fixed sort order can leave holes: a buffer placed late finds
no gap and lands on top. The search takes a buffer that reaches the top and
places it earlier (first, then halfway, then just before each buffer it
overlaps in time), keeping any move that lowers the arena, until the arena
equals the peak of live bytes (no packing can do better) or a round improves
nothing or the evaluation budget is spent.
"""
from __future__ import annotations

from typing import Callable

from .aliasing import align_up
from .heap_simulator import HeapResult, Interval, intervals, place
from .memory_model import Event

# Placements tried at most; one costs O(buffers^2) vector work (~1 ms at 200 buffers).
MAX_PLACEMENTS = 400


def improve_packing(events: list[Event], alignment: int, sort_key: Callable[[Interval], tuple],
                    lower_bound: int, max_placements: int = MAX_PLACEMENTS) -> HeapResult:
    order = sorted(intervals(events), key=sort_key)
    best = place(order, alignment)
    target = align_up(lower_bound, alignment)
    budget = max_placements
    while best.size > target and budget > 0:
        improved = False
        for k in _top_buffers(order, best):
            for j in _earlier_positions(order, k):
                budget -= 1
                trial = order[:j] + [order[k]] + order[j:k] + order[k + 1:]
                result = place(trial, alignment)
                if result.size < best.size:
                    order, best, improved = trial, result, True
                    break
                if budget <= 0:
                    break
            if improved or budget <= 0:
                break
        if not improved:
            break
    return best


def _top_buffers(order: list[Interval], result: HeapResult) -> list[int]:
    """Positions in ``order`` of the buffers whose end is the arena's highest byte."""
    ends = [result.offsets[iv.buffer] + iv.size for iv in order]
    top = max(ends, default=0)
    return [k for k, e in enumerate(ends) if e == top and k > 0]


def _earlier_positions(order: list[Interval], k: int) -> list[int]:
    me = order[k]
    overlapping = [j for j in range(k) if order[j].start < me.end and me.start < order[j].end]
    return list(dict.fromkeys([0, k // 2] + overlapping))
