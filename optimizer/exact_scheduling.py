"""The exact memory scheduler: the order of least simulated peak, by search over
the sets of instructions already scheduled.

As in SERENITY (Ahn et al., MLSys 2020) and Liberis & Lane (operator reordering
for microcontrollers), the bytes live after a prefix of an order depend only on
the *set* S the prefix scheduled, not on its order: a buffer is live when one of
its definers is in S and, unless it is a model output, one of its readers is not.
So the best peak of every order reaching S is one number, and the orders form a
graph over the downward-closed sets of the computation whose edges add one ready
instruction n at the cost

    step(S, n) = live(S) + alloc(S, n) + scratch(n)

(alloc: n's buffer if no other definer of it ran, unless n overwrites an operand
buffer in place because it is that buffer's last reader). The peak of an order is
the largest step on its path. That is exactly what ``MemoryModel.events`` replays
into ``PeakHeap``; the tests check it against ``simulate_peak`` on every order of
random graphs.

The search (``exact_schedule``):
  1. Zero-cost steps are taken eagerly (``_Graph.close``).
  2. A beam search (the same graph, keeping the best few sets of each size) finds
     a good order cheaply; it bounds the exact search and is the answer when the
     exact search runs out of budget.
  3. A best-first search over sets by peak (Dijkstra on the bottleneck cost, ties
     to the deepest set, so that among equal peaks it dives to a complete order)
     with a lower bound of every completion (``_Graph.floor``) folded into the
     cost. The bound never drops along a path below the peak the path reaches (an
     instruction's bound can only grow until it runs, and then its step is at
     least that), so the cost never decreases: every set expanded costs at most
     the optimum, and the first complete set taken is optimal. Sets are memoized
     with their best cost.

Graph structure helps on its own: before an instruction every path goes through
(SERENITY's articulation points) there is one set of each size, so the sets of
a chain of blocks add up over the blocks instead of multiplying.
"""
from __future__ import annotations

import heapq
from typing import NamedTuple

from ..hlo import Instruction
from .memory_model import MemoryModel

# Steps (from one set of scheduled instructions to a larger one) the search may
# evaluate: its run time. 100,000 take about 1 s on a 100-instruction graph and 2.5 s
# on a 500-instruction one whose search does not finish (this machine); the light
# models need a few hundred.
DEFAULT_BUDGET = 100_000

# How many instructions, those of largest least step, bound the cost of a set
# (_Graph.floor): more make a tighter bound and cost time on every state.
FLOOR_SCAN = 16

# Share of the budget the beam search may spend (the first, greedy pass always runs).
BEAM_SHARE = 0.25


class _State(NamedTuple):
    """A downward-closed set of scheduled instructions and how the best order known
    reaches it."""
    cost: int                  # max(peak of that order, a lower bound of every completion)
    live: int                  # bytes live after it (a function of the set alone)
    buffers: int               # the arena buffers live after it, bit j = buffer j
    mask: int                  # the set, bit k = instruction k
    ready: int                 # instructions not in it whose operands all are
    parent: "_State | None"
    added: tuple[int, ...]     # instructions scheduled from the parent, in order

    @property
    def depth(self) -> int:
        return self.mask.bit_count()


class _Graph:
    """The entry computation as bitmasks (instruction k is bit k, arena buffer j is
    bit j of a buffer set) and the steps between sets of scheduled instructions.
    ``evaluated`` counts the steps taken, the unit of the search budget."""

    def __init__(self, model: MemoryModel):
        self.instructions: list[Instruction] = list(model.comp.instructions)
        index = {i: k for k, i in enumerate(self.instructions)}
        n = len(self.instructions)
        self.full = (1 << n) - 1
        self.evaluated = 0
        self.preds = [0] * n
        self.succs: list[list[int]] = [[] for _ in range(n)]
        for k, i in enumerate(self.instructions):
            for o in dict.fromkeys(i.operands):
                self.preds[k] |= 1 << index[o]
                self.succs[index[o]].append(k)
        arena = model.arena
        buffers = {b: j for j, b in enumerate(arena)}
        self.size = [b.size for b in arena]
        self.readers = [sum(1 << index[r] for r in b.readers) for b in arena]
        self.live_out = sum(1 << j for j, b in enumerate(arena) if b.live_out)
        reads = [0] * n                               # buffer set each instruction reads
        for j, b in enumerate(arena):
            for r in b.readers:
                reads[index[r]] |= 1 << j
        self.scratch = [model.scratch.get(i, 0) for i in self.instructions]
        # The arena buffers k reads and may free: (bit, readers, size).
        self.frees = [tuple((1 << j, self.readers[j], self.size[j]) for j in range(len(arena))
                            if reads[k] >> j & 1 and not arena[j].live_out) for k in range(n)]
        # What k writes: None, or (bit, definers, size, bytes that stay live after the
        # step that allocates it: none if nothing reads it and it is no output).
        self.writes: list[tuple[int, int, int, int] | None] = [None] * n
        for j, b in enumerate(arena):
            definers = sum(1 << index[d] for d in b.definers)
            for d in b.definers:
                self.writes[index[d]] = (1 << j, definers, b.size,
                                         b.size if b.live_out or b.readers else 0)
        # The readers of each buffer k may overwrite in place.
        self.victims = [tuple(self.readers[buffers[v]] for v in model.in_place.get(i, ())
                              if v in buffers) for i in self.instructions]
        # Instructions whose step k can make free: the other definers of k's buffer
        # (it is then allocated already) and those that may overwrite a buffer k reads
        # (k may have been the last other reader).
        self.watchers = [w[1] & ~(1 << k) if w else 0 for k, w in enumerate(self.writes)]
        for m, i in enumerate(self.instructions):
            for v in model.in_place.get(i, ()):
                for r in v.readers if v in buffers else ():
                    if r is not i:
                        self.watchers[index[r]] |= 1 << m
        self._bounds(n, reads)

    def _bounds(self, n: int, reads: list[int]) -> None:
        """What every order must hold when instruction k runs: the buffers it reads (a
        reader of each is pending: k) and the one it writes, unless it may take an
        operand's storage (of the same size, and among those it reads); ``later[k]``
        (k and every instruction that depends on it) says which buffers live before
        it must still be live then."""
        self.later = [1 << k for k in range(n)]
        for k in reversed(range(n)):                  # users come after their operands
            for u in self.succs[k]:
                self.later[k] |= self.later[u]
        self.by_least = []                            # (least step, k, buffers counted)
        for k in range(n):
            held = reads[k]
            w = self.writes[k]
            if w is not None and not self.victims[k]:
                held |= w[0]
            least = self.scratch[k] + sum(s for j, s in enumerate(self.size) if held >> j & 1)
            self.by_least.append((least, k, held | (w[0] if w else 0), self.later[k]))
        self.by_least.sort(reverse=True)
        self.lower_bound = self.by_least[0][0] if n else 0

    def floor(self, mask: int, buffers: int, live: int, cost: int) -> int:
        """``cost`` raised to a lower bound of the peak of every order that starts with
        the set ``mask`` (``buffers`` live, ``live`` bytes): the least step of an
        instruction left, plus the buffers live now that one of their readers after
        it keeps live. Only the first ``FLOOR_SCAN`` instructions by least step are
        tried (a bound over fewer is weaker, but still a bound)."""
        best = cost
        held_now = None
        for least, k, held, later in self.by_least[:FLOOR_SCAN]:
            if least + live <= best:
                break                                 # sorted: no later k can do better
            if mask >> k & 1:
                continue
            if held_now is None:                      # (buffer, size, readers left)
                held_now = []
                others = buffers
                while others:
                    low = others & -others
                    others ^= low
                    j = low.bit_length() - 1
                    left = -1 if self.live_out & low else self.readers[j] & ~mask
                    held_now.append((low, self.size[j], left))
            extra = least
            for low, size, left in held_now:
                if left & later and not held & low:
                    extra += size
            if extra > best:
                best = extra
        return best

    def step(self, k: int, mask: int, live: int, buffers: int) -> tuple[int, int, int, int]:
        """Run instruction k after the set ``mask``: (the step's peak, the set after it,
        the bytes and buffers live after it)."""
        self.evaluated += 1
        after = mask | 1 << k
        left = ~after
        peak = live + self.scratch[k]
        for bit, readers, size in self.frees[k]:
            if not readers & left:                    # k is its last reader
                live -= size
                buffers ^= bit
        w = self.writes[k]
        if w is not None and not w[1] & mask:         # the first definer allocates
            bit, _, size, kept = w
            if not any(not readers & left for readers in self.victims[k]):
                peak += size                          # else k takes its operand's storage
            live += kept
            buffers |= bit if kept else 0
        return peak, after, live, buffers

    def is_free(self, k: int, mask: int) -> bool:
        """Whether k's step after ``mask`` allocates nothing, scratch included."""
        if self.scratch[k]:
            return False
        w = self.writes[k]
        if w is None or w[1] & mask:
            return True
        left = ~(mask | 1 << k)
        return any(not readers & left for readers in self.victims[k])

    def newly_ready(self, k: int, after: int) -> int:
        fresh = 0
        for u in self.succs[k]:
            if not self.preds[u] & ~after:
                fresh |= 1 << u
        return fresh

    def close(self, mask: int, live: int, buffers: int, ready: int,
              candidates: int) -> tuple[int, int, int, int, tuple[int, ...]]:
        """Schedule every ready instruction whose step costs nothing, until none is left:
        (set, live bytes, live buffers, ready set, the instructions in the order taken).

        A step that allocates nothing (no buffer of its own, a buffer another definer
        allocated, or an operand's storage taken in place) and needs no scratch costs
        live(S) <= the peak so far, and leaves live bytes no higher, for every later
        set as well. Moving such a step of any order earlier, to the first set where
        it costs nothing, therefore raises no step: its own costs nothing, and every
        step it passes sees a set with one more instruction, whose live bytes and
        allocation are no larger (more definers allocated, more buffers freed, more
        in-place options). So some optimal order takes it at once, and the sets the
        search needs are those closed under these steps. The closure is unique, as a
        step that costs nothing still costs nothing after more steps.

        ``candidates``: the ready instructions whose cost may have dropped to zero.
        """
        taken: list[int] = []
        candidates &= ready
        while candidates:
            low = candidates & -candidates
            candidates ^= low
            k = low.bit_length() - 1
            if not self.is_free(k, mask):
                continue
            _, mask, live, buffers = self.step(k, mask, live, buffers)
            fresh = self.newly_ready(k, mask)
            ready = (ready ^ low) | fresh
            taken.append(k)
            candidates = (candidates | fresh | self.watchers[k]) & ready
        return mask, live, buffers, ready, tuple(taken)

    def start(self) -> _State:
        ready = sum(1 << k for k, p in enumerate(self.preds) if not p)
        mask, live, buffers, ready, taken = self.close(0, 0, 0, ready, ready)
        cost = self.floor(mask, buffers, live, self.lower_bound)
        return _State(cost, live, buffers, mask, ready, None, taken)

    def children(self, state: _State, bound: int, seen: dict[int, int]):
        """The states one costly step after ``state`` whose cost is at most ``bound``.
        ``seen`` holds the least cost of each set before its free steps: a step to a
        set seen at no higher cost leads nowhere new."""
        ready = state.ready
        while ready:
            low = ready & -ready
            ready ^= low
            k = low.bit_length() - 1
            peak, mask, live, buffers = self.step(k, state.mask, state.live, state.buffers)
            cost = peak if peak > state.cost else state.cost
            if cost > bound or seen.get(mask, bound + 1) <= cost:
                continue
            seen[mask] = cost
            fresh = self.newly_ready(k, mask)
            mask, live, buffers, after, taken = self.close(
                mask, live, buffers, (state.ready ^ low) | fresh, fresh | self.watchers[k])
            cost = self.floor(mask, buffers, live, cost)
            if cost <= bound:
                yield _State(cost, live, buffers, mask, after, state, (k,) + taken)

    def order(self, state: _State) -> list[Instruction]:
        parts = []
        while state is not None:
            parts.append(state.added)
            state = state.parent
        return [self.instructions[k] for part in reversed(parts) for k in part]


def _beam(graph: _Graph, width: int, bound: int) -> _State | None:
    """Search the sets size by size keeping the ``width`` cheapest of each size (then
    fewest live bytes): the complete state found, or None."""
    levels: dict[int, dict[int, _State]] = {}
    sizes: list[int] = []

    def add(s: _State) -> None:
        level = levels.get(s.depth)
        if level is None:
            level = levels[s.depth] = {}
            heapq.heappush(sizes, s.depth)
        old = level.get(s.mask)
        if old is None or (s.cost, s.live) < (old.cost, old.live):
            level[s.mask] = s

    start = graph.start()
    if start.cost <= bound:
        add(start)
    seen: dict[int, int] = {}
    while sizes:
        level = levels.pop(heapq.heappop(sizes))
        if graph.full in level:
            return level[graph.full]
        for s in heapq.nsmallest(width, level.values(), key=lambda s: (s.cost, s.live)):
            for child in graph.children(s, bound, seen):
                add(child)
    return None


def _best_first(graph: _Graph, bound: int, budget: int) -> tuple[_State | None, int]:
    """Dijkstra over sets on the bottleneck cost, keeping only costs <= ``bound``, until
    ``graph.evaluated`` passes ``budget``: (the optimal complete state, or None when
    the budget ran out or no order is within ``bound``; the least peak any complete
    order can still have)."""
    start = graph.start()
    if start.cost > bound:
        return None, start.cost
    best = {start.mask: start}
    seen: dict[int, int] = {}
    heap = [(start.cost, -start.depth, start.live, 0, start)]
    pushed = 0
    while heap:
        cost, _, _, _, s = heapq.heappop(heap)
        if best[s.mask] is not s:
            continue                                   # reached again more cheaply
        if s.mask == graph.full:
            return s, cost
        if graph.evaluated > budget:
            return None, cost                          # every cheaper set was expanded
        for child in graph.children(s, bound, seen):
            old = best.get(child.mask)
            if old is None or child.cost < old.cost:
                best[child.mask] = child
                pushed += 1
                heapq.heappush(heap, (child.cost, -child.depth, child.live, pushed, child))
    return None, bound + 1                             # nothing within the bound


def peak_lower_bound(model: MemoryModel) -> int:
    """No order of ``model`` peaks lower: its largest step, whatever runs before it."""
    return _Graph(model).start().cost


def exact_schedule(model: MemoryModel, upper_bound: int,
                   budget: int = DEFAULT_BUDGET) -> tuple[list[Instruction], bool] | None:
    """An order of the entry computation with the least simulated peak
    (``heap_simulator.simulate_peak``), found by searching the sets of scheduled
    instructions; ``budget`` bounds the steps the search evaluates (its run time).

    Returns ``(order, True)`` when no order has a lower peak; when the minimum equals
    ``upper_bound`` that order is returned too, so the caller learns its own order
    was optimal, except when ``upper_bound`` already meets the lower bound of every
    order (``peak_lower_bound``): then None at once. When the budget runs out first: ``(order, False)`` with the best
    order found below ``upper_bound`` (``True`` after all if it meets the lower bound
    the partial search proved), or None if none was found below it. Never returns an
    order whose peak exceeds ``upper_bound``.
    """
    graph = _Graph(model)
    # A greedy pass measures what one state per size costs; the beam then keeps as
    # many states per size as its share of the budget allows.
    found = _beam(graph, 1, upper_bound)
    width = int(budget * BEAM_SHARE) // max(graph.evaluated, 1)
    if width > 1:
        wider = _beam(graph, width, upper_bound)
        if wider is not None and (found is None or wider.cost < found.cost):
            found = wider
    floor = graph.start().cost
    if found is not None and found.cost == floor:
        return graph.order(found), True                # it meets the lower bound
    if floor >= upper_bound:
        return None                                    # the caller's order meets it
    bound = upper_bound if found is None else min(found.cost, upper_bound)
    exact, proven = _best_first(graph, bound, budget)
    if exact is not None:
        return graph.order(exact), True
    if found is None or found.cost > upper_bound:
        return None
    if found.cost <= proven:
        return graph.order(found), True                # it meets the proven lower bound
    if found.cost == upper_bound:
        return None
    return graph.order(found), False
