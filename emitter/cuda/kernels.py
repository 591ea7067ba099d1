"""Device kernels of the CUDA renderer: one kernel per Loop step and per routine.

    hooks = NvptxHooks() | EmulationHooks()
    fn = loop_kernel(module, step_instr, name, hooks, weights, out, operands, offsets)

A loop kernel runs a grid-stride loop over the linear positions of its result: thread
t of the grid computes the elements t, t + threads, ... each the element generator's
value at that index (emitter/elemental.py, the CPU's generators and mathlib: no
libdevice). A routine (sort, topk, scatter: sequential algorithms) runs in one thread.

Every kernel takes ``(ptr out, ptr operand..., [ptr scratch,] ptr weights)``: the
constants its generators read are at fixed offsets of the device copy of the weights
(``WeightsBlob``), never in the PTX. Thread and block numbers come from ``hooks``:
the NVPTX special registers on a GPU, a state struct the stand-in driver fills when
the same IR is compiled for the host (tests/cuda: the emulation).
"""
from __future__ import annotations

import hashlib
from typing import Callable, Sequence

from llvmlite import ir

from ...hlo import Instruction, Opcode, XlacError
from ...hlo.fusion import is_loop_fusion
from ..constants import CONSTANT_ALIGN, storage_bytes
from ..elemental import ElementalEmitter, init_is_neutral
from ..indexing import linearize
from ..irutil import I32, I64, PTR, VOID, alloca_once, gep_bytes, gep_elem, i64, llvm_type
from ..loops import PointerArg, access_align, operand_generators, passed_operands

# Threads per block of a grid-stride kernel, and the most blocks a launch asks for
# (enough to fill any GPU; the loop covers the rest).
BLOCK_THREADS = 256
MAX_BLOCKS = 4096


class WeightsBlob:
    """The model's constants laid out in one buffer, which the host object holds and
    NAME_cuda_init copies to the device; identical bytes are stored once."""

    def __init__(self):
        self._parts: list[bytes] = []
        self._size = 0
        self._by_digest: dict[bytes, int] = {}

    def offset_of_bytes(self, data: bytes) -> int:
        digest = hashlib.sha256(data).digest()
        offset = self._by_digest.get(digest)
        if offset is None:
            pad = -self._size % CONSTANT_ALIGN
            self._parts.append(bytes(pad))
            offset = self._size + pad
            self._parts.append(data)
            self._size = offset + len(data)
            self._by_digest[digest] = offset
        return offset

    def offset_of(self, instr: Instruction) -> int:
        return self.offset_of_bytes(storage_bytes(instr.literal, instr.shape))

    def data(self) -> bytes:
        return b"".join(self._parts)


class KernelConstants:
    """The ConstantPool interface the element generators use, inside one kernel: a
    constant is its offset in the weights, from the kernel's weights argument."""

    def __init__(self, blob: WeightsBlob, b: ir.IRBuilder, weights: ir.Value):
        self.blob, self.b, self.weights = blob, b, weights

    def global_for(self, instr: Instruction) -> ir.Value:
        return gep_bytes(self.b, self.weights, self.blob.offset_of(instr))

    def global_for_bytes(self, data: bytes) -> ir.Value:
        return gep_bytes(self.b, self.weights, self.blob.offset_of_bytes(data))


class NvptxHooks:
    """Thread numbers from the PTX special registers, ``bar.sync`` for a barrier,
    addrspace(3) globals for shared memory; kernels get ``.entry``."""

    calling_convention = "ptx_kernel"

    def _sreg(self, b: ir.IRBuilder, reg: str, axis: str) -> ir.Value:
        return _call(b, f"llvm.nvvm.read.ptx.sreg.{reg}.{axis}", I32, [])

    def thread(self, b, axis="x"):
        return self._sreg(b, "tid", axis)

    def block_size(self, b, axis="x"):
        return self._sreg(b, "ntid", axis)

    def block(self, b, axis="x"):
        return self._sreg(b, "ctaid", axis)

    def grid_size(self, b, axis="x"):
        return self._sreg(b, "nctaid", axis)

    def barrier(self, b) -> None:
        _call(b, "llvm.nvvm.barrier0", VOID, [], attributes=("convergent",))

    def shared(self, b: ir.IRBuilder, name: str, ty: ir.Type) -> ir.Value:
        """A block's shared array of type ``ty``; a generic pointer to it."""
        module = b.module
        g = ir.GlobalVariable(module, ty, module.get_unique_name(name), addrspace=3)
        g.linkage = "internal"
        g.initializer = ir.Constant(ty, ir.Undefined)
        g.align = 16
        return b.addrspacecast(g, PTR)

    def finish(self, module: ir.Module, kernel: ir.Function, params: int) -> None:
        pass


def _call(b: ir.IRBuilder, name: str, ret: ir.Type, args: list, attributes=()) -> ir.Value:
    module = b.module
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, [a.type for a in args]), name)
        for a in attributes:
            fn.attributes.add(a)
    return b.call(fn, args)


# struct xlac_emu_state of tests/cuda/fake_libcuda.c: tid[3], ntid[3], ctaid[3],
# nctaid[3] (uint32), then the barrier function and the dynamic shared memory.
_EMU_FIELDS = {"tid": 0, "ntid": 3, "ctaid": 6, "nctaid": 9}
_AXES = {"x": 0, "y": 1, "z": 2}
_EMU_BARRIER = 6          # in pointers: after the 12 uint32


class EmulationHooks:
    """Thread numbers from ``xlac_emu_state``, which a stand-in driver sets, and its
    barrier function; shared arrays are plain globals (the driver runs one block at a
    time). Each kernel K also gets ``K__emu(void **params)``, which unpacks
    cuLaunchKernel's argument array and calls K."""

    calling_convention = ""

    def _state(self, b: ir.IRBuilder) -> ir.Value:
        module = b.module
        state = module.globals.get("xlac_emu_state")
        if state is None:
            state = ir.GlobalVariable(module, PTR, "xlac_emu_state")
            state.initializer = ir.Constant(PTR, None)
        return b.load(state, typ=PTR)

    def _field(self, b: ir.IRBuilder, field: str, axis: str) -> ir.Value:
        at = i64(_EMU_FIELDS[field] + _AXES[axis])
        return b.load(b.gep(self._state(b), [at], source_etype=I32), typ=I32)

    def thread(self, b, axis="x"):
        return self._field(b, "tid", axis)

    def block_size(self, b, axis="x"):
        return self._field(b, "ntid", axis)

    def block(self, b, axis="x"):
        return self._field(b, "ctaid", axis)

    def grid_size(self, b, axis="x"):
        return self._field(b, "nctaid", axis)

    def barrier(self, b) -> None:
        slot = b.gep(self._state(b), [i64(_EMU_BARRIER)], source_etype=PTR)
        b.call(b.load(slot, typ=ir.FunctionType(VOID, []).as_pointer()), [])

    def shared(self, b: ir.IRBuilder, name: str, ty: ir.Type) -> ir.Value:
        module = b.module
        g = ir.GlobalVariable(module, ty, module.get_unique_name(name))
        g.linkage = "internal"
        g.initializer = ir.Constant(ty, None)
        g.align = 16
        # An opaque pointer, as the GPU's shared() gives (llvmlite keeps a bitcast's
        # typed pointer); LLVM folds the round trip.
        return b.inttoptr(b.ptrtoint(g, I64), PTR)

    def finish(self, module: ir.Module, kernel: ir.Function, params: int) -> None:
        wrapper = ir.Function(module, ir.FunctionType(VOID, [PTR]), f"{kernel.name}__emu")
        b = ir.IRBuilder(wrapper.append_basic_block("entry"))
        args = []
        for k in range(params):
            slot = b.load(b.gep(wrapper.args[0], [i64(k)], source_etype=PTR), typ=PTR)
            args.append(b.load(slot, typ=PTR))
        b.call(kernel, args)
        b.ret_void()


def launch_size(elements: int) -> tuple[int, int]:
    """(blocks, threads per block) of a grid-stride kernel over ``elements``."""
    blocks = max(1, min(MAX_BLOCKS, -(-elements // BLOCK_THREADS)))
    return blocks, BLOCK_THREADS


def new_kernel(module: ir.Module, name: str, params: int, hooks,
               pointers: Sequence[PointerArg] = ()) -> tuple[ir.Function, ir.IRBuilder]:
    """A kernel of ``params`` pointer parameters; the first ones described by
    ``pointers`` (their alignment, and noalias where nothing else touches their bytes)."""
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR] * params), name)
    if hooks.calling_convention:
        fn.calling_convention = hooks.calling_convention
    fn.attributes.add("nounwind")
    for arg, info in zip(fn.args, pointers):
        if info.noalias and not info.is_output:
            arg.add_attribute("noalias")
        if info.align > 1:
            arg.attributes.align = info.align
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))


def _grid_stride(b: ir.IRBuilder, hooks, count: int, body: Callable[[ir.Value], None]) -> None:
    """``body(i)`` for i = this thread's number, then every ``threads`` after it, below
    ``count``."""
    first = b.add(b.mul(b.zext(hooks.block(b), I64), b.zext(hooks.block_size(b), I64)),
                  b.zext(hooks.thread(b), I64))
    stride = b.mul(b.zext(hooks.grid_size(b), I64), b.zext(hooks.block_size(b), I64))
    _strided(b, first, stride, count, body)


def _delinearize(b: ir.IRBuilder, i: ir.Value, dims: Sequence[int], layout) -> list:
    """The index whose position in a shape of ``dims`` and ``layout`` is ``i``."""
    index: list = [None] * len(dims)
    rest = i
    for n, d in enumerate(layout):
        if n == len(layout) - 1:
            index[d] = rest
        else:
            index[d] = b.urem(rest, i64(dims[d]))
            rest = b.udiv(rest, i64(dims[d]))
    return index


# A reduction over at least this many elements per result runs as a block-wide
# reduction (``_block_reduce``), one block per result; shorter ones in one thread each.
BLOCK_REDUCE_MIN = 64


def block_reduction(instr: Instruction) -> Instruction | None:
    """The reduce a block-wide reduction computes for ``instr``: ``instr`` itself or the
    root of its loop fusion, with one operand, a neutral init (each thread starts from
    it) and at least BLOCK_REDUCE_MIN elements per result; else None."""
    root = instr.called[0].root if is_loop_fusion(instr) else instr
    if root.opcode is not Opcode.REDUCE or root.shape.is_tuple or instr.shape.is_tuple:
        return None
    if len(root.operands) != 2 or not init_is_neutral(root):
        return None
    reduced = 1
    for d in root.attrs["dimensions"]:
        reduced *= root.operands[0].shape.dims[d]
    return root if reduced >= BLOCK_REDUCE_MIN else None


def loop_kernel(module: ir.Module, instr: Instruction, name: str, hooks, blob: WeightsBlob,
                out: PointerArg, operands: Sequence[PointerArg], offsets: Sequence[int]):
    """``name(out, operand..., weights)``: every element of ``instr``'s result from its
    generator; returns the kernel and the number of elements it covers."""
    passed = passed_operands(instr)
    params = 2 + len(passed)
    fn, b = new_kernel(module, name, params, hooks,
                    [out, *operands, PointerArg(CONSTANT_ALIGN, True)])   # the weights
    em = ElementalEmitter(b, KernelConstants(blob, b, fn.args[-1]))
    # operand_generators reads operand k from fn.args[1 + its position], as here.
    gens = operand_generators(em, b, fn, instr, operands)
    leaves = instr.shape.leaves()
    if instr.shape.is_tuple and any(s.is_tuple for s in instr.shape.tuple_shapes):
        raise XlacError(f"%{instr.name}: nested tuple result {instr.shape} is not supported")
    if any(leaf.dims != leaves[0].dims for leaf in leaves):
        raise XlacError(f"%{instr.name}: tuple leaves of different dimensions ({instr.shape})")
    first = leaves[0]
    reduce = block_reduction(instr)
    if reduce is not None:
        _block_reduce(b, hooks, em, instr, reduce, gens, fn.args[0], out.align)
        b.ret_void()
        hooks.finish(module, fn, params)
        return fn, first.num_elements * BLOCK_THREADS    # a block per result
    generate = em.generator(instr, gens)
    targets = [(gep_bytes(b, fn.args[0], off), leaf,
                access_align(off, out.align, leaf.dtype.itemsize))
               for off, leaf in zip(offsets, leaves)]

    def element(i):
        index = _delinearize(b, i, first.dims, first.layout)
        value = generate(index)
        values = value if instr.shape.is_tuple else (value,)
        for v, (ptr, leaf, align) in zip(values, targets):
            at = i if leaf.layout == first.layout else \
                linearize(b, index, leaf.dims, leaf.layout)
            b.store(v, gep_elem(b, ptr, llvm_type(leaf.dtype), at), align=align)

    _grid_stride(b, hooks, first.num_elements, element)
    b.ret_void()
    hooks.finish(module, fn, params)
    return fn, first.num_elements


def _block_reduce(b: ir.IRBuilder, hooks, em: ElementalEmitter, instr: Instruction,
                  reduce: Instruction, gens, out_ptr: ir.Value, align: int) -> None:
    """Block k computes results k, k + blocks, ...: each thread folds the reduced
    elements t, t + threads, ... of its result, then the block folds the threads'
    partials pairwise in shared memory (log2(threads) steps, a barrier each)."""
    if instr is reduce:
        value, init_gen = gens[0], gens[1]
    else:
        fused = instr.called[0]
        value = em.computation_generator(fused, gens, value=reduce.operands[0])
        init_gen = em.computation_generator(fused, gens, value=reduce.operands[1])
    src = reduce.operands[0].shape
    dims = sorted(reduce.attrs["dimensions"])
    kept = [d for d in range(src.rank) if d not in dims]
    extent = 1
    for d in dims:
        extent *= src.dims[d]
    result = instr.shape
    ty = llvm_type(result.dtype)
    comp = reduce.called[0]
    shared = hooks.shared(b, "partials", ir.ArrayType(ty, BLOCK_THREADS))
    tid = b.zext(hooks.thread(b), I64)
    acc = alloca_once(b, ty, "acc")

    def one_result(o):
        index = _delinearize(b, o, result.dims, result.layout)
        b.store(init_gen([]), acc)

        def fold(r):
            full: list = [None] * src.rank
            for d, v in zip(kept, index):
                full[d] = v
            rest = r
            for d in reversed(dims):       # the last reduced dim fastest
                full[d] = b.urem(rest, i64(src.dims[d])) if d != dims[0] else rest
                rest = b.udiv(rest, i64(src.dims[d]))
            b.store(em.apply(comp, [b.load(acc, typ=ty), value(full)]), acc)

        _strided(b, tid, i64(BLOCK_THREADS), extent, fold)
        slot = gep_elem(b, shared, ty, tid)
        b.store(b.load(acc, typ=ty), slot)
        hooks.barrier(b)
        step = BLOCK_THREADS // 2
        while step:
            with b.if_then(b.icmp_unsigned("<", tid, i64(step))):
                other = b.load(gep_elem(b, shared, ty, b.add(tid, i64(step))), typ=ty)
                b.store(em.apply(comp, [b.load(slot, typ=ty), other]), slot)
            hooks.barrier(b)
            step //= 2
        with b.if_then(b.icmp_unsigned("==", tid, i64(0))):
            at = linearize(b, index, result.dims, result.layout)
            b.store(b.load(shared, typ=ty), gep_elem(b, out_ptr, ty, at),
                    align=min(align, result.dtype.itemsize))
        hooks.barrier(b)      # before the next result overwrites the partials

    # The loop over results is the same for every thread of a block, so the barriers
    # inside it are reached by all of them.
    _strided(b, b.zext(hooks.block(b), I64), b.zext(hooks.grid_size(b), I64),
             result.num_elements, one_result)


def _strided(b: ir.IRBuilder, first: ir.Value, stride: ir.Value, count: int,
             body: Callable[[ir.Value], None]) -> None:
    """``body(i)`` for i = first, first + stride, ... below ``count``."""
    fn = b.function
    pre = b.block
    head = fn.append_basic_block("s.head")
    loop = fn.append_basic_block("s.body")
    done = fn.append_basic_block("s.end")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, name="s")
    i.add_incoming(first, pre)
    b.cbranch(b.icmp_unsigned("<", i, i64(count)), loop, done)
    b.position_at_end(loop)
    body(i)
    i.add_incoming(b.add(i, stride, flags=["nuw"]), b.block)
    b.branch(head)
    b.position_at_end(done)


def routine_kernel(module: ir.Module, instr: Instruction, name: str, hooks, blob: WeightsBlob,
                   emit_routine, out: PointerArg, operands: Sequence[PointerArg],
                   offsets: Sequence[int], with_scratch: bool) -> ir.Function:
    """``name(out, operand..., [scratch,] weights)``: the CPU routine ``emit_routine``
    (sort.py, scatter.py) run by thread 0 of a one-thread launch."""
    passed = passed_operands(instr)
    params = 2 + len(passed) + with_scratch
    weights: list = []

    def factory(b):
        return ElementalEmitter(b, _RoutineConstants(blob, b, weights))

    routine = emit_routine(module, instr, f"{name}_routine", factory, out, operands, offsets)
    # The routine reads constants through the weights pointer, which is its caller's:
    # routines take no extra argument, so it comes through a module global set here.
    fn, b = new_kernel(module, name, params, hooks)
    if weights:
        b.store(fn.args[-1], weights[0])
    b.call(routine, list(fn.args[:-1]))
    b.ret_void()
    hooks.finish(module, fn, params)
    return fn


class _RoutineConstants(KernelConstants):
    """Constants inside a routine: the weights pointer from a per-kernel global the
    kernel stores before the call (a routine's signature has no weights argument)."""

    def __init__(self, blob: WeightsBlob, b: ir.IRBuilder, holder: list):
        super().__init__(blob, b, None)
        self.holder = holder

    def _base(self) -> ir.Value:
        if not self.holder:
            module = self.b.module
            g = ir.GlobalVariable(module, PTR, module.get_unique_name("weights_ptr"))
            g.linkage = "internal"
            g.initializer = ir.Constant(PTR, None)
            self.holder.append(g)
        return self.b.load(self.holder[0], typ=PTR)

    def global_for(self, instr: Instruction) -> ir.Value:
        return gep_bytes(self.b, self._base(), self.blob.offset_of(instr))

    def global_for_bytes(self, data: bytes) -> ir.Value:
        return gep_bytes(self.b, self._base(), self.blob.offset_of_bytes(data))
