"""XLA's HLO text: ``print_module`` and ``parse_module`` round-trip.

    HloModule m

    %add (x: f32[]{}, y: f32[]{}) -> f32[]{} {
      %x = f32[]{} parameter(0)
      %y = f32[]{} parameter(1)
      ROOT %add = f32[]{} add(f32[]{} %x, f32[]{} %y)
    }

    ENTRY %main (p0: f32[2,3]{1,0}) -> f32[2]{0} {
      %p0 = f32[2,3]{1,0} parameter(0)
      %c = f32[]{} constant(0)
      ROOT %r = f32[2]{0} reduce(f32[2,3]{1,0} %p0, f32[]{} %c), dimensions={1}, to_apply=%add
    }

Shapes print one way everywhere, as ``str(Shape)`` (with layout; ``{}`` for
scalars); the parser also reads XLA's forms without layouts. Attributes are in
XLA's syntax, in the order XLA prints them, fields at their defaults left out;
the parser takes them in any order. Names are kept, so print -> parse -> print
is identical. The parser also reads what XLA dumps carry beyond that and means
nothing here: ``/*index=5*/`` comments, ``metadata={...}`` and module-line
attributes such as ``entry_computation_layout``, stack-frame sections such as
``FileNames``; and XLA's current print form, as JAX prints it: names without ``%``,
computations without signatures, operands without shapes. A ``Dialect`` builds what
our IR lacks (the HLO importer's: XLA's ``call``, attributes such as
``type=TOTALORDER``); without one, those are errors.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

from . import dtypes
from .attributes import (ConvDimensionNumbers, DotDimensionNumbers, GatherDimensionNumbers,
                         PaddingConfig, ScatterDimensionNumbers, SliceSpec, Window)
from .errors import XlacError
from .fusion import FusionKind
from .ir import Computation, Instruction, Module
from .literal_text import format_literal, parse_literal
from .opcodes import COMPARISON_DIRECTIONS, Opcode
from .shape import Shape
from .shape_inference import infer_shape
from .verifier import VerifierError, compatible, verify

_SMALL_CONSTANT = 64        # elements; larger ones print as {...} in human dumps


class HloParseError(ValueError, XlacError):
    """Malformed HLO text; the message starts with ``line L, column C``."""

    def __init__(self, message: str):
        XlacError.__init__(self, message)       # ValueError's would leave out ``cli``


# --- attribute values: how each kind is written and read --------------------

def _join(values, sep=",") -> str:
    return sep.join(str(v) for v in values)


def _print_window(w: Window) -> str:
    fields = [f"size={_join(w.size, 'x')}"]
    if any(s != 1 for s in w.stride):
        fields.append(f"stride={_join(w.stride, 'x')}")
    if any(w.pad_low) or any(w.pad_high):
        fields.append("pad=" + "x".join(f"{lo}_{hi}" for lo, hi in zip(w.pad_low, w.pad_high)))
    if any(d != 1 for d in w.lhs_dilation):
        fields.append(f"lhs_dilate={_join(w.lhs_dilation, 'x')}")
    if any(d != 1 for d in w.rhs_dilation):
        fields.append(f"rhs_dilate={_join(w.rhs_dilation, 'x')}")
    return "{" + " ".join(fields) + "}"


def _print_padding(p: PaddingConfig) -> str:
    if any(p.interior):
        return "x".join(f"{lo}_{hi}_{i}" for lo, hi, i in zip(p.low, p.high, p.interior))
    return "x".join(f"{lo}_{hi}" for lo, hi in zip(p.low, p.high))


def _print_slice(s: SliceSpec) -> str:
    parts = [f"[{a}:{b}]" if st == 1 else f"[{a}:{b}:{st}]"
             for a, b, st in zip(s.starts, s.limits, s.strides)]
    return "{" + ", ".join(parts) + "}"


def _labels(rank: int, named: dict[int, str], spatial) -> str:
    chars = ["?"] * rank
    for dim, ch in named.items():
        chars[dim] = ch
    for i, dim in enumerate(spatial):
        chars[dim] = str(i)
    return "".join(chars)


def _print_dim_labels(dn: ConvDimensionNumbers) -> str:
    rank = 2 + len(dn.input_spatial)
    lhs = _labels(rank, {dn.input_batch: "b", dn.input_feature: "f"}, dn.input_spatial)
    rhs = _labels(rank, {dn.kernel_output: "o", dn.kernel_input: "i"}, dn.kernel_spatial)
    out = _labels(rank, {dn.output_batch: "b", dn.output_feature: "f"}, dn.output_spatial)
    return f"{lhs}_{rhs}->{out}"


@dataclass(frozen=True)
class _Syntax:
    print: Callable[[Any], str]
    parse: Callable[["_Parser"], Any]


def _choice(options):
    def parse(p: "_Parser"):
        tok = p.expect("word")
        if tok.text not in options:
            raise p.error(f"expected one of {', '.join(options)}, found '{tok.text}'", tok)
        return tok.text
    return _Syntax(str, parse)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _unquote(p: "_Parser") -> str:
    tok = p.expect("string")
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1),
                  tok.text[1:-1])


_INT = _Syntax(str, lambda p: p.integer())
_STRING = _Syntax(_quote, _unquote)
_INTS = _Syntax(lambda v: "{" + _join(v) + "}", lambda p: p.int_list())
_ONE_INT = _Syntax(lambda v: "{" + str(v) + "}", lambda p: p.one_int())
_BOOL = _Syntax(lambda v: "true" if v else "false",
                lambda p: _choice(("true", "false")).parse(p) == "true")
_SLICE = _Syntax(_print_slice, lambda p: p.slice_spec())
_PADDING = _Syntax(_print_padding, lambda p: p.padding())
_WINDOW = _Syntax(_print_window, lambda p: p.window())
_DIM_LABELS = _Syntax(_print_dim_labels, lambda p: p.dim_labels())
_DIRECTION = _choice(COMPARISON_DIRECTIONS)
_FUSION_KIND = _Syntax(str, lambda p: FusionKind(_choice([k.value for k in FusionKind]).parse(p)))

_REQUIRED = object()
_NO_WINDOW = Window.make(())


@dataclass(frozen=True)
class _Field:
    """One ``key=value`` of the text and the ``Instruction.attrs`` entry it holds.
    ``member`` names a field of a composite attribute of type ``of`` (dot and gather
    dimension numbers are several keys in XLA's text)."""
    key: str
    syntax: _Syntax
    attr: str
    default: Any = _REQUIRED        # left out of the text when equal; assumed when absent
    member: str | None = None
    of: type | None = None


def _dot_field(side: str, kind: str) -> _Field:
    return _Field(f"{side}_{kind}_dims", _INTS, "dimension_numbers", (), f"{side}_{kind}",
                  DotDimensionNumbers)


def _gather_field(key: str, syntax: _Syntax, default=_REQUIRED) -> _Field:
    return _Field(key, syntax, "dimension_numbers", default, member=key,
                  of=GatherDimensionNumbers)


def _scatter_field(key: str, syntax: _Syntax, default=_REQUIRED) -> _Field:
    return _Field(key, syntax, "dimension_numbers", default, member=key,
                  of=ScatterDimensionNumbers)


# The text attributes of each opcode, in XLA's print order.
_FIELDS: dict[Opcode, tuple[_Field, ...]] = {
    Opcode.IOTA: (_Field("iota_dimension", _INT, "iota_dimension"),),
    Opcode.COMPARE: (_Field("direction", _DIRECTION, "direction"),),
    Opcode.BROADCAST: (_Field("dimensions", _INTS, "dimensions"),),
    Opcode.CONCATENATE: (_Field("dimensions", _ONE_INT, "dimension"),),
    Opcode.GATHER: (_gather_field("offset_dims", _INTS),
                    _gather_field("collapsed_slice_dims", _INTS),
                    _gather_field("start_index_map", _INTS),
                    _gather_field("operand_batching_dims", _INTS, ()),
                    _gather_field("start_indices_batching_dims", _INTS, ()),
                    _gather_field("index_vector_dim", _INT),
                    _Field("slice_sizes", _INTS, "slice_sizes")),
    Opcode.SCATTER: (_scatter_field("update_window_dims", _INTS),
                     _scatter_field("inserted_window_dims", _INTS),
                     _scatter_field("scatter_dims_to_operand_dims", _INTS),
                     _scatter_field("input_batching_dims", _INTS, ()),
                     _scatter_field("scatter_indices_batching_dims", _INTS, ()),
                     _scatter_field("index_vector_dim", _INT)),
    Opcode.PAD: (_Field("padding", _PADDING, "padding"),),
    Opcode.REVERSE: (_Field("dimensions", _INTS, "dimensions"),),
    Opcode.SLICE: (_Field("slice", _SLICE, "slice"),),
    Opcode.TRANSPOSE: (_Field("dimensions", _INTS, "dimensions"),),
    Opcode.DYNAMIC_SLICE: (_Field("dynamic_slice_sizes", _INTS, "dynamic_slice_sizes"),),
    Opcode.CONVOLUTION: (_Field("window", _WINDOW, "window", _NO_WINDOW),
                         _Field("dim_labels", _DIM_LABELS, "dimension_numbers"),
                         _Field("feature_group_count", _INT, "feature_group_count", 1),
                         _Field("batch_group_count", _INT, "batch_group_count", 1)),
    Opcode.DOT: tuple(_dot_field(side, kind) for side in ("lhs", "rhs")
                      for kind in ("batch", "contracting")),
    Opcode.REDUCE: (_Field("dimensions", _INTS, "dimensions"),),
    Opcode.REDUCE_WINDOW: (_Field("window", _WINDOW, "window", _NO_WINDOW),),
    Opcode.SORT: (_Field("dimensions", _ONE_INT, "dimension"),
                  _Field("is_stable", _BOOL, "is_stable", False)),
    Opcode.TOPK: (_Field("k", _INT, "k"), _Field("largest", _BOOL, "largest")),
    Opcode.FUSION: (_Field("kind", _FUSION_KIND, "kind"),),
    Opcode.GET_TUPLE_ELEMENT: (_Field("index", _INT, "index"),),
    Opcode.CUSTOM_CALL: (_Field("custom_call_target", _STRING, "custom_call_target"),
                         _Field("backend_config", _STRING, "backend_config", "")),
}
# The keys that name the called computations (Instruction.called, in order), printed
# after the attributes. A conditional on an s32 index lists its branches instead under
# _BRANCHES_KEY (the parser takes that form for a pred index too).
_CALLED_KEYS = {Opcode.REDUCE: ("to_apply",), Opcode.REDUCE_WINDOW: ("to_apply",),
                Opcode.SCATTER: ("to_apply",), Opcode.SORT: ("to_apply",),
                Opcode.FUSION: ("calls",), Opcode.WHILE: ("condition", "body"),
                Opcode.CONDITIONAL: ("true_computation", "false_computation")}
_BRANCHES_KEY = "branch_computations"
# Carried by XLA dumps, meaningless here: read and dropped (the sorted/unique hints of
# gather and scatter allow no faster code in our loops).
_IGNORED_KEYS = frozenset({"metadata", "indices_are_sorted", "unique_indices"})


# --- printer -----------------------------------------------------------------

def print_module(module: Module, large_constants: bool = True) -> str:
    """The module as HLO text. ``large_constants=False`` abbreviates constants over
    64 elements to ``{...}`` for human dumps; such text does not parse back."""
    parts = [f"HloModule {module.name}"]
    for comp in module.computations:
        parts.append(("ENTRY " if comp is module.entry else "")
                     + _computation_text(comp, large_constants))
    return "\n\n".join(parts) + "\n"


def print_computation(comp: Computation, large_constants: bool = True) -> str:
    return _computation_text(comp, large_constants) + "\n"


def _computation_text(comp: Computation, large_constants: bool) -> str:
    if comp.root is None:
        raise ValueError(f"computation %{comp.name} has no root")
    params = ", ".join(f"{p.name}: {p.shape}" for p in comp.parameters)
    lines = [f"%{comp.name} ({params}) -> {comp.root.shape} {{"]
    lines += ["  " + instruction_text(i, i is comp.root, large_constants)
              for i in comp.instructions]
    lines.append("}")
    return "\n".join(lines)


def instruction_text(instr: Instruction, root: bool = False,
                     large_constants: bool = True) -> str:
    """One instruction line, without indentation."""
    op = instr.opcode
    if op is Opcode.PARAMETER:
        args = str(instr.attrs["number"])
    elif op is Opcode.CONSTANT:
        if not large_constants and instr.literal.size > _SMALL_CONSTANT:
            args = "{...}"
        else:
            args = format_literal(instr.literal, instr.shape.dtype)
    else:
        args = ", ".join(f"{o.shape} %{o.name}" for o in instr.operands)
    text = f"{'ROOT ' if root else ''}%{instr.name} = {instr.shape} {op.text}({args})"
    attrs = _attribute_text(instr)
    return f"{text}, {attrs}" if attrs else text


def _attribute_text(instr: Instruction) -> str:
    parts = []
    for f in _FIELDS.get(instr.opcode, ()):
        value = instr.attrs.get(f.attr, f.default)
        if f.member is not None:
            value = getattr(value, f.member)
        if value != f.default:
            parts.append(f"{f.key}={f.syntax.print(value)}")
    if _lists_branches(instr):
        parts.append(f"{_BRANCHES_KEY}={{" + ", ".join(f"%{c.name}" for c in instr.called)
                     + "}")
    else:
        parts += [f"{key}=%{c.name}"
                  for key, c in zip(_CALLED_KEYS.get(instr.opcode, ()), instr.called)]
    return ", ".join(parts)


def _lists_branches(instr: Instruction) -> bool:
    return (instr.opcode is Opcode.CONDITIONAL
            and instr.operands[0].shape.dtype != dtypes.PRED)


# --- lexer -------------------------------------------------------------------

class _Token(NamedTuple):
    kind: str      # name, word, string, arrow, eof, or the punctuation character itself
    text: str
    pos: int


_TOKEN = re.compile(r"""
    (?P<skip>\s+|/\*.*?\*/)
  | (?P<name>%[A-Za-z0-9_.\-]+)
  | (?P<arrow>->)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<punct>[(){}\[\],=:])
  | (?P<word>(?:[A-Za-z0-9_.+]|-(?!>))+)
""", re.X | re.S)


_PARENTHESIS = re.compile(r"[()]")


class _Lexer:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0
        self._peeked: _Token | None = None

    def peek(self) -> _Token:
        if self._peeked is None:
            self._peeked = self._scan()
        return self._peeked

    def next(self) -> _Token:
        tok = self.peek()
        self._peeked = None
        return tok

    def _scan(self) -> _Token:
        while True:
            if self.pos >= len(self.text):
                return _Token("eof", "", self.pos)
            m = _TOKEN.match(self.text, self.pos)
            if m is None:
                raise _error(self.text, self.pos, f"unexpected character "
                                                  f"'{self.text[self.pos]}'")
            self.pos = m.end()
            if m.lastgroup != "skip":
                kind = m.lastgroup if m.lastgroup != "punct" else m.group()
                return _Token(kind, m.group(), m.start())

    def raw_until(self, close: str, pairs: bool = False) -> tuple[str, int]:
        """The raw text up to the next ``close`` character (consumed); literals are
        read this way, bypassing the tokenizer, since they can hold millions of values.
        With ``pairs``, the text holds (re, im) pairs: the first ')' outside them."""
        assert self._peeked is None
        if not pairs:
            end = self.text.find(close, self.pos)
        else:
            depth, end = 0, -1
            for m in _PARENTHESIS.finditer(self.text, self.pos):
                if m.group() == ")" and depth == 0:
                    end = m.start()
                    break
                depth += 1 if m.group() == "(" else -1
        if end < 0:
            raise _error(self.text, self.pos, f"missing '{close}'")
        start, self.pos = self.pos, end + 1
        return self.text[start:end], start

    def mark(self):
        return self.pos, self._peeked

    def reset(self, mark) -> None:
        self.pos, self._peeked = mark


def _error(text: str, pos: int, msg: str) -> HloParseError:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return HloParseError(f"line {line}, column {column}: {msg}")


# --- parser ------------------------------------------------------------------

def parse_module(text: str, dialect: "Dialect | None" = None) -> Module:
    """The module written by ``text``; raises HloParseError (with line and column)
    for malformed text or instructions whose declared shape is not their shape.
    ``dialect`` builds what the opcode table lacks (see ``Dialect``)."""
    return _Parser(text, dialect).module()


def parse_window(text: str) -> Window:
    """A window attribute's value as written (``{size=2x2 stride=2x2}``), for dialects."""
    return _Parser(text).window()


_OPCODES = {op.text: op for op in Opcode}


@dataclass(frozen=True)
class ForeignInstruction:
    """An instruction as the text wrote it, for a ``Dialect``: its opcode is not in
    our table, or (``Dialect.extra_attributes``) it carries keys our IR does not keep."""
    name: str
    shape: Shape                    # as stored (``Dialect.stored``)
    opcode: str
    operands: list[Instruction]
    attributes: dict[str, str]      # key -> value as written
    declared: Shape | None = None   # the result's shape as written (complex: not as stored)
    operand_shapes: tuple[Shape, ...] = ()     # the operands' as written

    @property
    def is_complex(self) -> bool:
        return any(has_complex(s) for s in (self.declared or self.shape, *self.operand_shapes))


def has_complex(shape: Shape) -> bool:
    if shape.is_tuple:
        return any(has_complex(s) for s in shape.tuple_shapes)
    return shape.dtype.is_complex


class Site:
    """Where a dialect builds: the computation being parsed, and errors that point at
    the instruction's opcode in the text."""

    def __init__(self, parser: "_Parser", module: Module, comp: Computation, at: _Token):
        self.module, self.computation, self._parser, self._at = module, comp, parser, at

    def add(self, instr: Instruction) -> Instruction:
        return self.computation.add(instr)

    def called(self, name: str) -> Computation:
        """A computation named in an attribute value (callees come first)."""
        return self._parser.find_computation(self.module, name.removeprefix("%"), self._at)

    def error(self, msg: str) -> HloParseError:
        return self._parser.error(msg, self._at)


class Dialect:
    """What a front end reads beyond our IR (XLA's own HLO text, for the HLO importer).
    Each method returns the instruction the text's name then stands for, having added
    what it built to ``site``; the defaults refuse. ``own`` names opcodes of our table
    that the dialect reads itself, as foreign ones, where XLA's allow more than ours."""

    own: frozenset[str] = frozenset()
    # Whether the text may hold complex numbers (c64, c128), which our IR does not: the
    # dialect then says how a complex value is stored in real arrays (``stored``) and
    # builds every instruction of our table that makes or takes one (``complex``).
    reads_complex = False

    def foreign(self, instr: ForeignInstruction, site: Site) -> Instruction:
        raise site.error(f"unknown opcode '{instr.opcode}'")

    def stored(self, shape: Shape) -> Shape:
        raise NotImplementedError

    def complex(self, instr: Instruction, operand_shapes: list[Shape], extra: dict[str, str],
                site: Site) -> Instruction:
        """``instr`` with the shape the text declares, its operands as stored."""
        raise site.error("complex numbers are not supported")

    def extra_attributes(self, instr: Instruction, attributes: dict[str, str],
                         site: Site) -> Instruction:
        raise site.error(f"unknown attribute '{next(iter(attributes))}' for "
                         f"{instr.opcode.text}")


def _describe(tok: _Token) -> str:
    return "end of input" if tok.kind == "eof" else f"'{tok.text}'"


class _Parser:
    def __init__(self, text: str, dialect: "Dialect | None" = None):
        self.lex = _Lexer(text)
        self.dialect = dialect
        self.element_types = ({**dtypes.BY_NAME, **dtypes.COMPLEX}
                              if dialect is not None and dialect.reads_complex
                              else dtypes.BY_NAME)
        # id(instruction) -> its shape as written, for values stored otherwise (complex)
        self.declared: dict[int, Shape] = {}

    # -- tokens --
    def error(self, msg: str, at: _Token | int | None = None) -> HloParseError:
        """An error at a token, a text position, or (by default) the next token."""
        pos = at if isinstance(at, int) else (at or self.lex.peek()).pos
        return _error(self.lex.text, pos, msg)

    def expect(self, kind: str, what: str | None = None) -> _Token:
        tok = self.lex.next()
        if tok.kind != kind:
            raise self.error(f"expected {what or repr(kind)}, found {_describe(tok)}", tok)
        return tok

    def accept(self, kind: str, text: str | None = None) -> _Token | None:
        tok = self.lex.peek()
        if tok.kind == kind and (text is None or tok.text == text):
            return self.lex.next()
        return None

    def name(self, what: str) -> tuple[_Token, str]:
        """A name, ``%x.1`` or (as XLA prints it now) ``x.1``: its token and text."""
        tok = self.lex.next()
        if tok.kind not in ("name", "word"):
            raise self.error(f"expected {what}, found {_describe(tok)}", tok)
        return tok, tok.text.removeprefix("%")

    def keyword(self, text: str) -> None:
        tok = self.lex.next()
        if tok.kind != "word" or tok.text != text:
            raise self.error(f"expected '{text}', found {_describe(tok)}", tok)

    # -- values --
    def integer(self) -> int:
        tok = self.expect("word", "an integer")
        try:
            return int(tok.text)
        except ValueError:
            raise self.error(f"expected an integer, found '{tok.text}'", tok) from None

    def int_list(self) -> tuple[int, ...]:
        self.expect("{")
        values = []
        if not self.accept("}"):
            values.append(self.integer())
            while self.accept(","):
                values.append(self.integer())
            self.expect("}")
        return tuple(values)

    def one_int(self) -> int:
        tok = self.lex.peek()
        values = self.int_list()
        if len(values) != 1:
            raise self.error("expected exactly one dimension", tok)
        return values[0]

    def _int_word(self, tok: _Token, text: str, what: str) -> int:
        try:
            return int(text)
        except ValueError:
            raise self.error(f"bad {what} '{tok.text}'", tok) from None

    def _x_separated(self, tok: _Token, counts: tuple[int, ...], what: str):
        """``1_1x2_2``-style values: per dimension, integers joined by '_' (as many
        as one of ``counts``)."""
        dims = []
        for item in tok.text.split("x"):
            fields = item.split("_")
            if len(fields) not in counts:
                raise self.error(f"bad {what} '{tok.text}'", tok)
            dims.append([self._int_word(tok, f, what) for f in fields])
        return dims

    def slice_spec(self) -> SliceSpec:
        self.expect("{")
        starts, limits, strides = [], [], []
        while not self.accept("}"):
            if starts:
                self.expect(",")
            self.expect("[")
            starts.append(self.integer())
            self.expect(":")
            limits.append(self.integer())
            strides.append(self.integer() if self.accept(":") else 1)
            self.expect("]")
        return SliceSpec(starts, limits, strides)

    def padding(self) -> PaddingConfig:
        if self.lex.peek().kind != "word":            # a scalar's padding is empty
            return PaddingConfig((), (), ())
        tok = self.lex.next()
        dims = self._x_separated(tok, (2, 3), "padding")
        if len({len(d) for d in dims}) != 1:
            raise self.error(f"bad padding '{tok.text}': mixed interior", tok)
        return PaddingConfig([d[0] for d in dims], [d[1] for d in dims],
                             [d[2] if len(d) == 3 else 0 for d in dims])

    def window(self) -> Window:
        start = self.expect("{")
        fields: dict[str, tuple[_Token, list]] = {}
        while not self.accept("}"):
            key = self.expect("word", "a window field")
            self.expect("=")
            value = self.expect("word", "a window value")
            if key.text in fields:
                raise self.error(f"duplicate window field '{key.text}'", key)
            if key.text == "pad":
                fields["pad"] = (value, self._x_separated(value, (2,), "window pad"))
            elif key.text in ("size", "stride", "lhs_dilate", "rhs_dilate"):
                fields[key.text] = (value, [d[0] for d in
                                            self._x_separated(value, (1,), key.text)])
            else:
                raise self.error(f"unknown window field '{key.text}'", key)
        size = fields.get("size", (start, []))[1]
        for key, (tok, values) in fields.items():
            if len(values) != len(size):
                raise self.error(f"window {key} has {len(values)} dimensions, size has "
                                 f"{len(size)}", tok)
        pad = fields.get("pad", (None, None))[1]
        return Window.make(size, fields.get("stride", (0, None))[1],
                           [lo for lo, _ in pad] if pad else None,
                           [hi for _, hi in pad] if pad else None,
                           fields.get("lhs_dilate", (0, None))[1],
                           fields.get("rhs_dilate", (0, None))[1])

    def dim_labels(self) -> ConvDimensionNumbers:
        first = self.expect("word", "dim_labels")
        self.expect("arrow", "'->'")
        out = self.expect("word", "output dim_labels")
        sides = first.text.split("_")
        if len(sides) != 2:
            raise self.error(f"bad dim_labels '{first.text}'", first)
        rank = len(out.text)
        lhs = self._labels(first, sides[0], "bf", rank)
        rhs = self._labels(first, sides[1], "oi", rank)
        res = self._labels(out, out.text, "bf", rank)
        return ConvDimensionNumbers(lhs["b"], lhs["f"], lhs["spatial"], rhs["o"], rhs["i"],
                                    rhs["spatial"], res["b"], res["f"], res["spatial"])

    def _labels(self, tok: _Token, text: str, letters: str, rank: int) -> dict:
        spatial = sorted((ch, i) for i, ch in enumerate(text) if ch.isdigit())
        ok = (len(text) == rank and all(text.count(c) == 1 for c in letters)
              and [ch for ch, _ in spatial] == [str(i) for i in range(rank - 2)])
        if not ok:
            raise self.error(f"bad dim_labels '{text}' (want {letters} and spatial digits "
                             f"0..{rank - 3}, rank {rank})", tok)
        return {letters[0]: text.index(letters[0]), letters[1]: text.index(letters[1]),
                "spatial": [i for _, i in spatial]}

    def skip_value(self) -> None:
        """A value we do not keep (``metadata={...}``): one token or a braced group."""
        if not self.accept("{"):
            self.lex.next()
            return
        depth = 1
        while depth:
            tok = self.lex.next()
            if tok.kind == "eof":
                raise self.error("unbalanced '{'", tok)
            depth += {"{": 1, "}": -1}.get(tok.kind, 0)

    # -- shapes --
    def shape(self) -> Shape:
        if self.accept("("):
            shapes = []
            if not self.accept(")"):
                shapes.append(self.shape())
                while self.accept(","):
                    shapes.append(self.shape())
                self.expect(")")
            return Shape.tuple_(shapes)
        tok = self.expect("word", "a shape")
        if tok.text not in self.element_types:
            raise self.error(f"unknown element type '{tok.text}'", tok)
        self.expect("[")
        dims = []
        if not self.accept("]"):
            dims.append(self.integer())
            while self.accept(","):
                dims.append(self.integer())
            self.expect("]")
        layout = self.int_list() if self._layout_follows() else None
        try:
            return Shape.array(self.element_types[tok.text], dims, layout)
        except ValueError as e:
            raise self.error(str(e), tok) from None

    def stored(self, shape: Shape) -> Shape:
        """How a value of the written ``shape`` is held: complex ones as the dialect says."""
        return self.dialect.stored(shape) if has_complex(shape) else shape

    def written(self, instr: Instruction) -> Shape:
        return self.declared.get(id(instr), instr.shape)

    def _layout_follows(self) -> bool:
        """After a shape, '{' opens a layout unless it opens a computation body (its
        first token is then an instruction name or ROOT, not a number or '}')."""
        if self.lex.peek().kind != "{":
            return False
        mark = self.lex.mark()
        self.lex.next()
        nxt = self.lex.peek()
        self.lex.reset(mark)
        return nxt.kind == "}" or (nxt.kind == "word" and nxt.text.isdigit())

    def _shape_follows(self) -> bool:
        """Before an operand: a shape starts with '(' (a tuple) or an element type and
        '['; a bare word is a name (XLA prints names without '%' and operands
        without shapes)."""
        tok = self.lex.peek()
        if tok.kind == "(":
            return True
        if tok.kind != "word" or tok.text not in self.element_types:
            return False
        mark = self.lex.mark()
        self.lex.next()
        follows = self.lex.peek().kind == "["
        self.lex.reset(mark)
        return follows

    # -- structure --
    def module(self) -> Module:
        self.keyword("HloModule")
        module = Module(self.expect("word", "a module name").text)
        while self.accept(","):               # e.g. entry_computation_layout={...}
            self.expect("word", "a module attribute")
            self.expect("=")
            self.skip_value()
        self.skip_stack_frames()
        entry_seen = False
        while self.lex.peek().kind != "eof":
            entry = self.accept("word", "ENTRY") is not None
            if entry and entry_seen:
                raise self.error("second ENTRY computation")
            entry_seen |= entry
            self.computation(module, entry)
        if not module.computations:
            raise self.error("module has no computations")
        if not entry_seen:                    # as XLA: the last one is the entry
            module.entry = module.computations[-1]
        try:
            verify(module)
        except VerifierError as e:
            raise HloParseError(f"invalid module: {e}") from None
        return module

    def skip_stack_frames(self) -> None:
        """XLA's dumps index the source locations of ``metadata`` in sections such as
        ``FileNames`` of numbered entries (``1 "f.py"``, ``1 {file_name_id=1 ...}``)."""
        while self.accept("word", "FileNames") or self.accept("word", "FunctionNames") \
                or self.accept("word", "FileLocations") or self.accept("word", "StackFrames"):
            while self.lex.peek().kind == "word" and self.lex.peek().text.isdigit():
                self.lex.next()
                self.skip_value()

    def computation(self, module: Module, entry: bool) -> None:
        name_tok, name = self.name("a computation name")
        if any(c.name == name for c in module.computations):
            raise self.error(f"duplicate computation %{name}", name_tok)
        header = self.header() if self.lex.peek().kind == "(" else None   # XLA may omit it
        self.expect("{")
        comp = Computation(name)
        names: dict[str, Instruction] = {}
        roots = []
        while not self.accept("}"):
            if self.accept("word", "ROOT"):
                roots.append(self.instruction(module, comp, names))
            else:
                self.instruction(module, comp, names)
        if not comp.instructions:
            raise self.error(f"computation %{name} is empty", name_tok)
        if len(roots) > 1:
            raise self.error(f"computation %{name} has {len(roots)} ROOT instructions",
                             name_tok)
        comp.root = roots[0] if roots else comp.instructions[-1]
        if header is not None:
            self.check_header(comp, header, name_tok)
        module.add_computation(comp, entry=entry)

    def header(self) -> tuple[list[tuple[_Token, Shape]], Shape]:
        self.expect("(")
        params = []
        while not self.accept(")"):
            if params:
                self.expect(",")
            tok = self.expect("word", "a parameter name")
            self.expect(":")
            params.append((tok, self.shape()))
        self.expect("arrow", "'->'")
        return params, self.shape()

    def check_header(self, comp: Computation, header, name_tok: _Token) -> None:
        params, result = header
        numbers = [p.attrs["number"] for p in comp.parameters]
        if numbers != list(range(len(numbers))):
            raise self.error(f"computation %{comp.name} has parameter numbers {numbers}, "
                             f"not 0..{len(numbers) - 1}", name_tok)
        if len(params) != len(numbers):
            raise self.error(f"header of %{comp.name} lists {len(params)} parameters, the "
                             f"body has {len(numbers)}", name_tok)
        for (tok, shape), p in zip(params, comp.parameters):
            if tok.text != p.name or not compatible(self.stored(shape), p.shape):
                raise self.error(f"header parameter {tok.text}: {shape} does not match "
                                 f"parameter({p.attrs['number']}) %{p.name}: {p.shape}", tok)
        if not compatible(self.stored(result), comp.root.shape):
            raise self.error(f"header result {result} does not match ROOT %{comp.root.name}: "
                             f"{comp.root.shape}", name_tok)

    def instruction(self, module: Module, comp: Computation,
                    names: dict[str, Instruction]) -> Instruction:
        name_tok, name = self.name("an instruction name")
        if name in names:
            raise self.error(f"duplicate instruction %{name}", name_tok)
        self.expect("=")
        shape = self.shape()
        op_tok = self.expect("word", "an opcode")
        opcode = _OPCODES.get(op_tok.text)
        if self.dialect is not None and op_tok.text in self.dialect.own:
            opcode = None
        if opcode is None and self.dialect is None:
            raise self.error(f"unknown opcode '{op_tok.text}'", op_tok)
        attrs: dict[str, Any] = {}
        literal = None
        operands: list[Instruction] = []
        self.expect("(")
        if opcode is Opcode.PARAMETER:
            attrs["number"] = self.integer()
            self.expect(")")
        elif opcode is Opcode.CONSTANT:
            literal = self.literal(shape, op_tok)
        else:
            operands = self.operands(names)
        site = Site(self, module, comp, op_tok)
        operand_shapes = [self.written(o) for o in operands]
        if opcode is None:
            foreign = ForeignInstruction(name, self.stored(shape), op_tok.text, operands,
                                         self.raw_attributes(), shape, tuple(operand_shapes))
            return self.define(names, name, self.dialect.foreign(foreign, site), shape)
        extra: dict[str, str] = {}
        called = self.attributes(module, opcode, attrs, op_tok, extra)
        if any(has_complex(s) for s in (shape, *operand_shapes)):
            instr = Instruction(opcode, shape, operands, attrs, called, literal, name)
            return self.define(names, name,
                               self.dialect.complex(instr, operand_shapes, extra, site), shape)
        instr = Instruction(opcode, shape, operands, attrs, called, literal, name)
        self.check_shape(instr, op_tok)
        if extra:
            names[name] = self.dialect.extra_attributes(instr, extra, site)
            return names[name]
        names[name] = comp.add(instr)
        return instr

    def define(self, names: dict[str, Instruction], name: str, value: Instruction,
               shape: Shape) -> Instruction:
        """``name`` stands for ``value``, which the text declares of ``shape``."""
        names[name] = value
        if has_complex(shape):
            self.declared[id(value)] = shape
        return value

    def literal(self, shape: Shape, op_tok: _Token):
        text, at = self.lex.raw_until(")", pairs=not shape.is_tuple and shape.dtype.is_complex)
        if shape.is_tuple:
            raise self.error("tuple constants are not supported", op_tok)
        if text.strip() == "{...}":
            raise self.error("constant value was left out ({...}: printed with "
                             "large_constants=False); this text cannot be parsed", at)
        try:
            return parse_literal(text, shape.dims, shape.dtype)
        except ValueError as e:
            raise self.error(f"bad {shape} constant: {e}", at) from None

    def operands(self, names: dict[str, Instruction]) -> list[Instruction]:
        operands = []
        while not self.accept(")"):
            if operands:
                self.expect(",")
            shape = self.shape() if self._shape_follows() else None
            tok, name = self.name("an operand name")
            operand = names.get(name)
            if operand is None:
                raise self.error(f"unknown operand {tok.text} (operands must be defined "
                                 f"before use)", tok)
            if shape is not None and not compatible(shape, self.written(operand)):
                raise self.error(f"operand {tok.text} is {self.written(operand)}, not {shape}",
                                 tok)
            operands.append(operand)
        return operands

    def raw_attributes(self) -> dict[str, str]:
        """``, key=value`` pairs as written (for a dialect's own instructions), but
        those that mean nothing here."""
        out = {}
        while self.accept(","):
            key = self.expect("word", "an attribute name")
            self.expect("=")
            value = self.raw_value()
            if key.text not in _IGNORED_KEYS:
                out[key.text] = value
        return out

    def raw_value(self) -> str:
        start = self.lex.peek().pos
        self.skip_value()
        return self.lex.text[start:self.lex.pos]

    def attributes(self, module: Module, opcode: Opcode, attrs: dict,
                   op_tok: _Token, extra: dict[str, str]) -> list[Computation]:
        """Reads ``, key=value`` pairs into ``attrs``; returns the called computations.
        Keys our IR does not know go into ``extra`` as written where a dialect reads
        them, else they are errors."""
        fields = {f.key: f for f in _FIELDS.get(opcode, ())}
        called_keys = _CALLED_KEYS.get(opcode, ())
        values: dict[str, Any] = {}
        by_key: dict[str, Any] = {}
        while self.accept(","):
            key = self.expect("word", "an attribute name")
            self.expect("=")
            if key.text in _IGNORED_KEYS:
                self.skip_value()
            elif key.text in values or key.text in by_key:
                raise self.error(f"duplicate attribute '{key.text}'", key)
            elif key.text in called_keys:
                by_key[key.text] = self.computation_ref(module)
            elif key.text == _BRANCHES_KEY and opcode is Opcode.CONDITIONAL:
                by_key[key.text] = self.computation_list(module)
            elif key.text in fields:
                values[key.text] = fields[key.text].syntax.parse(self)
            elif self.dialect is not None:
                extra[key.text] = self.raw_value()
            else:
                raise self.error(f"unknown attribute '{key.text}' for {opcode.text}", key)
        if _BRANCHES_KEY in by_key:
            if set(by_key) & set(called_keys):
                raise self.error(f"conditional takes {_BRANCHES_KEY} or "
                                 f"true_computation/false_computation, not both", op_tok)
            called = by_key[_BRANCHES_KEY]
        else:
            missing = [k for k in called_keys if k not in by_key]
            if missing:
                raise self.error(f"{opcode.text} needs {missing[0]}=%computation", op_tok)
            called = [by_key[k] for k in called_keys]
        composites: dict[str, tuple[type, dict]] = {}
        for f in fields.values():
            value = values.get(f.key, f.default)
            if value is _REQUIRED:
                raise self.error(f"{opcode.text} needs attribute '{f.key}'", op_tok)
            if f.member is None:
                attrs[f.attr] = value
            else:
                composites.setdefault(f.attr, (f.of, {}))[1][f.member] = value
        for attr, (of, members) in composites.items():
            attrs[attr] = of(**members)
        return called

    def computation_list(self, module: Module) -> list[Computation]:
        self.expect("{")
        comps = [self.computation_ref(module)]
        while self.accept(","):
            comps.append(self.computation_ref(module))
        self.expect("}")
        return comps

    def computation_ref(self, module: Module) -> Computation:
        tok, name = self.name("a computation name")
        return self.find_computation(module, name, tok)

    def find_computation(self, module: Module, name: str, at: _Token) -> Computation:
        for comp in module.computations:
            if comp.name == name:
                return comp
        raise self.error(f"unknown computation %{name} (callees come first)", at)

    def check_shape(self, instr: Instruction, op_tok: _Token) -> None:
        try:
            inferred = _infer(instr)
        except (ValueError, IndexError, KeyError) as e:
            raise self.error(f"invalid {instr.opcode.text}: {e}", op_tok) from None
        if not compatible(inferred, instr.shape):
            raise self.error(f"{instr.opcode.text} has shape {inferred}, not the declared "
                             f"{instr.shape}", op_tok)


def _infer(instr: Instruction) -> Shape:
    return infer_shape(instr.opcode, [o.shape for o in instr.operands], instr.attrs,
                       instr.called, instr.shape)
