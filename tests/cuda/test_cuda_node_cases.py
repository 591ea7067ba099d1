"""ONNX node cases through the CUDA target, emulated: one case of every op (its first by
name), compiled with ``cuda-emulated`` and run by the stand-in driver, must do what it
does on the CPU path (tests/test_onnx_node_cases.py): pass, unless the known-failures
list names it, and then fail cleanly. The whole suite is
``python -m xlac.conformance --target cuda-emulated`` (README: CUDA).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from xlac.conformance.cases import collect, run_case

FAILURES = Path(__file__).resolve().parents[1] / "onnx_node_failures.txt"
KNOWN = {line.split()[0] for line in FAILURES.read_text().splitlines()
         if line.strip() and not line.startswith("#")}


def _one_per_op() -> dict:
    chosen = {}
    for case in sorted(collect(("node",)), key=lambda c: c.id):
        chosen.setdefault(case.ops, case)
    return {c.id: c for c in chosen.values()}


CASES = _one_per_op()


def test_every_op_has_a_case():
    assert len(CASES) > 150


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_case_on_cuda(case_id, driver, monkeypatch):
    monkeypatch.setenv("XLAC_FAKE_CUDA_ORDER", "reverse")   # a missing barrier shows
    result = run_case(CASES[case_id], target="cuda-emulated")
    if case_id in KNOWN:
        assert result.status not in ("pass", "crash", "timeout"), \
            f"{case_id} {result.status}s on CUDA but not on the CPU: {result.detail}"
    else:
        assert result.status == "pass", f"{result.status}: {result.detail}"
