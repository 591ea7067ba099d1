"""The opcode table: the one place that lists every HLO opcode.

Each member carries its HLO text name, its arity (-1: variadic) and the names
of the attributes it takes (the keys of ``Instruction.attrs``; see attributes.py
for their types). Semantics follow XLA's operation semantics. Every opcode has
exactly one shape rule (shape_inference.py), one evaluator rule (evaluator.py)
and one emitter rule (xlac.emitter); tests/test_opcode_table.py checks that.
"""
from __future__ import annotations

from enum import Enum


class Opcode(Enum):
    def __new__(cls, text: str, arity: int, attrs: tuple[str, ...] = ()):
        obj = object.__new__(cls)
        obj._value_ = text
        obj.text = text
        obj.arity = arity
        obj.attrs = attrs
        return obj

    # sources
    PARAMETER = ("parameter", 0, ("number",))
    CONSTANT = ("constant", 0)                   # value in Instruction.literal
    IOTA = ("iota", 0, ("iota_dimension",))

    # element-wise unary
    ABS = ("abs", 1)
    ACOS = ("acos", 1)                           # the inverse and hyperbolic functions:
    ACOSH = ("acosh", 1)                         # CHLO's ops, lowered by XLA; here
    ASIN = ("asin", 1)                           # emitted inline (emitter/mathlib.py)
    ASINH = ("asinh", 1)
    ATAN = ("atan", 1)
    ATANH = ("atanh", 1)
    BITCAST_CONVERT = ("bitcast-convert", 1)     # same bits, another element type
    CBRT = ("cbrt", 1)
    CEIL = ("ceil", 1)
    COSH = ("cosh", 1)
    COSINE = ("cosine", 1)
    ERF = ("erf", 1)
    EXP = ("exponential", 1)
    EXPM1 = ("exponential-minus-one", 1)
    FLOOR = ("floor", 1)
    IS_FINITE = ("is-finite", 1)
    LOG = ("log", 1)
    LOG1P = ("log-plus-one", 1)
    LOGISTIC = ("logistic", 1)
    NEGATE = ("negate", 1)
    NOT = ("not", 1)
    ROUND_NEAREST_AFZ = ("round-nearest-afz", 1)
    ROUND_NEAREST_EVEN = ("round-nearest-even", 1)
    RSQRT = ("rsqrt", 1)
    SIGN = ("sign", 1)
    SINE = ("sine", 1)
    SINH = ("sinh", 1)
    SQRT = ("sqrt", 1)
    TAN = ("tan", 1)
    TANH = ("tanh", 1)
    CONVERT = ("convert", 1)                     # element type from the result shape

    # element-wise binary
    ADD = ("add", 2)
    AND = ("and", 2)
    ATAN2 = ("atan2", 2)
    COMPARE = ("compare", 2, ("direction",))     # EQ NE LT LE GT GE
    DIVIDE = ("divide", 2)
    MAXIMUM = ("maximum", 2)
    MINIMUM = ("minimum", 2)
    MULTIPLY = ("multiply", 2)
    OR = ("or", 2)
    POWER = ("power", 2)
    REMAINDER = ("remainder", 2)
    SHIFT_LEFT = ("shift-left", 2)
    SHIFT_RIGHT_ARITHMETIC = ("shift-right-arithmetic", 2)
    SHIFT_RIGHT_LOGICAL = ("shift-right-logical", 2)
    SUBTRACT = ("subtract", 2)
    XOR = ("xor", 2)

    # element-wise ternary
    CLAMP = ("clamp", 3)                         # clamp(min, x, max)
    SELECT = ("select", 3)                       # select(pred, on_true, on_false)

    # data movement
    BITCAST = ("bitcast", 1)                     # same bytes, new shape: a view
    BROADCAST = ("broadcast", 1, ("dimensions",))   # broadcast_in_dim semantics
    CONCATENATE = ("concatenate", -1, ("dimension",))
    COPY = ("copy", 1)
    GATHER = ("gather", 2, ("dimension_numbers", "slice_sizes"))
    PAD = ("pad", 2, ("padding",))               # pad(operand, padding_value)
    RESHAPE = ("reshape", 1)
    REVERSE = ("reverse", 1, ("dimensions",))
    # scatter(operand, indices, updates): a copy of operand with each update combined
    # into it by to_apply, in the updates' row-major order
    SCATTER = ("scatter", 3, ("dimension_numbers",))
    SLICE = ("slice", 1, ("slice",))
    TRANSPOSE = ("transpose", 1, ("dimensions",))
    # operand, then one scalar start index per dimension (clamped into range)
    DYNAMIC_SLICE = ("dynamic-slice", -1, ("dynamic_slice_sizes",))
    # operand, update, then one scalar start index per dimension (clamped into range)
    DYNAMIC_UPDATE_SLICE = ("dynamic-update-slice", -1)

    # compute
    CONVOLUTION = ("convolution", 2, ("window", "dimension_numbers",
                                      "feature_group_count", "batch_group_count"))
    DOT = ("dot", 2, ("dimension_numbers",))
    REDUCE = ("reduce", -1, ("dimensions",))     # N operands then N init values; to_apply
    REDUCE_WINDOW = ("reduce-window", -1, ("window",))   # likewise
    SORT = ("sort", -1, ("dimension", "is_stable"))      # N operands; comparator to_apply
    TOPK = ("topk", 1, ("k", "largest"))         # (k best values, their s32 indices), last dim

    # a C function the program that links the object defines (XLA's custom-call, CPU
    # ABI): operands -> a result (an array, or a tuple of them); pure by contract
    CUSTOM_CALL = ("custom-call", -1, ("custom_call_target", "backend_config"))

    # control flow (XLA semantics; the called computations in Instruction.called)
    WHILE = ("while", 1)                         # called: condition, body; state in and out
    CONDITIONAL = ("conditional", -1)            # branch index (pred or s32), one operand
                                                 # per branch; called: the branches

    # structure
    FUSION = ("fusion", -1, ("kind",))           # calls a fused computation
    GET_TUPLE_ELEMENT = ("get-tuple-element", 1, ("index",))
    TUPLE = ("tuple", -1)


UNARY_ELEMENTWISE = frozenset({
    Opcode.ABS, Opcode.ACOS, Opcode.ACOSH, Opcode.ASIN, Opcode.ASINH, Opcode.ATAN,
    Opcode.ATANH, Opcode.BITCAST_CONVERT, Opcode.CBRT, Opcode.CEIL, Opcode.COSH,
    Opcode.COSINE, Opcode.ERF, Opcode.EXP, Opcode.EXPM1, Opcode.FLOOR, Opcode.IS_FINITE,
    Opcode.LOG, Opcode.LOG1P, Opcode.LOGISTIC, Opcode.NEGATE, Opcode.NOT,
    Opcode.ROUND_NEAREST_AFZ, Opcode.ROUND_NEAREST_EVEN, Opcode.RSQRT, Opcode.SIGN,
    Opcode.SINE, Opcode.SINH, Opcode.SQRT, Opcode.TAN, Opcode.TANH, Opcode.CONVERT,
})
BINARY_ELEMENTWISE = frozenset({
    Opcode.ADD, Opcode.AND, Opcode.ATAN2, Opcode.COMPARE, Opcode.DIVIDE,
    Opcode.MAXIMUM, Opcode.MINIMUM, Opcode.MULTIPLY, Opcode.OR, Opcode.POWER,
    Opcode.REMAINDER, Opcode.SHIFT_LEFT, Opcode.SHIFT_RIGHT_ARITHMETIC,
    Opcode.SHIFT_RIGHT_LOGICAL, Opcode.SUBTRACT, Opcode.XOR,
})
TERNARY_ELEMENTWISE = frozenset({Opcode.CLAMP, Opcode.SELECT})
ELEMENTWISE = UNARY_ELEMENTWISE | BINARY_ELEMENTWISE | TERNARY_ELEMENTWISE

# Ops whose output element is a pure function of an index remap of one operand.
MOVEMENT = frozenset({
    Opcode.BITCAST, Opcode.BROADCAST, Opcode.CONCATENATE, Opcode.COPY, Opcode.GATHER,
    Opcode.PAD, Opcode.RESHAPE, Opcode.REVERSE, Opcode.SLICE, Opcode.TRANSPOSE,
    Opcode.DYNAMIC_SLICE,
})
# Control flow: the called computations run as code of their own (loops, branches),
# not element by element.
CONTROL_FLOW = frozenset({Opcode.WHILE, Opcode.CONDITIONAL})
# Ops that call a sub-computation (Instruction.called).
CALLS_COMPUTATION = frozenset({Opcode.REDUCE, Opcode.REDUCE_WINDOW, Opcode.SCATTER,
                               Opcode.SORT, Opcode.FUSION}) | CONTROL_FLOW
# Transcendental element-wise ops (looser numeric tolerance in tests).
TRANSCENDENTAL = frozenset({
    Opcode.ACOS, Opcode.ACOSH, Opcode.ASIN, Opcode.ASINH, Opcode.ATAN, Opcode.ATANH,
    Opcode.COSH, Opcode.SINH, Opcode.CBRT, Opcode.COSINE, Opcode.ERF, Opcode.EXP,
    Opcode.EXPM1, Opcode.LOG, Opcode.LOG1P, Opcode.LOGISTIC, Opcode.POWER, Opcode.RSQRT,
    Opcode.SINE, Opcode.TAN, Opcode.TANH, Opcode.ATAN2,
})
COMPARISON_DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")


def by_text(text: str) -> Opcode:
    try:
        return Opcode(text)
    except ValueError:
        raise ValueError(f"unknown opcode '{text}'") from None
