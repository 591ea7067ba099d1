"""The exact memory scheduler: its peak is the least over every order, as the heap
simulator counts it, and the budget only ever costs optimality, never validity."""
import random

import pytest

from xlac.hlo import Builder, Opcode, Shape, dtypes, scalar_computation
from xlac.hlo.text import parse_module
from xlac.optimizer import (DEFAULT_SCHEDULERS, InstructionFusion, MemoryModel, check_order,
                            schedule_model, simulate_peak)
from xlac.optimizer import exact_scheduling
from xlac.optimizer.exact_scheduling import DEFAULT_BUDGET, exact_schedule, peak_lower_bound
from hlo_util import CPU, module_with

F32 = dtypes.F32

SUM = """
%sum (x: f32[]{}, y: f32[]{}) -> f32[]{} {
  %x = f32[]{} parameter(0)
  %y = f32[]{} parameter(1)
  ROOT %add = f32[]{} add(f32[]{} %x, f32[]{} %y)
}
"""

# Branch a leaves 40 bytes; branch b needs 400 + 16 bytes at its reduce and leaves 16.
# Every heuristic runs a first (the larger result, the operand order, the definition
# order, the cheaper first step), so a's 40 bytes are live at b's reduce: 456. Running
# b first peaks at 416. (Concatenated along dimension 1, the branches write their own
# buffers, not slices of the result.)
BRANCH_ORDER = """HloModule branch_order
""" + SUM + """
ENTRY %main (x: f32[]{}) -> f32[2,7]{1,0} {
  %x = f32[]{} parameter(0)
  %zero = f32[]{} constant(0)
  %a = f32[2,5]{1,0} broadcast(f32[]{} %x), dimensions={}
  %big = f32[2,2,25]{2,1,0} broadcast(f32[]{} %x), dimensions={}
  %b = f32[2,2]{1,0} reduce(f32[2,2,25]{2,1,0} %big, f32[]{} %zero), dimensions={2}, to_apply=%sum
  ROOT %out = f32[2,7]{1,0} concatenate(f32[2,5]{1,0} %a, f32[2,2]{1,0} %b), dimensions={1}
}
"""

# %e may overwrite %a (element-wise, same size) only as a's last reader, that is after
# %s1, which reads a through two views. a, s1, e (in place), f peaks at 400 bytes
# (%f and %s1 are written into the output); e before s1 holds a and e at once: 800.
IN_PLACE_ORDER = """HloModule in_place_order
""" + SUM + """
ENTRY %main (x: f32[]{}) -> f32[3]{0} {
  %x = f32[]{} parameter(0)
  %zero = f32[]{} constant(0)
  %a = f32[2,50]{1,0} broadcast(f32[]{} %x), dimensions={}
  %e = f32[2,50]{1,0} exponential(f32[2,50]{1,0} %a)
  %f = f32[2]{0} reduce(f32[2,50]{1,0} %e, f32[]{} %zero), dimensions={1}, to_apply=%sum
  %a1 = f32[100]{0} reshape(f32[2,50]{1,0} %a)
  %s = f32[1]{0} slice(f32[100]{0} %a1), slice={[0:1]}
  %s1 = f32[1]{0} negate(f32[1]{0} %s)
  ROOT %out = f32[3]{0} concatenate(f32[2]{0} %f, f32[1]{0} %s1), dimensions={0}
}
"""


def heuristic_peaks(model):
    return schedule_model(model, DEFAULT_SCHEDULERS).peaks


def test_beats_every_heuristic_on_branch_order():
    model = MemoryModel(parse_module(BRANCH_ORDER))
    assert set(heuristic_peaks(model).values()) == {456}
    order, optimal = exact_schedule(model, upper_bound=456, budget=1000)
    check_order(model.module, order)
    assert optimal and simulate_peak(model, order) == 416
    assert [i.name for i in order if i.opcode is not Opcode.PARAMETER][1:4] == ["big", "b", "a"]
    result = schedule_model(model, exact_budget=1000)
    assert (result.peak, result.scheduler, result.optimal) == (416, "exact", True)


def test_runs_the_other_readers_before_the_in_place_write():
    model = MemoryModel(parse_module(IN_PLACE_ORDER))
    assert heuristic_peaks(model)["definition-order"] == 800
    order, optimal = exact_schedule(model, upper_bound=800, budget=1000)
    names = [i.name for i in order]
    assert optimal and simulate_peak(model, order) == 400
    assert names.index("s1") < names.index("e")
    in_place = model.events(order).in_place
    assert {i.name: v.name for i, v in in_place.items()} == {"e": "a"}


def test_returns_the_order_when_the_heuristic_is_optimal():
    model = MemoryModel(parse_module(BRANCH_ORDER))
    order, optimal = exact_schedule(model, upper_bound=416, budget=1000)
    assert optimal and simulate_peak(model, order) == 416
    assert exact_schedule(model, upper_bound=415, budget=1000) is None


# %p writes into the output (allocating nothing) but its kernel needs 1000 bytes of
# scratch. It is ready as soon as %r is, while %a (400 bytes) waits for %q0, which
# needs %r too: %p must wait until %q0 frees %a, then only %r (4 bytes) is live.
SCRATCH_WAITS = """HloModule scratch_waits
""" + SUM + """
ENTRY %main (x: f32[]{}) -> (f32[]{}, f32[]{}) {
  %x = f32[]{} parameter(0)
  %zero = f32[]{} constant(0)
  %a = f32[100]{0} broadcast(f32[]{} %x), dimensions={}
  %r = f32[]{} reduce(f32[100]{0} %a, f32[]{} %zero), dimensions={0}, to_apply=%sum
  %p = f32[]{} negate(f32[]{} %r)
  %q0 = f32[]{} reduce(f32[100]{0} %a, f32[]{} %r), dimensions={0}, to_apply=%sum
  %q = f32[]{} add(f32[]{} %q0, f32[]{} %r)
  ROOT %out = (f32[]{}, f32[]{}) tuple(f32[]{} %p, f32[]{} %q)
}
"""


def test_a_step_that_only_needs_scratch_is_not_taken_early():
    model = MemoryModel(parse_module(SCRATCH_WAITS), 1, lambda i: 1000 if i.name == "p" else 0)
    order, optimal = exact_schedule(model, upper_bound=1404, budget=1000)
    assert optimal and simulate_peak(model, order) == 1004
    names = [i.name for i in order]
    assert names.index("p") > names.index("q0")


# --- every order of small random graphs --------------------------------------------

def random_module(rng: random.Random):
    """At most 9 entry instructions: element-wise ops (in place or not), views, slices,
    broadcasts, reduces and concatenations (written in place into their result) over
    one or two parameters, with one to three outputs; sometimes loop-fused."""
    b = Builder("main")
    values = [b.parameter(n, Shape.array(F32, (rng.choice([1, 4, 8]),)))
              for n in range(rng.randint(1, 2))]
    total = len(values)
    reducer = scalar_computation("sum", Opcode.ADD, F32)
    zero = None
    while total < 8:
        x = rng.choice(values)
        n = x.shape.dims[0]
        kind = rng.choice(["unary", "unary", "binary", "widen", "narrow", "concat", "view"])
        if kind == "unary":
            v = b.op(rng.choice([Opcode.EXP, Opcode.NEGATE]), x)
        elif kind == "binary":
            v = b.op(Opcode.ADD, x, rng.choice([y for y in values if y.shape == x.shape]))
        elif kind == "widen":
            k = rng.choice([2, 4])
            v = b.reshape(b.broadcast(x, (k, n), (1,)), (k * n,))
            total += 1
        elif kind == "narrow" and n % 2 == 0:
            if zero is None:
                zero = b.constant(0.0)
                total += 1
            v = b.reduce(b.reshape(x, (2, n // 2)), zero, (0,), reducer)
            total += 1
        elif kind == "concat":
            parts = [x] + rng.sample(values, min(len(values), rng.randint(1, 2)))
            v = b.concatenate(parts, 0)
        else:
            v = b.slice(x, (0,), (max(1, n // 2),))
        values.append(v)
        total += 1
    outs = rng.sample(values[1:], rng.randint(1, 2))
    m = module_with(b, outs[0] if len(outs) == 1 else b.tuple(outs), reducer)
    if rng.random() < 0.3:
        InstructionFusion(CPU).run(m)
    return m


def topological_orders(instructions, limit):
    """Every order of ``instructions`` with operands first; None if more than ``limit``."""
    orders = []

    def extend(prefix, done):
        if len(orders) > limit:
            return
        if len(prefix) == len(instructions):
            orders.append(list(prefix))
            return
        for i in instructions:
            if i not in done and all(o in done for o in i.operands):
                prefix.append(i)
                done.add(i)
                extend(prefix, done)
                done.discard(i)
                prefix.pop()

    extend([], set())
    return orders if len(orders) <= limit else None


def random_cases(count):
    rng = random.Random(12)
    cases = []
    while len(cases) < count:
        m = random_module(rng)
        orders = topological_orders(m.entry.instructions, 2000)
        if orders is not None:
            sizes = {i.name: rng.choice([0, 0, 8, 64, 256]) for i in m.entry.instructions}
            cases.append((m, orders, sizes))
    return cases


def replayed_peak(graph, order):
    """The peak of ``order`` as the search counts it, step by step."""
    index = {i: k for k, i in enumerate(graph.instructions)}
    mask = live = buffers = peak = 0
    for i in order:
        step, mask, live, buffers = graph.step(index[i], mask, live, buffers)
        peak = max(peak, step)
    return peak


@pytest.mark.parametrize("m, orders, scratch", random_cases(40))
def test_peak_is_the_least_over_every_order(m, orders, scratch):
    model = MemoryModel(m, 1, lambda i: scratch[i.name])
    peaks = [simulate_peak(model, o) for o in orders]
    graph = exact_scheduling._Graph(model)
    assert [replayed_peak(graph, o) for o in orders] == peaks
    least, worst = min(peaks), max(peaks)
    assert peak_lower_bound(model) <= least
    order, optimal = exact_schedule(model, upper_bound=worst, budget=10_000)
    check_order(m, order)
    assert optimal and simulate_peak(model, order) == least
    assert exact_schedule(model, upper_bound=least - 1, budget=10_000) is None
    # The best-first search alone, without the beam's order or the lower bound's
    # shortcut (which settle most of these small graphs).
    graph = exact_scheduling._Graph(model)
    state, proven = exact_scheduling._best_first(graph, worst, 10_000)
    assert proven == least and simulate_peak(model, graph.order(state)) == least


# --- the budget -------------------------------------------------------------------

def parallel_branches(n, join):
    """``n`` branches of three ops of different sizes from one input, joined by a
    concatenation or a chain of adds."""
    b = Builder("main")
    x = b.parameter(0, Shape.array(F32, (16,)))
    zero = b.constant(0.0)
    reducer = scalar_computation("sum", Opcode.ADD, F32)
    results = []
    for k in range(n):
        wide = b.broadcast(x, (k % 4 + 1, 16), (1,))
        results.append(b.reduce(b.op(Opcode.EXP, wide), zero, (0,), reducer))
    if join == "concat":
        root = b.concatenate(results, 0)
    else:
        root = results[0]
        for r in results[1:]:
            root = b.op(Opcode.ADD, root, r)
    return MemoryModel(module_with(b, b.op(Opcode.NEGATE, root), reducer), 64)


@pytest.mark.parametrize("join", ["concat", "add"])
def test_twelve_branches_finish_within_the_default_budget(join):
    model = parallel_branches(12, join)
    heuristic = min(heuristic_peaks(model).values())
    order, optimal = exact_schedule(model, upper_bound=heuristic, budget=DEFAULT_BUDGET)
    check_order(model.module, order)
    assert optimal and simulate_peak(model, order) <= heuristic


def test_small_budget_never_returns_a_worse_order():
    model = MemoryModel(parse_module(IN_PLACE_ORDER))
    for budget in (1, 2, 3, 5):
        found = exact_schedule(model, upper_bound=800, budget=budget)
        if found is not None:
            order, optimal = found
            check_order(model.module, order)
            assert simulate_peak(model, order) < 800
    assert exact_schedule(model, upper_bound=100, budget=1) is None
