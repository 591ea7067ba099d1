"""scikit-learn's SVC(probability=True), converted by skl2onnx, compiled by xlac, against
onnxruntime: labels equal, probabilities within 1e-6.

skl2onnx writes an SVMClassifier with prob_a/prob_b: onnxruntime turns the one-vs-one
decisions into pairwise probabilities (Platt) and couples them into class probabilities
with an iteration that stops on convergence. The label stays the most voted class, which
is not always the most probable one. Skipped without scikit-learn and skl2onnx (test
extras).
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import xlac

pytest.importorskip("sklearn")
pytest.importorskip("skl2onnx")
from skl2onnx import to_onnx  # noqa: E402
from sklearn.datasets import make_classification  # noqa: E402
from sklearn.svm import SVC  # noqa: E402

# scikit-learn 1.9 deprecates SVC(probability=True) (removed in 1.11: the test extras pin
# below it) and warns on every fit
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

ROWS = 64
CLASSES = (2, 3, 5)
KERNELS = ("linear", "rbf", "poly", "sigmoid")


def _svc(classes: int, kernel: str):
    x, y = make_classification(200, 6, n_informative=4, n_classes=classes,
                               n_clusters_per_class=1, random_state=classes)
    x = x.astype(np.float32)
    svc = SVC(kernel=kernel, probability=True, random_state=0).fit(x, y)
    model = to_onnx(svc, x[:1], options={"zipmap": False},
                    target_opset={"": 17, "ai.onnx.ml": 1})
    return model, x[:ROWS]


def _outputs(model, x, tmp_path, name):
    compiled = xlac.load(xlac.compile(model, tmp_path / f"{name}.o", name=name,
                                      input_shapes={"X": x.shape}).output)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return compiled(x), session.run(None, {"X": x})


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("classes", CLASSES)
def test_svc_probabilities_match_onnxruntime(classes, kernel, tmp_path):
    model, x = _svc(classes, kernel)
    (label, prob), (want_label, want_prob) = _outputs(model, x, tmp_path, f"svc{classes}{kernel}")
    np.testing.assert_array_equal(label, want_label)
    assert prob.shape == (ROWS, classes)
    np.testing.assert_allclose(prob, want_prob, rtol=0, atol=1e-6)


def test_label_is_the_most_voted_class_not_the_most_probable(tmp_path):
    # 5 classes, poly kernel: on 5 of the 64 rows the votes and the probabilities disagree
    model, x = _svc(5, "poly")
    (label, prob), (want_label, _) = _outputs(model, x, tmp_path, "votes")
    np.testing.assert_array_equal(label, want_label)
    assert (label != np.argmax(prob, axis=1)).sum() == 5
