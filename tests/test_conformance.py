"""The conformance command itself: which cases it collects, which op each case tests,
the statuses it gives, the report it writes and the known-failures lists it prunes."""
from __future__ import annotations

import collections

import onnx
import pytest

from xlac.conformance.cases import SUITES, CaseResult, collect, prune_failures, run_case
from xlac.conformance.main import main
from xlac.conformance.support_report import _op_status, render

NODE = {c.id: c for c in collect(("node",))}


@pytest.mark.parametrize("case_id, op", [
    ("test_abs", "Abs"),
    ("test_softmax_axis_1_expanded", "Softmax"),            # the function body of Softmax
    ("test_softmax_axis_1_expanded_ver18", "Softmax"),
    ("test_layer_normalization_2d_axis0_expanded_ver18", "LayerNormalization"),
    ("test_ai_onnx_ml_binarizer", "ai.onnx.ml.Binarizer"),
    ("test_adam", "ai.onnx.preview.training.Adam"),
])
def test_node_case_is_attributed_to_the_op_under_test(case_id, op):
    assert NODE[case_id].ops == (op,)


def test_every_node_case_is_attributed_to_an_onnx_op():
    known = {s.name if s.domain in ("", "ai.onnx") else f"{s.domain}.{s.name}"
             for s in onnx.defs.get_all_schemas()}
    assert sorted({c.ops[0] for c in NODE.values()} - known) == []


def test_data_set_cases_have_suite_ids_and_their_models_ops():
    cases = {c.id: c for c in collect(("simple", "pytorch-operator", "light"))}
    assert {c.suite for c in cases.values()} == {"simple", "pytorch-operator", "light"}
    assert cases["simple/test_sign_model"].ops == ("Sign",)
    assert cases["pytorch-operator/test_operator_basic"].ops == (
        "Add", "Mul", "Tanh", "Sigmoid", "Neg")
    assert len([c for c in cases.values() if c.suite == "light"]) == 9


@pytest.mark.parametrize("case_id, status, detail", [
    ("simple/test_sign_model", "pass", ""),
    ("test_reshape_negative_dim", "pass", ""),                      # shape pinned at run
    ("test_strnormalizer_export_monday_casesensintive_lower", "out of scope",
     "out of scope: StringNormalizer (node 'y'): works on strings"),
    ("test_identity_sequence", "pass", ""),                         # a sequence in and out
    ("test_optional_has_element_empty_optional_input", "pass", ""),  # None: compiled absent
    ("simple/test_sequence_model8", "pass", ""),                     # a dynamic dim pinned
    ("test_if_opt", "pass", ""),               # the condition pinned: one branch's optional
])
def test_run_case_statuses(case_id, status, detail):
    (case,) = [c for c in collect(SUITES, f"^{case_id}$")]
    result = run_case(case)
    assert (result.status, result.detail[:len(detail)]) == (status, detail)


def test_run_case_reports_a_mismatch():
    case = NODE["test_abs"]
    inputs, (expected,) = case.data_sets[0]
    case.data_sets = [(inputs, [expected + 1])]
    try:
        result = run_case(case)
    finally:
        case.data_sets = [(inputs, [expected])]
    assert result.status == "mismatch"
    assert result.detail.startswith(f"output 0: {expected.size} of {expected.size} elements off")


def results():
    return [CaseResult("test_abs", "node", ("Abs",), "pass"),
            CaseResult("test_acos", "node", ("Acos",), "error",
                       "unsupported ONNX ops: Acos (node 'y')"),
            CaseResult("test_nonzero_example", "node", ("NonZero",), "out of scope",
                       "out of scope: NonZero (node 'result'): the shape | of its output"),
            CaseResult("simple/test_sign_model", "simple", ("Sign",), "pass"),
            CaseResult("simple/test_shrink", "simple", ("Shrink",), "error", "unsupported")]


def test_report_counts_suites_lists_every_operator_and_every_failing_case():
    text = render(results(), ("node", "simple"))
    assert "| node | 3 | 1 (33.3%) | 0 | 1 | 1 | 0 | 0 |" in text
    assert "| simple | 2 | 1 (50.0%) | 0 | 1 | 0 | 0 | 0 |" in text
    assert "| **all** | 5 | 2 (40.0%) | 0 | 2 | 1 | 0 | 0 |" in text
    for s in onnx.defs.get_all_schemas():
        assert f"\n| {s.name} | " in text
    assert "| Abs | supported | 1/1 | – |  |" in text
    assert "| NonZero | out of scope | 0/1 | – | out of scope: the shape of its output" in text
    assert ("| Dropout | supported (no node case) | – | – | out of scope in part: "
            "training_mode=1 with a nonzero ratio draws a random mask") in text
    assert ("| test_nonzero_example | NonZero | out of scope | out of scope: NonZero (node "
            "'result'): the shape \\| of its output |") in text
    assert "| simple/test_shrink | Shrink | error | unsupported |" in text
    assert "test_abs |" not in text.split("## Cases that do not pass")[1]


def test_operator_status():
    none, two_of_three = collections.Counter(), collections.Counter({"pass": 2, "error": 1})
    assert _op_status(False, None, none) == "unsupported"
    assert _op_status(False, "why", none) == "out of scope"
    assert _op_status(True, None, none) == "supported (no node case)"
    assert _op_status(True, None, collections.Counter({"pass": 3})) == "supported"
    assert _op_status(True, None, two_of_three) == "partial"
    assert _op_status(True, None, collections.Counter({"error": 3})) == "failing"
    assert _op_status(True, "why", collections.Counter({"pass": 2, "out of scope": 1})) \
        == "supported"


def test_prune_removes_only_cases_that_pass(tmp_path):
    listed = tmp_path / "failures.txt"
    listed.write_text("# comment\ntest_abs was failing\ntest_acos unsupported\n"
                      "simple/test_sign_model was failing\nsimple/test_shrink unsupported\n")
    assert prune_failures(str(listed), results()) == 2
    assert listed.read_text() == ("# comment\ntest_acos unsupported\n"
                                  "simple/test_shrink unsupported\n")


def test_command_runs_a_few_cases_and_writes_the_report(tmp_path, capsys):
    report = tmp_path / "support.md"
    assert main(["-k", "^(test_abs|test_unique_length_1|simple/test_sign_model)$", "-j", "1",
                 "--report", str(report), "-v"]) == 0
    out = capsys.readouterr().out
    assert "3 cases: 2 pass, 1 out of scope" in out
    assert "out of scope test_unique_length_1  out of scope: Unique (node 'Y')" in out
    text = report.read_text()
    assert "on a subset only" in text and "| node | 2 | 1 (50.0%) | 0 | 0 | 1 |" in text
