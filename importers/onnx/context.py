"""The state shared by op handlers while one ONNX graph is lowered to HLO.

``ImportContext`` holds the entry Builder, the map from ONNX value names to
HLO instructions, and the helpers handlers need: attribute and input access
(which also records what a handler read, so that the importer can reject
attributes and inputs no handler understood), numpy-style broadcasting,
reducer computations, and ``constant_value`` for values known at compile time.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from ...hlo import (Builder, Computation, Instruction, Module, Opcode, Shape, ShapeError,
                    XlacError, dtypes, scalar_computation)
from .model_file import sparse_to_array
from .scope import OutOfScope

# Results bigger than this are never folded in Python: compile-time values
# exist for shapes, axes and indices, not for weights (the optimizer's constant
# folding handles those).
FOLD_LIMIT = 1 << 14
# Model inputs of up to this many elements that an op needs at compile time are
# configuration (a sample rate, a shape, axes): the caller can pin them with
# const_inputs. A larger one is data, and what depends on it is data-dependent.
CONFIG_ELEMENTS = 16

_REQUIRED = object()


class ConstantInputNeeded(XlacError):
    """A value that must be known at compile time depends on model inputs: ``inputs``
    names them (pin them with ``const_inputs`` / ``--const-input``)."""

    def __init__(self, message: str, inputs: tuple[str, ...], cli: str | None = None):
        super().__init__(message, cli=cli)
        self.inputs = inputs


class InputShapeNeeded(XlacError):
    """A model input whose shape compiled code must fix is not pinned: a dynamic dimension,
    a sequence's length and element shapes. ``inputs`` names them (pin them with
    ``input_shapes`` / ``--input-shape``)."""

    def __init__(self, message: str, inputs: tuple[str, ...], cli: str | None = None):
        super().__init__(message, cli=cli)
        self.inputs = inputs


class DataDependentShape(ConstantInputNeeded, OutOfScope):
    """An output shape computed from the values of a data input (an image, audio, tokens):
    out of scope, as compiled code has shapes fixed at compile time. Still a
    ``ConstantInputNeeded``, so that a runner holding the input's value (the onnx backend
    runner) can pin it as for any other."""


@dataclass(frozen=True)
class Sequence:
    """An ONNX sequence that lives only inside the graph: its length and the shape of
    each element are known at compile time, so it is the tuple of its elements'
    instructions and needs no run-time representation. ``dtype``: the element type
    (an empty sequence has one too)."""
    items: tuple[Instruction, ...]
    dtype: dtypes.DType


@dataclass(frozen=True)
class OptionalValue:
    """An ONNX optional whose presence is known at compile time: its value (a tensor's
    instruction or a ``Sequence``), or None when it is empty."""
    value: "Instruction | Sequence | None"


def kind_of(value) -> str:
    """How messages name what a value is."""
    return ("a sequence" if isinstance(value, Sequence) else
            "an optional" if isinstance(value, OptionalValue) else "a tensor")


def flatten(value) -> list[Instruction]:
    """The tensors a value holds, in order: itself, a sequence's elements, an optional's
    content (none when empty)."""
    if isinstance(value, Sequence):
        return list(value.items)
    if isinstance(value, OptionalValue):
        return [] if value.value is None else flatten(value.value)
    return [value]


def rebuild(template, tensors) -> object:
    """A value shaped as ``template`` (same kind, length and presence) holding the next
    tensors of the iterator ``tensors``: the inverse of ``flatten``."""
    if isinstance(template, Sequence):
        return Sequence(tuple(next(tensors) for _ in template.items), template.dtype)
    if isinstance(template, OptionalValue):
        if template.value is None:
            return template
        return OptionalValue(rebuild(template.value, tensors))
    return next(tensors)


def structure(value) -> tuple:
    """What must agree between two values for one to stand for the other in compiled
    code (the branches of a run-time If, a loop-carried value): kind, length, presence,
    element types and shapes."""
    if isinstance(value, Sequence):
        return ("sequence", value.dtype, tuple(structure(x) for x in value.items))
    if isinstance(value, OptionalValue):
        return ("optional", None if value.value is None else structure(value.value))
    return ("tensor", value.shape.dtype, value.shape.dims)


def node_label(node: onnx.NodeProto) -> str:
    """How messages name a node: its name, else its first output."""
    return node.name or (node.output[0] if node.output else node.op_type)


def _attribute_value(node: onnx.NodeProto, a: onnx.AttributeProto):
    A = onnx.AttributeProto
    if a.type == A.FLOAT:
        return a.f
    if a.type == A.INT:
        return a.i
    if a.type == A.STRING:
        return a.s.decode()
    if a.type == A.TENSOR:
        return numpy_helper.to_array(a.t)
    if a.type == A.GRAPH:
        return a.g
    if a.type == A.TYPE_PROTO:
        return a.tp
    if a.type == A.SPARSE_TENSOR:
        return sparse_to_array(a.sparse_tensor)
    if a.type == A.FLOATS:
        return tuple(a.floats)
    if a.type == A.INTS:
        return tuple(a.ints)
    if a.type == A.STRINGS:
        return tuple(s.decode() for s in a.strings)
    raise XlacError(f"{node.op_type} node '{node_label(node)}': attribute '{a.name}' of type "
                    f"{A.AttributeType.Name(a.type)} is not supported")


class ImportContext:
    def __init__(self, module: Module, builder: Builder, opsets: dict[str, int],
                 scope: str | None = None):
        self.module = module
        self.b = builder
        self.opsets = opsets                       # domain -> opset version
        # ONNX value name -> its instruction (a Sequence or an OptionalValue for those)
        self.values: dict[str, Instruction | Sequence | OptionalValue] = {}
        self.input_names: list[str] = []           # parameter number -> ONNX input name
        # None for the main graph; for a subgraph (a loop body, a branch) what it is,
        # for messages: its parameters are no model inputs.
        self.scope = scope
        self.custom_ops = None                      # custom_op.CustomOps, set by the importer
        self._folded: dict[int, np.ndarray | None] = {}
        self._reducers: dict[tuple, Computation] = {}
        self._node: onnx.NodeProto | None = None
        self._attrs: dict[str, onnx.AttributeProto] = {}
        self._read_attrs: set[str] = set()
        self._read_inputs: set[int] = set()

    def child(self, builder: Builder, scope: str | None) -> "ImportContext":
        """A context for lowering a subgraph into ``builder`` (its values bound by the
        caller): a computation of its own described by ``scope``, or (None) inlined into
        this context's computation. Reducers are shared module-wide."""
        sub = ImportContext(self.module, builder, self.opsets, scope)
        sub.input_names = self.input_names
        sub._reducers = self._reducers
        sub.custom_ops = self.custom_ops
        return sub

    # -- the node being lowered ---------------------------------------------
    def begin_node(self, node: onnx.NodeProto) -> None:
        self._node = node
        self._attrs = {a.name: a for a in node.attribute}
        self._read_attrs, self._read_inputs = set(), set()

    def unread_attributes(self) -> list[str]:
        return sorted(set(self._attrs) - self._read_attrs)

    def unread_inputs(self) -> list[int]:
        return [i for i, n in enumerate(self._node.input) if n and i not in self._read_inputs]

    def error(self, node: onnx.NodeProto, msg: str) -> XlacError:
        return XlacError(f"{node.op_type} node '{node_label(node)}': {msg}")

    def out_of_scope(self, node: onnx.NodeProto, why: str) -> XlacError:
        """The error for a node whose attributes or inputs ask for something out of scope
        by design (scope.py)."""
        return OutOfScope(f"out of scope: {node.op_type} node '{node_label(node)}': {why}")

    def opset(self, node: onnx.NodeProto) -> int:
        return self.opsets.get(node.domain or "", 0)

    def attr(self, node: onnx.NodeProto, name: str, default=_REQUIRED):
        """The value of attribute ``name`` (ints/floats as tuples, tensors as numpy)."""
        self._read_attrs.add(name)
        a = self._attrs.get(name)
        if a is None:
            if default is _REQUIRED:
                raise self.error(node, f"missing required attribute '{name}'")
            return default
        return _attribute_value(node, a)

    def has_attr(self, node: onnx.NodeProto, name: str) -> bool:
        return name in self._attrs

    def input(self, node: onnx.NodeProto, i: int) -> Instruction | None:
        """Tensor input ``i``, or None when it is absent (past the end, or an empty name)."""
        x = self.any_input(node, i)
        if x is not None and not isinstance(x, Instruction):
            raise self.error(node, f"input '{node.input[i]}' is {kind_of(x)}, where a tensor "
                                   "is expected")
        return x

    def any_input(self, node: onnx.NodeProto, i: int):
        """Input ``i`` of any kind (a tensor's instruction, a Sequence, an OptionalValue), or
        None when it is absent."""
        self._read_inputs.add(i)
        if i >= len(node.input) or not node.input[i]:
            return None
        return self.values[node.input[i]]

    def sequence_input(self, node: onnx.NodeProto, i: int) -> Sequence:
        x = self.any_input(node, i)
        if not isinstance(x, Sequence):
            raise self.error(node, f"input {i} ('{node.input[i] if i < len(node.input) else ''}"
                                   f"') is {'absent' if x is None else kind_of(x)}, where a "
                                   "sequence is expected")
        return x

    def inputs(self, node: onnx.NodeProto) -> list[Instruction]:
        """All present inputs, in order (for variadic ops)."""
        return [self.input(node, i) for i in range(len(node.input)) if node.input[i]]

    def const_input(self, node: onnx.NodeProto, i: int, what: str,
                    default=_REQUIRED) -> np.ndarray | None:
        """Input ``i`` as a numpy array; it must be known at compile time."""
        x = self.input(node, i)
        if x is None:
            if default is _REQUIRED:
                raise self.error(node, f"missing input {i} ({what})")
            return default
        value = self.value_of(x)
        if value is None and self.scope is not None:
            raise self.error(node, f"input '{node.input[i]}' ({what}) must be known at "
                                   f"compile time, but in {self.scope} it depends on values "
                                   f"computed at run time")
        if value is None:
            params = _parameters_reached(x)
            names = tuple(self.input_names[p.number] for p in params)
            label = f"{node.op_type} node '{node_label(node)}'"
            data = [n for n, p in zip(names, params) if p.shape.num_elements > CONFIG_ELEMENTS]
            if data:
                # Computed from an image, audio or token tensor: the shape of the output
                # depends on data, which no pinning turns into a constant.
                outs = ", ".join(f"'{o}'" for o in node.output if o)
                raise DataDependentShape(
                    f"{label}: the shape of its output {outs} depends on the data of model "
                    f"input{'s' if len(data) > 1 else ''} {', '.join(repr(n) for n in data)} "
                    f"(through its input '{node.input[i]}', the {what}), and xlac compiles "
                    "only shapes known at compile time", names)
            problem = (f"{label}: input '{node.input[i]}' "
                       f"({what}) must be known at compile time, but it depends on model input"
                       f"{'s' if len(names) > 1 else ''} {', '.join(repr(n) for n in names)}; "
                       f"pin {'them' if len(names) > 1 else 'it'} with ")
            python = "const_inputs={" + ", ".join(f"{json.dumps(n)}: ARRAY" for n in names) + "}"
            cli = ", ".join(f"--const-input {n}=FILE.npy" for n in names)
            raise ConstantInputNeeded(problem + python, names, cli=problem + cli)
        return value

    # -- compile-time values --------------------------------------------------
    def constant_value(self, name: str) -> np.ndarray | None:
        """The value of ONNX value ``name`` if known at compile time, else None."""
        x = self.values.get(name)
        return None if x is None else self.value_of(x)

    def value_of(self, x: Instruction) -> np.ndarray | None:
        """Fold ``x`` with the reference evaluator if all it depends on is constant.

        Initializers and Constant nodes are constants; Shape of a static shape
        lowers to one. Only small results are folded (see FOLD_LIMIT).
        """
        if x.opcode is Opcode.CONSTANT:
            return x.literal
        if id(x) in self._folded:
            return self._folded[id(x)]
        value = None
        if (x.opcode is not Opcode.PARAMETER and not x.shape.is_tuple
                and x.shape.num_elements <= FOLD_LIMIT):
            operands = [self.value_of(o) for o in x.operands]
            if all(v is not None for v in operands):
                from ...hlo.evaluator import evaluate_instruction
                value = np.asarray(evaluate_instruction(x, operands))
        self._folded[id(x)] = value
        return value

    # -- building helpers -------------------------------------------------------
    def scalar(self, value, dtype: dtypes.DType) -> Instruction:
        return self.b.constant(np.asarray(value, dtype=dtype.np), dtype)

    def full(self, value, dtype: dtypes.DType, dims) -> Instruction:
        """An array of ``dims`` filled with ``value`` (a broadcast scalar)."""
        return self.b.broadcast(self.scalar(value, dtype), tuple(dims), ())

    def broadcast_to(self, x: Instruction, dims) -> Instruction:
        """Numpy broadcasting of ``x`` to ``dims`` (trailing dims aligned).

        Size-1 dims that expand are reshaped away first, so the broadcast maps
        every operand dim to an equal result dim, as XLA's broadcast requires.
        """
        dims = tuple(dims)
        if x.shape.dims == dims:
            return x
        offset = len(dims) - x.shape.rank
        if offset < 0 or any(n not in (1, dims[offset + i]) for i, n in enumerate(x.shape.dims)):
            raise ShapeError(f"cannot broadcast {x.shape} to {dims}")
        kept = [i for i, n in enumerate(x.shape.dims) if n == dims[offset + i]]
        x = self.b.reshape(x, [x.shape.dims[i] for i in kept])
        return self.b.broadcast(x, dims, [offset + i for i in kept])

    def broadcast_all(self, xs, node: onnx.NodeProto) -> list[Instruction]:
        """Multidirectional (numpy) broadcasting of ``xs`` to their common shape."""
        try:
            dims = np.broadcast_shapes(*(x.shape.dims for x in xs))
        except ValueError:
            raise self.error(node, "operand shapes do not broadcast: "
                             + ", ".join(str(x.shape) for x in xs)) from None
        return [self.broadcast_to(x, dims) for x in xs]

    def binary(self, node: onnx.NodeProto, opcode: Opcode, a: Instruction, b: Instruction,
               **attrs) -> Instruction:
        a, b = self.broadcast_all([a, b], node)
        return self.b.op(opcode, a, b, **attrs)

    def reducer(self, opcode: Opcode, dtype: dtypes.DType) -> Computation:
        """The scalar computation ``opcode(x, y)`` for reduce / reduce-window (shared)."""
        key = (opcode, dtype)
        if key not in self._reducers:
            comp = scalar_computation(f"{opcode.text}_{dtype.name}", opcode, dtype)
            self._reducers[key] = self.module.add_computation(comp)
        return self._reducers[key]

    def computation(self, key: tuple, make) -> Computation:
        """The computation ``make()`` builds (a comparator, a variadic reducer), added to
        the module once per ``key`` and shared."""
        key = ("custom",) + key
        if key not in self._reducers:
            self._reducers[key] = self.module.add_computation(make())
        return self._reducers[key]

    def replacer(self, dtype: dtypes.DType) -> Computation:
        """The scalar computation ``(old, new) -> new``: a scatter that overwrites."""
        def make():
            b = Builder(f"replace_{dtype.name}")
            s = Shape.array(dtype, ())
            b.parameter(0, s, "old")
            return b.build(b.parameter(1, s, "new"))
        return self.computation(("replace", dtype), make)

    def reduce(self, x: Instruction, dims, opcode: Opcode, init) -> Instruction:
        """Reduce ``dims`` of ``x`` away with ``opcode`` from the scalar ``init``."""
        dt = x.shape.dtype
        return self.b.reduce(x, self.scalar(init, dt), dims, self.reducer(opcode, dt))


def _parameters_reached(x: Instruction) -> list[Instruction]:
    """The parameters ``x`` depends on, in parameter order."""
    seen, stack, params = {id(x)}, [x], []
    while stack:
        instr = stack.pop()
        if instr.opcode is Opcode.PARAMETER:
            params.append(instr)
        for o in instr.operands:
            if id(o) not in seen:
                seen.add(id(o))
                stack.append(o)
    return sorted(params, key=lambda p: p.number)


def normalize_axis(ctx: ImportContext, node: onnx.NodeProto, axis: int, rank: int) -> int:
    """ONNX axis in [-rank, rank) -> [0, rank)."""
    if not -rank <= axis < rank:
        raise ctx.error(node, f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def lowest(dtype: dtypes.DType):
    """The identity of max: -inf for floats, the minimum for integers."""
    return -np.inf if dtype.is_float else (False if dtype.is_pred else np.iinfo(dtype.np).min)


def highest(dtype: dtypes.DType):
    """The identity of min."""
    return np.inf if dtype.is_float else (True if dtype.is_pred else np.iinfo(dtype.np).max)
