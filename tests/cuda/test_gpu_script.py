"""benchmarks/gpu.py, the GPU check, end to end without a GPU.

``gpu.py --emulate --models dscnn`` exports DS-CNN from PyTorch, compiles it for
``cuda-emulated`` and for this machine, runs it through the stand-in driver
(fake_libcuda.c, named by XLAC_CUDA_DRIVER) with host arrays posing as device arrays,
and times it: the plumbing of steps 2, 3 and 5 of the run on the GPU machine. Its
results must say the outputs match PyTorch and xlac's CPU build.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from fake_driver import build_fake_driver  # noqa: E402


def test_gpu_script_emulated_dscnn(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    env = dict(os.environ, XLAC_CUDA_DRIVER=str(build_fake_driver(tmp_path / "fake-cuda")))
    for name in ("XLAC_FAKE_CUDA_ORDER", "XLAC_FAKE_CUDA_FAIL", "OUT"):
        env.pop(name, None)
    cmd = [sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--emulate", "--models", "dscnn",
           "--runs", "3", "--warmup", "1", "--out", str(out), "--work", str(work)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]

    data = json.loads((out / "results.json").read_text())
    assert data["config"]["emulate"] and data["config"]["models"] == ["dscnn"]
    assert all(s["status"] == "ok" for s in data["steps"].values()), data["steps"]
    assert "error" not in data["models"]["dscnn/b1"], data["models"]
    row, = data["correctness"]
    assert (row["model"], row["batch"]) == ("dscnn", 1)
    assert row["vs_torch"]["pass"] and row["vs_xlac_cpu"]["pass"], row
    assert row["run_cuda_vs_run_device_max_abs"] == 0.0
    assert data["summary"]["all outputs match"] is True
    lat, = data["latency"]
    assert lat["xlac_ms"] > 0 and lat["eager_ms"] > 0, lat

    text = (out / "results.txt").read_text()
    assert "dscnn/b1: vs torch PASS" in text
    assert "| model | batch | xlac ms | xlac graph ms |" in text
    assert "| dscnn | 1 |" in text
