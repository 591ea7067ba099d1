"""Models as onnxruntime's own tools leave them, compiled by xlac against onnxruntime.

    python -m xlac.conformance.tool_models             # every tool, one line each
    python -m xlac.conformance.tool_models -k quantize  # tools whose name matches a regex

``python -m xlac.conformance --report docs/onnx-support.md`` runs it too, for the
report's "Models from onnxruntime's tools" section (``report_section``).

Each entry exports a small PyTorch model of torch_models.py (seeded weights, nothing
downloaded), runs one of onnxruntime's tools on it, counts the ops the tool wrote, and
compiles that with xlac, compared with onnxruntime as the real-model corpus is
(real_models.py: its statuses and tolerance). Needs torch (a test extra); without it
every entry is ``missing``.
"""
from __future__ import annotations

import argparse
import collections
import importlib.util
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .real_models import Result, compare, refused

_QUANTIZE_OPTIONS = {"reduce_range": True}     # onnxruntime's AVX2 u8 x s8 kernel saturates


@dataclass(frozen=True)
class ToolModel:
    name: str
    tool: str                          # the tool and its settings, as the report names them
    model: str                         # torch_models' builder: bert, gpt2, decoder, lstm, cnn
    apply: Callable[[Path, Path], None]     # source .onnx -> the tool's .onnx


def _optimize_model(kind: str, **sizes):
    def apply(source: Path, out: Path) -> None:
        from onnxruntime.transformers.optimizer import optimize_model
        optimize_model(str(source), model_type=kind, opt_level=0, use_gpu=False,
                       **sizes).save_model_to_file(str(out))
    return apply


def _session(source: Path, out: Path) -> None:
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(out)
    ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])


def _quantize_dynamic(source: Path, out: Path) -> None:
    from onnxruntime.quantization import quantize_dynamic
    quantize_dynamic(source, out, **_QUANTIZE_OPTIONS)


def _quantize_dynamic_then_session(source: Path, out: Path) -> None:
    _quantize_dynamic(source, out.with_suffix(".quantized.onnx"))
    _session(out.with_suffix(".quantized.onnx"), out)


def _matmul_nbits(source: Path, out: Path) -> None:
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    quantizer = MatMulNBitsQuantizer(onnx.load(source), bits=4, block_size=32,
                                     op_types_to_quantize=("MatMul", "Gather"))
    quantizer.process()
    quantizer.model.save_model_to_file(str(out))


TOOLS: tuple[ToolModel, ...] = (
    ToolModel("transformer-optimizer-bert", "transformers.optimizer.optimize_model "
              "(model_type bert, opt_level 0)", "bert",
              _optimize_model("bert", num_heads=4, hidden_size=64)),
    ToolModel("transformer-optimizer-gpt2", "transformers.optimizer.optimize_model "
              "(model_type gpt2, opt_level 0)", "gpt2",
              _optimize_model("gpt2", num_heads=4, hidden_size=32)),
    ToolModel("quantize-dynamic-lstm", "quantization.quantize_dynamic (reduce_range)",
              "lstm", _quantize_dynamic),
    ToolModel("quantize-dynamic-bert", "quantization.quantize_dynamic (reduce_range), "
              "then a session at ORT_ENABLE_EXTENDED", "bert", _quantize_dynamic_then_session),
    ToolModel("matmul-nbits-decoder", "quantization.MatMulNBitsQuantizer (4 bits, blocks "
              "of 32, MatMul and Gather)", "decoder", _matmul_nbits),
    ToolModel("session-extended-cnn", "a session at ORT_ENABLE_EXTENDED "
              "(optimized_model_filepath)", "cnn", _session),
)


def histogram(model) -> collections.Counter:
    """Ops by type, com.microsoft's (and other domains') prefixed with their domain."""
    return collections.Counter(f"{n.domain}.{n.op_type}" if n.domain else n.op_type
                               for n in model.graph.node)


@dataclass
class ToolResult(Result):
    ops: dict | None = None            # the histogram of what the tool wrote


def written_model(entry: ToolModel, folder: Path):
    """``entry``'s model as its tool writes it (saved as ``folder``/NAME.onnx, loaded),
    and the model's inputs by name. Needs torch."""
    import onnx

    from . import torch_models
    model, inputs = getattr(torch_models, entry.model)()
    source, out = folder / f"{entry.model}.onnx", folder / f"{entry.name}.onnx"
    onnx.save(model, source)
    entry.apply(source, out)
    written = onnx.load(out)
    return written, {i.name: x for i, x in zip(written.graph.input, inputs)}


def run_tool(entry: ToolModel, workdir: str | Path) -> ToolResult:
    """Build, apply the tool, compile and compare ``entry``; never raises."""
    result = ToolResult(entry.name, "missing")
    if importlib.util.find_spec("torch") is None:     # torch_models needs it
        result.detail = "pip install torch"
        return result
    import xlac

    folder = Path(workdir)
    written, feeds = written_model(entry, folder)
    out = folder / f"{entry.name}.onnx"
    result.ops = dict(sorted(histogram(written).items()))
    result.opset = next((o.version for o in written.opset_import
                         if o.domain in ("", "ai.onnx")), None)
    try:
        start = time.perf_counter()
        compiled = xlac.compile(written, folder / f"{entry.name}.o",
                                input_shapes={n: x.shape for n, x in feeds.items()})
        result.compile_s = time.perf_counter() - start
        result.arena_bytes = compiled.arena_size
        got = xlac.load(compiled.output)(*feeds.values())
        expected = _onnxruntime(out, feeds)
        compare(result, expected, got, [o.name for o in written.graph.output])
    except Exception as e:
        refused(result, e)
    return result


def _onnxruntime(path: Path, feeds: dict):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1      # DynamicQuantizeLSTM groups batch rows by thread
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def run(pattern: str | None = None) -> list[ToolResult]:
    rx = re.compile(pattern) if pattern else None
    chosen = [t for t in TOOLS if rx is None or rx.search(t.name)]
    with tempfile.TemporaryDirectory(prefix="xlac-tool-models-") as workdir:
        return [run_tool(t, workdir) for t in chosen]


def _ops_text(ops: dict | None) -> str:
    """The histogram, com.microsoft's ops first (what the tool added), then the rest."""
    if not ops:
        return ""
    ms = "com.microsoft."
    added = [f"**{op[len(ms):]}** x{n}" for op, n in ops.items() if op.startswith(ms)]
    rest = [f"{op} x{n}" for op, n in ops.items() if not op.startswith(ms)]
    return ", ".join(added + rest)


def table(results: list[ToolResult]) -> str:
    entries = {t.name: t for t in TOOLS}
    lines = ["| tool | model | ops it wrote (com.microsoft in bold) | status | max abs error "
             "| arena bytes | compile s |", "|---|---|---|---|---|---|---|"]
    for r in results:
        t = entries[r.name]
        status = r.status if r.status == "pass" or not r.detail else f"{r.status}: {r.detail}"
        abs_error = "" if r.max_abs_error is None else f"{r.max_abs_error:.2g}"
        arena = "" if r.arena_bytes is None else f"{r.arena_bytes:,}"
        seconds = "" if r.compile_s is None else f"{r.compile_s:.1f}"
        lines.append(f"| {t.tool} | {t.model} | {_ops_text(r.ops)} | "
                     f"{status.replace('|', '/')} | {abs_error} | {arena} | {seconds} |")
    return "\n".join(lines) + "\n"


def report_section(results: list[ToolResult]) -> list[str]:
    """The "Models from onnxruntime's tools" section of the support report."""
    return [
        "## Models from onnxruntime's tools",
        "",
        "Small PyTorch models with seeded weights (`cli/conformance/torch_models.py`: a "
        "BERT-style encoder, a GPT-2-style decoder with past keys and values, a decoder of "
        "linear layers, a 2-layer LSTM, a CNN) as onnxruntime's transformer optimizer, "
        "quantizers and session optimizer leave them, from `python -m "
        "xlac.conformance.tool_models`: the ops each tool wrote, and xlac against "
        "onnxruntime (one thread) at the real models' tolerance.",
        "",
        table(results).rstrip("\n"),
    ]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m xlac.conformance.tool_models",
                                description="Run onnxruntime's tools on small models and "
                                "compare xlac with onnxruntime on what they write.")
    p.add_argument("-k", dest="pattern", help="only tools whose name matches this regex")
    args = p.parse_args(argv)
    for r in run(args.pattern):
        numbers = f"  max abs {r.max_abs_error:.2g}" if r.max_abs_error is not None else ""
        print(f"{r.status:12} {r.name:28}{numbers}  {r.detail}")
        print(f"{'':12} {_ops_text(r.ops)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
