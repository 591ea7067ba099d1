"""A small vision transformer quantized by onnxruntime.quantization.quantize_dynamic,
compiled by xlac, against onnxruntime.

quantize_dynamic leaves standard ops: DynamicQuantizeLinear on the activations (u8),
MatMulInteger and ConvInteger on s8 weights, Cast and Mul back to float. xlac computes
the integer products exactly, as ONNX defines them. onnxruntime's u8 x s8 kernel on
AVX2 without VNNI (vpmaddubsw) adds each pair of neighbouring products in int16 and
saturates: after a LayerNorm the activations reach 255 and the weights +-127, a pair
reaches 64,770, and the ViT's output moves by up to 80% of its range. That is
onnxruntime's, not the spec's: with ``reduce_range`` (7-bit weights, which cannot
saturate) both agree to 1e-6 of the output range. Skipped without torch.
"""
from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import shape_inference
from onnxruntime.quantization import quantize_dynamic

import xlac

torch = pytest.importorskip("torch")
nn = torch.nn
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

IMAGE = (1, 3, 16, 16)


class Block(nn.Module):
    """A pre-norm encoder layer: 2-head attention and an erf-GELU MLP."""

    def __init__(self, width: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = nn.MultiheadAttention(width, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(),
                                 nn.Linear(2 * width, width))

    def forward(self, x):
        y = self.norm1(x)
        x = x + self.attention(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    """4x4 patches of a 16x16 image embedded by a Conv, a class token, learned
    positions, two encoder layers, a linear head on the class token."""

    def __init__(self, width: int = 32, patch: int = 4, classes: int = 10):
        super().__init__()
        self.patch = nn.Conv2d(3, width, patch, patch)
        tokens = (IMAGE[2] // patch) ** 2 + 1
        self.cls = nn.Parameter(torch.randn(1, 1, width) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, tokens, width) * 0.02)
        self.blocks = nn.Sequential(Block(width), Block(width))
        self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


@pytest.fixture(scope="module")
def vit() -> onnx.ModelProto:
    torch.manual_seed(0)
    f = io.BytesIO()
    torch.onnx.export(ViT().eval(), (torch.randn(IMAGE),), f, input_names=["x"],
                      output_names=["y"], opset_version=17, dynamo=False)
    return onnx.load_from_string(f.getvalue())


def _quantized(model, folder, **options) -> onnx.ModelProto:
    path = folder / "quantized.onnx"
    quantize_dynamic(model, path, **options)
    return onnx.load(path)


def _session(model):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def _images(count: int):
    rng = np.random.default_rng(1)
    return [rng.standard_normal(IMAGE).astype(np.float32) for _ in range(count)]


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_reduce_range_vit_matches_onnxruntime(vit, per_channel, tmp_path):
    model = _quantized(vit, tmp_path, per_channel=per_channel, reduce_range=True)
    assert {"DynamicQuantizeLinear", "MatMulInteger", "ConvInteger"} <= \
        {n.op_type for n in model.graph.node}
    compiled = xlac.load(xlac.compile(model, tmp_path / "vit.o", name="vit").output)
    session = _session(model)
    for x in _images(8):
        (got,), (want,) = compiled(x), session.run(None, {"x": x})
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.ptp(want))


def _with_outputs(model, names) -> onnx.ModelProto:
    """The model with the tensors ``names`` as its outputs, typed by shape inference."""
    model = shape_inference.infer_shapes(model)
    known = {v.name: v for v in model.graph.value_info}
    del model.graph.output[:]
    model.graph.output.extend(known[n] for n in names)
    return model


def _exact(a, b, a_zero):
    return np.matmul(a.astype(np.int64) - a_zero, b.astype(np.int64))


def _int16_pairs(a, b, a_zero):
    """onnxruntime's AVX2 u8 x s8 product: neighbouring products along K added in int16
    with saturation (vpmaddubsw), summed in int32, the zero point's share taken off."""
    a, b = a.astype(np.int64), b.astype(np.int64)
    if a.shape[-1] % 2:
        a = np.concatenate([a, np.zeros(a.shape[:-1] + (1,), np.int64)], -1)
        b = np.concatenate([b, np.zeros((1, b.shape[1]), np.int64)], 0)
    products = a[..., :, None] * b
    pairs = np.clip(products[..., 0::2, :] + products[..., 1::2, :], -32768, 32767)
    return pairs.sum(-2) - a_zero * b.sum(0)


def test_integer_products_are_exact_where_onnxruntime_saturates(vit, tmp_path):
    model = _quantized(vit, tmp_path)          # the defaults: s8 weights, u8 activations
    weights = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    products = [n for n in model.graph.node if n.op_type == "MatMulInteger"]
    assert len(products) == 9
    assert all(not weights[n.input[3]].any() for n in products)     # symmetric weights
    names = list(dict.fromkeys(t for n in products for t in (n.input[0], n.input[2],
                                                              n.output[0])))
    probe = _with_outputs(model, names)
    x = _images(1)[0]
    ours = dict(zip(names, xlac.load(xlac.compile(probe, tmp_path / "probe.o",
                                                  name="probe").output)(x)))
    theirs = dict(zip(names, _session(probe).run(None, {"x": x})))
    saturated = 0
    for n in products:
        b = weights[n.input[1]]
        assert b.dtype == np.int8 and np.abs(b).max() == 127
        a, zero = ours[n.input[0]], ours[n.input[2]]
        np.testing.assert_array_equal(ours[n.output[0]], _exact(a, b, zero), err_msg=n.name)
        a, zero, got = theirs[n.input[0]], theirs[n.input[2]], theirs[n.output[0]]
        exact = _exact(a, b, zero)
        if not np.array_equal(got, exact):
            # onnxruntime without VNNI: the int16 saturation, and nothing else
            np.testing.assert_array_equal(got, _int16_pairs(a, b, zero), err_msg=n.name)
            saturated += int((got != exact).sum())
    print(f"onnxruntime's int16 saturation changed {saturated} products")
