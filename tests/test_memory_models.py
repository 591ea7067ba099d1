"""The memory benchmark's models (benchmarks/memory_models.py) through the whole product
path, and its TensorFlow Lite Micro baseline (benchmarks/memory.py: greedy_by_size).

Each model is compiled once to an object (a module-scoped fixture shared by the two
tests per model), run through xlac.load on a seeded random input and compared with
onnxruntime on its logits (the input of a final Softmax is made an extra graph
output): rtol 1e-4, atol 1e-4 x the largest |logit| (the logits of the ImageNet
models reach ~20, and their 4608-term sums round differently in xlac's kernels and
onnxruntime's). Its arena must also be no larger than the ONNX-order
lower bound: xlac fuses and reorders, so it must not need more than the file's order.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import xlac
from xlac.importers.onnx.liveness import TensorLife, onnx_order_lower_bound

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from memory import greedy_by_size, greedy_offsets  # noqa: E402
from memory_models import MODELS  # noqa: E402

RTOL = 1e-4
ATOL_OF_MAX = 1e-4


def expose_logits(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the input of a final Softmax as a second graph output."""
    last = model.graph.node[-1]
    if last.op_type == "Softmax":
        model = onnx.shape_inference.infer_shapes(model)
        model.graph.output.append(
            next(v for v in model.graph.value_info if v.name == last.input[0]))
    return model


@dataclass(frozen=True)
class Compiled:
    model: onnx.ModelProto      # with the logits exposed
    report: dict
    got: list[np.ndarray]
    want: list[np.ndarray]


@pytest.fixture(scope="module", params=list(MODELS))
def compiled(request, tmp_path_factory) -> Compiled:
    """One compile and run per model, shared by the numeric and the memory test."""
    name = request.param
    model = expose_logits(MODELS[name]())
    result = xlac.compile(model, tmp_path_factory.mktemp(name) / f"{name}.o", report=True)
    (spec,) = model.graph.input
    dims = [d.dim_value for d in spec.type.tensor_type.shape.dim]
    x = np.random.default_rng(7).standard_normal(dims).astype(np.float32)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    want = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, {spec.name: x})
    return Compiled(model, result.report, xlac.load(result.output)(x), want)


def test_model_matches_onnxruntime(compiled):
    assert len(compiled.got) == len(compiled.want)
    for g, w in zip(compiled.got, compiled.want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL_OF_MAX * np.abs(w).max())


def test_arena_is_within_the_onnx_order_bound(compiled):
    arena = compiled.report["arena_bytes"]
    assert 0 < arena <= onnx_order_lower_bound(compiled.model)


def test_models_are_valid_onnx_with_the_reference_shapes():
    shapes = {"ds_cnn": ([1, 1, 49, 10], [1, 12]), "resnet8": ([1, 3, 32, 32], [1, 10]),
              "mobilenet_v1_025_vww": ([1, 3, 96, 96], [1, 2]),
              "fc_autoencoder": ([1, 640], [1, 640]),
              "mobilenet_v2": ([1, 3, 224, 224], [1, 1000]),
              "resnet18": ([1, 3, 224, 224], [1, 1000]),
              "unet_small": ([1, 3, 64, 64], [1, 2, 64, 64])}
    assert list(MODELS) == list(shapes)
    for name, build in MODELS.items():
        model = build()
        onnx.checker.check_model(model, full_check=True)
        assert model.opset_import[0].version == 17
        (x,), (y,) = model.graph.input, model.graph.output
        got = ([d.dim_value for d in x.type.tensor_type.shape.dim],
               [d.dim_value for d in y.type.tensor_type.shape.dim])
        assert got == shapes[name], name


def _lives(*specs) -> list[TensorLife]:
    return [TensorLife(f"t{i}", size, first, last) for i, (size, first, last) in enumerate(specs)]


def test_greedy_places_like_tflm_medium_case():
    # TFLM's greedy_memory_planner_test.cc, TestGreedyMedium: (size, first, last).
    lives = _lives((10, 0, 1), (20, 1, 2), (30, 2, 3), (40, 3, 4), (50, 0, 1))
    assert greedy_offsets(lives, alignment=1) == [50, 70, 40, 0, 0]
    assert greedy_by_size(lives, alignment=1) == 90


def test_greedy_overlap_case_and_reuse_across_time():
    # TFLM's TestOverlapCase: the 20-byte buffer overlaps both others in time.
    assert greedy_by_size(_lives((100, 0, 1), (50, 2, 3), (20, 1, 2)), alignment=1) == 120
    # TestGreedyBasics: disjoint lifetimes share offset 0.
    assert greedy_offsets(_lives((10, 0, 1), (20, 2, 3)), alignment=1) == [0, 0]


def test_greedy_aligns_sizes_and_fills_the_first_gap_that_fits():
    # Sizes round up to 112, 64 and 48; the 48-byte buffer is live beside both others
    # (step 2), so it goes above them.
    lives = _lives((100, 0, 2), (60, 1, 3), (40, 2, 2))
    assert greedy_offsets(lives, alignment=16) == [0, 112, 176]
    assert greedy_by_size(lives, alignment=16) == 224
    # A buffer overlapping only the upper one drops into the gap below it.
    lives = _lives((100, 0, 1), (60, 1, 3), (40, 2, 3))
    assert greedy_offsets(lives, alignment=16) == [0, 112, 0]
    assert greedy_by_size([], alignment=16) == 0


def test_greedy_breaks_size_ties_by_first_use():
    lives = _lives((32, 5, 6), (32, 0, 6))
    assert greedy_offsets(lives, alignment=16) == [32, 0]
