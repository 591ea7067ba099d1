"""Cycle counts per call site of NAME_compute, for profiling (``EmitOptions.profile``).

Every call NAME_compute makes to one of the model's functions (the loop of a fused
instruction, a kernel) is bracketed by reads of the cycle counter
(``llvm.readcyclecounter``: rdtsc on x86), and the difference is added to slot k of the
exported ``u64 NAME_profile_cycles[]``, k counting the call sites in the order they
appear in NAME_compute; ``NAME_profile_calls[k]`` counts how often site k ran (a site
in a while loop's body runs once per iteration); ``u64 NAME_profile_counter(void)``
reads the counter, so a caller can time its rate. The counters are plain globals, so a
profiled object is for one thread at a time, never for deployment.
"""
from __future__ import annotations

from llvmlite import ir

from .irutil import i64

I64 = ir.IntType(64)


def instrument_calls(llvm_module: ir.Module, name: str) -> list[str]:
    """Instrument NAME_compute in place; returns the callee's name of each slot."""
    compute = llvm_module.get_global(f"{name}_compute")
    sites = [(block, instr) for block in compute.blocks for instr in list(block.instructions)
             if isinstance(instr, ir.CallInstr) and instr.callee.name.startswith(f"{name}.")]
    counter = llvm_module.declare_intrinsic("llvm.readcyclecounter", (),
                                            ir.FunctionType(I64, ()))
    arrays = []
    for what in ("cycles", "calls"):
        g = ir.GlobalVariable(llvm_module, ir.ArrayType(I64, max(len(sites), 1)),
                              f"{name}_profile_{what}")
        g.initializer = ir.Constant(g.value_type, None)
        arrays.append(g)
    now = ir.Function(llvm_module, ir.FunctionType(I64, ()), f"{name}_profile_counter")
    b = ir.IRBuilder(now.append_basic_block("entry"))
    b.ret(b.call(counter, []))
    for k, (block, call) in enumerate(sites):
        b.position_before(call)
        start = b.call(counter, [])
        b.position_after(call)
        elapsed = b.sub(b.call(counter, []), start)
        for array, value in zip(arrays, (elapsed, i64(1))):
            slot = b.gep(array, [i64(0), i64(k)], inbounds=True)
            b.store(b.add(b.load(slot, typ=I64), value), slot)
    return [call.callee.name for _, call in sites]
