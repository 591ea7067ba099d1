"""Small PyTorch models with the shapes of real ones, for the tests and the conformance
run (tool_models.py): built from seeded weights, exported by the caller, nothing
downloaded. Importing this module needs torch.
"""
from __future__ import annotations

import io
import math

import onnx
import torch

nn = torch.nn


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.MaxPool2d(2))
        self.depthwise = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pointwise = nn.Conv2d(16, 32, 1)
        self.bn = nn.BatchNorm2d(32)
        self.project = nn.Conv2d(16, 32, 1, stride=1, bias=False)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        h = self.stem(x)
        h = nn.functional.relu(self.bn(self.pointwise(self.depthwise(h))) + self.project(h))
        h = nn.functional.adaptive_avg_pool2d(nn.functional.avg_pool2d(h, 2), 1).flatten(1)
        return self.head(h)


class Encoder(nn.Module):
    """A BERT-style encoder: token and position embeddings, 2 post-norm layers of
    multi-head attention (4 heads, a padding mask as an additive bias, Softmax) and an
    erf-GELU feed-forward block. LayerNormalization from opset 17 on; at opset 20 the
    GELU becomes ONNX's Gelu op."""

    def __init__(self, vocab=100, hidden=64, heads=4, ffn=128, seq=16, layers=2):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(seq, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, ffn) for _ in range(layers))

    def forward(self, ids, mask):
        x = self.norm(self.tok(ids) + self.pos.weight[: ids.shape[1]])
        bias = (1.0 - mask[:, None, None, :].float()) * -10000.0
        for layer in self.layers:
            x = layer(x, bias)
        return x


class EncoderLayer(nn.Module):
    def __init__(self, hidden, heads, ffn):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
        self.out, self.ff1, self.ff2 = nn.Linear(hidden, hidden), nn.Linear(hidden, ffn), \
            nn.Linear(ffn, hidden)
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.heads = heads

    def split(self, x):
        b, s, h = x.shape
        return x.view(b, s, self.heads, h // self.heads).transpose(1, 2)

    def forward(self, x, bias):
        b, s, h = x.shape
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        scores = q @ k.transpose(-1, -2) / (h // self.heads) ** 0.5 + bias
        context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, h)
        x = self.norm1(x + self.out(context))
        return self.norm2(x + self.ff2(nn.functional.gelu(self.ff1(x))))


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


class Lstm(nn.Module):
    """Two stacked LSTM layers (ONNX LSTMs in the export) and a linear head."""

    def __init__(self):
        super().__init__()
        self.lstm, self.head = nn.LSTM(8, 16, num_layers=2), nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.lstm(x)[0])


def padded_tokens(gen: torch.Generator):
    """Token ids and a padding mask: the second sequence is 10 tokens long."""
    ids = torch.randint(0, 100, (2, 16), generator=gen)
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 10:] = 0
    return ids, mask


GPT_SHAPES = {"b": 2, "s": 3, "p": 5}          # batch, new tokens, past tokens


def gpt2_inputs(gen):
    b, s, p = GPT_SHAPES["b"], GPT_SHAPES["s"], GPT_SHAPES["p"]
    mask = torch.ones(b, p + s)
    mask[1, :2] = 0                                  # left padding in the second sequence
    return (torch.randint(0, 100, (b, s), generator=gen), torch.arange(p, p + s).repeat(b, 1),
            mask, *(torch.randn(2, b, 4, p, 8, generator=gen) for _ in range(2)))


def randomize_layer_norms(model, gen):
    for m in model.modules():
        if isinstance(m, nn.LayerNorm):
            m.weight.data.copy_(1 + 0.2 * torch.randn(m.weight.shape, generator=gen))
            m.bias.data.copy_(0.2 * torch.randn(m.bias.shape, generator=gen))


def export(model, example, names, outputs, dynamic=None) -> onnx.ModelProto:
    """The TorchScript exporter's model, the one onnxruntime's tools were written for."""
    buffer = io.BytesIO()
    torch.onnx.export(model, example, buffer, dynamo=False, opset_version=17, input_names=names,
                      output_names=outputs, dynamic_axes=dynamic)
    return onnx.load_from_string(buffer.getvalue())


def made(make, inputs, names, outputs, dynamic=None):
    """``make()`` with seeded weights (layer norms too: equal initializers would be
    shared) exported at opset 17, and its example inputs as numpy arrays."""
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = make().eval()
    with torch.no_grad():
        randomize_layer_norms(model, gen)
        example = inputs(gen)
    return export(model, example, names, outputs, dynamic), [x.numpy() for x in example]


def bert():
    return made(Encoder, padded_tokens, ["input_ids", "attention_mask"], ["output"])


def gpt2():
    names = ["input_ids", "position_ids", "attention_mask", "past_0", "past_1"]
    dynamic = {"input_ids": {0: "b", 1: "s"}, "position_ids": {0: "b", 1: "s"},
               "attention_mask": {0: "b", 1: "t"}, "past_0": {1: "b", 3: "p"},
               "past_1": {1: "b", 3: "p"}}
    return made(Gpt2, gpt2_inputs, names, ["last_state", "present_0", "present_1"], dynamic)


def decoder():
    return made(Decoder, lambda g: (torch.randint(0, 100, (2, 8), generator=g),
                                     torch.arange(8).repeat(2, 1)),
                 ["input_ids", "position_ids"], ["logits"])


def cnn():
    return made(SmallCNN, lambda g: (torch.randn(1, 3, 32, 32, generator=g),), ["x"], ["y"])


def lstm():
    return made(Lstm, lambda g: (torch.randn(6, 1, 8, generator=g),), ["x"], ["y"])
