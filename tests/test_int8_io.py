"""int8 at the boundary (``--int8-io``, importers/onnx/int8_boundary.py): a QDQ model's
inputs and outputs as the 8-bit values its QuantizeLinear / DequantizeLinear compute,
their scale and zero point in the header.

The int8 build must give, for the caller's quantized input, exactly the integers from
which the float build dequantizes its output: ``(q - ZERO_POINT) * SCALE`` (in f32, as
DequantizeLinear computes it) equals the float build's output bit for bit, on the four
MLPerf Tiny models quantized as users quantize them (tests/quantized_models.py).
"""
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xlac
from quantized_models import quantized
from xlac.importers.onnx.int8_boundary import int8_boundary
from xlac.main import main

MODELS = ("ds_cnn_int8", "resnet8_int8", "mobilenet_v1_025_vww_int8", "fc_autoencoder_int8")


def quantization(header: str, c_name: str) -> tuple[np.float32, int]:
    scale = re.search(rf"#define q_{c_name}_SCALE (\S+)f$", header, re.M)
    zero = re.search(rf"#define q_{c_name}_ZERO_POINT (-?\d+)$", header, re.M)
    assert scale and zero, f"no scale and zero point for {c_name} in the header"
    return np.float32(float(scale.group(1))), int(zero.group(1))


@pytest.mark.parametrize("name", MODELS)
def test_int8_ports_carry_what_the_float_build_dequantizes(name, tmp_path):
    model = quantized(name)
    floated = xlac.load(xlac.compile(model, tmp_path / "f.o", name="f").output)
    q = xlac.load(xlac.compile(model, tmp_path / "q.o", name="q", int8_io=True).output)
    header = (tmp_path / "q.h").read_text()
    (xin,), (yout,) = q.inputs, q.outputs
    assert xin.dtype == np.int8 and yout.dtype == np.int8
    assert f"s8[{'x'.join(map(str, xin.shape))}]" in header
    xs, zx = quantization(header, re.sub(r"\W", "_", model.graph.input[0].name))
    ys, zy = quantization(header, re.sub(r"\W", "_", model.graph.output[0].name))
    rng = np.random.default_rng(3)
    for scale in (0.3, 1, 4):
        x = (rng.standard_normal(xin.shape) * scale).astype(np.float32)
        # what the model's QuantizeLinear computes from x
        xq = np.clip(np.rint(x / xs) + zx, -128, 127).astype(np.int8)
        (want,), (got,) = floated(x), q(xq)
        np.testing.assert_array_equal((got.astype(np.float32) - np.float32(zy)) * ys, want)


def _chain(second_reader: bool = False) -> onnx.ModelProto:
    """x -> QuantizeLinear -> DequantizeLinear -> Relu -> QuantizeLinear -> DequantizeLinear
    -> y (and, with ``second_reader``, y also read by a Neg)."""
    consts = [numpy_helper.from_array(np.array(0.05, np.float32), "s"),
              numpy_helper.from_array(np.array(-3, np.int8), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xf"]),
             helper.make_node("Relu", ["xf"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "s", "z"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "s", "z"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])]
    if second_reader:
        nodes.append(helper.make_node("Neg", ["y"], ["n"]))
        outputs.append(helper.make_tensor_value_info("n", TensorProto.FLOAT, [8]))
    graph = helper.make_graph(nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
                              outputs, consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_boundary_nodes_leave_and_ports_take_the_8_bit_type():
    model = _chain()
    found = int8_boundary(model)
    assert found == {"x": (pytest.approx(0.05), -3), "y": (pytest.approx(0.05), -3)}
    assert [n.op_type for n in model.graph.node] == ["DequantizeLinear", "Relu",
                                                     "QuantizeLinear"]
    assert model.graph.node[0].input[0] == "x" and model.graph.node[-1].output[0] == "y"
    assert model.graph.input[0].type.tensor_type.elem_type == TensorProto.INT8
    assert model.graph.output[0].type.tensor_type.elem_type == TensorProto.INT8


def test_cli_refuses_a_model_whose_boundary_is_not_quantized(tmp_path, capsys):
    # the dequantized output is also read inside the graph: it must stay float there
    onnx.save(_chain(second_reader=True), tmp_path / "m.onnx")
    status = main([str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.o"), "--int8-io"])
    _, err = capsys.readouterr()
    assert status == 1 and err.count("\n") == 1
    assert "int8 at the boundary: output 'y' is not made by DequantizeLinear" in err
    assert not (tmp_path / "m.o").exists() and not (tmp_path / "m.h").exists()
