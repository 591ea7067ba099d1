"""Arena size against the bounds and a TensorFlow Lite Micro baseline (issue 3).

    python benchmarks/memory.py [--only SUBSTR] [--json PATH]

Models: the onnx package's nine light ImageNet CNNs and the six models of
``memory_models.py`` (MLPerf Tiny and two ImageNet classics). Per model, in bytes:

    naive       every intermediate tensor of the ONNX node order in its own buffer
    onnx bound  the most intermediate bytes live at once in the ONNX node order
                (xlac.importers.onnx.liveness): no planner that keeps the file's
                order and its tensors can use less
    tflm        TensorFlow Lite Micro's GreedyMemoryPlanner on that order
                (``greedy_by_size``), the arena a TFLM-style runtime would need
    xlac        xlac's arena (NAME_ARENA_SIZE), after fusion and its own schedule
    own bound   the most bytes live at once in xlac's own schedule

Graph inputs, outputs and weights are in none of the columns. The last lines give
the geometric mean of xlac/tflm, how far xlac's packing is above its own bound, and
whether xlac beats the ONNX-order bound on every model.

With ``--streamed``, each model is also compiled with its convolution chains streamed a
few rows at a time (``--memory-budget``, optimizer/row_streaming.py), with the columns

    layer bound the most bytes one ONNX node's intermediate inputs and outputs take:
                the wall of every planner that keeps whole tensors
    streamed    the smallest arena of the streamed plans (1, 2 or 4 rows per band)
    rows        the rows per band of that plan
    recomputed  MACs computed twice (streaming keeps rows a window reads again: none)
    latency     its median latency over the unstreamed build's, both timed in turn in
                this one process
"""
from __future__ import annotations

import argparse
import bisect
import glob
import json
import math
import os
import statistics
import tempfile
import time

import numpy as np
import onnx

import xlac
from xlac.backends import make_backend
from xlac.driver import STREAM_BAND_ROWS
from xlac.importers.onnx import import_onnx
from xlac.optimizer import RowStreaming, optimize, plan_memory
from xlac.importers.onnx.liveness import TensorLife, onnx_order_intervals, peak_bytes
from memory_models import MODELS

LIGHT = sorted(glob.glob(os.path.join(os.path.dirname(onnx.__file__),
                                      "backend/test/data/light/light_*.onnx")))


def greedy_offsets(lives: list[TensorLife], alignment: int = 16) -> list[int]:
    """TFLM's GreedyMemoryPlanner: the offset of each of ``lives``, in their order.

    Sizes are rounded up to ``alignment`` (TFLM aligns each buffer's size before
    planning). Buffers are placed largest first (ties: earlier first use, then list
    order, as TFLM's stable sort keeps the order buffers were added in). Each goes
    at the lowest offset where it fits among the placed buffers whose lifetimes
    overlap its own: scanning those in offset order, the first gap big enough, or
    after the last of them. Lifetimes are inclusive: [first, last] steps.
    """
    sizes = [-(-t.size_bytes // alignment) * alignment for t in lives]
    by_size = sorted(range(len(lives)), key=lambda i: (-sizes[i], lives[i].first))
    placed: list[tuple[int, int, int]] = []      # (offset, placement number, buffer)
    offsets = [0] * len(lives)
    for number, i in enumerate(by_size):
        t, offset = lives[i], 0
        for other_offset, _, j in placed:
            u = lives[j]
            if u.last < t.first or t.last < u.first:
                continue                           # never live together: may share bytes
            if other_offset - offset >= sizes[i]:
                break                              # the gap below this buffer is enough
            offset = max(offset, other_offset + sizes[j])
        offsets[i] = offset
        # Equal offsets keep placement order, as TFLM inserts after equal entries.
        bisect.insort(placed, (offset, number, i))
    return offsets


def greedy_by_size(lives: list[TensorLife], alignment: int = 16) -> int:
    """The arena TFLM's greedy planner needs for ``lives``: the highest buffer end."""
    offsets = greedy_offsets(lives, alignment)
    return max((o + -(-t.size_bytes // alignment) * alignment
                for o, t in zip(offsets, lives)), default=0)


def measure(name: str, model, stream_runs: int = 0) -> dict:
    """One table row: ``model`` is a path or an onnx.ModelProto; with ``stream_runs``,
    the streamed columns too."""
    lives = onnx_order_intervals(model)
    with tempfile.TemporaryDirectory() as tmp:
        report = xlac.compile(model, os.path.join(tmp, "model.hlo"), emit="hlo",
                              report=True).report
    row = {"model": name,
           "naive_bytes": sum(t.size_bytes for t in lives),
           "onnx_order_bound_bytes": peak_bytes(lives),
           "tflm_bytes": greedy_by_size(lives),
           "xlac_arena_bytes": report["arena_bytes"],
           "xlac_own_bound_bytes": report["lower_bound_bytes"]}
    arena = row["xlac_arena_bytes"]
    row["xlac_over_onnx_bound"] = _ratio(arena, row["onnx_order_bound_bytes"])
    row["xlac_over_own_bound"] = _ratio(arena, row["xlac_own_bound_bytes"])
    row["xlac_over_tflm"] = _ratio(arena, row["tflm_bytes"])
    if stream_runs:
        row["layer_bound_bytes"] = layer_bound(model, lives)
        row.update(streamed(model, stream_runs))
    return row


def layer_bound(model, lives: list[TensorLife]) -> int:
    """The most bytes of intermediates one node reads and writes at once."""
    proto = onnx.load(model) if isinstance(model, str) else model
    size = {t.name: t.size_bytes for t in lives}
    return max((sum(size.get(v, 0) for v in {*n.input, *n.output})
                for n in proto.graph.node), default=0)


def streamed(model, runs: int) -> dict:
    """The smallest streamed arena, its rows per band, and its latency over the
    unstreamed build's (``runs`` calls of each, interleaved)."""
    backend = make_backend(None, None, None, 2)
    arenas = {}
    for rows in STREAM_BAND_ROWS:
        m = import_onnx(model, name="m")
        stream = RowStreaming(rows)
        optimize(m, backend, stream=stream)
        if stream.chains:
            arenas[rows] = plan_memory(m, backend).arena_size
    if not arenas:
        return {"streamed_bytes": None, "band_rows": None, "recomputed_macs": 0,
                "latency_ratio": None}
    rows = min(arenas, key=lambda r: (arenas[r], -r))
    with tempfile.TemporaryDirectory() as tmp:
        plain = xlac.load(xlac.compile(model, os.path.join(tmp, "plain.o"), name="plain").output)
        small = xlac.load(xlac.compile(model, os.path.join(tmp, "streamed.o"), name="streamed",
                                       memory_budget=arenas[rows]).output)
        calls = []
        for m in (plain, small):
            x = [np.random.default_rng(0).standard_normal(t.shape).astype(t.dtype)
                 for t in m.inputs]
            calls.append(m.bind(x, [np.empty(t.shape, t.dtype) for t in m.outputs],
                                m.new_arena()))
        times = [[], []]
        for _ in range(runs):
            for k, call in enumerate(calls):
                t = time.perf_counter()
                call()
                times[k].append(time.perf_counter() - t)
    return {"streamed_bytes": arenas[rows], "band_rows": rows, "recomputed_macs": 0,
            "latency_ratio": statistics.median(times[1]) / statistics.median(times[0])}


def _ratio(a: int, b: int) -> float:
    # A model with no intermediates at all needs nothing on either side.
    return a / b if b else (1.0 if a == 0 else math.inf)


def summary(rows: list[dict]) -> dict:
    over_own = [r["xlac_over_own_bound"] - 1 for r in rows]
    above = [r["model"] for r in rows if r["xlac_arena_bytes"] > r["onnx_order_bound_bytes"]]
    return {
        "geomean_xlac_over_tflm": math.exp(sum(math.log(r["xlac_over_tflm"]) for r in rows)
                                           / len(rows)),
        "mean_over_own_bound": sum(over_own) / len(rows),
        "max_over_own_bound": max(over_own),
        "models_above_onnx_bound": above,
    }


COLUMNS = [("model", "model", 22, "s"), ("naive", "naive_bytes", 14, ",d"),
           ("onnx bound", "onnx_order_bound_bytes", 13, ",d"), ("tflm", "tflm_bytes", 13, ",d"),
           ("xlac", "xlac_arena_bytes", 13, ",d"), ("own bound", "xlac_own_bound_bytes", 13, ",d"),
           ("/onnx bd", "xlac_over_onnx_bound", 9, ".3f"),
           ("/own bd", "xlac_over_own_bound", 8, ".3f"), ("/tflm", "xlac_over_tflm", 7, ".3f")]


STREAMED_COLUMNS = [("layer bound", "layer_bound_bytes", 12, ",d"),
                    ("streamed", "streamed_bytes", 10, ",d"), ("rows", "band_rows", 5, "d"),
                    ("recomputed", "recomputed_macs", 11, ",d"),
                    ("latency", "latency_ratio", 8, ".2f")]


def format_row(row: dict, columns=COLUMNS) -> str:
    return " ".join(f"{row[key]:{'<' if fmt == 's' else '>'}{width}{fmt}}"
                    if row[key] is not None else f"{'-':>{width}}"
                    for _, key, width, fmt in columns)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="substring of the model names to run")
    ap.add_argument("--json", help="also write the table and summary to this JSON file")
    ap.add_argument("--streamed", action="store_true",
                    help="add the streamed columns (compiles and times every model)")
    ap.add_argument("--runs", type=int, default=200, help="timed calls per build (--streamed)")
    ap.add_argument("--int8", action="store_true",
                    help="the models of memory_models.py quantized as benchmarks/int8.py "
                         "quantizes them (QDQ, int8), instead of the float models")
    args = ap.parse_args()
    columns = COLUMNS + (STREAMED_COLUMNS if args.streamed else [])
    models = [(os.path.basename(p)[len("light_"):-len(".onnx")], lambda p=p: p)
              for p in LIGHT] + list(MODELS.items())
    quantized = tempfile.TemporaryDirectory(prefix="xlac-memory-int8-")
    if args.int8:
        from int8 import quantize
        models = [(f"{name}_int8", lambda name=name, make=make: quantize(
                      make(), quantized.name, name, "qdq", "int8"))
                  for name, make in MODELS.items()]
    header = " ".join(f"{title:{'<' if fmt == 's' else '>'}{width}}"
                      for title, _, width, fmt in columns)
    print(header)
    print("-" * len(header))
    rows = []
    for name, make in models:
        if args.only and args.only not in name:
            continue
        rows.append(measure(name, make(), args.runs if args.streamed else 0))
        print(format_row(rows[-1], columns), flush=True)
    if not rows:
        print("no model matches --only")
        return
    s = summary(rows)
    print(f"geometric mean of xlac/tflm: {s['geomean_xlac_over_tflm']:.3f}")
    print(f"xlac above its own bound: mean {100 * s['mean_over_own_bound']:.1f}%, "
          f"max {100 * s['max_over_own_bound']:.1f}%")
    above = s["models_above_onnx_bound"]
    print("xlac <= ONNX-order bound on every model: "
          + ("yes" if not above else f"no ({', '.join(above)})"))
    if args.streamed:
        done = [r for r in rows if r["streamed_bytes"]]
        if done:
            gm = math.exp(sum(math.log(r["streamed_bytes"] / r["xlac_arena_bytes"])
                              for r in done) / len(done))
            print(f"geometric mean of streamed/xlac: {gm:.3f} over {len(done)} models")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "summary": s}, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
