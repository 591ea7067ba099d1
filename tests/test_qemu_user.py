"""Models cross-compiled for AArch64 and RISC-V 64 Linux, linked statically with the
Debian cross compilers and run under qemu-user, against onnxruntime.

Per target each model is compiled once (``--name model``), linked with
tests/cross_main.c (reads inputK.bin, writes outputK.bin) by ``<triple>-gcc -static``,
and run under ``qemu-aarch64`` / ``qemu-riscv64``, all programs at once. The models: the
MLPerf Tiny four of benchmarks/memory_models.py, LeNet (examples/lenet.onnx) and the
onnx package's light ShuffleNet with seeded random weights (on its logits as well),
at rtol 1e-4, atol 1e-4 x the largest |value|. RISC-V runs twice: the rv64gc default,
and with ``--features +v`` on an emulated CPU with the V extension (VLEN 128) for the
models whose kernels it vectorizes most. The kernels' use of NEON and RVV, and the
base ISA's lack of vector code, are checked in the objects' disassembly.

Quantized models (tests/quantized_models.py, "_int8") run too, on AArch64 without and
with the dot product extension and on rv64gc: integer arithmetic, so their outputs must
equal those of xlac's build for this machine bit for bit. Not with RVV: qemu 7.2 aborts
on its float-to-integer conversions with rounding toward zero (vfcvt.rtz, vfncvt.rtz;
``decode_save_opc`` assertion), which every quantization of a float input uses;
tests/test_quantized_kernels.py checks the RVV int8 kernels' instructions instead.
"""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import xlac
from cross import ROOT, assert_close, max_error, read_outputs, run, run_all, write_inputs
from quantized_models import host_outputs, is_quantized, quantized
from tools import require_tools

sys.path.insert(0, str(ROOT / "benchmarks"))
from memory_models import MODELS  # noqa: E402
from test_light_models import LIGHT_DIR, dummy_input, randomize_weights  # noqa: E402
from test_light_models import expose_logits as light_logits  # noqa: E402
from test_memory_models import expose_logits  # noqa: E402

RECORD = ROOT / "build" / "qemu_user.json"
MLPERF_TINY = ("ds_cnn", "resnet8", "mobilenet_v1_025_vww", "fc_autoencoder")
INT8 = ("ds_cnn_int8", "resnet8_int8")
ALL_MODELS = (*MLPERF_TINY, "lenet", "shufflenet", *INT8)


@dataclass(frozen=True)
class Target:
    triple: str
    features: str | None
    prefix: str                  # of the cross tools: <prefix>-gcc, <prefix>-objdump
    qemu: tuple[str, ...]
    models: tuple[str, ...]


TARGETS = {
    "aarch64": Target("aarch64-unknown-linux-gnu", None, "aarch64-linux-gnu",
                      ("qemu-aarch64",), ALL_MODELS),
    "aarch64+dotprod": Target("aarch64-unknown-linux-gnu", "+dotprod", "aarch64-linux-gnu",
                              ("qemu-aarch64",), INT8),
    "riscv64": Target("riscv64-unknown-linux-gnu", None, "riscv64-linux-gnu",
                      ("qemu-riscv64",), ALL_MODELS),
    "riscv64+v": Target("riscv64-unknown-linux-gnu", "+v", "riscv64-linux-gnu",
                        ("qemu-riscv64", "-cpu", "rv64,v=true,vlen=128,elen=64,vext_spec=v1.0"),
                        ("lenet", "ds_cnn", "shufflenet")),
}


def _model(name: str) -> tuple[onnx.ModelProto, list[np.ndarray]]:
    if is_quantized(name):
        model = quantized(name)
    elif name == "lenet":
        model = onnx.load(ROOT / "examples" / "lenet.onnx")
    elif name == "shufflenet":
        model = light_logits(randomize_weights(onnx.load(LIGHT_DIR / "light_shufflenet.onnx")))
        return model, [dummy_input(model, random=True)]
    else:
        model = expose_logits(MODELS[name]())
    rng = np.random.default_rng(0)
    return model, [rng.standard_normal([d.dim_value for d in v.type.tensor_type.shape.dim])
                   .astype(np.float32) for v in model.graph.input]


@dataclass
class Result:
    expected: list[np.ndarray]
    folder: Path
    report: dict
    outputs: list[np.ndarray] | None = None


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[tuple[str, str], Result]:
    tools = {t for target in TARGETS.values()
             for t in (f"{target.prefix}-gcc", target.qemu[0])}
    require_tools(*sorted(tools))
    root = tmp_path_factory.mktemp("qemu-user")
    runtime_dir = Path(xlac.runtime_c.__file__).parent
    models = {}
    for name in ALL_MODELS:
        model, inputs = _model(name)
        if is_quantized(name):
            expected = host_outputs(model, inputs, tmp_path_factory.mktemp(name))
        else:
            session = ort.InferenceSession(model.SerializeToString())
            feeds = {v.name: x for v, x in zip(session.get_inputs(), inputs)}
            expected = session.run(None, feeds)
        models[name] = (model, inputs, expected)
    out: dict[tuple[str, str], Result] = {}
    jobs = []
    for key, target in TARGETS.items():
        for name in target.models:
            model, inputs, expected = models[name]
            folder = root / key / name
            folder.mkdir(parents=True)
            compiled = xlac.compile(model, folder / "model.o", name="model", target=target.triple,
                                    features=target.features, report=True)
            run([f"{target.prefix}-gcc", "-static", "-O2", "-std=c11", "-Wall", "-Wextra",
                 f"-I{folder}", f"-I{runtime_dir}", ROOT / "tests" / "cross_main.c",
                 folder / "model.o", "-o", folder / "app"])
            write_inputs(folder, inputs)
            out[key, name] = Result(expected, folder, compiled.report)
            jobs.append(([*target.qemu, "./app"], folder))
    for (key, name), done in zip(out, run_all(jobs)):
        assert done.returncode == 0, f"{key} {name}:\n{done.stdout}{done.stderr}"
        r = out[key, name]
        r.outputs = read_outputs(r.folder, r.expected)
    yield out
    rows = {f"{k}/{m}": {"max_error": max_error(r.outputs, r.expected),
                         "flash_bytes": r.report["flash_bytes"],
                         "ram_bytes": r.report["ram_bytes"],
                         "stack_bytes": r.report["stack_bytes"]}
            for (k, m), r in out.items() if r.outputs is not None}
    RECORD.parent.mkdir(exist_ok=True)
    RECORD.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"\n{'target/model':34} {'max err':>9} {'flash':>9} {'arena':>8} {'stack':>6}")
    for key, row in rows.items():
        print(f"{key:34} {row['max_error']:9.2e} {row['flash_bytes']['total']:9d} "
              f"{row['ram_bytes']['arena']:8d} {row['stack_bytes']:6d}")


CASES = [(k, m) for k, t in TARGETS.items() for m in t.models]


@pytest.mark.parametrize("target,model", [c for c in CASES if not is_quantized(c[1])])
def test_matches_onnxruntime(results, target, model):
    r = results[target, model]
    assert_close(r.outputs, r.expected)


@pytest.mark.parametrize("target,model", [c for c in CASES if is_quantized(c[1])])
def test_quantized_model_matches_this_machine_exactly(results, target, model):
    r = results[target, model]
    for got, want in zip(r.outputs, r.expected, strict=True):
        assert np.array_equal(got, want), f"{int((got != want).sum())} of {got.size} differ"


def test_aarch64_int8_kernels_use_sdot_or_smull_sadalp(results):
    plain = {op for op, _ in _instructions(results, "aarch64", "resnet8_int8")}
    dotprod = {op for op, _ in _instructions(results, "aarch64+dotprod", "resnet8_int8")}
    assert {"smull", "sadalp"} <= plain and "sdot" not in plain
    assert "sdot" in dotprod


def _instructions(results, target: str, model: str) -> list[tuple[str, str]]:
    """(mnemonic, operands) of every instruction of the object, by the target's objdump."""
    objdump = f"{TARGETS[target].prefix}-objdump"
    require_tools(objdump)
    text = subprocess.run([objdump, "-d", results[target, model].folder / "model.o"],
                          capture_output=True, text=True, check=True).stdout
    out = []
    for line in text.splitlines():   # "  addr:\tbytes \tmnemonic\toperands"
        parts = line.split("\t")
        if len(parts) >= 3 and parts[2].strip():
            out.append((parts[2].strip(), parts[3].strip() if len(parts) > 3 else ""))
    return out


def test_aarch64_kernels_use_neon(results):
    ins = _instructions(results, "aarch64", "shufflenet")
    assert sum(op == "fmla" and args.startswith("v") and ".4s" in args
               for op, args in ins) > 50, "vector multiply-adds on 4 float lanes"


def test_riscv_kernels_use_the_v_extension_when_asked(results):
    ops = [op for op, _ in _instructions(results, "riscv64+v", "shufflenet")]
    assert {"vsetvli", "vle32.v", "vse32.v"} <= set(ops)
    assert sum(op.startswith(("vfmacc.", "vfmadd.")) for op in ops) > 50


def test_riscv_base_isa_has_no_vector_instructions(results):
    ops = [op for op, _ in _instructions(results, "riscv64", "shufflenet")]
    assert ops and not [op for op in ops if op.startswith("v")]
