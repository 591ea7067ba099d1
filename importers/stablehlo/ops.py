"""One rule per StableHLO op: its generic attributes -> our instructions.

Each rule takes the operation and the lowering context and returns one instruction
per result. Attribute names are the generic form's (StableHLO's spec); the custom
forms' keywords, which the parser keeps as written, are read as their aliases.
"""
from __future__ import annotations

import re
from typing import Callable

import numpy as np

from ...hlo import Instruction, Opcode, Shape
from ...hlo.attributes import (ConvDimensionNumbers, DotDimensionNumbers,
                               GatherDimensionNumbers, PaddingConfig, ScatterDimensionNumbers,
                               SliceSpec, Window)
from ...hlo.shape_inference import infer_shape
from ..hlo.dialect import _count_leading_zeros, _popcnt, _total_order_compare
from ...hlo.text import ForeignInstruction
from .. import xla as expand
from ..xla import complex as cx
from ..xla.complex import Complex
from .lowering import Context, shape_of
from .mlir import Operation

Rule = Callable[[Operation, Context], list[Instruction]]

_MISSING = object()


def attr(op: Operation, *names: str, default=_MISSING):
    """The first of ``names`` the op carries (its generic name, then its custom form's)."""
    for n in names:
        if n in op.attributes:
            return op.attributes[n]
    if default is _MISSING:
        raise KeyError(f"{op.name} needs {names[0]}")
    return default


def _ints(v) -> tuple[int, ...]:
    return tuple(int(x) for x in np.asarray(v).reshape(-1)) if v is not None else ()


def _add(ctx: Context, opcode: Opcode, operands, shape: Shape | None = None, called=(),
         **attrs) -> Instruction:
    s = infer_shape(opcode, [o.shape for o in operands], attrs, called, shape)
    return ctx.add(Instruction(opcode, s, operands, attrs, called))


def _result(op: Operation, k: int = 0) -> Shape:
    return shape_of(op.result_types[k])


# --- element-wise ---------------------------------------------------------------

_ELEMENTWISE = {
    "abs": Opcode.ABS, "add": Opcode.ADD, "and": Opcode.AND, "atan2": Opcode.ATAN2,
    "cbrt": Opcode.CBRT, "ceil": Opcode.CEIL, "cosine": Opcode.COSINE,
    "divide": Opcode.DIVIDE, "exponential": Opcode.EXP,
    "exponential_minus_one": Opcode.EXPM1, "floor": Opcode.FLOOR,
    "is_finite": Opcode.IS_FINITE, "log": Opcode.LOG, "log_plus_one": Opcode.LOG1P,
    "logistic": Opcode.LOGISTIC, "maximum": Opcode.MAXIMUM, "minimum": Opcode.MINIMUM,
    "multiply": Opcode.MULTIPLY, "negate": Opcode.NEGATE, "not": Opcode.NOT, "or": Opcode.OR,
    "power": Opcode.POWER, "remainder": Opcode.REMAINDER,
    "round_nearest_afz": Opcode.ROUND_NEAREST_AFZ,
    "round_nearest_even": Opcode.ROUND_NEAREST_EVEN, "rsqrt": Opcode.RSQRT,
    "select": Opcode.SELECT, "clamp": Opcode.CLAMP, "shift_left": Opcode.SHIFT_LEFT,
    "shift_right_arithmetic": Opcode.SHIFT_RIGHT_ARITHMETIC,
    "shift_right_logical": Opcode.SHIFT_RIGHT_LOGICAL, "sign": Opcode.SIGN,
    "sine": Opcode.SINE, "sqrt": Opcode.SQRT, "subtract": Opcode.SUBTRACT, "tan": Opcode.TAN,
    "tanh": Opcode.TANH, "xor": Opcode.XOR,
}
def _elementwise(opcode: Opcode) -> Rule:
    def rule(op, ctx):
        return [_add(ctx, opcode, ctx.operands(op))]
    return rule


def _convert(op, ctx):
    (x,) = ctx.operands(op)
    out = _result(op)
    if out.dtype == x.shape.dtype:
        return [x]
    return [_add(ctx, Opcode.CONVERT, [x], out)]


def _bitcast_convert(op, ctx):
    (x,) = ctx.operands(op)
    return [expand.bitcast_convert(_where(ctx).b, x, _result(op))]


def _compare(op, ctx):
    a, b = ctx.operands(op)
    words = op.attributes.get("_words", [])
    direction = attr(op, "comparison_direction", default=words[0] if words else None)
    kind = attr(op, "compare_type", default=words[1] if len(words) > 1 else None)
    attrs = {"direction": direction}
    instr = Instruction(Opcode.COMPARE, infer_shape(Opcode.COMPARE, [a.shape, b.shape], attrs),
                        [a, b], attrs)
    if kind == "TOTALORDER" and a.shape.dtype.kind == "f":
        return [_total_order_compare(instr, ctx)]
    return [ctx.add(instr)]


def _bit_count(fn) -> Rule:
    """popcnt and count_leading_zeros, as the HLO importer builds them."""
    def rule(op, ctx):
        foreign = ForeignInstruction(op.results[0].lstrip("%"), _result(op), op.name,
                                     ctx.operands(op), {})
        return [fn(foreign, ctx)]
    return rule


# --- sources and movement -----------------------------------------------------

def _constant(op, ctx):
    value = attr(op, "value")
    literal = np.array(value, _result(op).dtype.np, order="C")   # 0-d stays 0-d
    return [ctx.add(Instruction(Opcode.CONSTANT, _result(op), literal=literal))]


def _iota(op, ctx):
    return [_add(ctx, Opcode.IOTA, [], _result(op),
                 iota_dimension=int(attr(op, "iota_dimension", "dim")))]


def _broadcast_in_dim(op, ctx):
    (x,) = ctx.operands(op)
    return [_add(ctx, Opcode.BROADCAST, [x], _result(op),
                 dimensions=_ints(attr(op, "broadcast_dimensions", "dims")))]


def _reshape(op, ctx):
    (x,) = ctx.operands(op)
    out = _result(op)
    return [x if out.dims == x.shape.dims else _add(ctx, Opcode.RESHAPE, [x], out)]


def _transpose(op, ctx):
    (x,) = ctx.operands(op)
    return [_add(ctx, Opcode.TRANSPOSE, [x], dimensions=_ints(attr(op, "permutation", "dims")))]


def _reverse(op, ctx):
    (x,) = ctx.operands(op)
    return [_add(ctx, Opcode.REVERSE, [x], dimensions=_ints(attr(op, "dimensions", "dims")))]


def _slice(op, ctx):
    (x,) = ctx.operands(op)
    if "_slice" in op.attributes:
        starts, limits, strides = zip(*op.attributes["_slice"]) if op.attributes["_slice"] \
            else ((), (), ())
    else:
        starts, limits = _ints(attr(op, "start_indices")), _ints(attr(op, "limit_indices"))
        strides = _ints(attr(op, "strides", default=(1,) * len(starts)))
    return [_add(ctx, Opcode.SLICE, [x], slice=SliceSpec(starts, limits, strides))]


def _concatenate(op, ctx):
    return [_add(ctx, Opcode.CONCATENATE, ctx.operands(op),
                 dimension=int(attr(op, "dimension", "dim")))]


def _pad(op, ctx):
    x, value = ctx.operands(op)
    padding = PaddingConfig(_ints(attr(op, "edge_padding_low", "low")),
                            _ints(attr(op, "edge_padding_high", "high")),
                            _ints(attr(op, "interior_padding", "interior")))
    return [_add(ctx, Opcode.PAD, [x, value], padding=padding)]


def _dynamic_slice(op, ctx):
    return [_add(ctx, Opcode.DYNAMIC_SLICE, ctx.operands(op),
                 dynamic_slice_sizes=_ints(attr(op, "slice_sizes", "sizes")))]


def _dynamic_update_slice(op, ctx):
    return [_add(ctx, Opcode.DYNAMIC_UPDATE_SLICE, ctx.operands(op))]


def _gather(op, ctx):
    x, idx = ctx.operands(op)
    dn = attr(op, "dimension_numbers")
    numbers = GatherDimensionNumbers(
        _ints(dn.get("offset_dims")), _ints(dn.get("collapsed_slice_dims")),
        _ints(dn.get("start_index_map")), int(dn.get("index_vector_dim", 0)),
        _ints(dn.get("operand_batching_dims")), _ints(dn.get("start_indices_batching_dims")))
    return [_add(ctx, Opcode.GATHER, [x, idx], _result(op), dimension_numbers=numbers,
                 slice_sizes=_ints(attr(op, "slice_sizes")))]


def _scatter(op, ctx):
    operands = ctx.operands(op)
    if len(operands) != 3:
        raise ctx.error(f"scatter of {len(operands) // 2} arrays at once; xlac scatters one")
    dn = attr(op, "scatter_dimension_numbers")
    numbers = ScatterDimensionNumbers(
        _ints(dn.get("update_window_dims")), _ints(dn.get("inserted_window_dims")),
        _ints(dn.get("scatter_dims_to_operand_dims")), int(dn.get("index_vector_dim", 0)),
        _ints(dn.get("input_batching_dims")), _ints(dn.get("scatter_indices_batching_dims")))
    combine = ctx.scalar_computation(op.regions[0], "scatter_combine")
    return [_add(ctx, Opcode.SCATTER, operands, called=[combine], dimension_numbers=numbers)]


# --- dots and convolutions ----------------------------------------------------

def _operands_in(ctx: Context, operands, out: Shape) -> list[Instruction]:
    """Float operands converted to a wider result type first: the same products and
    sums as accumulating in it (bf16 x bf16 -> f32); integers accumulate as declared."""
    if out.dtype.kind != "f":
        return operands
    return [o if o.shape.dtype == out.dtype else
            _add(ctx, Opcode.CONVERT, [o], o.shape.with_dtype(out.dtype)) for o in operands]


def _dot_general(op, ctx):
    out = _result(op)
    a, b = _operands_in(ctx, ctx.operands(op), out)
    if "dot_dimension_numbers" in op.attributes:
        dn = op.attributes["dot_dimension_numbers"]
        numbers = DotDimensionNumbers(
            _ints(dn.get("lhs_batching_dimensions")), _ints(dn.get("lhs_contracting_dimensions")),
            _ints(dn.get("rhs_batching_dimensions")), _ints(dn.get("rhs_contracting_dimensions")))
    else:
        batch = attr(op, "batching_dims", default=([], []))
        contracting = attr(op, "contracting_dims", default=([], []))
        numbers = DotDimensionNumbers(_ints(batch[0]), _ints(contracting[0]),
                                      _ints(batch[1]), _ints(contracting[1]))
    return [_add(ctx, Opcode.DOT, [a, b], out, dimension_numbers=numbers)]


def _dot(op, ctx):
    out = _result(op)
    a, b = _operands_in(ctx, ctx.operands(op), out)
    contracting = ((a.shape.rank - 1,), (0,)) if a.shape.rank else ((), ())
    numbers = DotDimensionNumbers((), contracting[0], (), contracting[1])
    return [_add(ctx, Opcode.DOT, [a, b], out, dimension_numbers=numbers)]


_CONV_LABELS = re.compile(r"\[([^\]]*)\]\s*x\s*\[([^\]]*)\]\s*->\s*\[([^\]]*)\]")


def _conv_numbers(text: str, ctx: Context) -> ConvDimensionNumbers:
    """``[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]``"""
    m = _CONV_LABELS.search(text)
    if m is None:
        raise ctx.error(f"cannot read the convolution's dimension numbers '{text}'")
    sides = [[s.strip() for s in part.split(",")] for part in m.groups()]

    def side(labels, a, b):
        spatial = sorted((int(s), i) for i, s in enumerate(labels) if s.isdigit())
        return labels.index(a), labels.index(b), tuple(i for _, i in spatial)
    (ib, if_, isp), (ko, ki, ksp), (ob, of, osp) = (side(sides[0], "b", "f"),
                                                   side(sides[1], "o", "i"),
                                                   side(sides[2], "b", "f"))
    return ConvDimensionNumbers(ib, if_, isp, ko, ki, ksp, ob, of, osp)


def _convolution(op, ctx):
    out = _result(op)
    x, w = _operands_in(ctx, ctx.operands(op), out)
    dn = _conv_numbers(attr(op, "dimension_numbers"), ctx)
    n = len(dn.kernel_spatial)
    size = tuple(w.shape.dims[d] for d in dn.kernel_spatial)
    stride = _ints(attr(op, "window_strides", "window.stride", default=(1,) * n))
    pad = np.asarray(attr(op, "padding", "window.pad", default=[[0, 0]] * n)).reshape(n, 2)
    lhs = _ints(attr(op, "lhs_dilation", "window.lhs_dilate", default=(1,) * n))
    rhs = _ints(attr(op, "rhs_dilation", "window.rhs_dilate", default=(1,) * n))
    reversal = [bool(v) for v in attr(op, "window_reversal", "window.reverse",
                                      default=[False] * n)]
    if any(reversal):        # a reversed window is the kernel reversed along that dim
        w = _add(ctx, Opcode.REVERSE, [w], dimensions=tuple(
            d for d, r in zip(dn.kernel_spatial, reversal) if r))
    window = Window(size, stride, tuple(pad[:, 0]), tuple(pad[:, 1]), lhs, rhs)
    return [_add(ctx, Opcode.CONVOLUTION, [x, w], out, window=window, dimension_numbers=dn,
                 feature_group_count=int(attr(op, "feature_group_count", default=1)),
                 batch_group_count=int(attr(op, "batch_group_count", default=1)))]


# --- reductions, sorting, control flow --------------------------------------------

def _reduce(op, ctx):
    """reduce(xs..., inits...) {body}: a complex array reduces as its two parts."""
    operands = [cx.as_complex(ctx, v) if t.complex else v
                for v, t in zip(ctx.operands(op), op.operand_types, strict=True)]
    body = ctx.scalar_computation(op.regions[0], "reducer")
    r = _add(ctx, Opcode.REDUCE, cx.flatten(operands), called=[body],
             dimensions=_ints(attr(op, "dimensions")))
    return ctx.grouped_results(r, [t.complex for t in op.result_types])


def _reduce_window(op, ctx):
    operands = ctx.operands(op)
    body = ctx.scalar_computation(op.regions[0], "window_reducer")
    r = _add(ctx, Opcode.REDUCE_WINDOW, operands, called=[body],
             window=_window(op, operands[0].shape.rank))
    return ctx.results(r, len(op.results))


def _sort(op, ctx):
    operands = ctx.operands(op)
    comparator = ctx.scalar_computation(op.regions[0], "comparator")
    r = _add(ctx, Opcode.SORT, operands, called=[comparator],
             dimension=int(attr(op, "dimension", default=-1)) % operands[0].shape.rank,
             is_stable=bool(attr(op, "is_stable", default=False)))
    return ctx.results(r, len(op.results))


def _top_k(op, ctx):
    (x,) = ctx.operands(op)
    r = _add(ctx, Opcode.TOPK, [x], k=int(attr(op, "k")), largest=True)
    return ctx.results(r, 2)


def _while(op, ctx):
    """while(init) cond {..} do {..}: complex values are two elements of the state."""
    init = ctx.operands(op)
    captured = op.free_values()
    values = init + [ctx.value(v) for v in captured]
    kinds = [isinstance(v, Complex) for v in values]
    state = ctx.tuple(values)
    cond = ctx.state_computation(op.regions[0], state, kinds, captured, "while_condition",
                                 [False])
    body = ctx.state_computation(op.regions[1], state, kinds, captured, "while_body", None)
    r = _add(ctx, Opcode.WHILE, [state], called=[cond, body])
    return ctx.grouped_results(r, kinds)[:len(init)]


def _case(op, ctx):
    """case(index) {branch 0} {branch 1} ... (an index out of range runs the last), and
    if(pred) {true} {false}: every branch takes the values any branch captures."""
    (index,) = ctx.operands(op)
    captured = op.free_values()
    values = [ctx.value(v) for v in captured]
    operand = ctx.tuple(values)
    kinds = [isinstance(v, Complex) for v in values]
    returns = [t.complex for t in op.result_types]
    branches = [ctx.state_computation(block, operand, kinds, captured, f"branch_{k}", returns)
                for k, block in enumerate(op.regions)]
    r = _add(ctx, Opcode.CONDITIONAL, [index] + [operand] * len(branches), called=branches)
    if len(returns) == 1 and not returns[0]:
        return [r]
    return ctx.grouped_results(r, returns)


def _optimization_barrier(op, ctx):
    return ctx.operands(op)


def _call(op, ctx):
    return ctx.call(attr(op, "callee"), ctx.operands(op))


def _composite(op, ctx):
    return ctx.call(attr(op, "decomposition"), ctx.operands(op))


# --- XLA's ops our table lacks: importers/xla/ ---------------------------

def _where(ctx: Context) -> expand.Where:
    return expand.Where(ctx.module, ctx.computation)


def _cholesky(op, ctx):
    (a,) = ctx.operands(op)
    return [expand.cholesky(_where(ctx), a, bool(attr(op, "lower", default=False)))[0]]


def _triangular_solve(op, ctx):
    a, b = ctx.operands(op)
    return [expand.triangular_solve(
        _where(ctx), a, b, bool(attr(op, "left_side")), bool(attr(op, "lower")),
        bool(attr(op, "unit_diagonal")), attr(op, "transpose_a") != "NO_TRANSPOSE")]


def _window(op, rank: int) -> Window:
    ones = (1,) * rank
    pad = np.asarray(attr(op, "padding", default=np.zeros((rank, 2), int))).reshape(rank, 2)
    return Window(_ints(attr(op, "window_dimensions")),
                  _ints(attr(op, "window_strides", default=ones)),
                  tuple(pad[:, 0]), tuple(pad[:, 1]),
                  _ints(attr(op, "base_dilations", default=ones)),
                  _ints(attr(op, "window_dilations", default=ones)))


def _select_and_scatter(op, ctx):
    operand, source, init = ctx.operands(op)
    select = ctx.scalar_computation(op.regions[0], "select")
    scatter = ctx.scalar_computation(op.regions[1], "scatter")
    return [expand.select_and_scatter(_where(ctx), operand, source, init, select, scatter,
                                      _window(op, operand.shape.rank))]


_FORMAT = re.compile(r"e(\d+)m(\d+)")


def _reduce_precision(op, ctx):
    (x,) = ctx.operands(op)
    if "format" in op.attributes:
        exponent, mantissa = map(int, _FORMAT.fullmatch(op.attributes["format"]).groups())
    else:
        exponent, mantissa = int(attr(op, "exponent_bits")), int(attr(op, "mantissa_bits"))
    return [expand.reduce_precision(_where(ctx).b, x, exponent, mantissa)]


def _map(op, ctx):
    comp = ctx.scalar_computation(op.regions[0], "mapped")
    return [expand.map_elementwise(_where(ctx).b, ctx.operands(op), comp)]


def _rng_bit_generator(op, ctx):
    (state,) = ctx.operands(op)
    algorithm = attr(op, "rng_algorithm", "algorithm", default="DEFAULT")
    return list(expand.rng_bit_generator(_where(ctx).b, algorithm, state, _result(op, 1)))


def _batch_norm(expander):
    def rule(op, ctx):
        out = expander(_where(ctx), *ctx.operands(op), epsilon=float(attr(op, "epsilon")),
                       feature=int(attr(op, "feature_index")))
        return out if isinstance(out, list) else [out]
    return rule


def _custom_call(op, ctx):
    """JAX's LAPACK calls expanded; any other target a call of the C function of that
    name, with its backend_config string."""
    target = attr(op, "call_target_name")
    operands = ctx.operands(op)
    if expand.is_lapack_call(target):
        config = attr(op, "mhlo.backend_config", default={})
        if not isinstance(config, dict):
            config = expand.backend_config(str(config))
        return expand.lapack_call(_where(ctx), target, operands, config)
    if attr(op, "has_side_effect", default=False):
        raise ctx.error(f"custom call {target} has side effects; xlac calls pure functions "
                        "only")
    config = attr(op, "backend_config", default="")
    shapes = [shape_of(t) for t in op.result_types]
    shape = shapes[0] if len(shapes) == 1 else Shape.tuple_(shapes)
    call = _add(ctx, Opcode.CUSTOM_CALL, operands, shape, custom_call_target=target,
                backend_config=config if isinstance(config, str) else "")
    return ctx.results(call, len(shapes))


# On real values (complex ones go to complex.py): real(x) is x, imag(x) zero; complex
# and fft always make or read complex values.
def _real_part(op, ctx):
    return ctx.operands(op)[:1]


def _imaginary_part(op, ctx):
    (x,) = ctx.operands(op)
    zero = ctx.add(Instruction(Opcode.CONSTANT, Shape.array(x.shape.dtype, ()),
                               literal=np.zeros((), x.shape.dtype.np)))
    return [_add(ctx, Opcode.BROADCAST, [zero], x.shape, dimensions=())]


def _always_complex(op, ctx):
    raise ctx.error("takes or makes complex numbers")


RULES: dict[str, Rule] = {
    **{f"stablehlo.{name}": _elementwise(opcode) for name, opcode in _ELEMENTWISE.items()},
    "stablehlo.convert": _convert, "stablehlo.bitcast_convert": _bitcast_convert,
    "stablehlo.compare": _compare,
    "stablehlo.popcnt": _bit_count(_popcnt),
    "stablehlo.count_leading_zeros": _bit_count(_count_leading_zeros),
    "stablehlo.constant": _constant, "stablehlo.iota": _iota,
    "stablehlo.broadcast_in_dim": _broadcast_in_dim, "stablehlo.reshape": _reshape,
    "stablehlo.transpose": _transpose, "stablehlo.reverse": _reverse,
    "stablehlo.slice": _slice, "stablehlo.concatenate": _concatenate, "stablehlo.pad": _pad,
    "stablehlo.dynamic_slice": _dynamic_slice,
    "stablehlo.dynamic_update_slice": _dynamic_update_slice,
    "stablehlo.gather": _gather, "stablehlo.scatter": _scatter,
    "stablehlo.dot_general": _dot_general, "stablehlo.dot": _dot,
    "stablehlo.convolution": _convolution,
    "stablehlo.reduce": _reduce, "stablehlo.reduce_window": _reduce_window,
    "stablehlo.sort": _sort, "chlo.top_k": _top_k,
    "stablehlo.while": _while, "stablehlo.case": _case, "stablehlo.if": _case,
    "stablehlo.optimization_barrier": _optimization_barrier,
    "func.call": _call, "stablehlo.composite": _composite,
    "stablehlo.cholesky": _cholesky, "stablehlo.triangular_solve": _triangular_solve,
    "stablehlo.select_and_scatter": _select_and_scatter,
    "stablehlo.reduce_precision": _reduce_precision, "stablehlo.map": _map,
    "stablehlo.custom_call": _custom_call, "stablehlo.rng_bit_generator": _rng_bit_generator,
    "stablehlo.real": _real_part, "stablehlo.imag": _imaginary_part,
    "stablehlo.complex": _always_complex, "stablehlo.fft": _always_complex,
    "stablehlo.batch_norm_inference": _batch_norm(expand.batch_norm_inference),
    "stablehlo.batch_norm_training": _batch_norm(expand.batch_norm_training),
    "stablehlo.batch_norm_grad": _batch_norm(expand.batch_norm_grad),
}
