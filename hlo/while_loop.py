"""An HLO while loop built element by element, for front ends that write loops."""
from __future__ import annotations

from .builder import Builder
from .errors import XlacError
from .ir import Instruction
from .opcodes import Opcode
from .shape import Shape


class WhileLoop:
    """An HLO while under construction over a flat tuple state.

        loop = WhileLoop(ctx, "lstm", [t0, h0, c0])     # elements the body updates
        _, w = loop.capture(weights)                    # read-only in the loop
        t, h, c = loop.body_elements[:3]
        ...
        t_end, h_end, c_end = loop.finish(condition_root, [t + 1, h', c'])

    ``ctx`` is where the loop goes: anything with ``module`` and ``b`` (the Builder of
    the enclosing computation). ``cond`` and ``body`` are Builders whose parameter is
    the state. ``add`` appends an
    element the body updates (an accumulator whose shape is known only once the body is
    built); ``capture`` one the loop only reads (a constant is made in the condition
    and the body instead).
    """

    def __init__(self, ctx, name: str, inits: list[Instruction]):
        self.ctx = ctx
        self.name = name
        self.inits: list[Instruction] = []
        self._captured: set[int] = set()
        self.cond = Builder(f"{name}_condition")
        self.body = Builder(f"{name}_body")
        self._params = [b.parameter(0, Shape.tuple_([]), "state")
                        for b in (self.cond, self.body)]
        self.cond_elements: list[Instruction] = []
        self.body_elements: list[Instruction] = []
        for x in inits:
            self.add(x)

    def add(self, init: Instruction) -> tuple[Instruction, Instruction]:
        """Append ``init`` to the state; returns its element in the condition and the body."""
        self.inits.append(init)
        shape = Shape.tuple_([x.shape for x in self.inits])
        elements = []
        for b, p in zip((self.cond, self.body), self._params):
            p.shape = shape              # elements made earlier keep their indices
            elements.append(b.get_tuple_element(p, len(self.inits) - 1))
        self.cond_elements.append(elements[0])
        self.body_elements.append(elements[1])
        return elements[0], elements[1]

    def capture(self, x: Instruction) -> tuple[Instruction, Instruction]:
        """``x`` of the enclosing computation, read in the condition and the body."""
        if x.opcode is Opcode.CONSTANT:
            return tuple(b.constant(x.literal, x.shape.dtype, name=x.name)
                         for b in (self.cond, self.body))
        self._captured.add(len(self.inits))
        return self.add(x)

    def finish(self, condition: Instruction, outputs: list[Instruction]) -> list[Instruction]:
        """Close the condition (pred[]) and the body (``outputs``: one per element that is
        not captured, in order); the while's elements in the enclosing computation."""
        updated = iter(outputs)
        outputs = [self.body_elements[k] if k in self._captured else next(updated)
                   for k in range(len(self.inits))]
        for k, (out, x) in enumerate(zip(outputs, self.inits)):
            if out.shape.dims != x.shape.dims or out.shape.dtype != x.shape.dtype:
                raise XlacError(f"{self.name}: the loop changes element {k} from {x.shape} "
                                f"to {out.shape}")
        module = self.ctx.module
        cond = module.add_computation(self.cond.build(condition))
        body = module.add_computation(self.body.build(self.body.tuple(outputs)))
        b = self.ctx.b
        w = b.op(Opcode.WHILE, b.tuple(self.inits), called=[cond, body], name=self.name)
        return [b.get_tuple_element(w, k) for k in range(len(self.inits))]
