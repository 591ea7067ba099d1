"""TensorFlow Lite Micro with CMSIS-NN on an emulated Cortex-M, built from source beside
xlac: the MLPerf Tiny reference models, instructions per inference, flash and RAM.

    python benchmarks/cortex_m.py --tflm SOURCES [...]     # xlac and TFLM side by side
    python benchmarks/tflm.py SOURCES [--board mps2-an386] [--only NAME] [--profile MODEL]

SOURCES is a folder of git repositories (clones or bare mirrors, as the search tool's
``fetch`` brings them), named as on GitHub: ``tflite-micro``, its third-party libraries
``CMSIS-NN``, ``CMSIS_6``, ``Cortex_DFP``, ``flatbuffers``, ``gemmlowp``, ``ruy``,
``kissfft``, and ``tiny`` (mlcommons/tiny, which holds the models). tflite-micro is
taken at its HEAD (or ``--tflm-commit``); every library at the commit or tag that
tflite-micro's own download scripts pin, put where those scripts put it and patched as
they patch it, so TFLM's Makefile finds its downloads in place and fetches nothing.

The tree and its builds live in a cache folder (``--cache``, default
``~/.cache/xlac/tflm``), never in this repository. TFLM's Makefile builds
libtensorflow-microlite.a for the board's core (``TARGET=cortex_m_generic``,
``OPTIMIZED_KERNEL_DIR=cmsis_nn``, ``BUILD_TYPE=release``: kernels at -O2, the
framework at -Os, no error strings) with Debian's arm-none-eabi-gcc; tflm/main.cc
registers exactly the model's operators (as TFLM's generate_micro_mutable_op_resolver
tool does), runs Invoke() once and reads the board's FPGAIO counter around it, as
examples/cortex-m/main.c does around xlac's call. ``--profile`` links a
``BUILD_TYPE=release_with_logs`` library, the one whose interpreter reports each
operator to a MicroProfilerInterface.

Flash and RAM are what TFLM and the model add to a firmware: the firmware's
text + data and data + bss less those of the same program without TFLM
(``-DBASELINE``), with the arena counted as ``arena_used_bytes()``.
Needs Debian's gcc-arm-none-eabi, libnewlib-arm-none-eabi,
libstdc++-arm-none-eabi-newlib and qemu-system-arm.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "cortex-m"
MAIN = HERE / "tflm" / "main.cc"
INVOKE = "_ZN6tflite16MicroInterpreter6InvokeEv"   # what main.cc times
sys.path.insert(0, str(HERE))
from cortex_m import BOARDS, MLPERF_TINY, counter_line  # noqa: E402

# The MLPerf Tiny reference models (int8 weights, activations, inputs and outputs).
MODELS = {
    "ds_cnn": "benchmark/training/keyword_spotting/trained_models/kws_ref_model.tflite",
    "resnet8": "benchmark/training/image_classification/trained_models/"
               "pretrainedResnet_quant.tflite",
    "mobilenet_v1_025_vww": "benchmark/training/visual_wake_words/trained_models/"
                            "vww_96_int8.tflite",
    "fc_autoencoder": "benchmark/training/anomaly_detection/trained_models/ad01_int8.tflite",
}
# The core each board models, as TFLM's cortex_m_generic target names it.
TARGET_ARCH = {"mps2-an386": "cortex-m4+fp", "mps2-an505": "cortex-m33",
               "mps2-an385": "cortex-m3", "mps2-an500": "cortex-m7+fp"}
MAKE_DIR = "tensorflow/lite/micro/tools/make"
# Where TFLM's download scripts put each library, under MAKE_DIR/downloads.
DOWNLOADS = {"CMSIS-NN": "cmsis_nn", "CMSIS_6": "cmsis", "Cortex_DFP": "cmsis/Cortex_DFP",
             "gemmlowp": "gemmlowp", "ruy": "ruy", "flatbuffers": "flatbuffers",
             "kissfft": "kissfft"}
# The files that pin them: a GitHub archive URL whose ref may be a shell variable.
PIN_FILES = ("ext_libs/cmsis_nn_download.sh", "ext_libs/cmsis_download.sh",
             "third_party_downloads.inc")
ARENA_SIZE = 512 * 1024   # main.cc's tensor arena, counted as arena_used_bytes()


def git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], check=True,
                          capture_output=True).stdout


def extract(repo: Path, ref: str, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", ref], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)


def pins(tree: Path) -> dict[str, str]:
    """The ref of each library in DOWNLOADS, from TFLM's download scripts."""
    found = {}
    for name in PIN_FILES:
        text = (tree / MAKE_DIR / name).read_text()
        for m in re.finditer(r"github\.com/[\w-]+/([\w.-]+)/archive/(?:refs/tags/)?"
                             r"([\w.${}]+?)\.zip", text):
            repo, ref = m.groups()
            var = re.fullmatch(r"\$\{(\w+)\}", ref)
            if var:   # the last assignment before the URL
                ref = re.findall(rf'{var.group(1)}="([^"]+)"', text[:m.start()])[-1]
            if repo in DOWNLOADS:
                found[repo] = ref
    missing = set(DOWNLOADS) - set(found)
    if missing:
        raise RuntimeError(f"no pinned version of {sorted(missing)} in {PIN_FILES}")
    return found


def patches(tree: Path) -> dict[str, str]:
    """TFLM's patch of each library, from third_party_downloads.inc."""
    text = (tree / MAKE_DIR / "third_party_downloads.inc").read_text()
    return {m.group(1).lower(): m.group(2)
            for m in re.finditer(r'(\w+)_PATCH_PATH := "([^"]+)"', text)}


def prepare(sources: Path, cache: Path, commit: str = "HEAD") -> Path:
    """tflite-micro at ``commit`` with its downloads in place, under ``cache``."""
    sha = git(sources / "tflite-micro", "rev-parse", f"{commit}^{{commit}}").decode().strip()
    tree = cache / f"tflite-micro-{sha[:12]}"
    if (tree / ".complete").exists():
        return tree
    cache.mkdir(parents=True, exist_ok=True)
    # Built aside and renamed: an interrupted run leaves no half-made tree.
    work = Path(tempfile.mkdtemp(dir=cache, prefix=".tree-"))
    try:
        extract(sources / "tflite-micro", sha, work)
        downloads = work / MAKE_DIR / "downloads"
        for repo, ref in pins(work).items():
            dest = downloads / DOWNLOADS[repo]
            extract(sources / repo, ref, dest)
            patch = patches(work).get(repo.lower())
            if patch:
                subprocess.run(["patch", "-s", "-p1", "-d", str(dest), "-i",
                                str(work / patch)], check=True)
        (downloads / "pigweed").mkdir()   # only TFLM's unit tests use it
        (work / ".complete").touch()
        shutil.rmtree(tree, ignore_errors=True)
        work.rename(tree)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tree


@lru_cache(maxsize=None)
def library(tree: Path, board: str, build_type: str = "release") -> "Library":
    """``Library(tree, board, build_type)``, asked of TFLM's Makefile once per run."""
    return Library(tree, board, build_type)


class Library:
    """libtensorflow-microlite.a for one core and build type, and the flags to
    compile a program against it."""

    def __init__(self, tree: Path, board: str, build_type: str = "release"):
        self.tree = tree
        gcc = shutil.which("arm-none-eabi-gcc")
        if gcc is None:
            raise RuntimeError("arm-none-eabi-gcc not found: apt-get install gcc-arm-none-eabi "
                               "libnewlib-arm-none-eabi libstdc++-arm-none-eabi-newlib")
        # the toolchain on PATH, not the one TFLM's Makefile would download
        self.make = ["make", "-s", "-f", f"{MAKE_DIR}/Makefile", "TARGET=cortex_m_generic",
                     f"TARGET_ARCH={TARGET_ARCH[board]}", "OPTIMIZED_KERNEL_DIR=cmsis_nn",
                     f"TARGET_TOOLCHAIN_ROOT={Path(gcc).parent}/", f"BUILD_TYPE={build_type}"]
        self.path = tree / self.variable("MICROLITE_LIB_PATH")
        if not self.path.exists():
            done = subprocess.run([*self.make, f"-j{os.cpu_count() or 1}", "microlite"],
                                  cwd=tree, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"TFLM's build failed:\n{done.stderr[-4000:]}")
        # Its flags, so the program sees the library's structs as it built them.
        self.cflags = [f for f in shlex.split(self.variable("CXXFLAGS")) if f != "-MD"]
        self.includes = [f"-I{tree / f[2:]}" for f in shlex.split(self.variable("INCLUDES"))]
        self.machine = [f for f in self.cflags if f.startswith("-m")]

    def variable(self, name: str) -> str:
        out = subprocess.run([*self.make, f"print-{name}"], cwd=self.tree, check=True,
                             capture_output=True, text=True).stdout
        return re.search(rf"^{name}=(.*)$", out, re.M).group(1)


def operators(tree: Path, model: bytes) -> list[str]:
    """The MicroMutableOpResolver calls that register ``model``'s operators, named as
    TFLM's generate_micro_mutable_op_resolver tool names them (CONV_2D: AddConv2D), each
    with its int8-only kernel where TFLM has one (Register_CONV_2D_INT8): the smallest
    build TFLM offers for an int8 model, and what a firmware short of flash links."""
    sys.path[:0] = [str(tree / MAKE_DIR / "downloads" / "flatbuffers" / "python"),
                    str(tree / "tensorflow" / "lite" / "python")]
    try:
        import schema_py_generated as schema
    finally:
        del sys.path[:2]
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if k.isupper()}
    headers = "".join(p.read_text() for p in
                      (tree / "tensorflow" / "lite" / "micro" / "kernels").glob("*.h"))
    m = schema.Model.GetRootAs(model, 0)
    calls = set()
    for k in range(m.OperatorCodesLength()):
        code = m.OperatorCodes(k)
        if code.CustomCode() is not None:
            raise RuntimeError(f"custom operator {code.CustomCode()!r} in the model")
        name = names[max(code.BuiltinCode(), code.DeprecatedBuiltinCode())]
        method = "Add" + "".join(p[0].upper() + p[1:].lower() if p[0].isalpha() else p
                                 for p in name.split("_"))
        int8 = f"Register_{name}_INT8"
        calls.add(f"{method}(tflite::{int8}())" if f"{int8}()" in headers
                  else f"{method}()")
    return sorted(calls)


def model_bytes(sources: Path, name: str) -> bytes:
    return git(sources / "tiny", "show", f"HEAD:{MODELS[name]}")


def sources_for(lib: Library, board: str, model: bytes, build: Path) -> list[Path]:
    """The objects every firmware of ``model`` links (the model as a C array, startup.c),
    compiled once, and ops.h: OPERATOR_COUNT and REGISTER_OPERATORS for main.cc."""
    build.mkdir(parents=True, exist_ok=True)
    ops = operators(lib.tree, model)
    (build / "ops.h").write_text(
        f"#define OPERATOR_COUNT {len(ops)}\n#define REGISTER_OPERATORS(r) "
        + " ".join(f"(r).{call};" for call in ops) + "\n")
    rows = (", ".join(map(str, model[i:i + 24])) for i in range(0, len(model), 24))
    (build / "model_data.cc").write_text(
        "alignas(16) extern const unsigned char model_data[] = {\n"
        + ",\n".join(rows) + "\n};\n")
    data, startup = build / "model_data.o", build / "startup.o"
    subprocess.run(["arm-none-eabi-g++", *lib.cflags, "-O2", "-c", str(build / "model_data.cc"),
                    "-o", str(data)], check=True, capture_output=True, text=True)
    subprocess.run(["arm-none-eabi-gcc", *lib.machine, "-O2", "-c",
                    str(EXAMPLE / "startup.c"), "-o", str(startup)], check=True)
    return [startup, data]


def link(lib: Library, board: str, build: Path, objects: list[Path], *defines: str) -> Path:
    """The firmware: main.cc with ``defines`` and ``objects`` (``sources_for``'s), for
    ``board``."""
    main = build / f"main{''.join(defines)}.o"
    subprocess.run(["arm-none-eabi-g++", *lib.cflags, "-O2", *lib.includes, f"-I{build}",
                    f"-DCOUNTER_ADDRESS={BOARDS[board][3]:#x}u", *defines, "-c", str(MAIN),
                    "-o", str(main)], check=True, capture_output=True, text=True)
    elf = build / f"app{''.join(defines)}.elf"
    libs = [] if "-DBASELINE" in defines else [str(lib.path)]
    subprocess.run(["arm-none-eabi-g++", *lib.machine, *map(str, objects), str(main), *libs,
                    f"-L{EXAMPLE}", "-T", f"{board}.ld", "--specs=rdimon.specs",
                    "-nostartfiles", "-Wl,--gc-sections", "-lm", "-o", str(elf)],
                   check=True, capture_output=True, text=True)
    return elf


def run(board: str, elf: Path) -> str:
    done = subprocess.run(
        ["qemu-system-arm", "-M", board, "-nographic", "-monitor", "none", "-serial",
         "none", "-semihosting-config", "enable=on,target=native", "-icount", "shift=0",
         "-kernel", str(elf)], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{elf} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def sizes(elf: Path) -> tuple[int, int]:
    """Flash (text + data) and static RAM (data + bss) of ``elf``."""
    out = subprocess.run(["arm-none-eabi-size", str(elf)], check=True, capture_output=True,
                         text=True).stdout.splitlines()[1].split()
    text, data, bss = map(int, out[:3])
    return text + data, data + bss


def measure(sources: Path, cache: Path, board: str, name: str) -> dict:
    """TFLM's instructions per inference of ``name`` on ``board``, its flash and RAM."""
    lib = library(prepare(sources, cache), board)
    build = cache / "builds" / board / name
    objects = sources_for(lib, board, model_bytes(sources, name), build)
    app = link(lib, board, build, objects)
    base = link(lib, board, build, objects, "-DBASELINE")
    out = run(board, app)
    arena = int(re.search(r"arena (\d+) bytes", out).group(1))
    ticks, per_tick = counter_line(out)
    (flash, ram), (flash0, ram0) = sizes(app), sizes(base)
    ops = re.findall(r"\.(Add\w+)\(", (build / "ops.h").read_text())
    return {"model": name, "instructions": round(ticks * per_tick), "flash": flash - flash0,
            "ram": ram - ram0 - ARENA_SIZE + arena, "arena": arena, "operators": ops,
            "elf": app}


def profile(sources: Path, cache: Path, board: str, name: str) -> list[tuple[str, float]]:
    """Instructions of each operator TFLM runs for ``name``, in order."""
    lib = library(prepare(sources, cache), board, "release_with_logs")
    build = cache / "builds" / board / f"{name}_profile"
    objects = sources_for(lib, board, model_bytes(sources, name), build)
    out = run(board, link(lib, board, build, objects, "-DPROFILE"))
    _, per_tick = counter_line(out)
    return [(f"{k} {tag}", int(ticks) * per_tick)
            for k, tag, ticks in re.findall(r"^op (\d+) (\S+): (\d+) ticks$", out, re.M)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sources", type=Path, help="folder of the git repositories (above)")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "xlac" / "tflm")
    ap.add_argument("--board", choices=TARGET_ARCH, default="mps2-an386")
    ap.add_argument("--only", help="substring of the model names to run")
    ap.add_argument("--profile", metavar="MODEL", choices=MLPERF_TINY,
                    help="instructions per operator of MODEL")
    args = ap.parse_args()
    if args.profile:
        steps = profile(args.sources, args.cache, args.board, args.profile)
        total = sum(n for _, n in steps)
        print(f"TFLM {args.profile} on {args.board}: {total:,.0f} instructions in its "
              f"{len(steps)} operators")
        for op, n in steps:
            print(f"{n:>13,.0f} {100 * n / total:5.1f}%  {op}")
        return
    print(f"TFLM + CMSIS-NN on {args.board}: instructions per inference under "
          f"qemu-system-arm -icount shift=0")
    for name in MLPERF_TINY:
        if args.only and args.only not in name:
            continue
        r = measure(args.sources, args.cache, args.board, name)
        ops = " ".join(r["operators"])
        print(f"{name:<22} {r['instructions']:>13,} flash {r['flash']:>9,} "
              f"RAM {r['ram']:>8,} (arena {r['arena']:,})  {ops}")


if __name__ == "__main__":
    main()
