"""XLA's HLO text beyond our IR: how the parser's ``Dialect`` hooks read it.

XLA writes ops our opcode table lacks and attributes our IR does not keep. One rule
each: ``call`` is inlined (JAX wraps every jitted helper in one), ``opt-barrier``
passes its operand through (it only orders XLA's rematerialization), ``popcnt`` and
``count-leading-zeros`` become integer bit arithmetic, a TOTALORDER compare becomes
an integer compare of order keys; ``cholesky``, ``triangular-solve``,
``select-and-scatter``, ``reduce-precision``, ``map``, ``rng-bit-generator``,
``bitcast-convert`` between widths, the batch norms and the LAPACK custom calls of
JAX's CPU lowering are expanded by ``importers/xla/``; complex numbers are pairs of
real values (complex.py); attributes that
change nothing on one device are dropped. Anything else is refused by
``importer.check_supported`` before parsing, so that one message lists every op the
program needs.
"""
from __future__ import annotations

import re

import numpy as np

from ...hlo import Instruction, Opcode, Shape, XlacError, dtypes
from ...hlo.shape_inference import compatible
from ...hlo.text import Dialect, ForeignInstruction, Site, parse_window
from .. import xla as expand
from . import complex as complex_numbers

# Read and dropped: they steer XLA's own compiler or carry JAX's bookkeeping.
# operand_precision and algorithm pick faster, looser XLA dot kernels; ours compute in
# the element type, the DEFAULT/HIGHEST result.
_DROPPED = frozenset({"frontend_attributes", "backend_config", "operand_precision",
                      "algorithm", "origin", "statistics", "result_accuracy",
                      "control-predecessors", "channel_id", "schedule"})
# A single-device sharding (one device holds everything, or a 1x...x1 tiling of device
# 0): meaningless here.
_ONE_DEVICE = re.compile(r"\{\s*(replicated|maximal device=0|manual|devices=\[1(,1)*\]0)\s*\}")


class XlaDialect(Dialect):
    own = frozenset({"bitcast-convert", "custom-call"})
    reads_complex = True

    def foreign(self, instr: ForeignInstruction, site: Site) -> Instruction:
        rule = _FOREIGN.get(instr.opcode)
        if rule is None:
            raise site.error(f"unsupported XLA op {instr.opcode} (%{instr.name})")
        _check_attributes(instr.attributes, _FOREIGN_KEYS[instr.opcode], instr.opcode, site)
        complex_numbers.check_carried(instr, site)
        try:
            return rule(instr, site)
        except XlacError:
            raise
        except (KeyError, ValueError, IndexError, TypeError) as e:
            # an attribute missing or of the wrong kind, operands that do not fit
            raise site.error(f"malformed {instr.opcode} %{instr.name} ({type(e).__name__}: "
                             f"{e})") from None

    def stored(self, shape: Shape) -> Shape:
        return complex_numbers.stored(shape)

    def complex(self, instr: Instruction, operand_shapes: list[Shape], extra: dict[str, str],
                site: Site) -> Instruction:
        return complex_numbers.build(instr, operand_shapes, extra, site)

    def extra_attributes(self, instr: Instruction, attributes: dict[str, str],
                         site: Site) -> Instruction:
        known = {"type"} if instr.opcode is Opcode.COMPARE else set()
        _check_attributes(attributes, known, instr.opcode.text, site)
        if attributes.get("type") == "TOTALORDER" and instr.operands[0].shape.dtype.kind == "f":
            return _total_order_compare(instr, site)
        return site.add(instr)


def _check_attributes(attributes: dict[str, str], known, opcode: str, site: Site) -> None:
    for key, value in attributes.items():
        if key == "sharding" and not _ONE_DEVICE.fullmatch(value):
            raise site.error(f"{opcode} is sharded over several devices (sharding={value}); "
                             "xlac compiles single-device programs")
        if key not in known and key not in _DROPPED and key != "sharding":
            raise site.error(f"unsupported attribute {key}={value} of XLA op {opcode}")


# call(args), to_apply=f => f's instructions, its parameters replaced by args
def _inline_call(instr: ForeignInstruction, site: Site) -> Instruction:
    if "to_apply" not in instr.attributes:
        raise site.error(f"call %{instr.name} needs to_apply=computation")
    callee = site.called(instr.attributes["to_apply"])
    params = callee.parameters
    if len(params) != len(instr.operands) or not compatible(callee.root.shape, instr.shape) \
            or not all(compatible(p.shape, a.shape) for p, a in zip(params, instr.operands)):
        raise site.error(f"call %{instr.name} does not match %{callee.name}'s signature")
    mapped = {id(p): a for p, a in zip(params, instr.operands)}
    for i in callee.instructions:
        if i.opcode is not Opcode.PARAMETER:
            mapped[id(i)] = site.add(Instruction(
                i.opcode, i.shape, [mapped[id(o)] for o in i.operands], i.attrs, i.called,
                i.literal, i.name, i.metadata))
    return mapped[id(callee.root)]


# opt-barrier(x) => x
def _pass_through(instr: ForeignInstruction, site: Site) -> Instruction:
    if len(instr.operands) != 1 or not compatible(instr.operands[0].shape, instr.shape):
        raise site.error(f"opt-barrier %{instr.name} takes one operand of its own shape")
    return instr.operands[0]



_SIGNED = {16: dtypes.S16, 32: dtypes.S32, 64: dtypes.S64}


# compare(a, b), type=TOTALORDER on floats => compare(key(a), key(b)) on signed ints,
# key(x) = bits(x) ^ ((bits(x) >>a (n-1)) >>l 1): flips the magnitude bits of negatives,
# so -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN, as XLA's emitter does
def _total_order_compare(instr: Instruction, site: Site) -> Instruction:
    keys = [_order_key(x, site) for x in instr.operands]
    return site.add(Instruction(Opcode.COMPARE, instr.shape, keys, instr.attrs, name=instr.name))


def _order_key(x: Instruction, site: Site) -> Instruction:
    bits = x.shape.dtype.bits
    if bits not in _SIGNED:
        raise site.error(f"TOTALORDER compare of {x.shape.dtype.name} is not supported")
    i = _bitcast(x, _SIGNED[bits], site)
    sign = _with_constant(Opcode.SHIFT_RIGHT_ARITHMETIC, i, bits - 1, site)
    mask = _with_constant(Opcode.SHIFT_RIGHT_LOGICAL, sign, 1, site)
    return site.add(Instruction(Opcode.XOR, i.shape, [i, mask]))


_UNSIGNED = {8: dtypes.U8, 16: dtypes.U16, 32: dtypes.U32, 64: dtypes.U64}


# popcnt(x) => the SWAR bit count on the unsigned bits: pairs, nibbles, bytes, then the
# bytes summed by a multiply into the top byte
def _popcnt(instr: ForeignInstruction, site: Site) -> Instruction:
    x = _one_integer_operand(instr, site)
    return _bitcast(_bit_count(_bitcast(x, _UNSIGNED[x.shape.dtype.bits], site), site),
                    x.shape.dtype, site)


def _bit_count(u: Instruction, site: Site) -> Instruction:
    n = u.shape.dtype.bits
    ones = (1 << n) - 1
    pairs = _with_constant(Opcode.AND, _with_constant(Opcode.SHIFT_RIGHT_LOGICAL, u, 1, site),
                           ones // 3, site)                            # 0x55...
    u = site.add(Instruction(Opcode.SUBTRACT, u.shape, [u, pairs]))
    low = _with_constant(Opcode.AND, u, ones // 5, site)              # 0x33...
    high = _with_constant(Opcode.AND, _with_constant(Opcode.SHIFT_RIGHT_LOGICAL, u, 2, site),
                          ones // 5, site)
    u = site.add(Instruction(Opcode.ADD, u.shape, [low, high]))
    u = site.add(Instruction(Opcode.ADD, u.shape, [
        u, _with_constant(Opcode.SHIFT_RIGHT_LOGICAL, u, 4, site)]))
    u = _with_constant(Opcode.AND, u, ones // 17, site)               # 0x0f...
    u = _with_constant(Opcode.MULTIPLY, u, ones // 255, site)         # 0x01...
    return _with_constant(Opcode.SHIFT_RIGHT_LOGICAL, u, n - 8, site)


# count-leading-zeros(x) => n - popcnt(x smeared right: every bit below the top one set)
def _count_leading_zeros(instr: ForeignInstruction, site: Site) -> Instruction:
    x = _one_integer_operand(instr, site)
    u = _bitcast(x, _UNSIGNED[x.shape.dtype.bits], site)
    shift = 1
    while shift < u.shape.dtype.bits:
        u = site.add(Instruction(Opcode.OR, u.shape, [
            u, _with_constant(Opcode.SHIFT_RIGHT_LOGICAL, u, shift, site)]))
        shift *= 2
    count = _bit_count(u, site)
    n = _splat(u.shape.dtype.bits, u.shape, site)
    return _bitcast(site.add(Instruction(Opcode.SUBTRACT, u.shape, [n, count])),
                    x.shape.dtype, site)


def _one_integer_operand(instr: ForeignInstruction, site: Site) -> Instruction:
    if len(instr.operands) != 1 or not instr.operands[0].shape.dtype.is_integer \
            or not compatible(instr.operands[0].shape, instr.shape):
        raise site.error(f"{instr.opcode} %{instr.name} takes one integer operand of its "
                         "own shape")
    return instr.operands[0]


def _bitcast(x: Instruction, dtype, site: Site) -> Instruction:
    if x.shape.dtype == dtype:
        return x
    return site.add(Instruction(Opcode.BITCAST_CONVERT, x.shape.with_dtype(dtype), [x]))


def _splat(value: int, shape: Shape, site: Site) -> Instruction:
    c = site.add(Instruction(Opcode.CONSTANT, Shape.array(shape.dtype, ()),
                             literal=np.array(value, shape.dtype.np)))
    return site.add(Instruction(Opcode.BROADCAST, shape, [c], {"dimensions": ()}))


def _with_constant(opcode: Opcode, x: Instruction, value: int, site: Site) -> Instruction:
    """``opcode(x, value)``, the constant broadcast to x's shape."""
    return site.add(Instruction(opcode, x.shape, [x, _splat(value, x.shape, site)]))


def _where(site: Site) -> expand.Where:
    return expand.Where(site.module, site.computation)


def _flag(instr: ForeignInstruction, key: str, default: bool) -> bool:
    return instr.attributes.get(key, "true" if default else "false") == "true"


def _results(instr: ForeignInstruction, values: list[Instruction], site: Site) -> Instruction:
    """One value, or a tuple of several (the text takes them apart itself)."""
    for v, s in zip(values, instr.shape.tuple_shapes if instr.shape.is_tuple else [instr.shape]):
        if not compatible(v.shape, s):
            raise site.error(f"{instr.opcode} %{instr.name} computes {v.shape}, the text says {s}")
    if not instr.shape.is_tuple:
        return values[0]
    return site.add(Instruction(Opcode.TUPLE, Shape.tuple_([v.shape for v in values]), values))


# cholesky(a), lower=b
def _cholesky(instr: ForeignInstruction, site: Site) -> Instruction:
    (a,) = instr.operands
    return _results(instr, [expand.cholesky(_where(site), a, _flag(instr, "lower", False))[0]],
                    site)


# triangular-solve(a, b), left_side=, lower=, unit_diagonal=, transpose_a=
def _triangular_solve(instr: ForeignInstruction, site: Site) -> Instruction:
    a, b = instr.operands
    x = expand.triangular_solve(
        _where(site), a, b, _flag(instr, "left_side", False), _flag(instr, "lower", False),
        _flag(instr, "unit_diagonal", False),
        instr.attributes.get("transpose_a", "NO_TRANSPOSE") != "NO_TRANSPOSE")
    return _results(instr, [x], site)


# select-and-scatter(operand, source, init), window=, select=f, scatter=g
def _select_and_scatter(instr: ForeignInstruction, site: Site) -> Instruction:
    operand, source, init = instr.operands
    window = parse_window(instr.attributes.get("window", "{}"))
    out = expand.select_and_scatter(_where(site), operand, source, init,
                                    site.called(instr.attributes["select"]),
                                    site.called(instr.attributes["scatter"]), window)
    return _results(instr, [out], site)


# reduce-precision(x), exponent_bits=e, mantissa_bits=m
def _reduce_precision(instr: ForeignInstruction, site: Site) -> Instruction:
    (x,) = instr.operands
    out = expand.reduce_precision(_where(site).b, x, int(instr.attributes["exponent_bits"]),
                                  int(instr.attributes["mantissa_bits"]))
    return _results(instr, [out], site)


# map(xs...), dimensions={all}, to_apply=f
def _map(instr: ForeignInstruction, site: Site) -> Instruction:
    out = expand.map_elementwise(_where(site).b, instr.operands,
                                 site.called(instr.attributes["to_apply"]))
    return _results(instr, [out], site)


# custom-call(xs...), custom_call_target="f", backend_config="..."|{...}: JAX's LAPACK
# calls expanded, anything else a call of the C function f
def _custom_call(instr: ForeignInstruction, site: Site) -> Instruction:
    target = instr.attributes.get("custom_call_target", "").strip('"')
    config = instr.attributes.get("backend_config", "")
    if expand.is_lapack_call(target):
        return _results(instr, expand.lapack_call(_where(site), target, instr.operands,
                                                  expand.backend_config(config)), site)
    why = expand.refused_call(target)
    if why is not None:
        raise site.error(f"unsupported custom-call {target} (%{instr.name}): {why}")
    if instr.attributes.get("custom_call_has_side_effect") == "true":
        raise site.error(f"custom-call {target} (%{instr.name}) has side effects; xlac "
                         "calls pure functions only")
    if config.startswith('"'):
        config = bytes(config[1:-1], "utf-8").decode("unicode_escape")
    return site.add(Instruction(Opcode.CUSTOM_CALL, instr.shape, instr.operands,
                                {"custom_call_target": target, "backend_config": config},
                                name=instr.name))


# bitcast-convert(x): between widths too (ours keeps the width)
def _bitcast_convert(instr: ForeignInstruction, site: Site) -> Instruction:
    (x,) = instr.operands
    return _results(instr, [expand.bitcast_convert(_where(site).b, x, instr.shape)], site)


# rng-bit-generator(state), algorithm=rng_default|rng_three_fry|rng_philox
def _rng_bit_generator(instr: ForeignInstruction, site: Site) -> Instruction:
    (state,) = instr.operands
    algorithm = instr.attributes.get("algorithm", "rng_default").removeprefix("rng_").upper()
    if not instr.shape.is_tuple or len(instr.shape.tuple_shapes) != 2:
        raise site.error(f"rng-bit-generator %{instr.name} returns (state, bits)")
    new_state, bits = expand.rng_bit_generator(_where(site).b, algorithm, state,
                                               instr.shape.tuple_shapes[1])
    return _results(instr, [new_state, bits], site)


# batch-norm-inference/-training/-grad(...), epsilon=e, feature_index=f
def _batch_norm(expander):
    def rule(instr: ForeignInstruction, site: Site) -> Instruction:
        out = expander(_where(site), *instr.operands,
                       epsilon=float(instr.attributes.get("epsilon", "0")),
                       feature=int(instr.attributes["feature_index"]))
        return _results(instr, out if isinstance(out, list) else [out], site)
    return rule


_FOREIGN = {"call": _inline_call, "opt-barrier": _pass_through, "popcnt": _popcnt,
            "count-leading-zeros": _count_leading_zeros, "cholesky": _cholesky,
            "triangular-solve": _triangular_solve, "select-and-scatter": _select_and_scatter,
            "reduce-precision": _reduce_precision, "map": _map, "custom-call": _custom_call,
            "bitcast-convert": _bitcast_convert, "rng-bit-generator": _rng_bit_generator,
            "batch-norm-inference": _batch_norm(expand.batch_norm_inference),
            "batch-norm-training": _batch_norm(expand.batch_norm_training),
            "batch-norm-grad": _batch_norm(expand.batch_norm_grad),
            **{op: complex_numbers.foreign for op in complex_numbers.FOREIGN_KEYS}}
_FOREIGN_KEYS = {"call": {"to_apply", "is_composite", "composite.name",
                          "composite.attributes", "composite.version"},
                 "opt-barrier": set(), "popcnt": set(), "count-leading-zeros": set(),
                 "cholesky": {"lower"},
                 "triangular-solve": {"left_side", "lower", "unit_diagonal", "transpose_a"},
                 "select-and-scatter": {"window", "select", "scatter"},
                 "reduce-precision": {"exponent_bits", "mantissa_bits"},
                 "map": {"dimensions", "to_apply"},
                 "custom-call": {"custom_call_target", "operand_layout_constraints",
                                 "output_to_operand_aliasing", "api_version",
                                 "custom_call_has_side_effect"},
                 "bitcast-convert": set(), "rng-bit-generator": {"algorithm"},
                 **{f"batch-norm-{k}": {"epsilon", "feature_index"}
                    for k in ("inference", "training", "grad")},
                 **complex_numbers.FOREIGN_KEYS}
SUPPORTED_FOREIGN = frozenset(_FOREIGN)
