"""Run the onnx package's backend node test cases through xlac.

    python -m xlac.conformance                       # every node case, a summary
    python -m xlac.conformance -k 'test_(lstm|gru)'  # cases whose name matches
    python -m xlac.conformance -k resize -v          # one line per case

Each case is compiled with ``xlac.compile`` into a temporary folder, loaded with
``xlac.load`` and run on every data set of the case. Where an op needs the value of
a graph input at compile time (a shape, axes, a count), that input is pinned to the
data set's value (``const_inputs``), as a user would pin it, and the case is compiled
once per data set; the outputs are compared with
the stored expected outputs at the case's own tolerances (``rtol``/``atol``, as the
onnx backend runner does; integers and booleans exactly). A case ends in one of:

    pass      every output of every data set matches
    mismatch  it compiled and ran, and an output differs (the largest error is shown)
    error     xlac refused it with an XlacError (the one-line message is shown)
    crash     any other exception: a bug in xlac (the exception is shown)

Cases run in worker processes (``--jobs``), each bounded by ``--timeout`` seconds.
"""
from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import os
import re
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass

import numpy as np


@dataclass
class CaseResult:
    name: str
    op: str          # the op type of the case's last node: the op under test
    status: str      # pass | mismatch | error | crash | timeout
    detail: str = ""
    seconds: float = 0.0


def node_cases(pattern: str | None = None) -> list:
    """The onnx package's node test cases (in memory), optionally filtered by name."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases
        cases = collect_testcases()
    rx = re.compile(pattern) if pattern else None
    return [c for c in cases if rx is None or rx.search(c.name)]


def _op_under_test(model) -> str:
    nodes = model.graph.node
    return nodes[-1].op_type if nodes else "?"


def _compare(expected: np.ndarray, got: np.ndarray, rtol: float, atol: float) -> str | None:
    """None if ``got`` matches ``expected``, else why not."""
    expected, got = np.asarray(expected), np.asarray(got)
    if expected.shape != got.shape:
        return f"shape {got.shape}, expected {expected.shape}"
    if expected.dtype != got.dtype:
        return f"dtype {got.dtype}, expected {expected.dtype}"
    if expected.dtype.kind in "biuO" or expected.dtype == np.bool_:
        bad = expected != got
        if bad.any():
            return f"{int(bad.sum())} of {bad.size} elements differ"
        return None
    e, g = expected.astype(np.float64), got.astype(np.float64)
    same_nan = np.isnan(e) & np.isnan(g)
    close = np.isclose(g, e, rtol=rtol, atol=atol) | same_nan | (e == g)
    if close.all():
        return None
    err = np.abs(g - e)[~close]
    return f"{int((~close).sum())} of {close.size} elements off, max |err| {np.nanmax(err):.3g}"


def _array(value):
    # Some cases store TensorProtos (types numpy cannot hold natively): read them as the
    # onnx backend runner does.
    import onnx
    from onnx import numpy_helper
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, (list, tuple)) or value is None:
        return value          # a sequence or an optional: xlac refuses such inputs itself
    return np.asarray(value)


def run_case(case, workdir: str) -> CaseResult:
    """Compile, load and run one case; never raises."""
    import xlac
    from xlac.hlo import XlacError
    start = time.perf_counter()
    op = _op_under_test(case.model)
    try:
        out = os.path.join(workdir, f"{case.name}.o")
        names = [i.name for i in case.model.graph.input
                 if i.name not in {t.name for t in case.model.graph.initializer}]
        for inputs, expected in case.data_sets:
            inputs = dict(zip(names, (_array(x) for x in inputs)))
            expected = [_array(e) for e in expected]
            pinned = _compile_pinning(case.model, out, inputs)
            model = xlac.load(out)
            got = model(*(v for n, v in inputs.items() if n not in pinned))
            for k, (e, g) in enumerate(zip(expected, got)):
                why = _compare(e, g, case.rtol, case.atol)
                if why is not None:
                    return CaseResult(case.name, op, "mismatch", f"output {k}: {why}",
                                      time.perf_counter() - start)
            if len(got) != len(expected):
                return CaseResult(case.name, op, "mismatch",
                                  f"{len(got)} outputs, expected {len(expected)}",
                                  time.perf_counter() - start)
        return CaseResult(case.name, op, "pass", "", time.perf_counter() - start)
    except XlacError as e:
        return CaseResult(case.name, op, "error", str(e).splitlines()[0][:300],
                          time.perf_counter() - start)
    except Exception as e:    # a bug in xlac: the conformance run reports it, not stops
        return CaseResult(case.name, op, "crash", f"{type(e).__name__}: {e}"[:300],
                          time.perf_counter() - start)


def _compile_pinning(model, out: str, inputs: dict) -> set[str]:
    """Compile ``model``, pinning the inputs the importer asks for; returns their names."""
    import xlac
    from xlac.importers.onnx import ConstantInputNeeded
    pinned: dict = {}
    while True:
        try:
            xlac.compile(model, out, name="m", const_inputs=pinned)
            return set(pinned)
        except ConstantInputNeeded as e:
            if not set(e.inputs) - set(pinned):
                raise
            pinned.update({n: inputs[n] for n in e.inputs})


def _worker(args):
    index, pattern, workdir = args
    case = _CASES[index]
    return run_case(case, workdir)


_CASES: list = []


def _init_worker(pattern):
    global _CASES
    _CASES = node_cases(pattern)


def run(pattern: str | None, jobs: int, timeout: float) -> list[CaseResult]:
    cases = node_cases(pattern)
    results: list[CaseResult] = []
    with tempfile.TemporaryDirectory(prefix="xlac-conformance-") as workdir:
        os.environ.setdefault("XLAC_CACHE_DIR", os.path.join(workdir, "cache"))
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(jobs, initializer=_init_worker, initargs=(pattern,),
                      maxtasksperchild=50) as pool:
            pending = [(c, pool.apply_async(_worker, ((i, pattern, workdir),)))
                       for i, c in enumerate(cases)]
            for case, job in pending:
                try:
                    results.append(job.get(timeout))
                except multiprocessing.TimeoutError:
                    results.append(CaseResult(case.name, _op_under_test(case.model), "timeout",
                                              f"over {timeout:.0f} s"))
    return results


def summarize(results: list[CaseResult]) -> str:
    counts = collections.Counter(r.status for r in results)
    lines = [f"{len(results)} cases: " + ", ".join(f"{counts[s]} {s}" for s in
                                                  ("pass", "mismatch", "error", "crash",
                                                   "timeout") if counts[s])]
    by_op: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in results:
        by_op[r.op][r.status] += 1
    failing = sorted((op for op, c in by_op.items() if set(c) != {"pass"}),
                     key=lambda op: -sum(v for k, v in by_op[op].items() if k != "pass"))
    if failing:
        lines.append("failing ops (cases not passing / all):")
        for op in failing:
            c = by_op[op]
            lines.append(f"  {op}: {sum(c.values()) - c['pass']}/{sum(c.values())}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m xlac.conformance",
                                description="Run the ONNX backend node test cases through xlac.")
    p.add_argument("-k", dest="pattern", help="only cases whose name matches this regex")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per case")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per case")
    p.add_argument("--json", metavar="FILE", help="write every case's result as JSON")
    p.add_argument("--prune-failures", metavar="FILE",
                   help="remove the cases that now pass from a known-failures list such as "
                   "tests/onnx_node_failures.txt (it never adds any)")
    args = p.parse_args(argv)
    results = run(args.pattern, args.jobs, args.timeout)
    if args.verbose:
        for r in results:
            print(f"{r.status:8} {r.name}  {r.detail}")
    print(summarize(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=1)
    if args.prune_failures:
        passed = {r.name for r in results if r.status == "pass"}
        with open(args.prune_failures) as f:
            lines = f.read().splitlines()
        kept = [line for line in lines if line.split(" ", 1)[0] not in passed]
        with open(args.prune_failures, "w") as f:
            f.write("".join(line + "\n" for line in kept))
        print(f"{args.prune_failures}: {len(lines) - len(kept)} cases that pass removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
