"""The CMake module: examples/cmake builds LeNet into a host program and, unchanged, into
a Cortex-M firmware; xlac_add_model recompiles when the model changes; include() and
OPTIONS work in a project of its own."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import xlac
from test_c_example import app_input, parse
from tools import require_tool
from xlac.archive import elf_symbols
from xlac.main import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cmake"
EM_ARM = 40


def cmake_dir(capsys) -> str:
    assert main(["--cmake-dir"]) == 0
    return capsys.readouterr().out.strip()


def run(cmd, **kw) -> str:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def configure(cmake, source, build, *definitions) -> subprocess.CompletedProcess:
    return subprocess.run([cmake, "-S", str(source), "-B", str(build), *definitions],
                          capture_output=True, text=True)


def test_cmake_dir_holds_the_module(capsys):
    folder = Path(cmake_dir(capsys))
    assert (folder / "xlacConfig.cmake").is_file() and (folder / "xlac.cmake").is_file()


def test_example_builds_runs_and_follows_the_model(tmp_path, capsys):
    cmake = require_tool("cmake")
    model = tmp_path / "lenet.onnx"
    shutil.copy(ROOT / "examples" / "lenet.onnx", model)
    build = tmp_path / "build"
    done = configure(cmake, EXAMPLE, build, f"-Dxlac_DIR={cmake_dir(capsys)}",
                     f"-DLENET_MODEL={model}")
    assert done.returncode == 0, done.stderr
    log = run([cmake, "--build", build])
    assert "xlac: compiling" in log
    status, arena, probs, cls = parse(run([build / "lenet_app"]))
    want, = xlac.load(build / "xlac" / "lenet_model" / "lenet.o")(app_input())
    assert status == 0 and arena == xlac.load(build / "xlac" / "lenet_model" / "lenet.o").arena_size
    np.testing.assert_allclose(probs, want[0], rtol=1e-6, atol=1e-7)
    assert "xlac: compiling" not in run([cmake, "--build", build])      # nothing changed
    # newer than everything the builds wrote, however long they took (a loaded machine)
    stamp = max(p.stat().st_mtime for p in build.rglob("*")) + 1
    os.utime(model, (stamp, stamp))
    assert "xlac: compiling" in run([cmake, "--build", build])          # the model changed


def test_example_builds_a_cortex_m_firmware_from_the_same_call(tmp_path, capsys):
    cmake = require_tool("cmake")
    require_tool("arm-none-eabi-gcc")
    build = tmp_path / "cortex-m"
    done = configure(cmake, EXAMPLE, build, f"-Dxlac_DIR={cmake_dir(capsys)}",
                     f"-DCMAKE_TOOLCHAIN_FILE={EXAMPLE / 'cortex-m.cmake'}")
    assert done.returncode == 0, done.stderr
    run([cmake, "--build", build])
    firmware = (build / "lenet_app").read_bytes()
    assert firmware[:4] == b"\x7fELF" and firmware[4] == 1                      # ELF32
    assert int.from_bytes(firmware[18:20], "little") == EM_ARM
    assert {"lenet_run", "lenet_info", "main"} <= set(elf_symbols(firmware)[0])
    header = (build / "xlac" / "lenet_model" / "lenet.h").read_text()
    assert " * Target triple: thumbv7em-none-eabihf\n" in header
    assert " * CPU:           cortex-m4\n" in header


def test_include_with_options_and_a_bad_argument(tmp_path, capsys):
    cmake = require_tool("cmake")
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              tmp_path / "relu.onnx")
    (tmp_path / "main.c").write_text(
        '#include <stdio.h>\n#include "relu_model.h"\n'
        "int main(void) {\n"
        "  float x[relu_model_x_COUNT], y[relu_model_y_COUNT];\n"
        "  unsigned i;\n"
        "  for (i = 0; i < relu_model_x_COUNT; i++) x[i] = (float)i - 3.5f;\n"
        "  if (relu_model_run(x, y, 0) != 0) return 1;\n"
        '  for (i = 0; i < relu_model_y_COUNT; i++) printf("%g ", y[i]);\n'
        "  return 0;\n}\n")
    source = tmp_path / "project"
    source.mkdir()
    cmake_lists = (
        "cmake_minimum_required(VERSION 3.16)\nproject(p C)\n"
        'include("${XLAC_CMAKE_DIR}/xlac.cmake")\n'
        f'xlac_add_model(relu_model "{tmp_path / "relu.onnx"}"EXTRA OPTIONS --input-shape x=2x4 '
        "-O1)\n"
        f'add_executable(app "{tmp_path / "main.c"}")\n'
        "target_link_libraries(app PRIVATE relu_model)\n")
    (source / "CMakeLists.txt").write_text(cmake_lists.replace("EXTRA", ""))
    definition = f"-DXLAC_CMAKE_DIR={cmake_dir(capsys)}"
    done = configure(cmake, source, tmp_path / "build", definition)
    assert done.returncode == 0, done.stderr
    run([cmake, "--build", tmp_path / "build"])
    assert run([tmp_path / "build" / "app"]).split() == ["0"] * 4 + ["0.5", "1.5", "2.5", "3.5"]

    (source / "CMakeLists.txt").write_text(cmake_lists.replace("EXTRA", " BOGUS 1"))
    done = configure(cmake, source, tmp_path / "build2", definition)
    assert done.returncode != 0
    assert "xlac_add_model(relu_model): unknown arguments BOGUS;1" in " ".join(done.stderr.split())
