"""Models on emulated Cortex-M boards, built and run as examples/cortex-m/ shows.

For each board (Cortex-M4F hard float, Cortex-M33 hard float, Cortex-M3 soft float),
each model is compiled once and linked with arm-none-eabi-gcc, newlib and the example's
start-up code and linker script by examples/cortex-m/Makefile; the firmware runs
under qemu-system-arm, all of them at once, reading its inputs and writing its outputs
through semihosting. The outputs must match onnxruntime (rtol 1e-4, atol 1e-4 x the
largest |value|, on the logits where the model ends in a softmax), and the stack the
firmware measured (a painted stack) must be within the header's NAME_STACK_SIZE plus
what newlib's memcpy/memset take.

The models: the MLPerf Tiny four of benchmarks/memory_models.py, the table of integer
layers of tests/test_quantized_kernels.py (QLinearConv of every shape the kernels
special-case, QLinearMatMul, QLinearAdd: equal to onnxruntime bit for bit), the same four
quantized (tests/quantized_models.py, "_int8": integer arithmetic, so their outputs must
equal those of xlac's build for this machine bit for bit; smlad on the DSP boards, plain
multiply-adds on the Cortex-M3), and a small one of
element-wise math (fmod, which the C library computes: on hard-float boards its
arguments travel in FPU registers; transcendental functions; f64 arithmetic, which a
single-precision FPU leaves to the compiler's runtime). Flash,
RAM and stack per board and model are printed at the end and written to
build/cortex_m.json.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from cross import ROOT, assert_close, max_error, read_outputs, run_all, write_inputs
from quantized_models import host_outputs, is_quantized, quantized
from test_quantized_kernels import layers_model
from tools import require_tools

sys.path.insert(0, str(ROOT / "benchmarks"))
from memory_models import MODELS  # noqa: E402
from test_memory_models import expose_logits  # noqa: E402

EXAMPLE = ROOT / "examples" / "cortex-m"
RECORD = ROOT / "build" / "cortex_m.json"
# The boards of examples/cortex-m/Makefile.
BOARDS = {"cortex-m4f": "mps2-an386", "cortex-m33": "mps2-an505", "cortex-m7": "mps2-an500",
          "cortex-m3": "mps2-an385"}
MLPERF_TINY = ("ds_cnn", "resnet8", "mobilenet_v1_025_vww", "fc_autoencoder")
INT8 = tuple(f"{m}_int8" for m in MLPERF_TINY)
# Streamed int8 builds on the Cortex-M4F (--memory-budget): half the arena TensorFlow
# Lite Micro's planner needs for the same int8 models (24,224 and 58,376 bytes).
STREAMED = {"ds_cnn_int8": 24_224 // 2, "resnet8_int8": 58_376 // 2}
# A bounded-batch build on the Cortex-M4F (--bound batch=2): the firmware calls
# NAME_run_v, which runs both samples through the one-sample code.
BOUNDED = {"ds_cnn": 2}
# newlib's memcpy / memset frames, which NAME_STACK_SIZE leaves out.
LIBRARY_STACK = 64


def math_model() -> onnx.ModelProto:
    """fmod (libm), tanh / exp / sqrt (xlac's own math) and f64 arithmetic."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [64])
            for n in ("fmod", "tanh", "exp", "sqrt", "f64")]
    three = helper.make_tensor("three", TensorProto.DOUBLE, [], [3.0])
    quarter = helper.make_tensor("quarter", TensorProto.FLOAT, [], [0.25])
    nodes = [
        helper.make_node("Mod", ["x", "y"], ["fmod"], fmod=1),
        helper.make_node("Tanh", ["x"], ["tanh"]),
        helper.make_node("Mul", ["x", "quarter"], ["xq"]),
        helper.make_node("Exp", ["xq"], ["exp"]),
        helper.make_node("Abs", ["x"], ["ax"]),
        helper.make_node("Sqrt", ["ax"], ["sqrt"]),
        helper.make_node("Cast", ["x"], ["xd"], to=TensorProto.DOUBLE),
        helper.make_node("Mul", ["xd", "three"], ["x3"]),
        helper.make_node("Cast", ["x3"], ["f64"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(nodes, "math", [x, y], outs, [three, quarter])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


LAYERS = "int8_layers"


def _model(name: str) -> onnx.ModelProto:
    if name == LAYERS:
        return layers_model()[0]
    if is_quantized(name):
        return quantized(name)
    return math_model() if name == "math" else expose_logits(MODELS[name]())


def _batched(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the first dimension of its inputs and outputs named ``batch``."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.value_info[:]
    for v in list(out.graph.input) + list(out.graph.output):
        v.type.tensor_type.shape.dim[0].dim_param = "batch"
    return out


def _inputs(model: onnx.ModelProto) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    out = []
    for v in model.graph.input:
        shape = [d.dim_value for d in v.type.tensor_type.shape.dim]
        out.append((rng.standard_normal(shape) * 4).astype(np.float32))
    return out


@dataclass
class Run:
    board: str
    model: str
    expected: list[np.ndarray]
    outputs: list[np.ndarray] | None = None
    stdout: str = ""
    report: dict = field(default_factory=dict)
    stack_measured: int | None = None
    header_stack: int | None = None


def _make(board: str, model_path: Path, build: Path, *goals: str, flags: str = "") -> list:
    return ["make", "-s", "-C", EXAMPLE, f"BOARD={BOARDS[board]}", f"MODEL={model_path}",
            f"BUILD={build}", f"XLAC={sys.executable} -m xlac.main", f"XLACFLAGS={flags}",
            *goals]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[tuple[str, str], Run]:
    require_tools("make", "arm-none-eabi-gcc", "qemu-system-arm")
    root = tmp_path_factory.mktemp("cortex-m")
    results: dict[tuple[str, str], Run] = {}
    builds = []
    for name in (*MLPERF_TINY, "math", *INT8, LAYERS):
        model = _model(name)
        path = root / f"{name}.onnx"
        onnx.save(model, path)
        inputs = _inputs(model) if name != LAYERS else list(layers_model()[1].values())
        if is_quantized(name):
            expected = host_outputs(model, inputs, root)
        else:
            session = ort.InferenceSession(model.SerializeToString())
            expected = session.run(None, {v.name: x for v, x in zip(model.graph.input,
                                                                   inputs)})
        for board in BOARDS:
            build = root / board / name
            build.mkdir(parents=True)
            write_inputs(build, inputs)
            results[board, name] = Run(board, name, expected)
            builds.append((_make(board, path, build), root))
        if name in STREAMED:
            build = root / "cortex-m4f" / f"{name}_streamed"
            build.mkdir(parents=True)
            write_inputs(build, inputs)
            results["cortex-m4f", f"{name}_streamed"] = Run("cortex-m4f", name, expected)
            builds.append((_make("cortex-m4f", path, build,
                                 flags=f"--memory-budget {STREAMED[name]}"), root))
        if name in BOUNDED:
            n, batched = BOUNDED[name], _batched(model)
            onnx.save(batched, root / f"{name}_bounded.onnx")
            rng = np.random.default_rng(1)
            x = [(rng.standard_normal((n, *a.shape[1:])) * 4).astype(np.float32)
                 for a in inputs]
            want = ort.InferenceSession(batched.SerializeToString()).run(
                None, {v.name: a for v, a in zip(batched.graph.input, x)})
            build = root / "cortex-m4f" / f"{name}_bounded"
            build.mkdir(parents=True)
            write_inputs(build, x)
            results["cortex-m4f", f"{name}_bounded"] = Run("cortex-m4f", f"{name}_bounded",
                                                           want)
            builds.append((_make("cortex-m4f", root / f"{name}_bounded.onnx", build,
                                 flags=f"--bound batch={n}"), root))
    # Two makes at a time (compiling is CPU-bound), then every emulator at once.
    for done, (cmd, _) in zip(run_all(builds), builds):
        assert done.returncode == 0, f"{' '.join(map(str, cmd))}:\n{done.stdout}{done.stderr}"
    keys = list(results)
    qemu = [(_make(b, root / f"{results[b, m].model}.onnx", root / b / m, "run"), root)
            for b, m in keys]
    for (board, name), done in zip(keys, run_all(qemu)):
        r = results[board, name]
        build = root / board / name
        r.stdout = done.stdout + done.stderr
        assert done.returncode == 0, f"{board} {name}: firmware failed:\n{r.stdout}"
        r.outputs = read_outputs(build, r.expected)
        r.report = json.loads((build / "report.json").read_text())
        m = re.search(r"model: status 0, stack (\d+) bytes", r.stdout)
        r.stack_measured = int(m.group(1)) if m else None
        h = re.search(r"#define model_STACK_SIZE (\d+)u", (build / "model.h").read_text())
        r.header_stack = int(h.group(1)) if h else None
    yield results
    _record(results)


def _record(results) -> None:
    rows = {f"{b}/{m}": {"max_error": max_error(r.outputs, r.expected),
                         "flash_bytes": r.report["flash_bytes"],
                         "ram_bytes": r.report["ram_bytes"],
                         "stack_bytes": r.report["stack_bytes"],
                         "stack_measured": r.stack_measured}
            for (b, m), r in results.items() if r.outputs is not None}
    RECORD.parent.mkdir(exist_ok=True)
    RECORD.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"\n{'board/model':34} {'max err':>9} {'code':>7} {'weights':>9} {'rodata':>7} "
          f"{'arena':>8} {'stack':>6} {'used':>6}")
    for key, row in rows.items():
        f = row["flash_bytes"]
        print(f"{key:34} {row['max_error']:9.2e} {f['code']:7d} {f['weights']:9d} "
              f"{f['rodata']:7d} {row['ram_bytes']['arena']:8d} {row['stack_bytes']:6d} "
              f"{row['stack_measured']:6d}")


CASES = [(b, m) for m in (*MLPERF_TINY, "math", *INT8, LAYERS) for b in BOARDS]


@pytest.mark.parametrize("board,model", [c for c in CASES if not is_quantized(c[1])
                                         and c[1] != LAYERS])
def test_matches_onnxruntime(runs, board, model):
    r = runs[board, model]
    assert_close(r.outputs, r.expected)


@pytest.mark.parametrize("board", BOARDS)
def test_integer_layers_equal_onnxruntime_exactly(runs, board):
    """Each kernel shape of the DSP (smlad, smlabb) and plain (M3) paths on the board:
    stems packed into words, depthwise in words of four channels and the channels left
    over, padding, strides, dilation, groups, u8 and s8."""
    r = runs[board, LAYERS]
    names = [o.name for o in layers_model()[0].graph.output]
    for name, got, want in zip(names, r.outputs, r.expected, strict=True):
        assert got.dtype == want.dtype and np.array_equal(got, want), \
            f"{name}: {int((got != want).sum())} of {got.size} differ"


@pytest.mark.parametrize("name", BOUNDED)
def test_a_bounded_batch_runs_every_sample_on_the_board(runs, name):
    """The sample loop and its 32-bit size_t on Thumb: both samples match onnxruntime,
    in one sample's arena."""
    r = runs["cortex-m4f", f"{name}_bounded"]
    assert_close(r.outputs, r.expected)
    assert r.report["bound"] == {"symbol": "batch", "limit": BOUNDED[name]}
    assert r.report["ram_bytes"]["arena"] == runs["cortex-m4f", name].report["ram_bytes"]["arena"]


@pytest.mark.parametrize("board,model", [c for c in CASES if is_quantized(c[1])])
def test_quantized_model_matches_this_machine_exactly(runs, board, model):
    r = runs[board, model]
    for got, want in zip(r.outputs, r.expected, strict=True):
        assert np.array_equal(got, want), f"{int((got != want).sum())} of {got.size} differ"


@pytest.mark.parametrize("name", MLPERF_TINY)
def test_int8_builds_take_a_quarter_of_the_memory(runs, name):
    """Flash for the weights and the arena in RAM: int8 bytes, not f32 ones."""
    f32, int8 = runs["cortex-m4f", name].report, runs["cortex-m4f", f"{name}_int8"].report
    assert int8["ram_bytes"]["arena"] <= 0.3 * f32["ram_bytes"]["arena"] or \
        int8["ram_bytes"]["arena"] <= 1024
    assert int8["flash_bytes"]["weights"] <= 0.45 * f32["flash_bytes"]["weights"]


@pytest.mark.parametrize("name", STREAMED)
def test_streamed_int8_fits_half_of_tflm_and_is_exact(runs, name):
    """Row streaming on the board: the arena under half of TFLite Micro's, the outputs
    those of the unstreamed build, bit for bit."""
    r = runs["cortex-m4f", f"{name}_streamed"]
    assert r.report["ram_bytes"]["arena"] <= STREAMED[name]
    for got, want in zip(r.outputs, r.expected, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("board,model", CASES)
def test_stack_stays_within_the_header_figure(runs, board, model):
    r = runs[board, model]
    assert r.header_stack == r.report["stack_bytes"] > 0
    assert r.stack_measured is not None, r.stdout
    assert r.stack_measured <= r.header_stack + LIBRARY_STACK


@pytest.mark.parametrize("board", BOARDS)
def test_flash_and_ram_come_from_the_object(runs, board):
    r = runs[board, "resnet8"]
    flash, ram = r.report["flash_bytes"], r.report["ram_bytes"]
    assert flash["total"] == flash["code"] + flash["weights"] + flash["rodata"]
    # The weights section holds the model's constants (LLVM may fold a few tiny ones).
    assert 0.99 * r.report["weight_bytes"] <= flash["weights"] <= r.report["weight_bytes"]
    assert 0 < flash["code"] < 64 * 1024 and 0 < flash["rodata"] < 4096
    assert ram == {"arena": r.report["arena_bytes"], "data": 0, "total": r.report["arena_bytes"]}



def test_profile_counts_each_step_on_the_board(runs, tmp_path):
    """EmitOptions(profile_counter=the board's FPGAIO counter): M-profile has no cycle
    counter LLVM reads, so each step is bracketed by reads of the memory-mapped one;
    main.c (-DPROFILE_SITES=N) writes the ticks per step. Every step of the int8 DS-CNN
    counts, together they are the call's ticks less the brackets' own, and the outputs
    are the unprofiled build's."""
    from models import compile_profiled
    from xlac.backends import make_backend
    from xlac.emitter import EmitOptions
    from xlac.optimizer import plan_memory

    name, counter = "ds_cnn_int8", 0x40028018
    model = _model(name)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    backend = make_backend("thumbv7em-none-eabihf", "cortex-m4")
    build = tmp_path / "build"
    build.mkdir()
    # model.o and model.h, newer than the model: make links them as they are
    _, module, art = compile_profiled("model", model, build / "model.o", backend=backend,
                                      counter=counter)
    ir = backend.emit(module, plan_memory(module, backend),
                      EmitOptions("model", profile=True, profile_counter=counter),
                      ("llvm",)).llvm_ir
    r = runs["cortex-m4f", name]
    write_inputs(build, _inputs(model))
    flags = [f"EXTRA_CFLAGS=-DPROFILE_SITES={len(art.profile_sites)}", "COUNT=1"]
    for goals in ((), ("run",)):
        done = subprocess.run(_make("cortex-m4f", path, build, *flags, *goals),
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
    ticks = int(re.search(r"model: (\d+) ticks", done.stdout).group(1))
    steps = np.fromfile(build / "profile.bin", np.uint64)
    assert len(steps) == len(art.profile_sites) > 8
    assert (steps > 0).sum() >= 9          # the nine convolutions at least
    assert 0.9 * ticks <= steps.sum() <= ticks
    assert "readcyclecounter" not in ir and "load atomic i32, ptr inttoptr" in ir
    for got, want in zip(read_outputs(build, r.expected), r.expected, strict=True):
        np.testing.assert_array_equal(got, want)
