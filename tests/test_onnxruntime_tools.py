"""Models as onnxruntime's own tools leave them, compiled by xlac, against onnxruntime.

A BERT-style encoder and a GPT-2-style decoder (past keys and values, a causal mask, the
tanh GELU: the graph Hugging Face's GPT-2 exports) from PyTorch go through
``onnxruntime.transformers.optimizer.optimize_model``, which fuses them into com.microsoft
ops; a small CNN, the encoder and the decoder through an onnxruntime session that writes
its optimized graph (``optimized_model_filepath``); the encoder and a 2-layer LSTM through
``quantize_dynamic``, and a decoder of linear layers through ``MatMulNBitsQuantizer``.
Each test checks the ops the tool wrote, so that a tool that stops fusing is noticed,
then compiles the result. The models (``xlac.conformance.torch_models``, which the
conformance run's tool rows share) have random weights with a fixed seed.
"""
from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import xlac
from xlac.hlo import XlacError

torch = pytest.importorskip("torch")
optimizer = pytest.importorskip("onnxruntime.transformers.optimizer")
from onnxruntime.quantization import quantize_dynamic  # noqa: E402
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer  # noqa: E402
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

from xlac.conformance.torch_models import bert, cnn, decoder, gpt2, lstm  # noqa: E402


def _pinned(model, inputs):
    """The input shapes of a model with dynamic dims, from the example inputs."""
    return {i.name: x.shape for i, x in zip(model.graph.input, inputs)}


def histogram(model: onnx.ModelProto) -> collections.Counter:
    return collections.Counter(f"{n.domain}.{n.op_type}" if n.domain else n.op_type
                               for n in model.graph.node)


def _check(model, inputs, tmp_path, name, atol=1e-4):
    """xlac's outputs against onnxruntime's on the same model; the largest error."""
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), inputs)})
    result = xlac.compile(model, tmp_path / f"{name}.o", input_shapes=_pinned(model, inputs))
    got = xlac.load(result.output)(*inputs)
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=atol)
        worst = max(worst, float(np.max(np.abs(g - w))))
    print(f"{name}: max abs error {worst:.3g} against onnxruntime")
    return worst


MS = "com.microsoft"
# model, model_type, opt_level -> the com.microsoft ops the optimizer writes (at least)
TOOL_CASES = {
    ("bert", 0): {"Attention": 2, "SkipLayerNormalization": 4, "BiasGelu": 2},
    ("bert", 1): {"Attention": 2, "SkipLayerNormalization": 4, "Gelu": 2},
    ("bert", 99): {"SkipLayerNormalization": 4, "BiasGelu": 2},
    ("gpt2", 0): {"EmbedLayerNormalization": 1, "Attention": 2, "SkipLayerNormalization": 4,
                  "FastGelu": 2},
    ("gpt2", 99): {"EmbedLayerNormalization": 1, "Attention": 2, "SkipLayerNormalization": 4,
                   "FastGelu": 2},
}
MODELS = {"bert": (bert, {"num_heads": 4, "hidden_size": 64}),
          "gpt2": (gpt2, {"num_heads": 4, "hidden_size": 32})}


@pytest.mark.parametrize("kind, level", sorted(TOOL_CASES), ids=lambda v: str(v))
def test_transformer_optimizer_output_compiles(kind, level, tmp_path):
    make, sizes = MODELS[kind]
    model, inputs = make()
    source = tmp_path / f"{kind}.onnx"
    onnx.save(model, source)
    # as the tool is used: its file (the model in memory lacks the com.microsoft opset)
    optimizer.optimize_model(str(source), model_type=kind, opt_level=level, use_gpu=False,
                             **sizes).save_model_to_file(str(tmp_path / "optimized.onnx"))
    optimized = onnx.load(tmp_path / "optimized.onnx")
    ops = histogram(optimized)
    for op, count in TOOL_CASES[kind, level].items():
        assert ops[f"{MS}.{op}"] == count, ops
    _check(optimized, inputs, tmp_path, f"{kind}_o{level}")


def _session_optimized(model, level, tmp_path) -> onnx.ModelProto:
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return onnx.load(options.optimized_model_filepath)


SESSION_CASES = {
    "cnn": {"FusedConv": 1},
    "bert": {"FusedMatMul": 2, "SkipLayerNormalization": 4, "Gelu": 2},
    "gpt2": {"FusedMatMul": 2, "FastGelu": 2},
}


@pytest.mark.parametrize("kind", sorted(SESSION_CASES))
def test_session_optimized_model_compiles(kind, tmp_path):
    model, inputs = {"cnn": cnn, "bert": bert, "gpt2": gpt2}[kind]()
    optimized = _session_optimized(model, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                                   tmp_path)
    ops = histogram(optimized)
    for op, count in SESSION_CASES[kind].items():
        assert ops[f"{MS}.{op}"] == count, ops
    _check(optimized, inputs, tmp_path, f"{kind}_extended")


def test_nchwc_layout_of_enable_all_is_refused(tmp_path):
    # ORT_ENABLE_ALL rewrites convolutions into com.microsoft.nchwc ops, whose blocked
    # layout depends on the machine that ran the session (onnxruntime warns so): refused.
    model, _ = cnn()
    optimized = _session_optimized(model, ort.GraphOptimizationLevel.ORT_ENABLE_ALL, tmp_path)
    assert histogram(optimized)["com.microsoft.nchwc.Conv"] >= 1
    with pytest.raises(XlacError, match=r"^unsupported ONNX ops: com\.microsoft\.nchwc\."):
        xlac.compile(optimized, tmp_path / "nchwc.o")


# -- onnxruntime's quantizers ------------------------------------------------------------
# quantize_dynamic writes DynamicQuantizeLinear, MatMulInteger, Cast and Mul; onnxruntime's
# session optimizer fuses them into MatMulIntegerToFloat and DynamicQuantizeMatMul. With
# reduce_range (7-bit weights) onnxruntime's AVX2 kernel cannot saturate
# (test_dynamic_quantization.py), so both compute the same integer products.

def test_session_fused_dynamic_quantization_compiles(tmp_path):
    model, inputs = bert()
    onnx.save(model, tmp_path / "bert.onnx")
    quantize_dynamic(tmp_path / "bert.onnx", tmp_path / "quantized.onnx", reduce_range=True)
    fused = _session_optimized(onnx.load(tmp_path / "quantized.onnx"),
                               ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, tmp_path)
    ops = histogram(fused)
    assert ops[f"{MS}.MatMulIntegerToFloat"] == 6 and ops[f"{MS}.DynamicQuantizeMatMul"] == 6, ops
    _check(fused, inputs, tmp_path, "bert_dynamic_quantized", atol=1e-4)


def test_quantize_dynamic_lstm_compiles(tmp_path):
    # batch 1: onnxruntime quantizes H per group of batch rows, a group per thread.
    model, inputs = lstm()
    onnx.save(model, tmp_path / "lstm.onnx")
    quantize_dynamic(tmp_path / "lstm.onnx", tmp_path / "quantized.onnx", reduce_range=True)
    quantized = onnx.load(tmp_path / "quantized.onnx")
    ops = histogram(quantized)
    assert ops[f"{MS}.DynamicQuantizeLSTM"] == 2 and ops["MatMulInteger"] == 1, ops
    _check(quantized, inputs, tmp_path, "lstm_dynamic_quantized", atol=1e-5)


NBITS_CASES = {   # name -> MatMulNBitsQuantizer's arguments
    "4bit": {"bits": 4, "op_types_to_quantize": ("MatMul", "Gather")},
    "4bit_accuracy_level_4": {"bits": 4, "accuracy_level": 4},
    "8bit": {"bits": 8},
}


def _nbits_quantized(model, options):
    """A quantized copy of ``model`` (the quantizer rewrites the model it is given)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    quantizer = MatMulNBitsQuantizer(copy, block_size=32, **options)
    quantizer.process()
    return quantizer.model.model


@pytest.mark.parametrize("name", sorted(NBITS_CASES))
def test_matmul_nbits_quantizer_output_compiles(name, tmp_path):
    model, inputs = decoder()
    options = NBITS_CASES[name]
    quantized = _nbits_quantized(model, options)
    ops = histogram(quantized)
    # every weight product; the attention's two products of activations stay MatMul
    assert ops[f"{MS}.MatMulNBits"] == 9 and ops["MatMul"] == 4, ops
    assert ops[f"{MS}.GatherBlockQuantized"] == (2 if "Gather" in options.get(
        "op_types_to_quantize", ()) else 0)
    # at accuracy level 4 onnxruntime quantizes A to int8 per block; xlac stays in f32
    _check(quantized, inputs, tmp_path, f"decoder_{name}",
           atol=3e-2 if "accuracy_level" in options else 1e-4)


def test_matmul_nbits_weights_stay_packed(tmp_path):
    # The 4-bit decoder's object holds its weights packed: 4-bit values with an f32 scale
    # and a 4-bit zero point a block of 32, 0.53 bytes a weight against float's 4.
    model, _ = decoder()
    quantized = _nbits_quantized(model, NBITS_CASES["4bit"])
    weights = xlac.compile(quantized, tmp_path / "decoder.o", report=True).report[
        "flash_bytes"]["weights"]
    floats = sum(onnx.numpy_helper.to_array(i).nbytes for i in model.graph.initializer)
    print(f"decoder weights: {weights} bytes in the 4-bit object, {floats} in float")
    assert weights < floats / 5


def test_conformance_tool_rows(tmp_path):
    # python -m xlac.conformance.tool_models: one row per tool, the histogram of what it
    # wrote; the CNN's row here (the others are the tests above)
    from xlac.conformance import tool_models
    entry = next(t for t in tool_models.TOOLS if t.name == "session-extended-cnn")
    result = tool_models.run_tool(entry, tmp_path)
    assert result.status == "pass" and result.ops[f"{MS}.FusedConv"] == 1, result
    row = tool_models.table([result]).splitlines()[-1]
    assert row.startswith("| a session at ORT_ENABLE_EXTENDED") and "**FusedConv** x1" in row
