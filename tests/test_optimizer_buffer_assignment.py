"""Buffer assignment and scheduling over random DAGs, plus the contract's special cases.

The strongest check runs the schedule on real memory laid out as assigned (an
arena byte array, the caller's output buffers, scratch scribbled over while an
instruction runs; memory_util.py) and compares with the reference evaluator: any
two values that wrongly share bytes corrupt the result.
"""
import numpy as np
from hypothesis import given, settings, strategies as st

from xlac.hlo import Builder, Opcode, Shape, dtypes, scalar_computation
from xlac.hlo.evaluator import evaluate
from xlac.optimizer import (DEFAULT_SCHEDULERS, BufferLocation, InstructionFusion, MemoryModel,
                            assign_buffers, check_order, schedule, simulate_peak)
from xlac.optimizer.aliasing import tuple_element_offset
from hlo_util import module_with
from memory_util import args_for, check_assignment, run_on_assigned_memory

F32 = dtypes.F32


# --- random DAGs ------------------------------------------------------------------

@st.composite
def random_dags(draw):
    """A module of element-wise, view, broadcast, slice and concatenate ops over 1-3
    parameters, loop-fused or not."""
    b = Builder("main")
    nparams = draw(st.integers(1, 3))
    values = [b.parameter(n, Shape.array(F32, (draw(st.sampled_from([4, 16, 64])),)))
              for n in range(nparams)]
    for _ in range(draw(st.integers(1, 14))):
        x = draw(st.sampled_from(values))
        kind = draw(st.sampled_from(["unary", "binary", "view", "widen", "narrow", "concat"]))
        if kind == "unary":
            v = b.op(draw(st.sampled_from([Opcode.NEGATE, Opcode.ABS, Opcode.EXP])), x)
        elif kind == "binary":
            y = draw(st.sampled_from([v for v in values if v.shape == x.shape]))
            v = b.op(draw(st.sampled_from([Opcode.ADD, Opcode.MULTIPLY])), x, y)
        elif kind == "view":
            v = b.reshape(x, (1,) + x.shape.dims if x.shape.rank == 1 else (x.shape.num_elements,))
        elif kind == "widen" and x.shape.rank == 1:
            v = b.broadcast(x, (3, x.shape.dims[0]), (1,))
        elif kind == "narrow" and x.shape.rank == 1 and x.shape.dims[0] > 4:
            start = draw(st.sampled_from([0, 1, x.shape.dims[0] // 4]))
            v = b.slice(x, (start,), (start + x.shape.dims[0] // 4,))
        elif kind == "concat":
            parts = draw(st.lists(st.sampled_from([v for v in values if v.shape.rank == x.shape.rank
                                                   and v.shape.dims[1:] == x.shape.dims[1:]]),
                                  min_size=1, max_size=3))
            v = b.op(Opcode.CONCATENATE, x, *parts, dimension=0)
        else:
            v = b.op(Opcode.NEGATE, x)
        values.append(v)
    nout = draw(st.integers(1, 3))
    outs = [draw(st.sampled_from(values[nparams:] if draw(st.booleans()) else values))
            for _ in range(nout)]
    root = outs[0] if nout == 1 else b.tuple(outs)
    m = module_with(b, root)
    if draw(st.booleans()):
        InstructionFusion().run(m)
    return m


@settings(max_examples=150, deadline=None)
@given(random_dags(), st.sampled_from([1, 16, 64]), st.data())
def test_random_dags_assignment_is_sound(m, alignment, data):
    sched = data.draw(st.sampled_from(DEFAULT_SCHEDULERS))
    scratch_sizes = {id(i): data.draw(st.sampled_from([0, 0, 24, 100]))
                     for i in m.entry.instructions}
    scratch_of = lambda i: scratch_sizes[id(i)]   # noqa: E731
    order = sched(MemoryModel(m, alignment, scratch_of))
    ba = assign_buffers(m, order, alignment=alignment, scratch=scratch_of)
    check_assignment(m, ba, scratch_of)
    args = args_for(m)
    for got, want in zip(run_on_assigned_memory(m, ba, args, scratch_of), evaluate(m, args)):
        np.testing.assert_array_equal(got, want)


@settings(max_examples=100, deadline=None)
@given(random_dags())
def test_schedule_is_valid_and_no_worse_than_any_scheduler(m):
    order = schedule(m)
    check_order(m, order)
    peaks = [simulate_peak(m, s(MemoryModel(m))) for s in DEFAULT_SCHEDULERS]
    assert simulate_peak(m, order) == min(peaks)


# --- the contract's special cases ----------------------------------------------------

X = Shape.array(F32, (256,))


def test_outputs_land_in_output_buffers_and_views_share():
    b = Builder("main")
    x = b.parameter(0, X)
    e = b.op(Opcode.EXP, x)
    r = b.reshape(b.op(Opcode.NEGATE, e), (16, 16))
    root = b.tuple([r, e, x, e])
    m = module_with(b, root)
    ba = assign_buffers(m, schedule(m))
    neg = r.operands[0]
    assert ba.location(r) == ba.location(neg) == BufferLocation("output", 0, 0)
    assert ba.location(e) == BufferLocation("output", 1, 0)
    assert ba.location(x) == BufferLocation("input", 0, 0)     # the emitter copies it out
    assert ba.location(root) == BufferLocation("none")
    assert ba.arena_size == 0 and ba.naive_bytes == 0
    check_assignment(m, ba)
    args = args_for(m)
    outs = run_on_assigned_memory(m, ba, args)
    np.testing.assert_array_equal(outs[0], evaluate(m, args)[0])


def test_chain_runs_in_place():
    # x -> a -> b -> c -> d -> reverse -> output: each element-wise op overwrites its
    # operand at its last use, so the four arena values share one buffer.
    b = Builder("main")
    v = b.parameter(0, X)
    for op in (Opcode.EXP, Opcode.NEGATE, Opcode.ABS, Opcode.EXP, Opcode.NEGATE):
        v = b.op(op, v)
    m = module_with(b, b.op(Opcode.REVERSE, v, dimensions=(0,)))
    ba = assign_buffers(m, schedule(m))
    assert ba.naive_bytes == 5 * 1024
    assert ba.lower_bound == 1024 == ba.arena_size
    assert len(ba.in_place) == 4
    check_assignment(m, ba)


def test_result_never_overwrites_an_operand_read_later():
    b = Builder("main")
    x = b.parameter(0, X)
    a = b.op(Opcode.EXP, x)
    c = b.op(Opcode.NEGATE, a)
    root = b.op(Opcode.ADD, b.op(Opcode.ABS, c), a)     # a is read after c
    m = module_with(b, root)
    ba = assign_buffers(m)
    assert ba.location(a) != ba.location(c)
    assert c not in ba.in_place
    check_assignment(m, ba)


def test_non_elementwise_result_never_overwrites_its_operand():
    b = Builder("main")
    x = b.parameter(0, Shape.array(F32, (16, 16)))
    a = b.op(Opcode.EXP, x)
    t = b.transpose(a, (1, 0))                          # reads a at other indices
    m = module_with(b, b.op(Opcode.NEGATE, t))
    ba = assign_buffers(m)
    assert ba.location(a) != ba.location(t)
    check_assignment(m, ba)


def test_view_extends_the_life_of_its_operand():
    b = Builder("main")
    x = b.parameter(0, X)
    a = b.op(Opcode.EXP, x)
    view = b.reshape(a, (16, 16))
    c = b.op(Opcode.NEGATE, x)                    # must not overwrite a: view is read below
    d = b.op(Opcode.ADD, b.reshape(view, (256,)), c)
    m = module_with(b, d)
    ba = assign_buffers(m, list(m.entry.instructions))
    assert ba.location(view) == ba.location(a)
    assert ba.location(a) != ba.location(c)
    check_assignment(m, ba)


def test_scratch_is_placed_and_reused():
    b = Builder("main")
    v = b.parameter(0, X)
    for _ in range(4):
        v = b.op(Opcode.EXP, v)
    m = module_with(b, b.op(Opcode.REVERSE, v, dimensions=(0,)))
    ba = assign_buffers(m, scratch=lambda i: 128 if i.opcode is Opcode.EXP else 0)
    exps = [i for i in m.entry.instructions if i.opcode is Opcode.EXP]
    assert set(ba.scratch) == set(exps)
    assert ba.naive_bytes == 4 * 1024 + 4 * 128
    assert ba.lower_bound == 1024 + 128          # in place, plus one kernel's scratch
    check_assignment(m, ba, lambda i: 128 if i.opcode is Opcode.EXP else 0)


def test_multi_output_reduce_elements_are_located_inside_its_buffer():
    b = Builder("main")
    x, y = b.parameter(0, Shape.array(F32, (4, 8))), b.parameter(1, Shape.array(F32, (4, 8)))
    # A two-output reduce whose reducer adds each pair.
    rb = Builder("sum2")
    s = Shape.array(F32, ())
    p = [rb.parameter(n, s) for n in range(4)]
    reducer = rb.build(rb.tuple([rb.op(Opcode.ADD, p[0], p[2]), rb.op(Opcode.ADD, p[1], p[3])]))
    zero = b.constant(0.0)
    r = b.op(Opcode.REDUCE, x, y, zero, zero, called=[reducer], dimensions=(1,))
    g0, g1 = b.get_tuple_element(r, 0), b.get_tuple_element(r, 1)
    root = b.op(Opcode.ADD, g0, g1)
    m = module_with(b, root, reducer)
    ba = assign_buffers(m, alignment=64)
    base = ba.location(r)
    assert base.space == "arena"
    assert ba.location(g0) == base
    assert ba.location(g1).offset == base.offset + tuple_element_offset(r.shape, 1, 64) == 64
    assert ba.naive_bytes == 64 + 64          # each element padded to the alignment


def test_default_schedulers_are_all_valid_on_a_wide_graph():
    b = Builder("main")
    x = b.parameter(0, X)
    add = scalar_computation("sum", Opcode.ADD, F32)
    wide = [b.broadcast(x, (8, 256), (1,)) for _ in range(4)]
    exps = [b.op(Opcode.EXP, w) for w in wide]
    branches = [b.reduce(e, b.constant(0.0), (0,), add) for e in exps]
    v = branches[0]
    for br in branches[1:]:
        v = b.op(Opcode.ADD, v, br)
    m = module_with(b, v, add)
    peaks = {}
    for s in DEFAULT_SCHEDULERS:
        order = s(MemoryModel(m))
        check_order(m, order)
        peaks[s.name] = simulate_peak(m, order)
    # Building all four 8 KiB broadcasts before reducing any (definition order) costs
    # more than finishing one branch at a time, which the other schedulers do.
    assert peaks["post-order"] < peaks["definition-order"]
    assert peaks["list"] < peaks["definition-order"]
    assert simulate_peak(m, schedule(m)) == min(peaks.values())
