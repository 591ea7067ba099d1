"""The CPU renderer: one LLVM module for the whole model, object code or assembly for the
target, and the C header.

    artifact = render(backend, module, assignment, EmitOptions("mnist"), kinds=("obj",))
    artifact.object_code, artifact.header
    artifact.footprint, artifact.stack_bytes      # what it costs on the target

``backend.emit`` calls it. The steps (steps.py) become NAME_compute and the entries
(entry.py); the constants, ``NAME_info`` and, with ``profile``, the cycle counters go
beside them; LLVM optimizes the module and writes the code.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import llvmlite.binding as llvm
from llvmlite import ir

from ..hlo import Module, XlacError
from ..optimizer.buffer_assignment import BufferAssignment
from .constants import ConstantPool
from .custom_call import custom_calls
from .elf import ElfObject, set_arm_vfp_args
from .entry import emit_entry
from .header import render_header
from .info import emit_model_info
from .interface import model_interface
from .limits import check_fits
from .profile import instrument_calls
from .stack import call_graph, report_frame_sizes, stack_depth
from .steps import build_steps
from .target import TargetInfo, emit_assembly, emit_object, optimize_ir

KINDS = ("obj", "asm", "llvm")


@dataclass(frozen=True)
class EmitOptions:
    name: str                    # NAME: the C identifier every exported symbol starts with
    parallel: bool = False       # also NAME_run_parallel (emitter/parallel.py)
    # Count cycles per step of NAME_compute (and NAME_compute_parallel) (profile.py);
    # Artifact.profile_sites (profile_parallel_sites) names each slot's instruction.
    profile: bool = False
    # The address of a 32-bit memory-mapped counter the profile reads, where the CPU has
    # no cycle counter LLVM reads (Cortex-M); None: llvm.readcyclecounter.
    profile_counter: int | None = None
    # (symbol, limit): every port's leading dimension is a batch of 1 to limit samples;
    # the module computes one (entry.py runs it per sample).
    bound: tuple[str, int] | None = None


@dataclass(frozen=True)
class Artifact:
    llvm_ir: str | None          # optimized LLVM IR text, when "llvm" was asked for
    object_code: bytes | None    # when "obj" was asked for
    assembly: str | None         # when "asm" was asked for
    header: str
    target: TargetInfo
    # The most stack bytes NAME_run / NAME_run_v use (the C library's calls aside); None
    # where no machine code was generated ("llvm" alone).
    stack_bytes: int | None = None
    # ElfObject.footprint of the object ("obj" on ELF targets): code, weights, rodata, data.
    footprint: dict | None = None
    # What the object needs from the C library and the compiler's runtime (nm -u); from
    # the object where there is one, else the C library functions the IR calls.
    symbols: tuple[str, ...] = ()
    profile_sites: tuple[str, ...] = ()
    profile_parallel_sites: tuple[str, ...] = ()
    device_code: str | None = None     # the CUDA target's PTX (emitter/cuda/)
    launches: tuple = ()               # CUDA: (kernel name, parameter count) per kernel


def weights_section(name: str, target: TargetInfo) -> str | None:
    """The section of the constants: one per model on ELF targets."""
    return f".rodata.{name}.weights" if target.is_elf else None


def render(backend, module: Module, assignment: BufferAssignment, options: EmitOptions,
           kinds=("obj",)) -> Artifact:
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise XlacError(f"unknown output kind(s) {sorted(unknown)}; choose from {list(KINDS)}")
    target, tm = backend.target, backend.machine
    interface = model_interface(module, options.name, options.bound)
    check_fits(module, assignment, interface, target)
    section = weights_section(options.name, target)
    # .incbin only where nothing textual is asked for: the text would name a temp file.
    use_incbin = set(kinds) == {"obj"} and target.is_host and "linux" in target.triple
    with tempfile.TemporaryDirectory(prefix="xlac-") as tmp:
        llvm_module = ir.Module(name=options.name)
        llvm_module.triple = target.triple
        llvm_module.data_layout = target.data_layout
        constants = ConstantPool(llvm_module, f"{options.name}.",
                                 Path(tmp) if use_incbin else None, section)
        steps = build_steps(module, assignment, backend)
        libcalls, thread_scratch, computes = emit_entry(
            llvm_module, steps, assignment, interface, target, constants, options.parallel)
        emit_model_info(llvm_module, interface, target, assignment.arena_size,
                        assignment.alignment)
        sites, parallel_sites = [], []
        if options.profile:
            sites = instrument_calls(llvm_module, options.name, computes[0].sites,
                                     counter=options.profile_counter)
            if options.parallel:
                parallel_sites = instrument_calls(llvm_module, options.name,
                                                  computes[1].sites, computes[1].tasks,
                                                  "profile_parallel", options.profile_counter)
        report_frame_sizes(llvm_module)
        parsed = None
        if kinds:   # the header alone (--emit hlo) needs the IR built, not compiled
            parsed = llvm.parse_assembly(f"{llvm_module}\n{constants.module_asm()}")
            parsed.verify()
            optimize_ir(parsed, tm, backend.opt_level)
        object_code = assembly = frames = None
        if "obj" in kinds:
            object_code, frames = emit_object(tm, parsed)
            if target.float_abi == "hard":
                object_code = set_arm_vfp_args(object_code)
        if "asm" in kinds:
            assembly, frames = emit_assembly(tm, parsed)
        stack = footprint = None
        if frames is not None:
            stack = stack_depth(call_graph(parsed), frames,
                                [f"{options.name}_run", f"{options.name}_run_v"],
                                target.return_address_bytes)
        symbols = tuple(sorted({"memcpy", "memset", *libcalls}))
        calls = custom_calls(module)
        if object_code is not None and target.is_elf:
            elf = ElfObject(object_code)
            footprint = elf.footprint(section)
            own = {c.target for c in calls}     # the linking program's, not the library's
            symbols = tuple(s for s in elf.undefined_symbols() if s not in own)
        return Artifact(
            llvm_ir=str(parsed) if "llvm" in kinds else None,
            object_code=object_code,
            assembly=assembly,
            header=render_header(interface, target, assignment.arena_size,
                                 assignment.alignment, symbols, stack, thread_scratch,
                                 calls),
            target=target,
            stack_bytes=stack,
            footprint=footprint,
            symbols=symbols,
            profile_sites=tuple(sites),
            profile_parallel_sites=tuple(parallel_sites),
        )
