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

import xlac
from quantized_models import quantized

from int8 import output_step  # noqa: E402  (benchmarks/, on the path quantized_models sets)

INPUTS = 4
# model: (least share of equal elements, most steps apart)
MODELS = {"ds_cnn_int8": (1.0, 0), "mobilenet_v1_025_vww_int8": (1.0, 0),
          "fc_autoencoder_int8": (1.0, 0), "resnet8_int8": (0.9, 1)}


@pytest.mark.parametrize("name", MODELS)
def test_outputs_equal_onnxruntime(name, tmp_path):
    model = quantized(name)
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
    for _ in range(INPUTS):
        x = rng.standard_normal(x_info.shape).astype(np.float32)
        (got,), (want,) = compiled(x), session.run(None, {x_info.name: x})
        equal += int((got == want).sum())
        total += got.size
        steps = max(steps, float(np.abs(got.astype(np.float64) - want).max()) / step)
    least, most = MODELS[name]
    assert equal / total >= least and round(steps, 3) <= most, \
        f"{name}: {equal} of {total} equal, {steps:.2f} steps apart"
