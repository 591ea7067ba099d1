"""Generic MLIR operations -> our instructions: values, functions and regions.

StableHLO's regions see the values around them; XLA's computations see only their
parameters. So a while's captured values ride along in its state tuple (the body
passes them through), a case's go to every branch as one tuple operand, and the
scalar computations of reduce, sort, scatter and reduce-window may capture
constants only, which are copied in. ``func.call`` is inlined, as XLA's ``call`` is
by the HLO importer.
"""
from __future__ import annotations

from typing import Callable

from ...hlo import Computation, Instruction, Module, Opcode, Shape
from ...hlo.errors import XlacError
from ..hlo.importer import COMPLEX_BOUNDARY
from ..xla import complex as cx
from ..xla.complex import Complex
from .mlir import Block, Function, MlirModule, Operation, TensorType


def shape_of(t: TensorType) -> Shape:
    return Shape.array(t.dtype, t.dims)


class LoweringError(XlacError):
    pass


class Context:
    """Where an op's instructions go: a computation, the values in sight, the module
    (for called computations) and the MLIR functions (for calls)."""

    def __init__(self, module: Module, functions: dict[str, Function], comp: Computation,
                 values: dict[str, Instruction], rules: dict[str, Callable],
                 constants_only: bool = False, complex_rules=None):
        self.module, self.functions, self.computation = module, functions, comp
        self.values, self.rules = values, rules
        # (is_complex_op, lower_complex) of complex.py: ops on complex values
        self.complex_rules = complex_rules
        self.constants_only = constants_only    # a scalar computation: captures constants
        self.outer: Context | None = None
        self.op: Operation | None = None

    # -- what rules use --
    def add(self, instr: Instruction) -> Instruction:
        return self.computation.add(instr)

    def error(self, msg: str) -> LoweringError:
        where = f"line {self.op.line}: {self.op.name}: " if self.op is not None else ""
        return LoweringError(where + msg)

    def value(self, name: str) -> Instruction:
        if name in self.values:
            return self.values[name]
        if self.outer is not None and self.constants_only:
            outer = self.outer.value(name)
            if outer.opcode is Opcode.CONSTANT:
                copy = self.add(Instruction(Opcode.CONSTANT, outer.shape, literal=outer.literal,
                                            name=outer.name))
                self.values[name] = copy
                return copy
            raise self.error(f"the region uses {name}, computed outside it; only "
                             "constants can be, in the computations of reduce, sort, "
                             "scatter and reduce-window")
        raise self.error(f"use of undefined value {name}")

    def operands(self, op: Operation) -> list[Instruction]:
        return [self.value(v) for v in op.operands]

    # -- blocks --
    def run_block(self, block: Block, args: list[Instruction]) -> list[Instruction]:
        """Add the block's ops with ``args`` for its arguments; the values it returns."""
        for (name, _), arg in zip(block.arguments, args, strict=True):
            self.values[name] = arg
        for op in block.operations:
            if op.name in ("return", "func.return", "stablehlo.return"):
                return self.operands(op)
            self.lower(op)
        raise LoweringError(f"a region of {len(block.operations)} ops does not return")

    def lower(self, op: Operation) -> None:
        rule = self.rules.get(op.name)
        if rule is None:
            raise LoweringError(f"line {op.line}: unsupported op {op.name}")
        saved, self.op = self.op, op
        try:
            if self.complex_rules is not None and self.complex_rules[0](op, self):
                results = self.complex_rules[1](op, self, self.rules)
            else:
                results = rule(op, self)
        except XlacError:
            raise
        except (KeyError, ValueError, IndexError, TypeError) as e:
            # an attribute missing or of the wrong kind, operands that do not fit
            raise self.error(f"malformed op ({type(e).__name__}: {e})") from None
        self.op = saved
        if len(results) != len(op.results):
            raise LoweringError(f"line {op.line}: {op.name} gave {len(results)} results, "
                                f"the text names {len(op.results)}")
        for name, value in zip(op.results, results):
            self.values[name] = value

    def call(self, function: str, args: list[Instruction]) -> list[Instruction]:
        """``function``'s body inlined here; functions see only their arguments."""
        fn = self.functions.get(function)
        if fn is None:
            raise self.error(f"call of undefined function @{function}")
        inner = Context(self.module, self.functions, self.computation, {}, self.rules,
                        complex_rules=self.complex_rules)
        return inner.run_block(fn.body, args)

    def results(self, instr: Instruction, count: int) -> list[Instruction]:
        """The results of a tuple-shaped instruction, one value each."""
        if count == 1 and not instr.shape.is_tuple:
            return [instr]
        return [self.add(Instruction(Opcode.GET_TUPLE_ELEMENT, s, [instr], {"index": k}))
                for k, s in enumerate(instr.shape.tuple_shapes)]

    def grouped_results(self, instr: Instruction, kinds: list[bool]) -> list:
        """The results of a tuple that ``tuple`` made of values, complex where ``kinds``
        says so: a complex one is two elements."""
        if not instr.shape.is_tuple:
            return [instr]
        return cx.regroup(self.results(instr, len(instr.shape.tuple_shapes)), kinds)

    def tuple(self, values: list) -> Instruction:
        """A tuple of the values, each complex one as two elements (re, im)."""
        flat = cx.flatten(values)
        return self.add(Instruction(Opcode.TUPLE, Shape.tuple_([v.shape for v in flat]), flat))

    # -- regions as computations --
    def scalar_computation(self, block: Block, name: str) -> Computation:
        """A reduce/sort/scatter body: one parameter per block argument, two for a
        complex one (its parts, as a variadic reduce of the parts passes them)."""
        comp = Computation(name)
        inner = self._inner(comp, constants_only=True)
        kinds = [t.complex for _, t in block.arguments]
        parts = [shape_of(t.real) for _, t in block.arguments for _ in range(1 + t.complex)]
        params = [comp.add(Instruction(Opcode.PARAMETER, s, attrs={"number": k}, name=f"p{k}"))
                  for k, s in enumerate(parts)]
        out = inner.run_block(block, cx.regroup(params, kinds))
        comp.root = out[0] if len(out) == 1 and not isinstance(out[0], Complex) \
            else inner.tuple(out)
        return self.module.add_computation(comp)     # before its caller, still being built

    def state_computation(self, block: Block, state: Instruction, kinds: list[bool],
                          captured: list[str], name: str, returns: list[bool] | None
                          ) -> Computation:
        """A while condition or body, or a case branch: one parameter shaped as
        ``state``, the tuple of the block's arguments, then the captured values
        (complex where ``kinds`` says). A body returns the new state with the captured
        values passed through (``returns`` None); a branch, results complex where
        ``returns`` says."""
        comp = Computation(name)
        inner = self._inner(comp)
        param = comp.add(Instruction(Opcode.PARAMETER, state.shape, attrs={"number": 0},
                                     name="state"))
        parts = inner.grouped_results(param, kinds)
        n = len(block.arguments)
        for value, part in zip(captured, parts[n:]):
            inner.values[value] = part
        out = inner.run_block(block, parts[:n])
        if returns is None:
            out, returns = out + parts[n:], kinds
        out = [cx.as_complex(inner, v) if c else v for v, c in zip(out, returns, strict=True)]
        comp.root = out[0] if len(out) == 1 and not returns[0] else inner.tuple(out)
        return self.module.add_computation(comp)     # before its caller, still being built

    def _inner(self, comp: Computation, constants_only: bool = False) -> "Context":
        inner = Context(self.module, self.functions, comp, {}, self.rules, constants_only,
                        self.complex_rules)
        inner.outer = self
        return inner


def lower_module(mlir: MlirModule, rules: dict[str, Callable], name: str,
                 complex_rules=None) -> Module:
    """The public ``main`` (or the only public function) as the entry; its inputs and
    outputs are real."""
    public = [f for f in mlir.functions.values() if f.visibility == "public"]
    main = mlir.functions.get("main") or (public[0] if len(public) == 1 else None)
    if main is None:
        raise LoweringError("no entry function: the module has no public @main")
    module = Module(name)
    if any(t.complex for _, t in main.body.arguments) or any(t.complex
                                                             for t in main.result_types):
        raise LoweringError(COMPLEX_BOUNDARY)
    entry = Computation("main")
    params = [entry.add(Instruction(Opcode.PARAMETER, shape_of(t), attrs={"number": k},
                                    name=n.lstrip("%")))
              for k, (n, t) in enumerate(main.body.arguments)]
    ctx = Context(module, mlir.functions, entry, {}, rules, complex_rules=complex_rules)
    outputs = ctx.run_block(main.body, params)
    entry.root = outputs[0] if len(outputs) == 1 else ctx.tuple(outputs)
    module.add_computation(entry, entry=True)
    return module
