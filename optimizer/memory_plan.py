"""The memory plan: schedule, buffer assignment and kernel variants chosen together
for the smallest arena.

Building a concatenation in place (aliasing.concat_slots) makes its producers'
slices live as long as the whole block, which usually saves the copy and the
second block but can cost more where a producer runs long before the
concatenation. So the plan is made both ways, each with its best schedule
(scheduling.schedule_model) and packing, and the smaller arena is kept.

A kernel's scratch (the GEMM's packed sliver) is live only while the kernel runs,
but where that is the peak step it sets the arena. Kernels with a variant that
needs less scratch (``lean_scratch``) switch to it when their scratch is part of
the peak, one round at a time, as long as the arena shrinks, in each of the two
plans (a scratch may set the peak of one only); they trade some speed
for the bytes, only where the bytes count.

Each computation a while or conditional calls is planned the same way, on its own
and first: its arena is the scratch of its caller's step (buffer_assignment.plan_module).
"""
from __future__ import annotations

from ..hlo import Computation, Instruction, Module
from .buffer_assignment import BufferAssignment, assign_computation, plan_module
from .heap_simulator import PeakHeap
from .memory_model import MemoryModel, Scratch, ScratchFn
from .policy import MemoryPolicy
from .scheduling import schedule_model

# Rounds of switching kernels at the peak to their lean variants.
MAX_LEAN_ROUNDS = 8


def plan_memory(module: Module, backend: MemoryPolicy, exact_budget: int = 0) -> BufferAssignment:
    """The buffer assignment (order included) with the smallest arena for ``backend``'s
    alignment and kernel scratch; ``stats`` says which scheduler won and whether the
    order is proven optimal, ``concats_in_place`` which variant, and ``lean_kernels``
    which kernels must be emitted lean. ``exact_budget``: steps of the exact schedule
    search (exact_scheduling.py; 0: the heuristic schedulers only)."""
    alignment = backend.alignment

    def plan(comp, scratch_of, lean_of):
        return _plan_computation(module, comp, alignment, scratch_of, lean_of, exact_budget)
    return plan_module(module, alignment, backend.scratch_bytes,
                       lambda i: backend.scratch_bytes(i, lean=True), plan)


def _plan_computation(module: Module, comp: Computation, alignment: int,
                      scratch: ScratchFn | None, lean_scratch: ScratchFn | None,
                      exact_budget: int) -> BufferAssignment:
    # Each variant (concatenations in place or not) gets its own lean kernels: a kernel's
    # scratch may set the peak of one variant only, which then loses to the other unless
    # that kernel is made lean. The variants are chosen with the heuristic schedulers;
    # the exact search (the expensive part) then runs once, on the chosen one.
    best = None
    for concat_in_place in (True, False):
        if not concat_in_place and not best[0].concats_in_place:
            break                           # no concatenation qualified: same plan again
        plan = _lean_plan(module, comp, alignment, scratch, lean_scratch, concat_in_place)
        if best is None or plan[0].arena_size < best[0].arena_size:
            best = plan
    best, model, lean = best
    if exact_budget > 0:
        exact = _plan(module, model, alignment, exact_budget)
        if exact.arena_size <= best.arena_size:
            best = exact
    best.lean_kernels = set(lean)
    return best


def _lean_plan(module, comp, alignment, scratch, lean_scratch, concat_in_place):
    """(plan, model, lean kernels): kernels whose scratch is at the peak switched to their
    lean variant, a round at a time, as long as the arena shrinks."""
    lean: frozenset[Instruction] = frozenset()
    best, model = _variant(module, comp, alignment, scratch, lean_scratch, lean,
                           concat_in_place)
    for _ in range(MAX_LEAN_ROUNDS if scratch and lean_scratch else 0):
        at_peak = {i for i in _scratch_at_peak(model, best.order)
                   if i not in lean and lean_scratch(i) < scratch(i)}
        if not at_peak:
            break
        trial, trial_model = _variant(module, comp, alignment, scratch, lean_scratch,
                                      lean | at_peak, concat_in_place)
        if trial.arena_size >= best.arena_size:
            break
        best, model, lean = trial, trial_model, lean | at_peak
    return best, model, lean


def _variant(module, comp, alignment, scratch, lean_scratch, lean, concat_in_place):
    def scratch_of(i: Instruction) -> int:
        return lean_scratch(i) if i in lean else scratch(i)

    model = MemoryModel(module, alignment, scratch_of if scratch else None,
                        concat_in_place=concat_in_place, computation=comp)
    return _plan(module, model, alignment, 0), model


def _plan(module, model: MemoryModel, alignment: int, exact_budget: int) -> BufferAssignment:
    result = schedule_model(model, exact_budget=exact_budget)
    ba = assign_computation(module, model.comp, result.order, alignment, model=model)
    ba.stats.update(scheduler=result.scheduler, schedule_optimal=result.optimal,
                    scheduler_peaks=result.peaks)
    return ba


def _scratch_at_peak(model: MemoryModel, order: list[Instruction]) -> set[Instruction]:
    """Instructions whose scratch is allocated at a moment the live bytes reach the peak."""
    events = model.events(order).events
    heap = PeakHeap()
    peaks: list[tuple[int, Instruction]] = []
    for e in events:
        if e.kind == "alloc":
            heap.alloc(e.buffer, e.size)
            if isinstance(e.buffer, Scratch):
                peaks.append((heap.live, e.buffer.instr))
        else:
            heap.free(e.buffer, e.size)
    return {i for live, i in peaks if live == heap.peak}
