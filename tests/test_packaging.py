"""The package as pip installs it, not as the editable install of the checkout shows it.

A wheel holds what setuptools' ``build_py`` step copies: setup.py's packages and their
package data. A package missing there (once ``xlac.emitter.kernels``) breaks only
non-editable installs, so these tests build that tree and run xlac from it alone.
CI also builds the wheel itself, installs it into a fresh virtual environment and
runs the README's quick start from it (.ci/run).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import xlac

ROOT = Path(__file__).resolve().parents[1]
NOT_INSTALLED = {"tests", "benchmarks", "examples", "docs", "build"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The tree a wheel would install (site-packages/xlac/...)."""
    lib = tmp_path_factory.mktemp("lib")
    done = subprocess.run([sys.executable, str(ROOT / "setup.py"), "-q", "build_py",
                           "--build-lib", str(lib)], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return lib


def _source_files(suffixes) -> set[str]:
    """The checkout's package files, as installed paths: ``cli/`` is ``xlac/``, any other
    top-level folder ``xlac/<folder>/``; tests, benchmarks and examples do not install."""
    out = set()
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if (path.suffix not in suffixes or len(rel.parts) < 2 or rel.parts[0] in NOT_INSTALLED
                or rel.parts[0].startswith(".") or "__pycache__" in rel.parts):
            continue
        top = () if rel.parts[0] == "cli" else rel.parts[:1]
        out.add("/".join(("xlac", *top, *rel.parts[1:])))
    return out


def _installed_files(installed: Path, suffixes) -> set[str]:
    return {p.relative_to(installed).as_posix() for p in installed.rglob("*")
            if p.suffix in suffixes}


def test_every_module_of_the_checkout_is_installed(installed):
    assert "xlac/emitter/kernels/gemm.py" in _source_files({".py"})
    assert _installed_files(installed, {".py"}) == _source_files({".py"})


def test_c_sources_and_cmake_files_are_package_data(installed):
    data = {".c", ".h", ".cmake"}
    assert {"xlac/runtime_c/xlac_runtime.c", "xlac/runtime_c/xlac_runtime.h"} <= \
        _source_files(data)
    assert _installed_files(installed, data) == _source_files(data)


def test_installed_tree_compiles_loads_and_runs_a_model(installed, tmp_path):
    script = f"""
import numpy as np, xlac
assert xlac.__file__.startswith({str(installed)!r}), xlac.__file__
xlac.compile({str(ROOT / 'examples' / 'lenet.onnx')!r}, {str(tmp_path / 'lenet.o')!r})
probs, = xlac.load({str(tmp_path / 'lenet.o')!r})(np.zeros((1, 1, 28, 28), np.float32))
print(probs.shape, round(float(probs.sum()), 4))
"""
    env = {**os.environ, "PYTHONPATH": str(installed)}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["(1,", "10)", "1.0"]
    done = subprocess.run([sys.executable, "-m", "xlac", "--runtime-dir"], cwd=tmp_path,
                          env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(installed / "xlac" / "runtime_c")
