"""xlac run, xlac bench and xlac cache: what a user types and what comes out."""
from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import xlac
from xlac import cache, commands
from xlac.main import main

from sequence_models import sequence_model


def _model() -> onnx.ModelProto:
    """Two inputs (one int64), two outputs: y = tanh(x @ w) + i, z = sum(x, axis 1)."""
    w = numpy_helper.from_array(np.random.default_rng(3).standard_normal((6, 4))
                                .astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Tanh", ["h"], ["t"]),
             helper.make_node("Cast", ["i"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["t", "f"], ["y"]),
             helper.make_node("ReduceSum", ["x"], ["z"], keepdims=0, axes=[1])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6]),
                     helper.make_tensor_value_info("i", TensorProto.INT64, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N"])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.setenv("XLAC_CACHE_DIR", str(tmp_path / "cache"))
    onnx.save(_model(), tmp_path / "m.onnx")
    return tmp_path


def xlac_cli(capsys, *args) -> tuple[int, str, str]:
    status = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return status, out, err


def test_run_checks_against_onnxruntime_in_one_command(workdir, capsys):
    status, out, err = xlac_cli(capsys, "run", workdir / "m.onnx", "--input-shape", "x=3x6",
                                "--check")
    assert status == 0, err
    assert "input x: float32[3, 6] random (seed 0)" in out
    assert "input i: int64[1, 4] random (seed 0)" in out
    check = out[out.index("check against onnxruntime"):].splitlines()
    assert [line.split()[0] for line in check[2:]] == ["y", "z"]
    assert all(line.rstrip().endswith("ok") for line in check[2:])


def test_run_writes_the_outputs_of_the_given_inputs(workdir, capsys):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6)).astype(np.float32)
    i = np.array([[1, 2, 3, 4]], np.int64)
    np.save(workdir / "x.npy", x)
    np.save(workdir / "i.npy", i)
    # One by name, one by position (the next input not given).
    status, out, err = xlac_cli(capsys, "run", workdir / "m.onnx", "--input-shape", "x=2x6",
                                "--input", f"i={workdir / 'i.npy'}", "--input",
                                workdir / "x.npy", "--output-dir", workdir / "out")
    assert status == 0, err
    sess = ort.InferenceSession(str(workdir / "m.onnx"), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x, "i": i})
    for name, ref in zip(("y", "z"), want):
        assert f"wrote {workdir / 'out' / name}.npy" in out
        np.testing.assert_allclose(np.load(workdir / "out" / f"{name}.npy"), ref, rtol=1e-5,
                                   atol=1e-6)


def test_run_takes_a_compiled_object(workdir, capsys):
    xlac.compile(workdir / "m.onnx", workdir / "m.o", input_shapes={"x": (1, 6)})
    status, out, err = xlac_cli(capsys, "run", workdir / "m.o")
    assert status == 0, err
    assert out.startswith(f"m: loaded from {workdir / 'm.o'}; arena ")
    assert "output y: float32[1, 4]" in out
    status, out, err = xlac_cli(capsys, "run", workdir / "m.o", "--check")
    assert status == 1 and "give MODEL.onnx rather than a compiled object" in err


def test_run_check_that_differs_exits_3(workdir, capsys, monkeypatch):
    real = commands._ort_session

    class Off:                         # onnxruntime's answer, one element changed
        def __init__(self, sess):
            self.sess = sess

        def run(self, names, feeds):
            out = self.sess.run(names, feeds)
            out[1] = out[1] + np.float32(1e-2)
            return out

    monkeypatch.setattr(commands, "_ort_session", lambda ort, path: Off(real(ort, path)))
    status, out, err = xlac_cli(capsys, "run", workdir / "m.onnx", "--input-shape", "x=1x6",
                                "--check")
    assert status == commands.EXIT_CHECK_FAILED == 3
    assert err == "xlac: error: output 'z' differs from onnxruntime beyond the tolerance\n"
    assert "DIFFERS" in out.splitlines()[-1] and out.splitlines()[-2].rstrip().endswith("ok")


def test_without_onnxruntime_check_says_how_to_install_it_and_bench_times_xlac_alone(
        workdir, capsys, monkeypatch):
    monkeypatch.setattr(commands, "_onnxruntime", lambda: None)
    status, out, err = xlac_cli(capsys, "run", workdir / "m.onnx", "--input-shape", "x=1x6",
                                "--check")
    assert status == 1
    assert err.startswith("xlac: error: --check compares with onnxruntime, which is not "
                          "installed: pip install onnxruntime")
    status, out, err = xlac_cli(capsys, "bench", workdir / "m.onnx", "--input-shape", "x=1x6",
                                "--runs", "3", "--warmup", "0")
    assert status == 0, err
    assert "onnxruntime is not installed, so xlac is timed alone" in out
    assert "  xlac " in out and "  onnxruntime " not in out


def test_bench_times_both_and_compares(workdir, capsys):
    status, out, err = xlac_cli(capsys, "bench", workdir / "m.onnx", "--input-shape", "x=4x6",
                                "--runs", "5")
    assert status == 0, err
    lines = out.splitlines()
    assert "5 timed runs each after 3 warm-up" in out
    table = lines[lines.index(next(x for x in lines if "median" in x)):]
    assert table[0].split()[:3] == ["median", "min", "max"]
    assert table[1].split()[0] == "xlac" and table[2].split()[0] == "onnxruntime"
    assert table[3].startswith("xlac is ") and "as fast as onnxruntime" in table[3]


@pytest.mark.parametrize("args, message", [
    (["--input", "nope.npy"], "cannot read --input x=nope.npy"),
    (["--input", "a.npy", "--input", "b.npy", "--input", "c.npy"], "all given already"),
    (["--input", "x=f64.npy"], "holds float64[1, 6]; the model takes float32[1, 6]"),
    (["--input", "i=f64.npy", "--input", "i=f64.npy"], "--input gives input 'i' twice"),
])
def test_run_input_mistakes_are_one_line(workdir, capsys, monkeypatch, args, message):
    monkeypatch.chdir(workdir)
    for name in ("a", "b", "c"):
        np.save(workdir / f"{name}.npy", np.zeros((1, 6), np.float32))
    np.save(workdir / "f64.npy", np.zeros((1, 6)))
    status, out, err = xlac_cli(capsys, "run", workdir / "m.onnx", "--input-shape", "x=1x6",
                                *args)
    assert status == 1 and len(err.splitlines()) == 1 and message in err, err


def test_compare():
    want = np.array([1.0, -2.0, np.nan, np.inf], np.float32)
    c = commands.compare(want.copy(), want, 1e-4, None)
    assert c.ok and c.max_abs == 0.0 and c.atol == pytest.approx(2e-5)
    got = want.copy()
    got[1] = -2.001
    c = commands.compare(got, want, 1e-4, None)
    assert not c.ok and c.at == (1,) and c.max_abs == pytest.approx(1e-3, rel=1e-3)
    got = want.copy()
    got[3] = np.nan
    assert not commands.compare(got, want, 1e-4, None).ok      # NaN where the answer is inf
    assert not commands.compare(np.array([3]), np.array([4]), 1.0, None).ok   # ints: exact
    c = commands.compare(np.zeros((2, 2)), np.zeros(4), 1e-4, None)
    assert not c.ok and c.note == "shape [2, 2], onnxruntime's [4]"


def _fake_library(folder: Path, name: str, size: int, age: float) -> Path:
    path = folder / f"{name}-{'0' * 24}.so"
    path.write_bytes(b"\0" * size)
    t = time.time() - age
    os.utime(path, (t, t))
    return path


def test_cache_keeps_the_most_recently_used_within_its_bounds(tmp_path):
    libs = [_fake_library(tmp_path, f"m{k}", 100, age=1000 + k) for k in range(5)]
    foreign = tmp_path / "notes.txt"
    foreign.write_text("not ours")
    removed = cache.prune(tmp_path, cache.Limits(max_entries=3, max_bytes=10_000))
    assert sorted(e.path for e in removed) == libs[3:]
    assert all(p.exists() for p in libs[:3]) and foreign.exists()
    removed = cache.prune(tmp_path, cache.Limits(max_entries=10, max_bytes=250))
    assert [e.path for e in removed] == [libs[2]]


def test_cache_never_removes_a_library_just_used(tmp_path):
    recent = [_fake_library(tmp_path, f"m{k}", 100, age=1) for k in range(3)]
    assert cache.prune(tmp_path, cache.Limits(max_entries=1, max_bytes=1)) == []
    assert all(p.exists() for p in recent)


def test_load_prunes_the_cache(workdir, monkeypatch):
    folder = workdir / "cache"
    folder.mkdir()
    old = [_fake_library(folder, f"old{k}", 10, age=3600 + k) for k in range(3)]
    stale_temp = folder / f".m-{'1' * 24}.so.12.34.tmp"
    stale_temp.write_bytes(b"")
    os.utime(stale_temp, (0, 0))
    monkeypatch.setenv("XLAC_CACHE_MAX_ENTRIES", "2")
    xlac.compile(workdir / "m.onnx", workdir / "m.o", input_shapes={"x": (1, 6)})
    m = xlac.load(workdir / "m.o")
    assert m.library_path.exists() and old[0].exists()
    assert not old[1].exists() and not old[2].exists() and not stale_temp.exists()


@pytest.mark.parametrize("variable, value, message", [
    ("XLAC_CACHE_MAX_ENTRIES", "lots", "XLAC_CACHE_MAX_ENTRIES must be a number"),
    ("XLAC_CACHE_MAX_BYTES", "2 tons", "XLAC_CACHE_MAX_BYTES must be bytes such as 500M"),
])
def test_cache_bounds_come_from_the_environment(monkeypatch, variable, value, message):
    monkeypatch.setenv("XLAC_CACHE_MAX_BYTES", "2G")
    monkeypatch.setenv("XLAC_CACHE_MAX_ENTRIES", "7")
    assert cache.limits() == cache.Limits(7, 2 << 30)
    monkeypatch.setenv(variable, value)
    with pytest.raises(xlac.XlacError, match=message):
        cache.limits()


def test_cache_command_shows_and_clears(workdir, capsys):
    xlac.compile(workdir / "m.onnx", workdir / "m.o", input_shapes={"x": (1, 6)})
    xlac.load(workdir / "m.o")
    status, out, err = xlac_cli(capsys, "cache")
    assert status == 0 and f"folder     {workdir / 'cache'}" in out
    assert "libraries  1, " in out and "the 100 most recently used, at most 1.0 GiB" in out
    status, out, err = xlac_cli(capsys, "cache", "clear")
    assert status == 0 and out.startswith("removed 1 libraries (")
    assert cache.entries(workdir / "cache") == []


# -- sequences and optionals at the model boundary ----------------------------------------------

@pytest.fixture
def seqdir(workdir):
    onnx.save(sequence_model(), workdir / "seq.onnx")
    return workdir


def _check_rows(out: str) -> dict[str, str]:
    check = out[out.index("check against onnxruntime"):].splitlines()[2:]
    return {line.split()[0]: line.rstrip() for line in check}


@pytest.mark.parametrize("absent", [False, True])
def test_run_checks_sequences_and_optionals_element_by_element(seqdir, capsys, absent):
    args = ["--absent-input", "o"] if absent else []
    status, out, err = xlac_cli(capsys, "run", seqdir / "seq.onnx", "--input-shape",
                                "s=[2x3,4x3]", *args, "--check")
    assert status == 0, err
    assert "input s[1]: float32[4, 3] random (seed 0)" in out
    rows = _check_rows(out)
    assert list(rows) == ["y", "t[0]", "t[1]", "t[2]", "h", "oo"]
    assert all(r.endswith("ok (empty)" if absent and n == "oo" else "ok")
               for n, r in rows.items())
    assert ("output oo: an optional compiled empty (no tensor)" in out) == absent


@pytest.mark.parametrize("change, row, message", [
    (lambda t: [t[0], t[1] + np.float32(1e-2), t[2]], "t[1]", "DIFFERS"),
    (lambda t: t[:2], "t", "DIFFERS: 3 element(s), onnxruntime's 2"),
])
def test_run_check_of_a_sequence_that_differs_exits_3(seqdir, capsys, monkeypatch, change,
                                                      row, message):
    real = commands._ort_session

    class Off:                         # onnxruntime's sequence output t, changed
        def __init__(self, sess):
            self.sess = sess

        def run(self, names, feeds):
            out = self.sess.run(names, feeds)
            out[1] = change(out[1])
            return out

    monkeypatch.setattr(commands, "_ort_session", lambda ort, path: Off(real(ort, path)))
    status, out, err = xlac_cli(capsys, "run", seqdir / "seq.onnx", "--input-shape",
                                "s=[2x3,4x3]", "--absent-input", "o", "--check")
    assert status == commands.EXIT_CHECK_FAILED
    assert err == f"xlac: error: output '{row}' differs from onnxruntime beyond the tolerance\n"
    assert message in _check_rows(out)[row]


def test_bench_feeds_onnxruntime_a_sequence(seqdir, capsys):
    status, out, err = xlac_cli(capsys, "bench", seqdir / "seq.onnx", "--input-shape",
                                "s=[2x3,4x3]", "--runs", "3", "--warmup", "0")
    assert status == 0, err
    assert "input o: float32[2] random (seed 0)" in out
    assert "as fast as onnxruntime" in out
