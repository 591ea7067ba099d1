"""--report-memory: which buffers set the arena, with their ONNX nodes, as text, JSON and SVG.

The figures are checked against the buffer assignment they come from: the peak of
the live bytes is the report's lower bound, the buffers live at the peak add up to
it, and two blocks live at the same step never share bytes unless one overwrites the
other in place. The light models check the peak on nine CNNs (test_light_models.py).
"""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xlac
from xlac.hlo import Opcode, OpMetadata
from xlac.importers.onnx import import_onnx
from xlac.main import main
from xlac.optimizer import optimize
from hlo_util import CPU

RNG = np.random.default_rng(7)


def weight(name, *dims):
    return numpy_helper.from_array((RNG.standard_normal(dims) * 0.3).astype(np.float32), name)


def conv_net() -> onnx.ModelProto:
    """conv -> relu -> pool -> conv -> relu, and a residual add around the second conv:
    the first block's output stays live across it."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"], name="conv2", pads=[1] * 4),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Add", ["r2", "p1"], ["y"], name="skip")]
    graph = helper.make_graph(
        nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        [weight("w1", 8, 3, 3, 3), weight("b1", 8), weight("w2", 8, 8, 3, 3)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def mlp(batch: int = 4, w2_input: bool = False) -> onnx.ModelProto:
    """``w2_input``: the second layer's weights are an input, not a constant."""
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu1"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 64])]
    if w2_input:
        inputs.append(helper.make_tensor_value_info("w2", TensorProto.FLOAT, [32, 10]))
    graph = helper.make_graph(
        nodes, "mlp", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])],
        [weight("w1", 64, 32)] + ([] if w2_input else [weight("w2", 32, 10)]))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(params=["conv_net", "mlp"])
def compiled(request, tmp_path):
    model = {"conv_net": conv_net, "mlp": mlp}[request.param]()
    return xlac.compile(model, tmp_path / "m.o", report=True)


def test_live_bytes_peak_is_the_lower_bound_and_the_blocks_at_the_peak_add_up(compiled):
    report = compiled.report
    memory = report["memory"]
    assert memory["peak_bytes"] == max(memory["live_bytes"]) == report["lower_bound_bytes"]
    t = memory["peak_step"]
    at_peak = [b for b in memory["blocks"] if b["live_at_peak"]]
    assert all(b["start"] <= t <= b["end"] for b in at_peak)
    # In-place handovers share their bytes: count each byte range once.
    assert sum(size for _, size in {(b["offset"], b["size"]) for b in at_peak}) == \
        memory["peak_bytes"]
    assert memory["buffers_peak_bytes"] == report["lower_bound_buffers_bytes"]


def test_blocks_live_together_never_share_bytes(compiled):
    memory = compiled.report["memory"]
    blocks = memory["blocks"]
    for k, a in enumerate(blocks):
        assert 0 <= a["offset"] and a["offset"] + a["size"] <= memory["arena_bytes"]
        for b in blocks[k + 1:]:
            together = a["start"] <= b["end"] and b["start"] <= a["end"]
            overlap = (a["offset"] < b["offset"] + b["size"]
                       and b["offset"] < a["offset"] + a["size"])
            handover = a["name"] in (b["overwrites"], None) or b["name"] == a["overwrites"]
            assert not (together and overlap) or handover, (a, b)


def test_mlp_bounds_are_stated_on_the_same_terms(tmp_path, capsys):
    """The issue's case: the ONNX-order bound (no kernels, so no scratch) read smaller
    than the chosen order's, which counted the GEMM's scratch. At batch 16 a GEMM whose
    weights are an input packs B into scratch (constant weights are packed at compile
    time; a product of at most MR rows reads B in place)."""
    r = xlac.compile(mlp(16, w2_input=True), tmp_path / "m.o", report=True).report
    assert r["onnx_order_lower_bound_bytes"] == 2 * 16 * 32 * 4    # h and relu(h) in ONNX order
    assert r["lower_bound_buffers_bytes"] == 16 * 32 * 4           # relu written over h
    scratch = r["memory"]["kernel_scratch"]
    assert [k["name"] for k in scratch] and all(k["size"] > 0 for k in scratch)
    assert r["lower_bound_bytes"] == r["lower_bound_buffers_bytes"] + max(k["size"]
                                                                         for k in scratch)
    onnx.save(mlp(16, w2_input=True), tmp_path / "mlp.onnx")
    assert main([str(tmp_path / "mlp.onnx"), "-o", str(tmp_path / "m.o"), "--report"]) == 0
    text = capsys.readouterr().out
    assert "kernel scratch included" in text
    assert ("without scratch     2,048 bytes (2.0 KiB) for the chosen order, 4,096 bytes "
            "(4.0 KiB) for the ONNX node order") in text


def test_text_names_the_layer_at_the_peak(tmp_path, capsys):
    onnx.save(conv_net(), tmp_path / "net.onnx")
    assert main([str(tmp_path / "net.onnx"), "-o", str(tmp_path / "net.o"),
                 "--report-memory"]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0].startswith("memory: arena ")
    assert lines[1].startswith("  the peak, ") and "(ONNX " in lines[1]
    table = lines[lines.index(next(x for x in lines if x.startswith("  live at the peak")))
                  + 1:]
    assert table[0].split() == ["offset", "size", "steps", "buffer", "ONNX", "nodes"]
    assert any("conv1" in row or "conv2" in row for row in table[1:4])
    assert "live bytes over the schedule" in text and " * " in text


def skip_net() -> onnx.ModelProto:
    """a = relu(conv1(x)); y = mean(floor(conv3(conv2(a))) + a): a stays live across
    two convolutions (floor, no epilogue step of the float kernels, keeps the add out of
    conv3's epilogue)."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["a"], name="relu1"),
             helper.make_node("Conv", ["a", "w2"], ["b"], name="conv2", pads=[1] * 4),
             helper.make_node("Conv", ["b", "w3"], ["c"], name="conv3", pads=[1] * 4),
             helper.make_node("Floor", ["c"], ["g"], name="gate"),
             helper.make_node("Add", ["g", "a"], ["s"], name="skip"),
             helper.make_node("GlobalAveragePool", ["s"], ["y"], name="pool")]
    graph = helper.make_graph(
        nodes, "skipnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])],
        [weight("w1", 8, 3, 3, 3), weight("w2", 8, 8, 3, 3), weight("w3", 8, 8, 3, 3)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_buffer_passing_the_peak_is_named(tmp_path):
    memory = xlac.compile(skip_net(), tmp_path / "m.o", report=True).report["memory"]
    why = memory["why"]
    assert "ONNX Conv 'conv3'" in why[0]
    assert why[1].startswith("also live then: 1 buffer(s) made earlier and read later, 8,192 "
                             "bytes (the largest %")
    # conv1 and relu1 are one output fusion: its buffer is named after both
    assert "Relu 'relu1'), 8,192 bytes)" in why[1]
    assert why[2] == "the order is proven optimal: no order lowers the peak"


def test_single_layer_peak_is_explained(tmp_path):
    memory = xlac.compile(mlp(16, w2_input=True), tmp_path / "m.o",
                          report=True).report["memory"]
    assert memory["why"][0].startswith(f"the peak, {memory['peak_bytes']:,} bytes, is at step ")
    assert "ONNX MatMul 'fc" in memory["why"][0] and "of kernel scratch" in memory["why"][0]
    assert memory["why"][1].startswith("nothing else is live then, so no order of the ops can "
                                       "lower this peak: it is one layer's input plus output")


def test_svg_draws_every_block_and_json_holds_the_section(tmp_path, capsys):
    onnx.save(conv_net(), tmp_path / "net.onnx")
    svg, js = tmp_path / "arena.svg", tmp_path / "r.json"
    assert main([str(tmp_path / "net.onnx"), "-o", str(tmp_path / "net.o"),
                 f"--report-memory={svg}", "--report-json", str(js)]) == 0
    assert f"arena map: {svg}" in capsys.readouterr().out
    memory = json.loads(js.read_text())["memory"]
    root = ET.parse(svg).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    titles = [r.find(f"{ns}title").text for r in root.iter(f"{ns}rect")
              if r.find(f"{ns}title") is not None]
    assert len(titles) == sum(1 for b in memory["blocks"] if b["size"])
    assert any("Conv conv1" in t for t in titles)


def test_report_memory_svg_in_a_missing_folder_fails_before_compiling(tmp_path, capsys):
    onnx.save(mlp(), tmp_path / "mlp.onnx")
    status = main([str(tmp_path / "mlp.onnx"), "-o", str(tmp_path / "m.o"),
                   f"--report-memory={tmp_path / 'no' / 'a.svg'}"])
    assert status == 1 and "its folder does not exist" in capsys.readouterr().err
    assert not (tmp_path / "m.o").exists()


def test_instructions_keep_their_onnx_node_through_optimization():
    module = import_onnx(conv_net())
    for i in module.entry.instructions:
        if i.opcode not in (Opcode.PARAMETER, Opcode.CONSTANT):    # initializers: no node
            assert isinstance(i.metadata, OpMetadata), i
    optimize(module, CPU)
    names = {"conv1", "relu1", "pool1", "conv2", "relu2", "skip"}
    for i in module.entry.instructions:
        if i.opcode not in (Opcode.PARAMETER, Opcode.CONSTANT):
            assert i.metadata is not None and i.metadata.op_name in names, i
    fused = [f for i in module.entry.instructions if i.opcode is Opcode.FUSION
             for f in i.called[0].instructions if f.opcode is not Opcode.PARAMETER]
    assert fused and all(f.metadata is not None for f in fused)
