"""The HLO verifier: structural invariants every pass must keep.

``verify(module)`` raises ``VerifierError`` naming the computation and the
instruction at fault. Shapes are checked with the same rules that built them
(shape_inference.infer_shape), comparing element types and dimensions; layouts
are checked for validity only, since layout assignment may pick any.
"""
from __future__ import annotations

import numpy as np

from .dtypes import PRED, DType
from .fusion import FusionKind
from .ir import Computation, Instruction, Module
from .opcodes import Opcode
from .shape import Shape
from .shape_inference import compatible, infer_shape

_REDUCTIONS = (Opcode.REDUCE, Opcode.REDUCE_WINDOW)


class VerifierError(ValueError):
    pass


def verify(module: Module) -> None:
    if module.entry is None or module.entry not in module.computations:
        raise VerifierError(f"module {module.name}: entry computation is not in the module")
    names = [c.name for c in module.computations]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise VerifierError(f"module {module.name}: two computations named %{dup}")
    for position, comp in enumerate(module.computations):
        _verify_computation(comp, earlier=module.computations[:position],
                            module=module)


def _fail(comp: Computation, instr: Instruction | None, msg: str) -> VerifierError:
    where = f"computation %{comp.name}"
    if instr is not None:
        where += f", instruction %{instr.name}"
    return VerifierError(f"{where}: {msg}")


def _verify_computation(comp: Computation, earlier: list[Computation],
                        module: Module) -> None:
    if comp.root is None:
        raise _fail(comp, None, "no root")
    members = {id(i) for i in comp.instructions}
    if len(members) != len(comp.instructions):
        raise _fail(comp, None, "an instruction appears twice")
    if id(comp.root) not in members:
        raise _fail(comp, None, f"root %{comp.root.name} is not in the computation")
    seen_names: set[str] = set()
    defined: set[int] = set()
    for instr in comp.instructions:
        if not instr.name or instr.name in seen_names:
            raise _fail(comp, instr, "instruction name is empty or not unique")
        seen_names.add(instr.name)
        for o in instr.operands:
            if id(o) not in members:
                raise _fail(comp, instr, f"operand %{o.name} is not in this computation")
            if id(o) not in defined:
                raise _fail(comp, instr, f"operand %{o.name} is defined after its use")
        defined.add(id(instr))
        for c in instr.called:
            if not any(c is e for e in earlier):
                where = "not in the module" if not any(c is m for m in module.computations) \
                    else "not before its caller in the module"
                raise _fail(comp, instr, f"called computation %{c.name} is {where}")
        _verify_instruction(comp, instr)
    numbers = sorted(p.attrs.get("number", -1) for p in comp.parameters)
    if numbers != list(range(len(numbers))):
        raise _fail(comp, None, f"parameter numbers {numbers} are not 0..{len(numbers) - 1}")


def _verify_instruction(comp: Computation, instr: Instruction) -> None:
    problem = _layout_problem(instr.shape)
    if problem:
        raise _fail(comp, instr, problem)
    unknown = set(instr.attrs) - set(instr.opcode.attrs)
    if unknown:
        raise _fail(comp, instr, f"{instr.opcode.text} takes no attribute "
                                 f"{', '.join(sorted(unknown))}")
    try:
        inferred = infer_shape(instr.opcode, [o.shape for o in instr.operands], instr.attrs,
                               instr.called, instr.shape)
    except (ValueError, IndexError, KeyError) as e:
        raise _fail(comp, instr, f"invalid {instr.opcode.text}: {e}") from None
    if not compatible(inferred, instr.shape):
        raise _fail(comp, instr, f"shape {instr.shape} is not the inferred {inferred}")
    if instr.opcode is Opcode.CONSTANT:
        _verify_literal(comp, instr)
    elif instr.opcode is Opcode.FUSION and instr.attrs["kind"] not in set(FusionKind):
        raise _fail(comp, instr, f"fusion kind {instr.attrs['kind']!r} is not one of "
                                 f"{', '.join(k.value for k in FusionKind)}")
    elif instr.opcode in _REDUCTIONS:
        _verify_reducer(comp, instr)
    elif instr.opcode is Opcode.SORT:
        _verify_comparator(comp, instr)
    elif instr.opcode is Opcode.SCATTER:
        _verify_update_computation(comp, instr)


def _layout_problem(shape: Shape) -> str | None:
    if shape.is_tuple:
        return next(filter(None, map(_layout_problem, shape.tuple_shapes)), None)
    if not isinstance(shape.dtype, DType):
        return f"array shape {shape!r} has no element type"
    if any(d < 0 for d in shape.dims):
        return f"negative dimension in {shape}"
    if sorted(shape.layout) != list(range(shape.rank)):
        return f"layout {{{','.join(map(str, shape.layout))}}} is not a permutation of " \
               f"the {shape.rank} dimensions of {shape}"
    return None


def _verify_literal(comp: Computation, instr: Instruction) -> None:
    lit, shape = instr.literal, instr.shape
    if not isinstance(lit, np.ndarray):
        raise _fail(comp, instr, "constant has no literal array")
    if shape.is_tuple or lit.dtype != shape.dtype.np or lit.shape != shape.dims:
        raise _fail(comp, instr, f"literal {lit.dtype}{list(lit.shape)} does not match "
                                 f"shape {shape}")


def _verify_reducer(comp: Computation, instr: Instruction) -> None:
    """to_apply takes (accumulators..., values...) as scalars of the operand types and
    returns the accumulators."""
    n = len(instr.operands) // 2
    types = [o.shape.dtype for o in instr.operands[:n]]
    reducer = instr.called[0]
    want = [Shape.array(t, ()) for t in types * 2]
    got = [p.shape for p in reducer.parameters]
    result = want[0] if n == 1 else Shape.tuple_(want[:n])
    if len(got) != len(want) or not all(map(compatible, got, want)) \
            or not compatible(reducer.root.shape, result):
        raise _fail(comp, instr, f"to_apply %{reducer.name} must map "
                                 f"({', '.join(map(str, want))}) -> {result}")


def _verify_comparator(comp: Computation, instr: Instruction) -> None:
    """A sort's comparator takes (lhs, rhs) scalars of each operand's type in operand
    order, (lhs0, rhs0, lhs1, rhs1, ...), and returns a pred scalar: lhs goes first."""
    want = [Shape.array(o.shape.dtype, ()) for o in instr.operands for _ in range(2)]
    comparator = instr.called[0]
    got = [p.shape for p in comparator.parameters]
    if len(got) != len(want) or not all(map(compatible, got, want)) \
            or not compatible(comparator.root.shape, Shape.array(PRED, ())):
        raise _fail(comp, instr, f"comparator %{comparator.name} must map "
                                 f"({', '.join(map(str, want))}) -> pred[]")


def _verify_update_computation(comp: Computation, instr: Instruction) -> None:
    """A scatter's to_apply maps (operand element, update element) -> the new element,
    scalars of the operand's type."""
    s = Shape.array(instr.shape.dtype, ())
    update = instr.called[0]
    params = update.parameters
    if len(params) != 2 or not all(compatible(p.shape, s) for p in params) \
            or not compatible(update.root.shape, s):
        raise _fail(comp, instr, f"to_apply %{update.name} must map ({s}, {s}) -> {s}")
