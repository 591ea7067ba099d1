"""Memory scheduling: an order of the entry computation with a low peak of live bytes.

A scheduler is any object with a ``name`` and ``__call__(module) -> order``
(every entry instruction once, operands first). ``schedule`` runs several and
keeps the order whose simulated heap peak (heap_simulator.simulate_peak) is
lowest, as XLA does; ties go to the earlier scheduler.
"""
from __future__ import annotations

import heapq
from typing import Protocol, Sequence

from ..hlo import Instruction, Module
from .aliasing import arena_buffers, buffers_of
from .heap_simulator import simulate_peak


class Scheduler(Protocol):
    name: str

    def __call__(self, module: Module) -> list[Instruction]: ...


class DefinitionOrderScheduler:
    """The computation's own order: the baseline every other scheduler must beat."""
    name = "definition-order"

    def __call__(self, module):
        return list(module.entry.instructions)


class PostOrderScheduler:
    """Depth-first post order from the root, visiting larger operands first.

    Finishing the subtree that produces the biggest operand before starting its
    siblings keeps the siblings' results from being live while it runs.
    """
    name = "post-order"

    def __call__(self, module):
        comp = module.entry
        sizes = arena_buffers(module, 1)
        order: list[Instruction] = []
        done: set[Instruction] = set()
        # Parameters first (they cost nothing), then the root, then anything dead.
        starts = comp.parameters + [comp.root] + comp.instructions
        for start in starts:
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
                operands = sorted(dict.fromkeys(node.operands),
                                  key=lambda o: sizes.get(o, 0))   # largest popped first
                stack.extend((o, False) for o in operands if o not in done)
        return order


class ListScheduler:
    """Greedy list scheduling: among the ready instructions, run the one that frees
    the most bytes minus the bytes it defines (ties: the earliest in the computation).
    """
    name = "list"

    def __call__(self, module):
        comp = module.entry
        sizes = arena_buffers(module, 1)
        position = {i: n for n, i in enumerate(comp.instructions)}
        uses = {i: {b for o in i.operands for b in buffers_of(o) if b in sizes}
                for i in comp.instructions}
        users = comp.users()
        unscheduled_users: dict[Instruction, set[Instruction]] = {b: set() for b in sizes}
        for i, bs in uses.items():
            for b in bs:
                unscheduled_users[b].add(i)
        waiting = {i: len(set(i.operands)) for i in comp.instructions}
        order: list[Instruction] = []
        scheduled: set[Instruction] = set()

        def priority(i: Instruction) -> int:
            freed = sum(sizes[b] for b in uses[i] if len(unscheduled_users[b]) == 1)
            return freed - sizes.get(i, 0)

        # A max-heap of (priority, position). A waiting instruction's priority only
        # grows (when it becomes the last user of a buffer), and then it is pushed
        # again, so the top entry that is still current is the best ready one.
        heap = [(-priority(i), position[i], i) for i, n in waiting.items() if n == 0]
        heapq.heapify(heap)
        while heap:
            neg, _, best = heapq.heappop(heap)
            if best in scheduled or -neg != priority(best):
                continue                                    # stale entry
            scheduled.add(best)
            order.append(best)
            for b in uses[best]:
                unscheduled_users[b].discard(best)
                if len(unscheduled_users[b]) == 1:
                    (last,) = unscheduled_users[b]
                    if waiting[last] == 0:
                        heapq.heappush(heap, (-priority(last), position[last], last))
            for u in users[best]:
                waiting[u] -= 1
                if waiting[u] == 0:
                    heapq.heappush(heap, (-priority(u), position[u], u))
        return order


DEFAULT_SCHEDULERS: tuple[Scheduler, ...] = (
    DefinitionOrderScheduler(), PostOrderScheduler(), ListScheduler())


def schedule(module: Module, schedulers: Sequence[Scheduler] = DEFAULT_SCHEDULERS
             ) -> list[Instruction]:
    """The order with the lowest simulated peak among ``schedulers``' orders."""
    best: tuple[int, list[Instruction]] | None = None
    for scheduler in schedulers:
        order = scheduler(module)
        check_order(module, order)
        peak = simulate_peak(module, order)
        if best is None or peak < best[0]:
            best = (peak, order)
    return best[1]


def check_order(module: Module, order: list[Instruction]) -> None:
    """Raise ValueError unless ``order`` holds every entry instruction once, operands first."""
    comp = module.entry
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
