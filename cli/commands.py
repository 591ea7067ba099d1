"""``xlac run``, ``xlac bench`` and ``xlac cache``: the commands beside compiling.

    xlac run MODEL [--input [NAME=]FILE.npy ...] [--output-dir DIR] [--check]
    xlac bench MODEL [--input [NAME=]FILE.npy ...] [--runs N]
    xlac cache [clear]

MODEL is an ONNX model, compiled for this machine into a temporary folder first,
or an object xlac compiled (``OUT.o`` with ``OUT.h`` beside it). Either way it
runs through ``xlac.load``. Inputs not given are random, from ``--seed``. A sequence
input or output is its elements, one flat tensor each (``s[0]``, ``s[1]``, ...), as
NAME_run_v takes them; onnxruntime gets the list of them, and None for an optional
compiled empty, and its outputs are compared element by element.

``--check`` and ``bench`` compare with onnxruntime, which is not a dependency of
xlac (it is among the test extras): without it ``--check`` is an error that says
how to install it, and ``bench`` times xlac alone and says so.
"""
from __future__ import annotations

import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import cache
from .driver import compile, const_inputs_from, input_shapes_from
from .emitter.names import c_identifier_for_model
from .hlo import XlacError
from .importers.hlo import is_hlo_text
from .loader import Model, load
from .progress import Progress

EXIT_CHECK_FAILED = 3       # xlac run --check: the outputs differ from onnxruntime's
DEFAULT_RTOL = 1e-4
# The absolute tolerance scales with the reference's magnitude: a float32 sum's
# rounding error follows the size of its terms, not of its result.
DEFAULT_ATOL = 1e-5
RANDOM_INT_HIGH = 10         # random integer inputs are drawn from [0, 10)
INSTALL_ORT = ("pip install onnxruntime (it comes with xlac's test extras: "
               "pip install 'xlac[test]')")


# -- arguments ------------------------------------------------------------------------

def add_model_arguments(p) -> None:
    """The arguments ``run`` and ``bench`` share: the model, its inputs, and how to
    compile it when it is an ONNX file."""
    p.add_argument("model", metavar="MODEL",
                   help="an ONNX model, or an object compiled by xlac (OUT.o, OUT.h beside it)")
    p.add_argument("--input", action="append", default=[], metavar="[NAME=]FILE.npy",
                   help="the value of an input (repeatable; without NAME=, the next input in "
                   "model order); inputs not given are random")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the random inputs (default 0): floats standard normal, "
                   f"integers in [0, {RANDOM_INT_HIGH}), booleans fair")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMxDIM...",
                   help="pin the shape of an input with dynamic dimensions (repeatable)")
    p.add_argument("--const-input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="compile input NAME as a constant with the value in FILE.npy")
    p.add_argument("--absent-input", action="append", default=[], metavar="NAME",
                   help="compile optional input NAME empty (repeatable)")
    p.add_argument("-O", dest="opt_level", type=int, choices=range(4), default=2,
                   metavar="LEVEL", help="optimization level -O0 .. -O3 (default -O2)")
    p.add_argument("--strict", action="store_true", help="make warnings errors")
    p.add_argument("--target", metavar="TRIPLE",
                   help="compile for this target, which must run here: this machine's "
                   "(default) or cuda, the GPU (cuda-emulated: a stand-in driver's)")


def add_run_arguments(p) -> None:
    add_model_arguments(p)
    p.add_argument("--output-dir", metavar="DIR",
                   help="write each output to DIR/OUTPUT.npy (DIR is created)")
    p.add_argument("--check", action="store_true",
                   help="compare the outputs with onnxruntime's (which must be installed) and "
                   "print the largest errors; exit status 3 when one is beyond tolerance")
    p.add_argument("--rtol", type=float, default=DEFAULT_RTOL,
                   help=f"relative tolerance of --check (default {DEFAULT_RTOL:g})")
    p.add_argument("--atol", type=float, default=None,
                   help=f"absolute tolerance of --check (default {DEFAULT_ATOL:g} times the "
                   "largest magnitude of the output, at least 1)")


def add_bench_arguments(p) -> None:
    add_model_arguments(p)
    p.add_argument("--runs", type=int, default=0,
                   help="timed runs of each (default: enough for about a second, at least 10)")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs first (default 3)")


def add_cache_arguments(p) -> None:
    p.add_argument("action", nargs="?", choices=("info", "clear"), default="info",
                   help="info (default): the folder, its libraries and bounds; "
                   "clear: remove every library")


# -- the model and its inputs ---------------------------------------------------------------

@dataclass
class Prepared:
    model: Model
    source: Path                             # what the user gave
    onnx_path: Path | None                   # None: an object was given
    const_inputs: dict = field(default_factory=dict)
    compile_seconds: float | None = None


def _prepare(args, folder: str) -> Prepared:
    path = Path(args.model)
    if path.suffix == ".o":
        given = [flag for flag, value in (("--input-shape", args.input_shape),
                                           ("--const-input", args.const_input),
                                           ("--absent-input", args.absent_input),
                                           ("--target", args.target)) if value]
        if given:
            raise XlacError(f"{', '.join(given)} apply when compiling, but '{path}' is "
                            "compiled already")
        return Prepared(load(path), path, None)
    if not path.is_file():
        raise XlacError(f"no model at '{path}'")
    const_inputs = const_inputs_from(args.const_input)
    output = Path(folder) / f"{c_identifier_for_model(path.stem)}.o"
    start = time.perf_counter()
    compile(path, output, target=args.target, input_shapes=input_shapes_from(args.input_shape),
            const_inputs=const_inputs, absent_inputs=args.absent_input,
            opt_level=args.opt_level, strict=args.strict,
            progress=Progress(sys.stderr))
    seconds = time.perf_counter() - start
    return Prepared(load(output), path, path, const_inputs, seconds)


def _inputs(model: Model, specs: list[str], seed: int) -> tuple[list[np.ndarray], list[str]]:
    """The input arrays in model order, and one line per input saying where it came from."""
    names = [t.name for t in model.inputs]
    given: dict[str, str] = {}
    for spec in specs:
        name, eq, file = spec.partition("=")
        if not (eq and name in names):
            name, file = next((n for n in names if n not in given), None), spec
            if name is None:
                raise XlacError(f"--input '{spec}': {model.name} has {len(names)} input(s) "
                                f"({', '.join(names)}), all given already")
        if name in given:
            raise XlacError(f"--input gives input '{name}' twice")
        given[name] = file
    rng = np.random.default_rng(seed)
    arrays, notes = [], []
    for t in model.inputs:
        kind = f"{t.dtype}{list(t.shape)}"
        if t.name in given:
            arrays.append(_read_input(t, given[t.name]))
            notes.append(f"input {t.name}: {kind} from {given[t.name]}")
        else:
            arrays.append(_random(rng, t.dtype, t.shape))
            notes.append(f"input {t.name}: {kind} random (seed {seed})")
    return arrays, notes


def _read_input(t, file: str) -> np.ndarray:
    try:
        a = np.load(file, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise XlacError(f"cannot read --input {t.name}={file}: "
                        f"{getattr(e, 'strerror', None) or e}") from None
    if a.dtype != t.dtype or a.shape != t.shape:
        raise XlacError(f"--input {t.name}={file} holds {a.dtype}{list(a.shape)}; the model "
                        f"takes {t.dtype}{list(t.shape)}")
    return a


def _random(rng: np.random.Generator, dtype: np.dtype, shape) -> np.ndarray:
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, RANDOM_INT_HIGH, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)     # floats, ml_dtypes' included


# -- onnxruntime ------------------------------------------------------------------------------

def _onnxruntime():
    """The onnxruntime module, or None where it is not installed."""
    try:
        import onnxruntime
    except ImportError:
        return None
    return onnxruntime


def _ort_session(ort, path: Path):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1        # xlac runs on one thread: compare like with like
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    except Exception as e:   # noqa: BLE001  (onnxruntime raises its own types)
        raise XlacError(f"onnxruntime cannot load '{path}': {_first_line(e)}") from None


def _ort_feeds(prepared: Prepared, arrays: list[np.ndarray]) -> dict:
    """onnxruntime's feeds from the flat tensors of NAME_run_v: a sequence input is the
    list of its elements, an optional compiled empty is None."""
    feeds = {v.name: None if v.kind == "absent" else
             arrays[v.first:v.first + v.count] if v.kind == "sequence" else arrays[v.first]
             for v in prepared.model.input_values}
    feeds.update(prepared.const_inputs)
    return feeds


def _first_line(e: Exception) -> str:
    return next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)


# -- xlac run -------------------------------------------------------------------------------

def run_command(args) -> int:
    if args.check and Path(args.model).suffix == ".o":
        raise XlacError("--check compares with onnxruntime on the ONNX model: give "
                        "MODEL.onnx rather than a compiled object")
    if args.check and is_hlo_text(args.model):
        raise XlacError("--check compares with onnxruntime, which does not read HLO text; "
                        "compare with jax.jit of the function")
    ort = _onnxruntime() if args.check else None
    if args.check and ort is None:
        raise XlacError(f"--check compares with onnxruntime, which is not installed: {INSTALL_ORT}")
    with tempfile.TemporaryDirectory(prefix="xlac-run-") as folder:
        prepared = _prepare(args, folder)
        m = prepared.model
        arrays, notes = _inputs(m, args.input, args.seed)
        # The flat tensors of NAME_run_v, as m.inputs and m.outputs list them (a sequence's
        # elements one by one).
        outputs = [np.empty(t.shape, t.dtype) for t in m.outputs]
        m.run(arrays, outputs, m.new_arena())
    print(_model_line(prepared))
    for line in notes:
        print(line)
    for v in m.output_values:
        if v.kind == "absent":
            print(f"output {v.name}: an optional compiled empty (no tensor)")
        for t, y in zip(m.outputs[v.first:v.first + v.count],
                        outputs[v.first:v.first + v.count]):
            print(f"output {t.name}: {t.dtype}{list(t.shape)}{_summary(y)}")
            print("  " + np.array2string(y, threshold=12, edgeitems=3, precision=6)
                  .replace("\n", "\n  "))
    if args.output_dir is not None:
        for path in _write_outputs(Path(args.output_dir), m, outputs):
            print(f"wrote {path}")
    if not args.check:
        return 0
    sess = _ort_session(ort, prepared.onnx_path)
    want = sess.run(None, _ort_feeds(prepared, arrays))
    failed = _print_check(m, outputs, want, args.rtol, args.atol, ort.__version__)
    if failed:
        print(f"xlac: error: {', '.join(failed)} differ{'s' if len(failed) == 1 else ''} from "
              "onnxruntime beyond the tolerance", file=sys.stderr)
        return EXIT_CHECK_FAILED
    return 0


def _model_line(prepared: Prepared) -> str:
    m = prepared.model
    where = (f"compiled from {prepared.onnx_path} in {prepared.compile_seconds:.2f} s"
             if prepared.onnx_path is not None else f"loaded from {prepared.source}")
    return f"{m.name}: {where}; arena {m.arena_size:,} bytes"


def _summary(y: np.ndarray) -> str:
    if y.size == 0 or y.dtype == np.bool_:
        return ""
    v = y.astype(np.float64)
    finite = v[np.isfinite(v)]
    extra = f", {v.size - finite.size} not finite" if finite.size < v.size else ""
    if finite.size == 0:
        return extra.replace(", ", "  ")
    return (f"  min {finite.min():.6g}  max {finite.max():.6g}  mean {finite.mean():.6g}"
            f"{extra}")


def _write_outputs(folder: Path, m: Model, outputs: list[np.ndarray]) -> list[Path]:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise XlacError(f"cannot create --output-dir '{folder}': {e.strerror or e}") from None
    paths, used = [], set()
    for t, y in zip(m.outputs, outputs):
        stem = re.sub(r"[^A-Za-z0-9_.-]", "_", t.name).lstrip(".") or "output"
        name, k = stem, 1
        while name in used:                 # two ONNX names that map to one file name
            name, k = f"{stem}_{k}", k + 1
        used.add(name)
        path = folder / f"{name}.npy"
        try:
            np.save(path, y)
        except OSError as e:
            raise XlacError(f"cannot write '{path}': {e.strerror or e}") from None
        paths.append(path)
    return paths


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_abs: float
    at: tuple[int, ...] | None
    max_rel: float
    atol: float
    note: str = ""


def compare(got: np.ndarray, want: np.ndarray, rtol: float, atol: float | None) -> Comparison:
    """``got`` against the reference ``want``: ok when |got - want| <= atol + rtol * |want|
    everywhere (NaN where the reference has NaN, infinities equal); integers and booleans
    must be equal. ``atol`` None is DEFAULT_ATOL times max(1, the largest |want|)."""
    if got.shape != want.shape:
        return Comparison(False, np.inf, None, np.inf, 0.0,
                          f"shape {list(got.shape)}, onnxruntime's {list(want.shape)}")
    g, w = got.astype(np.float64), want.astype(np.float64)
    exact = not (np.issubdtype(got.dtype, np.inexact) or got.dtype.kind == "V")
    magnitude = np.abs(np.where(np.isfinite(w), w, 0.0))
    if atol is None:
        atol = 0.0 if exact else DEFAULT_ATOL * max(1.0, float(magnitude.max(initial=0.0)))
    # Integers compare in their own type (float64 would round 64-bit ones).
    same = (got == want) if exact else (g == w) | (np.isnan(g) & np.isnan(w))
    if same.size == 0:
        return Comparison(True, 0.0, None, 0.0, atol)
    # Where either is not finite and they differ, the error is infinite.
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where(same, 0.0, np.where(np.isfinite(g) & np.isfinite(w), np.abs(g - w),
                                            np.inf))
        rel = diff / np.maximum(magnitude, np.finfo(np.float64).tiny)
    bad = diff > (0.0 if exact else atol + rtol * magnitude)
    worst = int(np.argmax(diff))
    return Comparison(not bad.any(), float(diff.flat[worst]),
                      tuple(int(i) for i in np.unravel_index(worst, diff.shape)),
                      float(rel.max()), atol)


def _print_check(m: Model, outputs, want, rtol, atol, ort_version: str) -> list[str]:
    """One row per flat output tensor (a sequence's elements one by one) against
    onnxruntime's value of the model output it belongs to."""
    tol = f"atol {atol:g}" if atol is not None else \
        f"atol {DEFAULT_ATOL:g} x max(1, largest |value|)"
    print(f"check against onnxruntime {ort_version} (rtol {rtol:g}, {tol}):")
    rows = [("output", "max abs error", "at", "max rel error", "")]
    failed = []
    for v, ref in zip(m.output_values, want):
        mine = list(zip(m.outputs[v.first:v.first + v.count], outputs[v.first:v.first + v.count]))
        note = _value_mismatch(v, ref)
        if note is not None:
            rows.append((v.name, "", "", "", f"DIFFERS: {note}"))
            failed.append(f"output '{v.name}'")
            continue
        if v.kind == "absent":
            rows.append((v.name, "", "", "", "ok (empty)"))
            continue
        for (t, got), r in zip(mine, ref if v.kind == "sequence" else [ref]):
            c = compare(got, np.asarray(r), rtol, atol)
            verdict = "ok" if c.ok else f"DIFFERS{': ' + c.note if c.note else ''}"
            rows.append((t.name, f"{c.max_abs:.3g}", "" if c.at is None else str(list(c.at)),
                         f"{c.max_rel:.3g}", verdict))
            if not c.ok:
                failed.append(f"output '{t.name}'")
    widths = [max(len(r[k]) for r in rows) for k in range(4)]
    for r in rows:
        print(("  " + "  ".join(v.ljust(w) for v, w in zip(r, widths)) + "  " + r[4]).rstrip())
    return failed


def _value_mismatch(v, ref) -> str | None:
    """How onnxruntime's value ``ref`` of model output ``v`` differs in kind or length from
    xlac's, or None."""
    if v.kind == "absent":
        return None if ref is None else "xlac's is empty, onnxruntime's is not"
    if ref is None:
        return "onnxruntime's is empty, xlac's is not"
    if v.kind == "sequence":
        if not isinstance(ref, list):
            return "xlac's is a sequence, onnxruntime's a tensor"
        if len(ref) != v.count:
            return f"{v.count} element(s), onnxruntime's {len(ref)}"
    elif isinstance(ref, list):
        return "xlac's is a tensor, onnxruntime's a sequence"
    return None


# -- xlac bench -------------------------------------------------------------------------------

def bench_command(args) -> int:
    if args.runs < 0 or args.warmup < 0:
        raise XlacError("--runs and --warmup take a count, 0 or more")
    ort = _onnxruntime()
    with tempfile.TemporaryDirectory(prefix="xlac-bench-") as folder:
        prepared = _prepare(args, folder)
    m = prepared.model
    arrays, notes = _inputs(m, args.input, args.seed)
    outputs = [np.empty(t.shape, t.dtype) for t in m.outputs]
    arena = m.new_arena()
    sides = {"xlac": m.bind(arrays, outputs, arena)}
    missing = None
    if prepared.onnx_path is None:
        missing = "the model was given compiled, so xlac is timed alone"
    elif is_hlo_text(prepared.onnx_path):
        missing = "onnxruntime does not read HLO text, so xlac is timed alone"
    elif ort is None:
        missing = f"onnxruntime is not installed, so xlac is timed alone ({INSTALL_ORT})"
    else:
        sess = _ort_session(ort, prepared.onnx_path)
        feeds = _ort_feeds(prepared, arrays)
        sides["onnxruntime"] = lambda: sess.run(None, feeds)
    times = _time(sides, args.runs, args.warmup)
    print(_model_line(prepared))
    for line in notes:
        print(line)
    runs = len(times["xlac"])
    print(f"{runs} timed runs each after {args.warmup} warm-up, alternating, one thread; from "
          "Python: xlac's NAME_run_v through cffi, onnxruntime's InferenceSession.run")
    rows = [("", "median", "min", "max", "spread (IQR)")]
    for side, ts in times.items():
        q1, med, q3 = np.percentile(ts, [25, 50, 75])
        rows.append((side, _seconds(med), _seconds(min(ts)), _seconds(max(ts)),
                     f"{_seconds(q3 - q1)} ({100 * (q3 - q1) / med:.1f}%)"))
    widths = [max(len(r[k]) for r in rows) for k in range(5)]
    for r in rows:
        print("  " + r[0].ljust(widths[0]) + "".join(
            "  " + v.rjust(w) for v, w in zip(r[1:], widths[1:])))
    if "onnxruntime" in times:
        ratio = statistics.median(times["onnxruntime"]) / statistics.median(times["xlac"])
        print(f"xlac is {ratio:.2f}x as fast as onnxruntime (median over median)")
    if missing:
        print(f"note: {missing}")
    return 0


def _time(sides: dict, runs: int, warmup: int) -> dict[str, list[float]]:
    """Seconds per call of each side, alternating calls so that load changes on the
    machine hit every side alike. ``runs`` 0: enough for about a second per side."""
    for fn in sides.values():
        for _ in range(warmup):
            fn()
    if runs == 0:
        slowest = max(_once(fn) for fn in sides.values())
        runs = int(min(10_000, max(10, 1.0 / max(slowest, 1e-9))))
    times: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(runs):
        for side, fn in sides.items():
            times[side].append(_once(fn))
    return times


def _once(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _seconds(s: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


# -- xlac cache -------------------------------------------------------------------------------

def cache_command(args) -> int:
    folder = cache.cache_dir()
    if args.action == "clear":
        removed = cache.clear(folder)
        print(f"removed {len(removed)} libraries ({_bytes(sum(e.size for e in removed))}) "
              f"from {folder}")
        return 0
    found = cache.entries(folder)
    bounds = cache.limits()
    print(f"folder     {folder}  ($XLAC_CACHE_DIR)")
    print(f"libraries  {len(found)}, {_bytes(sum(e.size for e in found))}")
    print(f"bounds     the {bounds.max_entries} most recently used, at most "
          f"{_bytes(bounds.max_bytes)} ($XLAC_CACHE_MAX_ENTRIES, $XLAC_CACHE_MAX_BYTES)")
    return 0


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


COMMANDS = {
    "run": ("compile (or load) a model, run it on given or random inputs, write and check "
            "its outputs", add_run_arguments, run_command),
    "bench": ("time a model beside onnxruntime", add_bench_arguments, bench_command),
    "cache": ("show or clear the folder of libraries xlac.load links", add_cache_arguments,
              cache_command),
}
