"""Models written in PyTorch, exported to ONNX, compiled by xlac, against onnxruntime.

Exported with torch's TorchScript exporter (``dynamo=False``) and its torch.export-based
one (``dynamo=True``, which needs onnxscript, a test extra). The whole module is skipped
where torch is not installed.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import xlac

torch = pytest.importorskip("torch")
nn = torch.nn
from xlac.conformance.torch_models import (Encoder, EncoderLayer, SmallCNN,  # noqa: E402
                                           padded_tokens)
# torch warns that the TorchScript exporter is deprecated, on every export.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(32, 64), nn.Linear(64, 64), nn.Linear(64, 10)
        self.norm = nn.LayerNorm(64)

    def forward(self, x):
        h = nn.functional.gelu(self.fc1(x))          # erf GELU
        h = self.norm(torch.tanh(self.fc2(h)) + h)
        return torch.log_softmax(self.fc3(h), dim=-1)


class SdpaEncoderLayer(EncoderLayer):
    """scaled_dot_product_attention with a boolean padding mask: the dynamo exporter
    writes ONNX's Attention op from opset 23 on."""

    def __init__(self, hidden=64, heads=4, ffn=128):
        super().__init__(hidden, heads, ffn)

    def forward(self, x, mask):
        b, s, h = x.shape
        keep = mask[:, None, None, :].bool().expand(b, 1, s, s)   # onnxruntime wants Sq rows
        context = nn.functional.scaled_dot_product_attention(
            self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x)), attn_mask=keep)
        x = self.norm1(x + self.out(context.transpose(1, 2).reshape(b, s, h)))
        return self.norm2(x + self.ff2(nn.functional.gelu(self.ff1(x))))


def _randomize_batch_norms(model: nn.Module, gen: torch.Generator) -> None:
    """Running statistics away from (0, 1), so folding them into the graph is tested."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.weight.data.copy_(1 + 0.1 * torch.randn(m.num_features, generator=gen))


def _hidden_and_mask(gen: torch.Generator):
    return torch.randn(2, 16, 64, generator=gen), padded_tokens(gen)[1]


@dataclass(frozen=True)
class Export:
    make: Callable[[], nn.Module]
    inputs: Callable[[torch.Generator], tuple]    # example inputs
    opset: int = 13
    dynamo: bool = False
    # A transformer's buffers must stay within the ONNX-order lower bound.
    check_arena: bool = False


CASES = {
    "mlp": Export(MLP, lambda g: (torch.randn(4, 32, generator=g),)),
    "small_cnn": Export(SmallCNN, lambda g: (torch.randn(2, 3, 32, 32, generator=g),)),
    "bert_opset17": Export(Encoder, padded_tokens, opset=17, check_arena=True),
    "bert_opset17_dynamo": Export(Encoder, padded_tokens, opset=17, dynamo=True,
                                  check_arena=True),
    "bert_opset20_dynamo": Export(Encoder, padded_tokens, opset=20, dynamo=True,
                                  check_arena=True),
    "sdpa_attention_opset23_dynamo": Export(SdpaEncoderLayer, _hidden_and_mask, opset=23,
                                            dynamo=True, check_arena=True),
}


def export(case: Export, model: nn.Module, example: tuple) -> onnx.ModelProto:
    names = [f"input{i}" for i in range(len(example))]
    if case.dynamo:
        program = torch.onnx.export(model, example, dynamo=True, opset_version=case.opset,
                                    input_names=names, output_names=["output"])
        return program.model_proto
    buffer = io.BytesIO()
    torch.onnx.export(model, example, buffer, dynamo=False, opset_version=case.opset,
                      input_names=names, output_names=["output"])
    return onnx.load_from_string(buffer.getvalue())


@pytest.fixture(params=sorted(CASES))
def exported(request):
    case = CASES[request.param]
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = case.make().eval()
    with torch.no_grad():
        _randomize_batch_norms(model, gen)
        example = case.inputs(gen)
        want_torch = model(*example).numpy()
    return (request.param, case, export(case, model, example),
            [x.numpy() for x in example], want_torch)


def test_exported_model_matches_onnxruntime(exported, tmp_path):
    name, case, model, inputs, want_torch = exported
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), inputs)})
    np.testing.assert_allclose(want, want_torch, rtol=1e-4, atol=1e-5)   # the export is sound
    result = xlac.compile(model, tmp_path / f"{name}.o", report=case.check_arena)
    (got,) = xlac.load(result.output)(*inputs)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    if case.check_arena:
        # xlac's buffers (kernel scratch aside, which the ONNX order has no notion of) fit
        # in the ONNX-order bound, and the arena packs them and the scratch without a gap
        report = result.report
        assert report["lower_bound_buffers_bytes"] <= report["onnx_order_lower_bound_bytes"]
        assert report["arena_bytes"] == report["lower_bound_bytes"]


# -- a classifier with TopK / ArgMax / ArgMin heads, at opsets 17 and 20 ------------------

class Classifier(nn.Module):
    """Conv features, then the usual heads of a classifier: the top-3 classes with
    their probabilities, the argmax and the (least likely) argmin."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc = nn.Linear(16, 20)

    def forward(self, x):
        logits = self.fc(self.features(x))
        probs, classes = torch.topk(torch.softmax(logits, dim=-1), k=3, dim=-1)
        return probs, classes, logits.argmax(dim=-1), logits.argmin(dim=1, keepdim=True)


@pytest.mark.parametrize("opset", [17, 20])
def test_classifier_heads_match_onnxruntime(opset, tmp_path):
    torch.manual_seed(0)
    model = Classifier().eval()
    x = torch.randn(5, 1, 12, 12, generator=torch.Generator().manual_seed(1))
    buffer = io.BytesIO()
    torch.onnx.export(model, (x,), buffer, dynamo=False, opset_version=opset,
                      input_names=["image"],
                      output_names=["probs", "classes", "argmax", "argmin"])
    onnx_model = onnx.load_from_string(buffer.getvalue())
    ops = {n.op_type for n in onnx_model.graph.node}
    assert {"TopK", "ArgMax", "ArgMin"} <= ops
    sess = ort.InferenceSession(onnx_model.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    want = sess.run(None, {"image": x.numpy()})
    result = xlac.compile(onnx_model, tmp_path / f"classifier{opset}.o")
    got = xlac.load(result.output)(x.numpy())
    assert [g.dtype for g in got] == [np.float32, np.int64, np.int64, np.int64]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-6)
    for g, w in zip(got[1:], want[1:]):
        np.testing.assert_array_equal(g, w)


# -- recurrent networks: ONNX LSTM and GRU nodes, lowered to loops -----------------------

class KeywordSpotter(nn.Module):
    """A keyword-spotting LSTM: MFCC frames (batch, time, features) -> 12 class scores
    from the last step's hidden state."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(10, 32, batch_first=True)
        self.head = nn.Linear(32, 12)

    def forward(self, x):
        out, _ = self.lstm(x)
        return torch.log_softmax(self.head(out[:, -1]), dim=-1)


class SequenceTagger(nn.Module):
    """Two bidirectional GRU layers over (time, batch, features), a class score per step."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(8, 16, num_layers=2, bidirectional=True)
        self.head = nn.Linear(32, 5)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out)


RECURRENT = {"lstm_kws": (KeywordSpotter, (1, 20, 10)), "gru_tagger": (SequenceTagger, (7, 2, 8))}


# The exporter warns about traced rnn flags and a batch size other than 1 on every export.
@pytest.mark.filterwarnings("ignore:Converting a tensor to a Python boolean")
@pytest.mark.filterwarnings("ignore:Exporting a model to ONNX with a batch_size")
@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("name", sorted(RECURRENT))
def test_recurrent_model_matches_onnxruntime(name, opset, tmp_path):
    make, shape = RECURRENT[name]
    torch.manual_seed(0)
    model = make().eval()
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    onnx_model = export(Export(make, lambda g: (x,), opset=opset), model, (x,))
    assert {"LSTM", "GRU"} & {n.op_type for n in onnx_model.graph.node}
    sess = ort.InferenceSession(onnx_model.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"input0": x.numpy()})
    result = xlac.compile(onnx_model, tmp_path / f"{name}.o")
    (got,) = xlac.load(result.output)(x.numpy())
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
