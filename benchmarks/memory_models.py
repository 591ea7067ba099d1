"""The models of the memory benchmark, built in code as ONNX (opset 17, batch 1, float32).

The four MLPerf Tiny v1.x reference architectures, two ImageNet classics:

    ds_cnn()                 keyword spotting DS-CNN              1x1x49x10  -> 12
    resnet8()                CIFAR-10 ResNet-8                    1x3x32x32  -> 10
    mobilenet_v1_025_vww()   visual wake words MobileNetV1 0.25   1x3x96x96  -> 2
    fc_autoencoder()         anomaly detection FC autoencoder     1x640      -> 640
    mobilenet_v2()           MobileNetV2 1.0                      1x3x224x224 -> 1000
    resnet18()               ResNet-18                            1x3x224x224 -> 1000

and a small U-Net, whose decoder upsamples (Resize) and concatenates skip connections:

    unet_small()             segmentation U-Net, 3 levels         1x3x64x64  -> 1x2x64x64

``MODELS`` maps their names to the builders. Batch norm is folded into the weights
and a bias, as a deployed model has it. Weights are seeded random at He scale
(normal, std sqrt(2 / fan_in)), so activations keep their size through the ReLU
layers and the outputs are far from constant. The MLPerf Tiny models come from Keras
with padding='same', whose padding is asymmetric for even sizes at stride 2; the
ImageNet models follow torchvision (symmetric k // 2 padding).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
# A residual branch's last layer is damped, as zero-init-gamma / Fixup training
# leaves it, so that activations do not double at every residual add.
RESIDUAL_GAIN = 0.5


class GraphBuilder:
    """Builds one ONNX graph layer by layer, tracking every tensor's static shape."""

    def __init__(self, name: str, input_shape: tuple[int, ...], seed: int = 0):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.weights: list[onnx.TensorProto] = []
        self.shapes: dict[str, tuple[int, ...]] = {"input": tuple(input_shape)}
        self.input = "input"

    def _fresh(self, prefix: str) -> str:
        return f"{prefix}_{len(self.nodes)}"

    def _node(self, op: str, inputs: list[str], shape: tuple[int, ...], **attrs) -> str:
        out = self._fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        self.shapes[out] = tuple(shape)
        return out

    def constant(self, prefix: str, value: np.ndarray) -> str:
        name = f"{prefix}_{len(self.weights)}"
        self.weights.append(numpy_helper.from_array(value, name))
        return name

    def _he(self, shape: tuple[int, ...], fan_in: int, gain: float) -> np.ndarray:
        std = gain * np.sqrt(2.0 / fan_in)
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def _bias(self, n: int) -> str:
        # What a folded batch norm leaves: beta - gamma * mean / sigma, small per channel.
        return self.constant("b", (self.rng.standard_normal(n) * 0.1).astype(np.float32))

    # -- layers ----------------------------------------------------------------------

    def conv(self, x: str, cout: int, kernel: int | tuple[int, int], stride: int = 1,
             group: int = 1, pad: str = "same", gain: float = 1.0) -> str:
        """Convolution with a folded-BN bias. ``pad`` 'same' is Keras/TF (extra row and
        column at the end when the total is odd), 'symmetric' is k // 2 on each side."""
        n, cin, h, w = self.shapes[x]
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        if pad == "same":
            (top, bottom), (left, right) = _same_pads(h, kh, stride), _same_pads(w, kw, stride)
        else:
            top = bottom = kh // 2
            left = right = kw // 2
        oh = (h + top + bottom - kh) // stride + 1
        ow = (w + left + right - kw) // stride + 1
        weight = self.constant("w", self._he((cout, cin // group, kh, kw),
                                             cin // group * kh * kw, gain))
        return self._node("Conv", [x, weight, self._bias(cout)], (n, cout, oh, ow),
                          kernel_shape=[kh, kw], strides=[stride, stride],
                          pads=[top, left, bottom, right], group=group)

    def depthwise(self, x: str, kernel: int, stride: int = 1, pad: str = "same") -> str:
        channels = self.shapes[x][1]
        return self.conv(x, channels, kernel, stride, group=channels, pad=pad)

    def relu(self, x: str) -> str:
        return self._node("Relu", [x], self.shapes[x])

    def relu6(self, x: str) -> str:
        lo = self.constant("zero", np.array(0.0, np.float32))
        hi = self.constant("six", np.array(6.0, np.float32))
        return self._node("Clip", [x, lo, hi], self.shapes[x])

    def add(self, a: str, b: str) -> str:
        return self._node("Add", [a, b], self.shapes[a])

    def avg_pool(self, x: str, kernel: tuple[int, int]) -> str:
        """A pool whose window is the whole kernel and whose stride is the kernel."""
        n, c, h, w = self.shapes[x]
        return self._node("AveragePool", [x], (n, c, h // kernel[0], w // kernel[1]),
                          kernel_shape=list(kernel), strides=list(kernel))

    def max_pool(self, x: str, kernel: int, stride: int, pad: int) -> str:
        n, c, h, w = self.shapes[x]
        return self._node("MaxPool", [x], (n, c, (h + 2 * pad - kernel) // stride + 1,
                                           (w + 2 * pad - kernel) // stride + 1),
                          kernel_shape=[kernel, kernel], strides=[stride, stride],
                          pads=[pad] * 4)

    def resize(self, x: str, scale: int, mode: str = "linear") -> str:
        n, c, h, w = self.shapes[x]
        scales = self.constant("scales", np.array([1, 1, scale, scale], np.float32))
        return self._node("Resize", [x, "", scales], (n, c, h * scale, w * scale), mode=mode)

    def concat(self, xs: list[str]) -> str:
        n, _, h, w = self.shapes[xs[0]]
        return self._node("Concat", xs, (n, sum(self.shapes[x][1] for x in xs), h, w), axis=1)

    def global_avg_pool(self, x: str) -> str:
        n, c = self.shapes[x][:2]
        return self._node("GlobalAveragePool", [x], (n, c, 1, 1))

    def flatten(self, x: str) -> str:
        n, *rest = self.shapes[x]
        return self._node("Flatten", [x], (n, int(np.prod(rest))), axis=1)

    def gemm(self, x: str, nout: int, gain: float = 1.0) -> str:
        n, nin = self.shapes[x]
        weight = self.constant("w", self._he((nout, nin), nin, gain))
        return self._node("Gemm", [x, weight, self._bias(nout)], (n, nout), transB=1)

    def softmax(self, x: str) -> str:
        return self._node("Softmax", [x], self.shapes[x], axis=-1)

    # -- sequence layers (a token per row: shapes (seq, hidden)) -------------------------

    def matmul(self, x: str, nout: int, gain: float = 1.0) -> str:
        """x @ W + b with W (nin, nout), as exported transformers have their linears."""
        *rows, nin = self.shapes[x]
        weight = self.constant("w", self._he((nin, nout), nin, gain))
        y = self._node("MatMul", [x, weight], (*rows, nout))
        return self._node("Add", [y, self._bias(nout)], (*rows, nout))

    def layer_norm(self, x: str) -> str:
        n = self.shapes[x][-1]
        gamma = self.constant("gamma", (1 + 0.1 * self.rng.standard_normal(n)).astype(np.float32))
        return self._node("LayerNormalization", [x, gamma, self._bias(n)], self.shapes[x],
                          axis=-1, epsilon=1e-5)

    def gelu(self, x: str) -> str:
        """Erf GELU as torch exports it before opset 20: x * 0.5 * (1 + erf(x / sqrt 2))."""
        shape = self.shapes[x]
        scaled = self._node("Div", [x, self.constant("sqrt2", np.array(np.sqrt(2), np.float32))],
                            shape)
        one = self._node("Add", [self._node("Erf", [scaled], shape),
                                 self.constant("one", np.array(1, np.float32))], shape)
        half = self._node("Mul", [x, self.constant("half", np.array(0.5, np.float32))], shape)
        return self._node("Mul", [half, one], shape)

    def reshape(self, x: str, shape: tuple[int, ...]) -> str:
        return self._node("Reshape", [x, self.constant("shape", np.array(shape, np.int64))],
                          shape)

    def transpose(self, x: str, perm: tuple[int, ...]) -> str:
        shape = tuple(self.shapes[x][p] for p in perm)
        return self._node("Transpose", [x], shape, perm=list(perm))

    def matmul_of(self, a: str, b: str) -> str:
        """A product of two activations (attention scores, attention times values)."""
        sa, sb = self.shapes[a], self.shapes[b]
        return self._node("MatMul", [a, b], (*sa[:-1], sb[-1]))

    def scale(self, x: str, factor: float) -> str:
        return self._node("Mul", [x, self.constant("scale", np.array(factor, np.float32))],
                          self.shapes[x])

    def build(self, output: str) -> onnx.ModelProto:
        def info(name):
            return helper.make_tensor_value_info(name, TensorProto.FLOAT,
                                                 list(self.shapes[name]))
        graph = helper.make_graph(self.nodes, self.name, [info(self.input)], [info(output)],
                                  self.weights)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="xlac-benchmarks")
        onnx.checker.check_model(model, full_check=True)
        return model


def _same_pads(size: int, kernel: int, stride: int) -> tuple[int, int]:
    total = max((-(-size // stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


# -- MLPerf Tiny ------------------------------------------------------------------------

def ds_cnn() -> onnx.ModelProto:
    """Keyword spotting: a 10x4 stride-2 convolution, four depthwise-separable blocks of
    64 channels, average pool over the 25x5 map, 12 classes."""
    g = GraphBuilder("ds_cnn", (1, 1, 49, 10), seed=1)
    x = g.relu(g.conv(g.input, 64, (10, 4), stride=2))
    for _ in range(4):
        x = g.relu(g.depthwise(x, 3))
        x = g.relu(g.conv(x, 64, 1))
    x = g.flatten(g.avg_pool(x, g.shapes[x][2:]))
    return g.build(g.softmax(g.gemm(x, 12)))


def resnet8() -> onnx.ModelProto:
    """CIFAR-10 ResNet-8: a 16-filter stem and three residual stacks of 16, 32 and 64
    filters; stacks 2 and 3 stride by 2 and take a 1x1 convolution as the shortcut."""
    g = GraphBuilder("resnet8", (1, 3, 32, 32), seed=2)
    x = g.relu(g.conv(g.input, 16, 3))
    for filters, stride in ((16, 1), (32, 2), (64, 2)):
        y = g.relu(g.conv(x, filters, 3, stride))
        y = g.conv(y, filters, 3, gain=RESIDUAL_GAIN)
        shortcut = x if stride == 1 else g.conv(x, filters, 1, stride)
        x = g.relu(g.add(shortcut, y))
    x = g.flatten(g.avg_pool(x, g.shapes[x][2:]))
    return g.build(g.softmax(g.gemm(x, 10)))


def mobilenet_v1_025_vww() -> onnx.ModelProto:
    """Visual wake words: MobileNetV1 with width 0.25 on 96x96 images, 2 classes."""
    g = GraphBuilder("mobilenet_v1_025_vww", (1, 3, 96, 96), seed=3)
    x = g.relu(g.conv(g.input, 8, 3, stride=2))
    blocks = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 \
        + [(1024, 2), (1024, 1)]
    for filters, stride in blocks:
        x = g.relu(g.depthwise(x, 3, stride))
        x = g.relu(g.conv(x, filters // 4, 1))
    x = g.flatten(g.avg_pool(x, g.shapes[x][2:]))
    return g.build(g.softmax(g.gemm(x, 2)))


def fc_autoencoder() -> onnx.ModelProto:
    """Anomaly detection: dense 128 x4, a bottleneck of 8, dense 128 x4, all with ReLU,
    and a linear dense 640 that reconstructs the 640-value input."""
    g = GraphBuilder("fc_autoencoder", (1, 640), seed=4)
    x = g.input
    for width in (128, 128, 128, 128, 8, 128, 128, 128, 128):
        x = g.relu(g.gemm(x, width))
    return g.build(g.gemm(x, 640))


# -- ImageNet ---------------------------------------------------------------------------

def mobilenet_v2() -> onnx.ModelProto:
    """MobileNetV2 width 1.0 (torchvision layout): inverted residuals with ReLU6,
    a residual add where a block keeps its stride and width, 1000 logits."""
    g = GraphBuilder("mobilenet_v2", (1, 3, 224, 224), seed=5)
    x = g.relu6(g.conv(g.input, 32, 3, stride=2, pad="symmetric"))
    # (expansion t, output channels c, repeats n, first stride s), as in the paper.
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            cin = g.shapes[x][1]
            y = x if t == 1 else g.relu6(g.conv(x, cin * t, 1))
            y = g.relu6(g.depthwise(y, 3, stride, pad="symmetric"))
            residual = stride == 1 and cin == c
            y = g.conv(y, c, 1, gain=RESIDUAL_GAIN if residual else 1.0)
            x = g.add(x, y) if residual else y
    x = g.relu6(g.conv(x, 1280, 1))
    return g.build(g.gemm(g.flatten(g.global_avg_pool(x)), 1000))


def resnet18() -> onnx.ModelProto:
    """ResNet-18 (torchvision layout): 7x7 stem, max pool, four stages of two basic
    blocks (64 to 512 filters), 1x1 stride-2 shortcuts where the shape changes."""
    g = GraphBuilder("resnet18", (1, 3, 224, 224), seed=6)
    x = g.relu(g.conv(g.input, 64, 7, stride=2, pad="symmetric"))
    x = g.max_pool(x, 3, 2, 1)
    for filters, first_stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for stride in (first_stride, 1):
            y = g.relu(g.conv(x, filters, 3, stride, pad="symmetric"))
            y = g.conv(y, filters, 3, pad="symmetric", gain=RESIDUAL_GAIN)
            shortcut = x if g.shapes[x] == g.shapes[y] else g.conv(x, filters, 1, stride)
            x = g.relu(g.add(shortcut, y))
    return g.build(g.gemm(g.flatten(g.global_avg_pool(x)), 1000))


# -- segmentation -----------------------------------------------------------------------

def unet_small() -> onnx.ModelProto:
    """A U-Net of three levels (16, 32, 64 filters): two 3x3 convolutions per level, 2x2
    max pools down, bilinear 2x Resize up, the encoder's maps concatenated back in."""
    g = GraphBuilder("unet_small", (1, 3, 64, 64), seed=7)

    def block(x, filters):
        return g.relu(g.conv(g.relu(g.conv(x, filters, 3, pad="symmetric")), filters, 3,
                             pad="symmetric"))

    skips = []
    x = g.input
    for filters in (16, 32):
        x = block(x, filters)
        skips.append(x)
        x = g.max_pool(x, 2, 2, 0)
    x = block(x, 64)
    for filters, skip in zip((32, 16), reversed(skips)):
        x = block(g.concat([g.resize(x, 2), skip]), filters)
    return g.build(g.conv(x, 2, 1))


MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "ds_cnn": ds_cnn,
    "resnet8": resnet8,
    "mobilenet_v1_025_vww": mobilenet_v1_025_vww,
    "fc_autoencoder": fc_autoencoder,
    "mobilenet_v2": mobilenet_v2,
    "resnet18": resnet18,
    "unet_small": unet_small,
}
