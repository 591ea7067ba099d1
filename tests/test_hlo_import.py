"""JAX programs in: ``jax.jit(f).lower(args)`` printed as XLA's HLO text and as
StableHLO, compiled by xlac, run through xlac.load and compared with JAX's own result
(XLA's CPU compiler): bit-exact for integer and boolean results, a stated float
tolerance otherwise."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import xlac
from xlac import runtime_c
from xlac.hlo import Opcode
from xlac.importers.hlo import REFUSED
from xlac.main import main

jax = pytest.importorskip("jax")
from xlac.conformance.jax_cases import (  # noqa: E402
    CASES, FORMS, PROGRAMS, REFUSALS, Case, assert_matches, cnn, f32, hlo_text, jax_outputs,
    lower, lowered_text, mlp)

jnp, lax = jax.numpy, jax.lax


def compile_hlo(text: str, folder, name: str) -> xlac.Model:
    path = folder / f"{name}.txt"
    path.write_text(text)
    return xlac.load(xlac.compile(path, folder / f"{name}.o", name=name).output)


@pytest.mark.parametrize("case_name, form", [(name, form) for name in sorted(CASES)
                                             for form in CASES[name].forms])
def test_jax_program_matches_jax(case_name, form, tmp_path):
    case = CASES[case_name]
    model = compile_hlo(FORMS[form](lower(case)), tmp_path, case_name)
    assert_matches(model(*case.args), jax_outputs(case.fn, case.args), case)


# --- real programs: weights baked in as constants, as a jitted closure writes them ----


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_real_program_matches_jax(program, form, tmp_path):
    case = PROGRAMS[program]
    model = compile_hlo(lowered_text(form, case.fn, *case.args), tmp_path, program)
    assert_matches(model(*case.args), jax_outputs(case.fn, case.args), case)


def test_compiler_ir_text_with_large_constants(tmp_path):
    case = PROGRAMS["mlp"]
    text = jax.jit(case.fn).lower(*case.args).compiler_ir("hlo").as_hlo_text(
        print_large_constants=True)
    model = compile_hlo(text, tmp_path, "mlp_ir")
    assert [i.name for i in model.inputs] == ["x"]
    assert_matches(model(*case.args), jax_outputs(case.fn, case.args), case)


DUMPED = "lambda x, w: (jnp.argsort(jnp.tanh(x @ w), axis=-1), jax.nn.softmax(x @ w))"


def test_xla_dump_before_optimizations(tmp_path):
    # XLA_FLAGS=--xla_dump_to writes %names, signatures, metadata and stack frames
    args = (np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3),
            np.linspace(2, -2, 15, dtype=np.float32).reshape(3, 5))
    values = [a.tolist() for a in args]
    script = ("import jax, jax.numpy as jnp, numpy as np\n"
              f"jax.jit({DUMPED})(*[np.array(a, np.float32) for a in {values}])")
    env = {**os.environ, "XLA_FLAGS": f"--xla_dump_to={tmp_path / 'dump'} --xla_dump_hlo_as_text"}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, capture_output=True)
    path, = (tmp_path / "dump").glob("*before_optimizations.txt")
    assert "StackFrames" in path.read_text()
    model = xlac.load(xlac.compile(path, tmp_path / "dumped.o").output)
    assert_matches(model(*args), jax_outputs(eval(DUMPED), args), Case(None, args))


# --- refusals: one line naming what is missing -----------------------------------


@pytest.mark.parametrize("refusal, form", [(name, form) for name in sorted(REFUSALS)
                                           for form in REFUSALS[name][2]])
def test_unsupported_ops_are_refused_in_one_line(refusal, form, tmp_path):
    fn, args, messages = REFUSALS[refusal]
    path = tmp_path / f"{refusal}.txt"
    path.write_text(lowered_text(form, fn, *args))
    with pytest.raises(xlac.XlacError, match=messages[form]) as error:
        xlac.compile(path, tmp_path / "out.o")
    assert "\n" not in str(error.value)
    assert not (tmp_path / "out.o").exists()


@pytest.mark.parametrize("form", sorted(FORMS))
def test_other_platforms_lowering_writes_xla_linear_algebra_ops(form):
    text = FORMS[form](lower(CASES["linalg_xla_ops"]))
    assert ("cholesky(" in text and "triangular-solve(" in text) if form == "hlo" else \
        ("stablehlo.cholesky" in text and "stablehlo.triangular_solve" in text)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_64_bit_random_bits_and_bitcasts(form, tmp_path):
    def f(k, x):
        return (lax.rng_bit_generator(k, (3, 5), jnp.uint64)[1],
                lax.rng_bit_generator(k, (3, 5), jnp.uint64,
                                      algorithm=lax.RandomAlgorithm.RNG_THREE_FRY)[1],
                lax.bitcast_convert_type(x.reshape(3, 2), jnp.float64),
                lax.bitcast_convert_type(x.astype(jnp.float64), jnp.uint32))
    args = (np.array([1, 2, 3, 4], np.uint32), f32(6))
    with jax.enable_x64(True):
        text = lowered_text(form, f, *args)
        want = jax_outputs(f, args)
    assert_matches(compile_hlo(text, tmp_path, "x64")(*args), want, Case(f, args, 0, 0))


def test_refused_ops_are_not_in_the_opcode_table():
    assert not set(REFUSED) & {op.text for op in Opcode}


def test_elided_constants_say_how_to_print_them(tmp_path):
    text = jax.jit(mlp()).lower(f32(8, 32)).compiler_ir("hlo").as_hlo_text()
    path = tmp_path / "mlp.hlo"
    path.write_text(text)
    with pytest.raises(xlac.XlacError, match="print_large_constants=True"):
        xlac.compile(path, tmp_path / "mlp.o")


def test_optimized_hlo_says_which_form_to_give(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text(jax.jit(lambda x: jnp.tanh(x.T @ x)).lower(f32(4, 3)).compile().as_text())
    with pytest.raises(xlac.XlacError, match="HLO after XLA's optimizations.*dialect='hlo'"):
        xlac.compile(path, tmp_path / "f.o")


def test_compile_takes_the_text_as_bytes(tmp_path):
    x = f32(5)
    result = xlac.compile(hlo_text(jnp.tanh, x).encode(), tmp_path / "t.o")
    np.testing.assert_allclose(xlac.load(result.output)(x)[0], np.tanh(x), rtol=1e-6)


def test_onnx_only_options_are_refused(tmp_path):
    path = tmp_path / "f.hlo"
    path.write_text(hlo_text(jnp.tanh, f32(3)))
    with pytest.raises(xlac.XlacError, match="input_shapes applies to ONNX models"):
        xlac.compile(path, tmp_path / "f.o", input_shapes={"x": (3,)})


# --- the command line: picked by content, errors in one line -------------------------

def test_cli_picks_the_hlo_importer_by_content(tmp_path, capsys):
    path = tmp_path / "program.txt"          # no .hlo suffix: the HloModule header decides
    path.write_text(hlo_text(lambda a, b: (a * b, a - b), f32(4), f32(4)))
    assert main([str(path), "-o", str(tmp_path / "prog.o")]) == 0
    header = (tmp_path / "prog.h").read_text()
    assert "int prog_run(const float *a, const float *b, float *out0, float *out1, " \
           "void *arena);" in header


def test_inputs_are_named_from_jax_argument_paths(tmp_path):
    params = {"w": f32(3, 2), "b": [f32(2)]}
    text = hlo_text(lambda p, x: jnp.tanh(x @ p["w"] + p["b"][0]), params, f32(4, 3))
    model = compile_hlo(text, tmp_path, "named")
    assert [i.name for i in model.inputs] == ["p_b_0", "p_w", "x"]   # tree_leaves order


def test_run_command_takes_hlo_text_and_check_says_why_not(tmp_path, capsys):
    path = tmp_path / "f.hlo"
    path.write_text(hlo_text(lambda x: x * 2.0, np.arange(3, dtype=np.float32)))
    assert main(["run", str(path), "--input", "x=" + str(_save(tmp_path, "x", [1, 2, 3]))]) == 0
    assert "[2. 4. 6.]" in capsys.readouterr().out
    assert main(["run", str(path), "--check"]) == 1
    assert "does not read HLO text" in capsys.readouterr().err


def _save(folder, name, values):
    path = folder / f"{name}.npy"
    np.save(path, np.array(values, np.float32))
    return path


def test_cli_refuses_unsupported_ops_with_status_1(tmp_path, capsys):
    path = tmp_path / "eigh.hlo"
    path.write_text(hlo_text(lambda x: jnp.linalg.eigh(x)[0], np.eye(3, dtype=np.float32)))
    assert main([str(path), "-o", str(tmp_path / "eigh.o")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("xlac: error: unsupported XLA ops: custom-call")
    assert "Traceback" not in err and not (tmp_path / "eigh.o").exists()


def test_cross_target_and_arena_as_for_onnx(tmp_path):
    path = tmp_path / "cnn.hlo"
    path.write_text(hlo_text(cnn(), f32(1, 16, 16, 3)))
    result = xlac.compile(path, tmp_path / "cnn.o", target="aarch64-unknown-linux-gnu",
                          report=True)
    assert (tmp_path / "cnn.o").read_bytes()[18] == 183          # ELF e_machine: AArch64
    header = (tmp_path / "cnn.h").read_text()
    assert f"#define cnn_ARENA_SIZE {result.arena_size}u" in header and result.arena_size > 0
    assert result.report["imported_ops"]["convolution"] == 2


C_MAIN = r"""
#include <stdio.h>
#include "mlp.h"
static float x[mlp_x_COUNT], y[mlp_out0_COUNT];
static unsigned char arena[mlp_ARENA_SIZE + 1] __attribute__((aligned(64)));
int main(void) {
    unsigned i;
    for (i = 0; i < mlp_x_COUNT; ++i) x[i] = (float)(i % 7) * 0.25f - 0.75f;
    if (mlp_run(x, y, arena) != 0) return 1;
    for (i = 0; i < mlp_out0_COUNT; ++i) printf("%.9g\n", y[i]);
    return 0;
}
"""


def test_object_links_into_a_c_program_without_the_runtime(tmp_path):
    fn = mlp()
    x = ((np.arange(8 * 32) % 7) * 0.25 - 0.75).astype(np.float32).reshape(8, 32)
    (tmp_path / "mlp.hlo").write_text(hlo_text(fn, x))
    assert main([str(tmp_path / "mlp.hlo"), "-o", str(tmp_path / "mlp.o")]) == 0
    (tmp_path / "main.c").write_text(C_MAIN)
    runtime_dir = runtime_c.__path__[0]
    subprocess.run(["cc", "-std=gnu99", "-Wall", "-Werror", f"-I{tmp_path}", f"-I{runtime_dir}",
                    str(tmp_path / "main.c"), str(tmp_path / "mlp.o"), "-o",
                    str(tmp_path / "app")], check=True)
    out = subprocess.run([str(tmp_path / "app")], capture_output=True, text=True, check=True)
    got = np.array(out.stdout.split(), np.float32).reshape(8, 10)
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(x)), rtol=1e-5, atol=1e-6)
