"""The model's functions: the internal compute function and the two public entries.

    void NAME_compute(ptr inputs, ptr outputs, ptr arena)        (internal)
    i32  NAME_run_v(ptr inputs, ptr outputs, ptr arena)
    i32  NAME_run(ptr in0, ..., ptr out0, ..., ptr arena)

A bounded object (--bound: a leading batch dimension) computes one sample in
NAME_compute and adds NAME_run_sized_v(ptr sizes, ...), which runs it once per sample;
its NAME_run takes the size first, and NAME_run_v runs at the bound.

NAME_compute renders the step list (steps.py) in order: a Loop calls its loop function
(loops.py), a Kernel its kernel (emitter/kernels/: a function shared by the kernels of
one spec; a quantized kernel or a sort / topk / scatter routine compiled for its
instruction), a Copy is a memcpy. A While becomes a loop in NAME_compute itself that
runs its condition's steps and, while the predicate holds, its body's steps; a
Conditional jumps to the steps of one branch. Every buffer is the slice the buffer
assignment resolved. All state lives in the caller's buffers: no mutable globals, so
the code is reentrant.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from ..hlo.structure import structural_key
from ..optimizer.buffer_assignment import BufferAssignment, BufferSlice
from .abi import (XLAC_ERROR_ARENA_ALIGNMENT, XLAC_ERROR_NULL_ARGUMENT,
                  XLAC_ERROR_SIZE_OUT_OF_BOUNDS, XLAC_OK, field_index, threadpool_type)
from .constants import CONSTANT_ALIGN, ConstantPool
from .elemental import ElementalEmitter
from .interface import ModelInterface
from .intrinsics import declare_intrinsic
from .kernels.function import kernel_function
from .kernels.gemm import tiling_for
from .irutil import I1, I8, I32, I64, PTR, VOID, gep_bytes, i64
from .loops import PointerArg, emit_elemental_function
from .parallel import emit_task, kernel_split, loop_split, moved, part, thread_scratch_bytes
from .steps import Conditional, Copy, Kernel, Loop, While, kernel_steps
from .target import TargetInfo


@dataclass(frozen=True)
class ThreadScratch:
    """Where NAME_run_parallel's extra threads keep their kernel scratch (parallel.py):
    slot i - 1 of task i > 0 is ``size`` bytes at ``base + (i - 1) * size``."""
    base: int
    size: int


def thread_scratch(steps, assignment: BufferAssignment, target: TargetInfo) -> ThreadScratch:
    """The slots every split kernel of ``steps`` fits in, after the arena."""
    tiling = tiling_for(target)
    plans = [s.kernel.plan for s in kernel_steps(steps)
             if s.kernel.kind == "kernel" and kernel_split(s.kernel.plan, tiling) is not None]
    size = thread_scratch_bytes(plans, assignment.alignment)
    align = assignment.alignment
    base = -(-assignment.arena_size // align) * align if size else assignment.arena_size
    return ThreadScratch(base, size)


class _ComputeEmitter:
    """Emits NAME_compute's body: one call per step.

    With ``scratch`` (a ThreadScratch) it emits NAME_compute_parallel(inputs, outputs,
    arena, pool) instead: the same steps, the big ones split into tasks for the pool
    (parallel.py). It emits its own loop and kernel functions: sharing NAME_compute's
    would give them a second caller, with sizes that vary, which changes what LLVM
    inlines and specializes in the one-thread entry."""

    def __init__(self, llvm_module: ir.Module, assignment: BufferAssignment,
                 interface: ModelInterface, target: TargetInfo, constants: ConstantPool,
                 scratch: ThreadScratch | None = None):
        self.llvm_module = llvm_module
        self.assignment = assignment
        self.interface = interface
        self.target = target
        self.constants = constants
        self.libcalls: set[str] = set()
        self._kernels: dict[tuple, ir.Function] = {}
        # Loop and quantized-kernel functions by structural key: steps that compute the
        # same function of same-shaped pointers with the same guarantees call one.
        self._shared: dict[tuple, ir.Function] = {}
        self.thread_scratch = scratch
        # Each step's call (a loop or kernel function, or the pool's parallel_for) with
        # its instruction's name, and the task function of each split step: what
        # profile.py brackets with cycle counts.
        self.sites: list[tuple[ir.CallInstr, str]] = []
        self.tasks: dict[str, ir.Function] = {}
        self.size_t = ir.IntType(target.pointer_bits)
        params = [PTR, PTR, PTR] + ([PTR] if scratch is not None else [])
        suffix = "_parallel" if scratch is not None else ""
        self.fn = ir.Function(llvm_module, ir.FunctionType(VOID, params),
                              f"{interface.name}_compute{suffix}")
        self.fn.linkage = "internal"
        self.fn.attributes.add("nounwind")
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        inputs, outputs, self.arena = self.fn.args[:3]
        self.inputs = [self._load_pointer(inputs, k) for k in range(len(interface.inputs))]
        self.outputs = [self._load_pointer(outputs, k) for k in range(len(interface.outputs))]
        if scratch is not None:
            # xlac_runtime.h: struct xlac_threadpool { parallel_for, ctx, threads }
            pool_ty = threadpool_type(self.size_t)
            pool = self.fn.args[3]
            # The loaded pointer carries its function type for the indirect call (it
            # prints as a pointer type LLVM reads as ``ptr``).
            for_ty = ir.PointerType(ir.FunctionType(VOID, [PTR, PTR, PTR, self.size_t]))
            field = [self.b.load(self.b.gep(pool, [ir.Constant(I32, 0), ir.Constant(I32, k)],
                                            source_etype=pool_ty, inbounds=True), typ=ty)
                     for k, ty in enumerate([for_ty, PTR, self.size_t])]
            self.parallel_for, self.pool_ctx, threads = field
            self.threads = threads if self.size_t.width == 64 else self.b.zext(threads, I64)

    def _load_pointer(self, array, k):
        b = self.b
        return b.load(b.gep(array, [i64(k)], source_etype=PTR, inbounds=True), typ=PTR)

    # -- slices as pointers --
    def pointer(self, s: BufferSlice) -> ir.Value:
        if s.space == "constant":
            return gep_bytes(self.b, self.constants.global_for(s.constant), s.offset)
        base = {"input": lambda: self.inputs[s.index],
                "output": lambda: self.outputs[s.index],
                "arena": lambda: self.arena}[s.space]()
        return gep_bytes(self.b, base, s.offset)

    def base_align(self, s: BufferSlice) -> int:
        if s.space == "constant":
            return CONSTANT_ALIGN
        if s.space == "arena":
            return self.assignment.alignment
        ports = self.interface.inputs if s.space == "input" else self.interface.outputs
        return ports[s.index].dtype.itemsize     # callers' arrays are element-aligned

    def pointer_arg(self, s: BufferSlice, size: int, others) -> PointerArg:
        align = self.base_align(s)
        while align > 1 and s.offset % align:
            align //= 2
        noalias = not any(s.overlaps(size, o, n) for o, n in others)
        return PointerArg(align, noalias)

    # -- steps --
    def emit(self, steps) -> None:
        self._emit_steps(steps)
        self.b.ret_void()

    def _emit_steps(self, steps) -> None:
        for step in steps:
            if isinstance(step, Loop):
                self._emit_loop_call(step)
            elif isinstance(step, Kernel):
                self._emit_kernel(step)
            elif isinstance(step, Copy):
                self._memcpy(self.pointer(step.dst), self.pointer(step.src),
                             step.instr.shape.byte_size)
            elif isinstance(step, While):
                self._emit_while(step)
            else:
                self._emit_conditional(step)

    def _emit_kernel(self, step: Kernel) -> None:
        kind = step.kernel.kind
        if kind == "kernel":
            self._emit_kernel_call(step)
        elif kind == "quantized":
            self._emit_quantized_call(step)
        else:
            self._emit_loop_call(step, step.kernel.plan, step.scratch)

    def _emit_while(self, w: While) -> None:
        """cond: the condition's steps, then on to the body or out; body: the body's
        steps, then back to cond. The state stays where the init's elements are."""
        b = self.b
        name = w.instr.name
        head = self.fn.append_basic_block(f"{name}.cond")
        loop = self.fn.append_basic_block(f"{name}.body")
        done = self.fn.append_basic_block(f"{name}.end")
        b.branch(head)
        b.position_at_end(head)
        self._emit_steps(w.condition)
        pred = b.load(self.pointer(w.predicate), typ=I8)
        b.cbranch(b.icmp_unsigned("!=", pred, ir.Constant(I8, 0)), loop, done)
        b.position_at_end(loop)
        self._emit_steps(w.body)
        b.branch(head)
        b.position_at_end(done)

    def _emit_conditional(self, c: Conditional) -> None:
        """A pred picks branch 0 (true) or 1; an s32 index picks its branch, the last
        one when out of range (a switch's default)."""
        b = self.b
        name = c.instr.name
        blocks = [self.fn.append_basic_block(f"{name}.branch{k}")
                  for k in range(len(c.branches))]
        done = self.fn.append_basic_block(f"{name}.end")
        if c.instr.operands[0].shape.dtype.is_pred:
            pred = b.load(self.pointer(c.index), typ=I8)
            b.cbranch(b.icmp_unsigned("!=", pred, ir.Constant(I8, 0)), blocks[0], blocks[1])
        else:
            index = b.load(self.pointer(c.index), typ=I32)
            switch = b.switch(index, blocks[-1])
            for k, block in enumerate(blocks[:-1]):
                switch.add_case(ir.Constant(I32, k), block)
        for branch, block in zip(c.branches, blocks):
            b.position_at_end(block)
            self._emit_steps(branch)
            b.branch(done)
        b.position_at_end(done)

    def _function_name(self, instr) -> str:
        return self.llvm_module.get_unique_name(f"{self.interface.name}.{instr.name}")

    def _emit_loop_call(self, step: Loop | Kernel, emit_function=None,
                        scratch: BufferSlice | None = None) -> None:
        """A loop function (``emit_function`` None: of element generators), or a routine
        of its own (sort, topk, scatter) called as one."""
        instr = step.instr
        leaves = step.result if isinstance(step.result, tuple) else (step.result,)
        out = leaves[0]
        size = instr.shape.byte_size
        operands = [(p, instr.operands[k].shape.byte_size)
                    for p, k in zip(step.operands, step.passed)]
        in_place = [p.start == out.start and s == size for p, s in operands]
        out_arg = self.pointer_arg(out, size, [o for o, same in zip(operands, in_place)
                                               if not same])
        operand_args = [PointerArg(out_arg.align, False, True) if same
                        else self.pointer_arg(p, s, [(out, size)])
                        for (p, s), same in zip(operands, in_place)]
        em = []

        def factory(b):
            em.append(ElementalEmitter(b, self.constants, self.target.float_abi))
            return em[-1]

        split = None
        if self.thread_scratch is not None and emit_function is None:
            split = loop_split(instr)
        extra = {} if split is None else {"split_dim": split[0]}
        if emit_function is None:
            emit_function = emit_elemental_function
            extra["vector_bytes"] = self.target.vector_bytes
        offsets = [leaf.offset - out.offset for leaf in leaves]
        key = None
        if emit_function is emit_elemental_function:
            key = ("loop", structural_key(instr), out_arg, tuple(operand_args),
                   tuple(offsets), tuple(sorted(extra.items())))
        fn = self._shared.get(key) if key is not None else None
        if fn is None:
            fn = emit_function(self.llvm_module, instr, self._function_name(instr), factory,
                               out_arg, operand_args, offsets, **extra)
            self.libcalls.update(*(e.libcalls for e in em))
            if key is not None:
                self._shared[key] = fn
        args = [self.pointer(out)] + [self.pointer(p) for p, _ in operands]
        if scratch is not None:
            args.append(self.pointer(scratch))
        if split is None:
            self.sites.append((self.b.call(fn, args), instr.name))
            return
        dim, cap = split
        extent = instr.shape.leaves()[0].dims[dim]

        def task(b, values, index):
            lo, hi = part(b, index, values[-1], extent, 1, cap, self.size_t.width)
            b.call(fn, values[:-1] + [lo, hi])

        self._parallel_for(instr, args, cap, task)

    def _parallel_for(self, instr, pointers: list, cap: int, body) -> None:
        """pool->parallel_for over min(threads, ``cap``) tasks of
        ``body(b, pointers + [tasks], i)``, the pointers passed through a context on
        the stack."""
        b = self.b
        fields = [PTR] * len(pointers) + [I64]
        fn, ctx_ty = emit_task(self.llvm_module, f"{self._function_name(instr)}.task",
                               self.size_t, fields, body)
        with b.goto_entry_block():
            ctx = b.alloca(ctx_ty, name=f"{instr.name}.ctx")
        tasks = b.select(b.icmp_unsigned("<", self.threads, i64(cap)), self.threads, i64(cap))
        for k, v in enumerate(pointers + [tasks]):
            b.store(v, b.gep(ctx, [ir.Constant(I32, 0), ir.Constant(I32, k)], inbounds=True))
        n = tasks if self.size_t.width == 64 else b.trunc(tasks, self.size_t)
        self.sites.append((b.call(self.parallel_for, [self.pool_ctx, fn, ctx, n]), instr.name))
        self.tasks[instr.name] = fn

    def _emit_kernel_call(self, step: Kernel) -> None:
        # Kernels take the sizes that vary between layers as i64 arguments: ops with one
        # spec (e.g. all 1x1 convolutions) share one function, which saves most of
        # LLVM's time (DenseNet-121's 121 convolutions need 3 functions).
        instr, plan = step.instr, step.kernel.plan
        key = (instr.opcode, plan.spec)
        fn = self._kernels.get(key)
        if fn is None:
            fn = kernel_function(self.llvm_module, self._function_name(instr), plan.spec)
            self._kernels[key] = fn
        pack = getattr(plan.spec, "pack_weights", None)
        args = [self.pointer(_base(step.result))]
        for k, (o, operand) in enumerate(zip(instr.operands, step.operands)):
            if k == 1 and pack is not None:
                # The kernel reads its constant weights packed in its own order, in place
                # of the constant (not emitted then, unless something else reads it).
                packed = pack(o.literal, plan.sizes)
                args.append(self.constants.global_for_bytes(packed.tobytes()))
            else:
                args.append(self.pointer(operand))
        args += [self.constants.global_for_bytes(np.float32(v).tobytes(), 4)
                 for v in plan.spec.constant_operands]
        if step.scratch is not None:
            args.append(self.pointer(step.scratch))
        split = None
        if self.thread_scratch is not None:
            split = kernel_split(plan, tiling_for(self.target))
        if split is None:
            self.sites.append((self.b.call(fn, args + [i64(v) for v in plan.arguments]),
                               instr.name))
            return
        spec = plan.spec
        if split.spec is not None:
            # The kernel variant that finds its part from a size argument.
            spec = split.spec
            fn = self._kernels.get((instr.opcode, spec))
            if fn is None:
                fn = kernel_function(self.llvm_module, self._function_name(instr), spec)
                self._kernels[(instr.opcode, spec)] = fn
        with_scratch = plan.scratch_bytes > 0
        n_extra = plan.spec.extra_operands
        channels = plan.spec.epilogue.channel_operands if n_extra else frozenset()
        full = plan.spec.epilogue.full_operands if n_extra else frozenset()
        if with_scratch:
            args.append(gep_bytes(self.b, self.arena, self.thread_scratch.base))
        slot = self.thread_scratch.size

        def task(b, values, index):
            lo, hi = part(b, index, values[-1], split.total, split.unit, split.cap,
                          self.size_t.width)
            out, lhs, rhs = (moved(b, p, lo, stride, 4)     # the fast paths are f32
                             for p, stride in zip(values[:3], split.strides))
            # An epilogue's operands (after rhs): values per output channel move with
            # the part's first channel, full-size ones as the output, scalars stay.
            extra = [moved(b, p, lo, split.strides[0] if k in full else
                           split.channels if k in channels else 0, 4)
                     for k, p in enumerate(values[3:3 + n_extra])]
            pointers = [out, lhs, rhs, *extra]
            if with_scratch:
                first, slots = values[3 + n_extra], values[4 + n_extra]
                mine = gep_bytes(b, slots, b.mul(b.sub(index, i64(1)), i64(slot)))
                pointers.append(b.select(b.icmp_unsigned("==", index, i64(0)), first, mine))
            b.call(fn, pointers + split.arguments(b, plan.sizes, lo, hi))

        self._parallel_for(instr, args, split.cap, task)

    def _emit_quantized_call(self, step: Kernel) -> None:
        """An integer convolution or dot with its epilogue (kernels/qconv.py), compiled for
        this layer: it reads the fusion's operands that are not constants."""
        key = ("quantized", structural_key(step.instr))
        fn = self._shared.get(key)
        if fn is None:
            fn = self._shared[key] = step.kernel.plan.emit(
                self.llvm_module, self._function_name(step.instr), self.constants)
        args = [self.pointer(step.result)] + [self.pointer(o) for o in step.operands]
        self.sites.append((self.b.call(fn, args), step.instr.name))

    def _memcpy(self, dst: ir.Value, src: ir.Value, size: int) -> None:
        memcpy = declare_intrinsic(self.llvm_module, "llvm.memcpy", VOID, [PTR, PTR, I64, I1],
                                   [PTR, PTR, I64])
        self.b.call(memcpy, [dst, src, i64(size), ir.Constant(I1, 0)])


def _base(result: BufferSlice | tuple) -> BufferSlice:
    return result[0] if isinstance(result, tuple) else result


def _emit_run_v(llvm_module: ir.Module, interface: ModelInterface, compute: ir.Function,
                arena_size: int, arena_align: int, parallel: ir.Function | None = None,
                pointer_bits: int = 64) -> ir.Function:
    """Check the arguments, then compute. NULL pointers and a misaligned arena are reported
    as status codes rather than faults. With ``parallel`` (NAME_compute_parallel) it is
    NAME_run_parallel_v, taking the pool last, and ``compute`` is NAME_run_v: a NULL
    pool or one of fewer than two threads calls it (so NAME_compute keeps its one
    caller, and LLVM compiles the one-thread path as without the parallel entry).

    With a bound it is NAME_run(_parallel)_sized_v, taking the sizes first (one size_t
    per bound): a size of 0 or over the bound is XLAC_ERROR_SIZE_OUT_OF_BOUNDS, and the
    compute function runs once per sample (_emit_sample_loop)."""
    bound = interface.bound
    size_t = ir.IntType(pointer_bits)
    suffix = ("_parallel" if parallel is not None else "") + ("_sized" if bound else "")
    fnty = ir.FunctionType(I32, [PTR] * (bound is not None) + [PTR, PTR, PTR]
                           + [PTR] * (parallel is not None))
    fn = ir.Function(llvm_module, fnty, f"{interface.name}_run{suffix}_v")
    fn.attributes.add("nounwind")
    args = list(fn.args)
    sizes = args.pop(0) if bound is not None else None
    inputs, outputs, arena = args[:3]
    inputs.name, outputs.name, arena.name = "inputs", "outputs", "arena"
    leading = [sizes] if sizes is not None else []
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    fail_null = fn.append_basic_block("null_argument")
    null = ir.Constant(PTR, None)

    def require(cond_ok: ir.Value, fail: ir.Block, name: str) -> None:
        ok = fn.append_basic_block(name)
        b.cbranch(cond_ok, ok, fail)
        b.position_at_end(ok)

    if parallel is not None:
        pool = args[3]
        pool.name = "pool"
        single = fn.append_basic_block("single")
        one = ir.IRBuilder(single)
        one.ret(one.call(compute, leading + [inputs, outputs, arena]))
        require(b.icmp_unsigned("!=", pool, null), single, "pool.ok")
        at = field_index("xlac_threadpool", "threads")
        threads = b.load(b.gep(pool, [ir.Constant(I32, 0), ir.Constant(I32, at)],
                               source_etype=threadpool_type(size_t),
                               inbounds=True), typ=size_t)
        require(b.icmp_unsigned(">", threads, ir.Constant(size_t, 1)), single, "threaded")
    if sizes is not None:
        sizes.name = "sizes"
        require(b.icmp_unsigned("!=", sizes, null), fail_null, "sizes.ok")
        count = b.load(sizes, typ=size_t)
        # 0 wraps to the largest size_t: one unsigned compare rejects 0 and sizes over.
        fail_size = fn.append_basic_block("size_out_of_bounds")
        require(b.icmp_unsigned("<", b.sub(count, ir.Constant(size_t, 1)),
                                ir.Constant(size_t, bound.limit)), fail_size, "size.ok")
        ir.IRBuilder(fail_size).ret(ir.Constant(I32, XLAC_ERROR_SIZE_OUT_OF_BOUNDS))
    for array, count_, what in ((inputs, len(interface.inputs), "inputs"),
                                (outputs, len(interface.outputs), "outputs")):
        if count_ == 0:
            continue
        require(b.icmp_unsigned("!=", array, null), fail_null, f"{what}.array_ok")
        for k in range(count_):
            p = b.load(b.gep(array, [i64(k)], source_etype=PTR, inbounds=True), typ=PTR)
            require(b.icmp_unsigned("!=", p, null), fail_null, f"{what}.{k}.ok")
    if arena_size > 0:
        require(b.icmp_unsigned("!=", arena, null), fail_null, "arena.ok")
        misaligned = b.and_(b.ptrtoint(arena, I64), i64(arena_align - 1))
        fail_align = fn.append_basic_block("misaligned_arena")
        require(b.icmp_unsigned("==", misaligned, i64(0)), fail_align, "arena.aligned")
        ir.IRBuilder(fail_align).ret(ir.Constant(I32, XLAC_ERROR_ARENA_ALIGNMENT))
    target = compute if parallel is None else parallel
    rest = [inputs, outputs, arena] + ([args[3]] if parallel is not None else [])
    if sizes is None:
        b.call(target, rest)
    else:
        b.call(_emit_sample_loop(llvm_module, interface, target, size_t), [count] + rest)
    b.ret(ir.Constant(I32, XLAC_OK))
    ir.IRBuilder(fail_null).ret(ir.Constant(I32, XLAC_ERROR_NULL_ARGUMENT))
    return fn


def _emit_sample_loop(llvm_module: ir.Module, interface: ModelInterface,
                      compute: ir.Function, size_t: ir.IntType) -> ir.Function:
    """COMPUTE_samples(n, inputs, outputs, arena, ...): ``compute``, which computes one
    sample, once per sample; sample i of a port is its i-th block of one sample's bytes
    (the batch is every port's leading dimension). The arena is reused: samples run one
    after another."""
    extra = [a.type for a in compute.args[3:]]
    fn = ir.Function(llvm_module, ir.FunctionType(VOID, [size_t, PTR, PTR, PTR] + extra),
                     f"{compute.name}_samples")
    fn.linkage = "internal"
    fn.attributes.add("nounwind")
    n, inputs, outputs, arena = fn.args[:4]
    limit = interface.bound.limit
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    loop, done = fn.append_basic_block("sample"), fn.append_basic_block("done")
    arrays = []
    for array, ports in ((inputs, interface.inputs), (outputs, interface.outputs)):
        bases = [b.load(b.gep(array, [i64(k)], source_etype=PTR, inbounds=True), typ=PTR)
                 for k in range(len(ports))]
        one = b.alloca(ir.ArrayType(PTR, max(len(ports), 1)))
        arrays.append((one, bases, [p.size_bytes // limit for p in ports]))
    count = n if size_t.width == 64 else b.zext(n, I64)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(I64, "i")
    i.add_incoming(i64(0), fn.blocks[0])
    for one, bases, strides in arrays:
        for k, (base, stride) in enumerate(zip(bases, strides)):
            b.store(gep_bytes(b, base, b.mul(i, i64(stride))),
                    b.gep(one, [i64(0), i64(k)], inbounds=True))
    b.call(compute, [arrays[0][0], arrays[1][0], arena, *fn.args[4:]])
    following = b.add(i, i64(1))
    i.add_incoming(following, loop)
    b.cbranch(b.icmp_unsigned("<", following, count), loop, done)
    ir.IRBuilder(done).ret_void()
    return fn


def _emit_run_at_bound(llvm_module: ir.Module, interface: ModelInterface,
                       sized_v: ir.Function, size_t: ir.IntType) -> ir.Function:
    """NAME_run(_parallel)_v of a bounded object: its sized entry at the bound, for
    drivers that size every buffer from NAME_info."""
    name = sized_v.name.replace("_sized_v", "_v")
    fn = ir.Function(llvm_module, ir.FunctionType(I32, [a.type for a in sized_v.args[1:]]),
                     name)
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    sizes = b.alloca(size_t)
    b.store(ir.Constant(size_t, interface.bound.limit), sizes)
    b.ret(b.call(sized_v, [sizes, *fn.args]))
    return fn


def _emit_run(llvm_module: ir.Module, interface: ModelInterface, run_v: ir.Function,
              parallel: bool = False, pointer_bits: int = 64) -> ir.Function:
    """The typed entry: gathers its pointer arguments into arrays on the stack.
    ``parallel``: NAME_run_parallel, which takes the pool after the arena. A bounded
    object's takes the bound's size first and calls the sized ``run_v``."""
    n_in, n_out = len(interface.inputs), len(interface.outputs)
    extra = ["arena", "pool"] if parallel else ["arena"]
    size_t = ir.IntType(pointer_bits)
    lead = [size_t] if interface.bound is not None else []
    fnty = ir.FunctionType(I32, lead + [PTR] * (n_in + n_out + len(extra)))
    fn = ir.Function(llvm_module, fnty, f"{interface.name}_run" + ("_parallel" if parallel
                                                                   else ""))
    fn.attributes.add("nounwind")
    args = list(fn.args)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    leading = []
    if lead:
        count = args.pop(0)
        count.name = interface.bound.c_name
        sizes = b.alloca(size_t)
        b.store(count, sizes)
        leading = [sizes]
    for arg, port in zip(args, interface.inputs + interface.outputs):
        arg.name = port.c_name
    for arg, label in zip(args[n_in + n_out:], extra):
        arg.name = label
    arrays = []
    for group in (args[:n_in], args[n_in:n_in + n_out]):
        if not group:
            arrays.append(ir.Constant(PTR, None))
            continue
        array = b.alloca(ir.ArrayType(PTR, len(group)))
        for k, a in enumerate(group):
            b.store(a, b.gep(array, [i64(0), i64(k)], inbounds=True))
        arrays.append(array)
    b.ret(b.call(run_v, [*leading, *arrays, *args[n_in + n_out:]]))
    return fn


def emit_entry(llvm_module: ir.Module, steps, assignment: BufferAssignment,
               interface: ModelInterface, target: TargetInfo, constants: ConstantPool,
               parallel: bool = False
               ) -> tuple[set[str], ThreadScratch | None, list[_ComputeEmitter]]:
    """Define NAME_compute (the ``steps``), NAME_run_v and NAME_run, and with
    ``parallel`` NAME_compute_parallel, NAME_run_parallel_v and NAME_run_parallel;
    returns the C library functions the code calls (see ElementalEmitter.libcalls), with
    ``parallel`` where the extra threads' scratch lies, and the compute functions'
    emitters (their ``sites`` and ``tasks``, for profile.py)."""
    bits = target.pointer_bits
    compute = _ComputeEmitter(llvm_module, assignment, interface, target, constants)
    compute.emit(steps)
    run_v = _emit_run_v(llvm_module, interface, compute.fn, assignment.arena_size,
                        assignment.alignment, pointer_bits=bits)
    _emit_run(llvm_module, interface, run_v, pointer_bits=bits)
    if interface.bound is not None:
        _emit_run_at_bound(llvm_module, interface, run_v, ir.IntType(bits))
    if not parallel:
        return compute.libcalls, None, [compute]
    scratch = thread_scratch(steps, assignment, target)
    threaded = _ComputeEmitter(llvm_module, assignment, interface, target, constants, scratch)
    threaded.emit(steps)
    run_pv = _emit_run_v(llvm_module, interface, run_v, assignment.arena_size,
                         assignment.alignment, threaded.fn, bits)
    _emit_run(llvm_module, interface, run_pv, parallel=True, pointer_bits=bits)
    if interface.bound is not None:
        _emit_run_at_bound(llvm_module, interface, run_pv, ir.IntType(bits))
    return compute.libcalls | threaded.libcalls, scratch, [compute, threaded]
