"""ProjectionSinking: a recurrent loop's input projection computed per step in its body.

HLO snippets in, the pass, the expected form and the evaluator's values before and
after; a does-not case for each condition; then ONNX's recurrent ops, whose importer
writes the projection before the loop, and the driver choosing the smaller arena.
"""
import textwrap

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import xlac
from xlac.hlo import Opcode
from xlac.hlo.evaluator import evaluate
from xlac.hlo.verifier import verify
from xlac.importers.onnx import import_onnx
from xlac.optimizer import ProjectionSinking, alternatives
from hlo_util import parse


def hlo(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


# P = x . w^T + b for 4 steps before the loop; step t reads row t of P. ``READ`` is how
# the body reads the projection, ``AFTER`` what the entry returns.
LOOP = """
    %cond (s: (s64[], f32[4,2,8], f32[2,8])) -> pred[] {
      %s = (s64[], f32[4,2,8], f32[2,8]) parameter(0)
      %t = s64[] get-tuple-element(%s), index=0
      %n = s64[] constant(4)
      ROOT %lt = pred[] compare(%t, %n), direction=LT
    }

    %body (p: (s64[], f32[4,2,8], f32[2,8])) -> (s64[], f32[4,2,8], f32[2,8]) {
      %p = (s64[], f32[4,2,8], f32[2,8]) parameter(0)
      %t = s64[] get-tuple-element(%p), index=0
      %proj = f32[4,2,8] get-tuple-element(%p), index=1
      %h = f32[2,8] get-tuple-element(%p), index=2
      %zero = s64[] constant(0)
      READ
      %next = f32[2,8] tanh(%sum)
      %one = s64[] constant(1)
      %t1 = s64[] add(%t, %one)
      ROOT %r = (s64[], f32[4,2,8], f32[2,8]) tuple(%t1, PASSED, %next)
    }

    ENTRY %main (x: f32[4,2,3], w: f32[8,3]) -> f32[2,8] {
      %x = f32[4,2,3] parameter(0)
      %w = f32[8,3] parameter(1)
      %d = f32[4,2,8] dot(%x, %w), lhs_contracting_dims={2}, rhs_contracting_dims={1}
      %bias = f32[8] constant({1, 2, 3, 4, 5, 6, 7, 8})
      %b = f32[4,2,8] broadcast(%bias), dimensions={2}
      %P = f32[4,2,8] add(%d, %b)
      %t0 = s64[] constant(0)
      %c0 = f32[] constant(0)
      %h0 = f32[2,8] broadcast(%c0), dimensions={}
      %init = (s64[], f32[4,2,8], f32[2,8]) tuple(%t0, %P, %h0)
      %loop = (s64[], f32[4,2,8], f32[2,8]) while(%init), condition=%cond, body=%body
      AFTER
    }
    """
SLICED = """%row = f32[1,2,8] dynamic-slice(%proj, %t, %zero, %zero), dynamic_slice_sizes={1,2,8}
      %flat = f32[2,8] reshape(%row)
      %sum = f32[2,8] add(%flat, %h)"""
RETURNED = "ROOT %y = f32[2,8] get-tuple-element(%loop), index=2"


def loop(read: str = SLICED, after: str = RETURNED, passed: str = "%proj") -> str:
    return hlo(LOOP).replace("READ", read).replace("AFTER", after).replace("PASSED", passed)


def _values(m, seed=0):
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in m.entry.parameters]
    return evaluate(m, args)


def _sunk(text: str):
    before, after = parse(text), parse(text)
    changed = ProjectionSinking().run(after)
    verify(after)
    return changed, before, after


def test_sinks_the_projection_into_the_body():
    changed, before, after = _sunk(loop())
    assert changed
    # The state holds x and w (run-time values) in place of P; no product before the loop.
    w = next(i for i in after.entry.instructions if i.opcode is Opcode.WHILE)
    assert [s.dims for s in w.shape.tuple_shapes] == [(), (2, 8), (4, 2, 3), (8, 3)]
    assert not any(i.opcode is Opcode.DOT for i in after.entry.reachable())
    body = next(c for c in after.computations if c.name == "body")
    dot = next(i for i in body.instructions if i.opcode is Opcode.DOT)
    assert dot.shape.dims == (1, 2, 8)
    assert dot.operands[0].opcode is Opcode.DYNAMIC_SLICE
    assert dot.operands[0].operands[0].opcode is Opcode.GET_TUPLE_ELEMENT
    adds = [i for i in body.instructions if i.opcode is Opcode.BROADCAST
            and i.operands[0].opcode is Opcode.CONSTANT]
    assert adds and adds[0].shape.dims == (1, 2, 8)       # the bias, broadcast per step
    np.testing.assert_allclose(_values(after)[0], _values(before)[0], rtol=1e-6)


def test_sinks_a_slice_of_the_columns():
    """A step reading gates 4..8 of P: the product of the rows 4..8 of w."""
    read = """%c4 = s64[] constant(4)
      %row = f32[1,2,4] dynamic-slice(%proj, %t, %zero, %c4), dynamic_slice_sizes={1,2,4}
      %flat = f32[2,4] reshape(%row)
      %wide = f32[2,8] concatenate(%flat, %flat), dimensions={1}
      %sum = f32[2,8] add(%wide, %h)"""
    changed, before, after = _sunk(loop(read))
    assert changed
    body = next(c for c in after.computations if c.name == "body")
    dot = next(i for i in body.instructions if i.opcode is Opcode.DOT)
    assert dot.shape.dims == (1, 2, 4) and dot.operands[1].shape.dims == (4, 3)
    np.testing.assert_allclose(_values(after)[0], _values(before)[0], rtol=1e-6)


def test_does_not_sink_a_projection_the_body_reads_otherwise():
    changed, _, _ = _sunk(loop("""%row = f32[1,2,8] slice(%proj), slice={[0:1], [0:2], [0:8]}
      %flat = f32[2,8] reshape(%row)
      %sum = f32[2,8] add(%flat, %h)"""))
    assert not changed


def test_does_not_sink_a_projection_read_after_the_loop():
    after = """%last = f32[4,2,8] get-tuple-element(%loop), index=1
      %y = f32[2,8] get-tuple-element(%loop), index=2
      ROOT %out = (f32[2,8], f32[4,2,8]) tuple(%y, %last)"""
    text = loop(after=after).replace("-> f32[2,8] {\n  %x", "-> (f32[2,8], f32[4,2,8]) {\n  %x")
    changed, _, _ = _sunk(text)
    assert not changed


def test_does_not_sink_an_element_the_loop_writes():
    changed, _, _ = _sunk(loop(passed="%proj_new").replace(
        "  %next = f32[2,8] tanh(%sum)",
        "  %next = f32[2,8] tanh(%sum)\n  %proj_new = f32[4,2,8] negate(%proj)"))
    assert not changed


def test_does_not_sink_a_value_that_is_no_projection():
    changed, _, _ = _sunk(loop().replace("%P = f32[4,2,8] add(%d, %b)",
                                         "%P = f32[4,2,8] broadcast(%bias), dimensions={2}"))
    assert not changed


def test_does_not_sink_a_projection_read_elsewhere_before_the_loop():
    text = loop(after="""%y = f32[2,8] get-tuple-element(%loop), index=2
      %p0 = f32[1,2,8] slice(%P), slice={[0:1], [0:2], [0:8]}
      %p0r = f32[2,8] reshape(%p0)
      ROOT %out = f32[2,8] add(%y, %p0r)""")
    changed, _, _ = _sunk(text)
    assert not changed


def lstm(direction: str = "forward", steps: int = 6, batch: int = 2, sequence_lens=False):
    rng = np.random.default_rng(0)
    d, hidden, inputs = (2 if direction == "bidirectional" else 1), 5, 3
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("W", (d, 4 * hidden, inputs)), ("R", (d, 4 * hidden, hidden)),
                          ("B", (d, 8 * hidden)))]
    names = ["x", "W", "R", "B"]
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, (steps, batch, inputs))]
    if sequence_lens:
        names.append("lens")
        graph_inputs.append(helper.make_tensor_value_info("lens", TensorProto.INT32, (batch,)))
    node = helper.make_node("LSTM", names, ["y"], hidden_size=hidden, direction=direction)
    graph = helper.make_graph([node], "g", graph_inputs, [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, (steps, d, batch, hidden))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("sequence_lens", [False, True])
def test_lstm_projection_sinks_with_the_same_values(direction, sequence_lens):
    """Every direction's projection sinks, but where a reverse direction has
    sequence_lens: the loop reads its rows through a gather reversing each sequence
    within its length."""
    model = lstm(direction, sequence_lens=sequence_lens)
    before = import_onnx(model)
    candidates = alternatives(import_onnx(model))
    sinks = not (sequence_lens and direction != "forward")
    assert len(candidates) == 1 + sinks
    if not sinks:
        return
    after = candidates[1]
    verify(after)
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) if p.shape.dtype.is_float
            else np.array([6, 3], np.int32) for p in before.entry.parameters]
    for got, want in zip(evaluate(after, args), evaluate(before, args)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    dots = [sum(i.opcode is Opcode.DOT for i in m.entry.reachable()) for m in (before, after)]
    assert dots == [1, 0]


def test_models_without_loops_have_no_alternative():
    m = parse("""ENTRY %main (x: f32[4]) -> f32[4] {
      %x = f32[4] parameter(0)
      ROOT %y = f32[4] negate(%x)
    }""")
    assert alternatives(m) == [m]


def test_compile_keeps_the_smaller_arena_and_matches_onnxruntime(tmp_path):
    """Many steps and a small state: the per-step projection needs no steps x gates
    buffer, so the compile keeps it; outputs as onnxruntime's."""
    import onnxruntime as ort
    model = lstm(steps=64, batch=1)
    hoisted = xlac.compile(model, tmp_path / "h.o", report=True)
    x = np.random.default_rng(2).standard_normal((64, 1, 3)).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (got,) = xlac.load(tmp_path / "h.o")(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # The steps x gates projection (64 x 20 floats) would take more than the whole arena.
    assert hoisted.arena_size < 64 * 20 * 4
