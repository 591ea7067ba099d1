"""The ONNX importer: every op case of tests/onnx_ops.py imported and evaluated with
the HLO reference evaluator against onnxruntime; structure of the module;
user-facing errors; the onnx package's light models against their stored outputs."""
from __future__ import annotations

import glob
import os
import re
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from xlac.hlo import Opcode, XlacError, dtypes
from xlac.hlo.evaluator import evaluate
from xlac.importers.onnx import (ConstantInputNeeded, OutOfScope, import_onnx, scope,
                                 supported_ops)
from xlac.importers.onnx.reduce import MAX_WINDOW_SCAN

sys.path.insert(0, os.path.dirname(__file__))
from onnx_ops import CASES, make_model, node  # noqa: E402


def run_ort(model: onnx.ModelProto, inputs) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {i.name: a for i, a in zip(sess.get_inputs(), inputs)}
    return sess.run(None, feeds)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_op_matches_onnxruntime(case):
    model = case.build()
    module = import_onnx(model)
    got = evaluate(module, list(case.inputs))
    want = run_ort(case.oracle(model), case.inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=case.rtol, atol=case.atol)


# -- module structure ------------------------------------------------------------------

def _two_output_model():
    x = np.zeros((2, 3), np.float32)
    return make_model([node("Relu", ["x"], ["a"]), node("Neg", ["x"], ["b"])],
                      {"x": x, "w": x}, outputs=("a", "b"))


def test_signature_parameters_and_tuple_root():
    module = import_onnx(_two_output_model())
    sig = module.signature
    assert [(s.name, s.dtype, s.dims) for s in sig.inputs] == \
        [("x", dtypes.F32, (2, 3)), ("w", dtypes.F32, (2, 3))]
    assert [s.name for s in sig.outputs] == ["a", "b"]
    assert module.entry.root.opcode is Opcode.TUPLE
    assert [p.name for p in module.entry.parameters] == ["x", "w"]


def test_initializer_listed_as_input_is_a_constant():
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    model = make_model([node("Add", ["x", "w"])], {"x": w, "w": w}, inits={"w": w})
    module = import_onnx(model)
    assert [s.name for s in module.signature.inputs] == ["x"]
    assert len(module.entry.parameters) == 1
    np.testing.assert_array_equal(evaluate(module, [w])[0], 2 * w)


def test_accepts_path_bytes_and_proto(tmp_path):
    model = _two_output_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    for source in (model, model.SerializeToString(), str(path), path):
        assert [s.name for s in import_onnx(source).signature.outputs] == ["a", "b"]


def test_module_name_and_reducers_before_entry():
    x = np.zeros((2, 3), np.float32)
    model = make_model([node("ReduceSum", ["x"], keepdims=0)], {"x": x})
    module = import_onnx(model, name="net")
    assert module.name == "net"
    assert module.computations[-1] is module.entry
    assert len(module.computations) == 2


def test_shape_operands_are_folded_at_compile_time():
    # Shape -> Gather -> Unsqueeze -> Concat feeds Reshape: its target shape must be
    # known when the Reshape is lowered, so nothing reaches the entry as a shape op.
    case = next(c for c in CASES if c.name == "Shape_gather_concat_reshape")
    module = import_onnx(case.build())
    assert module.entry.root.shape.dims == (2, 12)


def test_opset_selects_handler():
    # Softmax axis=1 on (2,3,4): opset 11 normalizes over dims 1 and 2 together,
    # opset 13 over dim 1 only.
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    sums = []
    for opset in (11, 13):
        module = import_onnx(make_model([node("Softmax", ["x"], axis=1)], {"x": x},
                                        opset=opset))
        sums.append(evaluate(module, [x])[0].sum(axis=1))
    np.testing.assert_allclose(sums[1], np.ones((2, 4)), rtol=1e-5)
    assert not np.allclose(sums[0], 1.0)


def test_legacy_broadcast_before_opset_7():
    # Opset 6 Add: B aligned at `axis` of A when broadcast=1 (onnxruntime cannot run it).
    a = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    b = np.arange(3, dtype=np.float32)
    model = make_model([node("Add", ["a", "b"], broadcast=1, axis=1)], {"a": a, "b": b},
                       opset=6)
    got = evaluate(import_onnx(model), [a, b])[0]
    np.testing.assert_allclose(got, a + b[:, None])


def test_input_shapes_pin_dynamic_dims():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    g = helper.make_graph([node("Relu", ["x"])], "g", [x],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    module = import_onnx(model, input_shapes={"x": (5, 3)})
    assert module.signature.inputs[0].dims == (5, 3)
    assert module.signature.outputs[0].dims == (5, 3)


def test_supported_ops_cover_the_brief():
    ops = {op for (_, op) in supported_ops()}
    for op in ("Conv", "MaxPool", "AveragePool", "Gemm", "MatMul", "Slice", "Gather",
               "ReduceProd", "LRN", "BatchNormalization", "ConstantOfShape"):
        assert op in ops


# -- errors --------------------------------------------------------------------------------

def test_truncated_file(tmp_path):
    data = _two_output_model().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(XlacError, match=r"cannot read ONNX model '.*cut.onnx'"):
        import_onnx(str(path))


def test_missing_file(tmp_path):
    with pytest.raises(XlacError, match="cannot read ONNX model"):
        import_onnx(str(tmp_path / "absent.onnx"))


def test_invalid_model_fails_checker():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    g = helper.make_graph([node("Relu", ["nowhere"])], "g", [x],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(XlacError, match="invalid ONNX model"):
        import_onnx(model)


def _graph_model(nodes, inputs, outputs, opsets=(("", 17),)):
    """A model without shape inference (which stops at ops it has no schema for)."""
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def test_unsupported_and_out_of_scope_ops_are_all_listed_on_one_line():
    f32 = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [4])  # noqa: E731
    model = _graph_model(
        [helper.make_node("Fancy", ["x"], ["a"], name="fancy", domain="com.example"),
         helper.make_node("Relu", ["a"], ["r"], name="relu"),
         helper.make_node("NonZero", ["r"], ["nz"], name="nz_1"),
         helper.make_node("Bernoulli", ["x"], ["b"], name="coin"),
         helper.make_node("Unique", ["x"], ["u"], name="uniq"),
         helper.make_node("Fancy", ["b"], ["y"], domain="com.example")],
        [f32("x")], [f32("y"), f32("u"), helper.make_tensor_value_info("nz", TensorProto.INT64,
                                                                        [1, "n"])],
        opsets=(("", 17), ("com.example", 1)))
    with pytest.raises(XlacError) as e:
        import_onnx(model)
    assert not isinstance(e.value, OutOfScope)          # some of it may come one day
    assert str(e.value) == (
        "unsupported ONNX ops: com.example.Fancy (node 'fancy'), com.example.Fancy (node 'y'); "
        f"out of scope: NonZero (node 'nz_1'), Unique (node 'uniq'): {scope.DATA_SHAPE}; "
        f"Bernoulli (node 'coin'): {scope.RANDOM}")


def test_out_of_scope_alone_is_out_of_scope():
    model = _graph_model(
        [helper.make_node("Adam", ["r", "t", "x", "g", "v", "h"], ["x2", "v2", "h2"],
                          domain="ai.onnx.preview.training")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in "rtxgvh"],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("x2", "v2", "h2")],
        opsets=(("", 17), ("ai.onnx.preview.training", 1)))
    with pytest.raises(OutOfScope, match=r"^out of scope: ai.onnx.preview.training.Adam "
                       r"\(node 'x2'\): a training op"):
        import_onnx(model)


def test_ops_in_subgraphs_are_listed():
    branch = lambda name, op: helper.make_graph(  # noqa: E731
        [helper.make_node(op, ["x"], [f"{name}_y"], name=f"{name}_op")], name, [],
        [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [2])])
    model = _graph_model(
        [helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch("then", "Relu"),
                          else_branch=branch("else", "StringNormalizer"))],
        [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    with pytest.raises(XlacError, match=r"StringNormalizer \(node 'else_op'\): "
                       f"{scope.STRINGS}$"):
        import_onnx(model)


@pytest.mark.parametrize("value, message", [
    (helper.make_value_info("x", helper.make_map_type_proto(
        TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))),
     "out of scope: input 'x' holds a map, which compiled code does not hold"),
    (helper.make_value_info("x", helper.make_sequence_type_proto(
        helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))),
     "out of scope: input 'x' holds a sequence of a sequence, which compiled code does not "
     "hold"),
    (helper.make_tensor_value_info("x", TensorProto.STRING, [2]),
     "out of scope: input 'x' holds strings, which compiled code does not hold"),
])
def test_inputs_that_are_not_tensors_of_numbers_are_out_of_scope(value, message):
    model = _graph_model([helper.make_node("Identity", ["x"], ["y"])], [value],
                         [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    with pytest.raises(OutOfScope, match=f"^{message}"):
        import_onnx(model)


def test_string_output_is_out_of_scope():
    model = _graph_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.STRING)],
                         [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                         [helper.make_tensor_value_info("y", TensorProto.STRING, [2])])
    with pytest.raises(OutOfScope, match="^out of scope: output 'y' holds strings"):
        import_onnx(model)


# -- sequences and optionals: what stays out --------------------------------------------

def _seq_model(nodes, outputs, inits=None, opset=18, x_dims=(3, 4)):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                          x_dims)],
                              outputs, [numpy_helper.from_array(np.asarray(v), n)
                                        for n, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_sequence_output_is_one_output_per_element():
    model = _seq_model([helper.make_node("SplitToSequence", ["x"], ["s"])],
                       [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [1, 4])])
    sig = import_onnx(model).signature
    assert [(t.name, t.dims) for t in sig.outputs] == [(f"s[{k}]", (1, 4)) for k in range(3)]
    assert [(v.name, v.kind, v.count) for v in sig.output_values] == [("s", "sequence", 3)]
    assert [(v.name, v.kind, v.count) for v in sig.input_values] == [("x", "tensor", 1)]


def _sequence_input_model(elem_dims=("n", 4)):
    graph = helper.make_graph(
        [helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)], "g",
        [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, elem_dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_sequence_input_is_one_parameter_per_element():
    module = import_onnx(_sequence_input_model(), input_shapes={"s": [(2, 4), (3, 4)]})
    sig = module.signature
    assert [(t.name, t.dims) for t in sig.inputs] == [("s[0]", (2, 4)), ("s[1]", (3, 4))]
    assert [(v.name, v.kind, v.count) for v in sig.input_values] == [("s", "sequence", 2)]
    assert [p.shape.dims for p in module.entry.parameters] == [(2, 4), (3, 4)]
    assert sig.outputs[0].dims == (5, 4)


@pytest.mark.parametrize("shapes, message", [
    (None, r"^input 's' is a sequence, whose length and element shapes compiled code fixes; "
           r"pin them with input_shapes=\{\"s\": \[\(1, 4\), \(1, 4\)\]\} \(one shape per "
           r"element\)$"),
    ((2, 4), r"^input_shapes\[\"s\"\] must be a list of shapes, one per element"),
    ([(2, 4), (3, 5)], r"^element 1, \(3, 5\), of input_shapes\[\"s\"\] conflicts with the "
                       r"static shape nx4 of element 1 of input 's'$"),
])
def test_sequence_input_pins(shapes, message):
    with pytest.raises(XlacError, match=message):
        import_onnx(_sequence_input_model(), input_shapes=None if shapes is None
                    else {"s": shapes})


def _optional_input_model():
    graph = helper.make_graph(
        [helper.make_node("OptionalHasElement", ["o"], ["y"])], "g",
        [helper.make_value_info("o", helper.make_optional_type_proto(
            helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))],
        [helper.make_tensor_value_info("y", TensorProto.BOOL, [])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_absent_optional_input_leaves_the_signature():
    sig = import_onnx(_optional_input_model(), absent_inputs=["o"]).signature
    assert sig.inputs == []
    assert [(v.name, v.kind, v.count, v.optional) for v in sig.input_values] == [
        ("o", "absent", 0, True)]
    sig = import_onnx(_optional_input_model()).signature
    assert [(t.name, t.dims) for t in sig.inputs] == [("o", (2,))]
    assert [(v.kind, v.optional) for v in sig.input_values] == [("tensor", True)]


def test_absent_input_must_be_an_optional_input():
    with pytest.raises(XlacError, match=r"^absent_inputs names 'p', which is not a model input "
                                        r"\(inputs: o\)$"):
        import_onnx(_optional_input_model(), absent_inputs=["p"])
    with pytest.raises(XlacError, match=r"^absent_inputs names input 'x', which is not an "
                                        "optional"):
        import_onnx(_seq_model([helper.make_node("Relu", ["x"], ["y"])],
                               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])]),
                    absent_inputs=["x"])


def test_sequence_position_out_of_range():
    model = _seq_model([helper.make_node("SplitToSequence", ["x"], ["s"]),
                        helper.make_node("SequenceAt", ["s", "p"], ["y"], name="at")],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
                       inits={"p": np.array(-4, np.int64)})
    with pytest.raises(XlacError, match=r"^SequenceAt node 'at': position -4 is out of range "
                                        r"for a sequence of 3 elements \(\[-3, 2\]\)$"):
        import_onnx(model)


def test_empty_optional_has_no_element():
    model = _seq_model([helper.make_node("Optional", [], ["o"], type=helper.make_tensor_type_proto(
                            TensorProto.FLOAT, [3, 4])),
                        helper.make_node("OptionalGetElement", ["o"], ["y"], name="get")],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    with pytest.raises(XlacError, match="^OptionalGetElement node 'get': input 'o' is an empty "
                                        "optional"):
        import_onnx(model)


def test_loop_carried_sequence_that_grows_is_out_of_scope():
    # The body computes its condition from data: the loop cannot be unrolled.
    body = helper.make_graph(
        [helper.make_node("ReduceMax", ["x"], ["r"], keepdims=0),
         helper.make_node("Greater", ["r", "zero"], ["c_out"]),
         helper.make_node("SequenceInsert", ["s_in", "x"], ["s_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("s_in", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_sequence_value_info("s_out", TensorProto.FLOAT, [3, 4])])
    model = _seq_model([helper.make_node("SequenceEmpty", [], ["s0"]),
                        helper.make_node("Loop", ["m", "go", "s0"], ["s"], name="grow",
                                         body=body),
                        helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
                       inits={"m": np.array(3, np.int64), "go": np.array(True),
                              "zero": np.float32(0)})
    with pytest.raises(OutOfScope, match=r"^out of scope: Loop node 'grow': loop-carried value "
                       r"0 \('s0'\) enters as a sequence of no f32 tensors and the body returns "
                       r"a sequence of f32\[3,4\]: " + re.escape(scope.LOOP_CHANGES_STRUCTURE)):
        import_onnx(model)


@pytest.mark.parametrize("x_dims", [(3, 4), (8, 4)])
def test_run_time_if_returning_sequences_of_two_lengths(x_dims):
    """Out of scope where the condition comes from data; where it comes from a small input
    (configuration, context.CONFIG_ELEMENTS) that input is asked for as a constant."""
    def branch(name, nodes, out):
        return helper.make_graph(nodes, name, [], [helper.make_tensor_sequence_value_info(
            out, TensorProto.FLOAT, ["n", 4])])
    model = _seq_model(
        [helper.make_node("ReduceSum", ["x"], ["t"], keepdims=0),
         helper.make_node("Greater", ["t", "zero"], ["c"]),
         helper.make_node("If", ["c"], ["s"], name="pick",
                          then_branch=branch("then", [helper.make_node(
                              "SplitToSequence", ["x"], ["a"])], "a"),
                          else_branch=branch("else", [helper.make_node(
                              "SequenceConstruct", ["x"], ["b"])], "b")),
         helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
        inits={"zero": np.float32(0)}, x_dims=x_dims)
    if x_dims == (3, 4):
        with pytest.raises(ConstantInputNeeded, match=r"^If node 'pick': input 'c' \(condition\) "
                           r"must be known at compile time, but it depends on model input 'x'; "
                           r"pin it with .* \(If node 'pick': output 0 is a sequence of "
                           r"f32\[1,4\].*, which compiled code holds only with the branch "
                           r"chosen\)$"):
            import_onnx(model)
        return
    with pytest.raises(OutOfScope, match=r"^out of scope: If node 'pick': output 0 is a "
                       r"sequence of f32\[1,4\].*, and the condition is known only at run "
                       r"time: " + scope.RUN_TIME_STRUCTURE):
        import_onnx(model)


def test_every_out_of_scope_op_is_an_onnx_op():
    known = {(s.domain, s.name) for s in onnx.defs.get_all_schemas()}
    assert sorted(set(scope.OUT_OF_SCOPE) - known) == []
    assert sorted(set(scope.OUT_OF_SCOPE_IN_PART) - known) == []
    assert not set(scope.OUT_OF_SCOPE) & set(scope.OUT_OF_SCOPE_IN_PART)


def test_dynamic_dimension_message():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 224, 224])
    g = helper.make_graph([node("Relu", ["x"])], "g", [x],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    g.output[0].type.tensor_type.shape.SetInParent()
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(XlacError) as e:
        import_onnx(model)
    # The fix is spelled for the caller: Python's argument, the command line's option.
    assert str(e.value) == ("input 'x' has dynamic dimension 'N' (shape Nx3x224x224); "
                            'pin it with input_shapes={"x": (1, 3, 224, 224)}')
    assert e.value.cli == ("input 'x' has dynamic dimension 'N' (shape Nx3x224x224); "
                           "pin it with --input-shape x=1x3x224x224")


def test_input_shapes_unknown_name():
    with pytest.raises(XlacError, match='input_shapes names "nope", which is not a model '
                                        r"input \(inputs: x, w\)") as e:
        import_onnx(_two_output_model(), input_shapes={"nope": (1,)})
    assert e.value.cli.startswith("--input-shape names 'nope', which is not a model input")


def test_input_shapes_conflicting_static_dims():
    with pytest.raises(XlacError, match="conflicts with the static shape 2x3"):
        import_onnx(_two_output_model(), input_shapes={"x": (4, 3)})


def test_input_shapes_wrong_rank():
    with pytest.raises(XlacError, match=r'input_shapes=\{"x": \(2, 3, 1\)\} has rank 3, but '
                                        "input 'x' has rank 2") as e:
        import_onnx(_two_output_model(), input_shapes={"x": (2, 3, 1)})
    assert e.value.cli.startswith("--input-shape x=2x3x1 has rank 3, but input 'x' has rank 2")


@pytest.mark.parametrize("dims", ["2x3", (2.0, 3), (2, None)])
def test_input_shapes_must_be_ints(dims):
    with pytest.raises(XlacError, match=r'input_shapes\["x"\] must be a tuple of ints'):
        import_onnx(_two_output_model(), input_shapes={"x": dims})


def test_garbage_bytes():
    with pytest.raises(XlacError, match="cannot read ONNX model '<bytes>'"):
        import_onnx(b"\x08\x07\xff\xff not a model")


def test_broadcast_mismatch_names_the_node():
    model = make_model([node("PRelu", ["x", "s"])], {"x": np.zeros((2, 3), np.float32)},
                       inits={"s": np.zeros(2, np.float32)}, outputs=[("y", np.float32, (2, 3))])
    with pytest.raises(XlacError, match=r"PRelu node 'prelu_0': cannot broadcast f32\[2\]"):
        import_onnx(model)


def test_dropout_training_with_a_ratio_is_a_random_op():
    model = make_model([node("Dropout", ["x", "r", "t"])], {"x": np.zeros(3, np.float32)},
                       inits={"r": np.float32(0.5), "t": np.array(True)})
    with pytest.raises(OutOfScope, match="^out of scope: Dropout node 'dropout_0': "
                       "training_mode=1 with ratio 0.5 draws a random mask"):
        import_onnx(model)


def test_tfidf_string_pool_is_out_of_scope():
    model = make_model([node("TfIdfVectorizer", ["x"], mode="TF", min_gram_length=1,
                             max_gram_length=1, max_skip_count=0, ngram_counts=[0],
                             ngram_indexes=[0, 1], pool_strings=["a", "b"])],
                       {"x": np.zeros(3, np.int64)}, outputs=[("y", np.float32, (2,))], opset=9)
    with pytest.raises(OutOfScope, match="^out of scope: TfIdfVectorizer node 'tfidfvectorizer_0': "
                       "pool_strings: its n-grams are of strings"):
        import_onnx(model)

def test_string_tensors_are_out_of_scope():
    model = make_model([node("Identity", ["x"])], {"x": np.array(["a"], dtype=object)},
                       outputs=[("y", object, (1,))])
    with pytest.raises(OutOfScope, match="^out of scope: input 'x' holds strings"):
        import_onnx(model)


@pytest.mark.parametrize("op, attrs", [
    ("LinearClassifier", dict(coefficients=[1.0, -1.0], intercepts=[0.0],
                              classlabels_strings=["no", "yes"])),
    ("OneHotEncoder", dict(cats_strings=["a", "b"])),
])
def test_string_labels_are_out_of_scope(op, attrs):
    # the scores alone are numbers, but the labels or categories are strings
    outs, dims = (["l", "z"], (2, 2)) if op == "LinearClassifier" else (["z"], (2, 2, 2))
    model = make_model([helper.make_node(op, ["x"], outs, domain="ai.onnx.ml", name="m",
                                         **attrs)],
                       {"x": np.zeros((2, 2), np.float32)},
                       outputs=[("z", np.float32, dims)], opset={"": 13, "ai.onnx.ml": 1})
    with pytest.raises(OutOfScope, match=f"^out of scope: {op} node 'm': "
                       r"(classlabels|cats)_strings: string labels"):
        import_onnx(model)


_LINEAR2 = dict(coefficients=[1.0, -1.0], intercepts=[0.0], classlabels_ints=[0, 1])
_SVC2 = dict(coefficients=[1.0, -1.0], rho=[0.0], classlabels_ints=[0, 1], kernel_type="RBF",
             kernel_params=[0.5, 0.0, 0.0], support_vectors=[1.0, 0.0, 0.0, 1.0],
             vectors_per_class=[1, 1])


@pytest.mark.parametrize("op, attrs, message", [
    ("LinearClassifier", dict(_LINEAR2, post_transform="PROBIT"),
     "PROBIT on one score of two classes is not supported"),
    ("SVMClassifier", dict(_SVC2, post_transform="PROBIT"),
     "PROBIT on a two-class SVC is not supported"),
    ("TreeEnsembleClassifier", dict(
        nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[0.0, 0, 0],
        nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0], class_treeids=[0, 0],
        class_nodeids=[1, 2], class_ids=[0, 1], class_weights=[1.0, 1.0],
        classlabels_int64s=[0, 1], post_transform="PROBIT"),
     "this two-class forest leaves one score for some inputs"),
])
def test_unsupported_classifier_attributes_are_refused(op, attrs, message):
    model = make_model([helper.make_node(op, ["x"], ["l", "z"], domain="ai.onnx.ml", name="m",
                                         **attrs)],
                       {"x": np.zeros((2, 2), np.float32)},
                       outputs=[("l", np.int64, (2,)), ("z", np.float32, (2, 2))],
                       opset={"": 13, "ai.onnx.ml": 1})
    with pytest.raises(XlacError, match=f"^{op} node 'm': {message}"):
        import_onnx(model)


def _tree5(true_ids, false_ids, true_leafs, false_leafs, splits, leaves, roots=(0,)):
    """An ai.onnx.ml 5 TreeEnsemble over feature 0 (LEQ everywhere), one target."""
    m = len(splits)
    return node("TreeEnsemble", ["x"], domain="ai.onnx.ml", name="m",
                nodes_featureids=[0] * m,
                nodes_modes=numpy_helper.from_array(np.zeros(m, np.uint8)),
                nodes_splits=numpy_helper.from_array(np.asarray(splits, np.float32)),
                nodes_truenodeids=list(true_ids), nodes_trueleafs=list(true_leafs),
                nodes_falsenodeids=list(false_ids), nodes_falseleafs=list(false_leafs),
                leaf_targetids=[0] * leaves,
                leaf_weights=numpy_helper.from_array(np.arange(leaves, dtype=np.float32)),
                tree_roots=list(roots), n_targets=1)


@pytest.mark.parametrize("tree, message", [
    (_tree5([1, 0], [1, 0], [0, 0], [0, 1], [0.0, 1.0], 1), "the trees have a cycle"),
    (_tree5([2], [0], [0], [1], [0.0], 1), "node id 2 is out of range"),
    (_tree5([0], [3], [1], [1], [0.0], 2), "leaf id 3 is out of range"),
    (_tree5([0], [1], [1], [1], [0.0], 2, roots=(1,)), "a tree root is out of range"),
])
def test_malformed_forests_are_refused(tree, message):
    model = make_model([tree], {"x": np.zeros((2, 1), np.float32)},
                       outputs=[("y", np.float32, (2, 1))], opset={"": 13, "ai.onnx.ml": 5})
    with pytest.raises(XlacError, match=f"^TreeEnsemble node 'm': {message}"):
        import_onnx(model)


def test_a_tree_deeper_than_pythons_stack_walks_to_its_leaf():
    # a chain: node k sends x0 <= k + 0.5 to leaf k, else on to node k + 1
    depth = 1500
    ks = list(range(depth))
    tree = _tree5([k for k in ks], [k + 1 for k in ks[:-1]] + [depth], [1] * depth,
                  [0] * (depth - 1) + [1], [k + 0.5 for k in ks], depth + 1)
    x = np.array([[700.2], [-3.0], [1e9]], np.float32)
    model = make_model([tree], {"x": x}, outputs=[("y", np.float32, (3, 1))],
                       opset={"": 13, "ai.onnx.ml": 5})
    np.testing.assert_array_equal(evaluate(import_onnx(model), [x])[0], [[700], [0], [depth]])


def test_unknown_attribute_names_the_node():
    # ONNX's checker rejects attributes outside the schema...
    model = make_model([node("Relu", ["x"])], {"x": np.zeros(3, np.float32)})
    model.graph.node[0].attribute.append(helper.make_attribute("frobnicate", 1))
    with pytest.raises(XlacError, match="Unrecognized attribute: frobnicate .*relu_0"):
        import_onnx(model)
    # ...and the importer those that no handler reads (an op of a domain without schemas,
    # registered for this test, whose handler reads no attribute).
    from xlac.importers.onnx import registry
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(registry, "_TABLE", dict(registry._TABLE))
        registry.register("Frob", since=1, domain="test.xlac")(
            lambda ctx, n: [ctx.input(n, 0)])
        model = make_model([helper.make_node("Frob", ["x"], ["y"], domain="test.xlac",
                                             name="frob_0", speed=3)],
                           {"x": np.zeros(3, np.float32)}, outputs=[("y", np.float32, (3,))],
                           opset={"": 13, "test.xlac": 1})
        with pytest.raises(XlacError, match="Frob node 'frob_0': unsupported attribute "
                                            "'speed'"):
            import_onnx(model)


def test_unsupported_attribute_value_names_the_node():
    model = make_model([node("Conv", ["x", "w"], auto_pad="SAME_MIDDLE")],
                       {"x": np.zeros((1, 1, 3, 3), np.float32)},
                       inits={"w": np.zeros((1, 1, 1, 1), np.float32)})
    with pytest.raises(XlacError, match="Conv node 'conv_0': unsupported auto_pad "
                                        "'SAME_MIDDLE'"):
        import_onnx(model)


def test_unsupported_optional_output_is_rejected(monkeypatch):
    # a handler that lowers only the first of the node's outputs
    from xlac.importers.onnx import registry
    rule = registry.OpRule("test.xlac", "FirstOnly", 1, lambda ctx, n: [ctx.input(n, 0)],
                           frozenset())
    monkeypatch.setitem(registry._TABLE, ("test.xlac", "FirstOnly"), [rule])
    x = np.zeros((2,), np.float32)
    model = make_model([helper.make_node("FirstOnly", ["x"], ["y", "z"], name="first",
                                         domain="test.xlac")],
                       {"x": x}, outputs=(("y", np.float32, (2,)), ("z", np.float32, (2,))),
                       opset={"": 13, "test.xlac": 1})
    with pytest.raises(XlacError, match="FirstOnly node 'first': output 1 \\('z'\\) is "
                                        "not supported"):
        import_onnx(model)


def test_reshape_shape_must_be_known():
    x = np.zeros((2, 3), np.float32)
    model = make_model([node("Reshape", ["x", "s"])], {"x": x, "s": np.array([3, 2])},
                       outputs=[("y", np.float32, (3, 2))])
    with pytest.raises(XlacError, match="input 's' \\(shape\\) must be known at compile time"):
        import_onnx(model)


# -- the onnx package's light models ----------------------------------------------------

LIGHT = sorted(glob.glob(os.path.join(os.path.dirname(onnx.__file__),
                                      "backend/test/data/light/light_*.onnx")))
# Squeezenet's logits reach ~1e10 with all channels equal in exact arithmetic, so
# its stored softmax (uniform) hinges on f32 summation order: a different order
# gives different ties. Its logits are compared with onnxruntime instead.
LOGITS_ONLY = {"squeezenet"}


def _light_name(path):
    return os.path.basename(path)[len("light_"):-len(".onnx")]


def _expose_softmax_input(model):
    """The model with the input of its final Softmax as the graph output."""
    model = onnx.shape_inference.infer_shapes(model)
    last = model.graph.node[-1]
    assert last.op_type == "Softmax"
    logits = next(v for v in model.graph.value_info if v.name == last.input[0])
    del model.graph.output[:]
    model.graph.output.append(logits)
    model.graph.node.pop()
    return model


def test_the_nine_light_models_are_found():
    assert len(LIGHT) == 9


@pytest.mark.parametrize("path", LIGHT, ids=[_light_name(p) for p in LIGHT])
def test_light_model(path):
    model = onnx.load(path)
    (spec,) = import_onnx(model).signature.inputs
    # The onnx backend runner's input for these models (generate_dummy_data).
    n = int(np.prod(spec.dims))
    x = (np.arange(n).reshape(spec.dims) / n).astype(np.float32)
    if _light_name(path) in LOGITS_ONLY:
        model = _expose_softmax_input(model)
        expected = run_ort(model, [x])[0]
    else:
        expected = numpy_helper.to_array(TensorProto.FromString(
            open(path[:-len(".onnx")] + "_output_0.pb", "rb").read()))
    module = import_onnx(model)
    assert module.signature.outputs[0].dims == expected.shape
    got = evaluate(module, [x])[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def _cumsum_opcodes(n: int) -> set:
    model = make_model([node("CumSum", ["x", "a"], exclusive=1)],
                       {"x": np.zeros((2, n), np.float32)}, inits={"a": np.array(1, np.int64)})
    return {i.opcode for i in import_onnx(model).entry.instructions}


def test_cumsum_over_a_long_axis_is_a_while():
    # O(n): one row per step, not a window of n per output element.
    ops = _cumsum_opcodes(MAX_WINDOW_SCAN + 1)
    assert Opcode.WHILE in ops and Opcode.REDUCE_WINDOW not in ops


def test_does_not_loop_over_a_short_cumsum_axis():
    ops = _cumsum_opcodes(MAX_WINDOW_SCAN)
    assert Opcode.REDUCE_WINDOW in ops and Opcode.WHILE not in ops


# -- onnxruntime's contrib ops: what their kernels refuse, or xlac does not compute -------

_F = np.zeros((2, 4, 8), np.float32)
_MS = {"": 17, "com.microsoft": 1}


def _ms_node(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), name="m", domain="com.microsoft", **attrs)


@pytest.mark.parametrize("op, ins, inputs, inits, outs, attrs, message", [
    ("Attention", ["x", "w"], {"x": _F}, {"w": np.zeros((8, 24), np.float32)}, ["y"],
     {"num_heads": 2, "do_rotary": 1}, "do_rotary=1 is not supported"),
    ("Attention", ["x", "w"], {"x": _F}, {"w": np.zeros((8, 24), np.float32)}, ["y"],
     {"num_heads": 2, "past_present_share_buffer": 1},
     "past_present_share_buffer=1 is not supported"),
    ("Attention", ["x", "w"], {"x": _F}, {"w": np.zeros((8, 20), np.float32)}, ["y"],
     {"num_heads": 2, "qkv_hidden_sizes": [8, 4, 8]}, r"qkv_hidden_sizes \[8, 4, 8\] must"),
    ("Attention", ["x", "w", "", "m"], {"x": _F, "m": np.zeros((3,), np.int32)},
     {"w": np.zeros((8, 24), np.float32)}, ["y"], {"num_heads": 2},
     r"mask_index s32\[3\]\{0\} must be \(2\), \(4\)"),
    ("FusedConv", ["c", "w"], {"c": np.zeros((1, 2, 4, 4), np.float32)},
     {"w": np.zeros((2, 2, 1, 1), np.float32)}, ["y"], {"activation": "Gelu"},
     "unsupported activation 'Gelu' \\(supported: Relu, Tanh"),
    ("FusedConv", ["c", "w"], {"c": np.zeros((1, 2, 4, 4), np.float32)},
     {"w": np.zeros((2, 2, 1, 1), np.float32)}, ["y"], {"activation": "LeakyRelu"},
     "activation LeakyRelu takes 1 activation_params, got 0"),
    ("FusedMatMul", ["a", "b"], {"a": np.zeros((3, 4), np.float32)},
     {"b": np.zeros((4, 5), np.float32)}, ["y"], {"transBatchA": 1},
     "transBatchA needs A of rank 3 or more"),
    ("BiasSoftmax", ["x", "b"], {"x": np.zeros((2, 3, 4), np.float32)},
     {"b": np.zeros((1, 3, 4), np.float32)}, ["y"], {"axis": 2, "is_inner_broadcast": 1},
     r"bias f32\[1,3,4\].* does not broadcast to data .* inside the dims before axis 2"),
    ("SkipSimplifiedLayerNormalization", ["x", "s", "g"], {"x": _F, "s": _F},
     {"g": np.ones(8, np.float32)}, ["y", "mean"], {}, r"output 1 \('mean'\) is not supported"),
    ("GroupQueryAttention", ["q", "k", "v", "", "", "s", "t"] + [""] * 3 + ["ab"],
     {"q": _F, "k": _F, "v": _F, "s": np.ones(2, np.int32), "ab": np.zeros((2, 2, 4, 4),
                                                                           np.float32)},
     {"t": np.int32(4)}, ["y"], {"num_heads": 2, "kv_num_heads": 2},
     "position_ids, attention_bias and head_sink are not supported"),
    ("GroupQueryAttention", ["q", "k", "v", "", "", "s", "t"],
     {"q": _F, "k": _F, "v": _F, "s": np.ones(2, np.int32)}, {"t": np.int32(4)}, ["y"],
     {"num_heads": 2, "kv_num_heads": 2, "smooth_softmax": 1},
     "smooth_softmax=1 is not supported"),
    ("MatMulNBits", ["a", "b", "s", "", "g"], {"a": np.zeros((2, 32), np.float32)},
     {"b": np.zeros((4, 2, 8), np.uint8), "s": np.ones(8, np.float32),
      "g": np.arange(32, dtype=np.int32) % 2}, ["y"],
     {"K": 32, "N": 4, "bits": 4, "block_size": 16},
     "g_idx other than k // block_size is not supported"),
    ("MatMulNBits", ["a", "b", "s"], {"a": np.zeros((2, 32), np.float32)},
     {"b": np.zeros((4, 2, 24), np.uint8), "s": np.ones(8, np.float32)}, ["y"],
     {"K": 32, "N": 4, "bits": 3, "block_size": 64},
     "unsupported bits=3, block_size=64 or accuracy_level=0"),
    ("DynamicQuantizeLSTM", ["x", "w", "r", "", "", "", "", "", "ws", "wz", "rs"],
     {"x": np.zeros((3, 1, 4), np.float32)},
     {"w": np.zeros((1, 4, 8), np.int8), "r": np.zeros((1, 2, 8), np.int8),
      "ws": np.ones(1, np.float32), "wz": np.arange(8, dtype=np.int8).reshape(1, 8),
      "rs": np.ones(1, np.float32)}, ["y"], {"hidden_size": 2},
     "weight zero points that differ along the gates are not supported"),
])
def test_contrib_op_refuses(op, ins, inputs, inits, outs, attrs, message):
    model = make_model([_ms_node(op, ins, outs, **attrs)], inputs,
                       outputs=[(o, np.float32, ()) for o in outs], inits=inits, opset=_MS)
    with pytest.raises(XlacError, match=f"^{op} node 'm': {message}"):
        import_onnx(model)


def test_simplified_layer_normalization_passes_the_checker():
    # onnxruntime defines it in the ONNX domain, where ONNX's checker has no schema for it.
    model = make_model([node("SimplifiedLayerNormalization", ["x", "g"], epsilon=1e-5)],
                       {"x": _F}, outputs=[("y", np.float32, (2, 4, 8))],
                       inits={"g": np.ones(8, np.float32)}, opset=17)
    with pytest.raises(onnx.checker.ValidationError, match="No Op registered"):
        onnx.checker.check_model(model)
    assert import_onnx(model).signature.outputs[0].dims == (2, 4, 8)


def test_group_query_attention_needs_total_sequence_length_at_compile_time():
    # it sizes present_key and present_value and tells a first prompt from decoding
    model = make_model([_ms_node("GroupQueryAttention", ["q", "k", "v", "", "", "s", "t"],
                                 num_heads=2, kv_num_heads=2)],
                       {"q": _F, "k": _F, "v": _F, "s": np.ones(2, np.int32), "t": np.int32(4)},
                       outputs=[("y", np.float32, ())], opset=_MS)
    with pytest.raises(ConstantInputNeeded, match="'t' \\(total_sequence_length\\) must be "
                                                  "known at compile time"):
        import_onnx(model)
