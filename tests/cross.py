"""Running cross-compiled programs for the target tests (test_cortex_m.py,
test_qemu_user.py): commands, emulators in parallel, tensors in files, tolerances.
The tools they need are checked with tools.require_tools.
"""
from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


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
