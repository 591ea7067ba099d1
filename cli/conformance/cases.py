"""The onnx package's backend test cases: collected, run through xlac, summarized.

The suites: ``node`` (the node cases, ``onnx.backend.test.case.node``, in memory) and
the data sets under ``onnx/backend/test/data/``: ``simple``, ``pytorch-converted``,
``pytorch-operator`` (a model.onnx and test_data_set_*/{input,output}_*.pb per case) and
``light`` (nine CNNs, run on the onnx runner's dummy input against the stored output).
A case's id is its name for node cases (``test_abs``), ``SUITE/NAME`` for the others
(``simple/test_sign_model``).

Each case runs through ``xlac.backend`` as the official runner
(``onnx.backend.test.BackendTest``) runs it: ``prepare`` compiles the model, ``run``
runs every data set, pinning the inputs an op needs at compile time (shapes, axes,
counts) to the data set's values as a user would with ``const_inputs``. Outputs are
compared with the stored ones at the case's tolerances (``rtol``/``atol``; integers and
booleans exactly). A case ends in one of:

    pass          every output of every data set matches
    mismatch      it compiled and ran, and an output differs (the largest error is shown)
    error         xlac refused it with an XlacError (the one-line message is shown)
    out of scope  xlac refused it as out of scope by design (importers/onnx/scope.py)
    crash         any other exception: a bug in xlac (the exception is shown)
    timeout       it ran past --timeout seconds

Each case is attributed to the ops it tests: a node case to the op of its node (an
``_expanded`` case, which holds the op's function body, to the op whose body it is),
a data-set case to the op types of its model. Cases run in worker processes
(``--jobs``).
"""
from __future__ import annotations

import collections
import glob
import json
import multiprocessing
import os
import re
import tempfile
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

SUITES = ("node", "simple", "pytorch-converted", "pytorch-operator", "light")
STATUSES = ("pass", "mismatch", "error", "out of scope", "crash", "timeout")
DEFAULT_DOMAIN = "ai.onnx"


@dataclass
class Case:
    id: str                   # node: the case name; data sets: SUITE/NAME
    suite: str
    ops: tuple[str, ...]      # the ops under test, domain-qualified outside ai.onnx
    rtol: float = 1e-3
    atol: float = 1e-7
    model: object = None      # node cases: the ModelProto (data sets load theirs)
    data_sets: list = field(default_factory=list)
    path: str = ""            # data sets: the case folder, or the light model file

    def load(self) -> tuple[object, list]:
        """The model and its data sets: [(inputs, expected outputs)]."""
        if self.suite == "node":
            return self.model, self.data_sets
        if self.suite == "light":
            return _load_light(self.path)
        return _load_data_set_case(self.path)


@dataclass
class CaseResult:
    id: str
    suite: str
    ops: tuple[str, ...]
    status: str               # one of STATUSES
    detail: str = ""
    seconds: float = 0.0


# -- the cases ---------------------------------------------------------------------------

def _data_dir() -> str:
    import onnx.backend.test
    return os.path.join(os.path.dirname(onnx.backend.test.__file__), "data")


def qualified(domain: str, op_type: str) -> str:
    return op_type if domain in ("", DEFAULT_DOMAIN) else f"{domain}.{op_type}"


def _node_cases() -> list[Case]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases
        cases = collect_testcases()
    # A case made by the runner's expect() is a one-node model of the op under test; its
    # _expanded variants (the op's function body, per opset: _expanded_verN) carry the
    # base case's name.
    op_of = {c.name: qualified(c.model.graph.node[0].domain, c.model.graph.node[0].op_type)
             for c in cases if len(c.model.graph.node) == 1 and "_expanded" not in c.name}
    out = []
    for c in cases:
        base = re.sub(r"_expanded(_ver\d+)?$", "", c.name)
        ops = (op_of[base],) if base in op_of else _model_ops(c.model)   # not made by expect()
        out.append(Case(c.name, "node", ops, c.rtol, c.atol, c.model, list(c.data_sets)))
    return out


def _model_ops(model) -> tuple[str, ...]:
    ops: dict[str, None] = {}
    for n in model.graph.node:
        ops[qualified(n.domain, n.op_type)] = None
    return tuple(ops)


def _data_set_cases(suite: str) -> list[Case]:
    import onnx
    out = []
    if suite == "light":
        for path in sorted(glob.glob(os.path.join(_data_dir(), "light", "light_*.onnx"))):
            name = os.path.basename(path)[len("light_"):-len(".onnx")]
            meta = os.path.join(_data_dir(), "real", f"test_{name}", "data.json")
            tol = json.load(open(meta)) if os.path.exists(meta) else {}
            out.append(Case(f"light/test_{name}", suite,
                            _model_ops(onnx.load(path, load_external_data=False)),
                            tol.get("rtol", 1e-3), tol.get("atol", 1e-7), path=path))
        return out
    for folder in sorted(glob.glob(os.path.join(_data_dir(), suite, "test_*"))):
        model_path = os.path.join(folder, "model.onnx")
        if not os.path.exists(model_path):
            continue
        tol = {}
        if os.path.exists(os.path.join(folder, "data.json")):
            tol = json.load(open(os.path.join(folder, "data.json")))
        out.append(Case(f"{suite}/{os.path.basename(folder)}", suite,
                        _model_ops(onnx.load(model_path)),
                        tol.get("rtol", 1e-3), tol.get("atol", 1e-7), path=folder))
    return out


def collect(suites=SUITES, pattern: str | None = None) -> list[Case]:
    """The cases of ``suites`` whose id matches ``pattern`` (a regex), in suite order."""
    rx = re.compile(pattern) if pattern else None
    out = []
    for suite in suites:
        if suite not in SUITES:
            raise ValueError(f"unknown suite {suite!r}; suites: {', '.join(SUITES)}")
        found = _node_cases() if suite == "node" else _data_set_cases(suite)
        out += [c for c in found if rx is None or rx.search(c.id)]
    return out


def _read_value(path: str, type_proto):
    """A stored input or output, read as the onnx runner reads it (by the graph's type)."""
    import onnx
    from onnx import numpy_helper
    with open(path, "rb") as f:
        data = f.read()
    if type_proto.HasField("sequence_type"):
        return numpy_helper.to_list(onnx.SequenceProto.FromString(data))
    if type_proto.HasField("optional_type"):
        return numpy_helper.to_optional(onnx.OptionalProto.FromString(data))
    return numpy_helper.to_array(onnx.TensorProto.FromString(data))


def _load_data_set_case(folder: str):
    import onnx
    model = onnx.load(os.path.join(folder, "model.onnx"))
    data_sets = []
    for ds in sorted(glob.glob(os.path.join(folder, "test_data_set_*"))):
        n_in = len(glob.glob(os.path.join(ds, "input_*.pb")))
        n_out = len(glob.glob(os.path.join(ds, "output_*.pb")))
        inputs = [_read_value(os.path.join(ds, f"input_{i}.pb"), model.graph.input[i].type)
                  for i in range(n_in)]
        outputs = [_read_value(os.path.join(ds, f"output_{i}.pb"), model.graph.output[i].type)
                   for i in range(n_out)]
        data_sets.append((inputs, outputs))
    return model, data_sets


def _load_light(path: str):
    import onnx
    from onnx.backend.test.runner import Runner
    model = onnx.load(path)
    inits = {t.name for t in model.graph.initializer}
    inputs = [Runner.generate_dummy_data(i, random=False) for i in model.graph.input
              if i.name not in inits]
    outputs = [_read_value(f"{path[:-len('.onnx')]}_output_{k}.pb", o.type)
               for k, o in enumerate(model.graph.output)]
    return model, [(inputs, outputs)]


# -- running one case ----------------------------------------------------------------------

def _expected(value):
    """A stored output as the onnx runner compares it: TensorProtos (types numpy has no
    name for) and numpy scalars as arrays; sequences and optionals as they are."""
    import onnx
    from onnx import numpy_helper
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    return np.asarray(value) if isinstance(value, np.generic) else value


def _kind(value) -> str:
    return ("an empty optional" if value is None else
            f"a sequence of {len(value)}" if isinstance(value, list) else "a tensor")


def _compare(expected, got, rtol: float, atol: float) -> str | None:
    """None if ``got`` matches ``expected``, else why not. A sequence is a list, compared
    element by element; an empty optional is None."""
    expected = _expected(expected)
    if isinstance(expected, list) and isinstance(got, list) and len(expected) == len(got):
        for k, (e, g) in enumerate(zip(expected, got)):
            why = _compare(e, g, rtol, atol)
            if why is not None:
                return f"element {k}: {why}"
        return None
    if expected is None or got is None or isinstance(expected, list) or isinstance(got, list):
        if expected is None and got is None:
            return None
        return f"{_kind(got)}, expected {_kind(expected)}"
    if not isinstance(expected, np.ndarray):
        return f"expected a {type(expected).__name__}, got a tensor"
    got = np.asarray(got)
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


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def run_case(case: Case, target: str | None = None) -> CaseResult:
    """Prepare and run one case through xlac.backend (compiled for ``target``, default
    this machine); never raises."""
    from .. import backend
    from ..hlo import XlacError
    from ..importers.onnx import OutOfScope
    start = time.perf_counter()

    def result(status: str, detail: str = "") -> CaseResult:
        return CaseResult(case.id, case.suite, case.ops, status, detail[:500],
                          round(time.perf_counter() - start, 3))
    try:
        model, data_sets = case.load()
        rep = backend.prepare(model, **({"target": target} if target else {}))
        for inputs, expected in data_sets:
            got = rep.run(inputs)
            if len(got) != len(expected):
                return result("mismatch", f"{len(got)} outputs, expected {len(expected)}")
            for k, (e, g) in enumerate(zip(expected, got)):
                why = _compare(e, g, case.rtol, case.atol)
                if why is not None:
                    return result("mismatch", f"output {k}: {why}")
        return result("pass")
    except OutOfScope as e:
        return result("out of scope", _one_line(e))
    except XlacError as e:
        return result("error", _one_line(e))
    except Exception as e:    # a bug in xlac: the conformance run reports it, not stops
        return result("crash", f"{type(e).__name__}: {_one_line(e)}")


# -- running many -------------------------------------------------------------------------

_CASES: list[Case] = []        # the parent's cases; forked workers inherit them
_TARGET: list = [None]


def _worker(index: int) -> CaseResult:
    return run_case(_CASES[index], _TARGET[0])


def run(cases: list[Case], jobs: int, timeout: float, target: str | None = None
        ) -> list[CaseResult]:
    global _CASES
    _CASES = cases
    _TARGET[0] = target
    results: list[CaseResult] = []
    with tempfile.TemporaryDirectory(prefix="xlac-conformance-") as workdir:
        os.environ.setdefault("XLAC_CACHE_DIR", os.path.join(workdir, "cache"))
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(jobs, maxtasksperchild=50) as pool:
            pending = [(c, pool.apply_async(_worker, (i,))) for i, c in enumerate(cases)]
            for case, job in pending:
                try:
                    results.append(job.get(timeout))
                except multiprocessing.TimeoutError:
                    results.append(CaseResult(case.id, case.suite, case.ops, "timeout",
                                              f"over {timeout:.0f} s"))
    return results


def _counts_line(results: list[CaseResult]) -> str:
    counts = collections.Counter(r.status for r in results)
    return ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s])


def summarize(results: list[CaseResult]) -> str:
    lines = [f"{len(results)} cases: {_counts_line(results)}"]
    for suite in SUITES:
        mine = [r for r in results if r.suite == suite]
        if mine:
            lines.append(f"  {suite}: {len(mine)} cases: {_counts_line(mine)}")
    by_op: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in results:
        if r.suite == "node":
            by_op[r.ops[0]][r.status] += 1
    failing = sorted((op for op, c in by_op.items() if set(c) != {"pass"}),
                     key=lambda op: (-sum(v for k, v in by_op[op].items() if k != "pass"), op))
    if failing:
        lines.append("ops with failing node cases (not passing / all):")
        for op in failing:
            c = by_op[op]
            lines.append(f"  {op}: {sum(c.values()) - c['pass']}/{sum(c.values())}")
    return "\n".join(lines)


def prune_failures(path: str, results: list[CaseResult]) -> int:
    """Remove the cases that passed from a known-failures list (first word of a line: the
    case id); returns how many lines went. It never adds any."""
    passed = {r.id for r in results if r.status == "pass"}
    with open(path) as f:
        lines = f.read().splitlines()
    kept = [line for line in lines if line.split(" ", 1)[0] not in passed]
    with open(path, "w") as f:
        f.write("".join(line + "\n" for line in kept))
    return len(lines) - len(kept)
