"""Models as users bring them: exported by torch.onnx.export or converted by skl2onnx
from seeded weights, nothing downloaded (batch 1, float32 inputs, opset 17). For
models.py's table, where xlac had not been measured on these model classes:

    rf_classifier        scikit-learn RandomForestClassifier: 100 trees, depth 8,
                         20 features, 2 classes (skl2onnx, no ZipMap)
    gb_classifier        scikit-learn GradientBoostingClassifier: the same sizes
    rf_deep_classifier   scikit-learn RandomForestClassifier: 100 trees without a depth
                         limit (leaves from depth 3 to about 30), 30 features, 3 classes
    t5_encoder           a T5-style encoder: 2 pre-norm layers, RMS norm, bucketed
                         relative-position bias shared by the layers, ReLU FFN;
                         sequence 64, hidden 256, 4 heads, FFN 1024
    lraspp_mobilenet_v3  LR-ASPP segmentation head (bilinear resizes) on a dilated
                         MobileNetV3-Large, 21 classes, 1x3x128x128
    convnext_blocks      ConvNeXt-Tiny's stem and first two stages (3 + 3 blocks of
                         7x7 depthwise, channels-last LayerNorm, GELU MLP, layer
                         scale), 1x3x224x224
    mobilenet_v3_small   MobileNetV3-Small (squeeze-excitation, hard-swish), 224x224
    torch_lstm           nn.LSTM(40 -> 128), one layer over 50 frames, last state -> 10

torchvision is not installed where this was written, so the MobileNetV3s and the
ConvNeXt stages are written out here layer for layer after torchvision's definitions
(mobilenetv3.py, lraspp.py, convnext.py), with the same configurations.

Importing this module needs none of torch, scikit-learn or skl2onnx; a builder imports
what it needs and raises ModuleNotFoundError without it (models.py skips the model).
"""
from __future__ import annotations

import io
import math
import warnings

import numpy as np
import onnx

OPSET = 17


# -- scikit-learn through skl2onnx --------------------------------------------------------

def _forest(kind: str, name: str) -> onnx.ModelProto:
    from sklearn.datasets import make_classification
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
    from skl2onnx import to_onnx

    deep = kind == "rf_deep"
    x, y = make_classification(n_samples=5000 if deep else 2000, n_features=30 if deep else 20,
                               n_informative=15 if deep else 12, n_classes=3 if deep else 2,
                               random_state=0)
    x = x.astype(np.float32)
    if kind == "rf":
        clf = RandomForestClassifier(n_estimators=100, max_depth=8, random_state=0)
    elif deep:
        clf = RandomForestClassifier(n_estimators=100, random_state=0)
    else:
        clf = GradientBoostingClassifier(n_estimators=100, max_depth=8, random_state=0)
    clf.fit(x, y)
    model = to_onnx(clf, x[:1], options={"zipmap": False},
                    target_opset={"": OPSET, "ai.onnx.ml": 3})
    model.graph.name = name
    for value in [*model.graph.input, *model.graph.output]:   # skl2onnx leaves the batch open
        value.type.tensor_type.shape.dim[0].dim_value = 1
    return model


def rf_classifier() -> onnx.ModelProto:
    return _forest("rf", "rf_classifier")


def gb_classifier() -> onnx.ModelProto:
    return _forest("gb", "gb_classifier")


def rf_deep_classifier() -> onnx.ModelProto:
    return _forest("rf_deep", "rf_deep_classifier")


# -- torch.onnx.export --------------------------------------------------------------------

def _export(module, example: tuple, dynamic_batch: bool = False) -> onnx.ModelProto:
    """``module`` in eval mode through torch's TorchScript exporter (as
    tests/test_torch_models.py exports), one input per example tensor; with
    ``dynamic_batch`` every input's and the output's first dimension is ``batch``."""
    import torch
    module.eval()
    names = [f"input{i}" for i in range(len(example))]
    axes = ({n: {0: "batch"} for n in names + ["output"]} if dynamic_batch else None)
    buffer = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, example, buffer, dynamo=False, opset_version=OPSET,
                          input_names=names, output_names=["output"], dynamic_axes=axes)
    return onnx.load_from_string(buffer.getvalue())


def _randomize_batch_norms(module, gen) -> None:
    """Seeded running statistics and affine terms, so no BatchNorm is an identity."""
    import torch
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
                m.weight.copy_(1 + 0.1 * torch.randn(m.num_features, generator=gen))
                m.bias.copy_(0.1 * torch.randn(m.num_features, generator=gen))


def t5_encoder(layers: int = 2, seq: int = 64, hidden: int = 256, heads: int = 4,
               ffn: int = 1024, dynamic_batch: bool = False) -> onnx.ModelProto:
    import torch
    nn = torch.nn

    class RMSNorm(nn.Module):            # T5LayerNorm: no mean, no bias
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.weight, self.eps = nn.Parameter(1 + 0.1 * torch.randn(dim)), eps

        def forward(self, x):
            return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    class RelativeBias(nn.Module):       # T5's bidirectional bucketed position bias
        def __init__(self, heads, buckets=32, max_distance=128):
            super().__init__()
            self.embed = nn.Embedding(buckets, heads)
            self.buckets, self.max_distance = buckets, max_distance

        def bucket(self, rel):
            n = self.buckets // 2
            out = (rel > 0).long() * n
            rel = rel.abs()
            exact = n // 2
            large = exact + (torch.log(rel.float() / exact) / math.log(self.max_distance / exact)
                             * (n - exact)).long()
            large = torch.minimum(large, torch.full_like(large, n - 1))
            return out + torch.where(rel < exact, rel, large)

        def forward(self, q_len, k_len):
            ctx = torch.arange(q_len)[:, None]
            mem = torch.arange(k_len)[None, :]
            bias = self.embed(self.bucket(mem - ctx))          # (q, k, heads)
            return bias.permute(2, 0, 1).unsqueeze(0)          # (1, heads, q, k)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden, bias=False)
                                              for _ in range(4))
            self.wi, self.wo = nn.Linear(hidden, ffn, bias=False), nn.Linear(ffn, hidden,
                                                                              bias=False)
            self.norm1, self.norm2 = RMSNorm(hidden), RMSNorm(hidden)

        def split(self, x):
            b, s, _ = x.shape
            return x.view(b, s, heads, hidden // heads).transpose(1, 2)

        def forward(self, x, bias):
            b, s, _ = x.shape
            h = self.norm1(x)
            q, k, v = self.split(self.q(h)), self.split(self.k(h)), self.split(self.v(h))
            scores = q @ k.transpose(-1, -2) + bias            # T5 does not scale by 1/sqrt(d)
            ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, hidden)
            x = x + self.o(ctx)
            return x + self.wo(torch.relu(self.wi(self.norm2(x))))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = RelativeBias(heads)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.norm = RMSNorm(hidden)

        def forward(self, x):
            bias = self.bias(x.shape[1], x.shape[1])
            for layer in self.layers:
                x = layer(x, bias)
            return self.norm(x)

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    return _export(Encoder(), (torch.randn(1, seq, hidden, generator=gen),), dynamic_batch)


def _make_divisible(v: float, divisor: int = 8) -> int:
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


# torchvision's MobileNetV3 configurations: (in, kernel, expanded, out, SE, act, stride)
_V3_SMALL = [(16, 3, 16, 16, True, "RE", 2), (16, 3, 72, 24, False, "RE", 2),
             (24, 3, 88, 24, False, "RE", 1), (24, 5, 96, 40, True, "HS", 2),
             (40, 5, 240, 40, True, "HS", 1), (40, 5, 240, 40, True, "HS", 1),
             (40, 5, 120, 48, True, "HS", 1), (48, 5, 144, 48, True, "HS", 1),
             (48, 5, 288, 96, True, "HS", 2), (96, 5, 576, 96, True, "HS", 1),
             (96, 5, 576, 96, True, "HS", 1)]
# Large, dilated for segmentation: the last stage halved and at dilation 2, stride 1
_V3_LARGE_DILATED = [(16, 3, 16, 16, False, "RE", 1, 1), (16, 3, 64, 24, False, "RE", 2, 1),
                     (24, 3, 72, 24, False, "RE", 1, 1), (24, 5, 72, 40, True, "RE", 2, 1),
                     (40, 5, 120, 40, True, "RE", 1, 1), (40, 5, 120, 40, True, "RE", 1, 1),
                     (40, 3, 240, 80, False, "HS", 2, 1), (80, 3, 200, 80, False, "HS", 1, 1),
                     (80, 3, 184, 80, False, "HS", 1, 1), (80, 3, 184, 80, False, "HS", 1, 1),
                     (80, 3, 480, 112, True, "HS", 1, 1), (112, 3, 672, 112, True, "HS", 1, 1),
                     (112, 5, 672, 80, True, "HS", 2, 2), (80, 5, 480, 80, True, "HS", 1, 2),
                     (80, 5, 480, 80, True, "HS", 1, 2)]


def _mobilenet_v3_features(config):
    """torchvision's MobileNetV3 ``features``: stem, inverted residuals, last 1x1 conv."""
    import torch
    nn = torch.nn

    def cba(cin, cout, k, stride=1, groups=1, dilation=1, act=None):
        pad = (k - 1) // 2 * dilation
        layers = [nn.Conv2d(cin, cout, k, stride, pad, dilation, groups, bias=False),
                  nn.BatchNorm2d(cout, eps=0.001, momentum=0.01)]
        return nn.Sequential(*layers, act()) if act else nn.Sequential(*layers)

    class SqueezeExcitation(nn.Module):
        def __init__(self, c, squeeze):
            super().__init__()
            self.fc1, self.fc2 = nn.Conv2d(c, squeeze, 1), nn.Conv2d(squeeze, c, 1)

        def forward(self, x):
            s = nn.functional.adaptive_avg_pool2d(x, 1)
            return x * nn.functional.hardsigmoid(self.fc2(torch.relu(self.fc1(s))))

    class InvertedResidual(nn.Module):
        def __init__(self, cin, k, exp, cout, se, act, stride, dilation=1):
            super().__init__()
            act = nn.Hardswish if act == "HS" else nn.ReLU
            layers = [cba(cin, exp, 1, act=act)] if exp != cin else []
            layers.append(cba(exp, exp, k, 1 if dilation > 1 else stride, exp, dilation, act))
            if se:
                layers.append(SqueezeExcitation(exp, _make_divisible(exp // 4, 8)))
            layers.append(cba(exp, cout, 1))
            self.block = nn.Sequential(*layers)
            self.residual = stride == 1 and cin == cout
            self.is_cn = stride > 1

        def forward(self, x):
            y = self.block(x)
            return x + y if self.residual else y

    blocks = [InvertedResidual(*c) for c in config]
    last = config[-1][3]
    return nn.Sequential(cba(3, 16, 3, 2, act=nn.Hardswish), *blocks,
                         cba(last, 6 * last, 1, act=nn.Hardswish))


def mobilenet_v3_small(size: int = 224) -> onnx.ModelProto:
    import torch
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = _mobilenet_v3_features(_V3_SMALL)
            self.classifier = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(),
                                            nn.Dropout(0.2), nn.Linear(1024, 1000))

        def forward(self, x):
            x = nn.functional.adaptive_avg_pool2d(self.features(x), 1).flatten(1)
            return self.classifier(x)

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    net = Net()
    _randomize_batch_norms(net, gen)
    return _export(net, (torch.randn(1, 3, size, size, generator=gen),))


def lraspp_mobilenet_v3(size: int = 128, classes: int = 21) -> onnx.ModelProto:
    """torchvision's lraspp_mobilenet_v3_large: the low branch from the stride-8 stage
    (40 channels), the high from the last conv (480 channels, stride 16, dilated)."""
    import torch
    nn = torch.nn
    F = nn.functional

    class LRASPP(nn.Module):
        def __init__(self):
            super().__init__()
            features = _mobilenet_v3_features(_V3_LARGE_DILATED)
            stages = [0] + [i for i, b in enumerate(features) if getattr(b, "is_cn", False)] \
                + [len(features) - 1]
            self.low_pos = stages[-4]
            self.backbone = features
            low, high, inter = 40, 480, 128
            self.cbr = nn.Sequential(nn.Conv2d(high, inter, 1, bias=False),
                                     nn.BatchNorm2d(inter), nn.ReLU(inplace=True))
            self.scale = nn.Sequential(nn.AdaptiveAvgPool2d(1),
                                       nn.Conv2d(high, inter, 1, bias=False), nn.Sigmoid())
            self.low_classifier = nn.Conv2d(low, classes, 1)
            self.high_classifier = nn.Conv2d(inter, classes, 1)

        def forward(self, x):
            shape = x.shape[-2:]
            low = high = x
            for i, layer in enumerate(self.backbone):
                high = layer(high)
                if i == self.low_pos:
                    low = high
            y = self.cbr(high) * self.scale(high)
            y = F.interpolate(y, size=low.shape[-2:], mode="bilinear", align_corners=False)
            y = self.low_classifier(low) + self.high_classifier(y)
            return F.interpolate(y, size=shape, mode="bilinear", align_corners=False)

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    net = LRASPP()
    _randomize_batch_norms(net, gen)
    return _export(net, (torch.randn(1, 3, size, size, generator=gen),))


def convnext_blocks(size: int = 224, dims=(96, 192), depths=(3, 3)) -> onnx.ModelProto:
    """torchvision's convnext_tiny up to its second stage: 4x4/4 stem with LayerNorm2d,
    CNBlocks (7x7 depthwise, permute to channels-last, LayerNorm, Linear 4x, GELU, Linear,
    layer scale, permute back, residual), a LayerNorm2d + 2x2/2 downsample between stages."""
    import torch
    nn = torch.nn

    class LayerNorm2d(nn.LayerNorm):
        def forward(self, x):
            return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    class CNBlock(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
            self.norm = nn.LayerNorm(dim, eps=1e-6)
            self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
            self.layer_scale = nn.Parameter(0.1 + 0.01 * torch.randn(dim, 1, 1))

        def forward(self, x):
            y = self.norm(self.dw(x).permute(0, 2, 3, 1))
            y = self.fc2(nn.functional.gelu(self.fc1(y))).permute(0, 3, 1, 2)
            return x + self.layer_scale * y

    layers = [nn.Conv2d(3, dims[0], 4, 4), LayerNorm2d(dims[0], eps=1e-6)]
    for i, (dim, depth) in enumerate(zip(dims, depths)):
        if i:
            layers += [LayerNorm2d(dims[i - 1], eps=1e-6), nn.Conv2d(dims[i - 1], dim, 2, 2)]
        layers += [CNBlock(dim) for _ in range(depth)]
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    return _export(nn.Sequential(*layers), (torch.randn(1, 3, size, size, generator=gen),))


def torch_lstm(frames: int = 50, feats: int = 40, hidden: int = 128,
               classes: int = 10) -> onnx.ModelProto:
    import torch
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(feats, hidden, num_layers=1, batch_first=True)
            self.fc = nn.Linear(hidden, classes)

        def forward(self, x):
            _, (h, _) = self.lstm(x)
            return self.fc(h[-1])

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    return _export(Net(), (torch.randn(1, frames, feats, generator=gen),))


MODELS = {
    "rf_classifier": rf_classifier,
    "gb_classifier": gb_classifier,
    "rf_deep_classifier": rf_deep_classifier,
    "t5_encoder": t5_encoder,
    "lraspp_mobilenet_v3": lraspp_mobilenet_v3,
    "convnext_blocks": convnext_blocks,
    "mobilenet_v3_small": mobilenet_v3_small,
    "torch_lstm": torch_lstm,
}
