"""The one rule that turns tensor and model names into C identifiers.

Tensor names become parameter names of ``NAME_run`` and parts of ``#define``s
(``NAME_<c_name>_SIZE``), so they must be valid, non-reserved C99 *and* C++
identifiers that cannot be hijacked by the headers the model header includes:

1. every character outside ``[A-Za-z0-9_]`` becomes ``_`` (an empty name is ``t``);
2. a name starting with a digit or an underscore gets a ``t`` prefix: C reserves
   identifiers that begin with ``_`` plus an uppercase letter or a second ``_``,
   and a prefix letter is simpler than telling those cases apart;
3. a C99/C11/C++ keyword, ``arena`` (the last parameter of ``NAME_run``), ``ARENA``
   (``NAME_ARENA_SIZE`` is taken) or a name
   that ``<stddef.h>``/``<stdint.h>`` define (``NULL``, ``size_t``, ``INT8_MAX``...)
   gets a ``t_`` prefix (``int`` -> ``t_int``);
4. names are made unique in order of appearance with ``_2``, ``_3``...
"""
from __future__ import annotations

import re

_KEYWORDS = frozenset("""
    auto break case char const continue default do double else enum extern float for goto
    if inline int long register restrict return short signed sizeof static struct switch
    typedef union unsigned void volatile while _Bool _Complex _Imaginary _Alignas _Alignof
    _Atomic _Generic _Noreturn _Static_assert _Thread_local
    alignas alignof and and_eq asm bitand bitor bool catch char8_t char16_t char32_t class
    compl concept consteval constexpr constinit const_cast co_await co_return co_yield
    decltype delete dynamic_cast explicit export false friend mutable namespace new noexcept
    not not_eq nullptr operator or or_eq private protected public reinterpret_cast requires
    static_assert static_cast template this thread_local throw true try typeid typename using
    virtual wchar_t xor xor_eq
""".split())

# Parameter names NAME_run uses itself, and macros / typedefs of the included headers.
# "ARENA" would make NAME_ARENA_SIZE also the size macro of a tensor (NAME_<c_name>_SIZE).
_RESERVED = _KEYWORDS | {"arena", "ARENA", "NULL", "offsetof"}
_RESERVED_PATTERN = re.compile(
    r"^(\w+_t|U?INT(8|16|32|64|PTR|MAX|_LEAST\d+|_FAST\d+)?_(MAX|MIN|C)"
    r"|(SIZE|PTRDIFF|WCHAR|WINT|SIG_ATOMIC)_(MAX|MIN)|xlac_\w*|XLAC_\w*)$")


def _sanitize(name: str, prefix: str) -> str:
    ident = re.sub(r"[^A-Za-z0-9_]", "_", name) or prefix
    if ident[0].isdigit() or ident[0] == "_":
        ident = prefix + ident
    return ident


def c_identifier(name: str) -> str:
    """One tensor name as a C identifier (rules 1-3 above; not yet unique)."""
    ident = _sanitize(name, "t")
    if ident in _RESERVED or _RESERVED_PATTERN.match(ident):
        ident = "t_" + ident
    return ident


def unique_c_identifiers(names) -> list[str]:
    """C identifiers for ``names`` in order, unique among themselves (rule 4)."""
    used: set[str] = set()
    out = []
    for name in names:
        base = c_identifier(name)
        ident, n = base, 1
        while ident in used:
            n += 1
            ident = f"{base}_{n}"
        used.add(ident)
        out.append(ident)
    return out


def c_identifier_for_model(stem: str) -> str:
    """NAME, the prefix of every exported symbol, from an output file's stem.

    Same character rule; a leading digit or underscore gets an ``m`` prefix. Keywords
    need no change: NAME never appears alone, only as ``NAME_run``, ``NAME_info``..."""
    return _sanitize(stem, "m")
