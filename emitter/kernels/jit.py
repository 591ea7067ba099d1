"""Compile one kernel for this machine and call it from Python (tests, benchmarks).

The kernel is internal, so a small external ``entry(out, lhs, rhs, scratch, sizes)``
forwards to it, loading the i64 size arguments from an array at run time: the compiled
code is the generic code a model shares between layers, not a copy specialized by
constant propagation. The module is optimized with the new pass manager (O3) and loaded
with MCJIT for the host CPU.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import partial

import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir

from ...hlo import Instruction
from ..irutil import I64, PTR, VOID, i64
from ..target import make_target, vector_registers
from . import kernel_arguments, kernel_key, plan_kernel
from .function import KernelPlan, kernel_function

_ready = False


def _init():
    global _ready
    if not _ready:
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _ready = True


@dataclass(frozen=True)
class HostTarget:
    """The part of a TargetInfo the kernels read: the vector width and the registers
    (None: as a TargetInfo of that width counts them)."""
    vector_bytes: int
    registers: int | None = None

    def __post_init__(self):
        if self.registers is None:
            object.__setattr__(self, "registers", vector_registers(self.vector_bytes))


def host_target() -> HostTarget:
    """This machine's vector width, or that of the CPU $XLAC_HOST_CPU names (as
    make_target's host target has it)."""
    return HostTarget(make_target()[0].vector_bytes)


def host_machine() -> llvm.TargetMachine:
    """A JIT machine for the host target's CPU and features (make_target's)."""
    _init()
    info, _ = make_target()
    target = llvm.Target.from_triple(info.triple)
    return target.create_target_machine(cpu=info.cpu, features=info.features, opt=3, jit=True)


_GUARD = 1024


class CompiledKernel:
    """``kernel(*operands) -> output``: numpy arrays in, a fresh numpy array out."""

    def __init__(self, instr: Instruction, target=None, lean: bool = False,
                 plan: KernelPlan | None = None):
        """``plan``: the kernel to compile in place of the one plan_kernel chooses (a
        benchmark times the alternatives of a choice)."""
        target = target or host_target()
        self.instr, self.target, self.lean = instr, target, lean
        self.plan = plan or plan_kernel(instr, target, lean)
        self._packs = {}
        self._calls = {id(instr): (instr, self.plan)}
        module = ir.Module("kernel")
        module.triple = llvm.get_process_triple()
        kernel = kernel_function(module, "kernel", self.plan.spec)
        arguments = self.plan.arguments
        self.sizes = np.array(arguments or [0], np.int64)
        nsizes = len(arguments)
        # entry(out, operands[], scratch, sizes[]): as many operands as the instruction
        # has (an output fusion's epilogue reads more than two), then its epilogue's
        # scalar constants (each call passes its instruction's own).
        entry = ir.Function(module, ir.FunctionType(VOID, [PTR] * 4), "entry")
        b = ir.IRBuilder(entry.append_basic_block())
        sizes = [b.load(b.gep(entry.args[3], [i64(j)], source_etype=I64), typ=I64)
                 for j in range(nsizes)]
        operands = [b.load(b.gep(entry.args[1], [i64(j)], source_etype=PTR), typ=PTR)
                    for j in range(len(instr.operands)
                                   + len(self.plan.spec.constant_operands))]
        scratch = [entry.args[2]] if len(kernel.args) - nsizes > 1 + len(operands) else []
        b.call(kernel, [entry.args[0], *operands, *scratch] + sizes)
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

    def _packed(self, plan, weights: np.ndarray) -> np.ndarray:
        """The weights packed as the emitter packs a constant's (once per array and
        sizes: a benchmark calling again times the kernel, not the packing)."""
        key = (id(weights), tuple(plan.arguments))
        hit = self._packs.get(key)
        if hit is None or hit[0] is not weights:
            hit = self._packs[key] = (weights, plan.spec.pack_weights(weights, plan.sizes))
        return hit[1]

    def __call__(self, *operands: np.ndarray, out: np.ndarray | None = None,
                 instr: Instruction | None = None) -> np.ndarray:
        """Run on ``operands``; ``instr``: run this code for another instruction with the
        same kernel key (its own shapes and sizes), as a model sharing the kernel does."""
        call = self._bound(operands, out, instr)
        call()
        call.check()
        return call.out

    def bind(self, *operands: np.ndarray, out: np.ndarray | None = None,
             instr: Instruction | None = None):
        """A function of no arguments that runs the kernel on ``operands`` (as __call__
        does, into ``out``) with one foreign call: what a benchmark times. __call__'s
        conversions, checks and fresh scratch cost about 12 us, a third of a small
        layer's run, which a model calling the kernel from C does not pay."""
        return self._bound(operands, out, instr)

    def _bound(self, operands, out, instr) -> "_Call":
        sizes = self.sizes
        if instr is None:
            instr = self.instr
        elif kernel_key(instr, self.target, self.lean) != (self.instr.opcode, self.plan.spec):
            raise ValueError(f"%{instr.name} does not share the kernel of %{self.instr.name}")
        else:
            sizes = np.array(kernel_arguments(instr, self.target, self.lean) or [0], np.int64)
        shape = instr.shape
        # asarray, not ascontiguousarray: that one makes a scalar 1-d.
        args = [np.asarray(x, dtype=o.shape.dtype.np, order="C")
                for x, o in zip(operands, instr.operands)]
        for x, o in zip(args, instr.operands):
            if x.shape != o.shape.dims:
                raise ValueError(f"operand shape {x.shape} != {o.shape.dims}")
        if out is None:
            out = np.empty(shape.dims, shape.dtype.np)
        # The instruction's own scratch, 64-byte aligned as in the arena, and a guard
        # after it: a kernel writing past what scratch_bytes promised is a bug. The plan
        # is made once per instruction: planning costs tens of microseconds, as much as
        # a small kernel's run, which a benchmark would time with it.
        hit = self._calls.get(id(instr))
        if hit is None or hit[0] is not instr:
            hit = self._calls[id(instr)] = (instr, plan_kernel(instr, self.target, self.lean))
        _, plan = hit
        need = plan.scratch_bytes
        block = np.empty(need + 2 * _GUARD, np.uint8)
        start = -block.ctypes.data % 64
        block[start + need:] = 0xA5
        if hasattr(plan.spec, "pack_weights"):
            args[1] = self._packed(plan, args[1])
        args += [np.array(v, np.float32) for v in plan.spec.constant_operands]
        pointers = np.array([a.ctypes.data for a in args], np.uintp)
        return _Call(partial(self._fn, out.ctypes.data, pointers.ctypes.data,
                             block.ctypes.data + start, sizes.ctypes.data),
                     out, (args, pointers, sizes), block[start + need:], instr.name, need)


@dataclass
class _Call:
    """One kernel call with its arguments ready; ``keep`` and ``guard`` (a view of the
    scratch block) hold the arrays its pointers point into."""
    run: partial
    out: np.ndarray
    keep: tuple
    guard: np.ndarray
    name: str
    need: int

    def __call__(self) -> None:
        self.run()

    def check(self) -> None:
        if (self.guard != 0xA5).any():
            raise RuntimeError(f"the kernel of %{self.name} wrote past its {self.need} "
                               f"bytes of scratch")
