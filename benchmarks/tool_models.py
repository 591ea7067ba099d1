"""Latency of the models onnxruntime's own tools write, xlac beside onnxruntime.

    python benchmarks/tool_models.py [-k REGEX] [--runs N] [--sample-ms MS]

Each entry of ``xlac.conformance.tool_models`` (a seeded PyTorch model of
cli/conformance/torch_models.py run through one of onnxruntime's tools: the transformer
optimizer, quantize_dynamic, the 4-bit MatMulNBits quantizer, a session saved at
ORT_ENABLE_EXTENDED) is compiled by xlac for this machine at the shapes of its inputs
and timed beside onnxruntime on those inputs, as benchmarks/models.py times: one thread,
buffers bound once, the two alternating sample by sample, medians per call. It prints
the medians, their ratio, the object's size and its code, and the largest difference
from onnxruntime; then the geometric mean of the ratios. Needs torch (a test extra).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

import xlac
from xlac.conformance.tool_models import TOOLS, ToolModel, written_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import code_bytes, ort_session, race  # noqa: E402


def measure(entry: ToolModel, folder: Path, samples: int, sample_s: float) -> dict:
    written, feeds = written_model(entry, folder)
    res = xlac.compile(written, folder / f"{entry.name}.o",
                       input_shapes={n: x.shape for n, x in feeds.items()})
    tx, to, diff = race(xlac.load(res.output), ort_session(written), feeds, samples, sample_s)
    return {"name": entry.name, "xlac_ms": tx * 1e3, "ort_ms": to * 1e3, "ratio": tx / to,
            "object": res.output.stat().st_size, "code": code_bytes(res),
            "onnx": (folder / f"{entry.name}.onnx").stat().st_size, "max_diff": diff}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", dest="pattern", help="only tools whose name matches this regex")
    ap.add_argument("--runs", type=int, default=21, help="samples per side")
    ap.add_argument("--sample-ms", type=float, default=20, help="length of a sample")
    args = ap.parse_args()
    rx = re.compile(args.pattern) if args.pattern else None
    head = (f"{'tool model':<28} {'xlac ms':>9} {'ort ms':>9} {'ratio':>6} {'.onnx B':>9} "
            f"{'object B':>9} {'code B':>8} {'max |diff|':>10}")
    print(f"load average at start: {os.getloadavg()[0]:.2f}; {args.runs} samples of "
          f"~{args.sample_ms:.0f} ms per side, one thread each")
    print(head)
    print("-" * len(head))
    ratios = []
    with tempfile.TemporaryDirectory(prefix="xlac-tool-bench-") as tmp:
        for entry in TOOLS:
            if rx and not rx.search(entry.name):
                continue
            r = measure(entry, Path(tmp), args.runs, args.sample_ms / 1e3)
            ratios.append(r["ratio"])
            print(f"{r['name']:<28} {r['xlac_ms']:9.4f} {r['ort_ms']:9.4f} {r['ratio']:6.2f} "
                  f"{r['onnx']:9,} {r['object']:9,} {r['code']:8,} {r['max_diff']:10.3g}",
                  flush=True)
    if ratios:
        print(f"geometric mean of xlac/onnxruntime latency: "
              f"{float(np.exp(np.mean(np.log(ratios)))):.2f} over {len(ratios)} models; "
              f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
