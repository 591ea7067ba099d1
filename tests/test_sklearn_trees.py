"""scikit-learn's tree ensembles, converted by skl2onnx, compiled by xlac, against
onnxruntime: labels equal, scores within 1e-5 (relative for regressions, whose sums of
hundreds of trees run in another order).

The forests are fitted without a depth limit where scikit-learn has none, so trees
differ in depth and leaves sit at every level: the walk must stop each tree at its leaf
while the deeper ones go on. The random forests have an odd number of trees: their
pure leaves vote 0 or 1, and an even split of the votes is a tie that onnxruntime itself
breaks by its summation order (one thread or several). The arena check holds the
lowering to the walk's size, trees x rows indices, where evaluating every node would
need nodes x rows.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from skl2onnx import to_onnx
from sklearn.datasets import make_classification, make_regression
from sklearn.ensemble import (ExtraTreesRegressor, GradientBoostingClassifier,
                              GradientBoostingRegressor, RandomForestClassifier)
from sklearn.tree import DecisionTreeRegressor

import xlac

ROWS = 64


def _classification(classes):
    x, y = make_classification(600, 12, n_informative=8, n_classes=classes, random_state=classes)
    return x.astype(np.float32), y


def _regression(targets):
    x, y = make_regression(600, 12, n_targets=targets, random_state=targets)
    return x.astype(np.float32), y


ESTIMATORS = {
    "random_forest_3class": lambda: RandomForestClassifier(21, random_state=0).fit(
        *_classification(3)),
    "random_forest_binary": lambda: RandomForestClassifier(21, random_state=0).fit(
        *_classification(2)),
    "gradient_boosting_binary": lambda: GradientBoostingClassifier(
        n_estimators=40, max_depth=4, random_state=0).fit(*_classification(2)),
    "gradient_boosting_3class": lambda: GradientBoostingClassifier(
        n_estimators=20, max_depth=3, random_state=0).fit(*_classification(3)),
    "gradient_boosting_regressor": lambda: GradientBoostingRegressor(
        n_estimators=60, max_depth=3, random_state=0).fit(*_regression(1)),
    "extra_trees_two_targets": lambda: ExtraTreesRegressor(10, random_state=0).fit(
        *_regression(2)),
    "decision_tree": lambda: DecisionTreeRegressor(random_state=0).fit(*_regression(1)),
}


def _model(name):
    estimator = ESTIMATORS[name]()
    x = (_classification(3) if hasattr(estimator, "classes_") else _regression(1))[0][:ROWS]
    options = {"zipmap": False} if hasattr(estimator, "classes_") else None
    model = to_onnx(estimator, x[:1], options=options, target_opset={"": 17, "ai.onnx.ml": 3})
    nodes = sum(len(a.ints) for n in model.graph.node for a in n.attribute
                if a.name == "nodes_nodeids")
    return model, x, nodes


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_forest_matches_onnxruntime(name, tmp_path):
    model, x, nodes = _model(name)
    result = xlac.compile(model, tmp_path / f"{name}.o", name=name,
                          input_shapes={"X": x.shape})
    got = xlac.load(result.output)(x)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    want = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, {"X": x})
    got = got if isinstance(got, (list, tuple)) else [got]
    for g, w in zip(got, want):
        if w.dtype.kind in "iu":
            np.testing.assert_array_equal(g.reshape(w.shape), w)
        else:
            np.testing.assert_allclose(g.reshape(w.shape), w, rtol=1e-5,
                                       atol=1e-5 * max(1.0, float(np.abs(w).max())))
    # a walk holds (trees, rows) node indices; every node's decision would be
    # (rows, nodes) and bigger than this on each of these forests
    assert result.arena_size < ROWS * nodes // 2, (result.arena_size, nodes)
