"""``python -m xlac.conformance --report FILE``: the ONNX support report, in Markdown.

Three parts, all from one conformance run: the pass counts per suite; every operator
that ``onnx.defs`` knows, with its status in xlac (the node cases it passes, the
data-set models holding it that pass, or why it is out of scope); every case that does
not pass, with its one-line reason.
"""
from __future__ import annotations

import collections

import onnx

from ..importers.onnx import OUT_OF_SCOPE, OUT_OF_SCOPE_IN_PART, supported_ops
from .cases import DEFAULT_DOMAIN, SUITES, CaseResult, qualified

_FAILING = ("mismatch", "error", "out of scope", "crash", "timeout")


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _counts(results: list[CaseResult]) -> collections.Counter:
    return collections.Counter(r.status for r in results)


def _fraction(passed: int, total: int) -> str:
    return f"{passed}/{total}" if total else "–"


def _suite_table(results: list[CaseResult], suites) -> list[str]:
    lines = ["| suite | cases | pass | " + " | ".join(_FAILING) + " |",
             "|---|--:|--:|" + "--:|" * len(_FAILING)]
    for suite in [*suites, "all"]:
        mine = results if suite == "all" else [r for r in results if r.suite == suite]
        c = _counts(mine)
        name = "**all**" if suite == "all" else suite
        pct = f" ({100 * c['pass'] / len(mine):.1f}%)" if mine else ""
        lines.append(f"| {name} | {len(mine)} | {c['pass']}{pct} | "
                     + " | ".join(str(c[s]) for s in _FAILING) + " |")
    return lines


def _op_status(supported: bool, reason: str | None, node: collections.Counter) -> str:
    # Cases refused as out of scope (Dropout in training mode) do not make an op partial.
    total, passed = sum(node.values()), node["pass"]
    if not supported:
        return "out of scope" if reason else "unsupported"
    if not total:
        return "supported (no node case)"
    if passed == total - node["out of scope"]:
        return "supported"
    return "partial" if passed else "failing"


def _operator_tables(results: list[CaseResult]) -> list[str]:
    node = collections.defaultdict(collections.Counter)
    models = collections.defaultdict(collections.Counter)
    for r in results:
        if r.suite == "node":
            node[r.ops[0]][r.status] += 1
        else:
            for op in r.ops:
                models[op][r.status] += 1
    registered = {qualified(d, op) for d, op in supported_ops()}
    scope = {qualified(d, op): why for (d, op), why in OUT_OF_SCOPE.items()}
    in_part = {qualified(d, op): why for (d, op), why in OUT_OF_SCOPE_IN_PART.items()}
    schemas = {}
    for s in onnx.defs.get_all_schemas():
        schemas[qualified(s.domain, s.name)] = s
    by_domain = collections.defaultdict(list)
    for name, s in schemas.items():
        by_domain[s.domain or DEFAULT_DOMAIN].append(name)

    lines = []
    statuses = collections.Counter()
    for domain in sorted(by_domain, key=lambda d: (d != DEFAULT_DOMAIN, d)):
        lines += ["", f"### {domain}", "",
                  "| operator | status | node cases passing | data-set models passing | note |",
                  "|---|---|--:|--:|---|"]
        for name in sorted(by_domain[domain], key=str.lower):
            s = schemas[name]
            status = _op_status(name in registered, scope.get(name), node[name])
            statuses[status] += 1
            notes = []
            if name in scope:
                notes.append("out of scope: " + scope[name])
            if name in in_part:
                notes.append("out of scope in part: " + in_part[name])
            if s.deprecated:
                notes.append("deprecated")
            short = name[len(domain) + 1:] if name.startswith(domain + ".") else name
            lines.append(f"| {short} | {status} | "
                         f"{_fraction(node[name]['pass'], sum(node[name].values()))} | "
                         f"{_fraction(models[name]['pass'], sum(models[name].values()))} | "
                         f"{_cell('; '.join(notes))} |")
    summary = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items(), key=lambda kv: -kv[1]))
    return [f"{sum(statuses.values())} operators: {summary}.", *lines]


def _failing_cases(results: list[CaseResult], suites) -> list[str]:
    lines = []
    for suite in suites:
        bad = [r for r in results if r.suite == suite and r.status != "pass"]
        if not bad:
            continue
        lines += ["", f"### {suite} ({len(bad)})", "",
                  "| case | ops | status | reason |", "|---|---|---|---|"]
        for r in sorted(bad, key=lambda r: (r.ops[0] if r.suite == "node" else "", r.id)):
            lines.append(f"| {r.id} | {_cell(', '.join(r.ops))} | {r.status} | "
                         f"{_cell(r.detail)} |")
    return lines


def render(results: list[CaseResult], suites=SUITES, pattern: str | None = None,
           real_models: list[str] = ()) -> str:
    """``real_models``: the lines of the real-model section (real_models.report_section),
    after the pass counts; none on a partial run."""
    partial = pattern is not None or tuple(suites) != SUITES
    lines = [
        "# ONNX support",
        "",
        "Generated by `python -m xlac.conformance --report docs/onnx-support.md` with onnx "
        f"{onnx.__version__} (ai.onnx opset {onnx.defs.onnx_opset_version()})"
        + (f", on a subset only (suites {', '.join(suites)}"
           + (f", cases matching `{pattern}`" if pattern else "") + ")" if partial else "")
        + ". Each case runs through `xlac.backend` as the onnx backend runner runs it: the "
        "model is compiled, inputs an op needs at compile time are pinned to the data set's "
        "values (`--const-input`), dynamic dimensions and sequence inputs to their shapes "
        "(`--input-shape`), optional inputs given empty compiled absent (`--absent-input`), "
        "and every output is compared with the stored one at the case's tolerance (rtol "
        "1e-3 for most; integers and booleans exactly).",
        "",
        "Statuses: **pass**; **mismatch** (compiled and ran, an output differs); **error** "
        "(xlac refused the model with a one-line `xlac: error:` message); **out of scope** "
        "(refused by design: strings and maps, sequences and optionals whose length or "
        "presence varies at run time, training ops, random "
        "ops, outputs whose shape depends on the data; `importers/onnx/scope.py`); "
        "**crash** and **timeout** (bugs in xlac).",
        "",
        "## Pass counts",
        "",
        *_suite_table(results, suites),
        "",
        *([*real_models, ""] if real_models else []),
        "## Operators",
        "",
        "Every operator of `onnx.defs`. A node case tests one operator (an `_expanded` case "
        "tests the operator whose function body it holds); a data-set model counts for every "
        "operator it holds. *supported*: a handler exists and every node case passes, but "
        "those out of scope by design; *partial*/*failing*: a handler exists and some/all "
        "node cases fail (see below); *unsupported*: no handler yet.",
        "",
        *_operator_tables(results),
        "",
        "## Cases that do not pass",
        *_failing_cases(results, suites),
        "",
    ]
    return "\n".join(lines)


def write_report(path: str, results: list[CaseResult], suites=SUITES,
                 pattern: str | None = None, real_models: list[str] = ()) -> None:
    with open(path, "w") as f:
        f.write(render(results, suites, pattern, real_models))
