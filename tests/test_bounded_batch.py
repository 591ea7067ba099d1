"""Bounded batch (--bound): one object for every batch of 1 to the bound, against
onnxruntime; the C signature, the status for sizes out of bounds, and refusals."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import xlac
from xlac import XlacError

from emit_util import RUNTIME_DIR

RNG = np.random.default_rng(11)


def _weight(name: str, *shape: int) -> onnx.TensorProto:
    return numpy_helper.from_array((RNG.standard_normal(shape) * 0.3).astype(np.float32), name)


def cnn(batch="N") -> onnx.ModelProto:
    """Conv, BatchNormalization, pooling, Flatten and Gemm: what a classifier is made of."""
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "beta", "mean", "var"], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g1"]),
        helper.make_node("Flatten", ["g1"], ["f"]),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    weights = [_weight("w", 8, 3, 3, 3), _weight("b", 8), _weight("g", 8), _weight("beta", 8),
               _weight("mean", 8),
               numpy_helper.from_array(RNG.uniform(0.5, 1.5, 8).astype(np.float32), "var"),
               _weight("fw", 5, 8), _weight("fb", 5)]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 12, 12])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, 5]),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, [batch, 8, 12, 12])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def encoder_layer() -> onnx.ModelProto:
    """Self-attention over tokens with a per-sample mask, and layer normalization: the
    batch is a dot's batch dimension, and Shape/Reshape chains split the heads."""
    d, heads = 16, 2
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        helper.make_node("Shape", ["x"], ["xs"]),
        helper.make_node("Slice", ["xs", "zero", "two"], ["bs"]),
        helper.make_node("Concat", ["bs", "split"], ["heads_shape"], axis=0),
    ]
    for t in ("q", "k", "v"):
        nodes += [helper.make_node("Reshape", [t, "heads_shape"], [f"{t}h"]),
                  helper.make_node("Transpose", [f"{t}h"], [f"{t}t"], perm=[0, 2, 1, 3])]
    nodes += [
        helper.make_node("Transpose", ["kt"], ["ktt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["qt", "ktt"], ["s"]),
        helper.make_node("Unsqueeze", ["mask", "axes12"], ["m4"]),
        helper.make_node("Sub", ["one", "m4"], ["inv"]),
        helper.make_node("Mul", ["inv", "neg"], ["bias"]),
        helper.make_node("Add", ["s", "bias"], ["sb"]),
        helper.make_node("Softmax", ["sb"], ["a"], axis=-1),
        helper.make_node("MatMul", ["a", "vt"], ["o"]),
        helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ot", "merged"], ["om"]),
        helper.make_node("Add", ["om", "x"], ["res"]),
        helper.make_node("LayerNormalization", ["res", "ln_g", "ln_b"], ["y"], axis=-1),
    ]
    consts = [_weight("wq", d, d), _weight("wk", d, d), _weight("wv", d, d),
              _weight("ln_g", d), _weight("ln_b", d),
              numpy_helper.from_array(np.array([0], np.int64), "zero"),
              numpy_helper.from_array(np.array([2], np.int64), "two"),
              numpy_helper.from_array(np.array([heads, d // heads], np.int64), "split"),
              numpy_helper.from_array(np.array([0, 0, d], np.int64), "merged"),
              numpy_helper.from_array(np.array([1, 2], np.int64), "axes12"),
              numpy_helper.from_array(np.array(1, np.float32), "one"),
              numpy_helper.from_array(np.array(-1e4, np.float32), "neg")]
    graph = helper.make_graph(
        nodes, "encoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6, d]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, ["batch", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 6, d])], consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def reference(model, feeds):
    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.fixture(scope="module")
def cnn_object(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bounded")
    model = cnn()
    result = xlac.compile(model, folder / "cnn.o", bounds={"N": 4}, parallel=True,
                          report=True)
    exact = xlac.compile(model, folder / "one.o", input_shapes={"x": (1, 3, 12, 12)})
    return model, result, exact


@pytest.mark.parametrize("n", [1, 3, 4])
def test_a_bounded_cnn_runs_every_batch_up_to_its_bound(cnn_object, n):
    model, result, _ = cnn_object
    m = xlac.load(result.output)
    x = RNG.standard_normal((n, 3, 12, 12)).astype(np.float32)
    got = m(x)
    for g, want in zip(got, reference(model, {"x": x})):
        assert g.shape == want.shape
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)


def test_a_bounded_cnn_runs_on_threads(cnn_object):
    model, result, _ = cnn_object
    m = xlac.load(result.output, threads=2)
    x = RNG.standard_normal((3, 3, 12, 12)).astype(np.float32)
    for g, want in zip(m(x), reference(model, {"x": x})):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)


def test_the_arena_is_one_sample_s(cnn_object):
    _, result, exact = cnn_object
    assert result.arena_size == exact.arena_size


def test_the_report_gives_the_bound_and_the_signature_at_the_bound(cnn_object):
    _, result, _ = cnn_object
    assert result.report["bound"] == {"symbol": "N", "limit": 4}
    (x,) = result.report["signature"]["inputs"][0]["arguments"]
    assert x["dims"] == [4, 3, 12, 12]


def test_the_loader_refuses_batches_out_of_bounds(cnn_object):
    _, result, _ = cnn_object
    m = xlac.load(result.output)
    for n in (0, 5):
        with pytest.raises(XlacError, match=r"1 <= N <= 4"):
            m(np.zeros((n, 3, 12, 12), np.float32))


def test_the_header_gives_the_bound_and_the_size_argument(cnn_object):
    _, result, _ = cnn_object
    text = result.header.read_text()
    assert "#define cnn_BOUND_N 4u" in text
    assert "#define cnn_NUM_BOUNDS 1" in text
    assert "int cnn_run(size_t N, const float *x, float *probs, float *r, void *arena);" in text
    assert "int cnn_run_sized_v(const size_t *sizes," in text
    assert "int cnn_run_parallel_sized_v(const size_t *sizes," in text
    # Sizes at the bound: the buffers a caller declares hold the most samples.
    assert "#define cnn_x_COUNT 1728u" in text


C_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "cnn.h"

static float x[cnn_BOUND_N * 3 * 12 * 12], probs[cnn_BOUND_N * 5], r[cnn_BOUND_N * 8 * 144];
static _Alignas(64) unsigned char arena[cnn_ARENA_SIZE + 1];

int main(void) {
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = (float)(i % 7) - 3.0f;
    for (size_t i = 0; i < sizeof probs / sizeof probs[0]; i++) probs[i] = -1.0f;
    printf("%d %d %d\n", cnn_run(0, x, probs, r, arena), cnn_run(5, x, probs, r, arena),
           cnn_run(2, x, probs, r, arena));
    for (size_t i = 0; i < sizeof probs / sizeof probs[0]; i++) printf("%.7g\n", probs[i]);
    return 0;
}
"""


def test_a_c_program_runs_a_batch_and_gets_a_status_out_of_bounds(cnn_object, tmp_path):
    model, result, _ = cnn_object
    (tmp_path / "main.c").write_text(C_MAIN)
    app = tmp_path / "app"
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{result.header.parent}",
                    f"-I{RUNTIME_DIR}", str(tmp_path / "main.c"), str(result.output),
                    str(RUNTIME_DIR / "xlac_runtime.c"), "-lm", "-o", str(app)], check=True)
    lines = subprocess.run([str(app)], check=True, capture_output=True,
                           text=True).stdout.split("\n")
    assert lines[0] == "10 10 0"     # XLAC_ERROR_SIZE_OUT_OF_BOUNDS twice, then XLAC_OK
    probs = np.array([float(v) for v in lines[1:21]], np.float32).reshape(4, 5)
    x = ((np.arange(2 * 3 * 144) % 7) - 3).astype(np.float32).reshape(2, 3, 12, 12)
    np.testing.assert_allclose(probs[:2], reference(model, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert (probs[2:] == -1).all()   # samples past the batch are left alone


@pytest.mark.parametrize("n", [1, 2, 5])
def test_a_bounded_encoder_layer_matches_onnxruntime(tmp_path, n):
    model = encoder_layer()
    result = xlac.compile(model, tmp_path / "enc.o", bounds={"batch": 5})
    m = xlac.load(result.output)
    x = RNG.standard_normal((n, 6, 16)).astype(np.float32)
    mask = (RNG.uniform(size=(n, 6)) > 0.3).astype(np.float32)
    (got,) = m(x, mask)
    (want,) = reference(model, {"x": x, "mask": mask})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_symbol_written_in_input_shape_takes_the_bound(tmp_path):
    model = cnn(batch=None)      # a dimension without a name
    result = xlac.compile(model, tmp_path / "pinned.o", input_shapes={"x": ("B", 3, 12, 12)},
                          bounds={"B": 3})
    x = RNG.standard_normal((3, 3, 12, 12)).astype(np.float32)
    got = xlac.load(result.output)(x)
    np.testing.assert_allclose(got[0], reference(model, {"x": x})[0],
                               rtol=1e-5, atol=1e-5)


def _reduce_over_batch() -> onnx.ModelProto:
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[0], keepdims=1),
             helper.make_node("Sub", ["x", "m"], ["y"])]
    graph = helper.make_graph(
        nodes, "centered", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _divide_by_batch() -> onnx.ModelProto:
    """Samples stay apart, but the graph reads the batch size: x / N."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], end=1),
             helper.make_node("Cast", ["s"], ["sf"], to=TensorProto.FLOAT),
             helper.make_node("Div", ["x", "sf"], ["y"])]
    graph = helper.make_graph(
        nodes, "per_batch", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _columns_to_batch() -> onnx.ModelProto:
    """Samples stay apart, but each keeps as many columns as the batch has samples."""
    nodes = [helper.make_node("Shape", ["x"], ["n"], end=1),
             helper.make_node("Slice", ["x", "zero", "n", "one"], ["y"]),
             helper.make_node("ReduceSum", ["y", "one"], ["s"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "first_columns",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, ["N"])],
        [numpy_helper.from_array(np.array([0], np.int64), "zero"),
         numpy_helper.from_array(np.array([1], np.int64), "one")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _count_the_batch() -> onnx.ModelProto:
    """Samples stay apart, but a sum over ones shaped like the batch counts it: x * N."""
    nodes = [helper.make_node("Shape", ["x"], ["n"], end=1),
             helper.make_node("ConstantOfShape", ["n"], ["ones"],
                              value=numpy_helper.from_array(np.array([1], np.float32))),
             helper.make_node("ReduceSum", ["ones"], ["count"], keepdims=0),
             helper.make_node("Mul", ["x", "count"], ["y"])]
    graph = helper.make_graph(
        nodes, "times_batch", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("model, bounds, shapes, match", [
    (_reduce_over_batch(), {"N": 4}, None, r"^bounded batch: .*samples"),
    (_divide_by_batch(), {"N": 4}, None, r"^bounded batch: constant .* batch size"),
    (_columns_to_batch(), {"N": 4}, None, r"^bounded batch: slice .* at 3 samples but .* at 2"),
    (_count_the_batch(), {"N": 4}, None, r"^bounded batch: (reduce|constant) .*batch size"),
    (cnn(), {"M": 4}, None, r"input 'x' \(Nx3x12x12\) does not lead with M"),
    (cnn(), {"N": 4, "M": 2}, None, r"one --bound per model"),
    (cnn(), None, {"x": ("N", 3, 12, 12)}, r"names the dimension N of 'x'"),
    (cnn(), {"N": 4}, {"x": ("N", 3, "H", 12)}, r"names the dimension H of 'x'"),
], ids=["reduce-over-batch", "divide-by-batch", "columns-to-batch", "count-the-batch",
        "wrong-symbol", "two-bounds", "no-bound",
        "second-dynamic-dim"])
def test_refusals_are_one_line_and_leave_no_file(tmp_path, model, bounds, shapes, match):
    out = tmp_path / "m.o"
    with pytest.raises(XlacError, match=match) as e:
        xlac.compile(model, out, bounds=bounds, input_shapes=shapes)
    assert "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text, want", [
    ("x=Nx3x224x224", ("x", ("N", 3, 224, 224))),
    ("x=batch_size", ("x", ("batch_size",))),
    ("x=idxx3", ("x", ("idx", 3))),        # a name that ends in x, then a dimension
    ("x=1x3", ("x", (1, 3))),
])
def test_input_shape_takes_a_named_leading_dimension(text, want):
    from xlac.driver import parse_input_shape
    assert parse_input_shape(text) == want


def test_input_shape_takes_a_name_only_first():
    from xlac.driver import parse_input_shape
    with pytest.raises(XlacError, match="bad --input-shape 'x=3xN'"):
        parse_input_shape("x=3xN")


def test_the_command_line_compiles_a_bound_and_refuses_a_bad_one(tmp_path):
    onnx.save(cnn(), tmp_path / "cnn.onnx")
    ok = subprocess.run([sys.executable, "-m", "xlac", str(tmp_path / "cnn.onnx"), "-o",
                         str(tmp_path / "cnn.o"), "--bound", "N=2"], capture_output=True,
                        text=True)
    assert ok.returncode == 0, ok.stderr
    assert "cnn_BOUND_N 2u" in (tmp_path / "cnn.h").read_text()
    bad = subprocess.run([sys.executable, "-m", "xlac", str(tmp_path / "cnn.onnx"), "-o",
                          str(tmp_path / "bad.o"), "--bound", "N=0"], capture_output=True,
                         text=True)
    assert bad.returncode == 1
    assert bad.stderr.strip().count("\n") == 0 and "--bound 'N=0'" in bad.stderr
    assert not (tmp_path / "bad.o").exists()


def test_the_onnx_backend_compiles_a_bounded_model_once():
    import xlac.backend
    model = cnn()
    rep = xlac.backend.prepare(model, bounds={"N": 3})
    before = len(xlac.backend._objects)
    for n in (3, 1, 2):
        x = RNG.standard_normal((n, 3, 12, 12)).astype(np.float32)
        for got, want in zip(rep.run([x]), reference(model, {"x": x})):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert len(xlac.backend._objects) == before


def test_a_cross_target_object_has_the_sized_entry(tmp_path):
    result = xlac.compile(cnn(), tmp_path / "cnn.o", bounds={"N": 4},
                          target="thumbv7em-none-eabihf", cpu="cortex-m4")
    text = result.header.read_text()
    assert "int cnn_run(size_t N, const float *x" in text
    assert b"cnn_run_sized_v" in result.output.read_bytes()
