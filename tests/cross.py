"""Cross toolchains and emulators for the target tests (test_cortex_m.py,
test_qemu_user.py, test_targets.py).

A test that needs a tool calls ``require(tool, ...)``: on a developer machine a missing
tool skips the test with a one-line reason naming the Debian package; in CI
(``CI=true``), which installs them all (.ci/run), it fails instead, so the tests can
never skip there unnoticed.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

# The Debian package of each tool (.ci/run installs them).
PACKAGES = {
    "arm-none-eabi-gcc": "gcc-arm-none-eabi libnewlib-arm-none-eabi",
    "arm-none-eabi-objdump": "binutils-arm-none-eabi",
    "qemu-system-arm": "qemu-system-arm",
    "aarch64-linux-gnu-gcc": "gcc-aarch64-linux-gnu",
    "aarch64-linux-gnu-objdump": "binutils-aarch64-linux-gnu",
    "riscv64-linux-gnu-gcc": "gcc-riscv64-linux-gnu",
    "riscv64-linux-gnu-objdump": "binutils-riscv64-linux-gnu",
    "qemu-aarch64": "qemu-user",
    "qemu-riscv64": "qemu-user",
    "make": "make",
    "objdump": "binutils",
    "readelf": "binutils",
}


def require(*tools: str) -> None:
    """Skip (fail under CI=true) unless every tool is on PATH."""
    missing = [t for t in tools if shutil.which(t) is None]
    if not missing:
        return
    packages = sorted({PACKAGES.get(t, t) for t in missing})
    reason = f"needs {', '.join(missing)} (apt-get install {' '.join(packages)})"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI installs the cross tools, yet this machine lacks: {reason}")
    pytest.skip(reason)


def run(cmd, **kw) -> subprocess.CompletedProcess:
    """Run a command; a non-zero exit fails the test with its output."""
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert done.returncode == 0, (f"{' '.join(map(str, cmd))} failed ({done.returncode}):\n"
                                  f"{done.stdout}{done.stderr}")
    return done


def run_all(jobs: list[tuple[list, Path]], timeout: int = 600) -> list[subprocess.CompletedProcess]:
    """Run ``(command, working folder)`` jobs at once, as many as there are cores: the
    emulators are single-threaded."""
    def one(job):
        cmd, cwd = job
        return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True,
                              timeout=timeout)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return list(pool.map(one, jobs))


def write_inputs(folder: Path, inputs: list[np.ndarray]) -> None:
    """inputK.bin: the raw bytes the firmware and the test programs read."""
    for k, x in enumerate(inputs):
        np.ascontiguousarray(x).tofile(folder / f"input{k}.bin")


def read_outputs(folder: Path, like: list[np.ndarray]) -> list[np.ndarray]:
    return [np.fromfile(folder / f"output{k}.bin", ref.dtype).reshape(ref.shape)
            for k, ref in enumerate(like)]


def max_error(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(g.astype(np.float64) - w))) for g, w in zip(got, want))


def assert_close(got: list[np.ndarray], want: list[np.ndarray], rtol: float = 1e-4,
                 atol_of_max: float = 1e-4) -> None:
    """rtol, and an absolute tolerance of ``atol_of_max`` x the largest |value| of each
    output (as tests/test_memory_models.py)."""
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol_of_max * float(np.max(np.abs(w))))
