"""The lifetimes of an ONNX file's intermediate tensors in its own node order, and the
lower bound they give (xlac.importers.onnx.liveness), on small hand-built graphs."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from xlac import XlacError
from xlac.importers.onnx import import_onnx
from xlac.importers.onnx.liveness import (TensorLife, onnx_order_intervals,
                                          onnx_order_lower_bound)

F32 = TensorProto.FLOAT


def model_of(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def f32(name, dims):
    return helper.make_tensor_value_info(name, F32, dims)


def lives(model, **kw) -> set[TensorLife]:
    return set(onnx_order_intervals(model, **kw))


def test_chain():
    m = model_of([helper.make_node("Relu", ["x"], ["a"]),
                  helper.make_node("Relu", ["a"], ["b"]),
                  helper.make_node("Relu", ["b"], ["y"])],
                 [f32("x", [1, 4])], [f32("y", [1, 4])])
    assert lives(m) == {TensorLife("a", 16, 0, 1), TensorLife("b", 16, 1, 2)}
    assert onnx_order_lower_bound(m) == 32      # step 1 reads a and writes b


def test_diamond():
    m = model_of([helper.make_node("Relu", ["x"], ["a"]),
                  helper.make_node("Neg", ["a"], ["b"]),
                  helper.make_node("Abs", ["a"], ["c"]),
                  helper.make_node("Add", ["b", "c"], ["y"])],
                 [f32("x", [2, 4])], [f32("y", [2, 4])])
    assert lives(m) == {TensorLife("a", 32, 0, 2), TensorLife("b", 32, 1, 3),
                        TensorLife("c", 32, 2, 3)}
    assert onnx_order_lower_bound(m) == 96      # step 2: a, b and c


def test_node_with_two_outputs():
    split = numpy_helper.from_array(np.array([4, 2], np.int64), "split")
    m = model_of([helper.make_node("Split", ["x", "split"], ["s0", "s1"], axis=1),
                  helper.make_node("Relu", ["s0"], ["r"]),
                  helper.make_node("Pad", ["s1", "pads"], ["p"]),
                  helper.make_node("Add", ["r", "p"], ["y"])],
                 [f32("x", [1, 6])], [f32("y", [1, 4])],
                 [split, numpy_helper.from_array(np.array([0, 0, 0, 2], np.int64), "pads")])
    assert lives(m) == {TensorLife("s0", 16, 0, 1), TensorLife("s1", 8, 0, 2),
                        TensorLife("r", 16, 1, 3), TensorLife("p", 16, 2, 3)}
    assert onnx_order_lower_bound(m) == 40      # step 1: s0, s1, r


def test_unread_output_lives_one_step():
    m = model_of([helper.make_node("Relu", ["x"], ["a"]),
                  helper.make_node("Neg", ["a"], ["unread"]),
                  helper.make_node("Abs", ["a"], ["y"])],
                 [f32("x", [1, 4])], [f32("y", [1, 4])])
    assert lives(m) == {TensorLife("a", 16, 0, 2), TensorLife("unread", 16, 1, 1)}
    assert onnx_order_lower_bound(m) == 32


def test_unread_output_onnx_cannot_type_is_left_out():
    graph = helper.make_graph([helper.make_node("Dropout", ["x"], ["d", "mask"]),
                               helper.make_node("Relu", ["d"], ["y"])],
                              "g", [f32("x", [1, 4])], [f32("y", [1, 4])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    assert lives(m) == {TensorLife("d", 16, 0, 1)}      # Dropout-7's mask has no type


def test_shape_subgraph_on_constants_is_weight_but_shape_of_input_counts():
    w = numpy_helper.from_array(np.zeros((4, 2), np.float32), "w")
    minus_one = numpy_helper.from_array(np.array([-1], np.int64), "minus_one")
    m = model_of([helper.make_node("Constant", [], ["idx"],
                                   value=numpy_helper.from_array(np.array([0], np.int64))),
                  helper.make_node("Shape", ["w"], ["ws"]),
                  helper.make_node("Gather", ["ws", "idx"], ["g"]),
                  helper.make_node("Concat", ["g", "minus_one"], ["shp"], axis=0),
                  helper.make_node("Reshape", ["x", "shp"], ["r"]),      # 4x2 f32
                  helper.make_node("Shape", ["x"], ["sx"]),              # 2 x i64
                  helper.make_node("Reshape", ["r", "sx"], ["y"])],
                 [f32("x", [2, 4])], [f32("y", [2, 4])], [w, minus_one])
    assert lives(m) == {TensorLife("r", 32, 4, 6), TensorLife("sx", 16, 5, 6)}
    assert onnx_order_lower_bound(m) == 48


def test_graph_output_read_later_is_not_counted():
    m = model_of([helper.make_node("Relu", ["x"], ["y1"]),
                  helper.make_node("Neg", ["y1"], ["a"]),
                  helper.make_node("Abs", ["a"], ["y2"])],
                 [f32("x", [1, 4])], [f32("y1", [1, 4]), f32("y2", [1, 4])])
    assert lives(m) == {TensorLife("a", 16, 1, 2)}
    assert onnx_order_lower_bound(m) == 16


def test_tensor_read_inside_a_branch_lives_until_the_if():
    def branch(op):
        return helper.make_graph([helper.make_node(op, ["a"], ["out"])], op, [],
                                 [f32("out", [1, 4])])
    m = model_of([helper.make_node("Relu", ["x"], ["a"]),
                  helper.make_node("Abs", ["x"], ["b"]),
                  helper.make_node("If", ["cond"], ["y"], then_branch=branch("Neg"),
                                   else_branch=branch("Identity"))],
                 [f32("x", [1, 4]), helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                 [f32("y", [1, 4])])
    assert lives(m) == {TensorLife("a", 16, 0, 2), TensorLife("b", 16, 1, 1)}


def test_path_bytes_and_model_agree_and_the_model_is_left_alone(tmp_path):
    m = model_of([helper.make_node("Relu", ["x"], ["a"]),
                  helper.make_node("Relu", ["a"], ["y"])],
                 [f32("x", ["N", 4])], [f32("y", ["N", 4])])
    before = m.SerializeToString()
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    pin = {"input_shapes": {"x": (3, 4)}}
    assert onnx_order_lower_bound(m, **pin) == 48
    assert onnx_order_lower_bound(before, **pin) == onnx_order_lower_bound(str(path), **pin) == 48
    assert m.SerializeToString() == before


def test_unknown_dim_names_the_tensor():
    m = model_of([helper.make_node("Relu", ["x"], ["a"]),
                  helper.make_node("Relu", ["a"], ["y"])],
                 [f32("x", ["N", 4])], [f32("y", ["N", 4])])
    with pytest.raises(XlacError,
                       match=r"tensor 'a' \(output of node 0, Relu\) has the dynamic shape Nx4"):
        onnx_order_intervals(m)


def test_pinning_an_unknown_input_is_an_error():
    m = model_of([helper.make_node("Relu", ["x"], ["y"])], [f32("x", [1])], [f32("y", [1])])
    with pytest.raises(XlacError, match="'z', which is not a graph input"):
        onnx_order_intervals(m, input_shapes={"z": (1,)})


def test_unreadable_model():
    with pytest.raises(XlacError, match="cannot read ONNX model"):
        onnx_order_intervals(b"not a model")


def test_the_importer_bounds_the_model_it_prepared():
    """import_onnx(onnx_order_bound=True) reads the types its own shape inference found
    (on the skeleton, without the large weight) and bounds the file as liveness does."""
    w = numpy_helper.from_array(np.ones((4, 5000), np.float32), "w")   # left out of the skeleton
    m = model_of([helper.make_node("MatMul", ["x", "w"], ["a"]),
                  helper.make_node("Relu", ["a"], ["b"]),
                  helper.make_node("Reshape", ["b", "s"], ["y"])],
                 [f32("x", ["N", 4]), helper.make_tensor_value_info("s", TensorProto.INT64, [1])],
                 [f32("y", [15000])], [w])
    pins = {"input_shapes": {"x": (3, 4)}, "const_inputs": {"s": np.array([15000])}}
    assert import_onnx(m, onnx_order_bound=True, **pins).source_order_bound == 120_000
    assert onnx_order_lower_bound(m, input_shapes={"x": (3, 4)}) == 120_000   # a and b
    assert import_onnx(m, **pins).source_order_bound is None                   # not asked
