"""``--memory-budget``: the fastest plan that fits, streaming convolution chains a few
rows at a time where the plain plan does not (optimizer/row_streaming.py); compiled
and run, against onnxruntime and against the unstreamed build."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import xlac
from xlac.main import main
from quantized_models import quantized


def small_cnn() -> onnx.ModelProto:
    """A 3x3 convolution, a stride-2 depthwise one, a pointwise one with a residual add,
    a max pool with odd padding, global average pooling and a classifier: every kind of
    layer a chain streams, on odd sizes."""
    rng = np.random.default_rng(3)

    def w(name, *shape):
        return numpy_helper.from_array(
            (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name)
    inits = [w("k1", 8, 3, 3, 3), w("b1", 8), w("k2", 8, 1, 3, 3), w("k3", 8, 8, 1, 1),
             w("fc", 5, 8)]
    nodes = [
        helper.make_node("Conv", ["x", "k1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "k2"], ["c2"], group=8, strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "k3"], ["c3"]),
        helper.make_node("Add", ["c3", "r2"], ["s"]),
        helper.make_node("MaxPool", ["s"], ["p"], kernel_shape=[3, 3], pads=[0, 0, 1, 1]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 29, 13])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    folder = tmp_path_factory.mktemp("budget")
    path = folder / "cnn.onnx"
    onnx.save(small_cnn(), path)
    plain = xlac.compile(path, folder / "plain.o")
    return folder, path, plain.arena_size


def test_a_budget_the_plain_plan_meets_changes_nothing(cnn):
    folder, path, plain = cnn
    r = xlac.compile(path, folder / "fits.o", memory_budget=plain, report=True)
    assert r.arena_size == plain
    assert r.report["memory"]["streaming"]["chains"] == []


def test_streamed_plan_fits_and_matches_onnxruntime(cnn):
    folder, path, plain = cnn
    budget = plain // 2
    r = xlac.compile(path, folder / "streamed.o", memory_budget=budget, report=True)
    assert r.arena_size <= budget
    streaming = r.report["memory"]["streaming"]
    assert streaming["band_rows"] in (1, 2, 4) and streaming["chains"]
    x = np.random.default_rng(0).standard_normal((1, 3, 29, 13)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    got = xlac.load(r.output)(x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_int8_streamed_is_bit_exact_to_the_int8_build(tmp_path):
    model = quantized("ds_cnn")
    plain = xlac.compile(model, tmp_path / "plain.o")
    streamed = xlac.compile(model, tmp_path / "streamed.o",
                            memory_budget=plain.arena_size * 3 // 4)
    assert streamed.arena_size <= plain.arena_size * 3 // 4
    x = np.random.default_rng(1).standard_normal((1, 1, 49, 10)).astype(np.float32)
    np.testing.assert_array_equal(xlac.load(streamed.output)(x)[0],
                                  xlac.load(plain.output)(x)[0])


def test_a_budget_below_reach_is_one_line_and_writes_nothing(cnn, tmp_path, capsys):
    _, path, _ = cnn
    status = main([str(path), "-o", str(tmp_path / "m.o"), "--memory-budget", "100"])
    out, err = capsys.readouterr()
    assert status == 1 and out == ""
    assert err.count("\n") == 1
    assert "no plan fits the memory budget of 100 bytes: the smallest arena reachable is" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("budget", ["0", "-5"])
def test_a_budget_must_be_positive(cnn, tmp_path, capsys, budget):
    _, path, _ = cnn
    assert main([str(path), "-o", str(tmp_path / "m.o"), f"--memory-budget={budget}"]) == 1
    assert "--memory-budget must be a positive number of bytes" in capsys.readouterr().err


def test_report_memory_names_the_streamed_chains(cnn, tmp_path, capsys):
    _, path, plain = cnn
    assert main([str(path), "-o", str(tmp_path / "m.o"), "--memory-budget", str(plain // 2),
                 "--report-memory"]) == 0
    out = capsys.readouterr().out
    assert f"memory budget {plain // 2:,} bytes; plans tried, fastest first: {plain:,} bytes " \
           "unstreamed" in out
    assert "row(s) per band (no arithmetic recomputed" in out
    assert "GlobalAveragePool" in out
