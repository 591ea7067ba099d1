"""Custom calls from Python: ``xlac.load(path, custom_calls={"target": impl})``.

An object with custom calls needs their C functions (emitter/custom_call.py). ``impl``
is either a path to C source or an object file that defines the function, linked into
the model's library, or a Python callable. For callables, a C shim defines each
target as a forward through a function pointer, which the loader points at a cffi
callback: the callback views the buffers as numpy arrays with the shapes the header
gives and calls ``impl(*operands, opaque=bytes)``, which returns the result (a tuple
of arrays for a tuple result). An exception in it fails the model's call with that
exception once the call returns; the outputs are then not defined.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .hlo import XlacError, dtypes

# A line of the header (emitter/custom_call.py): /* xlac custom call T: out X; in Y */
_CALL = re.compile(r"^/\* xlac custom call (\w+): out (.*?); in (.*?) \*/$", re.MULTILINE)
_ARRAY = re.compile(r"(\w+)\[([\d,]*)\]")
SIGNATURE = "void(void *, const void **, const char *, size_t)"


@dataclass(frozen=True)
class Signature:
    results: tuple[tuple[np.dtype, tuple[int, ...]], ...]
    tuple_result: bool
    operands: tuple[tuple[np.dtype, tuple[int, ...]], ...]


def _arrays(text: str):
    return tuple((dtypes.by_name(d).np, tuple(int(x) for x in dims.split(",") if x))
                 for d, dims in _ARRAY.findall(text))


def read_calls(header: str) -> dict[str, list[Signature]]:
    """target -> the signatures the header lists for it."""
    out: dict[str, list[Signature]] = {}
    for target, result, operands in _CALL.findall(header):
        out.setdefault(target, []).append(Signature(
            _arrays(result), result.startswith("("), _arrays(operands)))
    return out


def check_given(calls: dict[str, list[Signature]], given: dict | None, object_path) -> dict:
    given = dict(given or {})
    missing = sorted(set(calls) - set(given))
    if missing:
        example = ", ".join(f"'{t}': fn" for t in missing)
        raise XlacError(f"'{object_path}' calls {', '.join(missing)} (custom calls): give "
                        f"their implementations, custom_calls={{{example}}}")
    extra = sorted(set(given) - set(calls))
    if extra:
        raise XlacError(f"'{object_path}' makes no custom call {', '.join(extra)}")
    for target, impl in given.items():
        if callable(impl):
            if len(set(calls[target])) > 1:
                raise XlacError(f"{target} is called with several shapes; a Python callable "
                                "cannot tell them apart: give a C implementation")
        elif not isinstance(impl, (str, os.PathLike)) or not Path(impl).is_file():
            raise XlacError(f"custom_calls['{target}'] must be a callable or the path of a "
                            f"C source or object file, got {impl!r}")
    return given


def shim_source(targets: list[str]) -> str:
    """C forwarding each of ``targets`` through a pointer set by xlac_set_<target>."""
    lines = ["#include <stddef.h>",
             "typedef void (*xlac_custom_call)(void *, const void **, const char *, size_t);"]
    for t in targets:
        lines += [f"static xlac_custom_call xlac_impl_{t};",
                  f"void xlac_set_{t}(xlac_custom_call f) {{ xlac_impl_{t} = f; }}",
                  f"void {t}(void *out, const void **in, const char *opaque, size_t n) "
                  f"{{ xlac_impl_{t}(out, in, opaque, n); }}"]
    return "\n".join(lines) + "\n"


class Bridge:
    """The cffi callbacks of the Python implementations of one loaded model."""

    def __init__(self, ffi, lib, calls: dict[str, list[Signature]],
                 given: dict[str, Callable]):
        self.error: BaseException | None = None
        self._keep = []
        for target, fn in given.items():
            ffi.cdef(f"void xlac_set_{target}({SIGNATURE.replace('void(', 'void (*)(', 1)});")
            cb = ffi.callback(SIGNATURE, self._forward(ffi, target, fn, calls[target][0]))
            self._keep.append(cb)
            getattr(lib, f"xlac_set_{target}")(cb)

    def _forward(self, ffi, target: str, fn: Callable, sig: Signature):
        def call(out, ins, opaque, n):
            try:
                operands = [_view(ffi, ins[k], dt, dims, readonly=True)
                            for k, (dt, dims) in enumerate(sig.operands)]
                got = fn(*operands, opaque=ffi.buffer(opaque, n)[:] if n else b"")
                got = tuple(got) if isinstance(got, (tuple, list)) else (got,)
                if len(got) != len(sig.results):
                    raise XlacError(f"{target} returned {len(got)} array(s), the call makes "
                                    f"{len(sig.results)}")
                table = ffi.cast("void **", out) if sig.tuple_result else [out]
                for k, ((dt, dims), value) in enumerate(zip(sig.results, got)):
                    dst = _view(ffi, table[k], dt, dims)
                    dst[...] = np.asarray(value, dtype=dt).reshape(dims)
            except BaseException as e:       # raised again by the model's call
                if self.error is None:
                    self.error = e
        return call

    def check(self) -> None:
        error, self.error = self.error, None
        if error is not None:
            raise error


def _view(ffi, pointer, dtype: np.dtype, dims, readonly: bool = False) -> np.ndarray:
    count = int(np.prod(dims, dtype=np.int64))
    buf = ffi.buffer(ffi.cast("char *", pointer), count * dtype.itemsize)
    a = np.frombuffer(buf, dtype=dtype, count=count).reshape(dims)
    if readonly:
        a.flags.writeable = False
    return a
