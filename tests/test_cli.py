"""The xlac command: outputs per --emit kind, options, the report, and user errors.

Most cases call ``xlac.main.main(argv)`` in process (fast); a few run the installed
console script to check what a shell user sees.
"""
from __future__ import annotations

import importlib.metadata
import io
import json
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import xlac
import xlac.driver
import xlac.importers.onnx
from xlac.hlo.text import parse_module
from xlac.main import main
from xlac.outputs import write_files
from xlac.progress import Progress

EM_X86_64, EM_AARCH64 = 62, 183


def make_model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def f32(name, dims):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def net_model(batch="N") -> onnx.ModelProto:
    """A dense layer and an element-wise tail (fusable): y = relu(x @ w) * x2 + x2."""
    w = numpy_helper.from_array(np.random.default_rng(1).standard_normal((8, 8))
                                .astype(np.float32), "w")
    return make_model(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Mul", ["x", "x"], ["x2"]),
         helper.make_node("Mul", ["r", "x2"], ["p"]),
         helper.make_node("Add", ["p", "x2"], ["y"])],
        [f32("x", [batch, 8])], [f32("y", [batch, 8])], [w])


def reshape_model() -> onnx.ModelProto:
    """y = reshape(x, shape) * 2, with the target shape a graph input."""
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    return make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["r"]),
         helper.make_node("Mul", ["r", "two"], ["y"])],
        [f32("x", [3, 4]), helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [f32("y", ["a", "b"])], [two])


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.setenv("XLAC_CACHE_DIR", str(tmp_path / "cache"))
    onnx.save(net_model(), tmp_path / "net.onnx")
    onnx.save(net_model(batch=2), tmp_path / "static.onnx")
    onnx.save(reshape_model(), tmp_path / "reshape.onnx")
    return tmp_path


def xlac_cli(capsys, *args) -> tuple[int, str, str]:
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def files_in(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir() if p.name != "cache"}


def header_define(header: Path, macro: str) -> int:
    for line in header.read_text().splitlines():
        if line.startswith(f"#define {macro} "):
            return int(line.split()[2].rstrip("u"))
    raise AssertionError(f"{macro} not in {header}")


def elf_machine(path: Path) -> int:
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF"
    return int.from_bytes(data[18:20], "little")


# -- user errors: one line, status 1, no output files ---------------------------

def _truncated(d: Path) -> list:
    (d / "cut.onnx").write_bytes((d / "static.onnx").read_bytes()[:40])
    return [d / "cut.onnx", "-o", d / "out.o"]


def _unsupported(d: Path) -> list:
    model = make_model([helper.make_node("NonZero", ["x"], ["y"], name="nz")],
                       [f32("x", [4])], [helper.make_tensor_value_info("y", TensorProto.INT64,
                                                                       [1, None])])
    onnx.save(model, d / "nz.onnx")
    return [d / "nz.onnx", "-o", d / "out.o"]


def sequence_model() -> onnx.ModelProto:
    """y = concat(s) of a sequence input s of [n, 4] tensors."""
    graph = helper.make_graph(
        [helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)], "g",
        [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, ["n", 4])],
        [f32("y", ["m", 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _sequence(d: Path, *flags) -> list:
    onnx.save(sequence_model(), d / "seq.onnx")
    return [d / "seq.onnx", "-o", d / "out.o", *flags]


BAD_INPUTS = {
    "truncated model": (_truncated, "cannot read ONNX model"),
    "unsupported op": (_unsupported, "NonZero (node 'nz')"),
    "unpinned dynamic dim": (lambda d: [d / "net.onnx", "-o", d / "out.o"],
                             "--input-shape x=1x8"),
    "missing output folder": (lambda d: [d / "static.onnx", "-o", d / "no" / "out.o"],
                              "does not exist"),
    "bad --input-shape": (lambda d: [d / "net.onnx", "-o", d / "out.o", "--input-shape", "x=2,8"],
                          "bad --input-shape 'x=2,8'"),
    "unknown --input-shape name": (lambda d: [d / "net.onnx", "-o", d / "out.o",
                                              "--input-shape", "z=2x8"], "not a model input"),
    "unknown --target": (lambda d: [d / "static.onnx", "-o", d / "out.o", "--target", "nope-x-y"],
                         "unknown target triple 'nope-x-y'"),
    "bad --name": (lambda d: [d / "static.onnx", "-o", d / "out.o", "--name", "9lives"],
                   "bad model name '9lives'"),
    "no -o": (lambda d: [d / "static.onnx"], "no output given"),
    "report in a missing folder": (lambda d: [d / "static.onnx", "-o", d / "out.o",
                                              "--report-json", d / "no" / "r.json"],
                                   "its folder does not exist"),
    "unpinned sequence input": (_sequence, "input 's' is a sequence, whose length and element "
                                "shapes compiled code fixes; pin them with --input-shape "
                                "'s=[1x4,1x4]' (one shape per element)"),
    "sequence input pinned as a tensor": (lambda d: _sequence(d, "--input-shape", "s=2x4"),
                                          "must be a list of shapes in brackets, e.g. "
                                          "--input-shape 's=[2x3,2x3]'"),
    "sequence element of the wrong rank": (lambda d: _sequence(d, "--input-shape", "s=[2x4,3]"),
                                           "element 1, 3, of --input-shape s has rank 1"),
    "--absent-input of a tensor": (lambda d: [d / "static.onnx", "-o", d / "out.o",
                                              "--absent-input", "x"],
                                   "--absent-input names input 'x', which is not an optional"),
    "unpinned shape input": (lambda d: [d / "reshape.onnx", "-o", d / "out.o"],
                             "--const-input shape=FILE.npy"),
    "unreadable --const-input": (lambda d: [d / "reshape.onnx", "-o", d / "out.o",
                                            "--const-input", f"shape={d / 'none.npy'}"],
                                 "cannot read --const-input shape="),
    "--const-input of the wrong shape": (lambda d: np.save(d / "s.npy", np.array([[6, 2]]))
                                         or [d / "reshape.onnx", "-o", d / "out.o",
                                             "--const-input", f"shape={d / 's.npy'}"],
                                         "constant input 'shape' has shape 1x2"),
    "--const-input of inexact type": (lambda d: np.save(d / "s.npy", np.array([6.5, 2]))
                                      or [d / "reshape.onnx", "-o", d / "out.o",
                                          "--const-input", f"shape={d / 's.npy'}"],
                                      "does not convert exactly"),
    "header is a folder": (lambda d: (d / "out.h").mkdir()
                           or [d / "static.onnx", "-o", d / "out.o"], "it is a folder"),
}


@pytest.mark.parametrize("case", BAD_INPUTS, ids=list(BAD_INPUTS))
def test_user_errors_print_one_line_and_leave_no_output(workdir, capsys, case):
    make_args, message = BAD_INPUTS[case]
    args = make_args(workdir)
    before = files_in(workdir)
    status, out, err = xlac_cli(capsys, *args)
    assert status == 1
    assert out == ""
    assert err.startswith("xlac: error: ") and err.count("\n") == 1, err
    assert message in err
    assert files_in(workdir) == before


def test_console_script_reports_bad_input_without_traceback(workdir):
    (workdir / "cut.onnx").write_bytes(b"not a model")
    done = subprocess.run([shutil.which("xlac") or "xlac", workdir / "cut.onnx",
                           "-o", workdir / "out.o"], capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.startswith("xlac: error: cannot read ONNX model")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert not (workdir / "out.o").exists() and not (workdir / "out.h").exists()


def test_internal_errors_exit_2_with_one_line(workdir, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("pass exploded")
    monkeypatch.setattr(xlac.driver, "optimize", broken)
    args = [workdir / "static.onnx", "-o", workdir / "out.o"]
    status, _, err = xlac_cli(capsys, *args)
    assert status == 2
    assert err.count("\n") == 1 and "internal error in xlac" in err and "pass exploded" in err
    assert "Traceback" not in err
    monkeypatch.setenv("XLAC_DEBUG", "1")
    status, _, err = xlac_cli(capsys, *args)
    assert status == 2 and "Traceback" in err
    assert not (workdir / "out.o").exists()


# -- outputs ---------------------------------------------------------------------

def test_object_and_header_run_like_onnxruntime(workdir, capsys):
    out = workdir / "net.o"
    status, _, err = xlac_cli(capsys, workdir / "net.onnx", "-o", out, "--input-shape", "x=3x8")
    assert (status, err) == (0, "")
    assert files_in(workdir) == {"net.onnx", "static.onnx", "reshape.onnx", "net.o", "net.h"}
    assert elf_machine(out) in (EM_X86_64, EM_AARCH64)
    x = np.random.default_rng(2).standard_normal((3, 8)).astype(np.float32)
    (y,) = xlac.load(out)(x)
    want = ort.InferenceSession(str(workdir / "net.onnx")).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind, suffix, marker", [
    ("asm", ".s", "static_run_v:"),
    ("llvm", ".ll", "i32 @static_run_v(ptr"),
    ("hlo", ".hlo", "HloModule static"),
])
def test_emit_kinds_write_text_at_the_output_path(workdir, capsys, kind, suffix, marker):
    out = workdir / f"static{suffix}"
    status, _, _ = xlac_cli(capsys, workdir / "static.onnx", "-o", out, "--emit", kind)
    assert status == 0
    text = out.read_text()
    assert marker in text
    assert "#define static_ARENA_SIZE" in (workdir / "static.h").read_text()
    if kind == "hlo":
        assert parse_module(text).entry.root is not None     # full text: parses back


def test_aarch64_target_writes_an_aarch64_object(workdir, capsys):
    out = workdir / "arm.o"
    status, _, _ = xlac_cli(capsys, workdir / "static.onnx", "-o", out,
                            "--target", "aarch64-unknown-linux-gnu")
    assert status == 0
    assert elf_machine(out) == EM_AARCH64
    assert "Target triple: aarch64-unknown-linux-gnu" in (workdir / "arm.h").read_text()


def test_arena_alignment_follows_the_target(workdir, capsys):
    # A cache line where there are vector registers; 8 bytes on a Cortex-M4.
    for triple, align in (("aarch64-unknown-linux-gnu", 64), ("thumbv7em-none-eabihf", 8)):
        status, _, _ = xlac_cli(capsys, workdir / "static.onnx", "-o", workdir / "t.o",
                                "--target", triple)
        assert status == 0
        assert header_define(workdir / "t.h", "t_ARENA_ALIGN") == align


def test_name_option_and_default_name(workdir, capsys):
    status, _, _ = xlac_cli(capsys, workdir / "static.onnx", "-o", workdir / "a.o",
                            "--name", "mynet")
    assert status == 0
    assert "mynet_ARENA_SIZE" in (workdir / "a.h").read_text()
    assert xlac.load(workdir / "a.o").name == "mynet"
    assert xlac_cli(capsys, workdir / "static.onnx", "-o", workdir / "my-model.v2.o")[0] == 0
    assert "int my_model_v2_run_v(" in (workdir / "my-model.v2.h").read_text()


def test_O0_compiles_without_fusion_and_still_computes(workdir, capsys):
    out = workdir / "o0.o"
    status, _, _ = xlac_cli(capsys, workdir / "static.onnx", "-o", out, "-O0",
                            "--report-json", workdir / "o0.json")
    assert status == 0
    assert json.loads((workdir / "o0.json").read_text())["fusions"] == []
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
    want = ort.InferenceSession(str(workdir / "static.onnx")).run(None, {"x": x})[0]
    np.testing.assert_allclose(xlac.load(out)(x)[0], want, rtol=1e-5, atol=1e-6)


def test_report_and_report_json(workdir, capsys):
    out = workdir / "r.o"
    status, text, _ = xlac_cli(capsys, workdir / "static.onnx", "-o", out, "--report",
                               "--report-json", workdir / "r.json")
    assert status == 0
    report = json.loads((workdir / "r.json").read_text())
    arena = header_define(workdir / "r.h", "r_ARENA_SIZE")
    assert report["arena_bytes"] == arena
    assert report["naive_activation_bytes"] >= arena >= report["lower_bound_bytes"]
    # The 8x8 f32 weight, plus whatever constants the optimizer materialized.
    assert report["weight_bytes"] >= 8 * 8 * 4
    assert report["imported_ops"]["multiply"] == 2
    assert report["fusions"] and report["ops"]["fusion"] == len(report["fusions"])
    assert set(report["times_s"]) == {"import", "optimize", "plan", "emit", "write"}
    assert report["onnx_order_lower_bound_bytes"] > 0
    assert report["scheduler"] in report_schedulers() and isinstance(report["schedule_optimal"],
                                                                     bool)
    for key in ("aliased_buffers", "in_place_buffers", "concats_in_place", "lean_kernels"):
        assert report[key] >= 0
    for line in ("arena bytes", "naive activations", "lower bound", "for the ONNX node order",
                 "written in place", "weight bytes", "fusions", "compile time"):
        assert line in text
    assert f"{arena:,} bytes" in text


def report_schedulers() -> set[str]:
    from xlac.optimizer import DEFAULT_SCHEDULERS
    return {s.name for s in DEFAULT_SCHEDULERS} | {"exact"}


def test_report_counts_identical_weights_once(tmp_path):
    def weight_bytes(second: np.ndarray) -> int:
        w1 = numpy_helper.from_array(np.arange(256, dtype=np.float32).reshape(16, 16), "w1")
        w2 = numpy_helper.from_array(second, "w2")
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])
        graph = helper.make_graph([helper.make_node("MatMul", ["x", "w1"], ["h"]),
                                   helper.make_node("Relu", ["h"], ["r"]),
                                   helper.make_node("MatMul", ["r", "w2"], ["y"])],
                                  "twice", [x], [y], [w1, w2])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        return xlac.compile(model, tmp_path / "t.o", report=True).report["weight_bytes"]

    same = np.arange(256, dtype=np.float32).reshape(16, 16)
    assert weight_bytes(same + 1) - weight_bytes(same) == 256 * 4


def test_runtime_dir_holds_the_runtime(capsys):
    status, out, _ = xlac_cli(capsys, "--runtime-dir")
    folder = Path(out.strip())
    assert status == 0
    assert (folder / "xlac_runtime.h").is_file() and (folder / "xlac_runtime.c").is_file()


def test_dump_passes_writes_hlo_after_each_pass(workdir, capsys):
    dumps = workdir / "dumps"
    assert xlac_cli(capsys, workdir / "static.onnx", "-o", workdir / "d.o",
                    "--dump-passes", dumps)[0] == 0
    names = sorted(p.name for p in dumps.iterdir())
    assert names[0] == "000-imported.hlo" and any("fusion" in n for n in names)
    assert all((dumps / n).read_text().startswith("HloModule") for n in names)


# -- pieces of the driver ----------------------------------------------------------

def test_write_files_keeps_old_outputs_when_one_write_fails(tmp_path):
    (tmp_path / "m.o").write_bytes(b"old")
    (tmp_path / "m.h").mkdir()
    with pytest.raises(xlac.XlacError):
        write_files({tmp_path / "m.o": b"new", tmp_path / "m.h": b"new"})
    assert (tmp_path / "m.o").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.h", "m.o"]   # no temp files


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_shows_stages_on_a_slow_terminal_compile_only():
    shown = _Terminal()
    with Progress(shown, delay=0.05) as progress:
        with progress.stage("import"):
            pass
        with progress.stage("emit"):
            time.sleep(0.3)                    # the reveal comes during this stage
        with progress.stage("write"):
            pass
    lines = shown.getvalue().split("\n")[:-1]
    assert lines[0].startswith("xlac: import") and lines[0].endswith(" s")   # done before
    assert lines[1].startswith("xlac: emit      ...\rxlac: emit")
    assert lines[2].startswith("xlac: write") and len(lines) == 3
    assert set(progress.times) == {"import", "emit", "write"}
    assert progress.times["emit"] >= 0.3

    for stream, delay in ((_Terminal(), 60.0), (io.StringIO(), 0.0)):
        with Progress(stream, delay=delay) as progress:
            with progress.stage("import"):
                time.sleep(0.05)
        assert stream.getvalue() == ""


def test_python_api_returns_the_written_files(workdir):
    result = xlac.compile(workdir / "net.onnx", workdir / "api.o", input_shapes={"x": (5, 8)},
                          report=True)
    assert result.paths == (workdir / "api.o", workdir / "api.h")
    assert result.name == "api" and result.report["arena_bytes"] == result.arena_size
    assert xlac.compile(workdir / "static.onnx", workdir / "b.o").report is None
    with pytest.raises(xlac.XlacError, match="unknown output kind"):
        xlac.compile(workdir / "static.onnx", workdir / "c.o", emit="ptx")



def test_const_input_becomes_a_weight_and_leaves_the_signature(workdir, capsys):
    np.save(workdir / "shape.npy", np.array([6, 2], np.int64))
    status, out, err = xlac_cli(capsys, workdir / "reshape.onnx", "-o", workdir / "r.o",
                                "--const-input", f"shape={workdir / 'shape.npy'}", "--report")
    assert status == 0, err
    assert "constant inputs     shape" in out
    m = xlac.load(workdir / "r.o")
    assert [t.name for t in m.inputs] == ["x"]
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y, = m(x)
    np.testing.assert_array_equal(y, x.reshape(6, 2) * 2)


def test_const_inputs_from_python_take_any_exactly_convertible_dtype(workdir):
    result = xlac.compile(reshape_model(), workdir / "r.o",
                          const_inputs={"shape": np.array([2, -1], np.int32)})
    y, = xlac.load(result.output)(np.ones((3, 4), np.float32))
    assert y.shape == (2, 6)


def test_missing_const_input_error_names_the_model_inputs(workdir):
    with pytest.raises(xlac.importers.onnx.ConstantInputNeeded) as e:
        xlac.compile(reshape_model(), workdir / "r.o")
    assert e.value.inputs == ("shape",)
    assert str(e.value).endswith('pin it with const_inputs={"shape": ARRAY}')
    assert e.value.cli.endswith("pin it with --const-input shape=FILE.npy")


def test_python_errors_name_python_arguments(workdir):
    with pytest.raises(xlac.XlacError) as e:
        xlac.compile(workdir / "net.onnx", workdir / "n.o")
    assert str(e.value).endswith('pin it with input_shapes={"x": (1, 8)}')
    with pytest.raises(xlac.XlacError, match=r'input_shapes must be a dict from input names, '
                                             r'e\.g\. input_shapes=\{"x": \(1, 64\)\}; got a list'):
        xlac.compile(workdir / "net.onnx", workdir / "n.o", input_shapes=["x=2x8"])


def _future_opset_model(workdir) -> Path:
    model = net_model(batch=2)
    model.opset_import[0].version = onnx.defs.onnx_opset_version() + 2
    onnx.save(model, workdir / "future.onnx")
    return workdir / "future.onnx"


def test_future_opset_warns_in_one_line_and_compiles(workdir, capsys):
    path = _future_opset_model(workdir)
    status, out, err = xlac_cli(capsys, path, "-o", workdir / "f.o")
    assert status == 0 and (workdir / "f.o").exists()
    (line,) = err.splitlines()
    assert line.startswith("xlac: warning: ONNX model ") and "newer than the installed onnx" in line
    with pytest.warns(xlac.XlacWarning, match="newer than the installed onnx package"):
        xlac.compile(path, workdir / "g.o")


def test_strict_makes_the_future_opset_an_error(workdir, capsys):
    path = _future_opset_model(workdir)
    status, out, err = xlac_cli(capsys, path, "-o", workdir / "f.o", "--strict")
    assert status == 1 and err.startswith("xlac: error: ONNX model ")
    assert err.rstrip().endswith("(an error with --strict)") and len(err.splitlines()) == 1
    assert files_in(workdir) == {"net.onnx", "static.onnx", "reshape.onnx", "future.onnx"}
    with pytest.raises(xlac.XlacError, match=r"\(an error with strict=True\)$"):
        xlac.compile(path, workdir / "g.o", strict=True)


def test_version(capsys):
    status, out, err = xlac_cli(capsys, "--version")
    assert status == 0 and out.startswith(f"xlac {xlac.__version__} (Python ")
    assert xlac.__version__ == importlib.metadata.version("xlac")
