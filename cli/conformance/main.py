"""``python -m xlac.conformance``: run the ONNX backend test cases through xlac, print a
summary, and optionally write the support report (docs/onnx-support.md)."""
from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict

from . import real_models, tool_models
from .cases import SUITES, collect, prune_failures, run, summarize
from .support_report import write_report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m xlac.conformance",
                                description="Run the ONNX backend test cases through xlac.")
    p.add_argument("-k", dest="pattern", help="only cases whose id matches this regex")
    p.add_argument("--suite", action="append", choices=SUITES,
                   help="run this suite (repeatable; default: all)")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per case")
    p.add_argument("--target", help="compile for this target (e.g. cuda-emulated, with "
                   "XLAC_CUDA_DRIVER naming a stand-in driver); default: this machine")
    p.add_argument("-v", "--verbose", action="store_true", help="one line per case")
    p.add_argument("--json", metavar="FILE", help="write every case's result as JSON")
    p.add_argument("--report", metavar="FILE",
                   help="write the support report (Markdown), e.g. docs/onnx-support.md")
    p.add_argument("--prune-failures", metavar="FILE", action="append", default=[],
                   help="remove the cases that now pass from a known-failures list such as "
                   "tests/onnx_node_failures.txt (repeatable; it never adds any)")
    args = p.parse_args(argv)
    start = time.perf_counter()
    cases = collect(args.suite or SUITES, args.pattern)
    results = run(cases, args.jobs, args.timeout, args.target)
    seconds = time.perf_counter() - start
    if args.verbose:
        for r in results:
            print(f"{r.status:12} {r.id}  {r.detail}")
    print(summarize(results))
    print(f"{seconds:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=1)
    if args.report:
        real = []
        if args.pattern is None and not args.suite:
            # The whole run: the real-model corpus and the tools' models too
            # (python -m xlac.conformance.real_models, .tool_models).
            real = [*real_models.report_section(real_models.run()), "",
                    *tool_models.report_section(tool_models.run())]
        write_report(args.report, results, args.suite or SUITES, args.pattern, real)
        print(f"{args.report} written")
    for path in args.prune_failures:
        print(f"{path}: {prune_failures(path, results)} cases that pass removed")
    return 0
