"""The C ABI of runtime_c/xlac_runtime.h, read from the header itself.

The header is the one definition of what an object and its callers share: the status
codes, the numbers of element types and value kinds, and the structs (``NAME_info``'s
descriptors, the thread pool). The emitter builds its globals and loads from what is
read here and the loader hands the same declarations to cffi, so no Python file
restates a number or a field; tests/test_abi.py checks the reading against the C
compiler's layout.

The header keeps to what this reader reads: ``typedef enum NAME { X = n, ... } NAME;``
and ``typedef struct NAME { TYPE FIELD; ... } NAME;``, one field per declaration, each a
pointer (function pointers included), int32_t, int64_t, uint64_t or size_t.
"""
from __future__ import annotations

import re
from pathlib import Path

from llvmlite import ir

from .. import runtime_c
from ..hlo import dtypes
from .irutil import I32, I64, PTR

HEADER = Path(runtime_c.__file__).parent / "xlac_runtime.h"
# The CUDA program's structs (an object compiled with --target cuda, xlac_cuda.c).
CUDA_HEADER = HEADER.with_name("xlac_cuda.h")


def _declarations(text: str) -> str:
    """The declarations inside a header's extern "C" block: what cffi's cdef takes (it
    reads no preprocessor lines)."""
    return re.search(r'extern "C" \{\n#endif\n(.*?)#ifdef __cplusplus', text, re.S).group(1)


def _field(declaration: str) -> tuple[str, str]:
    """``const char *name`` -> ``("name", "ptr")``, ``void (*f)(...)`` -> ``("f", "ptr")``,
    ``int32_t rank`` -> ``("rank", "int32_t")``."""
    function = re.match(r"[^(]*\(\*(\w+)\)", declaration)
    if function:
        return function.group(1), "ptr"
    *type_words, name = declaration.replace("*", " * ").split()
    return name, "ptr" if "*" in type_words else " ".join(type_words)


def _read(declarations: str) -> tuple[dict, dict]:
    """enum type -> {constant: value}; struct type -> its fields in order: (name, "ptr"
    or the C integer type)."""
    code = re.sub(r"/\*.*?\*/", " ", declarations, flags=re.S)
    enums = {name: {k: int(v) for k, v in re.findall(r"(\w+) = (\d+)", body)}
             for name, body in re.findall(r"typedef enum (\w+) \{(.*?)\} \1;", code, re.S)}
    structs = {name: tuple(_field(d) for d in body.split(";") if d.strip())
               for name, body in re.findall(r"typedef struct (\w+) \{(.*?)\} \1;", code,
                                            re.S)}
    return enums, structs


DECLARATIONS = _declarations(HEADER.read_text())
ENUMS, STRUCTS = _read(DECLARATIONS)
CUDA_DECLARATIONS = _declarations(CUDA_HEADER.read_text())
CUDA_ENUMS, CUDA_STRUCTS = _read(CUDA_DECLARATIONS)

_STATUS = ENUMS["xlac_status"]
XLAC_OK = _STATUS["XLAC_OK"]
XLAC_ERROR_NULL_ARGUMENT = _STATUS["XLAC_ERROR_NULL_ARGUMENT"]
XLAC_ERROR_ARENA_ALIGNMENT = _STATUS["XLAC_ERROR_ARENA_ALIGNMENT"]
XLAC_ERROR_SIZE_OUT_OF_BOUNDS = _STATUS["XLAC_ERROR_SIZE_OUT_OF_BOUNDS"]
# Every DType travels: XLAC_F32 is dtypes.F32's number (a DType missing there fails here).
XLAC_DTYPE = {d: ENUMS["xlac_dtype"][f"XLAC_{d.name.upper()}"] for d in dtypes.ALL}
# ValueSpec.kind -> its number: XLAC_VALUE_SEQUENCE is "sequence".
XLAC_VALUE_KIND = {name.removeprefix("XLAC_VALUE_").lower(): n
                   for name, n in ENUMS["xlac_value_kind"].items()}

_LLVM_TYPES = {"ptr": PTR, "int32_t": I32, "int64_t": I64, "uint64_t": I64}


def struct_type(name: str, size_t: ir.IntType | None = None) -> ir.LiteralStructType:
    """``struct name`` (of either header) for LLVM, whose data layout for the target
    places the fields where its C compiler does. ``size_t``: the target's, for a struct
    holding one."""
    types = _LLVM_TYPES if size_t is None else {**_LLVM_TYPES, "size_t": size_t}
    fields = STRUCTS.get(name) or CUDA_STRUCTS[name]
    return ir.LiteralStructType([types[c] for _, c in fields])


def field_index(struct: str, field: str) -> int:
    return [name for name, _ in STRUCTS[struct]].index(field)


def threadpool_type(size_t: ir.IntType) -> ir.LiteralStructType:
    return struct_type("xlac_threadpool", size_t)


TENSOR_INFO = struct_type("xlac_tensor_info")
VALUE_INFO = struct_type("xlac_value_info")
MODEL_INFO = struct_type("xlac_model_info")
