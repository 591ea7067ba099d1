"""Every node test case of the onnx package, and every model of its data sets
``simple``, ``pytorch-converted`` and ``pytorch-operator``, through xlac.backend.

Each case runs as ``python -m xlac.conformance`` runs it (``run_case``: prepare, pinning
the inputs an op needs at compile time, run every data set, compare with the stored
outputs at the case's tolerances). A case must pass unless its known-failures list
(``onnx_node_failures.txt``, ``onnx_data_set_failures.txt``) names it; a listed case
must still fail, and fail cleanly (an ``xlac: error`` line, never a crash), so the lists
shrink as ops land and cannot hide a regression. The data set ``light`` runs in
tests/test_light_models.py, with more checks than the stored output.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from xlac.conformance.cases import collect, run_case

HERE = Path(__file__).parent
DATA_SETS = ("simple", "pytorch-converted", "pytorch-operator")
FAILURE_FILES = {"node": HERE / "onnx_node_failures.txt",
                 **{s: HERE / "onnx_data_set_failures.txt" for s in DATA_SETS}}


def _known_failures(path: Path) -> dict[str, str]:
    """Case id -> why it does not pass yet (or why it is out of scope)."""
    known = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, why = line.partition(" ")
            known[name] = why.strip()
    return known


CASES = {c.id: c for c in collect(("node", *DATA_SETS))}
KNOWN_FAILURES = {path: _known_failures(path) for path in set(FAILURE_FILES.values())}


@pytest.mark.parametrize("path", sorted(KNOWN_FAILURES), ids=lambda p: p.name)
def test_failure_list_names_only_existing_cases(path):
    assert sorted(set(KNOWN_FAILURES[path]) - set(CASES)) == []


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_case(case_id):
    case = CASES[case_id]
    path = FAILURE_FILES[case.suite]
    result = run_case(case)
    if case_id in KNOWN_FAILURES[path]:
        assert result.status not in ("pass", "crash", "timeout"), (
            f"{case_id} now {result.status}s {result.detail}: "
            + (f"remove it from tests/{path.name} (python -m xlac.conformance "
               f"--prune-failures tests/{path.name})" if result.status == "pass"
               else "a case may fail with an XlacError, never crash"))
    else:
        assert result.status == "pass", f"{result.status}: {result.detail}"
