"""--emit lib: a static library a linker takes, the same bytes GNU ar makes."""
from __future__ import annotations

import subprocess
from pathlib import Path

import llvmlite.binding as llvm
import pytest

import xlac
from tools import require_tool
from xlac.archive import elf_symbols, static_library, write_archive
from xlac.main import main

ROOT = Path(__file__).resolve().parents[1]
LENET = ROOT / "examples" / "lenet.onnx"


def run(cmd, **kw) -> str:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert done.returncode == 0, f"{cmd} failed:\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def lenet_lib(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("lib")
    assert main([str(LENET), "-o", str(folder / "lenet.a"), "--emit", "lib"]) == 0
    return folder


def test_library_is_what_gnu_ar_makes_of_the_object(lenet_lib, tmp_path):
    ar = require_tool("ar")
    xlac.compile(LENET, tmp_path / "lenet.o")
    assert run([ar, "t", lenet_lib / "lenet.a"]).split() == ["lenet.o"]
    run([ar, "rcsD", tmp_path / "ref.a", tmp_path / "lenet.o"], cwd=tmp_path)
    assert (lenet_lib / "lenet.a").read_bytes() == (tmp_path / "ref.a").read_bytes()
    assert (lenet_lib / "lenet.h").exists()


def test_library_links_into_the_example_program(lenet_lib):
    app = lenet_lib / "app"
    run(["cc", ROOT / "examples" / "app.c", lenet_lib / "lenet.a", f"-I{lenet_lib}",
         f"-I{ROOT / 'runtime_c'}", "-o", app])
    assert run([app]).startswith("lenet: status 0, arena ")


def test_long_member_names_and_32_bit_objects(tmp_path):
    """A Cortex-M object (ELF32) and a member name over 15 bytes, against GNU ar."""
    ar = require_tool("ar")
    xlac.compile(LENET, tmp_path / "m.o", name="a_model_with_a_long_name",
                 target="thumbv7m-none-eabi", cpu="cortex-m3")
    data = (tmp_path / "m.o").read_bytes()
    defined, undefined = elf_symbols(data)
    assert set(defined) == {f"a_model_with_a_long_name_{s}" for s in ("run", "run_v", "info")}
    assert "__addsf3" in undefined          # no FPU: float arithmetic comes from libgcc
    assert not [s for s in undefined if s.startswith("xlac_")]
    long_name = "a_model_with_a_long_name.o"
    (tmp_path / long_name).write_bytes(data)
    run([ar, "rcsD", "ref.a", "m.o", long_name], cwd=tmp_path)
    assert write_archive([("m.o", data), (long_name, data)]) == (tmp_path / "ref.a").read_bytes()


def test_runtime_object_joins_when_the_object_needs_it(tmp_path):
    (tmp_path / "m.c").write_text(
        '#include "xlac_runtime.h"\nconst char *m_status(void) { return xlac_status_string(0); }\n')
    run(["cc", "-c", "-fPIC", f"-I{ROOT / 'runtime_c'}", tmp_path / "m.c", "-o", tmp_path / "m.o"])
    obj = (tmp_path / "m.o").read_bytes()
    assert "xlac_status_string" in elf_symbols(obj)[1]
    (tmp_path / "m.a").write_bytes(static_library("m", obj, True, llvm.get_process_triple()))
    (tmp_path / "main.c").write_text(
        '#include <stdio.h>\nconst char *m_status(void);\n'
        'int main(void) { puts(m_status()); return 0; }\n')
    run(["cc", tmp_path / "main.c", tmp_path / "m.a", "-o", tmp_path / "main"])
    assert run([tmp_path / "main"]) == "ok\n"
    with pytest.raises(xlac.XlacError, match="xlac compiles for this machine only"):
        static_library("m", obj, False, "thumbv7em-none-eabi")


def test_a_model_object_needs_no_runtime_object(lenet_lib):
    xlac.compile(LENET, lenet_lib / "again.o", name="lenet")
    assert not [s for s in elf_symbols((lenet_lib / "again.o").read_bytes())[1]
                if s.startswith("xlac_")]


def test_non_elf_objects_are_refused():
    with pytest.raises(xlac.XlacError, match="is not an ELF object; --emit lib writes ELF"):
        elf_symbols(b"\xcf\xfa\xed\xfe" + bytes(60))
