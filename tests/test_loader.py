"""xlac.load: the cffi loader, against onnxruntime, with its checks, threads and arenas."""
from __future__ import annotations

import threading

import llvmlite.binding as llvm
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import xlac
from xlac import XlacError
from xlac.loader import HeaderFacts, check_runs_here, read_header

RNG = np.random.default_rng(7)


def mlp_model() -> onnx.ModelProto:
    """Two inputs, two outputs, and intermediates big enough to need an arena."""
    w1 = numpy_helper.from_array(RNG.standard_normal((16, 32)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(RNG.standard_normal((32, 8)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["logits"]),
        helper.make_node("Add", ["logits", "bias"], ["shifted"]),
        helper.make_node("Softmax", ["shifted"], ["probs"], axis=-1),
        helper.make_node("ReduceSum", ["r"], ["total"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16]),
         helper.make_tensor_value_info("bias", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [4, 8]),
         helper.make_tensor_value_info("total", TensorProto.FLOAT, [])],
        [w1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The MLP compiled once, loaded with a private library cache."""
    folder = tmp_path_factory.mktemp("loader")
    model = mlp_model()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XLAC_CACHE_DIR", str(folder / "cache"))
        result = xlac.compile(model, folder / "mlp.o")
        m = xlac.load(folder / "mlp.o")
    return model, result, m


def inputs() -> list[np.ndarray]:
    return [RNG.standard_normal((4, 16)).astype(np.float32),
            RNG.standard_normal(8).astype(np.float32)]


def reference(model, x, bias):
    return ort.InferenceSession(model.SerializeToString()).run(None, {"x": x, "bias": bias})


def test_outputs_match_onnxruntime(built):
    model, _, m = built
    x, bias = inputs()
    probs, total = m(x, bias)
    want_probs, want_total = reference(model, x, bias)
    np.testing.assert_allclose(probs, want_probs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(total, want_total, rtol=1e-5)
    assert probs.dtype == np.float32 and total.shape == ()


def test_records_come_from_model_info(built):
    _, result, m = built
    assert m.name == "mlp" and m.info.name == "mlp"
    assert [(t.name, t.dtype, t.shape) for t in m.inputs] == [
        ("x", np.float32, (4, 16)), ("bias", np.float32, (8,))]
    assert [(t.name, t.shape, t.size_bytes) for t in m.outputs] == [
        ("probs", (4, 8), 128), ("total", (), 4)]
    assert m.arena_size == result.arena_size > 0
    assert f"#define mlp_ARENA_SIZE {m.arena_size}u" in result.header.read_text()
    assert m.info.arena_align == 64


@pytest.mark.parametrize("args, message", [
    (lambda x, b: (x.astype(np.float64), b), "input 'x' must have dtype float32, got float64"),
    (lambda x, b: (x[:2], b), "input 'x' must have shape (4, 16), got (2, 16)"),
    (lambda x, b: (x,), "mlp takes 2 input(s) (x, bias), got 1"),
])
def test_bad_inputs_raise_clear_errors(built, args, message):
    _, _, m = built
    with pytest.raises(XlacError, match=message.replace("(", r"\(").replace(")", r"\)")):
        m(*args(*inputs()))


def test_lists_and_strided_arrays_are_accepted(built):
    model, _, m = built
    x, bias = inputs()
    wide = np.zeros((4, 32), np.float32)
    wide[:, ::2] = x                              # a non-contiguous view of x
    probs, _ = m(wide[:, ::2], bias.tolist())
    np.testing.assert_allclose(probs, reference(model, x, bias)[0], rtol=1e-5, atol=1e-6)


def test_two_threads_with_two_arenas_agree_with_one(built):
    _, _, m = built
    cases = [inputs() for _ in range(8)]
    want = [m(*c) for c in cases]
    got: dict[int, list] = {}

    def worker(k: int) -> None:
        got[k] = [m(*c) for _ in range(20) for c in cases][-len(cases):]

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(2):
        for g, w in zip(got[k], want):
            for a, b in zip(g, w):
                np.testing.assert_array_equal(a, b)


def test_run_with_a_nan_filled_arena_gives_the_same_outputs(built):
    _, _, m = built
    x, bias = inputs()
    want = m(x, bias)
    arena = m.new_arena()
    assert arena.ctypes.data % m.info.arena_align == 0 and arena.nbytes == m.arena_size
    arena.view(np.float32)[:] = np.nan
    outputs = [np.full(t.shape, np.nan, t.dtype) for t in m.outputs]
    m.run([x, bias], outputs, arena)
    for got, w in zip(outputs, want):
        np.testing.assert_array_equal(got, w)


def test_run_checks_the_arena_and_outputs(built):
    _, _, m = built
    x, bias = inputs()
    outputs = [np.empty(t.shape, t.dtype) for t in m.outputs]
    arena = m.new_arena()
    with pytest.raises(XlacError, match="needs"):
        m.run([x, bias], outputs, arena[:-64])
    raw = np.zeros(m.arena_size + 128, np.uint8)
    misaligned = raw[(-raw.ctypes.data) % 64 + 1:][:m.arena_size]
    with pytest.raises(XlacError, match="aligned to 64 bytes"):
        m.run([x, bias], outputs, misaligned)
    with pytest.raises(XlacError, match="output 'total' must be a float32"):
        m.run([x, bias], [outputs[0], np.empty(1, np.float32)], arena)


def test_second_load_reuses_the_cached_library(built, tmp_path, monkeypatch):
    _, result, m = built
    monkeypatch.setenv("XLAC_CACHE_DIR", str(m.library_path.parent))
    inode = m.library_path.stat().st_ino     # a new link would rename a new file into place
    again = xlac.load(result.output)
    assert again.library_path == m.library_path
    assert m.library_path.stat().st_ino == inode


def test_object_for_another_architecture_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("XLAC_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "arm.o"
    xlac.compile(mlp_model(), out, target="aarch64-unknown-linux-gnu")
    with pytest.raises(XlacError, match="built for aarch64-unknown-linux-gnu, which cannot run"):
        xlac.load(out)
    assert not (tmp_path / "cache").exists()      # refused before linking


def test_object_needing_missing_cpu_features_is_refused(tmp_path):
    facts = HeaderFacts("m", None, None)
    check_runs_here(facts, tmp_path / "m.o")      # nothing known: nothing to refuse
    facts = HeaderFacts("m", llvm.get_process_triple(), ("+sse2", "+no-such-feature"))
    with pytest.raises(XlacError, match=r"lacks \(\+no-such-feature\)"):
        check_runs_here(facts, tmp_path / "m.o")


def test_header_facts_are_read_from_the_header(built):
    _, result, _ = built
    facts = read_header(result.header)
    assert facts.name == "mlp"
    assert facts.triple and facts.features and all(f[0] in "+-" for f in facts.features)


def test_missing_object_or_header_is_a_clear_error(tmp_path):
    with pytest.raises(XlacError, match="no compiled model at"):
        xlac.load(tmp_path / "none.o")
    (tmp_path / "lonely.o").write_bytes(b"\x7fELF")
    with pytest.raises(XlacError, match="cannot read the model header"):
        xlac.load(tmp_path / "lonely.o")


def test_a_model_without_arena_runs_on_new_arena_and_bound_calls(tmp_path):
    g = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    xlac.compile(helper.make_model(g), tmp_path / "neg.o")
    m = xlac.load(tmp_path / "neg.o")
    assert m.arena_size == 0
    x, y = np.arange(3, dtype=np.float32), np.empty(3, np.float32)
    m.run([x], [y], m.new_arena())      # an empty arena's address need not be aligned
    np.testing.assert_array_equal(y, -x)
    y[:] = 0
    call = m.bind([x], [y], m.new_arena())
    y[:] = 0
    call()
    np.testing.assert_array_equal(y, -x)
