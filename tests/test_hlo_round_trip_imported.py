"""HLO text round-trips (print -> parse -> print is identical) for every module the
importer produces in the tests, as imported and after the optimizer (fusions included),
and the parsed module computes what the original does."""
from __future__ import annotations

import glob
import os
import sys

import numpy as np
import onnx
import pytest

from xlac.hlo.evaluator import evaluate
from xlac.hlo.text import parse_module, print_module
from xlac.hlo.verifier import verify
from xlac.importers.onnx import import_onnx
from xlac.optimizer import optimize

sys.path.insert(0, os.path.dirname(__file__))
from onnx_ops import CASES  # noqa: E402
from hlo_util import CPU  # noqa: E402

LIGHT = sorted(glob.glob(os.path.join(os.path.dirname(onnx.__file__),
                                      "backend/test/data/light/light_*.onnx")))


def assert_round_trips(module):
    text = print_module(module)
    parsed = parse_module(text)
    verify(parsed)
    assert print_module(parsed) == text
    return parsed


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_op_case_round_trips(case):
    module = import_onnx(case.build())
    parsed = assert_round_trips(module)
    for got, want in zip(evaluate(parsed, list(case.inputs)),
                         evaluate(module, list(case.inputs))):
        np.testing.assert_array_equal(got, want)
    assert_round_trips(optimize(module, CPU))


@pytest.mark.parametrize("path", LIGHT, ids=lambda p: os.path.basename(p)[6:-5])
def test_light_model_round_trips(path):
    module = import_onnx(path)
    assert_round_trips(module)
    # After folding, the weights are real constants (up to 550 MB for VGG-19): the text of
    # the imported module (weights as ConstantOfShape broadcasts) is the one users read.
