"""MLIR text as JAX prints StableHLO (``lowered.as_text()``) -> generic operations.

Every op is read into one form, MLIR's generic one: a name, operands, attributes by
their StableHLO names, regions and the types. The generic syntax

    %0:2 = "stablehlo.sort"(%a, %b) <{dimension = 1 : i64}> ({ ^bb0(...): ... }) : (...) -> (...)

is read for any op; the custom (pretty) forms that StableHLO, CHLO and func print are
turned into the same attributes by one reader each, in ``_PRETTY``, e.g.

    %1 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (...) -> ...

Attribute values become Python values: integers, floats, bools, strings, lists,
``dense<...>`` as numpy arrays of their element type, ``array<i64: ...>`` as tuples,
``#stablehlo.gather<k = v>`` as dicts and ``#stablehlo<precision DEFAULT>`` as the
word. ``loc(...)`` and ``#loc`` lines, written with debug info, are skipped.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...hlo import dtypes
from ...hlo.errors import XlacError


class MlirParseError(XlacError):
    """Malformed or unsupported MLIR text; the message starts with ``line L, column C``."""


@dataclass(frozen=True)
class TensorType:
    dtype: dtypes.DType             # of a complex tensor: its parts' (f32 for complex<f32>)
    dims: tuple[int, ...]
    complex: bool = False

    def __str__(self) -> str:
        element = _MLIR_NAME[self.dtype]
        element = f"complex<{element}>" if self.complex else element
        return f"tensor<{''.join(f'{d}x' for d in self.dims)}{element}>"

    @property
    def real(self) -> "TensorType":
        """The type of each part of a complex tensor (itself for a real one)."""
        return TensorType(self.dtype, self.dims)


@dataclass
class Block:
    arguments: list[tuple[str, TensorType]]
    operations: list["Operation"]


@dataclass
class Operation:
    name: str                                  # "stablehlo.add", "func.call", ...
    results: list[str]                         # SSA names, "%0#1" for a result of many
    operands: list[str]
    attributes: dict[str, Any]
    regions: list[Block]
    operand_types: list[TensorType]
    result_types: list[TensorType]
    line: int = 0

    def free_values(self) -> list[str]:
        """The values its regions use and do not define, in order of first use."""
        out: dict[str, None] = {}
        for block in self.regions:
            out.update(dict.fromkeys(_block_free_values(block)))
        return list(out)


def _block_free_values(block: Block) -> list[str]:
    defined = {name for name, _ in block.arguments}
    out: dict[str, None] = {}
    for op in block.operations:
        for v in op.operands + op.free_values():
            if v not in defined:
                out[v] = None
        for r in op.results:
            defined.add(r)
            defined.add(r.split("#")[0])
    return list(out)


@dataclass
class Function:
    name: str
    visibility: str
    body: Block
    result_types: list[TensorType]
    argument_attributes: list[dict[str, Any]] = field(default_factory=list)
    result_attributes: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class MlirModule:
    name: str
    attributes: dict[str, Any]
    functions: dict[str, Function]


# --- types -------------------------------------------------------------------------

_ELEMENT = {"i1": dtypes.PRED, "i8": dtypes.S8, "i16": dtypes.S16, "i32": dtypes.S32,
            "i64": dtypes.S64, "ui8": dtypes.U8, "ui16": dtypes.U16, "ui32": dtypes.U32,
            "ui64": dtypes.U64, "si8": dtypes.S8, "si16": dtypes.S16, "si32": dtypes.S32,
            "si64": dtypes.S64, "f16": dtypes.F16, "bf16": dtypes.BF16, "f32": dtypes.F32,
            "f64": dtypes.F64, "i4": dtypes.S4, "ui4": dtypes.U4, "i2": dtypes.S2,
            "ui2": dtypes.U2, "f8E4M3FN": dtypes.F8E4M3FN, "f8E5M2": dtypes.F8E5M2,
            "f8E4M3FNUZ": dtypes.F8E4M3FNUZ, "f8E5M2FNUZ": dtypes.F8E5M2FNUZ,
            "f4E2M1FN": dtypes.F4E2M1FN, "f8E8M0FNU": dtypes.F8E8M0FNU,
            "index": dtypes.S64}           # in attributes only: operand_layouts
_MLIR_NAME = {d: n for n, d in reversed(list(_ELEMENT.items())) if n != "index"}


def element_type(name: str) -> dtypes.DType:
    if name not in _ELEMENT:
        raise ValueError(f"element type {name} is not supported")
    return _ELEMENT[name]


def tensor_type(body: str) -> TensorType:
    """``2x3xf32`` (what ``tensor<...>`` holds) -> TensorType."""
    body = body.strip()
    if "," in body:
        body, _, encoding = body.partition(",")
        if "bounds" in encoding:
            raise ValueError("dynamic dimensions (bounded); shapes are static in xlac")
    *dims, element = _split_dims(body)
    if any(d in ("?", "*") for d in dims) or element == "*":
        raise ValueError(f"dynamic shape tensor<{body}>: shapes are static in xlac")
    m = re.fullmatch(r"complex<(f32|f64)>", element)
    if m is not None:
        return TensorType(element_type(m.group(1)), tuple(int(d) for d in dims), True)
    if element.startswith("complex"):
        raise ValueError(f"complex numbers of {element}: xlac's have f32 or f64 parts")
    return TensorType(element_type(element), tuple(int(d) for d in dims))


def _split_dims(body: str) -> list[str]:
    m = re.match(r"((?:(?:\d+|\?)x)*)(.*)$", body)
    return [d for d in m.group(1).split("x") if d] + [m.group(2)]


# --- lexer -------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<skip>\s+|//[^\n]*)
  | (?P<value>%[\w.$\-]+(?:\#\d+)?)
  | (?P<symbol>@[\w.$\-]+|@"(?:[^"\\]|\\.)*")
  | (?P<block>\^[\w.$\-]+)
  | (?P<hash>\#[\w.$\-]+)
  | (?P<arrow>->)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<number>-?0x[0-9A-Fa-f]+|-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)
  | (?P<word>[A-Za-z_!][\w.$\-]*)
  | (?P<punct>[(){}\[\]<>,:=?*+\-|])
""", re.X)


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    pos: int


class _Lexer:
    def __init__(self, text: str):
        self.text, self.pos = text, 0
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
        while self.pos < len(self.text):
            m = _TOKEN.match(self.text, self.pos)
            if m is None:
                raise _error(self.text, self.pos, f"unexpected character '{self.text[self.pos]}'")
            self.pos = m.end()
            if m.lastgroup != "skip":
                kind = m.lastgroup if m.lastgroup != "punct" else m.group()
                return _Token(kind, m.group(), m.start())
        return _Token("eof", "", len(self.text))

    def angle_body(self) -> tuple[str, int]:
        """The raw text between ``<`` (just read) and its matching ``>``: types and
        dense literals are read from it, since they can hold millions of values."""
        assert self._peeked is None
        depth, i, start = 1, self.pos, self.pos
        text = self.text
        while i < len(text):
            c = text[i]
            if c == '"':
                i = _string_end(text, i)
            elif c == "<":
                depth += 1
            elif c == ">" and text[i - 1] != "-":
                depth -= 1
                if depth == 0:
                    self.pos = i + 1
                    return text[start:i], start
            i += 1
        raise _error(text, start, "missing '>'")


def _string_end(text: str, i: int) -> int:
    i += 1
    while text[i] != '"':
        i += 2 if text[i] == "\\" else 1
    return i


def _error(text: str, pos: int, msg: str) -> MlirParseError:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return MlirParseError(f"line {line}, column {column}: {msg}")


# --- parser ------------------------------------------------------------------------

def parse(text: str) -> MlirModule:
    return _Parser(text).module()


class _Parser:
    def __init__(self, text: str):
        self.lex = _Lexer(text)
        self.text = text

    # -- tokens --
    def error(self, msg: str, tok: _Token | None = None) -> MlirParseError:
        return _error(self.text, (tok or self.lex.peek()).pos, msg)

    def accept(self, kind: str, text: str | None = None) -> _Token | None:
        tok = self.lex.peek()
        if tok.kind == kind and (text is None or tok.text == text):
            return self.lex.next()
        return None

    def expect(self, kind: str, text: str | None = None) -> _Token:
        tok = self.accept(kind, text)
        if tok is None:
            found = self.lex.peek()
            raise self.error(f"expected {text or kind}, found '{found.text or 'end'}'", found)
        return tok

    def word(self, text: str | None = None) -> str:
        return self.expect("word", text).text

    def line(self) -> int:
        return self.text.count("\n", 0, self.lex.peek().pos) + 1

    # -- module --
    def module(self) -> MlirModule:
        self._skip_aliases()
        if self.accept("string", '"builtin.module"'):       # the generic form
            op = self.generic("builtin.module", [])
            self._skip_location()
            self._skip_aliases()
            self._expect_end()
            functions = [_function_of(f, self) for f in op.regions[0].operations]
            return MlirModule(op.attributes.get("sym_name", "module"), op.attributes,
                              {f.name: f for f in functions})
        self.word("module")
        name = self.expect("symbol").text[1:] if self.lex.peek().kind == "symbol" else "module"
        attributes = self.attribute_dict() if self.accept("word", "attributes") else {}
        self.expect("{")
        functions: dict[str, Function] = {}
        while not self.accept("}"):
            fn = self.function()
            functions[fn.name] = fn
        self._skip_location()
        self._skip_aliases()
        self._expect_end()
        return MlirModule(name, attributes, functions)

    def _expect_end(self) -> None:
        if self.lex.peek().kind != "eof":
            raise self.error("text after the module")

    def _skip_aliases(self) -> None:
        """``#loc1 = loc(...)`` lines: debug locations."""
        while self.lex.peek().kind == "hash":
            self.lex.next()
            self.expect("=")
            self.attribute()

    def _skip_location(self) -> str | None:
        """A ``loc(...)``; its name where it is ``loc("name")``, as JAX writes for the
        entry's arguments."""
        if not self.accept("word", "loc"):
            return None
        name = None
        self.expect("(")
        if self.lex.peek().kind == "string":
            name = _unescape(self.lex.peek().text[1:-1])
        depth = 1
        while depth:
            tok = self.lex.next()
            if tok.kind == "eof":
                raise self.error("missing ')'", tok)
            depth += (tok.kind == "(") - (tok.kind == ")")
        return name

    def _balanced(self, open_: str, close: str) -> None:
        self.expect(open_)
        depth = 1
        while depth:
            tok = self.lex.next()
            if tok.kind == "eof":
                raise self.error(f"missing '{close}'", tok)
            depth += (tok.kind == open_) - (tok.kind == close)

    def function(self) -> Function:
        tok = self.lex.peek()
        if tok.text != "func.func":
            raise self.error(f"expected func.func, found '{tok.text}'", tok)
        self.lex.next()
        visibility = "public"
        if self.lex.peek().kind == "word":
            visibility = self.word()
        name = self.expect("symbol").text[1:].strip('"')
        self.expect("(")
        arguments, arg_attrs = [], []
        while not self.accept(")"):
            value = self.expect("value").text
            self.expect(":")
            arguments.append((value, self.type()))
            attrs = self.attribute_dict() if self.lex.peek().kind == "{" else {}
            location = self._skip_location()
            if location is not None:
                attrs["_loc"] = location
            arg_attrs.append(attrs)
            self.accept(",")
        result_types, res_attrs = [], []
        if self.accept("arrow"):
            if self.accept("("):
                while not self.accept(")"):
                    result_types.append(self.type())
                    res_attrs.append(self.attribute_dict() if self.lex.peek().kind == "{"
                                     else {})
                    self.accept(",")
            else:
                result_types.append(self.type())
                res_attrs.append({})
        if self.accept("word", "attributes"):
            self.attribute_dict()
        body = Block(arguments, self.region_operations())
        self._skip_location()
        return Function(name, visibility, body, result_types, arg_attrs, res_attrs)

    def region_operations(self) -> list[Operation]:
        self.expect("{")
        ops = []
        while not self.accept("}"):
            ops.append(self.operation())
        return ops

    def region(self) -> Block:
        """``{ ^bb0(%a: T, ...): ops }``, the label left out for a region without
        arguments."""
        self.expect("{")
        arguments = []
        if self.accept("block"):
            if self.accept("("):
                while not self.accept(")"):
                    value = self.expect("value").text
                    self.expect(":")
                    arguments.append((value, self.type()))
                    self._skip_location()
                    self.accept(",")
            self.expect(":")
        ops = []
        while not self.accept("}"):
            ops.append(self.operation())
        return Block(arguments, ops)

    # -- operations --
    def operation(self) -> Operation:
        line = self.line()
        results = self.results()
        tok = self.lex.next()
        if tok.kind == "string":
            op = self.generic(tok.text[1:-1], results)
        elif tok.kind == "word":
            reader = _PRETTY.get(tok.text)
            op = Operation(tok.text, results, [], {}, [], [], [])
            (reader or _generic_pretty)(self, op)
        else:
            raise self.error(f"expected an operation, found '{tok.text}'", tok)
        op.line = line
        self._skip_location()
        return op

    def results(self) -> list[str]:
        if self.lex.peek().kind != "value":
            return []
        names = []
        while True:
            name = self.expect("value").text
            if self.accept(":"):
                count = int(self.expect("number").text)
                names += [f"{name}#{k}" for k in range(count)]
            else:
                names.append(name)
            if not self.accept(","):
                break
        self.expect("=")
        return names

    def generic(self, name: str, results: list[str]) -> Operation:
        op = Operation(name, results, [], {}, [], [], [])
        self.expect("(")
        op.operands = self.value_list(")")
        if self.accept("<"):            # properties: <{...}>
            op.attributes.update(self.attribute_dict())
            self.expect(">")
        if self.accept("("):
            while True:
                op.regions.append(self.region())
                if not self.accept(","):
                    break
            self.expect(")")
        if self.lex.peek().kind == "{":
            op.attributes.update(self.attribute_dict())
        self.expect(":")
        self.signature(op)
        return op

    def value_list(self, close: str | None = None) -> list[str]:
        values = []
        if close and self.accept(close):
            return values
        while True:
            values.append(self.expect("value").text)
            if not self.accept(","):
                break
        if close:
            self.expect(close)
        return values

    def signature(self, op: Operation) -> None:
        """``: (T, T) -> T``, ``: T -> (T, T)`` or ``: T, T`` (no arrow: the op's type
        list, its operands' and results' types are the same, the last one for select's
        ``tensor<i1>, tensor<f32>``)."""
        types = self.type_list()
        if self.accept("arrow"):
            op.operand_types = types
            op.result_types = self.type_list()
        else:
            op.operand_types = types
            op.result_types = types if len(op.results) > 1 or not op.results else types[-1:]

    def type_list(self) -> list[TensorType]:
        if self.accept("("):
            types = []
            while not self.accept(")"):
                types.append(self.type())
                self.accept(",")
            return types
        types = [self.type()]
        while self._next_is_type_after_comma():
            self.expect(",")
            types.append(self.type())
        return types

    def _next_is_type_after_comma(self) -> bool:
        if self.lex.peek().kind != ",":
            return False
        rest = self.text[self.lex.peek().pos + 1:].lstrip()
        return rest.startswith(("tensor<", "!", "tuple<"))

    def type(self) -> TensorType:
        tok = self.lex.next()
        if tok.text == "tensor" and self.accept("<"):
            body, pos = self.lex.angle_body()
            try:
                return tensor_type(body)
            except ValueError as e:
                raise _error(self.text, pos, str(e)) from None
        if tok.text in _ELEMENT:          # a scalar type, in attributes: 1 : i64
            return TensorType(_ELEMENT[tok.text], ())
        if tok.text.startswith("!stablehlo.token") or tok.text == "!stablehlo.token":
            raise self.error("tokens (!stablehlo.token) order side effects; xlac compiles "
                             "programs without them", tok)
        if tok.text == "tuple":
            raise self.error("tuple types (tuple<...>); xlac reads arrays, as JAX writes them",
                             tok)
        raise self.error(f"expected a type, found '{tok.text}'", tok)

    # -- attributes --
    def attribute_dict(self) -> dict[str, Any]:
        self.expect("{")
        out = {}
        while not self.accept("}"):
            key_tok = self.lex.next()
            key = key_tok.text.strip('"')
            out[key] = self.attribute() if self.accept("=") else True
            self.accept(",")
        return out

    def attribute(self) -> Any:
        tok = self.lex.next()
        if tok.kind == "number":
            value = _number(tok.text)
            if self._typed_scalar():         # 1 : i64, 1.0 : f32
                self.expect(":")
                self.type()
            return value
        if tok.kind == "string":
            value = _unescape(tok.text[1:-1])
            return value
        if tok.kind == "[":
            items = []
            while not self.accept("]"):
                items.append(self.attribute())
                self.accept(",")
            return items
        if tok.kind == "{":
            self.lex._peeked = tok      # put it back: a dictionary
            return self.attribute_dict()
        if tok.kind == "hash":
            return self.dialect_attribute(tok)
        if tok.kind == "symbol":
            return tok.text[1:].strip('"')
        if tok.kind == "word":
            if tok.text in ("true", "false"):
                return tok.text == "true"
            if tok.text == "dense" and self.accept("<"):
                body, pos = self.lex.angle_body()
                self.expect(":")
                t = self.type()
                return self._dense(body, t, pos)
            if tok.text == "array" and self.accept("<"):
                body, _ = self.lex.angle_body()
                _, _, values = body.partition(":")
                return tuple(_element(v.strip(), dtypes.S64) for v in values.split(",")
                             if v.strip())
            if tok.text == "loc" and self.lex.peek().kind == "(":
                self._balanced("(", ")")
                return None
            if tok.text == "unit":
                return True
            return tok.text             # an enum's word: DEFAULT, FLOAT, ...
        if tok.kind == "<":              # an inline attribute: algorithm = <...>
            body, _ = self.lex.angle_body()
            return body
        if tok.kind == "(":              # a function type: (T, T) -> (T)
            self.lex._peeked = tok
            inputs = self.type_list()
            self.expect("arrow")
            return inputs, self.type_list()
        raise self.error(f"unexpected '{tok.text}' in an attribute", tok)

    def _typed_scalar(self) -> bool:
        if self.lex.peek().kind != ":":
            return False
        rest = re.match(r"\s*([\w]+)", self.text[self.lex.peek().pos + 1:])
        return rest is not None and (rest.group(1) in _ELEMENT or rest.group(1) == "index")

    def dialect_attribute(self, tok: _Token) -> Any:
        """``#stablehlo<precision DEFAULT>`` -> "DEFAULT"; ``#stablehlo.gather<k = v, ...>``
        -> {k: v}; ``#stablehlo.conv<raw>`` -> its raw text."""
        if not self.accept("<"):
            return tok.text
        mark = self.lex.pos
        body, _ = self.lex.angle_body()
        kind = tok.text[1:]
        if "." not in kind:            # #stablehlo<comparison_direction GT>
            return body.split()[-1]
        if kind.endswith(".conv"):
            return body
        sub = _Parser("{" + body + "}")
        sub.text = sub.lex.text
        try:
            return sub.attribute_dict()
        except MlirParseError as e:
            raise _error(self.text, mark, f"in #{kind}<...>: {e}") from None

    def _dense(self, body: str, t: TensorType, pos: int) -> np.ndarray:
        try:
            return dense_literal(body, t)
        except ValueError as e:
            raise _error(self.text, pos, f"dense<...>: {e}") from None


def _function_of(op: Operation, p: _Parser) -> Function:
    """A generic ``"func.func"() <{sym_name = ..., function_type = ...}> ({...})``."""
    if op.name != "func.func" or len(op.regions) != 1:
        raise MlirParseError(f"line {op.line}: expected func.func in the module, found "
                             f"{op.name}")
    a = op.attributes
    _, results = a.get("function_type", ([], []))
    return Function(a["sym_name"], a.get("sym_visibility", "public"), op.regions[0], results,
                    list(a.get("arg_attrs", [])), list(a.get("res_attrs", [])))


def _number(text: str):
    text = text.strip()
    if text.lower().startswith(("0x", "-0x")):
        return int(text, 16)
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return float(text)


def _unescape(s: str) -> str:
    return re.sub(r"\\([0-9A-Fa-f]{2})|\\(.)",
                  lambda m: chr(int(m.group(1), 16)) if m.group(1) else m.group(2), s)


def dense_literal(body: str, t: TensorType) -> np.ndarray:
    """A ``dense<...>`` value of type ``t``: a splat, nested lists, true/false, the
    raw little-endian bytes as a hex string, or one element's bits as a hex number
    (how MLIR prints floats that decimals cannot: inf, NaN). A complex tensor's value
    is a numpy complex array: ``(re, im)`` pairs, or the parts interleaved in the bytes."""
    if t.complex:
        return _complex_literal(body.strip(), t)
    np_type = t.dtype.np
    count = int(np.prod(t.dims, dtype=np.int64))
    body = body.strip()
    if body.startswith('"0x'):
        raw = bytes.fromhex(body[3:-1])
        if t.dtype == dtypes.PRED:
            arr = np.frombuffer(raw, np.uint8).astype(bool)
        else:
            arr = np.frombuffer(raw, np_type.newbyteorder("<")).astype(np_type)
        if arr.size == 1:
            arr = np.full(count, arr[0], np_type)
        if arr.size != count:
            raise ValueError(f"{arr.size} values for {t}")
        return arr.reshape(t.dims)
    values = _flatten(body)
    arr = np.array([_element(v, t.dtype) for v in values], dtype=object)
    if arr.size == 1:
        return np.full(t.dims, _cast(arr[0], t.dtype), np_type)
    if arr.size != count:
        raise ValueError(f"{arr.size} values for {t}")
    return np.array([_cast(v, t.dtype) for v in arr], np_type).reshape(t.dims)


def _complex_literal(body: str, t: TensorType) -> np.ndarray:
    count = int(np.prod(t.dims, dtype=np.int64))
    if body.startswith('"0x'):
        parts = np.frombuffer(bytes.fromhex(body[3:-1]), t.dtype.np.newbyteorder("<"))
        pairs = parts.reshape(-1, 2).astype(np.float64)
    else:
        numbers = [_element(v, t.dtype) for v in re.split(r"[\[\](),\s]+", body) if v]
        pairs = np.array(numbers, np.float64).reshape(-1, 2)
    values = pairs[:, 0] + 1j * pairs[:, 1]
    if values.size == 1:
        values = np.full(count, values[0])
    if values.size != count:
        raise ValueError(f"{values.size} values for {t}")
    return values.astype(np.complex64 if t.dtype.bits == 32 else np.complex128).reshape(t.dims)


def _flatten(body: str) -> list[str]:
    return [v for v in re.split(r"[\[\],\s]+", body) if v]


def _element(text: str, dtype: dtypes.DType):
    if text in ("true", "false"):
        return text == "true"
    if text.lower().startswith("0x") and dtype.kind == "f":      # the element's bits
        bits = int(text, 16)
        return np.array(bits, _UNSIGNED[max(dtype.bits, 8)]).view(dtype.np)[()]
    return _number(text)


_UNSIGNED = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def _cast(value, dtype: dtypes.DType):
    """An integer as the element type's bits (MLIR prints ui32 values unsigned, i32
    ones signed)."""
    if dtype == dtypes.PRED:
        return bool(value)
    if dtype.kind in ("s", "u") and dtype.bits >= 8:
        return np.array(int(value) % (1 << dtype.bits), _UNSIGNED[dtype.bits]).view(dtype.np)[()]
    return value


# --- the custom forms --------------------------------------------------------------

def _generic_pretty(p: _Parser, op: Operation) -> None:
    """The pattern most custom forms follow: ``[WORD,] %a, %b, key = value, ...
    [{attrs}] : types``. Bare words go to ``op.attributes["_words"]`` (compare's
    direction and type), a bare ``dense<...>`` to ``value`` (constant), a bracketed
    ``[a:b:c, ...]`` to ``_slice``."""
    words = []
    while True:
        tok = p.lex.peek()
        if tok.kind == "value":
            op.operands.append(p.lex.next().text)
        elif tok.kind == "word" and tok.text == "dense":       # constant: typed after ':'
            p.lex.next()
            p.expect("<")
            op.attributes["_dense"] = p.lex.angle_body()
        elif tok.kind == "word":
            p.lex.next()
            if p.accept("="):
                op.attributes[tok.text] = _keyword_value(p)
            else:
                words.append(tok.text)
        elif tok.kind == "[":
            op.attributes["_slice"] = _slice(p)
        elif tok.kind == "{":
            op.attributes.update(p.attribute_dict())
        elif tok.kind == ":":
            p.lex.next()
            p.signature(op)
            break
        elif tok.kind == ",":
            p.lex.next()
        else:
            raise p.error(f"unexpected '{tok.text}' in {op.name}", tok)
    if words:
        op.attributes["_words"] = words
    if "_dense" in op.attributes:
        body, pos = op.attributes.pop("_dense")
        op.attributes["value"] = p._dense(body, op.result_types[0], pos)


def _keyword_value(p: _Parser) -> Any:
    """A value after ``key =`` in a custom form: an attribute, or ``[..] x [..]``
    (dot_general's dims, a pair)."""
    value = p.attribute()
    if isinstance(value, list) and p.lex.peek().text == "x" and \
            p.text[p.lex.peek().pos + 1:].lstrip().startswith("["):
        p.lex.next()
        value = (value, p.attribute())
    return value


def _slice(p: _Parser) -> list[tuple[int, int, int]]:
    p.expect("[")
    out = []
    while not p.accept("]"):
        start = int(p.expect("number").text)
        p.expect(":")
        limit = int(p.expect("number").text)
        stride = int(p.expect("number").text) if p.accept(":") else 1
        out.append((start, limit, stride))
        p.accept(",")
    return out


def _return(p: _Parser, op: Operation) -> None:
    op.name = "return"
    if p.lex.peek().kind == "value":
        op.operands = p.value_list()
        p.expect(":")
        op.operand_types = p.type_list()


def _call(p: _Parser, op: Operation) -> None:
    """``call @f(%a) : (T) -> T``"""
    op.name = "func.call"
    _symbol_call(p, op, "callee")


def _custom_call(p: _Parser, op: Operation) -> None:
    """``stablehlo.custom_call @target(%a) {attrs} : (T) -> T``"""
    _symbol_call(p, op, "call_target_name")


def _symbol_call(p: _Parser, op: Operation, key: str) -> None:
    op.attributes[key] = p.expect("symbol").text[1:].strip('"')
    p.expect("(")
    op.operands = p.value_list(")")
    if p.lex.peek().kind == "{":
        op.attributes.update(p.attribute_dict())
    p.expect(":")
    p.signature(op)


def _composite(p: _Parser, op: Operation) -> None:
    """``stablehlo.composite "name" %a, %b {decomposition = @f, ...} : (T) -> T``"""
    op.attributes["name"] = p.expect("string").text[1:-1]
    if p.lex.peek().kind == "value":
        op.operands = p.value_list()
    op.attributes.update(p.attribute_dict())
    p.expect(":")
    p.signature(op)


def _parenthesized(p: _Parser, op: Operation) -> None:
    """``stablehlo.convolution(%a, %b) dim_numbers = ..., window = {...} {attrs} : ...``
    and ``chlo.top_k(%x, k = 3) : ...``"""
    p.expect("(")
    while not p.accept(")"):
        if p.lex.peek().kind == "value":
            op.operands.append(p.lex.next().text)
        else:
            key = p.word()
            p.expect("=")
            op.attributes[key] = p.attribute()
        p.accept(",")
    if op.name.endswith("convolution"):
        _convolution_tail(p, op)
    _generic_pretty(p, op)


def _convolution_tail(p: _Parser, op: Operation) -> None:
    p.word("dim_numbers")
    p.expect("=")
    start = p.lex.peek().pos
    while not (p.lex.peek().kind == "," and p.text[p.lex.peek().pos + 1:].lstrip()
               .startswith("window")) and p.lex.peek().kind not in ("{", ":"):
        p.lex.next()
    end = p.lex.peek().pos
    op.attributes["dimension_numbers"] = p.text[start:end].strip()
    if p.accept(","):
        p.word("window")
        p.expect("=")
        op.attributes.update({f"window.{k}": v for k, v in p.attribute_dict().items()})


def _reduce(p: _Parser, op: Operation) -> None:
    """``stablehlo.reduce(%a init: %c), (%b init: %d) applies stablehlo.add across
    dimensions = [1] : types``, or ``... : types reducer(%x: T, %y: T) (...) { ops }``"""
    inputs, inits = [], []
    while p.accept("("):
        inputs.append(p.expect("value").text)
        p.word("init")
        p.expect(":")
        inits.append(p.expect("value").text)
        p.expect(")")
        p.accept(",")
    op.operands = inputs + inits
    applies = p.word() if p.accept("word", "applies") else None
    p.word("across")
    p.word("dimensions")
    p.expect("=")
    op.attributes["dimensions"] = tuple(p.attribute())
    if p.lex.peek().kind == "{":
        op.attributes.update(p.attribute_dict())
    p.expect(":")
    p.signature(op)
    if applies is not None:             # a body of one op over scalars of each type
        scalars = [TensorType(t.dtype, (), t.complex) for t in op.operand_types[len(inputs):]]
        args = [(f"%_lhs{k}", t) for k, t in enumerate(scalars)] + \
            [(f"%_rhs{k}", t) for k, t in enumerate(scalars)]
        body = Operation(applies, ["%_r"], [a for a, _ in args], {}, [], scalars * 2, scalars)
        ret = Operation("return", [], ["%_r"], {}, [], scalars, [])
        op.regions = [Block(args, [body, ret])]
        return
    p.word("reducer")
    lhs, rhs = [], []
    while p.accept("("):
        for side in (lhs, rhs):
            value = p.expect("value").text
            p.expect(":")
            side.append((value, p.type()))
            p.accept(",")
        p.expect(")")
    body = p.region_operations()
    op.regions = [Block(lhs + rhs, body)]


def _while(p: _Parser, op: Operation) -> None:
    """``stablehlo.while(%it = %init, ...) : types cond { ... } do { ... }``"""
    p.expect("(")
    names = []
    while not p.accept(")"):
        names.append(p.expect("value").text)
        p.expect("=")
        op.operands.append(p.expect("value").text)
        p.accept(",")
    p.expect(":")
    types = p.type_list()
    op.operand_types = op.result_types = types
    if p.lex.peek().kind == "{":
        op.attributes.update(p.attribute_dict())
    args = list(zip(names, types))
    p.word("cond")
    cond = p.region_operations()
    p.word("do")
    body = p.region_operations()
    op.regions = [Block(args, cond), Block(list(args), body)]


_PRETTY = {"return": _return, "func.return": _return, "stablehlo.return": _return,
           "call": _call, "func.call": _call, "stablehlo.custom_call": _custom_call,
           "stablehlo.composite": _composite, "stablehlo.convolution": _parenthesized,
           "chlo.top_k": _parenthesized, "stablehlo.reduce": _reduce,
           "stablehlo.while": _while}
