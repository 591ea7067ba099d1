"""Cycle counts per step of NAME_compute and NAME_compute_parallel, for profiling
(``EmitOptions.profile``).

Every call a compute function makes for a step (the loop of a fused instruction, a
kernel, or the pool's parallel_for of a split step) is bracketed by reads of the cycle
counter (``llvm.readcyclecounter``: rdtsc on x86), and the difference is added to slot
k of the exported ``u64 NAME_profile_cycles[]``, k counting the call sites in the order
they appear in NAME_compute; ``NAME_profile_calls[k]`` counts how often site k ran (a
site in a while loop's body runs once per iteration). The parallel entry has its own
``NAME_profile_parallel_cycles[]`` / ``_calls[]`` (the caller's time for the whole
step, its tasks on every thread included) and ``NAME_profile_parallel_busy[]``: the
cycles spent inside the step's tasks summed over the threads that ran them, so
``busy / (threads * cycles)`` is how much of the pool the step kept busy and
``cycles - busy / threads`` what its dispatch and imbalance cost.
``u64 NAME_profile_counter(void)`` reads the counter, so a caller can time its rate.
A microcontroller's M-profile has no cycle counter LLVM can read: there the profile
reads a 32-bit memory-mapped counter at the address given (``EmitOptions.
profile_counter``; DWT's CYCCNT at 0xE0001004 on a Cortex-M3/M4/M7/M33 that has
enabled it, a board's timer), differences taken modulo 2**32.
The counters are plain globals (the busy ones added atomically), so a profiled object
is for one call at a time, never for deployment.
"""
from __future__ import annotations

from llvmlite import ir

from .intrinsics import declare_intrinsic
from .irutil import i64

I32 = ir.IntType(32)
I64 = ir.IntType(64)


class _Clock:
    """The counter the brackets read: the CPU's cycle counter, or a 32-bit one at a
    memory address."""

    def __init__(self, llvm_module: ir.Module, address: int | None):
        self.address = address
        if address is None:
            self.counter = declare_intrinsic(llvm_module, "llvm.readcyclecounter", I64, [])

    def read(self, b: ir.IRBuilder) -> ir.Value:
        if self.address is None:
            return b.call(self.counter, [])
        at = b.inttoptr(ir.Constant(I64, self.address), ir.PointerType())
        # A device register: every read must happen, in order. llvmlite writes no
        # volatile loads; LLVM merges no two atomic ones (a plain ldr on Cortex-M).
        return b.load_atomic(at, "monotonic", 4, typ=I32)

    def elapsed(self, b: ir.IRBuilder, start, end) -> ir.Value:
        diff = b.sub(end, start)
        return diff if self.address is None else b.zext(diff, I64)

    def wide(self, b: ir.IRBuilder, value) -> ir.Value:
        return value if self.address is None else b.zext(value, I64)


def _array(llvm_module: ir.Module, name: str, n: int) -> ir.GlobalVariable:
    g = ir.GlobalVariable(llvm_module, ir.ArrayType(I64, max(n, 1)), name)
    g.initializer = ir.Constant(g.value_type, None)
    return g


def instrument_calls(llvm_module: ir.Module, name: str, sites, tasks=None,
                     prefix: str = "profile", counter: int | None = None) -> list[str]:
    """Bracket each call of ``sites`` ((call, label) pairs) with cycle counts into
    NAME_``prefix``_cycles / _calls; with ``tasks`` (label -> task function) also the
    tasks' own cycles into NAME_``prefix``_busy; ``counter``: the address of a 32-bit
    counter to read instead of the CPU's. Returns the label of each slot."""
    clock = _Clock(llvm_module, counter)
    cycles, calls = (_array(llvm_module, f"{name}_{prefix}_{what}", len(sites))
                     for what in ("cycles", "calls"))
    if llvm_module.globals.get(f"{name}_profile_counter") is None:
        now = ir.Function(llvm_module, ir.FunctionType(I64, ()), f"{name}_profile_counter")
        b = ir.IRBuilder(now.append_basic_block("entry"))
        b.ret(clock.wide(b, clock.read(b)))
    b = ir.IRBuilder()
    for k, (call, _) in enumerate(sites):
        b.position_before(call)
        start = clock.read(b)
        b.position_after(call)
        elapsed = clock.elapsed(b, start, clock.read(b))
        for array, value in zip((cycles, calls), (elapsed, i64(1))):
            slot = b.gep(array, [i64(0), i64(k)], inbounds=True)
            b.store(b.add(b.load(slot, typ=I64), value), slot)
    if tasks is not None:
        busy = _array(llvm_module, f"{name}_{prefix}_busy", len(sites))
        for k, (_, label) in enumerate(sites):
            task = tasks.get(label)
            if task is None:
                continue
            b.position_at_start(task.entry_basic_block)
            start = clock.read(b)
            b.position_before(next(bb.terminator for bb in task.blocks
                                   if isinstance(bb.terminator, ir.Ret)))
            slot = b.gep(busy, [i64(0), i64(k)], inbounds=True)
            b.atomic_rmw("add", slot, clock.elapsed(b, start, clock.read(b)), "monotonic")
    return [label for _, label in sites]
