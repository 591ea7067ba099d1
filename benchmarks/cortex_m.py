"""xlac's int8 MLPerf Tiny models on an emulated Cortex-M: instructions per inference,
flash and RAM.

    python benchmarks/cortex_m.py [--board mps2-an386] [--only NAME] [--float | --int8-io]
                                  [--build build/cortex_m] [--profile MODEL [--top 15]]
                                  [--tflm SOURCES [--tflm-cache DIR]] [--cycles]

Each model of benchmarks/memory_models.py's MLPerf Tiny four is quantized as users
quantize it (benchmarks/int8.py: onnxruntime's QDQ, per-channel int8 weights, int8
activations, calibrated on seeded random inputs), compiled for the board's CPU and
linked by examples/cortex-m/Makefile with ``COUNT=1``: main.c reads the board's FPGAIO
counter around the model call and QEMU runs with ``-icount shift=0``, one virtual
nanosecond per executed instruction, so the counter advances once per fixed number of
instructions (40 on the 25 MHz MPS2 counter); a calibration loop of known length
measures that number on every run. The figure counts instructions, not cycles.

``--int8-io``: the models' inputs and outputs as 8-bit values (``xlac --int8-io``), as
TFLite Micro takes them: no quantization of a float input in the call.

``--profile MODEL``: the instructions of each step (a layer's kernel, a fused loop),
from an object compiled with ``EmitOptions(profile=True, profile_counter=...)``: each
step bracketed by reads of the same counter, main.c writing the ticks per step to
profile.bin (a few counter reads per step are counted in too).

``--tflm SOURCES``: TensorFlow Lite Micro with CMSIS-NN beside it, built from source
and run on the MLPerf Tiny reference .tflite models the same way (benchmarks/tflm.py
says how and from what), with the ratio of instructions and their geomean; with
``--profile``, TFLM's instructions per operator too.

``--cycles`` (Cortex-M4F): beside the instructions, cycles estimated from a QEMU trace
of the call with the Cortex-M4's instruction timings (benchmarks/cycles.py), for xlac
and, with ``--tflm``, for TFLM's Invoke().

Flash and RAM are xlac's report for the object (code + weights + read-only data; arena
+ static data): what the model adds to a firmware. The call's outputs are checked
against xlac's build for this machine (int8 arithmetic: the same bits on every target).
Needs Debian's gcc-arm-none-eabi, libnewlib-arm-none-eabi and qemu-system-arm.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx

import xlac

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EXAMPLE = ROOT / "examples" / "cortex-m"
sys.path.insert(0, str(HERE))
from cycles import estimate  # noqa: E402
from int8 import quantize  # noqa: E402
from memory_models import MODELS  # noqa: E402

MLPERF_TINY = ("ds_cnn", "resnet8", "mobilenet_v1_025_vww", "fc_autoencoder")
# examples/cortex-m/Makefile's boards: the core, its target and the FPGAIO counter.
BOARDS = {"mps2-an386": ("Cortex-M4F", "thumbv7em-none-eabihf", "cortex-m4", 0x40028018),
          "mps2-an505": ("Cortex-M33", "thumbv8m.main-none-eabihf", "cortex-m33", 0x40302018),
          "mps2-an500": ("Cortex-M7", "thumbv7em-none-eabihf", "cortex-m7", 0x40028018),
          "mps2-an385": ("Cortex-M3", "thumbv7m-none-eabi", "cortex-m3", 0x40028018)}
# main.c's calibration loop: 2^20 iterations of subs/bne, and a mov.
CALIBRATION_INSTRUCTIONS = 2 * 2**20 + 1


def counter_line(stdout: str) -> tuple[int, float]:
    """The call's counter ticks and instructions per tick, from main.c's counter line."""
    m = re.search(r"model: (\d+) ticks, calibration (\d+) ticks for (\d+) instructions",
                  stdout)
    if m is None:
        raise RuntimeError(f"no counter line in the firmware's output:\n{stdout}")
    ticks, cal, n = map(int, m.groups())
    return ticks, n / cal


def instructions(stdout: str) -> int:
    """The call's instructions."""
    ticks, per_tick = counter_line(stdout)
    return round(ticks * per_tick)


def make(board: str, model: Path, build: Path, *goals: str,
         int8_io: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "-s", "-C", str(EXAMPLE), f"BOARD={board}", f"MODEL={model}",
         f"BUILD={build}", f"XLAC={sys.executable} -m xlac.main", "COUNT=1",
         *(["XLACFLAGS=--int8-io"] if int8_io else []), *goals],
        capture_output=True, text=True, timeout=1800)


def quantized_inputs(header: str, model, inputs: list[np.ndarray]):
    """``inputs`` as an --int8-io build takes them: quantized with the header's scale
    and zero point, as the model's QuantizeLinear does."""
    out = []
    for port, x in zip(model.inputs, inputs):
        info = np.iinfo(port.dtype)
        scale = float(re.search(rf"_{port.c_name}_SCALE (\S+)f$", header, re.M).group(1))
        zero = int(re.search(rf"_{port.c_name}_ZERO_POINT (-?\d+)$", header, re.M).group(1))
        q = np.rint(x / np.float32(scale)) + zero
        out.append(np.clip(q, info.min, info.max).astype(port.dtype))
    return out


def profile(board: str, name: str, path: Path, inputs: list[np.ndarray], build: Path,
            top: int) -> None:
    """Instructions per step of ``name`` on ``board`` (see the module docstring)."""
    from models import compile_profiled, describe
    from xlac.backends import make_backend

    _, triple, cpu, counter = BOARDS[board]
    build.mkdir(parents=True, exist_ok=True)
    # model.o and model.h, newer than the model: make links them as they are
    _, module, art = compile_profiled("model", onnx.load(path), build / "model.o",
                                      backend=make_backend(triple, cpu), counter=counter)
    for k, x in enumerate(inputs):
        x.tofile(build / f"input{k}.bin")
    sites = art.profile_sites
    flags = f"EXTRA_CFLAGS=-DPROFILE_SITES={len(sites)}"
    for goals in ((), ("run",)):
        done = make(board, path, build, flags, *goals)
        if done.returncode != 0:
            raise RuntimeError(f"{name}: {' '.join(goals) or 'build'} failed:\n"
                               f"{done.stdout}{done.stderr}")
    ticks, per_tick = counter_line(done.stdout)
    steps = np.fromfile(build / "profile.bin", np.uint64).astype(np.float64) * per_tick
    by_name = {i.name: i for c in module.computations for i in c.instructions}
    print(f"{name} on {BOARDS[board][0]} ({board}): {ticks * per_tick:,.0f} instructions "
          f"per inference, {steps.sum():,.0f} in its {len(sites)} steps")
    print(f"{'instructions':>13} {'share':>6}  step")
    for k in np.argsort(-steps)[:top]:
        instr = by_name.get(sites[k])
        print(f"{steps[k]:>13,.0f} {100 * steps[k] / steps.sum():5.1f}%  "
              f"{describe(instr) if instr is not None else sites[k]}")


def prepare(name: str, folder: Path, quantized: bool) -> tuple[Path, list[np.ndarray]]:
    """The model file and one seeded input for it."""
    model = MODELS[name]()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    path = folder / f"{name}.onnx"
    if quantized:
        path = Path(quantize(model, str(folder), name, "qdq"))
    else:
        onnx.save(model, path)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    return path, [x]


def measure(board: str, name: str, path: Path, inputs: list[np.ndarray],
            build: Path, int8_io: bool = False) -> dict:
    build.mkdir(parents=True, exist_ok=True)
    host = xlac.compile(path, build / "host.o", name="host", int8_io=int8_io)
    model = xlac.load(host.output)
    if int8_io:
        inputs = quantized_inputs((build / "host.h").read_text(), model, inputs)
    for k, x in enumerate(inputs):
        x.tofile(build / f"input{k}.bin")
    for goals in ((), ("run",)):
        done = make(board, path, build, *goals, int8_io=int8_io)
        if done.returncode != 0:
            raise RuntimeError(f"{name}: {' '.join(goals) or 'build'} failed:\n"
                               f"{done.stdout}{done.stderr}")
    report = json.loads((build / "report.json").read_text())
    want = model(*inputs)
    got = [np.fromfile(build / f"output{k}.bin", w.dtype).reshape(w.shape)
           for k, w in enumerate(want)]
    err = max(float(np.max(np.abs(g.astype(np.float64) - w))) for g, w in zip(got, want))
    return {"model": name, "instructions": instructions(done.stdout), "elf": build / "app.elf",
            "flash": report["flash_bytes"]["total"], "code": report["flash_bytes"]["code"],
            "ram": report["ram_bytes"]["total"], "max_diff": err}


def beside_tflm(args, rows: list[dict]) -> None:
    """xlac's rows beside TFLM + CMSIS-NN's for the same models and board."""
    import tflm
    theirs = {r["model"]: tflm.measure(args.tflm, args.tflm_cache, args.board, r["model"])
              for r in rows}
    heading(f"{'model':<22} {'xlac':>12} {'TFLM':>12} {'xlac/TFLM':>9} {'flash xlac':>10} "
            f"{'TFLM':>9} {'RAM xlac':>8} {'TFLM':>8} {'max |diff|':>10}")
    ratios = []
    for r in rows:
        t = theirs[r["model"]]
        ratios.append(r["instructions"] / t["instructions"])
        print(f"{r['model']:<22} {r['instructions']:>12,} {t['instructions']:>12,} "
              f"{ratios[-1]:>9.2f} {r['flash']:>10,} {t['flash']:>9,} {r['ram']:>8,} "
              f"{t['ram']:>8,} {r['max_diff']:>10.3g}")
    print(f"{'geomean':<22} {'':>12} {'':>12} {geomean(ratios):>9.2f}")
    if args.cycles:
        print("\nestimated Cortex-M4 cycles (benchmarks/cycles.py) of the traced call")
        heading(f"{'model':<22} {'xlac':>12} {'TFLM':>12} {'xlac/TFLM':>9} "
                f"{'cycles/instr xlac':>17} {'TFLM':>6}")
        ratios = []
        for r in rows:
            ours = r["cycles"]
            t = estimate(args.board, theirs[r["model"]]["elf"], tflm.INVOKE)
            ratios.append(ours["cycles"] / t["cycles"])
            print(f"{r['model']:<22} {ours['cycles']:>12,} {t['cycles']:>12,} "
                  f"{ratios[-1]:>9.2f} {ours['cycles'] / ours['instructions']:>17.2f} "
                  f"{t['cycles'] / t['instructions']:>6.2f}")
        print(f"{'geomean':<22} {'':>12} {'':>12} {geomean(ratios):>9.2f}")


def heading(head: str) -> None:
    print(head)
    print("-" * len(head))


def geomean(values: list[float]) -> float:
    return float(np.exp(np.mean(np.log(values))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--board", choices=BOARDS, default="mps2-an386")
    ap.add_argument("--only", help="substring of the model names to run")
    ap.add_argument("--float", action="store_true", help="the float models, not int8")
    ap.add_argument("--build", type=Path, default=ROOT / "build" / "cortex_m",
                    help="folder for the builds (kept for inspection)")
    ap.add_argument("--profile", metavar="MODEL", choices=MLPERF_TINY,
                    help="instructions per step of MODEL")
    ap.add_argument("--top", type=int, default=15, help="rows of --profile")
    ap.add_argument("--int8-io", action="store_true",
                    help="the models' inputs and outputs as 8-bit values (xlac --int8-io), "
                    "as TFLite Micro takes them")
    ap.add_argument("--tflm", type=Path, metavar="SOURCES",
                    help="TFLite Micro + CMSIS-NN beside xlac, built from the git "
                    "repositories in SOURCES (benchmarks/tflm.py)")
    ap.add_argument("--cycles", action="store_true",
                    help="estimated Cortex-M4 cycles too (benchmarks/cycles.py)")
    ap.add_argument("--tflm-cache", type=Path,
                    default=Path.home() / ".cache" / "xlac" / "tflm",
                    help="where TFLite Micro's tree and builds go")
    args = ap.parse_args()
    names = [n for n in MLPERF_TINY if not args.only or args.only in n]
    if args.int8_io and args.float:
        ap.error("--int8-io needs the quantized models")
    if args.tflm and args.float:
        ap.error("--tflm runs the int8 reference models")
    if args.cycles and args.board != "mps2-an386":
        ap.error("--cycles weighs instructions with the Cortex-M4's timings: "
                 "--board mps2-an386")
    kind = "f32" if args.float else ("int8-io" if args.int8_io else "int8")
    folder = args.build / args.board / kind
    folder.mkdir(parents=True, exist_ok=True)
    if args.profile:
        path, inputs = prepare(args.profile, folder, not args.float)
        profile(args.board, args.profile, path, inputs, folder / f"{args.profile}_profile",
                args.top)
        if args.tflm:
            import tflm
            steps = tflm.profile(args.tflm, args.tflm_cache, args.board, args.profile)
            total = sum(n for _, n in steps)
            print(f"\nTFLM + CMSIS-NN: {total:,.0f} instructions in its {len(steps)} "
                  f"operators (a release_with_logs build)")
            print(f"{'instructions':>13} {'share':>6}  operator")
            for op, n in sorted(steps, key=lambda s: -s[1])[:args.top]:
                print(f"{n:>13,.0f} {100 * n / total:5.1f}%  {op}")
        return
    jobs = [(n, *prepare(n, folder, not args.float)) for n in names]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        rows = list(pool.map(lambda j: measure(args.board, j[0], j[1], j[2], folder / j[0],
                                               args.int8_io), jobs))
    print(f"{BOARDS[args.board][0]} ({args.board}), {kind}: instructions per inference "
          f"under qemu-system-arm -icount shift=0")
    if args.cycles:
        for r in rows:
            r["cycles"] = estimate(args.board, r["elf"], "model_run_v", r["elf"].parent)
    if args.tflm:
        beside_tflm(args, rows)
        return
    heading(f"{'model':<22} {'instructions':>13} {'flash':>9} {'code':>7} {'RAM':>8} "
            f"{'max |diff|':>10}" + (f" {'est. cycles':>12}" if args.cycles else ""))
    for r in rows:
        print(f"{r['model']:<22} {r['instructions']:>13,} {r['flash']:>9,} {r['code']:>7,} "
              f"{r['ram']:>8,} {r['max_diff']:>10.3g}"
              + (f" {r['cycles']['cycles']:>12,}" if args.cycles else ""))


if __name__ == "__main__":
    main()
