"""The habits of ONNX files written by other exporters, each reproduced in a small model
built here and compiled as onnxruntime reads it (issue 13).

paddle2onnx declares dynamic dims as -1; old exporters list initializers as inputs
(IR < 4) and write training-era BatchNormalization and Dropout; tf2onnx and the
TorchScript exporter compute shapes with Shape -> Gather -> Concat -> Reshape and
Range; converters leave value_info that their own rewrites made stale; big models keep
their weights in external files; exporters name inputs and outputs after internal
tensors ('onnx::Flatten_0', '13', 'save_infer_model/scale_0.tmp_1') and list outputs
in any order, an input or a weight among them. The real files are in
tests/test_real_models.py.
"""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import xlac
from xlac.hlo import XlacError
from xlac.importers.onnx import OutOfScope, import_onnx
from xlac.importers.onnx.model_file import SKELETON_ELEMENTS, skeleton
from xlac.main import main
from xlac.report import format_report
from hlo_util import CPU

RNG = np.random.default_rng(13)


def f32(*dims):
    return RNG.standard_normal(dims).astype(np.float32)


def tensor(name, dims, elem=TensorProto.FLOAT):
    """A value info whose dims may be ints (negative ones too), names or None ('?')."""
    vi = helper.make_tensor_value_info(name, elem, None)
    shape = vi.type.tensor_type.shape
    shape.SetInParent()
    for d in dims:
        dim = shape.dim.add()
        if isinstance(d, int):
            dim.dim_value = d
        elif d is not None:
            dim.dim_param = d
    return vi


def model(nodes, inputs, outputs, inits=(), opset=13, ir=8) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "quirks", inputs, outputs,
                          [numpy_helper.from_array(v, n) for n, v in dict(inits).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir
    return m


def onnxruntime_run(m: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def compile_run(m, tmp_path, feeds: dict, **options) -> tuple[xlac.Model, list[np.ndarray]]:
    xlac.compile(m, tmp_path / "m.o", **options)
    loaded = xlac.load(tmp_path / "m.o")
    return loaded, loaded(*(feeds[t.name] for t in loaded.inputs))


def assert_matches_onnxruntime(m, tmp_path, feeds, rtol=1e-5, atol=1e-6, **options):
    loaded, got = compile_run(m, tmp_path, feeds, **options)
    want = onnxruntime_run(m, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return loaded


# -- dynamic dimensions ------------------------------------------------------------------

def paddle_classifier(dims=(-1, 3, None, None)) -> onnx.ModelProto:
    """What paddle2onnx writes for PaddleOCR's classifier: input [-1, 3, ?, ?]."""
    return model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                  helper.make_node("GlobalAveragePool", ["c"], ["p"]),
                  helper.make_node("Flatten", ["p"], ["y"])],
                 [tensor("x", dims)], [tensor("y", [-1, 4])], {"w": f32(4, 3, 3, 3)}, opset=11)


def test_negative_dim_value_is_dynamic_and_pinnable(tmp_path):
    x = f32(1, 3, 8, 12)
    loaded = assert_matches_onnxruntime(paddle_classifier(), tmp_path, {"x": x},
                                        input_shapes={"x": (1, 3, 8, 12)})
    assert loaded.inputs[0].shape == (1, 3, 8, 12)


def test_issue_command_line_compiles_the_paddle_classifier(tmp_path, capsys):
    # The command of issue 13, which failed with "conflicts with the static shape -1x3x?x?".
    onnx.save(paddle_classifier(), tmp_path / "cls.onnx")
    status = main([str(tmp_path / "cls.onnx"), "-o", str(tmp_path / "cls.o"),
                   "--input-shape", "x=1x3x48x192"])
    assert status == 0, capsys.readouterr().err
    assert (tmp_path / "cls.o").is_file()


def test_unpinned_negative_and_unnamed_dims_are_named_in_the_error():
    with pytest.raises(XlacError) as e:
        import_onnx(paddle_classifier())
    assert str(e.value) == ("input 'x' has dynamic dimensions '-1', '?', '?' (shape -1x3x?x?); "
                            'pin it with input_shapes={"x": (1, 3, 1, 1)}')
    assert e.value.cli.endswith("pin it with --input-shape x=1x3x1x1")


def test_pin_still_conflicts_with_a_positive_static_dim():
    with pytest.raises(XlacError, match=r"conflicts with the static shape -1x3x\?x\?"):
        import_onnx(paddle_classifier(), input_shapes={"x": (1, 4, 8, 8)})


def test_zero_dim_value_is_an_empty_dim_not_a_dynamic_one(tmp_path):
    # onnxruntime requires an input of size 0 where the model says 0.
    m = model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2, 0, 3])],
              [tensor("y", [2, 0, 3])])
    assert_matches_onnxruntime(m, tmp_path, {"x": np.zeros((2, 0, 3), np.float32)})
    with pytest.raises(XlacError, match="conflicts with the static shape 2x0x3"):
        import_onnx(m, input_shapes={"x": (2, 1, 3)})


# -- initializers listed as graph inputs (IR version < 4) ---------------------------------

def ir3_model(ir=3) -> onnx.ModelProto:
    """Before IR 4 every initializer is a graph input too; onnxruntime reads them as
    weights then, and from IR 4 on as inputs the caller may feed."""
    return model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                 [tensor("x", [2, 3]), tensor("w", [3, 4])], [tensor("y", [2, 4])],
                 {"w": f32(3, 4)}, opset=7, ir=ir)


def test_initializers_listed_as_inputs_are_weights(tmp_path):
    x = f32(2, 3)
    loaded = assert_matches_onnxruntime(ir3_model(), tmp_path, {"x": x})
    assert [t.name for t in loaded.inputs] == ["x"]


def test_initializer_listed_as_input_takes_a_pinned_value(tmp_path):
    x, w = f32(2, 3), f32(3, 4)
    _, (y,) = compile_run(ir3_model(), tmp_path, {"x": x}, const_inputs={"w": w})
    np.testing.assert_allclose(y, x @ w, rtol=1e-5)


def test_initializer_listed_as_input_becomes_an_input_when_its_shape_is_pinned(tmp_path):
    # onnxruntime lets the caller feed such an initializer (IR >= 4); pinning its shape
    # says the caller will.
    x, w = f32(2, 3), f32(3, 4)
    loaded = assert_matches_onnxruntime(ir3_model(ir=7), tmp_path, {"x": x, "w": w},
                                        input_shapes={"w": (3, 4)})
    assert [t.name for t in loaded.inputs] == ["x", "w"]


# -- weights in other forms ------------------------------------------------------------

def test_sparse_initializer(tmp_path):
    dense = np.zeros((3, 4), np.float32)
    dense[0, 1], dense[2, 3] = 1.5, -2.0
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.5, -2.0], np.float32), "w"),
        numpy_helper.from_array(np.array([1, 11], np.int64), "w_indices"), [3, 4])
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [tensor("x", [3, 4])],
              [tensor("y", [3, 4])])
    m.graph.sparse_initializer.append(sparse)
    x = f32(3, 4)
    assert_matches_onnxruntime(m, tmp_path, {"x": x})


def big_weight_model(n=256) -> onnx.ModelProto:
    return model([helper.make_node("MatMul", ["x", "w"], ["h"]),
                  helper.make_node("Relu", ["h"], ["y"])],
                 [tensor("x", [1, n])], [tensor("y", [1, n])], {"w": f32(n, n)})


def test_external_data_is_read_from_the_model_folder(tmp_path):
    m = big_weight_model()
    onnx.save(m, tmp_path / "ext.onnx", save_as_external_data=True, location="ext.weights",
              size_threshold=0)
    assert (tmp_path / "ext.weights").stat().st_size >= 256 * 256 * 4
    x = f32(1, 256)
    xlac.compile(tmp_path / "ext.onnx", tmp_path / "ext.o")
    (y,) = xlac.load(tmp_path / "ext.o")(x)
    want = onnxruntime_run(onnx.load(tmp_path / "ext.onnx"), {"x": x})[0]
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


def test_external_data_without_the_path_is_one_clear_error(tmp_path):
    m = big_weight_model()
    onnx.save(m, tmp_path / "ext.onnx", save_as_external_data=True, location="ext.weights",
              size_threshold=0)
    with pytest.raises(XlacError, match="tensor 'w' keeps its data in the external file "
                                        "'ext.weights', which xlac reads only when given the "
                                        "model's path"):
        import_onnx(onnx.load(tmp_path / "ext.onnx", load_external_data=False))


def test_checker_and_inference_see_no_large_weights():
    # What lets a model over protobuf's 2 GB limit through ONNX's checker and shape
    # inference: they get a skeleton whose large weights are typed graph inputs.
    m = big_weight_model(512)
    m.graph.node.insert(0, helper.make_node("Constant", [], ["big"],
                                            value=numpy_helper.from_array(f32(4, 5000))))
    m.graph.node[-1].input.append("big")  # read nowhere else; the skeleton keeps its type
    del m.graph.node[-1].input[-1]
    skel = skeleton(m)
    assert m.ByteSize() > 1_000_000 and skel.ByteSize() < 2_000
    assert {i.name for i in skel.graph.input} == {"x", "w", "big"}
    assert not skel.graph.initializer
    assert 512 * 512 > SKELETON_ELEMENTS
    onnx.checker.check_model(skel)


# -- training-era ops and pass-through chains -----------------------------------------

def test_batch_norm_and_dropout_with_training_attributes_and_outputs(tmp_path):
    # Opset 7: BatchNormalization with spatial and momentum and its four training
    # outputs (unread: still the spec's training mode, which onnxruntime runs, batch
    # statistics and all), Dropout with its mask, between Identity chains.
    c = 4
    nodes = [helper.make_node("Identity", ["x"], ["x1"]),
             helper.make_node("BatchNormalization", ["x1", "s", "b", "m", "v"],
                              ["bn", "mean_out", "var_out", "saved_mean", "saved_var"],
                              epsilon=1e-3, momentum=0.9, spatial=1),
             helper.make_node("Dropout", ["bn"], ["d", "mask"], ratio=0.3),
             helper.make_node("Identity", ["d"], ["d1"]),
             helper.make_node("Dropout", ["d1"], ["d2"]),
             helper.make_node("Identity", ["d2"], ["y"])]
    inits = {"s": f32(c), "b": f32(c), "m": f32(c), "v": np.abs(f32(c)) + 0.5}
    m = model(nodes, [tensor("x", [2, c, 3, 3])],
              [tensor("y", [2, c, 3, 3]), tensor("mask", [2, c, 3, 3])],
              inits, opset=7, ir=3)
    m.graph.input.extend(tensor(n, [c]) for n in inits)     # IR 3: weights are inputs too
    x = f32(2, c, 3, 3)
    loaded, (y, mask) = compile_run(m, tmp_path, {"x": x})
    np.testing.assert_allclose(y, onnxruntime_run(m, {"x": x})[0], rtol=1e-5, atol=1e-5)
    # The mask keeps every element, as the ONNX reference and onnxruntime from opset 12 say
    # (onnxruntime's opset 7-11 kernel writes zeros there).
    assert mask.dtype == np.float32 and (mask == 1).all()
    assert [t.name for t in loaded.outputs] == ["y", "mask"]


@pytest.mark.parametrize("opset, outputs, attrs", [
    (9, ["y"], {}),                                       # inference
    (9, ["y", "rm", "rv", "sm", "sv"], {}),               # training: five outputs
    (14, ["y", "rm", "rv"], {"training_mode": 1}),
    (15, ["y"], {"training_mode": 0})])
def test_batch_norm_modes_match_onnxruntime(tmp_path, opset, outputs, attrs):
    c = 3
    inits = {"s": f32(c), "b": f32(c), "m": f32(c), "v": np.abs(f32(c)) + 0.5}
    m = model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], outputs,
                                epsilon=1e-3, momentum=0.8, **attrs)],
              [tensor("x", [2, c, 4, 5])],
              [tensor(o, [2, c, 4, 5] if o == "y" else [c]) for o in outputs], inits,
              opset=opset)
    assert_matches_onnxruntime(m, tmp_path, {"x": f32(2, c, 4, 5)}, rtol=1e-4, atol=1e-5)


# -- shape computations ------------------------------------------------------------------

def exporter_flatten(batch="batch") -> onnx.ModelProto:
    """The TorchScript exporter's x.view(x.size(0), -1) and a ConstantOfShape bias of
    the same shape, then a YOLO-style grid from Range over the last dim."""
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["flat"]),
             helper.make_node("Shape", ["flat"], ["fs"]),
             helper.make_node("ConstantOfShape", ["fs"], ["ones"],
                              value=numpy_helper.from_array(np.array([1.0], np.float32))),
             helper.make_node("Add", ["flat", "ones"], ["biased"]),
             helper.make_node("Gather", ["fs", "one"], ["len"], axis=0),
             helper.make_node("Range", ["zero", "len", "one"], ["grid"]),
             helper.make_node("Cast", ["grid"], ["gridf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["biased", "gridf"], ["y"])]
    return model(nodes, [tensor("x", [batch, 3, 4])], [tensor("y", [batch, 12])],
                 {"zero": i64(0).reshape(()), "one": i64(1).reshape(()), "axes": i64(0),
                  "minus1": i64(-1)})


def test_shape_computations_fold_once_the_input_is_pinned(tmp_path):
    m = exporter_flatten()
    assert_matches_onnxruntime(m, tmp_path, {"x": f32(5, 3, 4)}, input_shapes={"x": (5, 3, 4)})
    module = import_onnx(m, input_shapes={"x": (5, 3, 4)})
    from xlac.optimizer import optimize
    optimize(module, CPU)
    ops = {i.opcode.text for i in module.entry.instructions}
    # What is left is the arithmetic on x: every shape op and the grid folded away.
    assert ops <= {"parameter", "constant", "reshape", "add", "multiply", "fusion",
                   "broadcast"}, ops


def test_data_dependent_shape_names_the_node_and_the_tensor():
    # A Reshape whose target shape is computed from the image's values: no pinning helps.
    nodes = [helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0),
             helper.make_node("Cast", ["mx"], ["n"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["n", "one"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"], name="to_rows")]
    m = model(nodes, [tensor("x", [4, 8])], [tensor("y", [None, None])],
              {"one": np.array([1], np.int64), "minus1": np.array([-1], np.int64)})
    with pytest.raises(OutOfScope) as e:
        import_onnx(m)
    assert str(e.value) == ("Reshape node 'to_rows': the shape of its output 'y' depends on "
                            "the data of model input 'x' (through its input 'shape', the "
                            "shape), and xlac compiles only shapes known at compile time")


def test_small_configuration_input_is_still_pinnable():
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")]
    m = model(nodes, [tensor("x", [4, 8]), tensor("shape", [2], TensorProto.INT64)],
              [tensor("y", [None, None])])
    with pytest.raises(XlacError, match=r"pin it with const_inputs=\{\"shape\": ARRAY\}"):
        import_onnx(m)


# -- declared shapes that disagree with inference -----------------------------------------

def test_stale_value_info_is_overruled_by_inference(tmp_path):
    m = model([helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
               helper.make_node("Relu", ["t"], ["y"])],
              [tensor("x", [2, 5])], [tensor("y", [2, 5])])          # really 5x2
    m.graph.value_info.append(tensor("t", [7, -1]))
    assert_matches_onnxruntime(m, tmp_path, {"x": f32(2, 5)})
    result = xlac.compile(m, tmp_path / "r.o", report=True)
    notes = result.report["notes"]
    assert any("tensor 't' as 7x-1, but shape inference gives 5x2" in n for n in notes)
    assert any("tensor 'y' as 2x5, but shape inference gives 5x2" in n for n in notes)
    assert "  note                the model declares tensor 't' as 7x-1" in format_report(
        result.report)


# -- inputs and outputs as exporters name and order them -----------------------------------

def renamed_io_model() -> onnx.ModelProto:
    """Outputs out of node order, named after internal tensors, with a graph input, a
    weight and one tensor twice among them."""
    nodes = [helper.make_node("Relu", ["onnx::Flatten_0"], ["13"]),
             helper.make_node("Add", ["13", "w"], ["save_infer_model/scale_0.tmp_1"]),
             helper.make_node("Mul", ["13", "w"], ['{"1": "x/*y*/"}'])]
    outs = ['{"1": "x/*y*/"}', "save_infer_model/scale_0.tmp_1", "13", "onnx::Flatten_0",
            "w", "13"]
    return model(nodes, [tensor("onnx::Flatten_0", [2, 3])],
                 [tensor(n, [2, 3]) for n in outs], {"w": f32(2, 3)})


def test_renamed_and_reordered_outputs_keep_graph_order(tmp_path):
    loaded = assert_matches_onnxruntime(renamed_io_model(), tmp_path,
                                        {"onnx::Flatten_0": f32(2, 3)})
    assert [t.name for t in loaded.outputs] == [o.name for o in renamed_io_model().graph.output]


def test_header_of_renamed_outputs_compiles_strictly(tmp_path):
    cc = shutil.which("cc")
    assert cc, "the suite needs a C compiler"
    xlac.compile(renamed_io_model(), tmp_path / "io.o")
    (tmp_path / "use.c").write_text('#include "io.h"\nint main(void) { return 0; }\n')
    runtime = subprocess.run(["xlac", "--runtime-dir"], capture_output=True, text=True,
                             check=True).stdout.strip()
    subprocess.run([cc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-c",
                    "-I", str(tmp_path), "-I", runtime, str(tmp_path / "use.c"),
                    "-o", str(tmp_path / "use.o")], check=True)


def test_unsupported_ops_inside_bodies_are_listed_too():
    # One message for all a model lacks, If/Loop/Scan bodies included (Silero VAD keeps
    # its LSTMs inside If branches).
    then = helper.make_graph([helper.make_node("Foo", ["x"], ["t"], name="foo",
                                               domain="com.example")],
                             "then", [], [tensor("t", [2])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [tensor("e", [2])])
    m = model([helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then,
                                else_branch=other)],
              [tensor("c", [], TensorProto.BOOL), tensor("x", [2])], [tensor("y", [2])])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(XlacError, match=r"^unsupported ONNX ops: .*com\.example\.Foo "
                                        r"\(node 'foo'\)"):
        import_onnx(m)
