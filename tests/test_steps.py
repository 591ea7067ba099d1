"""The step list and the buffer slices it is built from.

Every operand and result of a step is where the buffer assignment says (``slice``):
views in their operand's bytes, a tuple-shaped op's elements at their aligned offsets,
a loop body's parameter elements and outputs in the loop state's bytes. The list is
what ``xlac --emit steps`` prints.
"""
import numpy as np

from xlac.emitter import build_steps, format_steps
from xlac.emitter.steps import Conditional, Copy, Kernel, Loop, While, kernel_steps
from xlac.hlo import Opcode
from xlac.hlo.fusion import FusionKind
from xlac.hlo.text import parse_module, print_module
from xlac.main import main
from xlac.optimizer import assign_buffers, optimize, plan_memory
from xlac.optimizer.buffer_assignment import BufferSlice
from hlo_util import CPU, parse
from test_optimizer_control_flow import RNN, by_name, computation


def _steps(m, backend=CPU):
    assignment = plan_memory(m, backend)
    return assignment, build_steps(m, assignment, backend)


def test_views_resolve_to_their_operands_bytes():
    """(Tuple elements: test_optimizer_buffer_assignment.py's multi-output reduce.)"""
    m = parse("""
ENTRY %main (x: f32[4,6]) -> (f32[2,2], f32[6]) {
  %x = f32[4,6] parameter(0)
  %n = f32[4] iota(), iota_dimension=0
  %v = f32[2,2] reshape(%n)
  %row = f32[1,6] slice(%x), slice={[2:3], [0:6]}
  %r = f32[6] reshape(%row)
  ROOT %out = (f32[2,2], f32[6]) tuple(%v, %r)
}""")
    a = assign_buffers(m, alignment=64)
    x, n, v, r = (by_name(m, k) for k in ("x", "n", "v", "r"))
    assert a.slice(x) == BufferSlice("input", 0, 0, 96)
    assert a.slice(v).start == a.slice(n).start and a.slice(v).size == 16
    assert a.slice(r) == BufferSlice("input", 0, 48, 24)        # row 2 of the input
    assert a.is_view(v) and a.is_view(r) and not a.is_view(n)


def test_loop_body_values_live_in_the_loop_state():
    m = parse_module(RNN)
    optimize(m, CPU)
    a = plan_memory(m, CPU)
    w = next(i for i in m.entry.instructions if i.opcode is Opcode.WHILE)
    body = w.called[1]
    state = a.slice(w)
    (p,) = body.parameters
    elements = [i for i in body.instructions if i.opcode is Opcode.GET_TUPLE_ELEMENT
                and i.operands[0] is p]
    for e in elements:
        assert a.slice(e) == state[e.attrs["index"]]
    # The init's elements are the state: x and r stay where the caller has them.
    assert state[3].space in ("arena", "input") and state[4] == BufferSlice("input", 1, 0, 36)


def test_a_while_is_a_step_with_its_condition_and_body():
    m = parse_module(RNN)
    optimize(m, CPU)
    a, steps = _steps(m)
    (w,) = [s for s in steps if isinstance(s, While)]
    assert w.predicate == a.slice(w.instr.called[0].root)
    assert any(isinstance(s, Kernel) and s.instr.opcode in (Opcode.DOT, Opcode.FUSION)
               for s in w.body)
    # The body's outputs that are not computed in place in the state are copied there.
    for s in w.body:
        if isinstance(s, Copy):
            assert s.dst in a.leaves(w.instr)
    # The model's outputs end in the caller's buffers.
    outputs = {s.dst.index for s in steps if isinstance(s, Copy) and s.dst.space == "output"}
    written = {s.result.index for s in steps if isinstance(s, (Loop, Kernel))
               and not isinstance(s.result, tuple) and s.result.space == "output"}
    assert outputs | written == {0, 1}


def test_a_conditional_is_a_step_per_branch():
    m = parse("""
%then (p: (f32[4])) -> f32[4] {
  %p = (f32[4]) parameter(0)
  %x = f32[4] get-tuple-element(%p), index=0
  ROOT %y = f32[4] negate(%x)
}

%else (q: (f32[4])) -> f32[4] {
  %q = (f32[4]) parameter(0)
  %x = f32[4] get-tuple-element(%q), index=0
  ROOT %y = f32[4] exponential(%x)
}

ENTRY %main (c: pred[], x: f32[4]) -> f32[4] {
  %c = pred[] parameter(0)
  %x = f32[4] parameter(1)
  %t = (f32[4]) tuple(%x)
  %e = (f32[4]) tuple(%x)
  ROOT %r = f32[4] conditional(%c, %t, %e), true_computation=%then, false_computation=%else
}""")
    a, steps = _steps(m)
    (cond,) = [s for s in steps if isinstance(s, Conditional)]
    assert cond.index == BufferSlice("input", 0, 0, 1)
    assert [len(b) for b in cond.branches] == [1, 1]
    for branch in cond.branches:
        (loop,) = branch
        assert isinstance(loop, Loop) and loop.operands == (BufferSlice("input", 1, 0, 16),)


def test_kernels_carry_their_spec_scratch_and_lean_variant():
    m = parse("""
ENTRY %main (x: f32[1,16,32,32], k: f32[32,16,3,3]) -> f32[1,32,32,32] {
  %x = f32[1,16,32,32] parameter(0)
  %k = f32[32,16,3,3] parameter(1)
  ROOT %c = f32[1,32,32,32] convolution(%x, %k), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01
}""")
    a, steps = _steps(m)
    (k,) = kernel_steps(steps)
    assert k.kernel.kind == "kernel" and k.passed == (0, 1)
    assert k.operands == (a.slice(by_name(m, "x")), a.slice(by_name(m, "k")))
    assert (k.scratch is None) == (k.kernel.scratch_bytes == 0)
    assert k.lean == (k.instr in a.lean_kernels)


def test_steps_print_one_line_each():
    m = parse_module(RNN)
    optimize(m, CPU)
    a, steps = _steps(m)
    text = format_steps(steps)
    assert text.count("while %") == 1 and "  condition:" in text and "  body:" in text
    assert "predicate arena[" in text or "predicate input" in text
    assert all(line.strip() for line in text.splitlines())


def test_emit_steps_writes_the_step_list(tmp_path, capsys):
    out = tmp_path / "lenet.steps"
    assert main(["examples/lenet.onnx", "-o", str(out), "--emit", "steps"]) == 0
    text = out.read_text()
    lines = text.splitlines()
    assert lines[0].startswith("kernel %") and "reads input0[0:+3136]" in lines[0]
    assert lines[-1].startswith("loop %") and "-> output0[0:+40]" in lines[-1]
    assert out.with_suffix(".h").is_file()


def test_fusion_kinds_print_and_parse_as_xla_names():
    m = parse("""
%f (a: f32[4]) -> f32[4] {
  %a = f32[4] parameter(0)
  ROOT %n = f32[4] negate(%a)
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  ROOT %y = f32[4] fusion(%x), kind=kLoop, calls=%f
}""")
    y = m.entry.root
    assert y.attrs["kind"] is FusionKind.LOOP
    assert "kind=kLoop" in print_module(m)


def test_a_module_clone_is_independent():
    m = parse_module(RNN)
    c = m.clone()
    assert print_module(c) == print_module(m)
    optimize(c, CPU)
    assert print_module(c) != print_module(m)
    assert print_module(m) == print_module(parse_module(RNN))
    np.testing.assert_equal(computation(c, "body").name, "body")
