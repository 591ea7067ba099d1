"""xlac.backend: the onnx package's own runner (``onnx.backend.test.BackendTest``) drives
xlac over a representative set of node cases and data-set models, and the backend's API
(run-time pinning, the object cache, inputs by name, run_node) is checked directly.

The whole suite of cases runs in tests/test_onnx_node_cases.py (through the same
backend); here the point is that the official runner works with xlac.backend as it
stands, so BackendTest's test classes are kept to the included cases on the CPU.
"""
from __future__ import annotations

import re

import numpy as np
import onnx
import onnx.backend.test
import pytest
from onnx import TensorProto, helper, numpy_helper

import xlac.backend
from xlac import XlacError
from xlac.importers.onnx import OutOfScope

# One or two cases per op family; several take shapes, axes or counts as graph inputs,
# which run() pins. Names as the runner makes them: the case, then the device.
INCLUDE = [
    # element-wise math, activations, comparison and logic
    "test_abs", "test_add_bcast", "test_div", "test_pow", "test_sqrt", "test_erf",
    "test_sigmoid", "test_relu", "test_leakyrelu", "test_selu", "test_elu", "test_softplus",
    "test_hardsigmoid", "test_clip_default_min", "test_equal", "test_and2d", "test_not_2d",
    "test_where_example", "test_sum_example", "test_max_example",
    # matrix products, convolutions and pools
    "test_matmul_2d", "test_gemm_default_no_bias", "test_conv_with_strides_padding",
    "test_maxpool_2d_pads", "test_averagepool_2d_same_upper", "test_globalaveragepool",
    "test_lrn",
    # normalizations and softmax (an _expanded case: the function body)
    "test_batchnorm_epsilon", "test_softmax_axis_1", "test_softmax_axis_1_expanded",
    "test_layer_normalization_2d_axis0_expanded",
    # reductions (axes as an input)
    "test_reduce_sum_keepdims_example", "test_reduce_mean_default_axes_keepdims_example",
    # shapes and movement (shape, starts/ends, repeats as inputs)
    "test_reshape_negative_dim", "test_slice", "test_tile", "test_expand_dim_changed",
    "test_transpose_all_permutations_0", "test_concat_2d_axis_1", "test_gather_0",
    "test_unsqueeze_axis_0", "test_flatten_axis0", "test_squeeze", "test_shape", "test_size",
    "test_constantofshape_float_ones", "test_identity",
    # element types
    "test_cast_FLOAT_to_DOUBLE", "test_cast_FLOAT_to_FLOAT16",
    # data-set models: simple, pytorch-operator, pytorch-converted
    "test_sign_model", "test_single_relu_model", "test_expand_shape_model1",
    "test_operator_add_broadcast", "test_operator_maxpool", "test_operator_reduced_mean",
    "test_Conv2d", "test_BatchNorm2d_eval", "test_Embedding", "test_LogSoftmax",
]
INCLUDED = re.compile("^(" + "|".join(INCLUDE) + ")_cpu$")

backend_test = onnx.backend.test.BackendTest(xlac.backend, __name__)
backend_test.include(INCLUDED.pattern)
for _name, _case in backend_test.test_cases.items():
    # The runner keeps the cases it does not include (and those on other devices) as
    # skipped tests; dropping them keeps the report to what runs.
    for _test in [t for t in vars(_case) if t.startswith("test_") and not INCLUDED.match(t)]:
        delattr(_case, _test)
    globals()[_name] = _case


def test_every_included_case_exists():
    names = {t for case in backend_test.test_cases.values() for t in vars(case)
             if t.startswith("test_")}
    assert sorted(n for n in INCLUDE if f"{n}_cpu" not in names) == []


# -- the API ----------------------------------------------------------------------------

def reshape_model(shape_as_input: bool = True) -> onnx.ModelProto:
    """y = reshape(x, shape) + 1."""
    one = numpy_helper.from_array(np.array(1, np.float32), "one")
    inits = [one]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])]
    if shape_as_input:
        inputs.append(helper.make_tensor_value_info("shape", TensorProto.INT64, [2]))
    else:
        inits.append(numpy_helper.from_array(np.array([3, 4], np.int64), "shape"))
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["r"]),
         helper.make_node("Add", ["r", "one"], ["y"])],
        "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def count_compiles(monkeypatch):
    calls = []
    real = xlac.backend.xlac_compile

    def counting(*args, **kwargs):
        calls.append(kwargs.get("const_inputs"))
        return real(*args, **kwargs)
    monkeypatch.setattr(xlac.backend, "xlac_compile", counting)
    monkeypatch.setattr(xlac.backend, "_objects", {})
    return calls


def test_run_pins_the_inputs_the_importer_asks_for_and_caches_by_value(count_compiles):
    rep = xlac.backend.prepare(reshape_model())
    assert rep.pinned_inputs == ("shape",)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    (y,) = rep.run([x, np.array([3, 4], np.int64)])
    np.testing.assert_array_equal(y, x.reshape(3, 4) + 1)
    (y,) = rep.run({"x": 2 * x, "shape": np.array([3, 4], np.int64)})
    np.testing.assert_array_equal(y, 2 * x.reshape(3, 4) + 1)
    (y,) = rep.run([x, np.array([4, 3], np.int64)])          # another value: a new object
    np.testing.assert_array_equal(y, x.reshape(4, 3) + 1)
    pinned = [sorted(c) for c in count_compiles if c]
    assert pinned == [["shape"], ["shape"]]


def test_prepare_compiles_once_per_model(count_compiles):
    model = reshape_model(shape_as_input=False)
    x = np.ones((2, 6), np.float32)
    first = xlac.backend.prepare(model).run([x])
    second = xlac.backend.run_model(model, [x])
    assert len(count_compiles) == 1
    np.testing.assert_array_equal(first[0], second[0])
    assert first.y.shape == (3, 4)                        # outputs by name, as onnxruntime


def test_prepared_model_is_independent_of_later_edits_to_the_proto():
    model = reshape_model()
    rep = xlac.backend.prepare(model)
    model.graph.node[1].op_type = "Sub"
    (y,) = rep.run([np.zeros((2, 6), np.float32), np.array([6, 2], np.int64)])
    np.testing.assert_array_equal(y, np.ones((6, 2), np.float32))


def test_run_node():
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (y,) = xlac.backend.run_node(node, [x])
    np.testing.assert_array_equal(y, x.T)
    (y,) = xlac.backend.run_node(node, [x], outputs_info=[(np.float32, (3, 2))])
    np.testing.assert_array_equal(y, x.T)


def test_devices():
    assert xlac.backend.supports_device("CPU")
    assert xlac.backend.supports_device("CUDA")       # tests/cuda runs it
    assert not xlac.backend.supports_device("TPU")
    with pytest.raises(XlacError, match="not for device 'TPU'"):
        xlac.backend.prepare(reshape_model(), "TPU")


@pytest.mark.parametrize("call, message", [
    (lambda: xlac.backend.prepare(reshape_model(), fast=True), "unknown backend option"),
    (lambda: xlac.backend.prepare(reshape_model()).run([np.zeros((2, 6), np.float32)]),
     r"takes 2 input\(s\) \(x, shape\), got 1"),
    (lambda: xlac.backend.prepare(reshape_model()).run({"x": 0, "s": 0}),
     "unknown: s, missing: shape"),
    (lambda: xlac.backend.prepare(reshape_model()).run([[1.0], np.array([3, 4])]),
     "input 'x' is a list"),
])
def test_bad_calls_are_one_line_errors(call, message):
    with pytest.raises(XlacError, match=message):
        call()


def test_out_of_scope_model_is_refused_at_prepare():
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "g",
        [helper.make_value_info("x", helper.make_map_type_proto(
            TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(OutOfScope, match=r"^out of scope: input 'x' holds a map, which "
                                         r"compiled code does not hold"):
        xlac.backend.prepare(model)


def sequence_model():
    """y = concat(s) of a sequence input s of [n, 2] tensors, t = s; h = has_element(o)."""
    graph = helper.make_graph(
        [helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0),
         helper.make_node("Identity", ["s"], ["t"]),
         helper.make_node("OptionalHasElement", ["o"], ["h"])], "g",
        [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, ["n", 2]),
         helper.make_value_info("o", helper.make_optional_type_proto(
             helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", 2]),
         helper.make_tensor_sequence_value_info("t", TensorProto.FLOAT, ["n", 2]),
         helper.make_tensor_value_info("h", TensorProto.BOOL, [])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_run_pins_sequence_shapes_and_optional_presence():
    rep = xlac.backend.prepare(sequence_model())
    s = [np.ones((1, 2), np.float32), np.zeros((3, 2), np.float32)]
    y, t, h = rep.run([s, None])
    np.testing.assert_array_equal(y, np.concatenate(s))
    assert isinstance(t, list) and [a.shape for a in t] == [(1, 2), (3, 2)]
    assert not h
    y, t, h = rep.run({"s": s[:1], "o": np.ones(2, np.float32)})
    assert y.shape == (1, 2) and len(t) == 1 and h
    assert rep.shaped_inputs == ("s",)
