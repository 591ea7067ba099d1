"""Control flow in the optimizer: the copies buffer sharing needs, the passes inside
loop bodies, and the memory plan of whiles and conditionals (each callee planned
inside its caller's arena).

Soundness is checked as for the entry (test_optimizer_buffer_assignment.py): the
schedule runs on real memory laid out as assigned, loops and branches included
(memory_util.run_with_control_flow), and must give the evaluator's values; and no two
values live at once share bytes, inside a callee or against its caller's buffers.
"""
import textwrap

import numpy as np
import pytest

from xlac.hlo import Opcode
from xlac.hlo.evaluator import evaluate
from xlac.hlo.text import parse_module, print_module
from xlac.hlo.verifier import verify
from xlac.optimizer import (DEFAULT_SCHEDULERS, BufferLocation, assign_buffers, optimize,
                            plan_memory)
from xlac.optimizer.control_flow import ControlFlowPreparation
from memory_util import callee_assignment, check_assignment, run_with_control_flow
from hlo_util import CPU, ScratchPolicy


def hlo(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def by_name(m, name):
    """The instruction named ``name``, in the entry if it has one."""
    return next(i for c in [m.entry] + m.computations for i in c.instructions
                if i.name == name)


def computation(m, name):
    return next(c for c in m.computations if c.name == name)


def args_for(m, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(p.shape.dims).astype(p.shape.dtype.np)
            for p in m.entry.parameters]


# A recurrence over 4 steps: h' = tanh(h . R + x[t]), y[t] = h' (the shape of an RNN).
RNN = hlo("""
    HloModule rnn

    %cond (s: (s32[], f32[1,3], f32[4,1,3], f32[4,1,3], f32[3,3])) -> pred[] {
      %s = (s32[], f32[1,3], f32[4,1,3], f32[4,1,3], f32[3,3]) parameter(0)
      %t = s32[] get-tuple-element(%s), index=0
      %n = s32[] constant(4)
      ROOT %lt = pred[] compare(%t, %n), direction=LT
    }

    %body (p: (s32[], f32[1,3], f32[4,1,3], f32[4,1,3], f32[3,3])) -> (s32[], f32[1,3], f32[4,1,3], f32[4,1,3], f32[3,3]) {
      %p = (s32[], f32[1,3], f32[4,1,3], f32[4,1,3], f32[3,3]) parameter(0)
      %t = s32[] get-tuple-element(%p), index=0
      %h = f32[1,3] get-tuple-element(%p), index=1
      %y = f32[4,1,3] get-tuple-element(%p), index=2
      %x = f32[4,1,3] get-tuple-element(%p), index=3
      %r = f32[3,3] get-tuple-element(%p), index=4
      %one = s32[] constant(1)
      %next = s32[] add(%t, %one)
      %zero = s32[] constant(0)
      %xt = f32[1,1,3] dynamic-slice(%x, %t, %zero, %zero), dynamic_slice_sizes={1,1,3}
      %xt2 = f32[1,3] reshape(%xt)
      %hr = f32[1,3] dot(%h, %r), lhs_contracting_dims={1}, rhs_contracting_dims={0}
      %sum = f32[1,3] add(%hr, %xt2)
      %h2 = f32[1,3] tanh(%sum)
      %h3 = f32[1,1,3] reshape(%h2)
      %y2 = f32[4,1,3] dynamic-update-slice(%y, %h3, %t, %zero, %zero)
      ROOT %out = (s32[], f32[1,3], f32[4,1,3], f32[4,1,3], f32[3,3]) tuple(%next, %h2, %y2, %x, %r)
    }

    ENTRY %main (x: f32[4,1,3], r: f32[3,3], h0: f32[1,3]) -> (f32[4,1,3], f32[1,3]) {
      %x = f32[4,1,3] parameter(0)
      %r = f32[3,3] parameter(1)
      %h0 = f32[1,3] parameter(2)
      %start = s32[] constant(0)
      %zeros = f32[] constant(0)
      %y0 = f32[4,1,3] broadcast(%zeros), dimensions={}
      %scaled = f32[4,1,3] multiply(%x, %x)
      %init = (s32[], f32[1,3], f32[4,1,3], f32[4,1,3], f32[3,3]) tuple(%start, %h0, %y0, %scaled, %r)
      %w = (s32[], f32[1,3], f32[4,1,3], f32[4,1,3], f32[3,3]) while(%init), condition=%cond, body=%body
      %y = f32[4,1,3] get-tuple-element(%w), index=2
      %h = f32[1,3] get-tuple-element(%w), index=1
      %hn = f32[1,3] negate(%h)
      ROOT %res = (f32[4,1,3], f32[1,3]) tuple(%y, %hn)
    }
""")

# The body swaps two state elements and reads the old one after writing the new.
ROTATION = hlo("""
    HloModule rotation

    %cond (s: (s32[], f32[8], f32[8])) -> pred[] {
      %s = (s32[], f32[8], f32[8]) parameter(0)
      %t = s32[] get-tuple-element(%s), index=0
      %n = s32[] constant(3)
      ROOT %lt = pred[] compare(%t, %n), direction=LT
    }

    %body (p: (s32[], f32[8], f32[8])) -> (s32[], f32[8], f32[8]) {
      %p = (s32[], f32[8], f32[8]) parameter(0)
      %t = s32[] get-tuple-element(%p), index=0
      %a = f32[8] get-tuple-element(%p), index=1
      %b = f32[8] get-tuple-element(%p), index=2
      %one = s32[] constant(1)
      %next = s32[] add(%t, %one)
      %e = f32[8] exponential(%b)
      ROOT %out = (s32[], f32[8], f32[8]) tuple(%next, %e, %a)
    }

    ENTRY %main (a: f32[8], b: f32[8]) -> (f32[8], f32[8], f32[8]) {
      %a = f32[8] parameter(0)
      %b = f32[8] parameter(1)
      %start = s32[] constant(0)
      %a2 = f32[8] negate(%a)
      %init = (s32[], f32[8], f32[8]) tuple(%start, %a2, %b)
      %w = (s32[], f32[8], f32[8]) while(%init), condition=%cond, body=%body
      %x = f32[8] get-tuple-element(%w), index=1
      %y = f32[8] get-tuple-element(%w), index=2
      %later = f32[8] add(%a2, %x)
      ROOT %res = (f32[8], f32[8], f32[8]) tuple(%x, %y, %later)
    }
""")

# A conditional inside a loop, a loop inside a branch, an array-shaped loop state.
NESTED = hlo("""
    HloModule nested

    %neg (a: f32[16]) -> f32[16] {
      %a = f32[16] parameter(0)
      ROOT %n = f32[16] negate(%a)
    }

    %exp (a: f32[16]) -> f32[16] {
      %a = f32[16] parameter(0)
      %e = f32[16] exponential(%a)
      ROOT %h = f32[16] multiply(%e, %a)
    }

    %cond (s: (s32[], f32[16])) -> pred[] {
      %s = (s32[], f32[16]) parameter(0)
      %t = s32[] get-tuple-element(%s), index=0
      %n = s32[] constant(3)
      ROOT %lt = pred[] compare(%t, %n), direction=LT
    }

    %body (p: (s32[], f32[16])) -> (s32[], f32[16]) {
      %p = (s32[], f32[16]) parameter(0)
      %t = s32[] get-tuple-element(%p), index=0
      %v = f32[16] get-tuple-element(%p), index=1
      %one = s32[] constant(1)
      %next = s32[] add(%t, %one)
      %two = s32[] constant(2)
      %rem = s32[] remainder(%t, %two)
      %c = f32[16] conditional(%rem, %v, %v), branch_computations={%neg, %exp}
      %big = f32[4,16] broadcast(%c), dimensions={1}
      %half = f32[16] constant({0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5})
      %w = f32[16] multiply(%c, %half)
      ROOT %out = (s32[], f32[16]) tuple(%next, %w)
    }

    %add (x: f32[], y: f32[]) -> f32[] {
      %x = f32[] parameter(0)
      %y = f32[] parameter(1)
      ROOT %s = f32[] add(%x, %y)
    }

    %acond (x: f32[16]) -> pred[] {
      %x = f32[16] parameter(0)
      %z = f32[] constant(0)
      %r = f32[] reduce(%x, %z), dimensions={0}, to_apply=%add
      %lim = f32[] constant(100)
      ROOT %lt = pred[] compare(%r, %lim), direction=LT
    }

    %abody (x: f32[16]) -> f32[16] {
      %x = f32[16] parameter(0)
      %one = f32[16] constant({1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
      ROOT %y = f32[16] add(%x, %one)
    }

    %grow (a: f32[16]) -> f32[16] {
      %a = f32[16] parameter(0)
      %abs = f32[16] abs(%a)
      ROOT %w = f32[16] while(%abs), condition=%acond, body=%abody
    }

    %keep (a: f32[16]) -> f32[16] {
      ROOT %a = f32[16] parameter(0)
    }

    ENTRY %main (a: f32[16], flag: pred[]) -> (f32[16], f32[16]) {
      %a = f32[16] parameter(0)
      %flag = pred[] parameter(1)
      %start = s32[] constant(0)
      %init = (s32[], f32[16]) tuple(%start, %a)
      %w = (s32[], f32[16]) while(%init), condition=%cond, body=%body
      %v = f32[16] get-tuple-element(%w), index=1
      %g = f32[16] conditional(%flag, %v, %a), true_computation=%grow, false_computation=%keep
      %s = f32[16] add(%g, %a)
      ROOT %res = (f32[16], f32[16]) tuple(%g, %s)
    }
""")
MODULES = {"rnn": RNN, "rotation": ROTATION, "nested": NESTED}


# --- copy insertion -------------------------------------------------------------------

def prepared(text):
    m = parse_module(text)
    ControlFlowPreparation().run(m)
    verify(m)
    return m


def test_copies_an_init_element_read_after_the_loop_or_given_by_the_caller():
    m = prepared(ROTATION)
    init = by_name(m, "init")
    # a2 is read again after the loop: the loop works on a copy. b is an input.
    assert [o.opcode for o in init.operands[1:]] == [Opcode.COPY, Opcode.COPY]
    assert init.operands[1].operands[0] is by_name(m, "a2")


def test_copies_a_rotated_state_element_in_the_body():
    m = prepared(ROTATION)
    out = computation(m, "body").root
    assert out.operands[2].opcode is Opcode.COPY        # the old a, now at element 2
    assert out.operands[1].opcode is Opcode.EXP


def test_does_not_copy_a_fresh_init_element_or_a_computed_body_element():
    m = prepared(RNN)
    init = by_name(m, "init")
    assert init.operands[2] is by_name(m, "y0")          # only the loop reads it
    assert init.operands[1].opcode is Opcode.COPY        # h0 is an input
    assert init.operands[4] is by_name(m, "r")           # invariant: read only
    assert init.operands[3] is by_name(m, "scaled")      # invariant
    body = computation(m, "body")
    assert [o.name for o in body.root.operands] == ["next", "h2", "y2", "x", "r"]


def test_wraps_an_array_state_and_clones_a_shared_callee():
    text = NESTED.replace("false_computation=%keep", "false_computation=%grow")
    m = prepared(text)
    g = by_name(m, "g")
    assert g.called[0] is not g.called[1]
    assert g.called[1].name.startswith("grow")
    w = next(i for i in g.called[0].instructions if i.opcode is Opcode.WHILE)
    assert w.shape.is_tuple and w.operands[0].opcode is Opcode.TUPLE
    assert computation(m, "abody").root.opcode is Opcode.TUPLE


def test_sinks_invariant_constants_into_the_body():
    text = RNN.replace("tuple(%start, %h0, %y0, %scaled, %r)",
                       "tuple(%start, %h0, %y0, %scaled, %rc)").replace(
        "%start = s32[] constant(0)",
        "%start = s32[] constant(0)\n  %rc = f32[3,3] constant({ {1,0,0},{0,1,0},{0,0,1} })")
    m = prepared(text)
    hr = by_name(m, "hr")
    assert hr.operands[1].opcode is Opcode.CONSTANT
    assert by_name(m, "init").operands[4].opcode is Opcode.CONSTANT     # not copied


def test_does_not_change_a_module_without_control_flow():
    m = parse_module(hlo("""
        HloModule plain

        ENTRY %main (a: f32[4]) -> f32[4] {
          %a = f32[4] parameter(0)
          ROOT %n = f32[4] negate(%a)
        }
    """))
    assert not ControlFlowPreparation().run(m)


# --- the memory plan -----------------------------------------------------------------------

def test_the_loop_state_is_one_buffer_with_the_init_and_the_result():
    m = parse_module(RNN)
    ba = assign_buffers(m)
    loc = ba.location
    y0, y, y2 = by_name(m, "y0"), by_name(m, "y"), by_name(m, "y2")
    # y is model output 0: the state element lives in the caller's output buffer and
    # the body's dynamic-update-slice writes it there in place, each iteration.
    assert loc(y0) == loc(y) == BufferLocation("output", 0)
    assert loc(y2) == BufferLocation("output", 2)       # the body's output 2: the state
    assert loc(by_name(m, "h2")) == BufferLocation("output", 1)
    body = computation(m, "body")
    assert ba.computations[body].order[-1] is body.root


def test_body_temporaries_live_in_the_loops_scratch():
    m = parse_module(RNN)
    ba = assign_buffers(m)
    w = by_name(m, "w")
    region = ba.scratch[w]
    body = ba.computations[computation(m, "body")]
    assert body.arena_size > 0
    for i in body.order:
        loc = ba.location(i)
        if loc.space == "arena" and i.shape.byte_size:
            assert region.offset <= loc.offset
            assert loc.offset + i.shape.byte_size <= region.offset + body.arena_size
    check_assignment(m, ba)


def test_does_not_write_the_new_state_over_an_old_element_still_read():
    m = parse_module(ROTATION)
    ba = assign_buffers(m)
    body = computation(m, "body")
    e = next(i for i in body.instructions if i.opcode is Opcode.EXP)
    # exp(b) at element 1 could run before the copy of old a (element 1) in some order.
    assert ba.location(e).space == "arena"


@pytest.mark.parametrize("name", MODULES)
@pytest.mark.parametrize("plan", ["assign", "plan"])
def test_runs_on_the_assigned_memory(name, plan):
    m = parse_module(MODULES[name])
    want_module = parse_module(MODULES[name])
    if plan == "assign":
        ba = assign_buffers(m, alignment=16)
    else:
        optimize(m, CPU)
        ba = plan_memory(m, ScratchPolicy(16), exact_budget=1000)
    check_assignment(m, ba)
    for comp, sub in ba.computations.items():
        check_assignment(m, callee_assignment(m, ba, comp), computation=comp)
    for seed in range(3):
        args = args_for(m, seed)
        if name == "nested":
            args[1] = np.array(seed % 2 == 0)
        want = evaluate(want_module, args)
        for got, exp in zip(run_with_control_flow(m, ba, args), want):
            np.testing.assert_allclose(got, exp, rtol=1e-6)


# --- the emitted code --------------------------------------------------------------------

def test_emitted_loops_and_branches_match_the_evaluator(tmp_path):
    from emit_util import compile_modules
    modules = {name: parse_module(text) for name, text in MODULES.items()}
    for m in modules.values():
        optimize(m, CPU)
    models = compile_modules(modules, tmp_path)
    for name, text in MODULES.items():
        want_module = parse_module(text)
        for seed in range(3):
            args = args_for(want_module, seed)
            if name == "nested":
                args[1] = np.array(seed % 2 == 0)
            for got, want in zip(models[name](*args), evaluate(want_module, args)):
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# --- the passes inside loop bodies --------------------------------------------------------

PASSES = hlo("""
    HloModule passes

    %cond (s: (s32[], f32[8])) -> pred[] {
      %s = (s32[], f32[8]) parameter(0)
      %t = s32[] get-tuple-element(%s), index=0
      %n = s32[] constant(3)
      ROOT %lt = pred[] compare(%t, %n), direction=LT
    }

    %body (p: (s32[], f32[8])) -> (s32[], f32[8]) {
      %p = (s32[], f32[8]) parameter(0)
      %t = s32[] get-tuple-element(%p), index=0
      %x = f32[8] get-tuple-element(%p), index=1
      %one = s32[] constant(1)
      %next = s32[] add(%t, %one)
      %dead = f32[8] exponential(%x)
      %a = f32[8] add(%x, %x)
      %a2 = f32[8] add(%x, %x)
      %two = f32[] constant(2)
      %three = f32[] constant(3)
      %six = f32[] multiply(%two, %three)
      %k = f32[8] broadcast(%six), dimensions={}
      %y = f32[8] multiply(%a, %k)
      %z = f32[8] subtract(%y, %a2)
      %w = f32[8] tanh(%z)
      ROOT %out = (s32[], f32[8]) tuple(%next, %w)
    }

    ENTRY %main (x: f32[8]) -> (f32[8], f32[8]) {
      %x = f32[8] parameter(0)
      %zero = s32[] constant(0)
      %init = (s32[], f32[8]) tuple(%zero, %x)
      %loop = (s32[], f32[8]) while(%init), condition=%cond, body=%body
      %c = f32[8] constant({1, 2, 3, 4, 5, 6, 7, 8})
      %cinit = (s32[], f32[8]) tuple(%zero, %c)
      %const_loop = (s32[], f32[8]) while(%cinit), condition=%cond, body=%body
      %unused = (s32[], f32[8]) while(%init), condition=%cond, body=%body
      %r = f32[8] get-tuple-element(%loop), index=1
      %q = f32[8] get-tuple-element(%const_loop), index=1
      ROOT %res = (f32[8], f32[8]) tuple(%r, %q)
    }
""")


def test_passes_run_inside_loop_bodies():
    m = parse_module(PASSES)
    args = args_for(m)
    want = evaluate(m, args)
    optimize(m, CPU, verify=True)
    body = m.entry.root.operands[0].operands[0].called[1]
    ops = [i.opcode for i in body.instructions]
    # DCE dropped exp, CSE merged the adds, folding made 2 * 3 a constant, and fusion
    # made one loop of the element-wise chain, its computation before the body.
    assert Opcode.EXP not in ops
    (w,) = [i for i in body.instructions if i.opcode is Opcode.FUSION and i.shape.rank == 1]
    fused = w.called[0]
    assert [i.opcode for i in fused.instructions].count(Opcode.ADD) == 1
    assert Opcode.TANH in [i.opcode for i in fused.instructions]
    assert m.computations.index(fused) < m.computations.index(body)
    for got, exp in zip(evaluate(m, args), want):
        np.testing.assert_allclose(got, exp, rtol=1e-6)


def test_does_not_fold_a_loop_or_keep_one_nobody_reads():
    m = parse_module(PASSES)
    optimize(m, CPU)
    loops = [i for i in m.entry.instructions if i.opcode is Opcode.WHILE]
    # The loop over constants runs at run time; the unread one is gone.
    assert len(loops) == 2
    assert {loop.operands[0].operands[1].opcode for loop in loops} == {Opcode.PARAMETER,
                                                                        Opcode.CONSTANT}


def test_does_not_fuse_the_state_away():
    m = parse_module(PASSES)
    optimize(m, CPU)
    w = next(i for i in m.entry.instructions if i.opcode is Opcode.WHILE)
    body = w.called[1]
    assert body.root.opcode is Opcode.TUPLE
    # The body's results stay values of the body (written to the state), not producers
    # fused into a consumer outside it.
    assert all(o in body.instructions for o in body.root.operands)
    assert all(o in m.entry.instructions for o in w.operands[0].operands)


# --- loop-invariant code motion ------------------------------------------------------------

INVARIANT = hlo("""
    HloModule invariant

    %add (x: f32[], y: f32[]) -> f32[] {
      %x = f32[] parameter(0)
      %y = f32[] parameter(1)
      ROOT %s = f32[] add(%x, %y)
    }

    %cond (s: (s32[], f32[4], f32[4,4], f32[4])) -> pred[] {
      %s = (s32[], f32[4], f32[4,4], f32[4]) parameter(0)
      %t = s32[] get-tuple-element(%s), index=0
      %n = s32[] constant(5)
      ROOT %lt = pred[] compare(%t, %n), direction=LT
    }

    %body (p: (s32[], f32[4], f32[4,4], f32[4])) -> (s32[], f32[4], f32[4,4], f32[4]) {
      %p = (s32[], f32[4], f32[4,4], f32[4]) parameter(0)
      %t = s32[] get-tuple-element(%p), index=0
      %h = f32[4] get-tuple-element(%p), index=1
      %w = f32[4,4] get-tuple-element(%p), index=2
      %b = f32[4] get-tuple-element(%p), index=3
      %one = s32[] constant(1)
      %next = s32[] add(%t, %one)
      %ww = f32[4,4] dot(%w, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
      %eb = f32[4] exponential(%b)
      %wide = f32[4,4] broadcast(%b), dimensions={1}
      %big = f32[64,4] broadcast(%eb), dimensions={1}
      %zero = f32[] constant(0)
      %rows = f32[4] reduce(%big, %zero), dimensions={0}, to_apply=%add
      %hw = f32[4] dot(%h, %ww), lhs_contracting_dims={0}, rhs_contracting_dims={0}
      %s1 = f32[4] add(%hw, %eb)
      %wb = f32[4] dot(%h, %wide), lhs_contracting_dims={0}, rhs_contracting_dims={0}
      %s2 = f32[4] add(%s1, %wb)
      %s3 = f32[4] add(%s2, %rows)
      %big2 = f32[16,4] broadcast(%eb), dimensions={1}
      %eh = f32[16,4] exponential(%big2)
      %hb = f32[16,4] broadcast(%h), dimensions={1}
      %mixed = f32[16,4] add(%eh, %hb)
      %mrows = f32[4] reduce(%mixed, %zero), dimensions={0}, to_apply=%add
      %s4 = f32[4] add(%s3, %mrows)
      %h2 = f32[4] tanh(%s4)
      ROOT %out = (s32[], f32[4], f32[4,4], f32[4]) tuple(%next, %h2, %w, %b)
    }

    ENTRY %main (h0: f32[4], w: f32[4,4], b: f32[4]) -> f32[4] {
      %h0 = f32[4] parameter(0)
      %w = f32[4,4] parameter(1)
      %b = f32[4] parameter(2)
      %zero = s32[] constant(0)
      %init = (s32[], f32[4], f32[4,4], f32[4]) tuple(%zero, %h0, %w, %b)
      %loop = (s32[], f32[4], f32[4,4], f32[4]) while(%init), condition=%cond, body=%body
      ROOT %r = f32[4] get-tuple-element(%loop), index=1
    }
""")


def test_licm_moves_invariant_work_before_the_loop():
    from xlac.optimizer import WhileLoopInvariantCodeMotion
    m = parse_module(INVARIANT)
    args = args_for(m)
    want = evaluate(m, args)
    assert WhileLoopInvariantCodeMotion().run(m)
    verify(m)
    hoisted = {i.name for i in m.entry.instructions}
    # W W and exp(b) move out, and the sum of a broadcast of exp(b) (each no larger than
    # its inputs); the dot of the state stays, and so do the broadcast of b (free once
    # fused) and exp of a broadcast 16 times larger than b (it would take a buffer).
    assert {"ww", "eb", "rows"} <= hoisted
    assert not {"hw", "wide", "big2", "eh"} & hoisted
    body = computation(m, "body")
    assert len(body.root.operands) == 7
    for got, exp in zip(evaluate(m, args), want):
        np.testing.assert_allclose(got, exp, rtol=1e-5)
    assert not WhileLoopInvariantCodeMotion().run(m)    # nothing left to move


def test_does_not_move_work_on_the_changing_state():
    from xlac.optimizer import WhileLoopInvariantCodeMotion
    assert not WhileLoopInvariantCodeMotion().run(parse_module(ROTATION))
    assert not WhileLoopInvariantCodeMotion().run(parse_module(RNN))
