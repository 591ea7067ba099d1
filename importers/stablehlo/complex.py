"""StableHLO's ops on complex numbers: each complex value is a pair of real
instructions (``importers/xla/complex.py`` builds the ops on pairs); the rules here
read the ops. Movement ops (reshape, slice, broadcast, ...) run their real rule on
each part; loops and branches carry the parts as two values (lowering.py). Complex
values stay inside the program: its inputs and outputs are real.
"""
from __future__ import annotations

from collections import ChainMap
from dataclasses import replace

from ...hlo import Opcode
from ..xla import complex as cx
from ..xla.complex import Complex
from .lowering import Context, shape_of
from .mlir import Operation

# Ops whose real rule passes complex values through as they are.
_PASS_THROUGH = frozenset({"func.call", "stablehlo.composite", "stablehlo.optimization_barrier",
                           "stablehlo.while", "stablehlo.case", "stablehlo.if",
                           "stablehlo.reduce"})


def is_complex_op(op: Operation, ctx: Context) -> bool:
    if op.name in _PASS_THROUGH:
        return False
    return any(t.complex for t in op.result_types + op.operand_types) or any(
        isinstance(ctx.values.get(v), Complex) for v in op.operands)


def lower_complex(op: Operation, ctx: Context, real_rules) -> list:
    rule = _RULES.get(op.name)
    if rule is None:
        if op.name in _PER_PART:
            return _per_part(op, ctx, real_rules)
        raise ctx.error("this op on complex numbers is not supported")
    try:
        return rule(op, ctx, real_rules)
    except ValueError as e:           # what the op cannot do on complex numbers
        raise ctx.error(str(e)) from None


def _complex_operands(op, ctx) -> list[Complex]:
    return [cx.as_complex(ctx, v) for v in ctx.operands(op)]


def _on_values(build):
    """A rule from ``build(ctx, *operands as complex values)``."""
    def rule(op, ctx, real_rules):
        return [build(ctx, *_complex_operands(op, ctx))]
    return rule


def _make_complex(op, ctx, real_rules):
    re, im = ctx.operands(op)
    return [Complex(re, im)]


def _real(op, ctx, real_rules):
    (z,) = ctx.operands(op)
    return [cx.parts(z)[0]]


def _imag(op, ctx, real_rules):
    (z,) = _complex_operands(op, ctx)
    return [z.im]


def _convert(op, ctx, real_rules):
    (x,) = ctx.operands(op)
    out = op.result_types[0]
    return [cx.convert(ctx, x, shape_of(out.real).dtype, out.complex)]


def _compare(op, ctx, real_rules):
    a, b = _complex_operands(op, ctx)
    words = op.attributes.get("_words", [])
    return [cx.compare(ctx, a, b, op.attributes.get("comparison_direction",
                                                     words[0] if words else None))]


def _select(op, ctx, real_rules):
    p, a, b = ctx.operands(op)
    a, b = cx.as_complex(ctx, a), cx.as_complex(ctx, b)
    return [Complex(cx.add(ctx, Opcode.SELECT, p, a.re, b.re),
                    cx.add(ctx, Opcode.SELECT, p, a.im, b.im))]


def _constant(op, ctx, real_rules):
    return [cx.constant(ctx, op.attributes["value"], shape_of(op.result_types[0].real))]


# Ops whose real rule runs on each part alone (their other operands are real).
_PER_PART = {f"stablehlo.{name}" for name in (
    "broadcast_in_dim", "reshape", "transpose", "reverse", "slice", "concatenate", "pad",
    "dynamic_slice", "dynamic_update_slice", "gather")}


def _real_op(op: Operation) -> Operation:
    return replace(op, result_types=[t.real for t in op.result_types],
                   operand_types=[t.real for t in op.operand_types])


def _per_part(op: Operation, ctx: Context, real_rules) -> list:
    """The op's real rule on the real parts, then on the imaginary parts (a real
    operand's zero where the other operands are complex)."""
    complex_operands = {v for v in op.operands if isinstance(ctx.values.get(v), Complex)}
    real_op = _real_op(op)
    outs = []
    saved = ctx.values
    for k in (0, 1):
        overlay = {v: cx.as_complex(ctx, saved[v]).re if k == 0
                   else cx.as_complex(ctx, saved[v]).im
                   for v in op.operands if v in complex_operands or (
                       k == 1 and _takes_complex(op, v))}
        ctx.values = ChainMap(overlay, saved)
        try:
            outs.append(real_rules[op.name](real_op, ctx))
        finally:
            ctx.values = saved
    return [Complex(re, im) for re, im in zip(*outs)]


def _takes_complex(op: Operation, value: str) -> bool:
    """A real operand that stands for a complex one (a concatenation of a real and a
    complex array: its imaginary part is zero) rather than an index or a size."""
    k = op.operands.index(value)
    return k < len(op.operand_types) and op.operand_types[k].complex


class _Bound:
    """A context whose ``operands`` are given values (to run a real rule on parts)."""

    def __init__(self, ctx: Context, values: list):
        self._ctx, self._values = ctx, values

    def operands(self, op):
        return self._values

    def __getattr__(self, name):
        return getattr(self._ctx, name)


def _dot_general(op, ctx, real_rules):
    a, b = ctx.operands(op)
    real_op = _real_op(op)
    return [cx.dot(ctx, a, b, lambda x, y: real_rules[op.name](real_op, _Bound(ctx, [x, y]))[0])]


def _fft(op, ctx, real_rules):
    (x,) = ctx.operands(op)
    kind = op.attributes.get("fft_type", op.attributes.get("type"))
    lengths = [int(n) for n in op.attributes.get("fft_length", op.attributes.get("length"))]
    return [cx.fft(ctx, kind, lengths, x)]


_RULES = {
    "stablehlo.add": _on_values(cx.plus), "stablehlo.subtract": _on_values(cx.minus),
    "stablehlo.multiply": _on_values(cx.times), "stablehlo.divide": _on_values(cx.over),
    "stablehlo.negate": _on_values(cx.negate), "stablehlo.complex": _make_complex,
    "stablehlo.real": _real, "stablehlo.imag": _imag,
    "stablehlo.abs": _on_values(cx.magnitude),
    "stablehlo.exponential": _on_values(cx.exponential), "stablehlo.log": _on_values(cx.log),
    "stablehlo.convert": _convert, "stablehlo.compare": _compare,
    "stablehlo.select": _select, "stablehlo.constant": _constant,
    "stablehlo.dot_general": _dot_general,
    "stablehlo.fft": _fft,
    "chlo.square": _on_values(lambda ctx, z: cx.times(ctx, z, z)),
    "chlo.conj": _on_values(cx.conjugate),
}
