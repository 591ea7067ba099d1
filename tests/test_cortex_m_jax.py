"""JAX programs on an emulated Cortex-M4F: the MLP and the CNN of test_hlo_import.py,
lowered by JAX to StableHLO and to HLO text, built by examples/cortex-m/'s Makefile
(xlac, arm-none-eabi-gcc, the example's start-up code) and run under
qemu-system-arm; the outputs must match JAX's own on this machine (floats within
rtol 1e-4, atol 1e-4 x the largest |value|; the CNN's argmax exactly)."""
from __future__ import annotations

import numpy as np
import pytest

from cross import assert_close, read_outputs, run_all, write_inputs
from test_cortex_m import _make
from tools import require_tools

jax = pytest.importorskip("jax")
from xlac.conformance.jax_cases import FORMS, cnn, f32, jax_outputs, mlp  # noqa: E402

PROGRAMS = {"mlp": (mlp, (f32(4, 32),)), "cnn": (cnn, (f32(1, 16, 16, 3),))}
CASES = [(p, form) for p in PROGRAMS for form in FORMS]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    require_tools("make", "arm-none-eabi-gcc", "qemu-system-arm")
    root = tmp_path_factory.mktemp("cortex-m-jax")
    expected, builds = {}, []
    for name, form in CASES:
        make, args = PROGRAMS[name]
        fn = make()
        path = root / f"{name}_{form}.txt"
        path.write_text(FORMS[form](jax.jit(fn).lower(*args)))
        build = root / f"{name}_{form}"
        build.mkdir()
        write_inputs(build, list(args))
        expected[name, form] = jax_outputs(fn, args)
        builds.append(((_make("cortex-m4f", path, build), root), build))
    for done, ((cmd, _), _) in zip(run_all([b for b, _ in builds]), builds):
        assert done.returncode == 0, f"{' '.join(map(str, cmd))}:\n{done.stdout}{done.stderr}"
    qemu = [(_make("cortex-m4f", root / f"{n}_{f}.txt", build, "run"), root)
            for (n, f), (_, build) in zip(CASES, builds)]
    got = {}
    for key, done, (_, build) in zip(CASES, run_all(qemu), builds):
        assert done.returncode == 0, f"{key}: firmware failed:\n{done.stdout}{done.stderr}"
        got[key] = read_outputs(build, expected[key])
    return got, expected


@pytest.mark.parametrize("name,form", CASES)
def test_jax_program_runs_on_cortex_m4(runs, name, form):
    got, expected = runs
    for g, w in zip(got[name, form], expected[name, form], strict=True):
        if w.dtype.kind == "f":
            assert_close([g], [w])
        else:
            np.testing.assert_array_equal(g, w)
