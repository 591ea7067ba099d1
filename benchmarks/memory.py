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
"""
from __future__ import annotations

import argparse
import bisect
import glob
import json
import math
import os
import tempfile

import onnx

import xlac
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


def measure(name: str, model) -> dict:
    """One table row: ``model`` is a path or an onnx.ModelProto."""
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
    return row


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


def format_row(row: dict) -> str:
    return " ".join(f"{row[key]:{'<' if fmt == 's' else '>'}{width}{fmt}}"
                    for _, key, width, fmt in COLUMNS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="substring of the model names to run")
    ap.add_argument("--json", help="also write the table and summary to this JSON file")
    args = ap.parse_args()
    models = [(os.path.basename(p)[len("light_"):-len(".onnx")], lambda p=p: p)
              for p in LIGHT] + list(MODELS.items())
    header = " ".join(f"{title:{'<' if fmt == 's' else '>'}{width}}"
                      for title, _, width, fmt in COLUMNS)
    print(header)
    print("-" * len(header))
    rows = []
    for name, make in models:
        if args.only and args.only not in name:
            continue
        rows.append(measure(name, make()))
        print(format_row(rows[-1]), flush=True)
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
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "summary": s}, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
