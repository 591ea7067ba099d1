"""The bundled example as a user runs it: the ``xlac`` command compiles
examples/lenet.onnx, the system C compiler builds examples/app.c against the header,
and the program's printed outputs agree with xlac.load of the same object and with
onnxruntime. The cffi path alone could hide a broken header."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import xlac

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples"
C_STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]


def xlac_command() -> str:
    """The console script installed beside this interpreter, else the one on PATH."""
    beside = Path(sys.executable).parent / "xlac"
    return str(beside) if beside.exists() else (shutil.which("xlac") or "xlac")


def run(cmd, **kw) -> str:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    build = tmp_path_factory.mktemp("build")
    run([xlac_command(), EXAMPLE / "lenet.onnx", "-o", build / "lenet.o"])
    runtime_dir = run([xlac_command(), "--runtime-dir"]).strip()
    app = build / "app"
    run(["cc", *C_STRICT, EXAMPLE / "app.c", build / "lenet.o", f"-I{build}",
         f"-I{runtime_dir}", "-lm", "-o", app])
    return build, Path(runtime_dir), run([app])


def app_input() -> np.ndarray:
    """The input examples/app.c fills in: image[i] = (i % 17) / 16 - 0.5."""
    i = np.arange(28 * 28)
    return ((i % 17) / 16.0 - 0.5).astype(np.float32).reshape(1, 1, 28, 28)


def parse(stdout: str) -> tuple[int, int, np.ndarray, int]:
    """(status, arena bytes, probabilities, class) from the program's output."""
    head, probs, cls = stdout.strip().splitlines()
    m = re.fullmatch(r"lenet: status (\d+), arena (\d+) bytes", head)
    assert m, head
    name, _, values = probs.partition(":")
    assert name == "probs"
    m_cls = re.fullmatch(r"class (\d+)", cls)
    assert m_cls, cls
    return (int(m.group(1)), int(m.group(2)), np.array(values.split(), dtype=np.float32),
            int(m_cls.group(1)))


def test_program_agrees_with_xlac_load(built):
    build, _, stdout = built
    status, arena, probs, cls = parse(stdout)
    model = xlac.load(build / "lenet.o")
    (want,) = model(app_input())
    assert status == 0 and arena == model.arena_size > 0
    # %.9g prints every float32 exactly, and both entries run the same code.
    np.testing.assert_array_equal(probs, want.ravel())
    assert cls == int(np.argmax(want))


def test_program_agrees_with_onnxruntime(built):
    _, _, stdout = built
    _, _, probs, _ = parse(stdout)
    sess = ort.InferenceSession(str(EXAMPLE / "lenet.onnx"), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"image": app_input()})
    np.testing.assert_allclose(probs, want.ravel(), rtol=1e-4, atol=1e-6)
    assert abs(float(probs.sum()) - 1) < 1e-5


def test_header_compiles_standalone(built):
    build, runtime_dir, _ = built
    run(["cc", *C_STRICT, "-fsyntax-only", f"-I{runtime_dir}", "-x", "c", build / "lenet.h"])


def test_header_states_the_arena_size(built):
    build, _, stdout = built
    header = (build / "lenet.h").read_text()
    m = re.search(r"^#define lenet_ARENA_SIZE (\d+)u", header, re.MULTILINE)
    assert m and int(m.group(1)) == parse(stdout)[1]
    assert "int lenet_run(const float *image, float *probs, void *arena);" in header


def test_object_needs_only_memcpy_memset_and_runtime(built):
    build, _, _ = built
    undefined = run(["nm", "-u", build / "lenet.o"]).split()
    names = [s for s in undefined if s not in ("U", "w")]
    assert all(n in ("memcpy", "memset") or n.startswith("xlac_") for n in names), names


def test_bundled_model_is_what_the_script_makes(tmp_path):
    """examples/lenet.onnx is reproducible from examples/make_lenet.py."""
    out = tmp_path / "lenet.onnx"
    run([sys.executable, EXAMPLE / "make_lenet.py", "-o", out])
    assert out.read_bytes() == (EXAMPLE / "lenet.onnx").read_bytes()


def test_ci_runs_the_readme_quick_start_commands():
    """.ci/run runs the README's two quick-start commands exactly as written."""
    quick_start = (ROOT / "README.md").read_text().split("## Quick start")[1].split("\n## ")[0]
    commands = re.findall(r"```sh\n(.*?)\n```", quick_start, re.DOTALL)
    assert len(commands) == 2
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    for command in commands:
        assert command in ci_lines
