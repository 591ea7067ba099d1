"""The int8 kernels (emitter/kernels/qconv.py) on every dot-product step, against
onnxruntime, and the instructions each target's build uses.

One model holds a table of independent QLinearConv / QLinearMatMul / QLinearAdd
layers (tails of channels and of K, strides, asymmetric padding with a zero point,
dilation, groups, depthwise, u8 and s8 activations, a residual epilogue, a float input
quantized as the kernel reads it and its result dequantized as the kernel stores it); it is compiled
for this machine's CPU and for x86 CPUs with other dot products (``--cpu``: AVX2's sign
trick, SSE2's generic path), run, and each output must equal onnxruntime's exactly (its
QOperator kernels are integer arithmetic with the same requantization). Weights that meet
u8 activations have 7 bits: onnxruntime's u8 x s8 kernels without VNNI (AVX2) add pairs
of products in saturating i16, exact only so (its reduce_range); the s8 layers keep full
weights. The same layers compiled as assembly for the other targets must use the
instructions the issue names.
"""
from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import xlac
from xlac.emitter import make_target
from xlac.emitter.kernels.intdot import int_dot_for

RNG = np.random.default_rng(11)

# name: (x dtype, cin, cout, size, kernel, stride, pads [t, l, b, r], group, dilation)
CONVS = {
    "rgb_stem": (np.int8, 3, 16, 9, 3, 2, [1, 1, 1, 1], 1, 1),
    "mono_stem_u8": (np.uint8, 1, 10, 11, 5, 2, [2, 1, 2, 2], 1, 1),
    "pointwise_u8": (np.uint8, 24, 24, 6, 1, 1, [0, 0, 0, 0], 1, 1),
    "strided_asymmetric": (np.int8, 20, 40, 7, 3, 2, [0, 0, 1, 1], 1, 1),
    "dilated_tail": (np.uint8, 6, 9, 8, 3, 1, [2, 2, 2, 2], 1, 2),
    "grouped": (np.int8, 12, 18, 5, 3, 1, [1, 1, 1, 1], 3, 1),
    "depthwise_u8": (np.uint8, 24, 24, 7, 3, 2, [1, 1, 1, 1], 24, 1),
    "depthwise_s8_tail": (np.int8, 20, 20, 6, 3, 1, [1, 1, 1, 1], 20, 1),
    "depthwise_s8_quads_tail": (np.int8, 22, 22, 5, 3, 1, [1, 0, 1, 2], 22, 1),
}


def _ints(dtype, *shape):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def layers_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    nodes, inputs, outputs, inits, feeds = [], [], [], [], {}

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    for name, (dt, cin, cout, size, k, stride, pads, group, dil) in CONVS.items():
        x = f"{name}_x"
        feeds[x] = _ints(dt, 1, cin, size, size)
        inputs.append(helper.make_tensor_value_info(x, helper.np_dtype_to_tensor_dtype(
            np.dtype(dt)), [1, cin, size, size]))
        w = _ints(np.int8, cout, cin // group, k, k)
        w[w == -128] = -127                   # symmetric weights, as quantize_static writes
        if dt == np.uint8:
            w //= 2                           # 7 bits (the module's docstring)
        zx = dt(-9 if dt == np.int8 else 131)
        args = [x, const(f"{name}_xs", np.float32(0.02)), const(f"{name}_xz", zx),
                const(f"{name}_w", w), const(f"{name}_ws", RNG.uniform(0.002, 0.01, cout)
                                                .astype(np.float32)),
                const(f"{name}_wz", np.zeros(cout, np.int8)),
                const(f"{name}_ys", np.float32(0.2)), const(f"{name}_yz", dt(3)),
                const(f"{name}_b", RNG.integers(-3000, 3000, cout).astype(np.int32))]
        y = f"{name}_y"
        nodes.append(helper.make_node("QLinearConv", args, [y], strides=[stride] * 2,
                                      pads=pads, group=group, dilations=[dil] * 2,
                                      kernel_shape=[k, k]))
        out = (size + pads[0] + pads[2] - dil * (k - 1) - 1) // stride + 1
        if name == "pointwise_u8":
            # a residual add the kernel's epilogue computes
            nodes.append(helper.make_node(
                "QLinearAdd", [y, args[6], args[7], x, args[1], args[2],
                               const("sum_s", np.float32(0.25)), const("sum_z", dt(7))],
                ["residual_y"], domain="com.microsoft"))
            y = "residual_y"
        outputs.append(helper.make_tensor_value_info(y, helper.np_dtype_to_tensor_dtype(
            np.dtype(dt)), [1, cout, out, out]))
    a = _ints(np.uint8, 3, 37)
    feeds["fc_x"] = a
    inputs.append(helper.make_tensor_value_info("fc_x", TensorProto.UINT8, [3, 37]))
    nodes.append(helper.make_node("QLinearMatMul", [
        "fc_x", const("fc_xs", np.float32(0.03)), const("fc_xz", np.uint8(120)),
        const("fc_w", _ints(np.int8, 37, 21) // 2), const("fc_ws", np.float32(0.004)),
        const("fc_wz", np.int8(0)), const("fc_ys", np.float32(0.15)),
        const("fc_yz", np.uint8(100))], ["fc_y"]))
    outputs.append(helper.make_tensor_value_info("fc_y", TensorProto.UINT8, [3, 21]))
    # a float input quantized into an s8 copy, the result dequantized as the kernel stores
    feeds["fcq_x"] = RNG.standard_normal((2, 37)).astype(np.float32)
    inputs.append(helper.make_tensor_value_info("fcq_x", TensorProto.FLOAT, [2, 37]))
    nodes += [helper.make_node("QuantizeLinear", ["fcq_x", "fc_xs", const("fcq_xz", np.int8(-5))],
                               ["fcq_q"]),
              helper.make_node("QLinearMatMul", [
                  "fcq_q", "fc_xs", "fcq_xz", "fc_w", "fc_ws", "fc_wz", "fc_ys",
                  const("fcq_yz", np.int8(4))], ["fcq_y"]),
              helper.make_node("DequantizeLinear", ["fcq_y", "fc_ys", "fcq_yz"], ["fcq_f"])]
    outputs.append(helper.make_tensor_value_info("fcq_f", TensorProto.FLOAT, [2, 21]))
    graph = helper.make_graph(nodes, "layers", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model, feeds


@pytest.fixture(scope="module")
def layers():
    model, feeds = layers_model()
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return model, feeds, session.run(None, feeds)


# None: this machine's CPU (VNNI where it has it; $XLAC_HOST_CPU's where it is set); the
# others exist on every x86-64 with AVX2.
@pytest.mark.parametrize("cpu", [None, "haswell", "x86-64"])
def test_layers_equal_onnxruntime(layers, tmp_path, cpu):
    model, feeds, expected = layers
    compiled = xlac.load(xlac.compile(model, tmp_path / "layers.o", cpu=cpu).output)
    got = compiled(*feeds.values())
    names = [o.name for o in model.graph.output]
    for name, g, w in zip(names, got, expected):
        assert g.dtype == w.dtype and np.array_equal(g, w), \
            f"{name}: {int((g != w).sum())} of {g.size} differ"


def test_each_cpu_gets_its_dot_product():
    kinds = {cpu: int_dot_for(make_target(triple, cpu)[0]).kind for triple, cpu in (
        ("x86_64-unknown-linux-gnu", "icelake-server"), ("x86_64-unknown-linux-gnu", "haswell"),
        ("x86_64-unknown-linux-gnu", "x86-64"), ("aarch64-unknown-linux-gnu", "cortex-a76"),
        ("aarch64-unknown-linux-gnu", "cortex-a53"), ("thumbv7em-none-eabi", "cortex-m4"),
        ("thumbv7m-none-eabi", "cortex-m3"), ("riscv64-unknown-linux-gnu", "generic-rv64"))}
    assert kinds == {"icelake-server": "vnni", "haswell": "avx2", "x86-64": "generic",
                     "cortex-a76": "sdot", "cortex-a53": "neon", "cortex-m4": "smlad",
                     "cortex-m3": "generic", "generic-rv64": "generic"}


def _mnemonics(model, tmp_path, triple, cpu, features=None) -> set[str]:
    out = tmp_path / f"{triple}-{cpu}.s"
    xlac.compile(model, out, target=triple, cpu=cpu, features=features, emit="asm")
    text = out.read_text()
    # an intrinsic LLVM does not know for the target would become a call to it
    assert not re.search(r"llvm\.(x86|aarch64|arm|riscv)\.", text), "unlowered intrinsic"
    return set(re.findall(r"^\s+(?:\{vex\}\s+)?([a-z][\w.]*)", text, re.M))


def _conv_only(model):
    """The table without the depthwise layers (they use i16 pair products)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = [n for n in m.graph.node if not n.output[0].startswith("depthwise")]
    del m.graph.node[:]
    m.graph.node.extend(keep)
    for coll in (m.graph.input, m.graph.output):
        kept = [v for v in coll if not v.name.startswith("depthwise")]
        del coll[:]
        coll.extend(kept)
    return m


@pytest.mark.parametrize("triple,cpu,features,wanted", [
    ("x86_64-unknown-linux-gnu", "icelake-server", None, {"vpdpbusd"}),
    ("x86_64-unknown-linux-gnu", "alderlake", None, {"vpdpbusd"}),
    ("x86_64-unknown-linux-gnu", "haswell", None, {"vpmaddubsw", "vpmaddwd", "vpsignb"}),
    ("aarch64-unknown-linux-gnu", "cortex-a76", None, {"sdot"}),
    ("aarch64-unknown-linux-gnu", "cortex-a53", None, {"smull", "sadalp"}),
    ("thumbv7em-none-eabi", "cortex-m4", None, {"smlad", "sxtb16"}),
    ("riscv64-unknown-linux-gnu", None, "+v", {"vwmul.vv"}),
], ids=lambda v: v if isinstance(v, str) else None)
def test_targets_use_their_dot_product_instructions(layers, tmp_path, triple, cpu, features,
                                                    wanted):
    ops = _mnemonics(_conv_only(layers[0]), tmp_path, triple, cpu, features)
    assert wanted <= ops, sorted(wanted - ops)


def test_riscv_base_isa_multiplies_in_scalars(layers, tmp_path):
    ops = _mnemonics(_conv_only(layers[0]), tmp_path, "riscv64-unknown-linux-gnu", None)
    assert "mul" in ops and not [op for op in ops if op.startswith("v")]


def test_depthwise_multiplies_pairs_of_taps(layers, tmp_path):
    # i16 pairs of two taps per instruction: vpmaddwd on x86, smlad on Cortex-M
    assert "vpmaddwd" in _mnemonics(layers[0], tmp_path, "x86_64-unknown-linux-gnu",
                                    "icelake-server")
    assert "smlad" in _mnemonics(layers[0], tmp_path, "thumbv7em-none-eabi", "cortex-m4")
