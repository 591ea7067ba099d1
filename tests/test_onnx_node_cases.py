"""Every node test case of the onnx package, through xlac.compile and xlac.load.

Each case runs as ``python -m xlac.conformance`` runs it (``run_case``: compile,
pinning the inputs an op needs at compile time, load, run every data set, compare
with the stored outputs at the case's tolerances). A case must pass unless
``onnx_node_failures.txt`` lists it; a listed case must still fail, and fail
cleanly (an ``xlac: error`` line, never a crash), so the list shrinks as ops land
and cannot hide a regression.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from xlac.conformance import node_cases, run_case

FAILURES_FILE = Path(__file__).with_name("onnx_node_failures.txt")


def _known_failures() -> dict[str, str]:
    """Case name -> why it does not pass yet (or why it is out of scope)."""
    known = {}
    for line in FAILURES_FILE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, why = line.partition(" ")
            known[name] = why.strip()
    return known


CASES = {c.name: c for c in node_cases()}
KNOWN_FAILURES = _known_failures()


def test_failure_list_names_only_existing_cases():
    assert sorted(set(KNOWN_FAILURES) - set(CASES)) == []


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_case(name, tmp_path):
    result = run_case(CASES[name], str(tmp_path))
    if name in KNOWN_FAILURES:
        assert result.status not in ("pass", "crash", "timeout"), (
            f"{name} now {result.status}s {result.detail}: "
            + ("remove it from tests/onnx_node_failures.txt" if result.status == "pass"
               else "a case may fail with an XlacError, never crash"))
    else:
        assert result.status == "pass", f"{result.status}: {result.detail}"
