"""ONNX -> xlac.compile -> object -> xlac.load -> outputs, against onnxruntime.

Every op case of ``onnx_ops.CASES`` goes through the whole product path (the same
pipeline as the ``xlac`` command, the cffi loader, the C runtime), at the case's
tolerance. A few models are then run on arenas full of NaN and garbage: the
compiled code must write every arena byte it reads.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import xlac
from onnx_ops import CASES

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "lenet.onnx"


def run_onnxruntime(model: onnx.ModelProto, inputs) -> list[np.ndarray]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: a for i, a in zip(sess.get_inputs(), inputs)})


def compile_and_load(model, folder: Path, name: str) -> xlac.Model:
    result = xlac.compile(model, folder / f"{name}.o", name=name)
    return xlac.load(result.output)


def c_name(case_name: str) -> str:
    return "m_" + re.sub(r"\W", "_", case_name)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_op_case_matches_onnxruntime(case, tmp_path):
    model = case.build()
    compiled = compile_and_load(model, tmp_path, c_name(case.name))
    got = compiled(*case.inputs)
    want = run_onnxruntime(case.oracle(model), case.inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=case.rtol, atol=case.atol)


# -- arena robustness -------------------------------------------------------------------

_BY_NAME = {c.name: c for c in CASES}
# Models whose arena holds several live intermediates: LRN (a pool over squares),
# reductions (softmax, log-softmax), a batched matmul, a scatter written in place over
# its operand, the bundled LeNet (convolutions), and an LSTM (a loop whose state lives
# in the caller's outputs and whose body's buffers live in the arena).
ARENA_MODELS = ["LogSoftmax_v13_axis1", "LRN_size3",
                "Softmax_v13_axis1", "MatMul_broadcast_batch",
                "ScatterElements_in_arena_feeding_matmul", "lenet",
                "LSTM_bidirectional_lengths_all_outputs"]


def _lenet_input() -> np.ndarray:
    return np.random.default_rng(7).random((1, 1, 28, 28), dtype=np.float32)


@pytest.fixture(scope="module", params=ARENA_MODELS)
def arena_model(request, tmp_path_factory):
    name = request.param
    folder = tmp_path_factory.mktemp(f"arena_{name}")
    if name == "lenet":
        model, inputs = onnx.load(EXAMPLE), (_lenet_input(),)
    else:
        case = _BY_NAME[name]
        model, inputs = case.build(), case.inputs
    compiled = compile_and_load(model, folder, c_name(name))
    assert compiled.arena_size > 0, "pick a model that uses its arena"
    return compiled, inputs


def _run_on(compiled: xlac.Model, inputs, arena: np.ndarray) -> list[np.ndarray]:
    outputs = [np.empty(t.shape, t.dtype) for t in compiled.outputs]
    compiled.run(inputs, outputs, arena)
    return outputs


def _assert_same(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def test_arena_contents_do_not_matter(arena_model):
    compiled, inputs = arena_model
    clean = _run_on(compiled, inputs, compiled.new_arena())
    arena = compiled.new_arena()
    arena.view(np.uint32)[:] = 0x7FC00000                     # every f32 slot a quiet NaN
    _assert_same(_run_on(compiled, inputs, arena), clean)
    arena[:] = np.random.default_rng(3).integers(0, 256, arena.size, dtype=np.uint8)
    _assert_same(_run_on(compiled, inputs, arena), clean)
    arena[:] = 0xFF                                           # NaN as f32, -1 as integers
    _assert_same(_run_on(compiled, inputs, arena), clean)


def test_two_runs_on_one_arena_agree(arena_model):
    compiled, inputs = arena_model
    arena = compiled.new_arena()
    first = _run_on(compiled, inputs, arena)
    _assert_same(_run_on(compiled, inputs, arena), first)


def test_outputs_are_fully_written(arena_model):
    """Output buffers that start as NaN end up identical to ones that start as zeros."""
    compiled, inputs = arena_model
    arena = compiled.new_arena()
    zeros = [np.zeros(t.shape, t.dtype) for t in compiled.outputs]
    compiled.run(inputs, zeros, arena)
    poisoned = [np.empty(t.shape, t.dtype) for t in compiled.outputs]
    for p in poisoned:
        p.reshape(-1).view(np.uint8)[:] = 0xFF
    compiled.run(inputs, poisoned, arena)
    _assert_same(poisoned, zeros)
