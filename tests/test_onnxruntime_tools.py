"""Models as onnxruntime's own tools leave them, compiled by xlac, against onnxruntime.

A BERT-style encoder and a GPT-2-style decoder (past keys and values, a causal mask, the
tanh GELU: the graph Hugging Face's GPT-2 exports) from PyTorch go through
``onnxruntime.transformers.optimizer.optimize_model``, which fuses them into com.microsoft
ops; a small CNN, the encoder and the decoder through an onnxruntime session that writes
its optimized graph (``optimized_model_filepath``). Each test checks the ops the tool
wrote, so that a tool that stops fusing is noticed, then compiles the result. Weights are
random with a fixed seed, layer norms included (equal initializers would be shared).
"""
from __future__ import annotations

import collections
import io
import math

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
nn = torch.nn
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

from test_torch_models import Encoder, SmallCNN, _padded_tokens  # noqa: E402


class Conv1D(nn.Module):
    """GPT-2's projection: addmm over the flattened rows (a Gemm in the export)."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.2)
        self.bias = nn.Parameter(torch.randn(nf) * 0.1)

    def forward(self, x):
        out = x.size()[:-1] + (self.nf,)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(*out)


class GptAttention(nn.Module):
    def __init__(self, hidden, heads, n_ctx):
        super().__init__()
        causal = torch.tril(torch.ones(n_ctx, n_ctx, dtype=torch.bool))
        self.register_buffer("bias", causal.view(1, 1, n_ctx, n_ctx))
        self.register_buffer("masked_bias", torch.tensor(-1e4))
        self.heads, self.hidden = heads, hidden
        self.c_attn, self.c_proj = Conv1D(3 * hidden, hidden), Conv1D(hidden, hidden)

    def split(self, x, key=False):
        x = x.view(*(x.size()[:-1] + (self.heads, x.size(-1) // self.heads)))
        return x.permute(0, 2, 3, 1) if key else x.permute(0, 2, 1, 3)

    def forward(self, x, past, mask):
        q, k, v = self.c_attn(x).split(self.hidden, dim=2)
        q, k, v = self.split(q), self.split(k, key=True), self.split(v)
        k = torch.cat((past[0].transpose(-2, -1), k), dim=-1)
        v = torch.cat((past[1], v), dim=-2)
        present = torch.stack((k.transpose(-2, -1), v))
        w = torch.matmul(q, k) / (float(v.size(-1)) ** 0.5)
        nd, ns = w.size(-2), w.size(-1)
        w = torch.where(self.bias[:, :, ns - nd:ns, :ns], w, self.masked_bias.to(w.dtype))
        a = torch.matmul(nn.functional.softmax(w + mask, dim=-1), v).permute(0, 2, 1, 3)
        a = a.contiguous().view(*(a.size()[:-2] + (a.size(-2) * a.size(-1),)))
        return self.c_proj(a), present


class GptBlock(nn.Module):
    def __init__(self, hidden, heads, n_ctx):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.attn = GptAttention(hidden, heads, n_ctx)
        self.c_fc, self.c_proj = Conv1D(4 * hidden, hidden), Conv1D(hidden, 4 * hidden)

    def forward(self, x, past, mask):
        a, present = self.attn(self.ln_1(x), past, mask)
        x = x + a
        h = self.c_fc(self.ln_2(x))
        h = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * torch.pow(h, 3))))
        return x + self.c_proj(h), present


class Gpt2(nn.Module):
    """GPT-2 (hidden 32, 4 heads, 2 layers) with past key/values, as Hugging Face's
    exports it: inputs input_ids, position_ids, attention_mask, past_0, past_1."""

    def __init__(self, vocab=100, hidden=32, heads=4, layers=2, n_ctx=32):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(n_ctx, hidden)
        self.h = nn.ModuleList(GptBlock(hidden, heads, n_ctx) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)

    def forward(self, input_ids, position_ids, attention_mask, *past):
        mask = attention_mask.view(input_ids.shape[0], -1)[:, None, None, :]
        mask = (1.0 - mask) * -10000.0
        x = self.wte(input_ids) + self.wpe(position_ids)
        presents = []
        for block, p in zip(self.h, past):
            x, present = block(x, p, mask)
            presents.append(present)
        return (self.ln_f(x), *presents)


GPT_SHAPES = {"b": 2, "s": 3, "p": 5}          # batch, new tokens, past tokens


def _gpt2_inputs(gen):
    b, s, p = GPT_SHAPES["b"], GPT_SHAPES["s"], GPT_SHAPES["p"]
    mask = torch.ones(b, p + s)
    mask[1, :2] = 0                                  # left padding in the second sequence
    return (torch.randint(0, 100, (b, s), generator=gen), torch.arange(p, p + s).repeat(b, 1),
            mask, *(torch.randn(2, b, 4, p, 8, generator=gen) for _ in range(2)))


def _randomize_layer_norms(model, gen):
    for m in model.modules():
        if isinstance(m, nn.LayerNorm):
            m.weight.data.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=gen))
            m.bias.data.copy_(0.2 * torch.randn(m.bias.shape, generator=gen))


def _export(model, example, names, outputs, dynamic=None) -> onnx.ModelProto:
    buffer = io.BytesIO()
    torch.onnx.export(model, example, buffer, dynamo=False, opset_version=17, input_names=names,
                      output_names=outputs, dynamic_axes=dynamic)
    return onnx.load_from_string(buffer.getvalue())


def _made(make, inputs, names, outputs, dynamic=None):
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = make().eval()
    with torch.no_grad():
        _randomize_layer_norms(model, gen)
        example = inputs(gen)
    return _export(model, example, names, outputs, dynamic), [x.numpy() for x in example]


def bert():
    return _made(Encoder, _padded_tokens, ["input_ids", "attention_mask"], ["output"])


def gpt2():
    names = ["input_ids", "position_ids", "attention_mask", "past_0", "past_1"]
    dynamic = {"input_ids": {0: "b", 1: "s"}, "position_ids": {0: "b", 1: "s"},
               "attention_mask": {0: "b", 1: "t"}, "past_0": {1: "b", 3: "p"},
               "past_1": {1: "b", 3: "p"}}
    return _made(Gpt2, _gpt2_inputs, names, ["last_state", "present_0", "present_1"], dynamic)


class Decoder(nn.Module):
    """A decoder-only language model of nn.Linear projections (MatMul in the export, which
    MatMulNBitsQuantizer quantizes; GPT-2's Conv1D Gemms it leaves): token and position
    embeddings, 2 pre-norm layers of causal 4-head attention and a tanh-GELU MLP, a head."""

    def __init__(self, vocab=100, hidden=64, heads=4, seq=8):
        super().__init__()
        self.heads = heads
        self.wte, self.wpe = nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden)
        self.register_buffer("causal", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))
        self.layers = nn.ModuleList(nn.ModuleDict({
            "ln1": nn.LayerNorm(hidden), "qkv": nn.Linear(hidden, 3 * hidden),
            "out": nn.Linear(hidden, hidden), "ln2": nn.LayerNorm(hidden),
            "up": nn.Linear(hidden, 2 * hidden), "down": nn.Linear(2 * hidden, hidden)})
            for _ in range(2))
        self.ln_f, self.head = nn.LayerNorm(hidden), nn.Linear(hidden, vocab, bias=False)

    def attend(self, layer, x):
        b, s, h = x.shape
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2)
                   for t in layer["qkv"](layer["ln1"](x)).split(h, dim=2))
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(h // self.heads)
        w = w.masked_fill(~self.causal[:s, :s], -1e4).softmax(-1)
        return layer["out"](torch.matmul(w, v).transpose(1, 2).reshape(b, s, h))

    def forward(self, ids, positions):
        x = self.wte(ids) + self.wpe(positions)
        for layer in self.layers:
            x = x + self.attend(layer, x)
            x = x + layer["down"](nn.functional.gelu(layer["up"](layer["ln2"](x)),
                                                     approximate="tanh"))
        return self.head(self.ln_f(x))


def decoder():
    return _made(Decoder, lambda g: (torch.randint(0, 100, (2, 8), generator=g),
                                     torch.arange(8).repeat(2, 1)),
                 ["input_ids", "position_ids"], ["logits"])


def cnn():
    return _made(SmallCNN, lambda g: (torch.randn(1, 3, 32, 32, generator=g),), ["x"], ["y"])


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


class Lstm(nn.Module):
    """Two stacked LSTM layers (ONNX LSTMs in the export) and a linear head."""

    def __init__(self):
        super().__init__()
        self.lstm, self.head = nn.LSTM(8, 16, num_layers=2), nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.lstm(x)[0])


def test_quantize_dynamic_lstm_compiles(tmp_path):
    # batch 1: onnxruntime quantizes H per group of batch rows, a group per thread.
    model, inputs = _made(Lstm, lambda g: (torch.randn(6, 1, 8, generator=g),), ["x"], ["y"])
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
