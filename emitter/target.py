"""Target machines: which CPU the object is for, and LLVM's optimizer and code generator.

    info, tm = make_target("aarch64-unknown-linux-gnu", cpu="cortex-a76", features="+i8mm")
    optimize_ir(llvm_module, tm, opt_level=2)
    obj = emit_object(tm, llvm_module)

``make_target`` checks the CPU and the features against the lists LLVM has for the
triple (LLVM itself only warns and ignores an unknown name), picks the defaults of a
foreign triple, and works out ``TargetInfo.required``: the instruction-set features
the code may use, those the CPU implies as well as those given, which the header
lists. ARM triples get the float ABI their name promises: ``...eabihf`` passes floats
in FPU registers (and needs an FPU), any other ARM triple gets no FPU instruction
unless ``--features`` turns an FPU on.
"""
from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

import llvmlite.binding as llvm

from ..hlo import XlacError
from .irutil import pointer_bits

# llvmlite 0.50 initializes the LLVM core by itself; the non-native targets and their
# assembly printers must still be registered once for cross compilation, and the host's
# assembly parser for module-level assembly.
llvm.initialize_all_targets()
llvm.initialize_all_asmprinters()
llvm.initialize_native_asmparser()     # module-level asm (constants.py's .incbin)

# The host target's default CPU where it is set (tests: the suite on an AVX2 or SSE2
# host, whatever this machine has); its features are then the CPU's, as for any --cpu.
HOST_CPU_VARIABLE = "XLAC_HOST_CPU"

# CPU and features for a foreign triple, keyed by the triple's architecture. Anything not
# listed gets LLVM's "generic" CPU and no extra features.
_ARCH_DEFAULTS = {
    "thumbv6m": ("cortex-m0plus", ""),
    "thumbv7m": ("cortex-m3", ""),
    "thumbv7em": ("cortex-m4", ""),
    "thumbv8m.base": ("cortex-m23", ""),
    "thumbv8m.main": ("cortex-m33", ""),
    "thumbv8.1m.main": ("cortex-m55", ""),
    "riscv32": ("generic-rv32", "+m,+a,+f,+c"),
    "riscv64": ("generic-rv64", "+m,+a,+f,+d,+c"),   # rv64gc: what Linux distributions assume
    "nvptx64": ("sm_70", ""),
}

# What a soft-float ARM triple turns off (clang's -mfloat-abi=soft does the same): every
# FPU feature depends on fpregs; fp16 (half-precision conversions) does not.
_ARM_SOFT_FLOAT = "-fpregs,-fp16"

# The instruction-set features the header reports, per architecture family: those that
# decide whether the object runs on a CPU (tuning flags do not). Whether the CPU and
# features imply one is asked of LLVM (_implied). x86's cx16 and sahf are left out:
# LLVM's inline-compatibility check ignores them, so it cannot tell.
_ISA_FEATURES = {
    "x86": ("sse", "sse2", "sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "avx", "avx2",
            "fma", "f16c", "bmi", "bmi2", "lzcnt", "movbe", "avx512f", "avx512cd",
            "avx512bw", "avx512dq", "avx512vl", "avx512vnni", "avx512bf16", "avx512fp16",
            "avxvnni"),
    "aarch64": ("fp-armv8", "neon", "fullfp16", "fp16fml", "dotprod", "i8mm", "bf16", "sve",
                "sve2", "sme"),
    "arm": ("dsp", "hwdiv", "hwdiv-arm", "fpregs", "vfp2sp", "vfp2", "vfp3d16sp", "vfp3d16",
            "vfp3", "vfp4d16sp", "vfp4d16", "vfp4", "fp-armv8d16sp", "fp-armv8d16",
            "fp-armv8", "fp64", "d32", "fp16", "fullfp16", "neon", "mve", "mve.fp"),
    # zvl<N>b (VLEN >= N) is only valid with a vector extension: probed with zve32x.
    "riscv": ("m", "a", "f", "d", "c", "zfh", "zfhmin", "zba", "zbb", "zbs", "v", "zve32x",
              "zve32f", "zve64x", "zve64f", "zve64d", "zvfh", "zvl128b", "zvl256b",
              "zvl512b", "zvl1024b"),
}
_PROBE_WITH = {"zvl128b": "+zve32x,", "zvl256b": "+zve32x,", "zvl512b": "+zve32x,",
               "zvl1024b": "+zve32x,"}

# Widest SIMD register, in bytes, for a feature that enables it ("+avx2" -> 32).
_VECTOR_FEATURES = (
    (64, ("avx512f",)),
    (32, ("avx", "avx2")),
    (16, ("sse", "sse2", "neon", "v", "simd128", "altivec", "mve")),
)
# Architectures whose base ISA already has 16-byte SIMD (x86-64 has SSE2, AArch64 NEON).
_BASE_SIMD_ARCHES = ("x86_64", "aarch64", "arm64")


@dataclass(frozen=True)
class TargetInfo:
    triple: str
    cpu: str
    features: str          # the LLVM feature string the code was generated with
    required: tuple[str, ...]   # "+neon", ...: what the code may use, CPU-implied included
    vector_bytes: int      # width of the widest SIMD register the kernels may use
    data_layout: str
    is_host: bool
    pointer_bits: int = 64      # size_t / uintptr_t of the triple
    float_abi: str | None = None   # ARM: "hard" (floats in FPU registers) or "soft"

    @property
    def registers(self) -> int:
        return vector_registers(self.vector_bytes)

    @property
    def arena_align(self) -> int:
        """NAME_ARENA_ALIGN: a cache line where there are vector registers (vector loads
        never split lines), else 8 bytes (i64 / f64 elements): microcontrollers lose
        no arena bytes to padding between buffers."""
        return 64 if self.vector_bytes >= 16 else 8

    @property
    def max_object_bytes(self) -> int:
        """The largest object the code can address: PTRDIFF_MAX, since every offset into
        a buffer is a signed pointer-sized integer (LLVM's getelementptr)."""
        return (1 << (self.pointer_bits - 1)) - 1

    @property
    def is_elf(self) -> bool:
        return not re.search(r"darwin|macos|ios|windows|nvptx|wasm|uefi", self.triple)

    @property
    def return_address_bytes(self) -> int:
        """Stack a call takes besides the callee's frame: x86 pushes the return address,
        the others keep it in a register (saved in the frame where needed)."""
        arch = _arch(self.triple)
        return 8 if arch == "x86_64" else 4 if re.fullmatch(r"i[3-6]86", arch) else 0


def _arch(triple: str) -> str:
    return triple.split("-", 1)[0]


def _family(triple: str) -> str | None:
    arch = _arch(triple)
    if arch == "x86_64" or re.fullmatch(r"i[3-6]86", arch):
        return "x86"
    if arch in ("aarch64", "arm64", "aarch64_be"):
        return "aarch64"
    if arch.startswith(("arm", "thumb")):
        return "arm"
    if arch.startswith("riscv"):
        return "riscv"
    return None


def _is_bare_metal(triple: str) -> bool:
    return "none" in triple.split("-")[1:]


def vector_registers(vector_bytes: int) -> int:
    """The vector registers the kernels' tiles are sized for: 32 with AVX-512, else 16
    (NEON's 32 count as 16: the f32 tiles were tuned on x86)."""
    return 32 if vector_bytes >= 64 else 16


def vector_bytes_for(triple: str, features: str) -> int:
    enabled = {f[1:] for f in re.split(r"[,\s]+", features) if f.startswith("+")}
    for width, names in _VECTOR_FEATURES:
        if enabled.intersection(names):
            return width
    return 16 if _arch(triple) in _BASE_SIMD_ARCHES else 4


_STDERR_LOCK = threading.Lock()


@contextmanager
def captured_stderr():
    """LLVM prints its listings and diagnostics to file descriptor 2; this collects them.
    Yields a list that holds the lines (with their line ends) once the block ends. One
    thread at a time."""
    lines: list[str] = []
    with _STDERR_LOCK, tempfile.TemporaryFile() as f:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(f.fileno(), 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            f.seek(0)
            lines += f.read().decode("utf-8", "replace").splitlines(keepends=True)


_LIST_CHOICES = """
import sys, llvmlite.binding as llvm
llvm.initialize_all_targets()
llvm.Target.from_triple(sys.argv[1]).create_target_machine(cpu="help")
"""


@lru_cache(maxsize=None)
def llvm_choices(triple: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The CPU names and feature names LLVM knows for ``triple`` (its ``-mcpu=help``).

    LLVM prints that listing once per process, so a child process prints it."""
    run = subprocess.run([sys.executable, "-c", _LIST_CHOICES, triple], capture_output=True,
                         text=True, timeout=120)
    cpus: list[str] = []
    features: list[str] = []
    section = None
    for line in run.stderr.splitlines():
        if line.startswith("Available CPUs"):
            section = cpus
        elif line.startswith("Available features"):
            section = features
        elif section is not None and (m := re.match(r"  (\S+)\s+- ", line)):
            section.append(m.group(1))
    return tuple(cpus), tuple(features)


def _unknown(kind: str, name: str, triple: str, choices) -> XlacError:
    close = difflib.get_close_matches(name, choices, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return XlacError(f"unknown {kind} '{name}' for {triple}{hint}; valid: "
                     f"{', '.join(sorted(choices)) or '(LLVM did not list them)'}")


def parse_features(text: str | None) -> list[str]:
    """``"+neon,-sve"`` (commas or spaces) -> ["+neon", "-sve"]."""
    items = [f for f in re.split(r"[,\s]+", (text or "").strip()) if f]
    for item in items:
        if item[0] not in "+-" or len(item) == 1:
            raise XlacError(f"bad feature '{item}' in --features: write +NAME to add a "
                            "feature or -NAME to remove one, e.g. --features +neon,-sve")
    return items


_UNRECOGNIZED = re.compile(r"'([^']*)' is not a recognized (processor|feature)")


def _create_checked(target, triple: str, **options):
    """``target.create_target_machine(**options)``; a CPU or feature LLVM does not know
    (it would only warn and ignore it) is an error listing the valid names."""
    with captured_stderr() as lines:
        tm = target.create_target_machine(**options)
    for line in lines:
        m = _UNRECOGNIZED.search(line)
        if m is None:
            sys.stderr.write(line)
            continue
        cpus, features = llvm_choices(triple)
        if m.group(2) == "processor":
            raise _unknown("CPU", m.group(1), triple, cpus)
        raise _unknown("feature", m.group(1).lstrip("+-"), triple, features)
    return tm


@lru_cache(maxsize=None)
def _implied(triple: str, cpu: str, features: str, candidates: tuple[str, ...]) -> tuple[str, ...]:
    """Which of ``candidates`` LLVM enables for ``cpu`` with ``features``.

    LLVM keeps each CPU's implied features inside its subtargets, which llvmlite does not
    expose, but its inliner asks them: a function whose features are ``features,+f``
    inlines into one built with ``features`` exactly when that already includes ``f``
    (TargetTransformInfo::areInlineCompatible compares the subtargets' feature bits).
    """
    base = f"{features}," if features else ""
    lines = ["@sink = global i8 0", "define void @probe() {"]
    lines += [f"  call void @c{k}()" for k in range(len(candidates))]
    lines += ["  ret void", "}"]
    for k, f in enumerate(candidates):
        # The volatile store keeps a call that is not inlined from being deleted.
        with_f = f"{base}{_PROBE_WITH.get(f, '')}+{f}"
        lines += [f"define internal void @c{k}() #{k} {{",
                  "  store volatile i8 0, ptr @sink", "  ret void", "}",
                  f'attributes #{k} = {{ "target-features"="{with_f}" }}']
    module = llvm.parse_assembly("\n".join(lines))
    module.triple = triple
    tm = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features)
    pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=1))
    pb.getModulePassManager().run(module, pb)
    probe = str(module.get_function("probe"))
    left = set(re.findall(r"\bcall [^@\n]*@(c\d+)\(", probe))
    return tuple(f for k, f in enumerate(candidates) if f"c{k}" not in left)


def _required(triple: str, cpu: str, features: str, user: list[str],
              host_features: str | None) -> tuple[str, ...]:
    host = [f[1:] for f in (host_features or "").split(",") if f.startswith("+")]
    if host and not user:
        # The host's own list is every instruction-set feature this CPU has.
        return tuple(f"+{f}" for f in host)
    family = _family(triple)
    given = [f[1:] for f in user if f.startswith("+")]
    if family is None:
        return tuple(f"+{f}" for f in given)
    candidates = tuple(dict.fromkeys((*(host or _ISA_FEATURES[family]), *given)))
    return tuple(f"+{f}" for f in _implied(triple, cpu, features, candidates))


def make_target(triple: str | None = None, cpu: str | None = None,
                features: str | None = None, opt_level: int = 2):
    """The TargetInfo and llvmlite TargetMachine for a triple (default: this machine).

    The host's CPU defaults to this machine's, or to the one $XLAC_HOST_CPU names.

    ``features`` adds ("+name") or removes ("-name") LLVM features on top of the CPU's
    and the triple's defaults. Unknown CPUs and features are errors listing the valid
    ones."""
    host = llvm.get_process_triple()
    triple = triple or host
    is_host = triple == host
    try:
        target = llvm.Target.from_triple(triple)
    except RuntimeError as e:
        raise XlacError(f"unknown target triple '{triple}': {str(e).strip()}") from None
    user = parse_features(features)
    host_features = forced = None
    if is_host:
        forced = os.environ.get(HOST_CPU_VARIABLE)
        default_cpu = forced or llvm.get_host_cpu_name()
        # The host's features describe the host CPU only; another --cpu, or a CPU the
        # variable names, brings its own.
        if (cpu or default_cpu) == default_cpu and not forced:
            host_features = llvm.get_host_cpu_features().flatten()
        base = host_features or ""
    else:
        default_cpu, base = _ARCH_DEFAULTS.get(_arch(triple), ("generic", ""))
    float_abi = None
    if _family(triple) == "arm":
        float_abi = "hard" if triple.split("-")[-1].endswith("hf") else "soft"
        if float_abi == "soft":
            base = ",".join(filter(None, (base, _ARM_SOFT_FLOAT)))
    cpu = cpu or default_cpu
    full = ",".join(filter(None, (base, *user)))
    reloc = "static" if _is_bare_metal(triple) else "pic"
    try:
        tm = _create_checked(target, triple, cpu=cpu, features=full, opt=min(opt_level, 3),
                             reloc=reloc, codemodel="default")
    except XlacError as e:
        if forced and cpu == forced and str(e).startswith("unknown CPU"):
            raise XlacError(f"{HOST_CPU_VARIABLE}={forced}: {e}") from None
        raise
    required = _required(triple, cpu, full, user, host_features)
    if float_abi == "hard" and "+fpregs" not in required:
        raise XlacError(f"{triple} passes floats in FPU registers (hard float), but CPU "
                        f"{cpu}{' with ' + ','.join(user) if user else ''} has no FPU; "
                        f"use the soft-float triple ({triple[:-2]}) or a CPU with an FPU")
    data_layout = str(tm.target_data)
    info = TargetInfo(triple, cpu, full, required,
                      vector_bytes_for(triple, ",".join(required)), data_layout, is_host,
                      pointer_bits(data_layout), float_abi)
    return info, tm


def optimize_ir(llvm_module, tm, opt_level: int = 2) -> None:
    """Run LLVM's standard -O<level> pipeline (new pass manager) with vectorization on."""
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(llvm_module, pb)


_FRAME = re.compile(r"stack frame size \((\d+)\) exceeds limit \(\d+\) in function '([^']+)'")


def _with_frame_sizes(emit):
    """Runs ``emit()`` (code generation) and collects LLVM's frame-size diagnostics, which
    the IR asks for on every function (stack.report_frame_sizes). Returns the result
    and {function: frame bytes}; other diagnostics go on to stderr."""
    with captured_stderr() as lines:
        result = emit()
    frames: dict[str, int] = {}
    for line in lines:
        m = _FRAME.search(line)
        if m:
            frames[m.group(2)] = int(m.group(1))
        else:   # as written (a progress line may end in a carriage return)
            sys.stderr.write(line)
    return result, frames


def emit_object(tm, llvm_module) -> tuple[bytes, dict[str, int]]:
    """Object code and the stack frame size of each function that has a frame."""
    return _with_frame_sizes(lambda: tm.emit_object(llvm_module))


def emit_assembly(tm, llvm_module) -> tuple[str, dict[str, int]]:
    return _with_frame_sizes(lambda: tm.emit_assembly(llvm_module))
