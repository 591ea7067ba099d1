"""Sequences and optionals as model inputs and outputs, through the C ABI: a sequence is
one argument of NAME_run per element (its length and element shapes pinned with
input_shapes / --input-shape NAME=[AxB,...]), an optional its content or, compiled
absent (absent_inputs / --absent-input), no argument; NAME_info's input_values and
output_values say which arguments make which model value. Checked from a C program built
against the header and through xlac.load, against ONNX's semantics."""
from __future__ import annotations

import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import xlac
from xlac.main import main

from sequence_models import sequence_model

C_STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
SHAPES = [(2, 3), (2, 3), (4, 3)]


def inputs():
    rng = np.random.default_rng(0)
    s = [rng.standard_normal(d).astype(np.float32) for d in SHAPES]
    return s, rng.standard_normal((1, 3)).astype(np.float32), np.array([1, 2], np.float32)


def reference(s, x, o):
    """The model's outputs as ONNX defines them (the reference evaluator's Identity
    refuses an empty optional)."""
    if o is not None:
        want = ReferenceEvaluator(sequence_model()).run(None, {"s": s, "x": x, "o": o})
        np.testing.assert_array_equal(want[3], o)
    return [np.concatenate(s), [*s, x], np.array(o is not None), o]


def assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):
            assert isinstance(g, list) and len(g) == len(w)
            for ge, we in zip(g, w):
                np.testing.assert_array_equal(ge, we)
        elif w is None:
            assert g is None
        else:
            np.testing.assert_array_equal(g, w)


def test_load_takes_and_returns_lists_and_none(tmp_path):
    s, x, o = inputs()
    xlac.compile(sequence_model(), tmp_path / "m.o", input_shapes={"s": SHAPES}, absent_inputs=["o"])
    m = xlac.load(tmp_path / "m.o")
    assert [(t.name, t.shape) for t in m.inputs] == [
        ("s[0]", (2, 3)), ("s[1]", (2, 3)), ("s[2]", (4, 3)), ("x", (1, 3))]
    assert [t.name for t in m.outputs] == ["y", "t[0]", "t[1]", "t[2]", "t[3]", "h"]
    assert [(v.name, v.kind, v.optional, v.first, v.count) for v in m.input_values] == [
        ("s", "sequence", False, 0, 3), ("x", "tensor", False, 3, 1),
        ("o", "absent", True, 4, 0)]
    assert [(v.name, v.kind, v.count) for v in m.output_values] == [
        ("y", "tensor", 1), ("t", "sequence", 4), ("h", "tensor", 1), ("oo", "absent", 0)]
    got = m(s, x)
    assert_same(got, reference(s, x, None))
    with pytest.raises(xlac.XlacError, match=r"input 's' is a sequence of 3 tensor\(s\), given "
                                             r"as a list; got 2 element\(s\)"):
        m(s[:2], x)


def test_present_optional_is_its_tensor(tmp_path):
    s, x, o = inputs()
    xlac.compile(sequence_model(), tmp_path / "m.o", input_shapes={"s": SHAPES})
    m = xlac.load(tmp_path / "m.o")
    assert [(v.name, v.kind, v.optional) for v in m.input_values][2] == ("o", "tensor", True)
    assert_same(m(s, x, o), reference(s, x, o))


def test_empty_sequence_input_takes_no_argument(tmp_path):
    x = inputs()[1]
    graph = helper.make_graph(
        [helper.make_node("SequenceInsert", ["s", "x"], ["t"]),
         helper.make_node("SequenceLength", ["s"], ["n"])], "g",
        [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [1, 3]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_sequence_value_info("t", TensorProto.FLOAT, [1, 3]),
         helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    empty = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    xlac.compile(empty, tmp_path / "m.o", input_shapes={"s": []})
    m = xlac.load(tmp_path / "m.o")
    assert [t.name for t in m.inputs] == ["x"]
    (t,), n = m([], x)
    np.testing.assert_array_equal(t, x)
    assert n == 0


C_PROGRAM = r"""
#include <stdio.h>
#include "m.h"

static const char *KINDS[] = {"tensor", "sequence", "absent"};

static void values(const char *which, int n, const xlac_value_info *v) {
  int k;
  for (k = 0; k < n; ++k)
    printf("%s %s %s %d %d %d\n", which, v[k].name, KINDS[v[k].kind], (int)v[k].optional,
           (int)v[k].first, (int)v[k].count);
}

int main(void) {
  static float s0[6], s1[6], s2[12], x[3], y[24], t0[6], t1[6], t2[12], t3[3];
  static unsigned char arena[m_ARENA_SIZE + 1] __attribute__((aligned(64)));
  uint8_t h = 7;
  int k, status;
  for (k = 0; k < 6; ++k) { s0[k] = (float)k; s1[k] = 10.0f + (float)k; }
  for (k = 0; k < 12; ++k) s2[k] = 20.0f + (float)k;
  for (k = 0; k < 3; ++k) x[k] = -1.0f - (float)k;
  status = m_run(s0, s1, s2, x, y, t0, t1, t2, t3, &h, arena);
  printf("status %d\n", status);
  printf("y");
  for (k = 0; k < 24; ++k) printf(" %g", (double)y[k]);
  printf("\nt2 %g %g\nt3 %g %g %g\nh %d\n", (double)t2[0], (double)t2[11], (double)t3[0],
         (double)t3[1], (double)t3[2], (int)h);
  values("in", m_info.num_input_values, m_info.input_values);
  values("out", m_info.num_output_values, m_info.output_values);
  return status;
}
"""


def test_c_program_calls_one_argument_per_element(tmp_path, capsys):
    onnx.save(sequence_model(), tmp_path / "m.onnx")
    status = main([str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.o"),
                   "--input-shape", "s=[2x3,2x3,4x3]", "--absent-input", "o"])
    assert status == 0, capsys.readouterr().err
    header = (tmp_path / "m.h").read_text()
    assert 'input "s": a sequence of 3 tensors: s_0, s_1, s_2' in header
    assert 'input "o": an optional compiled empty: no argument' in header
    assert 'output "oo": an optional compiled empty: no argument' in header
    (tmp_path / "app.c").write_text(C_PROGRAM)
    build = subprocess.run(["cc", *C_STRICT, str(tmp_path / "app.c"), str(tmp_path / "m.o"),
                            f"-I{tmp_path}", f"-I{xlac.loader.RUNTIME_DIR}", "-lm", "-o",
                            str(tmp_path / "app")], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    done = subprocess.run([str(tmp_path / "app")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    s = [np.arange(6, dtype=np.float32).reshape(2, 3),
         10 + np.arange(6, dtype=np.float32).reshape(2, 3),
         20 + np.arange(12, dtype=np.float32).reshape(4, 3)]
    x = -1 - np.arange(3, dtype=np.float32).reshape(1, 3)
    y, t, h, oo = reference(s, x, None)
    assert lines[0] == "status 0"
    np.testing.assert_array_equal([float(v) for v in lines[1].split()[1:]], y.reshape(-1))
    assert lines[2] == f"t2 {t[2][0, 0]:g} {t[2][3, 2]:g}"
    assert lines[3] == "t3 " + " ".join(f"{v:g}" for v in t[3].reshape(-1))
    assert lines[4] == f"h {int(h)}" and oo is None
    assert lines[5:] == ["in s sequence 0 0 3", "in x tensor 0 3 1", "in o absent 1 4 0",
                         "out y tensor 0 0 1", "out t sequence 0 1 4", "out h tensor 0 5 1",
                         "out oo absent 1 6 0"]


def test_report_lists_the_flattened_signature(tmp_path):
    result = xlac.compile(sequence_model(), tmp_path / "m.o", input_shapes={"s": SHAPES},
                          absent_inputs=["o"], report=True)
    sig = result.report["signature"]
    assert [(v["name"], v["kind"], [a["c_name"] for a in v["arguments"]])
            for v in sig["inputs"]] == [("s", "sequence", ["s_0", "s_1", "s_2"]),
                                        ("x", "tensor", ["x"]), ("o", "absent", [])]
    text = xlac.report.format_report(result.report)
    assert ("  inputs              s: a sequence of 3, s_0 f32[2x3], s_1 f32[2x3], s_2 f32[4x3]; "
            "x f32[1x3]; o: an optional compiled empty, no argument") in text
