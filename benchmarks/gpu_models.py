"""The five models of the GPU check (benchmarks/gpu.py), in plain torch.nn.

    model, input_shape = build("resnet8", batch=1)     # eval mode, seeded random weights

ResNet-18 and MobileNetV2 (ImageNet, 224x224) follow torchvision's layouts; ResNet-8
(CIFAR-10, 32x32) and DS-CNN keyword spotting (49x10 MFCC) follow MLPerf Tiny's
reference Keras models (TF "same" padding of the strided first DS-CNN convolution is an
explicit asymmetric pad); the BERT-style encoder takes token embeddings (batch, 64, 128)
and runs 2 post-LayerNorm layers of 4-head attention and a 512-wide GELU feed-forward.
Weights are random from a fixed seed, and batch-norm statistics and affine terms are
randomized too (torch's defaults would make each batch norm almost the identity), so
the same name and batch always give the same model and input here and in the
torch.compile child process.
"""
from __future__ import annotations

import math

import torch
from torch import nn

SEED = 20261128


def _bn(c: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(c)


# -- ResNet-18 (torchvision's layout) -------------------------------------------------------

class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = _bn(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = _bn(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), _bn(cout))

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    def __init__(self, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), _bn(64),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.pool(self.blocks(self.stem(x)))
        return self.fc(torch.flatten(x, 1))


# -- MobileNetV2 (torchvision's layout, width 1.0) -------------------------------------------

def _conv_bn_relu6(cin: int, cout: int, k: int, stride: int, groups: int = 1):
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                         _bn(cout), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers = [] if expand == 1 else [_conv_bn_relu6(cin, hidden, 1, 1)]
        layers += [_conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden),
                   nn.Conv2d(hidden, cout, 1, 1, 0, bias=False), _bn(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))

    def __init__(self, classes: int = 1000):
        super().__init__()
        layers, cin = [_conv_bn_relu6(3, 32, 3, 2)], 32
        for t, c, n, s in self.SETTINGS:
            for k in range(n):
                layers.append(InvertedResidual(cin, c, s if k == 0 else 1, t))
                cin = c
        layers.append(_conv_bn_relu6(cin, 1280, 1, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(self, x):
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


# -- BERT-style encoder ------------------------------------------------------------------------

class EncoderLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.norm1 = nn.LayerNorm(hidden)
        self.ffn = nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden))
        self.norm2 = nn.LayerNorm(hidden)

    def forward(self, x):
        b, s, h = x.shape
        d = h // self.heads
        q, k, v = self.qkv(x).reshape(b, s, 3, self.heads, d).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) * (1.0 / math.sqrt(d)), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, h)
        x = self.norm1(x + self.proj(y))               # post-LayerNorm, as BERT
        return self.norm2(x + self.ffn(x))


class BertEncoder(nn.Module):
    def __init__(self, layers: int = 2, hidden: int = 128, heads: int = 4, ffn: int = 512):
        super().__init__()
        self.layers = nn.Sequential(*[EncoderLayer(hidden, heads, ffn) for _ in range(layers)])

    def forward(self, x):
        return self.layers(x)


# -- MLPerf Tiny: ResNet-8 (image classification) and DS-CNN (keyword spotting) ----------------

class TinyStack(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1)
        self.bn1 = _bn(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1)
        self.bn2 = _bn(cout)
        # The reference's shortcut is a bare 1x1 convolution (no batch norm) where the
        # stack strides.
        self.short = nn.Conv2d(cin, cout, 1, stride) if stride != 1 else None

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.short is None else self.short(x)))


class ResNet8(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1), _bn(16), nn.ReLU())
        self.stacks = nn.Sequential(TinyStack(16, 16, 1), TinyStack(16, 32, 2),
                                    TinyStack(32, 64, 2))
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = nn.functional.avg_pool2d(self.stacks(self.stem(x)), 8)
        return torch.softmax(self.fc(torch.flatten(x, 1)), dim=-1)


class DSCNN(nn.Module):
    def __init__(self, classes: int = 12, filters: int = 64):
        super().__init__()
        # Keras Conv2D(64, (10, 4), strides=2, padding="same") on 49x10: 25x5 out, the
        # 9 rows and 2 columns of padding split top 4 / bottom 5, left 1 / right 1.
        layers = [nn.ZeroPad2d((1, 1, 4, 5)), nn.Conv2d(1, filters, (10, 4), 2),
                  _bn(filters), nn.ReLU()]
        for _ in range(4):
            layers += [nn.Conv2d(filters, filters, 3, 1, 1, groups=filters), _bn(filters),
                       nn.ReLU(), nn.Conv2d(filters, filters, 1), _bn(filters), nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(filters, classes)

    def forward(self, x):
        x = nn.functional.avg_pool2d(self.features(x), (25, 5))
        return torch.softmax(self.fc(torch.flatten(x, 1)), dim=-1)


# name -> (constructor, input shape without the batch, description)
MODELS = {
    "resnet18": (ResNet18, (3, 224, 224), "ResNet-18, 224x224"),
    "mobilenetv2": (MobileNetV2, (3, 224, 224), "MobileNetV2, 224x224"),
    "bert": (BertEncoder, (64, 128), "BERT-style encoder, 2 layers, 64 tokens, hidden 128"),
    "resnet8": (ResNet8, (3, 32, 32), "ResNet-8, CIFAR 32x32"),
    "dscnn": (DSCNN, (1, 49, 10), "DS-CNN keyword spotting, 49x10"),
}
SMALL = ("resnet8", "dscnn", "bert")


def _randomize_norms(model: nn.Module, gen: torch.Generator) -> None:
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            with torch.no_grad():
                m.weight.copy_(0.5 + torch.rand(c, generator=gen))
                m.bias.copy_(0.2 * torch.randn(c, generator=gen))
                m.running_mean.copy_(0.1 * torch.randn(c, generator=gen))
                m.running_var.copy_(0.5 + torch.rand(c, generator=gen))


def build(name: str, batch: int) -> tuple[nn.Module, tuple[int, ...]]:
    """The model ``name`` in eval mode (float32, on the CPU) and its input shape at ``batch``."""
    make, shape, _ = MODELS[name]
    torch.manual_seed(SEED)
    model = make()
    _randomize_norms(model, torch.Generator().manual_seed(SEED + 1))
    return model.eval(), (batch, *shape)


def sample_input(name: str, batch: int) -> torch.Tensor:
    """A fixed random input of ``name`` at ``batch`` (float32, on the CPU)."""
    _, shape, _ = MODELS[name]
    gen = torch.Generator().manual_seed(SEED + 2 + batch)
    return torch.randn((batch, *shape), generator=gen)


def export_onnx(model: nn.Module, x: torch.Tensor, path) -> None:
    """TorchScript-based export (dynamo=False), opset 17, static shapes."""
    with torch.no_grad():
        torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"], do_constant_folding=True)
