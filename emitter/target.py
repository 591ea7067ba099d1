"""Target machines: which CPU the object is for, and LLVM's optimizer and code generator.

    info, tm = make_target("aarch64-unknown-linux-gnu")
    optimize_ir(llvm_module, tm, opt_level=2)
    obj = emit_object(tm, llvm_module)
"""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.binding as llvm

from ..hlo import XlacError

# llvmlite 0.50 initializes the LLVM core by itself; the non-native targets and their
# assembly printers must still be registered once for cross compilation, and the host's
# assembly parser for module-level assembly.
llvm.initialize_all_targets()
llvm.initialize_all_asmprinters()
llvm.initialize_native_asmparser()     # module-level asm (constants.py's .incbin)

# CPU and features for a foreign triple, keyed by the triple's architecture. Anything not
# listed gets LLVM's "generic" CPU and no extra features.
_ARCH_DEFAULTS = {
    "thumbv6m": ("cortex-m0plus", ""),
    "thumbv7m": ("cortex-m3", ""),
    "thumbv7em": ("cortex-m4", ""),
    "thumbv8m.main": ("cortex-m33", ""),
    "riscv32": ("generic-rv32", "+m,+a,+f,+c"),
    "riscv64": ("generic-rv64", "+m,+a,+f,+d,+c"),   # rv64gc: what Linux distributions assume
    "nvptx64": ("sm_70", ""),
}

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
    features: str          # LLVM feature string, "+avx2,-avx512f,..."
    vector_bytes: int      # width of the widest SIMD register the kernels may use
    data_layout: str
    is_host: bool

    @property
    def arena_align(self) -> int:
        """NAME_ARENA_ALIGN: a cache line where there are vector registers (vector loads
        never split lines), else 8 bytes (i64 / f64 elements): microcontrollers lose
        no arena bytes to padding between buffers."""
        return 64 if self.vector_bytes >= 16 else 8


def vector_bytes_for(triple: str, features: str) -> int:
    enabled = {f[1:] for f in features.split(",") if f.startswith("+")}
    for width, names in _VECTOR_FEATURES:
        if enabled.intersection(names):
            return width
    return 16 if triple.split("-", 1)[0] in _BASE_SIMD_ARCHES else 4


def make_target(triple: str | None = None, cpu: str | None = None,
                features: str | None = None, opt_level: int = 2):
    """The TargetInfo and llvmlite TargetMachine for a triple (default: this machine)."""
    host = llvm.get_process_triple()
    triple = triple or host
    is_host = triple == host
    if is_host:
        cpu = cpu or llvm.get_host_cpu_name()
        if features is None:
            # The host's features describe the host CPU only; another --cpu brings its own.
            same_cpu = cpu == llvm.get_host_cpu_name()
            features = llvm.get_host_cpu_features().flatten() if same_cpu else ""
    else:
        arch = triple.split("-", 1)[0]
        default_cpu, default_features = _ARCH_DEFAULTS.get(arch, ("generic", ""))
        cpu = cpu or default_cpu
        features = default_features if features is None else features
    try:
        target = llvm.Target.from_triple(triple)
    except RuntimeError as e:
        raise XlacError(f"unknown target triple '{triple}': {str(e).strip()}") from None
    tm = target.create_target_machine(cpu=cpu, features=features, opt=min(opt_level, 3),
                                      reloc="pic", codemodel="default")
    info = TargetInfo(triple, cpu, features, vector_bytes_for(triple, features),
                      str(tm.target_data), is_host)
    return info, tm


def optimize_ir(llvm_module, tm, opt_level: int = 2) -> None:
    """Run LLVM's standard -O<level> pipeline (new pass manager) with vectorization on."""
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(llvm_module, pb)


def emit_object(tm, llvm_module) -> bytes:
    return tm.emit_object(llvm_module)


def emit_assembly(tm, llvm_module) -> str:
    return tm.emit_assembly(llvm_module)
