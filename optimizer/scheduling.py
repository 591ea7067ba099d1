"""Memory scheduling: an order of one computation (``MemoryModel.comp``: the entry, or
a control-flow callee) with a low peak of live bytes.

A scheduler is any object with a ``name`` and ``__call__(model) -> order`` (every
instruction of the computation once, operands first) over a ``MemoryModel``, which holds the
logical buffers and the in-place options the order is judged by.
``schedule_model`` runs several heuristics and keeps the order whose simulated peak
(heap_simulator.simulate_peak) is lowest, as XLA does (ties go to the earlier
scheduler); then the exact search (exact_scheduling.py) tries to beat that peak.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Protocol, Sequence

from ..hlo import Computation, Instruction, Module
from .aliasing import buffers_of
from .exact_scheduling import exact_schedule, peak_lower_bound
from .heap_simulator import simulate_peak
from .memory_model import MemoryModel, ScratchFn


class Scheduler(Protocol):
    name: str

    def __call__(self, model: MemoryModel) -> list[Instruction]: ...


class DefinitionOrderScheduler:
    """The computation's own order (the importer keeps the ONNX node order)."""
    name = "definition-order"

    def __call__(self, model):
        return list(model.comp.instructions)


class PostOrderScheduler:
    """Depth-first post order from the root: each operand's subtree is finished
    before the next one starts. ``largest_first`` visits the operands whose
    buffers are biggest first (XLA's DFS scheduler): the siblings' results are
    then not live while the big subtree runs; otherwise operands go in order."""

    def __init__(self, largest_first: bool):
        self.largest_first = largest_first
        self.name = "dfs" if largest_first else "post-order"

    def __call__(self, model):
        comp = model.comp

        def size(i: Instruction) -> int:                 # arena bytes behind a value
            bufs = {model.placement[o][0] for o in buffers_of(i) if o in model.placement}
            return sum(b.size for b in bufs if b.output is None)

        order: list[Instruction] = []
        done: set[Instruction] = set()
        # Parameters first (they cost nothing), then the root, then anything dead.
        for start in comp.parameters + [comp.root] + comp.instructions:
            stack = [(start, False)]
            while stack:
                node, expanded = stack.pop()
                if node in done:
                    continue
                if expanded:
                    done.add(node)
                    order.append(node)
                    continue
                stack.append((node, True))
                operands = list(dict.fromkeys(node.operands))
                # The stack pops the last pushed first.
                operands = sorted(operands, key=size) if self.largest_first else operands[::-1]
                stack.extend((o, False) for o in operands if o not in done)
        return order


class ListScheduler:
    """Greedy list scheduling: among the ready instructions, run the one that frees
    the most bytes minus the bytes it allocates (ties: the earliest in the computation).
    """
    name = "list"

    def __call__(self, model):
        comp = model.comp
        position = {i: n for n, i in enumerate(comp.instructions)}
        arena = set(model.arena)
        reads = {i: set() for i in comp.instructions}
        for b in arena:
            for r in b.readers:
                reads[r].add(b)
        pending = {b: set(b.readers) for b in arena}        # readers not yet scheduled
        allocated: set = set()
        users = comp.users()
        waiting = {i: len(set(i.operands)) for i in comp.instructions}
        order: list[Instruction] = []
        scheduled: set[Instruction] = set()

        def dying(b, i) -> bool:
            return not b.live_out and pending[b] == {i}

        def priority(i: Instruction) -> int:
            freed = sum(b.size for b in reads[i] if dying(b, i))
            own = model.placement.get(i)
            defined = 0
            if own is not None and own[0] in arena and own[0] not in allocated:
                if not any(dying(v, i) for v in model.in_place.get(i, ())):
                    defined = own[0].size
            return freed - defined

        # A max-heap of (priority, position). A ready instruction's priority only grows
        # (it becomes the last reader of a buffer, or a buffer it would allocate gets
        # allocated by another definer), so an entry whose priority has changed is
        # pushed back with the new one; the top entry that is current is the best.
        heap = [(-priority(i), position[i], i) for i, n in waiting.items() if n == 0]
        heapq.heapify(heap)
        while heap:
            neg, _, best = heapq.heappop(heap)
            if best in scheduled:
                continue
            if -neg != priority(best):
                heapq.heappush(heap, (-priority(best), position[best], best))
                continue
            scheduled.add(best)
            order.append(best)
            own = model.placement.get(best)
            if own is not None:
                allocated.add(own[0])
            for b in reads[best]:
                pending[b].discard(best)
                if len(pending[b]) == 1:
                    (last,) = pending[b]
                    if waiting[last] == 0:
                        heapq.heappush(heap, (-priority(last), position[last], last))
            for u in users[best]:
                waiting[u] -= 1
                if waiting[u] == 0:
                    heapq.heappush(heap, (-priority(u), position[u], u))
        return order


DEFAULT_SCHEDULERS: tuple[Scheduler, ...] = (
    DefinitionOrderScheduler(), PostOrderScheduler(largest_first=True),
    PostOrderScheduler(largest_first=False), ListScheduler())


@dataclass
class ScheduleResult:
    order: list[Instruction]
    peak: int                       # simulated peak of ``order``
    scheduler: str                  # the one that found it
    peaks: dict[str, int]           # every scheduler's peak ('exact' absent if it gave up)
    optimal: bool = False           # no order has a lower peak (searched, or at the bound)


def schedule_model(model: MemoryModel, schedulers: Sequence[Scheduler] = DEFAULT_SCHEDULERS,
                   exact_budget: int = 0) -> ScheduleResult:
    """The order with the lowest simulated peak among ``schedulers``' orders, improved
    by the exact search when ``exact_budget`` (steps it may evaluate) is positive."""
    best: ScheduleResult | None = None
    peaks: dict[str, int] = {}
    for scheduler in schedulers:
        order = scheduler(model)
        check_order(model.module, order, model.comp)
        peak = simulate_peak(model, order)
        peaks[scheduler.name] = peak
        if best is None or peak < best.peak:
            best = ScheduleResult(order, peak, scheduler.name, peaks)
    if exact_budget > 0:
        found = exact_schedule(model, upper_bound=best.peak, budget=exact_budget)
        if found is not None:
            order, optimal = found
            check_order(model.module, order, model.comp)
            peak = simulate_peak(model, order)
            peaks["exact"] = peak
            if peak < best.peak:
                best = ScheduleResult(order, peak, "exact", peaks)
            best.optimal = optimal
        # The search gives nothing back when the heuristic already meets the bound.
        best.optimal |= best.peak == peak_lower_bound(model)
    return best


def schedule(module: Module, schedulers: Sequence[Scheduler] = DEFAULT_SCHEDULERS,
             alignment: int = 1, scratch: ScratchFn | None = None) -> list[Instruction]:
    """The heuristic order with the lowest simulated peak (no exact search)."""
    return schedule_model(MemoryModel(module, alignment, scratch), schedulers).order


def check_order(module: Module, order: list[Instruction],
                computation: Computation | None = None) -> None:
    """Raise ValueError unless ``order`` holds every instruction of ``computation`` (the
    entry by default) once, operands first."""
    comp = computation or module.entry
    seen: set[Instruction] = set()
    for i in order:
        if i in seen:
            raise ValueError(f"%{i.name} is scheduled twice")
        missing = [o for o in i.operands if o not in seen]
        if missing:
            raise ValueError(f"%{i.name} is scheduled before its operand %{missing[0].name}")
        seen.add(i)
    if len(seen) != len(comp.instructions) or any(i not in seen for i in comp.instructions):
        raise ValueError(f"the order does not cover computation {comp.name} exactly")
