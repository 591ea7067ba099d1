"""The C ABI as Python reads it (emitter/abi.py) against xlac_runtime.h as C compilers read it.

abi.py reads the header with regular expressions, the loader hands the same text to cffi,
and the emitter lays out structs through LLVM: the system C compiler is the judge of
where each field lies, cffi of what the declarations say.
"""
from __future__ import annotations

import os
import subprocess

import cffi
import pytest
from llvmlite import ir

from xlac.emitter.abi import (DECLARATIONS, ENUMS, HEADER, STRUCTS, XLAC_DTYPE,
                              XLAC_VALUE_KIND, struct_type)
from xlac.emitter.target import make_target
from xlac.hlo import dtypes


def test_every_struct_and_enum_of_the_header_is_read():
    assert set(STRUCTS) == {"xlac_tensor_info", "xlac_value_info", "xlac_model_info",
                            "xlac_threadpool"}
    assert set(ENUMS) == {"xlac_dtype", "xlac_status", "xlac_value_kind"}
    assert ENUMS["xlac_status"]["XLAC_OK"] == 0


def test_cffi_reads_the_declarations_as_abi_py_does():
    ffi = cffi.FFI()
    ffi.cdef(DECLARATIONS)
    for name, fields in STRUCTS.items():
        assert [f for f, _ in ffi.typeof(name).fields] == [f for f, _ in fields], name
        for (field, kind), (_, got) in zip(fields, ffi.typeof(name).fields):
            assert (got.type.kind in ("pointer", "function")) == (kind == "ptr"), field
            if kind != "ptr":
                assert got.type.cname == kind, field
    for name, values in ENUMS.items():
        assert ffi.typeof(name).relements == values, name


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory) -> dict[str, int]:
    """sizeof, offsetof and enum values as the system C compiler sees them, by name:
    ``xlac_model_info``, ``xlac_model_info.inputs``, ``XLAC_OK``."""
    folder = tmp_path_factory.mktemp("abi")
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "xlac_runtime.h"',
             "int main(void) {"]
    for name, fields in STRUCTS.items():
        lines.append(f'  printf("{name} %zu\\n", sizeof({name}));')
        lines += [f'  printf("{name}.{f} %zu\\n", offsetof({name}, {f}));' for f, _ in fields]
    for values in ENUMS.values():
        lines += [f'  printf("{k} %d\\n", (int){k});' for k in values]
    (folder / "layout.c").write_text("\n".join(lines + ["  return 0;", "}", ""]))
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-std=c99", "-Wall", "-Werror", f"-I{HEADER.parent}", "-o",
                    str(folder / "layout"), str(folder / "layout.c")], check=True)
    out = subprocess.run([str(folder / "layout")], check=True, capture_output=True, text=True)
    return {k: int(v) for k, v in (line.split() for line in out.stdout.splitlines())}


def test_llvm_lays_out_the_structs_as_the_c_compiler_does(c_layout):
    info, machine = make_target()
    data = machine.target_data
    size_t = ir.IntType(info.pointer_bits)
    for name, fields in STRUCTS.items():
        ty = struct_type(name, size_t)
        assert ty.get_abi_size(data) == c_layout[name], name
        for k, (field, _) in enumerate(fields):
            assert ty.get_element_offset(data, k) == c_layout[f"{name}.{field}"], field


def test_enum_values_are_the_c_compiler_s(c_layout):
    for values in ENUMS.values():
        assert values == {k: c_layout[k] for k in values}


def test_every_dtype_and_value_kind_has_its_own_number():
    assert set(XLAC_DTYPE) == set(dtypes.ALL)
    assert len(set(XLAC_DTYPE.values())) == len(XLAC_DTYPE)
    assert XLAC_DTYPE[dtypes.F32] == ENUMS["xlac_dtype"]["XLAC_F32"]
    assert set(XLAC_VALUE_KIND) == {"tensor", "sequence", "absent"}
