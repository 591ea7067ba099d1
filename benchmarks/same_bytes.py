"""Are the objects byte for byte the same as before a change? (issue 21's goal)

    python benchmarks/same_bytes.py --record BASE.json [--keep DIR] [-j N]
    python benchmarks/same_bytes.py --compare BASE.json [--keep DIR] [-j N]
    python benchmarks/same_bytes.py --twice [-j N]
    (each takes [--only REGEX] [--targets native,aarch64,...])

Models: ``MODELS`` of benchmarks/models.py, the onnx package's light model zoo
(``light_models``) and the real-model corpus (xlac.conformance.real_models.CORPUS, pinned as that
command pins them; an entry whose package is not installed is skipped, and said so).
Targets, by key:

    native            this machine (target and CPU left to xlac)
    native-parallel   the same with parallel=True (NAME_run_parallel too)
    x86-64-v3         this machine's triple at cpu="x86-64-v3" (AVX2)
    aarch64           aarch64-unknown-linux-gnu
    riscv64           riscv64-unknown-linux-gnu
    thumbv7em         thumbv7em-none-eabihf

Each (model, target) is compiled with ``xlac.compile(..., emit="obj")`` in a fresh
Python process (spawned: its own hash seed, nothing left by another compile; a
compiler process that dies is recorded, not fatal) and gives the sha256 of the object
and of the header, the arena size and the compile time; or the one-line message of
the ``XlacError`` it raised (``error``: a model too big for a microcontroller is a
result too), or of any other exception (``crash``).

``--record`` writes the results, with the xlac commit, the LLVM, onnx and host CPU they
were made with, to a JSON file. ``--compare`` compiles again and prints a table (model x
target: same, same error, DIFFERENT (object, header, arena), error changed, new,
missing), then the details of every cell that is not the same; it exits 1 if any is
not. ``--only``/``--targets`` compare that subset. The native targets compare only on
a machine with the recorded host CPU (it warns otherwise). ``--keep DIR`` keeps every
object and header (DIR/TARGET/MODEL.o and .h) for objdump. ``--twice`` compiles the
selected models (by default three small ones) twice and says whether the bytes are
the same both times. ``-j N`` runs N compiles at once.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm
import onnx

import xlac
from models import MODELS, light_models
from xlac.conformance.real_models import CORPUS

TARGETS = {
    "native": {},
    "native-parallel": {"parallel": True},
    "x86-64-v3": {"cpu": "x86-64-v3"},
    "aarch64": {"target": "aarch64-unknown-linux-gnu"},
    "riscv64": {"target": "riscv64-unknown-linux-gnu"},
    "thumbv7em": {"target": "thumbv7em-none-eabihf"},
}
TWICE = "lenet5|lstm_kws|mtcnn-pnet"      # --twice's models without --only


def catalogue() -> dict:
    """Every installed model by name: (a function giving what xlac.compile takes, its
    input_shapes and const_inputs)."""
    models = {name: (build, {}) for name, build in {**MODELS, **light_models()}.items()}
    for entry in CORPUS:
        if entry.installed():
            shapes = {name: i.dims for name, i in entry.inputs.items()}
            models[entry.name] = (entry.path, {"input_shapes": shapes,
                                               "const_inputs": entry.const_inputs})
    return models


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def compile_one(model: str, target: str, keep: str | None) -> dict:
    """One compile's result: hashes, arena and seconds; or its error or crash."""
    source, pins = catalogue()[model]
    with tempfile.TemporaryDirectory() as tmp:
        try:
            loaded = source()
            start = time.perf_counter()
            res = xlac.compile(loaded, Path(tmp) / f"{model}.o", emit="obj", **pins,
                               **TARGETS[target])
            seconds = time.perf_counter() - start
        except xlac.XlacError as e:
            return {"error": str(e).splitlines()[0]}
        except Exception as e:
            return {"crash": f"{type(e).__name__}: {e}".splitlines()[0]}
        if keep:
            (Path(keep) / target).mkdir(parents=True, exist_ok=True)
            for path in res.paths:
                shutil.copy(path, Path(keep) / target / path.name)
        return {"object": sha256(res.output), "header": sha256(res.header),
                "arena": res.arena_size, "seconds": round(seconds, 2)}


def _child(send, *task) -> None:
    send.send(compile_one(*task))


def isolated(task: tuple) -> dict:
    """compile_one(*task) in a new spawned process."""
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send, *task))
    proc.start()
    send.close()
    try:
        return receive.recv()
    except EOFError:
        proc.join()
        return {"crash": f"the compiling process died (exit status {proc.exitcode})"}
    finally:
        proc.join()


def run(tasks: list[tuple], jobs: int) -> list[dict]:
    """isolated() of every task, ``jobs`` at a time, printing each as it ends."""
    results = [None] * len(tasks)
    with ThreadPoolExecutor(jobs) as pool:
        futures = {pool.submit(isolated, t): k for k, t in enumerate(tasks)}
        for n, future in enumerate(as_completed(futures), 1):
            k = futures[future]
            results[k] = r = future.result()
            what = (f"{r['seconds']:.1f} s" if "object" in r
                    else f"{next(iter(r))}: {next(iter(r.values()))}")
            print(f"[{n}/{len(tasks)}] {tasks[k][0]} {tasks[k][1]}: {what}", flush=True)
    return results


def outcome(r: dict) -> dict:
    """What must be the same: all but the compile time."""
    return {k: v for k, v in r.items() if k != "seconds"}


def meta() -> dict:
    """What the results were made with."""
    here = Path(xlac.__file__).parent
    commit = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"],
                            cwd=here, capture_output=True, text=True).stdout.strip()
    return {"xlac": str(here), "commit": commit or None,
            "llvmlite": llvmlite.__version__,
            "llvm": ".".join(map(str, llvm.llvm_version_info)), "onnx": onnx.__version__,
            "host_cpu": llvm.get_host_cpu_name(),
            "host_features": llvm.get_host_cpu_features().flatten()}


def cell(before: dict | None, now: dict | None) -> str:
    if before is None:
        return "new"
    if now is None:
        return "missing"
    if outcome(before) == outcome(now):
        return "same" if "object" in before else "same error"
    if "object" in before and "object" in now:
        parts = [k for k in ("object", "header", "arena") if before[k] != now[k]]
        return f"DIFFERENT ({', '.join(parts)})"
    return "error changed"


def compare(recorded: dict, current: dict, selected) -> bool:
    """Prints the table and the details; True when every cell is the same."""
    for key in ("commit", "llvm", "onnx", "host_cpu"):
        if recorded["meta"][key] != current["meta"][key]:
            print(f"note: {key} was {recorded['meta'][key]}, now {current['meta'][key]}")
    old, new = (set(r["meta"]["host_features"].split(",")) for r in (recorded, current))
    if old != new:
        print(f"note: host CPU features now {','.join(sorted(new - old))}, "
              f"were {','.join(sorted(old - new))}")
    before = {(m, t): r for m, per in recorded["results"].items() for t, r in per.items()
              if selected(m, t)}
    now = {(m, t): r for m, per in current["results"].items() for t, r in per.items()}
    keys = before.keys() | now.keys()
    models = list(dict.fromkeys(m for m, _ in sorted(keys)))
    targets = [t for t in TARGETS if any(t == k[1] for k in keys)]
    cells = {k: cell(before.get(k), now.get(k)) for k in keys}
    width = max(len(m) for m in [*models, "model"]) + 2
    col = max(len(c) for c in [*cells.values(), *targets]) + 2
    print(f"{'model':<{width}}" + "".join(f"{t:<{col}}" for t in targets))
    for m in models:
        print(f"{m:<{width}}" + "".join(f"{cells.get((m, t), '-'):<{col}}" for t in targets))
    changed = sorted(k for k, c in cells.items() if c not in ("same", "same error"))
    for m, t in changed:
        print(f"\n{m} {t}: {cells[m, t]}\n  recorded: {before.get((m, t))}\n"
              f"  now:      {now.get((m, t))}")
    both = [k for k in before.keys() & now.keys()
            if "seconds" in before[k] and "seconds" in now[k]]
    print(f"\n{len(keys) - len(changed)} of {len(keys)} the same; compile time of the "
          f"{len(both)} compiled both times: {sum(before[k]['seconds'] for k in both):.0f} s "
          f"recorded, {sum(now[k]['seconds'] for k in both):.0f} s now")
    return not changed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", metavar="FILE.json", help="write the results here")
    ap.add_argument("--compare", metavar="FILE.json", help="compare with these results")
    ap.add_argument("--twice", action="store_true",
                    help=f"compile each twice: is the output deterministic? "
                    f"(models by default: {TWICE})")
    ap.add_argument("--keep", metavar="DIR", help="keep the objects and headers here")
    ap.add_argument("--only", metavar="REGEX", help="the models whose names match")
    ap.add_argument("--targets", help=f"comma-separated, of {','.join(TARGETS)}")
    ap.add_argument("-j", dest="jobs", type=int, default=1, help="compiles at once")
    args = ap.parse_args()
    if not (args.record or args.compare or args.twice):
        ap.error("say --record, --compare or --twice")
    targets = args.targets.split(",") if args.targets else list(TARGETS)
    if unknown := set(targets) - set(TARGETS):
        ap.error(f"unknown targets {sorted(unknown)}; choose from {', '.join(TARGETS)}")
    only = re.compile(args.only or (TWICE if args.twice else ""))

    def selected(model: str, target: str) -> bool:
        return bool(only.search(model)) and target in targets

    for entry in CORPUS:
        if not entry.installed() and only.search(entry.name):
            print(f"skipped {entry.name}: package {entry.package} is not installed")
    tasks = [(m, t, args.keep) for m in catalogue() for t in targets if selected(m, t)]
    if args.twice:
        first, second = run(tasks, args.jobs), run(tasks, args.jobs)
        varies = [f"{m} {t}: {a} then {b}" for (m, t, _), a, b in zip(tasks, first, second)
                  if outcome(a) != outcome(b)]
        print("\n".join(varies) or f"all {len(tasks)} the same both times")
        sys.exit(1 if varies else 0)
    start = time.perf_counter()
    current = {"meta": meta(), "results": {}}
    for (m, t, _), r in zip(tasks, run(tasks, args.jobs)):
        current["results"].setdefault(m, {})[t] = r
    print(f"{len(tasks)} compiles in {time.perf_counter() - start:.0f} s")
    if args.record:
        Path(args.record).parent.mkdir(parents=True, exist_ok=True)
        Path(args.record).write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
    if args.compare:
        sys.exit(0 if compare(json.loads(Path(args.compare).read_text()), current,
                              selected) else 1)


if __name__ == "__main__":
    main()
