"""Complex numbers in HLO text: a c64/c128 value is stored as a tuple of its real and
imaginary parts (f32/f64 arrays of its shape), so that parameters, calls, tuples,
loops and branches carry it as they are; the ops that compute on one are built on
the pairs by ``importers/xla/complex.py``. The text's own ops on them (``real``,
``imag``, ``complex``, ``fft``) are foreign to our table; the others (arithmetic,
movement, dot, reduce, ...) are ours with complex shapes, which the parser hands
here (``XlaDialect.complex``).
"""
from __future__ import annotations

from ...hlo import Builder, Computation, Instruction, Opcode, Shape
from ...hlo.text import ForeignInstruction, Site
from ..xla import complex as cx
from ..xla.complex import Complex
from ..xla.computations import inline


def stored(shape: Shape) -> Shape:
    """The shape that holds a value the text declares of ``shape``: a complex array is
    a tuple (re, im); in a tuple, its parts are two elements (so that loop states stay
    flat)."""
    if shape.is_tuple:
        return Shape.tuple_([s for e in shape.tuple_shapes for s in _elements(e)])
    if shape.dtype.is_complex:
        return Shape.tuple_(_elements(shape))
    return shape


def _elements(shape: Shape) -> list[Shape]:
    """The stored elements a tuple element of ``shape`` becomes."""
    if not shape.is_tuple and shape.dtype.is_complex:
        return [Shape.array(shape.dtype.part, shape.dims)] * 2
    return [stored(shape)]


def _value(x: Instruction, written: Shape, site: Site):
    """An operand as the builders take it: a ``Complex`` pair or a real instruction."""
    if written.is_tuple or not written.dtype.is_complex:
        return x
    if x.opcode is Opcode.TUPLE:
        return Complex(*x.operands)
    return Complex(*(site.add(Instruction(Opcode.GET_TUPLE_ELEMENT, s, [x], {"index": k}))
                     for k, s in enumerate(x.shape.tuple_shapes)))


def _store(value, site: Site) -> Instruction:
    if isinstance(value, Complex):
        return site.add(Instruction(Opcode.TUPLE, Shape.tuple_([value.re.shape, value.im.shape]),
                                    [value.re, value.im]))
    return value


def _values(instr, shapes, site: Site) -> list:
    return [_value(x, s, site) for x, s in zip(instr.operands, shapes, strict=True)]


# --- ops of our table with complex shapes -----------------------------------------------

def build(instr: Instruction, operand_shapes: list[Shape], extra: dict[str, str],
          site: Site) -> Instruction:
    """``instr``, declared with complex shapes, built on pairs; its stored value."""
    unknown = sorted(set(extra) - {"type"})
    if unknown:
        raise site.error(f"unsupported attribute {unknown[0]} of {instr.opcode.text} on "
                         "complex numbers")
    if instr.opcode is Opcode.GET_TUPLE_ELEMENT:
        return _get_tuple_element(instr, operand_shapes[0], site)
    if instr.opcode is Opcode.TUPLE:
        return site.add(Instruction(Opcode.TUPLE, stored(instr.shape),
                                    cx.flatten(_values(instr, operand_shapes, site))))
    if instr.opcode in _STRUCTURAL:
        return site.add(Instruction(instr.opcode, stored(instr.shape), instr.operands,
                                    instr.attrs, instr.called, name=instr.name))
    rule = _RULES.get(instr.opcode)
    if rule is None and instr.opcode not in _PER_PART:
        raise site.error(f"{instr.opcode.text} of complex numbers (%{instr.name}) is not "
                         "supported")
    values = _values(instr, operand_shapes, site)
    try:
        out = rule(site, instr, values) if rule is not None else _per_part(site, instr, values)
    except ValueError as e:                     # what the op cannot do on complex numbers
        raise site.error(f"{instr.opcode.text} %{instr.name}: {e}") from None
    return _store(out, site)


def _get_tuple_element(instr: Instruction, written: Shape, site: Site) -> Instruction:
    """Element k of the written tuple: its stored elements start after those of the
    elements before it."""
    k = instr.attrs["index"]
    start = sum(len(_elements(e)) for e in written.tuple_shapes[:k])
    tup = instr.operands[0]
    parts = [tup.operands[start + j] if tup.opcode is Opcode.TUPLE else site.add(Instruction(
        Opcode.GET_TUPLE_ELEMENT, s, [tup], {"index": start + j}))
        for j, s in enumerate(_elements(written.tuple_shapes[k]))]
    return _store(Complex(*parts) if len(parts) == 2 else parts[0], site)


# Ops that only hold or pass values: the same op on the stored shapes.
_STRUCTURAL = frozenset({Opcode.PARAMETER, Opcode.WHILE, Opcode.CONDITIONAL})
# Ops that move elements, whose other operands (indices, predicates) are real: the
# same op on each part.
_PER_PART = frozenset({Opcode.BROADCAST, Opcode.RESHAPE, Opcode.TRANSPOSE, Opcode.REVERSE,
                       Opcode.SLICE, Opcode.CONCATENATE, Opcode.PAD, Opcode.DYNAMIC_SLICE,
                       Opcode.DYNAMIC_UPDATE_SLICE, Opcode.GATHER, Opcode.SELECT,
                       Opcode.COPY})


def _per_part(site: Site, instr: Instruction, values: list) -> Complex:
    shape = Shape.array(instr.shape.dtype.part, instr.shape.dims)
    return Complex(*(site.add(Instruction(
        instr.opcode, shape, [getattr(v, part) if isinstance(v, Complex) else v
                              for v in values], instr.attrs, instr.called))
        for part in ("re", "im")))


def _on_values(build_):
    return lambda site, instr, values: build_(site, *(cx.as_complex(site, v) for v in values))


def _constant(site, instr, values):
    return cx.constant(site, instr.literal, Shape.array(instr.shape.dtype.part, ()))


def _convert(site, instr, values):
    (x,) = values
    to = instr.shape.dtype
    return cx.convert(site, x, to.part if to.is_complex else to, to.is_complex)


def _compare(site, instr, values):
    a, b = (cx.as_complex(site, v) for v in values)
    return cx.compare(site, a, b, instr.attrs["direction"])


def _dot(site, instr, values):
    a, b = values
    return cx.dot(site, a, b, lambda x, y: cx.add(site, Opcode.DOT, x, y, **instr.attrs))


def _reduce(site, instr, values):
    """A reduce of one complex array: a variadic reduce of its two parts, whose
    computation rebuilds the pairs its own parameters stand for."""
    if len(values) != 2 or not isinstance(values[0], Complex):
        raise ValueError("a reduce of complex numbers takes one array and its init value")
    x, init = values[0], cx.as_complex(site, values[1])
    (reducer,) = instr.called
    dt = x.re.shape.dtype
    comp = Computation(f"{reducer.name}_parts")
    b = Builder.on(comp)
    scalars = [comp.add(Instruction(Opcode.PARAMETER, Shape.array(dt, ()), attrs={"number": k},
                                    name=f"p{k}")) for k in range(4)]
    pair = Shape.tuple_([Shape.array(dt, ())] * 2)
    acc, item = (comp.add(Instruction(Opcode.TUPLE, pair, scalars[k:k + 2])) for k in (0, 2))
    comp.root = inline(b, reducer, [acc, item])
    site.module.add_computation(comp)
    shape = stored(instr.shape)
    out = site.add(Instruction(Opcode.REDUCE, shape, [x.re, x.im, init.re, init.im],
                               instr.attrs, [comp]))
    return _value(out, instr.shape, site)


_RULES = {
    Opcode.ADD: _on_values(cx.plus), Opcode.SUBTRACT: _on_values(cx.minus),
    Opcode.MULTIPLY: _on_values(cx.times), Opcode.DIVIDE: _on_values(cx.over),
    Opcode.NEGATE: _on_values(cx.negate), Opcode.ABS: _on_values(cx.magnitude),
    Opcode.EXP: _on_values(cx.exponential), Opcode.LOG: _on_values(cx.log),
    Opcode.CONSTANT: _constant, Opcode.CONVERT: _convert, Opcode.COMPARE: _compare,
    Opcode.DOT: _dot, Opcode.REDUCE: _reduce,
}


# --- the text's own ops on complex numbers ----------------------------------------------

def _real(instr: ForeignInstruction, site: Site):
    (x,) = _values(instr, instr.operand_shapes, site)
    return cx.parts(x)[0]


def _imag(instr: ForeignInstruction, site: Site):
    (x,) = _values(instr, instr.operand_shapes, site)
    return cx.as_complex(site, x).im


def _complex(instr: ForeignInstruction, site: Site):
    re, im = instr.operands
    return Complex(re, im)


def _fft(instr: ForeignInstruction, site: Site):
    (x,) = _values(instr, instr.operand_shapes, site)
    lengths = [int(n) for n in instr.attributes["fft_length"].strip("{}").split(",")]
    return cx.fft(site, instr.attributes["fft_type"], lengths, x)


_FOREIGN = {"real": _real, "imag": _imag, "complex": _complex, "fft": _fft}
FOREIGN_KEYS = {"real": set(), "imag": set(), "complex": set(),
                "fft": {"fft_type", "fft_length"}}


def foreign(instr: ForeignInstruction, site: Site) -> Instruction:
    try:
        return _store(_FOREIGN[instr.opcode](instr, site), site)
    except ValueError as e:
        raise site.error(f"{instr.opcode} %{instr.name}: {e}") from None


# Foreign ops that carry complex values as they are (the rest refuse them).
CARRIERS = frozenset({"call", "opt-barrier"})


def check_carried(instr: ForeignInstruction, site: Site) -> None:
    if instr.opcode not in _FOREIGN and instr.opcode not in CARRIERS and instr.is_complex:
        raise site.error(f"{instr.opcode} of complex numbers (%{instr.name}) is not supported")
