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
    convolution, reduce, reduce-window, scatter, parameters, tuples, or a model output
    (its value must land in the caller's buffer).
  - a producer with one user is moved into it; a producer with several users is
    fused only when it is cheap to duplicate (broadcast, iota, reshape, bitcast,
    scalar constant), so no arithmetic, transcendental or not, is ever computed twice.
  - an expensive producer (a transcendental: exp, log, tanh, pow, ...; a division or
    square root) is not fused into
    a consumer that reads each of its elements several times (overlapping reduce-window
    windows, an expanding broadcast, gather), nor into a fusion whose parameter reaches
    such a reader: it would be recomputed per read (LRN's pow under a 3x3 max pool).
Consumers are visited from the root up, and each absorbs producers until none
qualifies, so a chain collapses into the fusion of its last instruction.
The entry and every computation a while or conditional calls are fused alike (a
loop body's code is a computation like the entry's); their outputs stay
materialized, as the model's do.
"""
from __future__ import annotations

from ..hlo import Computation, Instruction, Module, Opcode
from ..hlo.opcodes import ELEMENTWISE, TRANSCENDENTAL
from .aliasing import concat_of_blocks
from .control_flow import planned_computations

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

    def run(self, module: Module) -> bool:
        changed = False
        for comp in planned_computations(module):
            changed |= _Fuser(module, comp).run()
        return changed


def _is_scalar_constant(instr: Instruction) -> bool:
    return instr.opcode is Opcode.CONSTANT and instr.shape.rank == 0


class _Fuser:
    def __init__(self, module: Module, comp: Computation):
        self.module = module
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
                                           {"kind": "kLoop"}, [fused], name="fusion",
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
