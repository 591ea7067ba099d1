"""If, Loop, Scan, RNN, GRU and LSTM beyond the op table (tests/onnx_ops.py): the
shape of the recurrent lowering (the input projection of all steps hoisted out of the
loop as one matrix product, one batched recurrent product per step, Y written in place
in the caller's output), layout 1, which onnxruntime does not run, checked against
layout 0, and the one-line errors for what cannot be compiled (sequences: the node
cases test_loop13_seq and friends, tests/onnx_node_failures.txt)."""
import numpy as np
import onnx
import pytest
from onnx import helper

import xlac
from xlac.hlo import Opcode
from xlac.importers.onnx import import_onnx
from xlac.optimizer import alternatives, optimize, plan_memory
from xlac.hlo.fusion import is_output_fusion, output_fusion_core
from onnx_ops import make_model
from test_end_to_end import run_onnxruntime
from hlo_util import CPU, ScratchPolicy

rng = np.random.default_rng(7)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def weights(op, hidden, x, dirs, layout, lens=None):
    """The inputs of a recurrent node over ``x`` (in ``layout``), by input name."""
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    batch = x.shape[1] if layout == 0 else x.shape[0]
    state = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    values = {"X": x, "W": f32(dirs, gates * hidden, x.shape[2]) * 0.5,
              "R": f32(dirs, gates * hidden, hidden) * 0.5, "B": f32(dirs, 2 * gates * hidden),
              "initial_h": f32(*state)}
    if lens is not None:
        values["sequence_lens"] = np.asarray(lens, np.int32)
    if op == "LSTM":
        values["initial_c"] = f32(*state)
    return values


def recurrent(op, hidden, values, dirs, layout, outputs=("Y", "Y_h")):
    names = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c"]
    names = [n if n in values else "" for n in names if n != "initial_c" or op == "LSTM"]
    node = helper.make_node(op, names, list(outputs), hidden_size=hidden, layout=layout,
                            direction="bidirectional" if dirs == 2 else "forward")
    order = [n for n in names if n]
    return make_model([node], {n: values[n] for n in order}, outputs=list(outputs),
                      opset=14), [values[n] for n in order]


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_layout_1_is_layout_0_transposed(op, tmp_path):
    outputs = ("Y", "Y_h", "Y_c") if op == "LSTM" else ("Y", "Y_h")
    values = weights(op, 5, f32(3, 4, 2), 2, 1, lens=[4, 1, 3])
    model, args = recurrent(op, 5, values, 2, 1, outputs)
    m = xlac.load(xlac.compile(model, tmp_path / "m.o").output)
    got = m(*args)
    # The same network in layout 0: X [T, B, I], states [D, B, H], Y [T, D, B, H].
    swapped = {n: v.transpose(1, 0, 2) if n in ("X", "initial_h", "initial_c") else v
               for n, v in values.items()}
    want = run_onnxruntime(*recurrent(op, 5, swapped, 2, 0, outputs))
    np.testing.assert_allclose(got[0], want[0].transpose(2, 0, 1, 3), rtol=1e-4, atol=1e-5)
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g, w.transpose(1, 0, 2), rtol=1e-4, atol=1e-5)


def test_lstm_projection_is_hoisted_and_y_is_written_in_place():
    model, _ = recurrent("LSTM", 8, weights("LSTM", 8, f32(10, 2, 6), 2, 0), 2, 0,
                         outputs=("Y", "Y_h", "Y_c"))
    m = import_onnx(model)
    optimize(m, CPU)
    w = next(i for i in m.entry.instructions if i.opcode is Opcode.WHILE)
    cond, body = w.called
    # One matrix product for the inputs of all steps, before the loop (its bias fused into
    # it); one per step for the state, batched over both directions.
    assert sum(i.opcode is Opcode.DOT or (is_output_fusion(i) and output_fusion_core(
        i.called[0]).opcode is Opcode.DOT) for i in m.entry.instructions) == 1
    dots = [i for i in body.instructions if i.opcode is Opcode.DOT]
    assert len(dots) == 1 and dots[0].attrs["dimension_numbers"].lhs_batch == (0,)
    ba = plan_memory(m, ScratchPolicy(64))
    y_rows = [i for i in body.instructions if i.opcode is Opcode.DYNAMIC_UPDATE_SLICE]
    assert len(y_rows) == 2               # the forward and the reverse direction's rows
    # The last row write lands in the state element, which is model output 0: no copy.
    out = body.root.operands[[o.opcode for o in body.root.operands].index(
        Opcode.DYNAMIC_UPDATE_SLICE)]
    assert ba.location(out).space == "output"
    y0 = w.operands[0].operands[body.root.operands.index(out)]
    assert ba.location(y0).space == "output" and ba.location(y0).index == 0


# -- errors -----------------------------------------------------------------------------

_F, _B, _I = onnx.TensorProto.FLOAT, onnx.TensorProto.BOOL, onnx.TensorProto.INT64


def _graph(name, nodes, ins, outs):
    return helper.make_graph(nodes, name, [helper.make_tensor_value_info(*v) for v in ins],
                             [helper.make_tensor_value_info(*v) for v in outs])


def _loop_model(cond_out: str):
    body = _graph("body", [helper.make_node("Identity", ["cond_in"], ["c"]),
                           helper.make_node("Not", ["cond_in"], ["n"]),
                           helper.make_node("Add", ["a_in", "a_in"], ["a_out"]),
                           helper.make_node("Identity", ["a_out"], ["s"])],
                  [("i", _I, []), ("cond_in", _B, []), ("a_in", _F, [2])],
                  [(cond_out, _B, []), ("a_out", _F, [2]), ("s", _F, [2])])
    node = helper.make_node("Loop", ["m", "cond", "a"], ["y", "scan"], name="looping",
                            body=body)
    return make_model([node], {"m": np.array(3, np.int64), "cond": np.array(True),
                               "a": f32(2)}, outputs=[("y", np.float32, (2,)),
                                                      ("scan", np.float32, (3, 2))], opset=13)


def test_loop_scan_outputs_need_the_trip_count(tmp_path):
    from xlac.importers.onnx import ConstantInputNeeded
    with pytest.raises(ConstantInputNeeded, match="input 'm' \\(trip count M\\) must be known"):
        xlac.compile(_loop_model("c"), tmp_path / "m.o")
    # Pinned, as the error says: the loop runs M times and stacks M rows.
    m = xlac.load(xlac.compile(_loop_model("c"), tmp_path / "m.o",
                               const_inputs={"m": np.array(3, np.int64),
                                             "cond": np.array(True)}).output)
    y, scan = m(np.array([1, -2], np.float32))
    np.testing.assert_array_equal(scan, [[2, -4], [4, -8], [8, -16]])


def test_loop_scan_outputs_with_a_computed_condition_fail_in_one_line(tmp_path):
    with pytest.raises(xlac.XlacError) as info:
        xlac.compile(_loop_model("n"), tmp_path / "m.o",
                     const_inputs={"m": np.array(3, np.int64), "cond": np.array(True)})
    message = str(info.value)
    assert message == ("Loop node 'looping': scan outputs need a static trip count, but the "
                       "body computes its condition (it may stop early)")


def test_if_branches_of_different_shapes_fail_in_one_line(tmp_path):
    then = _graph("then", [helper.make_node("Neg", ["x"], ["t"])], [], [("t", _F, [3])])
    other = _graph("else", [helper.make_node("Slice", ["x", "s", "e"], ["u"])], [],
                   [("u", _F, [2])])
    node = helper.make_node("If", ["c"], ["y"], name="choice", then_branch=then,
                            else_branch=other)
    model = make_model([node], {"c": np.array(True), "x": f32(3)},
                       outputs=[("y", np.float32, None)],
                       inits={"s": np.array([0], np.int64), "e": np.array([2], np.int64)})
    with pytest.raises(xlac.XlacError, match="If node 'choice': output 0 is f32\\[3\\]"):
        xlac.compile(model, tmp_path / "m.o")


# -- the input projection: before the loop, or in each step -------------------------------

@pytest.mark.parametrize("name", ["LSTM_bidirectional_lengths_all_outputs",
                                  "LSTM_clip_input_forget_activations",
                                  "GRU_linear_before_reset_bidirectional_lengths",
                                  "GRU_activations", "RNN_bidirectional_no_bias",
                                  "LSTM_reverse_lengths_constant_weights"])
def test_both_projection_forms_match_onnxruntime(name, tmp_path):
    """The importer's form (every step's projection before the loop) and, where the
    projection sinks (optimizer/projection_sinking.py: not where a reverse direction
    reads its rows through sequence_lens' gather), each step's own in the loop."""
    from emit_util import compile_modules
    from onnx_ops import CASES
    case = next(c for c in CASES if c.name == name)
    model = case.build()
    candidates = alternatives(import_onnx(model))
    assert len(candidates) == (1 if "lengths" in name and "LSTM_clip" not in name else 2)
    for m in candidates:
        optimize(m, CPU)
    dots = [[sum(i.opcode is Opcode.DOT or is_output_fusion(i) for i in c.instructions)
             for c in (while_body(m), m.entry)] for m in candidates]
    if len(candidates) == 2:      # the step's own projection in the body, none before it
        assert dots[1][0] > dots[0][0] and dots[0][1] == 1 and dots[1][1] == 0
    built = compile_modules({f"m{k}": m for k, m in enumerate(candidates)}, tmp_path)
    want = run_onnxruntime(model, case.inputs)
    for compiled in built.values():
        for g, w in zip(compiled(*case.inputs), want):
            np.testing.assert_allclose(g, w, rtol=case.rtol, atol=case.atol)


def while_body(m):
    return next(i for i in m.entry.instructions if i.opcode is Opcode.WHILE).called[1]


def test_footprint_first_keeps_each_steps_projection_in_the_loop(tmp_path):
    """At batch 1 the projection of all 30 steps (30 x 4 x 16 floats) would be most of
    the arena: xlac.compile keeps each step's projection in the loop instead."""
    values = weights("LSTM", 16, f32(30, 1, 6), 1, 0)
    model, args = recurrent("LSTM", 16, values, 1, 0, outputs=("Y_h",))
    result = xlac.compile(model, tmp_path / "m.o", report=True)
    assert result.arena_size < 30 * 4 * 16 * 4
    got, = xlac.load(result.output)(*args)
    np.testing.assert_allclose(got, run_onnxruntime(model, args)[0], rtol=1e-4, atol=1e-5)
