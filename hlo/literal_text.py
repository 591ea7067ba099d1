"""Literal values in HLO text: ``1.5``, ``{1, 2, 3}``, ``{ {1, 2}, {3, 4} }``.

Formatting is vectorized with numpy because constants reach hundreds of MB:
a Python call per element would cost seconds per million elements.

Floats print as the shortest decimal that parses back to the same value of the
element type (the string is read as an f64, then rounded to the type, exactly
as ``parse_literal`` does), in Python's ``repr`` notation without a trailing
``.0``: positional for 1e-4 <= |x| < 1e16, else ``1.5e-07``. Non-finite values
are ``nan``, ``inf``, ``-inf``; NaN payloads are not kept. pred prints as
``true``/``false``. Innermost braces are tight, outer ones padded with a
space, as XLA prints rank-2 literals; the parser ignores spacing and XLA's
``/*i0=0*/`` index comments.
"""
from __future__ import annotations

import re
from math import prod

import numpy as np

from .dtypes import DType

# Significant digits that always suffice to round-trip a value of the type:
# ceil(1 + p * log10(2)) for p bits of precision. f8e8m0fnu reads every value in
# (2**-127, 2**-126) as 2**-126, so its least value 2**-127 needs f32's digits.
_MAX_DIGITS = {"f16": 5, "bf16": 4, "f32": 9, "f8e4m3fn": 3, "f8e4m3fnuz": 3, "f8e5m2": 2,
               "f8e5m2fnuz": 2, "f4e2m1fn": 2, "f8e8m0fnu": 9}
_POW10_INT = 10 ** np.arange(19, dtype=np.int64)
_POW10_ZERO = 40
_POW10 = 10.0 ** np.arange(-_POW10_ZERO, _POW10_ZERO + 1)   # exact for 0..22
_CHUNK = 1 << 18                     # elements formatted per numpy pass (bounds memory)
_PRED_TEXT = {True: "true", False: "false"}
_PRED_VALUE = {"true": True, "false": False, "1": True, "0": False}
_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_SEPARATORS = str.maketrans("{},", "   ")
_ONLY_STRUCTURE = {c: None for c in range(128) if chr(c) not in "{},"}


# --- one decimal -------------------------------------------------------------

def render_decimal(digits: str, e: int) -> str:
    """The value 0.d1d2d3... * 10**(e+1) (``digits`` without trailing zeros, first
    digit at 10**e) in repr notation. The vectorized printer calls this with
    placeholder characters for digits to get one template per (e, len) pair."""
    n = len(digits)
    if -4 <= e < 16:
        if e >= n - 1:
            return digits + "0" * (e - n + 1)
        if e >= 0:
            return digits[:e + 1] + "." + digits[e + 1:]
        return "0." + "0" * (-e - 1) + digits
    mantissa = digits[0] + ("." + digits[1:] if n > 1 else "")
    return f"{mantissa}e{'-' if e < 0 else '+'}{abs(e):02d}"


def _digits_of(text: str) -> tuple[str, int]:
    """Significant digits and leading-digit exponent of a positive decimal string."""
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    e = int(exponent or 0) + len(whole) - 1
    stripped = digits.lstrip("0")
    e -= len(digits) - len(stripped)
    return stripped.rstrip("0"), e


def _to_type(values_f64: np.ndarray, npdtype) -> np.ndarray:
    """The one conversion from parsed f64 values to the element type (printer and
    parser must agree on it for the round trip)."""
    with np.errstate(over="ignore"):
        return values_f64.astype(npdtype)


def _format_float_one(value, dtype: DType) -> str:
    """One float, exactly; for non-finite values, zeros and magnitudes outside the
    vectorized range."""
    v = float(value)
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    sign = "-" if np.signbit(v) else ""
    if v == 0:
        return sign + "0"
    if dtype.name == "f64":
        return sign + render_decimal(*_digits_of(repr(abs(v))))
    target = np.asarray(abs(v), dtype=dtype.np)
    for p in range(1, _MAX_DIGITS[dtype.name] + 1):
        text = f"{abs(v):.{p - 1}e}"
        if _to_type(np.float64(float(text)), dtype.np) == target:
            break
    return sign + render_decimal(*_digits_of(text))


# --- many elements -----------------------------------------------------------

def _rows(strings: list[str]) -> np.ndarray:
    """Strings as rows of a zero-padded byte matrix."""
    width = max((len(s) for s in strings), default=0)
    data = b"".join(s.encode("ascii").ljust(width, b"\0") for s in strings)
    return np.frombuffer(data, dtype=np.uint8).reshape(len(strings), width)


def _exact_decimal(d: np.ndarray, k: np.ndarray) -> np.ndarray:
    """d / 10**k in f64 with one rounding, as strtod reads it (|k| <= 22)."""
    scale = _POW10[_POW10_ZERO + np.abs(k)]
    out = np.empty_like(d)
    up = k >= 0
    np.divide(d, scale, out=out, where=up)
    np.multiply(d, scale, out=out, where=~up)
    return out


def _round_trip(ax, typed, k):
    """Is there a decimal D / 10**k (D an integer) that reads back as ``typed``?
    Returns (ok, D), preferring the nearest D. Checking both neighbours makes the
    test monotone in the digit count (XLA's and Python's shortest-repr criterion)."""
    scaled = ax * _POW10[_POW10_ZERO + k]
    D = np.rint(scaled)
    ok = _to_type(_exact_decimal(D, k), typed.dtype) == typed
    miss = np.flatnonzero(~ok)
    if miss.size:
        other = D[miss] + np.where(D[miss] > scaled[miss], -1.0, 1.0)
        other_ok = _to_type(_exact_decimal(other, k[miss]), typed.dtype) == typed[miss]
        D[miss[other_ok]] = other[other_ok]
        ok[miss[other_ok]] = True
    return ok, D


def _shortest_digits(ax: np.ndarray, typed: np.ndarray, max_digits: int):
    """For positive finite magnitudes (f64 ``ax``, the same values in the element type
    ``typed``): integers D and scales K such that D / 10**K is the shortest decimal
    that reads back as the value. ``found`` is False where none was exact (those go
    to the per-element path). Searches downwards from ``max_digits``, which always
    round-trips, so trained weights (8-9 digits) cost about two passes."""
    e0 = np.floor(np.log10(ax)).astype(np.int64)
    K = max_digits - 1 - e0
    found, D = _round_trip(ax, typed, K)
    todo = np.flatnonzero(found)
    for _ in range(max_digits - 1):
        k = K[todo] - 1
        ok, d = _round_trip(ax[todo], typed[todo], k)
        todo = todo[ok]
        if todo.size == 0:
            break
        D[todo], K[todo] = d[ok], k[ok]
    return D.astype(np.int64), K, found


_ALPHABET = b"\0.e+-0123456789"       # characters templates may hold besides digits


def _magnitude_text(ax: np.ndarray, typed: np.ndarray, max_digits: int):
    """(found, byte rows) of the shortest decimals of positive magnitudes."""
    D, K, found = _shortest_digits(ax, typed, max_digits)
    # Strip trailing zeros (a rounding carry: 9.7 -> 10); then the value is
    # D * 10**(e - nd + 1) with nd digits in D.
    zeros = np.flatnonzero((D % 10 == 0) & found)
    while zeros.size:
        D[zeros] //= 10
        K[zeros] -= 1
        zeros = zeros[D[zeros] % 10 == 0]
    nd = np.searchsorted(_POW10_INT, D, side="right")
    e = nd - 1 - K
    # One template per (e, nd) pair: render_decimal over placeholder digits
    # chr(1)..chr(nd), turned into column numbers of ``source`` below.
    keys, group = np.unique(np.where(found, e * 32 + nd, 0), return_inverse=True)
    texts = [render_decimal("".join(map(chr, range(1, key % 32 + 1))), key // 32)
             if key else "" for key in keys.tolist()]
    width = max(map(len, texts))
    columns = np.full((len(texts), width), max_digits, np.int32)   # the '\0' column
    for row, (key, text) in enumerate(zip(keys.tolist(), texts)):
        for col, ch in enumerate(text):
            columns[row, col] = (max_digits - key % 32 + ord(ch) - 1 if ord(ch) < 32
                                 else max_digits + _ALPHABET.index(ch.encode()))
    # source row of each element: its digits right-aligned, then the alphabet.
    source = np.empty((ax.size, max_digits + len(_ALPHABET)), np.uint8)
    source[:, :max_digits] = (D[:, None] // _POW10_INT[max_digits - 1::-1]) % 10 + ord("0")
    source[:, max_digits:] = np.frombuffer(_ALPHABET, np.uint8)
    index = columns[group] + (np.arange(ax.size, dtype=np.int32) * source.shape[1])[:, None]
    return found, source.reshape(-1)[index]


def _float_matrix(flat: np.ndarray, dtype: DType) -> np.ndarray:
    """Zero-padded byte rows, one per element."""
    with np.errstate(invalid="ignore"):      # NaNs of narrow types widen quietly
        x = flat.astype(np.float64)
    ax = np.abs(x)
    rows = np.zeros(0, np.int64)
    body = np.zeros((0, 0), np.uint8)
    if dtype.name in _MAX_DIGITS:      # f64 needs up to 17 digits: D would not be exact
        # Where scaling by 10**k stays exact in f64 (|k| <= 22, a digit of margin
        # for e0); the rest take the per-element path.
        low, high = 10.0 ** (_MAX_DIGITS[dtype.name] - 21), 1e21
        rows = np.flatnonzero((ax >= low) & (ax < high))
    if rows.size:
        found, body = _magnitude_text(ax[rows], np.abs(flat[rows]), _MAX_DIGITS[dtype.name])
        rows, body = rows[found], body[found]
    is_slow = np.ones(x.size, bool)
    is_slow[rows] = False
    slow_rows = np.flatnonzero(is_slow)
    slow = _rows([_format_float_one(v, dtype) for v in flat[slow_rows]])
    mat = np.zeros((x.size, max(1 + body.shape[1], slow.shape[1])), np.uint8)
    mat[rows, 0] = np.where(np.signbit(x[rows]), ord("-"), 0)
    mat[rows, 1:1 + body.shape[1]] = body
    mat[slow_rows, :slow.shape[1]] = slow
    return mat


def _element_matrix(flat: np.ndarray, dtype: DType) -> np.ndarray:
    if dtype.is_pred:
        return _rows(["false", "true"])[flat.astype(np.int64)]
    if dtype.is_integer:
        strings = flat.astype(np.uint64 if dtype.kind == "u" else np.int64).astype("S20")
        return strings.view(np.uint8).reshape(flat.size, 20)
    return _float_matrix(flat, dtype)


def _separators(rank: int) -> np.ndarray:
    """Row k: the text after an element that closes k innermost dimensions (k < rank);
    row ``rank``: the text after the last element."""
    rows = [", "] + ["}" + " }" * (k - 1) + ", " + "{ " * (k - 1) + "{" for k in range(1, rank)]
    rows.append("}" + " }" * (rank - 1))
    return _rows(rows)


def _empty_text(dims) -> str:
    if dims[0] == 0 or len(dims) == 1:
        return "{}"
    return "{ " + ", ".join([_empty_text(dims[1:])] * dims[0]) + " }"


def format_literal(array: np.ndarray, dtype: DType) -> str:
    """HLO text of a dense array (C order) of element type ``dtype``."""
    array = np.asarray(array)
    dims = array.shape
    flat = array.reshape(-1)
    if not dims:
        return _text(_element_matrix(flat, dtype))
    n = flat.size
    if n == 0:
        return _empty_text(dims)
    rank = len(dims)
    seps = _separators(rank)
    strides = [prod(dims[rank - level:]) for level in range(1, rank)]
    pieces = ["{ " * (rank - 1) + "{"]
    for start in range(0, n, _CHUNK):
        stop = min(n, start + _CHUNK)
        position = np.arange(start + 1, stop + 1, dtype=np.int64)
        closes = np.zeros(stop - start, np.int64)
        for s in strides:
            closes += position % s == 0
        if stop == n:
            closes[-1] = rank
        pieces.append(_text(np.concatenate([_element_matrix(flat[start:stop], dtype),
                                            seps[closes]], axis=1)))
    return "".join(pieces)


def _text(mat: np.ndarray) -> str:
    """The rows of a zero-padded byte matrix, concatenated."""
    data = mat.reshape(-1)
    return data[data != 0].tobytes().decode("ascii")


# --- parsing -----------------------------------------------------------------

def _skeleton(dims) -> str:
    """The braces and commas of a literal of shape ``dims``, without spaces."""
    if not dims:
        return ""
    return "{" + ",".join([_skeleton(dims[1:])] * dims[0]) + "}"


def parse_literal(text: str, dims: tuple[int, ...], dtype: DType) -> np.ndarray:
    """The array written by ``text`` (as ``format_literal`` or XLA prints it).
    Raises ValueError with a one-line reason. A complex number is an (re, im) pair."""
    if dtype.is_complex:
        try:
            pairs = parse_literal(text.replace("(", "{").replace(")", "}"), (*dims, 2),
                                  dtype.part)
        except ValueError:
            raise ValueError(f"a {dtype.name} literal holds an (re, im) pair of "
                             f"{dtype.part} values in each of the {prod(dims)} places of "
                             f"dimensions {list(dims)}") from None
        return (pairs[..., 0] + 1j * pairs[..., 1]).astype(dtype.np)
    body = _COMMENT.sub(" ", text)
    compact = "".join(body.split())
    if compact.translate(_ONLY_STRUCTURE) != _skeleton(dims):
        raise ValueError(f"literal nesting does not match dimensions {list(dims)}")
    # Every slot between braces and commas must hold one value: without spaces
    # an empty slot loses a token, with spaces a slot of two values gains one.
    n = prod(dims)
    tokens = body.translate(_SEPARATORS).split()
    if len(tokens) != n or len(compact.translate(_SEPARATORS).split()) != n:
        raise ValueError(f"literal does not hold one value in each of the {n} places "
                         f"of dimensions {list(dims)}")
    return _values(tokens, dtype).reshape(dims)


def _values(tokens: list[str], dtype: DType) -> np.ndarray:
    if dtype.is_pred:
        try:
            return np.array([_PRED_VALUE[t] for t in tokens], dtype=np.bool_)
        except KeyError as e:
            raise ValueError(f"'{e.args[0]}' is not a pred value (true/false)") from None
    convert = int if dtype.is_integer else float
    try:
        values = list(map(convert, tokens))
    except ValueError:
        bad = next(t for t in tokens if not _converts(convert, t))
        raise ValueError(f"'{bad}' is not a {dtype.name} value") from None
    if dtype.is_integer:
        info = dtype.info
        if values and (min(values) < info.min or max(values) > info.max):
            bad = next(v for v in values if not info.min <= v <= info.max)
            raise ValueError(f"{bad} is out of range for {dtype.name}")
        return np.array(values, dtype=dtype.np)
    wide = np.array(values, dtype=np.float64)
    out = _to_type(wide, dtype.np)
    with np.errstate(invalid="ignore"):
        # Overflow is inf, or NaN in the types without infinities.
        overflow = ~np.isfinite(out.astype(np.float64)) & np.isfinite(wide)
    if overflow.any():
        raise ValueError(f"{tokens[int(np.argmax(overflow))]} is out of range for {dtype.name}")
    return out


def _converts(convert, token: str) -> bool:
    try:
        convert(token)
        return True
    except ValueError:
        return False
