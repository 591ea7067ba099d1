"""Quantized models (tests/quantized_models.py: onnxruntime.quantization's QDQ, per
channel, int8) against onnxruntime's int8 outputs, element for element.

onnxruntime runs a QDQ model as fused integer ops (QLinearConv, QGemm,
QLinearAveragePool, QLinearSoftmax...) where its transformers fuse, and in float where
they do not; xlac's QuantizedArithmetic pass computes what the fused ops compute. Where
onnxruntime fuses every layer the outputs are equal. On resnet8 it leaves six of the
nine convolutions in float (its s8 -> u8 rewrite of activations skips those that two
ops read, and no fusion takes a convolution with an s8 side and a u8 side): now and
then an f32 sum rounds across a half step where the exact integer sum does not, and
the flip travels on.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import xlac
from quantized_models import MODELS as FLOAT_MODELS
from quantized_models import quantized

from int8 import output_step  # noqa: E402  (benchmarks/, on the path quantized_models sets)

INPUTS = 4
# model: (least share of equal elements, most steps apart)
MODELS = {"ds_cnn_int8": (1.0, 0), "mobilenet_v1_025_vww_int8": (1.0, 0),
          "fc_autoencoder_int8": (1.0, 0), "resnet8_int8": (0.9, 1)}


def _compare(model, tmp_path, inputs: int = INPUTS) -> tuple[float, float]:
    """(share of output elements equal to onnxruntime's, most output steps apart)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    x_info = session.get_inputs()[0]
    rng = np.random.default_rng(1)
    compiled = xlac.load(xlac.compile(model, tmp_path / "m.o", name="m").output)
    step = output_step(model)           # the output is dequantized: steps of this scale
    equal = total = 0
    steps = 0.0
    for _ in range(inputs):
        x = rng.standard_normal(x_info.shape).astype(np.float32)
        (got,), (want,) = compiled(x), session.run(None, {x_info.name: x})
        equal += int((got == want).sum())
        total += got.size
        steps = max(steps, float(np.abs(got.astype(np.float64) - want).max()) / step)
    return equal / total, round(steps, 3)


@pytest.mark.parametrize("name", MODELS)
def test_outputs_equal_onnxruntime(name, tmp_path):
    share, steps = _compare(quantized(name), tmp_path)
    least, most = MODELS[name]
    assert share >= least and steps <= most, f"{name}: {share:.2%} equal, {steps} steps apart"


@pytest.mark.parametrize("name", ["resnet8_int8", "unet_small_int8"])
def test_uint8_activations_equal_onnxruntime_bit_for_bit(name, tmp_path):
    """With uint8 activations onnxruntime's x86 QDQ path runs every layer on integers (its
    s8 -> u8 rewrite, which leaves some convolutions in float, has nothing to do): the
    outputs are equal, the residual adds' and the average pool's arithmetic included."""
    # resnet8's average pool rounded otherwise on the 6th to 8th input before rule 5
    share, steps = _compare(quantized(name, "uint8"), tmp_path, inputs=10)
    assert share == 1.0, f"{name}: {share:.2%} equal, {steps} steps apart"


def test_bilinear_resize_rounds_as_onnxruntime(tmp_path):
    """onnxruntime runs a QDQ Resize in float: its f32 result, bit for bit, quantizes to
    the same integers (the product of the axes' weights times each tap; the edges)."""
    x = np.random.default_rng(3).standard_normal((1, 3, 6, 7)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear")], "resize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 3, 12, 14))],
        [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    compiled = xlac.load(xlac.compile(model, tmp_path / "r.o", name="r").output)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (got,), (want,) = compiled(x), session.run(None, {"x": x})
    assert np.array_equal(got, want), f"{int((got != want).sum())} of {got.size} differ"


def _arena(model, tmp_path, stem) -> int:
    return xlac.compile(model, tmp_path / f"{stem}.o", name=stem,
                        report=True).report["arena_bytes"]


def test_int8_arena_is_at_most_30_percent_of_the_float_one(tmp_path):
    """No f32 or s32 buffer stays in the int8 build's arena: the U-Net's Resize sums
    requantized in the loop that reads them."""
    name = "unet_small"
    assert _arena(quantized(name + "_int8"), tmp_path, "q") <= \
        0.3 * _arena(FLOAT_MODELS[name](), tmp_path, "f")


def test_int8_mlp_arena_holds_its_input_once_in_8_bits(tmp_path):
    """The FC autoencoder (640 -> 128 x 4 -> 8 -> ... -> 640): its input quantized once
    into an s8 copy (640 bytes) that the first layer's kernel reads, then 8-bit layers
    of at most 128 (the output dequantized by the last layer's kernel into the caller's
    buffer): no f32 or s32 buffer in the arena."""
    assert _arena(quantized("fc_autoencoder_int8"), tmp_path, "q") == 640 + 128
