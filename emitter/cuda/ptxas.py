"""NVIDIA's PTX assembler, where one is installed, and what a PTX text asks of a driver.

    ptxas = find_ptxas()                  # None where there is none
    cubin = assemble(ptx, "sm_80", ptxas)
    driver_version_for(ptx)               # 11080 for ".version 7.8"

``ptxas`` comes from $XLAC_PTXAS, else the PATH, else the ``nvidia-cuda-nvcc-cu12``
wheel (the test extra installs it). It is NVIDIA's, under NVIDIA's license: xlac only
runs it.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ...hlo import XlacError


def find_ptxas() -> Path | None:
    given = os.environ.get("XLAC_PTXAS")
    if given:
        return Path(given)
    found = shutil.which("ptxas")
    if found:
        return Path(found)
    try:
        spec = importlib.util.find_spec("nvidia.cuda_nvcc")
    except ModuleNotFoundError:
        spec = None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(folder) / "bin" / "ptxas"
        if candidate.is_file():
            return candidate
    return None


def assemble(ptx: str, arch: str, ptxas: Path, options: tuple[str, ...] = ()) -> tuple[bytes, str]:
    """The cubin of ``ptx`` for ``arch`` (sm_80, ...) and what ptxas printed; raises
    XlacError with its first error line where it refuses the PTX."""
    with tempfile.TemporaryDirectory(prefix="xlac-ptxas-") as tmp:
        src, out = Path(tmp) / "kernels.ptx", Path(tmp) / "kernels.cubin"
        src.write_text(ptx)
        cmd = [str(ptxas), f"-arch={arch}", *options, "-o", str(out), str(src)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            raise XlacError(f"cannot run ptxas '{ptxas}': {e.strerror or e}") from None
        printed = done.stdout + done.stderr
        if done.returncode != 0:
            first = next((line for line in printed.splitlines() if "error" in line.lower()),
                         printed.strip().splitlines()[0] if printed.strip() else "")
            raise XlacError(f"ptxas refused the kernels for {arch}: {first.strip()}")
        return out.read_bytes(), printed


# PTX ISA versions before 7.0 and the CUDA release that introduced each.
_OLD_PTX = {(6, 0): 9000, (6, 1): 9010, (6, 2): 9020, (6, 3): 10000, (6, 4): 10010,
            (6, 5): 10020}


def driver_version_for(ptx: str) -> int:
    """The lowest cuDriverGetVersion() that compiles ``ptx``: PTX ISA 7.x came with CUDA
    11.x, 8.x with CUDA 12.x (8.8 with 12.9), 9.x with 13.x."""
    m = re.search(r"^\s*\.version (\d+)\.(\d+)", ptx, re.MULTILINE)
    if m is None:
        raise XlacError("the PTX has no .version line")
    major, minor = int(m.group(1)), int(m.group(2))
    if major >= 7:
        cuda_minor = minor + 1 if (major, minor) >= (8, 8) else minor
        return (major + 4) * 1000 + cuda_minor * 10
    return _OLD_PTX.get((major, minor), 9000)


def compute_capability(arch: str) -> int:
    """sm_80 -> 80, sm_90a -> 90."""
    m = re.fullmatch(r"sm_(\d+)[af]?", arch)
    if m is None:
        raise XlacError(f"unknown CUDA architecture '{arch}'; give one as sm_80, sm_90, ...")
    return int(m.group(1))
