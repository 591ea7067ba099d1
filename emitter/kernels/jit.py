"""Compile one kernel for this machine and call it from Python (tests, benchmarks).

The kernel is internal, so a small external ``entry`` forwards to it; the module is
optimized with the new pass manager (O3) and loaded with MCJIT for the host CPU.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir

from ...hlo import Instruction
from ..irutil import PTR, VOID
from . import emit_kernel, scratch_bytes

_ready = False


def _init():
    global _ready
    if not _ready:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _ready = True


@dataclass(frozen=True)
class HostTarget:
    """The part of a TargetInfo the kernels read, for this machine."""
    vector_bytes: int


def host_target() -> HostTarget:
    _init()
    features = llvm.get_host_cpu_features()
    if features.get("avx512f"):
        return HostTarget(64)
    return HostTarget(32 if features.get("avx") else 16)


def host_machine() -> llvm.TargetMachine:
    _init()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                        features=llvm.get_host_cpu_features().flatten(),
                                        opt=3, jit=True)


class CompiledKernel:
    """``kernel(*operands) -> output``: numpy arrays in, a fresh numpy array out."""

    def __init__(self, instr: Instruction, target=None):
        target = target or host_target()
        self.instr = instr
        self.scratch = scratch_bytes(instr, target)
        module = ir.Module("kernel")
        module.triple = llvm.get_process_triple()
        kernel = emit_kernel(module, instr, "kernel", target)
        entry = ir.Function(module, ir.FunctionType(VOID, [PTR] * 4), "entry")
        b = ir.IRBuilder(entry.append_basic_block())
        b.call(kernel, entry.args[:len(kernel.args)])
        b.ret_void()
        self.llvm_ir = str(module)
        tm = host_machine()
        mod = llvm.parse_assembly(self.llvm_ir)
        mod.verify()
        pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
        pb.getModulePassManager().run(mod, pb)
        self._engine = llvm.create_mcjit_compiler(mod, tm)
        self._engine.finalize_object()
        self._fn = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 4)(
            self._engine.get_function_address("entry"))
        self._scratch = np.empty(max(self.scratch, 1) + 64, np.uint8)

    def __call__(self, *operands: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        shape = self.instr.shape
        args = [np.ascontiguousarray(x, dtype=o.shape.dtype.np)
                for x, o in zip(operands, self.instr.operands)]
        for x, o in zip(args, self.instr.operands):
            if x.shape != o.shape.dims:
                raise ValueError(f"operand shape {x.shape} != {o.shape.dims}")
        if out is None:
            out = np.empty(shape.dims, shape.dtype.np)
        scratch = self._scratch.ctypes.data
        scratch += -scratch % 64            # the arena gives 64-byte aligned slots
        self._fn(out.ctypes.data, args[0].ctypes.data, args[1].ctypes.data, scratch)
        return out
