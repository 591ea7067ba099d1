"""The memory plan: schedule and buffer assignment chosen together for the smallest arena.

Building a concatenation in place (aliasing.concat_slots) makes its producers'
slices live as long as the whole block, which usually saves the copy and the
second block but can cost more where a producer runs long before the
concatenation. So the plan is made both ways, each with its best schedule
(scheduling.schedule_model) and packing, and the smaller arena is kept.
"""
from __future__ import annotations

from ..hlo import Module
from .buffer_assignment import BufferAssignment, assign_buffers
from .memory_model import MemoryModel, ScratchFn
from .scheduling import schedule_model


def plan_memory(module: Module, alignment: int = 64, scratch: ScratchFn | None = None,
                exact_budget: int = 0) -> BufferAssignment:
    """The buffer assignment (order included) with the smallest arena; ``stats`` says
    which scheduler and variant won and whether the order is proven optimal."""
    best: BufferAssignment | None = None
    for concat_in_place in (True, False):
        model = MemoryModel(module, alignment, scratch, concat_in_place=concat_in_place)
        if not concat_in_place and best is not None and not best.concats_in_place:
            break                           # no concatenation qualified: same plan again
        result = schedule_model(model, exact_budget=exact_budget)
        ba = assign_buffers(module, result.order, alignment, model=model)
        ba.stats.update(scheduler=result.scheduler, schedule_optimal=result.optimal,
                        scheduler_peaks=result.peaks, concat_in_place=concat_in_place)
        if best is None or ba.arena_size < best.arena_size:
            best = ba
    return best
