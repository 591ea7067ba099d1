"""Loop fusion: merge producers into their consumers so intermediates never touch memory.

A fusion instruction (``kind='kLoop'``) calls a fused computation whose
parameters are the fusion's operands in order; the emitter builds one loop
nest over the root's elements from the element generators of the fused
instructions and writes only the root.

Rules (XLA's instruction fusion, for one-output loop fusions):
  - consumers: element-wise, movement (dynamic-slice included), reduce, reduce-window,
    or a fusion.
    Never a dot or convolution: their kernels read operands from memory. Never a
    concatenation of contiguous blocks: buffer assignment builds it in place, its
    producers writing straight into their slices (aliasing.concat_slots), which
    saves the copy a fused concatenation makes.
  - producers: element-wise or movement ops (gather included: an element of a
    gather is one read of its operand at an index read from its indices, whatever
    the indices hold; Resize's taps and embedding lookups fuse into their weighted
    sums; a dynamic-slice reads one window), iota, and scalar constants. Never dot,
    convolution, reduce-window, scatter, parameters, tuples, or a model output (its value
    must land in the caller's buffer); a reduce or reduce-window only as below.
  - a producer with one user is moved into it; a producer with several users is
    fused only when it is cheap to duplicate (broadcast, iota, reshape, bitcast,
    scalar constant), so no arithmetic, transcendental or not, is ever computed twice.
  - an expensive producer (a transcendental: exp, log, tanh, pow, ...; a division or
    square root) is not fused into
    a consumer that reads each of its elements several times (overlapping reduce-window
    windows, an expanding broadcast, gather), nor into a fusion whose parameter reaches
    such a reader: it would be recomputed per read (LRN's pow under a 3x3 max pool).
  - a reduce fuses into its only user only where that saves memory: the user reads each
    of its elements once and stores fewer bytes (``_narrowing_reduce``: a quantized
    model's Resize, a weighted sum in f32, requantized to 8 bits by the loop after it).
    A reduce-window fuses only into the divide of average pooling (``_averaged_sum``).
Consumers are visited from the root up, and each absorbs producers until none
qualifies, so a chain collapses into the fusion of its last instruction.
The entry and every computation a while or conditional calls are fused alike (a
loop body's code is a computation like the entry's); their outputs stay
materialized, as the model's do.

Output fusion (``OutputFusion``, before loop fusion; XLA's kOutput): the backend says
which dots and convolutions take the ops after them, and how
(``BackendPolicy.epilogue_style``, optimizer/policy.py).

``REQUANTIZE``: an integer dot or
convolution (quantized arithmetic, s32 accumulators) takes the element-wise ops after it
into one ``kind='kOutput'`` fusion, so that its kernel stores the requantized narrow
result and the s32 values never reach memory; a pad of its input by a constant (the zero
point) goes in too, so that the kernel pads as it reads. The quantization of its input
never goes in: a dot reads each element of its lhs once per panel of output columns, a
convolution once per tap, so it would be computed (a divide among it) that many times;
a loop writes the 8-bit copy once. The epilogue is the chain of single-user element-wise
ops of the accumulators' dims from the contraction, cut back to its narrowest value; what each
of them reads besides the chain must be a scalar, a broadcast of values along the output
channels only (``epilogue_operand``), or a value of the result's dims read at the same
element. A chain that reaches a model output (a quantized model's last layer
dequantized) is not cut: the kernel writes the caller's output buffer, and no narrow
copy takes arena memory. Loop fusion later moves element-wise producers of such
operands in, never anything that changes how the epilogue indexes. A contraction with
no epilogue (dynamic quantization's u8 x s8 dot, whose s32 result is rescaled by
run-time scales after a reshape) is a fusion of its own all the same: the integer
kernels run output fusions only, and a bare one would be a loop of element sums.

``REGISTERS``: a float convolution or dot (the CPU's: a convolution of the kernels' fast
paths, a dot whose last dim is its product's columns) takes its epilogue in: the ops its
kernel applies to a vector of results in registers (the policy's ``epilogue_ops``, at
most ``max_epilogue`` of them; the CPU's: f32 element-wise arithmetic, mathlib's
functions, compare and select), any DAG of them with one exit
(``_float_epilogue``: GELU reads its input twice), each reading values inside it and
scalars, broadcasts along the output channels or values of the result's shape (read at
the element stored) that do not depend on the kernel; loop fusion moves nothing more
into it. The bias, activation and residual then cost no second pass over the output.
The fusion overwrites no operand in place (aliasing.in_place_operands takes loop fusions
only): a kernel may store an element before it has read the residual's element there
(the GEMM stores partial sums of the K blocks before the last), so the residual keeps
its own buffer.
"""
from __future__ import annotations

import heapq

from ..hlo import Computation, Instruction, Module, Opcode, dtypes
from ..hlo.fusion import (FusionKind, epilogue_operand, is_loop_fusion, is_output_fusion,
                          keeps_columns, output_fusion_core)
from ..hlo.opcodes import ELEMENTWISE, TRANSCENDENTAL
from .aliasing import concat_of_blocks
from .control_flow import planned_computations
from .policy import BackendPolicy, EpilogueStyle

FUSIBLE_MOVEMENT = frozenset({
    Opcode.BROADCAST, Opcode.RESHAPE, Opcode.TRANSPOSE, Opcode.SLICE, Opcode.PAD,
    Opcode.CONCATENATE, Opcode.REVERSE, Opcode.IOTA, Opcode.BITCAST, Opcode.COPY,
    Opcode.DYNAMIC_SLICE, Opcode.GATHER,
})
CONSUMERS = ELEMENTWISE | FUSIBLE_MOVEMENT | {
    Opcode.REDUCE, Opcode.REDUCE_WINDOW, Opcode.FUSION}
CHEAP_TO_DUPLICATE = frozenset({Opcode.BROADCAST, Opcode.IOTA, Opcode.RESHAPE, Opcode.BITCAST})
# Too costly to recompute per read (XLA's IsExpensive): transcendentals and divisions.
EXPENSIVE = TRANSCENDENTAL | {Opcode.DIVIDE, Opcode.REMAINDER, Opcode.SQRT}


class InstructionFusion:
    name = "fusion"

    def __init__(self, policy: BackendPolicy):
        self.policy = policy

    def run(self, module: Module) -> bool:
        changed = False
        for comp in planned_computations(module):
            changed |= _Fuser(module, comp, self.policy).run()
        return changed


class OutputFusion:
    name = "output-fusion"

    def __init__(self, policy: BackendPolicy):
        self.policy = policy

    def run(self, module: Module) -> bool:
        return _OutputFuser(module, self.policy).run()


def _float_epilogue_step(u: Instruction, inside, core: Instruction, after_core,
                         ops: frozenset[Opcode]) -> bool:
    """Whether a float convolution or dot kernel can apply ``u``, which reads the values
    ``inside`` the epilogue so far, in registers: an f32 op of ``ops`` (a compare
    of f32 values, a select by such a compare), every operand from ``inside`` or one the
    kernel loads where it stores (a scalar, a broadcast along the output channels, or a
    value of the element's shape that no broadcast makes: a residual) and computed
    without the core (``after_core(o)``: whether o depends on it)."""
    if u.opcode not in ops or u.shape.is_tuple:
        return False
    if u.shape.dtype != (dtypes.PRED if u.opcode is Opcode.COMPARE else dtypes.F32):
        return False
    for k, o in enumerate(u.operands):
        if o in inside:
            continue
        if o.shape.is_tuple or o.shape.dtype != dtypes.F32 or after_core(o) or \
                (u.opcode is Opcode.SELECT and k == 0):
            return False
        if not (o.shape.rank == 0
                or (o.opcode is Opcode.BROADCAST and epilogue_operand(o, core, u.shape))
                or (o.opcode is not Opcode.BROADCAST and o.shape.dims == u.shape.dims)):
            return False
    return True


def _ancestors(root: Instruction, among) -> set[Instruction]:
    """``root`` and the instructions of ``among`` it reads, directly or not, through
    instructions of ``among``."""
    seen, stack = {root}, [root]
    while stack:
        for o in stack.pop().operands:
            if o in among and o not in seen:
                seen.add(o)
                stack.append(o)
    return seen


class _OutputFuser:
    """One run over the entry. Users, and a def-before-use position per instruction
    (``order``, an index into ``slots``), are computed once and kept up to date as each
    fusion replaces its members, in time proportional to the fusion (a pass over the
    computation per kernel made a deep chain of kernels quadratic): the fusion takes its
    root's position, the members leave ``users``. At the end the computation is the
    instructions left, in their order, then the fusions, sorted once: the order that a
    sort after each fusion gave."""

    def __init__(self, module: Module, policy: BackendPolicy):
        self.module = module
        self.policy = policy
        self.comp = module.entry
        self.pinned = set(module.output_instructions) | {self.comp.root}

    def run(self) -> bool:
        cores = [c for c in reversed(self.comp.instructions) if self._style(c) is not None]
        if not cores:
            return False
        # dicts as ordered sets: a value read by many (a broadcast zero) loses a user in O(1)
        self.users = {i: dict.fromkeys(us) for i, us in self.comp.users().items()}
        self.slots = list(self.comp.instructions)
        self.order = {i: k for k, i in enumerate(self.slots)}
        changed = False
        for core in cores:
            changed |= self._fuse(core)
        if changed:     # comp.add appended the fusions; the members leave
            self.comp.instructions = [i for i in self.comp.instructions if i in self.users]
            self.comp.sort()
        return changed

    def _style(self, c: Instruction) -> EpilogueStyle | None:
        if c.opcode not in (Opcode.DOT, Opcode.CONVOLUTION):
            return None
        return self.policy.epilogue_style(c)

    def _chain(self, core: Instruction) -> list[Instruction]:
        """The element-wise ops after ``core`` that the epilogue computes, cut back to
        the narrowest value (the last of equally narrow ones)."""
        if self._style(core) is EpilogueStyle.REGISTERS:
            return self._float_epilogue(core)
        users = self.users
        chain, cur = [], core
        while cur not in self.pinned and len(users[cur]) == 1:
            u = next(iter(users[cur]))
            if (u.opcode not in ELEMENTWISE or u.shape.dims != core.shape.dims
                    or u.operands.count(cur) != 1
                    or not all(o is cur or epilogue_operand(o, core) for o in u.operands)):
                break
            chain.append(u)
            cur = u
        if not chain:
            return []
        if chain[-1] in self.pinned:
            return chain        # ends in the caller's output buffer: nothing in the arena
        sizes = [i.shape.dtype.itemsize for i in chain]
        narrowest = min(sizes)
        if narrowest >= core.shape.dtype.itemsize:
            return []
        end = max(k for k, n in enumerate(sizes) if n == narrowest)
        return chain[:end + 1]

    def _float_epilogue(self, core: Instruction) -> list[Instruction]:
        """The ops after a float kernel that it applies in registers, in order, the last
        one the fusion's root: the largest set of steps (``_float_epilogue_step``, and
        reshapes that keep a dot's columns) reachable from ``core`` whose values nothing
        else reads, so one exit leaves the kernel (GELU's x * (1 + erf(x / sqrt 2)) / 2
        reads x twice; a softmax's reduce of x, reading another element, ends it)."""
        users, order = self.users, self.order
        start = order[core]
        known: dict[Instruction, bool] = {}

        def after_core(o: Instruction) -> bool:
            """Whether ``o`` depends on ``core`` (only what comes after it can)."""
            if o not in known:
                seen, stack, found = {o}, [o], False
                while stack and not found:
                    x = stack.pop()
                    found = x is core
                    for y in x.operands:
                        if order[y] > start and y not in seen:
                            seen.add(y)
                            stack.append(y)
                known[o] = found
            return known[o]

        inside, candidates = {core}, []
        # Users in the computation's order: a step's operands inside are decided first.
        frontier, queued = [order[u] for u in users[core]], set(users[core])
        heapq.heapify(frontier)
        ops = self.policy.fusion.epilogue_ops
        while frontier and len(candidates) < self.policy.fusion.max_epilogue:
            u = self.slots[heapq.heappop(frontier)]
            cur = next(o for o in u.operands if o in inside)
            if not (keeps_columns(u, cur, core)
                    or _float_epilogue_step(u, inside, core, after_core, ops)):
                continue
            inside.add(u)
            candidates.append(u)
            for v in users[u]:
                if v not in queued:
                    queued.add(v)
                    heapq.heappush(frontier, order[v])
        for root in reversed(candidates):
            if root.opcode is Opcode.RESHAPE or root.shape.dtype != dtypes.F32:
                continue                # a reshape is a view: it stays out of the kernel
            region = _ancestors(root, inside)
            if all(m is root or (m not in self.pinned and users[m].keys() <= region)
                   for m in region):
                return [c for c in candidates if c in region]
        return []

    def _fuse(self, core: Instruction) -> bool:
        chain = self._chain(core)
        pad = core.operands[0]
        style = self._style(core)
        absorb_pad = (style is EpilogueStyle.REQUANTIZE and pad.opcode is Opcode.PAD
                      and pad.operands[1].opcode is Opcode.CONSTANT
                      and list(self.users[pad]) == [core] and pad not in self.pinned
                      and core.opcode is Opcode.CONVOLUTION)
        if not chain and not absorb_pad and style is not EpilogueStyle.REQUANTIZE:
            return False
        root = chain[-1] if chain else core
        members = ([pad] if absorb_pad else []) + [core] + chain
        inside = set(members)
        fused = Computation("fused_computation")
        params: dict[object, Instruction] = {}
        operands: list[Instruction] = []
        clones: dict[Instruction, Instruction] = {}

        # A float kernel reads its input and weights as operands 0 and 1 and what its
        # epilogue reads after them: a value read twice (dot(a, a), x + conv(x)) is
        # passed twice.
        float_core = style is EpilogueStyle.REGISTERS

        def param(o: Instruction, key) -> Instruction:
            if key not in params:
                params[key] = fused.add(Instruction(Opcode.PARAMETER, o.shape,
                                                    attrs={"number": len(operands)},
                                                    name=_param_name(o)))
                operands.append(o)
            return params[key]

        def value(o: Instruction, reader: Instruction) -> Instruction:
            if o in clones:
                return clones[o]
            if _is_scalar_constant(o):
                clones[o] = fused.add(_clone(o, []))
            elif o.opcode is Opcode.BROADCAST and o not in inside and (
                    o.shape.dims == reader.shape.dims or _scalar_like(o)):
                clones[o] = fused.add(_clone(o, [value(o.operands[0], o)]))
            else:
                second = float_core and o in core.operands
                return param(o, ("epilogue", o) if second else o)
            return clones[o]

        def operand(m: Instruction, k: int, o: Instruction) -> Instruction:
            if o in inside:
                return clones[o]
            if float_core and m is core:
                return param(o, ("core", k))
            return value(o, m)

        for m in members:
            clones[m] = fused.add(_clone(m, [operand(m, k, o)
                                             for k, o in enumerate(m.operands)]))
        fused.root = clones[root]
        fused.sort()
        self.module.add_computation(fused)
        fusion = self.comp.add(Instruction(Opcode.FUSION, root.shape, operands,
                                           {"kind": FusionKind.OUTPUT}, [fused], name="fusion",
                                           metadata=core.metadata))
        # The fusion's operands are the members', which come before the root: its slot
        # keeps the order def-before-use.
        readers = self.users[root]
        for u in readers:
            u.operands = [fusion if o is root else o for o in u.operands]
        if self.comp.root is root:
            self.comp.root = fusion
        for m in members:
            for o in m.operands:
                if o not in inside:
                    self.users[o].pop(m, None)
            del self.users[m]
        self.users[fusion] = readers
        for o in operands:
            self.users[o][fusion] = None
        self.order[fusion] = self.order[root]
        self.slots[self.order[root]] = fusion
        return True


def _is_scalar_constant(instr: Instruction) -> bool:
    return instr.opcode is Opcode.CONSTANT and instr.shape.rank == 0


def _scalar_like(instr: Instruction) -> bool:
    """A scalar constant or a broadcast of one."""
    return _is_scalar_constant(instr) or (instr.opcode is Opcode.BROADCAST
                                          and _is_scalar_constant(instr.operands[0]))


class _Fuser:
    def __init__(self, module: Module, comp: Computation, policy: BackendPolicy):
        self.module = module
        self.policy = policy
        self.comp = comp
        self.users = {i: set(us) for i, us in self.comp.users().items()}
        self.pinned = set(comp.outputs) | {self.comp.root}

    def run(self) -> bool:
        changed = False
        for consumer in reversed(list(self.comp.instructions)):
            if consumer not in self.users or consumer.opcode not in CONSUMERS:
                continue                        # fused away already, or not a consumer
            if concat_of_blocks(consumer):
                continue                        # built in place (aliasing.concat_slots)
            changed |= self._grow(consumer)
        return changed

    def _fusible_producer(self, p: Instruction, consumer: Instruction) -> bool:
        if p in self.pinned or p.shape.is_tuple:
            return False
        if is_output_fusion(consumer) and not _fits_epilogue(p, consumer, self.policy):
            return False
        if p.opcode is Opcode.REDUCE:
            return _narrowing_reduce(p, consumer, self.users[p])
        if p.opcode is Opcode.REDUCE_WINDOW:
            return _averaged_sum(p, consumer, self.users[p])
        if not (p.opcode in ELEMENTWISE or p.opcode in FUSIBLE_MOVEMENT
                or _is_scalar_constant(p)):
            return False
        if p.opcode in EXPENSIVE and _reuses_operand(consumer, p):
            return False
        return len(self.users[p]) == 1 or p.opcode in CHEAP_TO_DUPLICATE \
            or _is_scalar_constant(p)

    def _grow(self, consumer: Instruction) -> bool:
        fusion = consumer if consumer.opcode is Opcode.FUSION else None
        changed = False
        while True:
            current = fusion or consumer
            producer = next((o for o in current.operands
                             if self._fusible_producer(o, current)), None)
            if producer is None:
                return changed
            if fusion is None:
                fusion = self._wrap(consumer)
            self._fuse(producer, fusion)
            changed = True

    # -- graph surgery ------------------------------------------------------------

    def _wrap(self, consumer: Instruction) -> Instruction:
        """Replace ``consumer`` by a fusion whose fused computation holds a copy of it."""
        operands = list(dict.fromkeys(consumer.operands))
        fused = Computation("fused_computation")
        params = [fused.add(Instruction(Opcode.PARAMETER, o.shape, attrs={"number": n},
                                        name=_param_name(o)))
                  for n, o in enumerate(operands)]
        by_operand = dict(zip(operands, params))
        fused.root = fused.add(_clone(consumer, [by_operand[o] for o in consumer.operands]))
        self.module.add_computation(fused, before=self.comp)
        fusion = self.comp.add(Instruction(Opcode.FUSION, consumer.shape, operands,
                                           {"kind": FusionKind.LOOP}, [fused], name="fusion",
                                           metadata=consumer.metadata))
        # The fusion takes the consumer's place in the order (it has the same operands).
        instrs = self.comp.instructions
        instrs[instrs.index(consumer)] = instrs.pop()
        for u in self.users[consumer]:
            u.operands = [fusion if o is consumer else o for o in u.operands]
        if self.comp.root is consumer:
            self.comp.root = fusion
        for o in operands:
            self.users[o].discard(consumer)
            self.users[o].add(fusion)
        self.users[fusion] = self.users.pop(consumer)
        return fusion

    def _fuse(self, producer: Instruction, fusion: Instruction) -> None:
        """Move (or, when it has other users, copy) ``producer`` into ``fusion``."""
        fused = fusion.called[0]
        params = fused.parameters
        param_of = dict(zip(fusion.operands, params))
        new_operands = []
        for o in producer.operands:
            if o not in param_of:
                param_of[o] = fused.add(Instruction(
                    Opcode.PARAMETER, o.shape, attrs={"number": -1}, name=_param_name(o)))
                new_operands.append(o)
        clone = fused.add(_clone(producer, [param_of[o] for o in producer.operands]))
        old_param = param_of.pop(producer)
        fused.replace_all_uses(old_param, clone)
        fused.remove(old_param)
        fused.sort()
        fusion.operands = [o for o in fusion.operands if o is not producer] + new_operands
        for n, o in enumerate(fusion.operands):       # parameter n is operand n
            param_of[o].attrs["number"] = n
        self.users[producer].discard(fusion)
        for o in new_operands:
            self.users[o].add(fusion)
        if not self.users[producer]:
            self.comp.remove(producer)
            for o in set(producer.operands):
                self.users[o].discard(producer)
            del self.users[producer]


def _narrowing_reduce(p: Instruction, consumer: Instruction, users) -> bool:
    """Whether the reduce ``p`` fuses into ``consumer``: its only user, which reads each
    of its elements once and stores fewer bytes than ``p`` would. A reduce otherwise stays
    the root of its own loop (as XLA's CPU fusion keeps it); here its wide result would
    only cost memory: a quantized model's Resize (a weighted sum of taps in f32) whose
    result is requantized to 8 bits by the loop reading it."""
    return (len(users) == 1 and not p.shape.is_tuple
            and consumer.shape.byte_size < p.shape.byte_size
            and not _reuses_operand(consumer, p))


def _averaged_sum(p: Instruction, consumer: Instruction, users) -> bool:
    """Whether the reduce-window ``p`` fuses into ``consumer``: its only user, whose root
    divides ``p`` by something else (average pooling's sum by the count), reading each of
    its elements once. The pooling rows (emitter/pooling.py) then divide each vector of
    sums before storing it, and the sums never reach memory. A reduce-window otherwise
    stays the root of its own loop."""
    if len(users) != 1 or p.shape.is_tuple:
        return False
    if consumer.opcode is Opcode.FUSION:
        fused = consumer.called[0]
        x, root = fused.parameters[consumer.operands.index(p)], fused.root
        if not is_loop_fusion(consumer) or fused.users()[x] != [root]:
            return False
    else:
        x, root = p, consumer
    return root.opcode is Opcode.DIVIDE and root.operands[0] is x \
        and root.operands[1] is not x


def _fits_epilogue(p: Instruction, fusion: Instruction, policy: BackendPolicy) -> bool:
    """Whether an output fusion may take producer ``p`` in: an element-wise op of the
    accumulators' dims whose operands the epilogue may read, a broadcast it may read, or a
    scalar constant; one that feeds only the epilogue, not the dot or convolution's own
    operands."""
    fused = fusion.called[0]
    core = output_fusion_core(fused)
    k = fusion.operands.index(p)
    param = fused.parameters[k]
    reached, stack = set(), [param]
    users = fused.users()
    while stack:
        for u in users[stack.pop()]:
            if u not in reached:
                reached.add(u)
                stack.append(u)
    if core in reached or (core.operands[0].opcode is Opcode.PAD
                           and core.operands[0] in reached):
        return False
    if policy.epilogue_style(core) is EpilogueStyle.REGISTERS:
        return False        # its epilogue is what the kernel applies, taken whole already
    if _is_scalar_constant(p) or (p.opcode is Opcode.BROADCAST
                                  and epilogue_operand(p, core)):
        return True
    return (p.opcode in ELEMENTWISE and p.shape.dims == core.shape.dims
            and all(epilogue_operand(o, core) for o in p.operands))


def _reuses_operand(consumer: Instruction, operand: Instruction) -> bool:
    """Whether computing all of ``consumer`` reads some element of ``operand`` (one of
    its operands) more than once."""
    ks = [k for k, o in enumerate(consumer.operands) if o is operand]
    if consumer.opcode is Opcode.REDUCE_WINDOW:
        w = consumer.attrs["window"]
        overlap = any((size - 1) * dil + 1 > stride
                      for size, stride, dil in zip(w.size, w.stride, w.rhs_dilation))
        return overlap and min(ks) < len(consumer.operands) // 2   # not just the init
    if consumer.opcode is Opcode.BROADCAST:
        return consumer.shape.num_elements > operand.shape.num_elements
    if consumer.opcode is Opcode.GATHER:
        return 0 in ks
    if consumer.opcode is Opcode.FUSION:
        fused = consumer.called[0]
        users = fused.users()
        return any(_value_reused(fused.parameters[k], users) for k in ks)
    return False


def _value_reused(value: Instruction, users: dict) -> bool:
    """Whether the fused ``value`` is read more than once per element: a user reuses
    it, or reads it once per element of its own value and that value is reused."""
    return any(_reuses_operand(u, value) or _value_reused(u, users)
               for u in users.get(value, ()))


def _param_name(operand: Instruction) -> str:
    # Named after the operand it binds, for readable dumps; the prefix keeps the
    # name free for the operand itself should it be fused in later.
    return f"param_{operand.name}"


def _clone(instr: Instruction, operands: list[Instruction]) -> Instruction:
    return Instruction(instr.opcode, instr.shape, operands, instr.attrs, instr.called,
                       instr.literal, instr.name, instr.metadata)
