"""The epilogue a float convolution or dot kernel applies to its results in registers.

An output fusion (optimizer/fusion.py) holds a float convolution or dot and the
element-wise steps after it that a kernel can apply to a vector of results before
storing it (any DAG of them with one exit: a bias or scale per output channel, ReLU,
clamp, GELU's erf, SiLU's logistic, a compare and select, a residual add of an operand
of the output's own shape, read at the elements being stored). ``plan_epilogue`` turns
the fused computation into an ``Epilogue``; each kernel loads what the steps read where
it stores (``values`` per channel, ``columns`` per vector of channels, ``full`` at the
stored elements) and ``apply``\\ s the steps: the element generators of their opcodes
(elemental.RULES) on vectors, so the kernel computes what an element loop would.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from llvmlite import ir

from ...hlo import Instruction, Opcode, dtypes
from ...hlo.fusion import keeps_columns, output_channel_dim, output_fusion_core
from ...hlo.opcodes import TRANSCENDENTAL
from ..elemental import RULES, ElementalEmitter
from .vec import F32, load_vec, masked_load, offset_ptr, splat, vec_type

# What ``Epilogue.apply`` computes on vectors of f32 results: the element-wise ops that
# need no library call (mathlib's functions are straight-line IR), and compare / select
# for the activations written with them (LeakyReLU, ELU, PReLU).
EPILOGUE_OPS = TRANSCENDENTAL | frozenset({
    Opcode.ADD, Opcode.SUBTRACT, Opcode.MULTIPLY, Opcode.DIVIDE, Opcode.MAXIMUM,
    Opcode.MINIMUM, Opcode.CLAMP, Opcode.NEGATE, Opcode.ABS, Opcode.SIGN, Opcode.SQRT,
    Opcode.COMPARE, Opcode.SELECT})


@dataclass(frozen=True)
class Epilogue:
    """Element-wise steps a kernel applies to each vector of results in registers before
    storing it.

    A step is ``(opcode, args, direction)`` (``direction``: a compare's, else None), in
    the fused computation's order, the last one its root; an arg is ``("acc",)`` the
    accumulators, ``("step", j)`` the value of step j, ``("scalar", k)`` element 0 of
    extra operand k, ``("channel", k)`` element c of extra operand k for output channel
    c, or ``("full", k)`` the element of extra operand k (of the output's shape) at the
    index being stored. ``pointers``: how many extra operands the kernel takes: the
    fusion's operands after the input and the weights, then one pointer to each of
    ``constants``. ``constants``: the fused computation's scalar constants, which the
    steps read as scalar operands rather than immediates, so that layers whose
    epilogues differ only in them (a learned scalar scale and shift after an
    activation, as PP-LCNet's) share one function; the caller passes them
    (``constant_operands``). ``instructions``: the fused instructions of the steps,
    whose element generators ``apply`` runs. Both are left out of equality: equal steps
    are equal code, so kernels of equal epilogues share a function.

    ``lanes`` None below means scalars: a kernel storing one element at a time.
    """
    steps: tuple = ()
    pointers: int = 0
    constants: tuple[float, ...] = field(default=(), compare=False, repr=False)
    instructions: tuple = field(default=(), compare=False, repr=False)

    def _args(self, kind: str) -> list[tuple]:
        return list(dict.fromkeys(a for _, args, _ in self.steps for a in args if a[0] == kind))

    def values(self, b: ir.IRBuilder, extra, channel: ir.Value, lanes: int | None) -> dict:
        """The splatted per-channel operands of output channel ``channel``, the scalars and
        the constants: loaded once per channel."""
        out = self._uniform(b, extra, lanes)
        for arg in self._args("channel"):
            out[arg] = _splat(b, b.load(offset_ptr(b, extra[arg[1]], F32, channel), typ=F32),
                              lanes)
        return out

    def columns(self, b: ir.IRBuilder, extra, column: ir.Value, mask, lanes: int | None) -> dict:
        """The operands for a vector of output channels ``column`` .. + lanes (a dot's
        columns; ``mask``: its real lanes, None for all), the scalars and the constants."""
        out = self._uniform(b, extra, lanes)
        for arg in self._args("channel"):
            out[arg] = _load(b, offset_ptr(b, extra[arg[1]], F32, column), lanes, mask)
        return out

    def lane_values(self, b: ir.IRBuilder, extra, channel0: ir.Value, lanes: int) -> dict:
        """As ``values``, for vectors whose lanes are output channels ``channel0`` ..
        ``channel0 + lanes`` (ChannelConv)."""
        return self.columns(b, extra, channel0, None, lanes)

    def _uniform(self, b: ir.IRBuilder, extra, lanes: int | None) -> dict:
        out = {}
        for arg in self._args("scalar"):
            out[arg] = _splat(b, b.load(extra[arg[1]], typ=F32), lanes)
        return out

    def full(self, b: ir.IRBuilder, extra, index: ir.Value, mask, lanes: int | None) -> dict:
        """The full-size operands at elements ``index`` .. + lanes, masked as the store
        is (``extra`` as ``moved`` gives it where the kernel's output pointer moved)."""
        return {arg: _load(b, offset_ptr(b, extra[arg[1]], F32, index), lanes, mask)
                for arg in self._args("full")}

    def moved(self, b: ir.IRBuilder, extra, offset: ir.Value) -> tuple:
        """``extra`` with the full-size operands moved by ``offset`` elements, as a kernel
        moves its output pointer to a block of the output."""
        full = self.full_operands
        return tuple(offset_ptr(b, p, F32, offset) if k in full else p
                     for k, p in enumerate(extra))

    def apply(self, b: ir.IRBuilder, acc: ir.Value, values: dict) -> ir.Value:
        """The root's value from the accumulators ``acc`` (a vector, or a scalar where
        ``lanes`` was None) and the loaded operands ``values``; each step is the element
        generator of its opcode (elemental.RULES) on vectors, so a fused epilogue
        computes what the element loop would, transcendental functions included."""
        em = ElementalEmitter(b, constants=None)
        results: list[ir.Value] = []

        def value(a):
            return acc if a == ("acc",) else results[a[1]] if a[0] == "step" else values[a]
        for (_, args, _), instr in zip(self.steps, self.instructions):
            xs = [value(a) for a in args]
            results.append(RULES[instr.opcode](em, instr, [_given(x) for x in xs], []))
        return results[-1] if results else acc

    @property
    def channel_operands(self) -> frozenset[int]:
        """The extra operands read per output channel (a split moves them with it)."""
        return frozenset(a[1] for a in self._args("channel"))

    @property
    def full_operands(self) -> frozenset[int]:
        """The extra operands of the output's shape (a split moves them as the output)."""
        return frozenset(a[1] for a in self._args("full"))

    def per_row(self, extra, channel0: ir.Value, row_stride: ir.Value, lanes: int):
        """For gemm.emit_gemm, where row r of C is output channel ``channel0`` + r and
        element (r, n) lies ``r * row_stride + n`` after the start of C (``extra`` moved
        there). None when there are no steps."""
        if not self.steps:
            return None

        def apply(b, value, row, column, mask):
            values = self.values(b, extra, b.add(channel0, row), lanes)
            values.update(self.full(b, extra, b.add(b.mul(row, row_stride), column), mask,
                                    lanes))
            return self.apply(b, value, values)
        return apply

    def per_column(self, extra, row_stride: ir.Value, lanes: int):
        """For gemm.emit_gemm, where column n of C is output channel n (a dot's last
        dim). None when there are no steps."""
        if not self.steps:
            return None

        def apply(b, value, row, column, mask):
            values = self.columns(b, extra, column, mask, lanes)
            values.update(self.full(b, extra, b.add(b.mul(row, row_stride), column), mask,
                                    lanes))
            return self.apply(b, value, values)
        return apply


    def per_element(self, extra, stride: ir.Value):
        """For gemv.emit_row_dot, which stores element r of the output alone, r * ``stride``
        after its start: output channel r."""
        def apply(b, value, r):
            values = self.values(b, extra, r, None)
            values.update(self.full(b, extra, b.mul(r, stride), None, None))
            return self.apply(b, value, values)
        return apply


def _splat(b: ir.IRBuilder, x: ir.Value, lanes: int | None) -> ir.Value:
    return x if lanes is None else splat(b, x, lanes)


def _load(b: ir.IRBuilder, ptr: ir.Value, lanes: int | None, mask) -> ir.Value:
    if lanes is None:
        return b.load(ptr, typ=F32)
    vty = vec_type(F32, lanes)
    return load_vec(b, ptr, vty) if mask is None else masked_load(b, ptr, vty, mask)


def _given(x: ir.Value):
    return lambda index: x


NO_EPILOGUE = Epilogue()


def plan_epilogue(fusion: Instruction) -> Epilogue | None:
    """The epilogue of an output fusion whose core is a float convolution or dot reading
    parameters 0 and 1 and whose other instructions are ``EPILOGUE_OPS`` steps, the
    root the last (reshapes that keep a dot's last dim change no element's place),
    each reading the accumulators, earlier steps and the args above, else None (the
    fusion is then a loop of element generators)."""
    fused = fusion.called[0]
    core = output_fusion_core(fused)
    params = fused.parameters
    if core.shape.dtype != dtypes.F32 or \
            [o.opcode for o in core.operands] != [Opcode.PARAMETER] * 2 or \
            [o.attrs["number"] for o in core.operands] != [0, 1]:
        return None
    args: dict[Instruction, tuple] = {core: ("acc",)}
    steps, instructions, constants = [], [], {}
    for instr in fused.instructions:
        if instr in args or instr in core.operands or instr.opcode in _LEAVES:
            continue
        if keeps_columns(instr, instr.operands[0], core) and instr.operands[0] in args:
            args[instr] = args[instr.operands[0]]
            continue
        if instr.opcode not in EPILOGUE_OPS or \
                instr.shape.num_elements != core.shape.num_elements:
            return None
        step_args = []
        for o in instr.operands:
            arg = args.get(o) or _epilogue_arg(o, core, instr.shape, len(params) - 2,
                                               constants)
            if arg is None:
                return None
            step_args.append(arg)
        args[instr] = ("step", len(steps))
        steps.append((instr.opcode.text, tuple(step_args), instr.attrs.get("direction")))
        instructions.append(instr)
    if not steps or args.get(fused.root) != ("step", len(steps) - 1) \
            or fused.root.shape.dtype != dtypes.F32:
        return None
    return Epilogue(tuple(steps), len(params) - 2 + len(constants),
                    tuple(value for value, _ in constants), tuple(instructions))


# Operands of the steps, read through _epilogue_arg where a step uses them.
_LEAVES = frozenset({Opcode.PARAMETER, Opcode.CONSTANT, Opcode.BROADCAST})


def _epilogue_arg(o: Instruction, core: Instruction, shape, operands: int,
                  constants: dict[tuple, int]):
    """An operand of an epilogue step at ``shape`` as an Epilogue arg, or None; a scalar
    constant becomes the scalar operand after the ``operands`` the fusion passes and the
    constants before it (``constants``: value -> its place, which this adds to)."""
    per_channel = False
    if o.opcode is Opcode.BROADCAST:
        src = o.operands[0]
        channel = output_channel_dim(core, shape)
        if not all(n == 1 or d == channel for n, d in zip(src.shape.dims, o.attrs["dimensions"])):
            return None
        o, per_channel = src, True
    if o.opcode is Opcode.CONSTANT and o.shape.num_elements == 1 and o.shape.dtype == dtypes.F32:
        value = float(o.literal.reshape(()))
        # Keyed with the text too: 0.0 and -0.0 are equal floats, but not the same constant.
        return ("scalar", operands + constants.setdefault((value, str(value)), len(constants)))
    if o.opcode is Opcode.PARAMETER and o.shape.dtype == dtypes.F32 and o.attrs["number"] >= 2:
        if o.shape.num_elements == 1:
            return ("scalar", o.attrs["number"] - 2)
        if per_channel:
            return ("channel", o.attrs["number"] - 2)
        if o.shape == shape:
            return ("full", o.attrs["number"] - 2)
    return None


class EpilogueOperands:
    """The kernel specs that apply an ``epilogue``: its operands follow lhs and rhs."""

    @property
    def extra_operands(self) -> int:
        return self.epilogue.pointers

    @property
    def constant_operands(self) -> tuple[float, ...]:
        return self.epilogue.constants
