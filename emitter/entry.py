"""The model's functions: the internal compute function and the two public entries.

    void NAME_compute(ptr inputs, ptr outputs, ptr arena)        (internal)
    i32  NAME_run_v(ptr inputs, ptr outputs, ptr arena)
    i32  NAME_run(ptr in0, ..., ptr out0, ..., ptr arena)

NAME_compute walks ``assignment.order``: views, tuples, parameters and constants emit
no code; dot and convolution call kernels (emitter/kernels/); sort and topk call their
functions (sort.py), scatter its own (scatter.py); everything else calls its loop
function (loops.py). Model outputs that do not already live in their output slot are
copied there at the end. A while becomes a loop in NAME_compute itself that runs its
condition's steps and, while that gives true, its body's steps (their own loop and
kernel calls, in ``assignment.computations[c].order``); a conditional jumps to the
steps of one branch. A callee's parameter and outputs are the places of its caller's
operands and results (a ``_Frame``); the body's outputs that do not already live in the
state are copied there at the end of the body. All state lives in the caller's buffers:
no mutable globals, so the code is reentrant.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ..hlo import Computation, Instruction, Module, Opcode, XlacError
from ..optimizer.aliasing import parameter_leaf, view_offset
from ..optimizer.buffer_assignment import BufferAssignment
from . import kernels
from .constants import CONSTANT_ALIGN, ConstantPool
from .elemental import ElementalEmitter
from .interface import ModelInterface
from .intrinsics import declare_intrinsic
from .kernels.function import kernel_function
from .kernels.gemm import tiling_for
from .kernels.qconv import plan_quantized
from .irutil import I1, I8, I32, I64, PTR, VOID, gep_bytes, i64
from .loops import PointerArg, emit_elemental_function, leaf_offsets, passed_operands
from .parallel import emit_task, kernel_split, loop_split, moved, part, thread_scratch_bytes
from .scatter import emit_scatter_function
from .sort import emit_sort_function, emit_topk_function
from .target import TargetInfo

# runtime_c/xlac_runtime.h: enum xlac_status
XLAC_OK, XLAC_ERROR_NULL_ARGUMENT, XLAC_ERROR_ARENA_ALIGNMENT = 0, 1, 2

_NO_CODE = frozenset({Opcode.PARAMETER, Opcode.CONSTANT, Opcode.TUPLE, Opcode.GET_TUPLE_ELEMENT})
# A tuple-shaped value's places: one per element.
Places = tuple


@dataclass(frozen=True)
class Place:
    """Where a value's bytes are: ``space`` 'input' | 'output' | 'arena' | 'constant'
    (``key`` the constant instruction) at ``offset`` bytes into buffer ``index``."""
    space: str
    index: int = 0
    offset: int = 0
    key: Instruction | None = None

    def overlaps(self, size: int, other: "Place", other_size: int) -> bool:
        if self.space == "constant" or (self.space, self.index) != (other.space, other.index):
            return False
        return self.offset < other.offset + other_size and other.offset < self.offset + size


@dataclass(frozen=True)
class _Frame:
    """Where a computation's parameter elements and outputs are: for the entry the
    caller's buffers; for a loop condition or body the loop state's elements
    (``outputs`` None for the condition, whose result is read where it is); for a
    branch its operand's elements and the conditional's result's."""
    inputs: tuple
    outputs: tuple | None


class _Places:
    """Resolves every value to a Place (a tuple of Places for a tuple-shaped value),
    following views, tuple elements and, into a callee, its frame."""

    def __init__(self, assignment: BufferAssignment):
        self._assignment = assignment
        self._places: dict[Instruction, Place | Places] = {}

    def __getitem__(self, instr: Instruction) -> Place | Places:
        return self._places[instr]

    def leaves(self, instr: Instruction) -> tuple:
        place = self._places[instr]
        return place if isinstance(place, tuple) else (place,)

    def resolve(self, instr: Instruction, frame: _Frame) -> None:
        op = instr.opcode
        if op is Opcode.PARAMETER:
            place = frame.inputs if instr.shape.is_tuple else frame.inputs[instr.number]
        elif parameter_leaf(instr):
            place = frame.inputs[instr.attrs["index"]]
        elif op is Opcode.CONSTANT:
            place = Place("constant", key=instr)
        elif op is Opcode.TUPLE:
            place = tuple(self._places[o] for o in instr.operands)
        elif op is Opcode.WHILE:     # the state lives where the init's elements do
            place = self._places[instr.operands[0]]
        elif op is Opcode.GET_TUPLE_ELEMENT:
            place = self._places[instr.operands[0]][instr.attrs["index"]]
        elif view_offset(instr) is not None:       # reshape, bitcast, contiguous slice
            base = self._places[instr.operands[0]]
            place = Place(base.space, base.index, base.offset + view_offset(instr), base.key)
        else:
            base = self.owned(instr, frame)
            place = base if not instr.shape.is_tuple else tuple(
                Place(base.space, base.index, base.offset + off)
                for off in leaf_offsets(instr.shape, self._assignment.alignment))
        self._places[instr] = place

    def owned(self, instr: Instruction, frame: _Frame) -> Place:
        """The start of the buffer ``instr`` owns."""
        loc = self._assignment.location(instr)
        if loc.space == "arena":
            return Place("arena", 0, loc.offset)
        if loc.space in ("input", "output"):
            ports = frame.inputs if loc.space == "input" else frame.outputs
            base = ports[loc.index]
            return Place(base.space, base.index, base.offset + loc.offset, base.key)
        raise XlacError(f"%{instr.name}: buffer assignment placed a computed value in "
                        f"'{loc.space}'")

    def base(self, instr: Instruction) -> Place:
        """Where the bytes of an array value, or a tuple-shaped op's buffer, start."""
        place = self._places[instr]
        return place[0] if isinstance(place, tuple) else place


@dataclass(frozen=True)
class ThreadScratch:
    """Where NAME_run_parallel's extra threads keep their kernel scratch (parallel.py):
    slot i - 1 of task i > 0 is ``size`` bytes at ``base + (i - 1) * size``."""
    base: int
    size: int


def thread_scratch(module: Module, assignment: BufferAssignment,
                   target: TargetInfo) -> ThreadScratch:
    """The slots every split kernel of ``module`` fits in, after the arena."""
    tiling = tiling_for(target)
    plans = []
    for comp in module.computations:
        for instr in comp.instructions:
            if kernels.is_kernel(instr, target):
                plan = kernels.plan_kernel(instr, target, instr in assignment.lean_kernels)
                if kernel_split(plan, tiling) is not None:
                    plans.append(plan)
    size = thread_scratch_bytes(plans, assignment.alignment)
    align = assignment.alignment
    base = -(-assignment.arena_size // align) * align if size else assignment.arena_size
    return ThreadScratch(base, size)


class _ComputeEmitter:
    """Emits NAME_compute's body: one call per instruction, then the output copies.

    With ``scratch`` (a ThreadScratch) it emits NAME_compute_parallel(inputs, outputs,
    arena, pool) instead: the same steps, the big ones split into tasks for the pool
    (parallel.py). It emits its own loop and kernel functions: sharing NAME_compute's
    would give them a second caller, with sizes that vary, which changes what LLVM
    inlines and specializes in the one-thread entry."""

    def __init__(self, llvm_module: ir.Module, module: Module, assignment: BufferAssignment,
                 interface: ModelInterface, target: TargetInfo, constants: ConstantPool,
                 scratch: ThreadScratch | None = None):
        self.llvm_module = llvm_module
        self.module = module
        self.assignment = assignment
        self.interface = interface
        self.target = target
        self.constants = constants
        self.places = _Places(assignment)
        self.libcalls: set[str] = set()
        self._kernels: dict[tuple, ir.Function] = {}
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
            pool_ty = ir.LiteralStructType([PTR, PTR, self.size_t])
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

    # -- places as pointers --
    def pointer(self, place: Place) -> ir.Value:
        if place.space == "constant":
            return gep_bytes(self.b, self.constants.global_for(place.key), place.offset)
        base = {"input": lambda: self.inputs[place.index],
                "output": lambda: self.outputs[place.index],
                "arena": lambda: self.arena}[place.space]()
        return gep_bytes(self.b, base, place.offset)

    def base_align(self, place: Place) -> int:
        if place.space == "constant":
            return CONSTANT_ALIGN
        if place.space == "arena":
            return self.assignment.alignment
        ports = self.interface.inputs if place.space == "input" else self.interface.outputs
        return ports[place.index].dtype.itemsize     # callers' arrays are element-aligned

    def pointer_arg(self, place: Place, size: int, others) -> PointerArg:
        align = self.base_align(place)
        while align > 1 and place.offset % align:
            align //= 2
        noalias = not any(place.overlaps(size, p, s) for p, s in others)
        return PointerArg(align, noalias)

    # -- instructions --
    def emit(self) -> None:
        entry = _Frame(tuple(Place("input", k) for k in range(len(self.interface.inputs))),
                       tuple(Place("output", k) for k in range(len(self.interface.outputs))))
        self._emit_computation(self.module.entry, self.assignment.order, entry)
        self.b.ret_void()

    def _emit_computation(self, comp: Computation, order: list[Instruction],
                          frame: _Frame) -> None:
        """The steps of ``comp`` at the builder's position, then the copies of its outputs
        that do not already live in their frame's places."""
        for instr in order:
            self.places.resolve(instr, frame)
            if instr.opcode in _NO_CODE or view_offset(instr) is not None:
                continue
            if instr.opcode is Opcode.WHILE:
                self._emit_while(instr)
            elif instr.opcode is Opcode.CONDITIONAL:
                self._emit_conditional(instr)
            elif instr.shape.num_elements == 0 and not instr.shape.is_tuple:
                continue
            elif instr in self.assignment.concats_in_place:
                self._emit_concat_copies(instr)
            elif kernels.is_kernel(instr, self.target):
                self._emit_kernel_call(instr)
            elif instr.opcode is Opcode.SORT:
                self._emit_loop_call(instr, emit_sort_function)
            elif instr.opcode is Opcode.TOPK:
                self._emit_loop_call(instr, emit_topk_function)
            elif instr.opcode is Opcode.SCATTER:
                self._emit_loop_call(instr, emit_scatter_function)
            elif (quantized := plan_quantized(instr, self.target)) is not None:
                self._emit_quantized_call(instr, quantized)
            else:
                self._emit_loop_call(instr)
        if frame.outputs is not None:
            self._emit_output_copies(comp, frame)

    def _callee(self, comp: Computation, frame: _Frame) -> None:
        self._emit_computation(comp, self.assignment.computations[comp].order, frame)

    def _emit_while(self, w: Instruction) -> None:
        """cond: the condition's steps, then on to the body or out; body: the body's
        steps, then back to cond. The state stays where the init's elements are."""
        cond, body = w.called
        state = self.places.leaves(w)
        b = self.b
        head = self.fn.append_basic_block(f"{w.name}.cond")
        loop = self.fn.append_basic_block(f"{w.name}.body")
        done = self.fn.append_basic_block(f"{w.name}.end")
        b.branch(head)
        b.position_at_end(head)
        self._callee(cond, _Frame(state, None))
        pred = b.load(self.pointer(self.places[cond.root]), typ=I8)
        b.cbranch(b.icmp_unsigned("!=", pred, ir.Constant(I8, 0)), loop, done)
        b.position_at_end(loop)
        self._callee(body, _Frame(state, state))
        b.branch(head)
        b.position_at_end(done)

    def _emit_conditional(self, c: Instruction) -> None:
        """A pred picks branch 0 (true) or 1; an s32 index picks its branch, the last
        one when out of range (a switch's default)."""
        b = self.b
        index_place = self.places[c.operands[0]]
        results = self.places.leaves(c)
        blocks = [self.fn.append_basic_block(f"{c.name}.branch{k}") for k in range(len(c.called))]
        done = self.fn.append_basic_block(f"{c.name}.end")
        if c.operands[0].shape.dtype.is_pred:
            pred = b.load(self.pointer(index_place), typ=I8)
            b.cbranch(b.icmp_unsigned("!=", pred, ir.Constant(I8, 0)), blocks[0], blocks[1])
        else:
            index = b.load(self.pointer(index_place), typ=I32)
            switch = b.switch(index, blocks[-1])
            for k, block in enumerate(blocks[:-1]):
                switch.add_case(ir.Constant(I32, k), block)
        for k, (branch, block) in enumerate(zip(c.called, blocks)):
            b.position_at_end(block)
            self._callee(branch, _Frame(self.places.leaves(c.operands[k + 1]), results))
            b.branch(done)
        b.position_at_end(done)

    def _function_name(self, instr: Instruction) -> str:
        return self.llvm_module.get_unique_name(f"{self.interface.name}.{instr.name}")

    def _emit_loop_call(self, instr: Instruction, emit_function=emit_elemental_function) -> None:
        out = self.places.base(instr)
        size = instr.shape.byte_size
        operands = [(self.places.base(instr.operands[k]), instr.operands[k].shape.byte_size)
                    for k in passed_operands(instr)]
        in_place = [p == out and s == size for p, s in operands]
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
        if (self.thread_scratch is not None and emit_function is emit_elemental_function
                and instr not in self.assignment.scratch):
            split = loop_split(instr)
        extra = {} if split is None else {"split_dim": split[0]}
        if emit_function is emit_elemental_function:
            extra["vector_bytes"] = self.target.vector_bytes
        fn = emit_function(self.llvm_module, instr, self._function_name(instr), factory,
                           out_arg, operand_args, self.assignment.alignment, **extra)
        self.libcalls.update(*(e.libcalls for e in em))
        args = [self.pointer(out)] + [self.pointer(p) for p, _ in operands]
        if instr in self.assignment.scratch:
            loc = self.assignment.scratch[instr]
            args.append(self.pointer(Place(loc.space, loc.index, loc.offset)))
        if split is None:
            self.sites.append((self.b.call(fn, args), instr.name))
            return
        dim, cap = split
        extent = instr.shape.leaves()[0].dims[dim]

        def task(b, values, index):
            lo, hi = part(b, index, values[-1], extent, 1, cap, self.size_t.width)
            b.call(fn, values[:-1] + [lo, hi])

        self._parallel_for(instr, args, cap, task)

    def _parallel_for(self, instr: Instruction, pointers: list, cap: int, body) -> None:
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

    def _emit_kernel_call(self, instr: Instruction) -> None:
        # Kernels take the sizes that vary between layers as i64 arguments: ops with one
        # kernel key (e.g. all 1x1 convolutions) share one function, which saves most of
        # LLVM's time (DenseNet-121's 121 convolutions need 3 functions).
        lean = instr in self.assignment.lean_kernels
        key = kernels.kernel_key(instr, self.target, lean)
        fn = self._kernels.get(key)
        if fn is None:
            fn = kernels.emit_kernel(self.llvm_module, instr, self._function_name(instr),
                                     self.target, lean)
            self._kernels[key] = fn
        plan = kernels.plan_kernel(instr, self.target, lean)
        pack = getattr(plan.spec, "pack_weights", None)
        args = [self.pointer(self.places.base(instr))]
        for k, o in enumerate(instr.operands):
            if k == 1 and pack is not None:
                # The kernel reads its constant weights packed in its own order, in place
                # of the constant (not emitted then, unless something else reads it).
                packed = pack(o.literal, plan.sizes)
                args.append(self.constants.global_for_bytes(packed.tobytes()))
            else:
                args.append(self.pointer(self.places[o]))
        if plan.scratch_bytes > 0:
            loc = self.assignment.scratch[instr]
            args.append(self.pointer(Place(loc.space, loc.index, loc.offset)))
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

    def _emit_quantized_call(self, instr: Instruction, kernel) -> None:
        """An integer convolution or dot with its epilogue (kernels/qconv.py), compiled for
        this layer: it reads the fusion's operands that are not constants."""
        fn = kernel.emit(self.llvm_module, self._function_name(instr), self.constants)
        args = [self.pointer(self.places[instr])]
        args += [self.pointer(self.places[instr.operands[k]]) for k in kernel.passed]
        self.sites.append((self.b.call(fn, args), instr.name))

    def _memcpy(self, dst: ir.Value, src: ir.Value, size: int) -> None:
        memcpy = declare_intrinsic(self.llvm_module, "llvm.memcpy", VOID, [PTR, PTR, I64, I1],
                                   [PTR, PTR, I64])
        self.b.call(memcpy, [dst, src, i64(size), ir.Constant(I1, 0)])

    def _emit_concat_copies(self, instr: Instruction) -> None:
        """A concatenation built in place: its operands' producers wrote into their
        slices; copy in only the operands that live elsewhere (inputs, constants,
        values that could not take a slot)."""
        out = self.places[instr]
        offset = 0
        for o in instr.operands:
            size = o.shape.byte_size
            slot = Place(out.space, out.index, out.offset + offset)
            if size and self.places[o] != slot:
                self._memcpy(self.pointer(slot), self.pointer(self.places[o]), size)
            offset += size

    def _emit_output_copies(self, comp: Computation, frame: _Frame) -> None:
        # A loop body's outputs live in its own buffers, never in another output's
        # place (control_flow.py copies rotated state elements), so the order of these
        # copies does not matter.
        for instr, target in zip(comp.outputs, frame.outputs):
            place = self.places[instr]
            if place == target or instr.shape.byte_size == 0:
                continue
            self._memcpy(self.pointer(target), self.pointer(place), instr.shape.byte_size)


def _emit_run_v(llvm_module: ir.Module, interface: ModelInterface, compute: ir.Function,
                arena_size: int, arena_align: int, parallel: ir.Function | None = None,
                pointer_bits: int = 64) -> ir.Function:
    """Check the arguments, then compute. NULL pointers and a misaligned arena are reported
    as status codes rather than faults. With ``parallel`` (NAME_compute_parallel) it is
    NAME_run_parallel_v, taking the pool last, and ``compute`` is NAME_run_v: a NULL
    pool or one of fewer than two threads calls it (so NAME_compute keeps its one
    caller, and LLVM compiles the one-thread path as without the parallel entry)."""
    suffix = "_parallel_v" if parallel is not None else "_v"
    fnty = ir.FunctionType(I32, [PTR, PTR, PTR] + ([PTR] if parallel is not None else []))
    fn = ir.Function(llvm_module, fnty, f"{interface.name}_run{suffix}")
    fn.attributes.add("nounwind")
    inputs, outputs, arena = fn.args[:3]
    inputs.name, outputs.name, arena.name = "inputs", "outputs", "arena"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    fail_null = fn.append_basic_block("null_argument")
    null = ir.Constant(PTR, None)

    def require(cond_ok: ir.Value, fail: ir.Block, name: str) -> None:
        ok = fn.append_basic_block(name)
        b.cbranch(cond_ok, ok, fail)
        b.position_at_end(ok)

    if parallel is not None:
        pool = fn.args[3]
        pool.name = "pool"
        single = fn.append_basic_block("single")
        one = ir.IRBuilder(single)
        one.ret(one.call(compute, [inputs, outputs, arena]))
        require(b.icmp_unsigned("!=", pool, null), single, "pool.ok")
        size_t = ir.IntType(pointer_bits)   # xlac_threadpool.threads, its third field
        threads = b.load(b.gep(pool, [ir.Constant(I32, 0), ir.Constant(I32, 2)],
                               source_etype=ir.LiteralStructType([PTR, PTR, size_t]),
                               inbounds=True), typ=size_t)
        require(b.icmp_unsigned(">", threads, ir.Constant(size_t, 1)), single, "threaded")
    for array, count, what in ((inputs, len(interface.inputs), "inputs"),
                               (outputs, len(interface.outputs), "outputs")):
        if count == 0:
            continue
        require(b.icmp_unsigned("!=", array, null), fail_null, f"{what}.array_ok")
        for k in range(count):
            p = b.load(b.gep(array, [i64(k)], source_etype=PTR, inbounds=True), typ=PTR)
            require(b.icmp_unsigned("!=", p, null), fail_null, f"{what}.{k}.ok")
    if arena_size > 0:
        require(b.icmp_unsigned("!=", arena, null), fail_null, "arena.ok")
        misaligned = b.and_(b.ptrtoint(arena, I64), i64(arena_align - 1))
        fail_align = fn.append_basic_block("misaligned_arena")
        require(b.icmp_unsigned("==", misaligned, i64(0)), fail_align, "arena.aligned")
        ir.IRBuilder(fail_align).ret(ir.Constant(I32, XLAC_ERROR_ARENA_ALIGNMENT))
    if parallel is None:
        b.call(compute, [inputs, outputs, arena])
    else:
        b.call(parallel, [inputs, outputs, arena, fn.args[3]])
    b.ret(ir.Constant(I32, XLAC_OK))
    ir.IRBuilder(fail_null).ret(ir.Constant(I32, XLAC_ERROR_NULL_ARGUMENT))
    return fn


def _emit_run(llvm_module: ir.Module, interface: ModelInterface, run_v: ir.Function,
              parallel: bool = False) -> ir.Function:
    """The typed entry: gathers its pointer arguments into arrays on the stack.
    ``parallel``: NAME_run_parallel, which takes the pool after the arena."""
    n_in, n_out = len(interface.inputs), len(interface.outputs)
    extra = ["arena", "pool"] if parallel else ["arena"]
    fnty = ir.FunctionType(I32, [PTR] * (n_in + n_out + len(extra)))
    fn = ir.Function(llvm_module, fnty, f"{interface.name}_run" + ("_parallel" if parallel
                                                                   else ""))
    fn.attributes.add("nounwind")
    for arg, port in zip(fn.args, interface.inputs + interface.outputs):
        arg.name = port.c_name
    for arg, label in zip(fn.args[n_in + n_out:], extra):
        arg.name = label
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    arrays = []
    for args in (fn.args[:n_in], fn.args[n_in:n_in + n_out]):
        if not args:
            arrays.append(ir.Constant(PTR, None))
            continue
        array = b.alloca(ir.ArrayType(PTR, len(args)))
        for k, a in enumerate(args):
            b.store(a, b.gep(array, [i64(0), i64(k)], inbounds=True))
        arrays.append(array)
    b.ret(b.call(run_v, [*arrays, *fn.args[n_in + n_out:]]))
    return fn


def emit_entry(llvm_module: ir.Module, module: Module, assignment: BufferAssignment,
               interface: ModelInterface, target: TargetInfo, constants: ConstantPool,
               parallel: bool = False
               ) -> tuple[set[str], ThreadScratch | None, list[_ComputeEmitter]]:
    """Define NAME_compute, NAME_run_v and NAME_run, and with ``parallel``
    NAME_compute_parallel, NAME_run_parallel_v and NAME_run_parallel; returns the C
    library functions the code calls (see ElementalEmitter.libcalls), with
    ``parallel`` where the extra threads' scratch lies, and the compute functions'
    emitters (their ``sites`` and ``tasks``, for profile.py)."""
    compute = _ComputeEmitter(llvm_module, module, assignment, interface, target, constants)
    compute.emit()
    run_v = _emit_run_v(llvm_module, interface, compute.fn, assignment.arena_size,
                        assignment.alignment)
    _emit_run(llvm_module, interface, run_v)
    if not parallel:
        return compute.libcalls, None, [compute]
    scratch = thread_scratch(module, assignment, target)
    threaded = _ComputeEmitter(llvm_module, module, assignment, interface, target, constants,
                               scratch)
    threaded.emit()
    run_pv = _emit_run_v(llvm_module, interface, run_v, assignment.arena_size,
                         assignment.alignment, threaded.fn, target.pointer_bits)
    _emit_run(llvm_module, interface, run_pv, parallel=True)
    return compute.libcalls | threaded.libcalls, scratch, [compute, threaded]
